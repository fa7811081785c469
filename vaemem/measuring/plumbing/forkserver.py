"""The fork helper: imports torch and diffusers once, then forks one child per request.

Protocol, one JSON object per line. Parent -> helper, on the helper's stdin: ``{"id", "task", "result_path",
"stderr_path", "late_env"}``. Helper -> parent, on a channel of its own (the pipe whose file descriptor is the
helper's first argument, as pyperf hands its worker a descriptor; its second is the parent's pid):
``{"ready": true}`` once imported, then per request ``{"id", "pid"}`` right after the fork and ``{"id", "pid",
"returncode"}`` when the child has exited (negative: killed by that signal). The helper's stdout and stderr go to
its log: whatever an import prints (a ``sitecustomize``, a noisy plugin) can never break the protocol.

The helper leads a session of its own (the launcher starts it so: a signal to the sweep's process group is the
sweep's alone to act on), and each child a process group of its own, so the parent can kill it with everything
it started.

The helper must never initialise an accelerator (a CUDA context does not survive fork) nor run a torch op (an
OpenMP pool started before the fork would be unusable in the child): it only imports.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback


_CHANNEL = None
_CHILD: int | None = None  # the child running now, the leader of its process group


PARENT_ENV = "VAEMEM_PARENT_PID"  # a spawned worker's: the pid of the sweep that started it


def die_with_parent(parent: int, sig: int | None = None) -> None:
    """Linux: this process gets ``sig`` (default SIGKILL) when its parent dies (PR_SET_PDEATHSIG), and at once where
    ``parent``, the pid the parent had when it started this process, is already gone (it died while this one
    started). Elsewhere nothing: the parent's own kill still reaches it. Imports nothing POSIX-only."""
    if not sys.platform.startswith("linux"):
        return
    sig = signal.SIGKILL if sig is None else sig
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)
    except (OSError, AttributeError, TypeError):
        return
    if os.getppid() != parent:  # reparented before the call took effect
        os.kill(os.getpid(), sig)


def kill_group(pid: int | None) -> None:
    """SIGKILL the process group led by ``pid`` (the child and everything it started); the process alone where
    there are no process groups (SIGTERM there, Windows' only kill), or where it leads none yet (a forked child
    before its ``setpgid``). The one kill of a run's process: the launcher's and this helper's."""
    if pid is None:
        return
    try:
        if hasattr(os, "killpg"):
            try:
                os.killpg(pid, signal.SIGKILL)
                return
            except ProcessLookupError:  # no such group: not yet one of its own, or gone
                pass
        os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    except (ProcessLookupError, PermissionError):
        pass


def _parent_died(signum: int, frame: object) -> None:
    """The sweep's process died (SIGKILL leaves it no chance to clean up): kill the running child's group, and go."""
    kill_group(_CHILD)
    os._exit(1)


def _send(message: dict) -> None:
    _CHANNEL.write(json.dumps(message) + "\n")
    _CHANNEL.flush()


def main() -> None:
    global _CHANNEL, _CHILD
    # a sweep killed outright must not leave this helper, nor the child it runs, holding memory or a device
    signal.signal(signal.SIGTERM, _parent_died)
    die_with_parent(int(sys.argv[2]), signal.SIGTERM)
    _CHANNEL = os.fdopen(int(sys.argv[1]), "w")
    import torch  # noqa: F401
    import diffusers

    from vaemem.models.zoo import CLASSES

    for name in CLASSES:
        getattr(diffusers, name)  # diffusers imports classes lazily: resolve every zoo class before forking
    from vaemem.measuring.child import worker
    import vaemem.models.build  # noqa: F401

    _send({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the helper's handler is not the child's
                os.setpgid(0, 0)  # a group of its own: the parent kills the child and all it started
                die_with_parent(me)  # SIGKILLed if the helper dies (its parent died, or it was killed)
                _CHANNEL.close()  # the child never writes into the protocol
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
        _CHILD = pid  # at once: the parent may die now
        try:
            os.setpgid(pid, pid)  # also from this side: no race with the parent's kill
        except OSError:
            pass
        _send({"id": req["id"], "pid": pid})
        _, status = os.waitpid(pid, 0)
        _CHILD = None
        _send({"id": req["id"], "pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
