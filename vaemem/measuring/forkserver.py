"""The fork helper: imports torch and diffusers once, then forks one child per request.

Protocol, one JSON object per line. Parent -> helper: ``{"task", "result_path", "stderr_path", "late_env"}``.
Helper -> parent: ``{"ready": true}`` once imported, then per request ``{"pid"}`` right after the fork and
``{"pid", "returncode"}`` when the child has exited (negative: killed by that signal).

The helper must never initialise an accelerator (a CUDA context does not survive fork) nor run a torch op (an
OpenMP pool started before the fork would be unusable in the child): it only imports.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    import torch  # noqa: F401
    import diffusers

    for name in ("AutoencoderKL", "AutoencoderKLFlux2", "AutoencoderKLWan", "AutoencoderKLMiniMaxH3"):
        getattr(diffusers, name)  # diffusers imports classes lazily: resolve them before forking
    from vaemem.measuring import worker
    import vaemem.models.build  # noqa: F401

    _send({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                fd = os.open(req["stderr_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)  # the child must never write into the protocol pipe
                os.dup2(fd, 2)
                worker.run_forked(req["task"], req["result_path"], req["late_env"])
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        _send({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
