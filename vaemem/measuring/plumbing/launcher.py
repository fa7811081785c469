"""Launchers: how the parent gets a fresh process for each run of a point.

* ``spawn`` starts a new interpreter per run: ``python -m vaemem.measuring.child.worker POINT_JSON RESULT_PATH``.
* ``fork`` forks each run from a helper process that has already imported torch and diffusers but never touched an
  accelerator, which saves the ~2.5 s of imports per point. glibc reads ``MALLOC_*`` only at process start, so there
  is one helper per distinct startup environment (``glibc`` and ``glibc-fixed`` get their own); the torch allocator
  setting is read at first device use and is set in the forked child.

Either way the parent owns the child: every child leads a process group of its own, and the parent kills that
whole group on timeout, on the helper's death, on any exception (Ctrl-C, and SIGTERM, which the CLI turns into
one) and on close, then removes its temporary files; it checks the child's exit status (pyperf's manager/worker
contract). On Windows, where there are no process groups, the spawn launcher kills the child process only
(killing a whole tree there needs a job object: not done, and not tested here).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from vaemem.errors import VaememError
from vaemem.measuring.plumbing.allocators import child_env, clean_env, late_env, startup_env
from vaemem.measuring.plumbing.forkserver import PARENT_ENV, kill_group

LAUNCHERS = ("fork", "spawn")
STDERR_TAIL_CHARS = 2000


def default_launcher() -> str:
    """fork on Linux; spawn elsewhere (fork after importing system frameworks is unsafe on macOS)."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


@dataclass
class RunOutcome:
    """What the parent saw of one child: its one JSON result (None if it wrote none) and how it ended."""

    result: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    stderr_tail: str
    wall_s: float
    pid: int | None
    lost: str | None = None  # why the parent lost sight of the child (its fork helper died), where it did


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
    except OSError:
        return ""


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Launcher(ABC):
    name: str

    @abstractmethod
    def run(self, task: dict[str, Any], allocator: str, timeout_s: float) -> RunOutcome:
        """Run one worker task (see :mod:`vaemem.measuring.child.worker`) in a fresh process with ``allocator``'s
        environment, and return what was seen of it."""

    def close(self) -> None:
        """Kill whatever is still running and release helpers."""


class SpawnLauncher(Launcher):
    name = "spawn"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def run(self, task: dict[str, Any], allocator: str, timeout_s: float) -> RunOutcome:
        with tempfile.TemporaryDirectory(prefix="vaemem-") as tmp:
            result_path, err_path = Path(tmp, "result.json"), Path(tmp, "stderr.txt")
            t0 = time.perf_counter()
            timed_out = False
            with open(err_path, "wb") as err:
                self._proc = proc = subprocess.Popen(
                    [sys.executable, "-m", "vaemem.measuring.child.worker", json.dumps(task), str(result_path)],
                    env={**child_env(allocator), PARENT_ENV: str(os.getpid())}, stdin=subprocess.DEVNULL,
                    stdout=err, stderr=err,
                    start_new_session=hasattr(os, "setsid"),
                )
                try:
                    rc = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self._kill(proc)
                    rc, timed_out = proc.wait(), True
                except BaseException:
                    self._kill(proc)
                    proc.wait()
                    raise
                finally:
                    self._proc = None
            return RunOutcome(_read_result(result_path), rc, timed_out, _tail(err_path),
                              time.perf_counter() - t0, proc.pid)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        if hasattr(os, "killpg"):
            kill_group(proc.pid)
        else:
            proc.kill()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._kill(self._proc)


class _LineReader:
    """Line reads with a timeout from a raw pipe (a buffered reader would hide lines from select)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.fd = stream.fileno()
        self.buf = b""

    def readline(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next JSON line, or None on timeout. Raises EOFError when the helper is gone."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("fork helper exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


class _Helper:
    """One fork helper process and its pipes."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log = open(log_path, "wb")
        read_fd, write_fd = os.pipe()  # the helper's channel to us: never its stdout
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vaemem.measuring.plumbing.forkserver", str(write_fd), str(os.getpid())],
                env=env,
                stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, pass_fds=(write_fd,),
                # a session of its own: a signal to the sweep's whole group (a closed terminal's SIGHUP, Ctrl-C,
                # systemd's or a batch system's stop) reaches the sweep alone, which kills the helper and the child
                # itself; the helper hit too died first, and a GPU thread of --devices recorded its run as a crash
                start_new_session=hasattr(os, "setsid"),
            )
        finally:
            os.close(write_fd)
        try:
            self.channel = os.fdopen(read_fd, "rb", buffering=0)
            self.reader = _LineReader(self.channel)
            ready = self.reader.readline(timeout_s=300)
        except EOFError:
            ready = None
        except BaseException:  # Ctrl-C or SIGTERM while it imports: no launcher holds it yet to kill it
            self.close()
            raise
        if not ready or ready.get("ready") is not True:
            self.close()
            # its log's last line (an import's error): one line, as every error vaemem reports
            last = [line.strip() for line in _tail(log_path).splitlines() if line.strip()]
            raise VaememError(f"the fork helper did not start: {last[-1][-300:] if last else 'no output'}")

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        channel = getattr(self, "channel", None)  # none where an interrupt came before it was opened
        if channel is not None:
            channel.close()
        self.log.close()


class ForkLauncher(Launcher):
    name = "fork"

    def __init__(self) -> None:
        self._tmp_dir: tempfile.TemporaryDirectory[str] | None = None
        self._helpers: dict[tuple[tuple[str, str], ...], _Helper] = {}
        self._child: int | None = None
        self._next_id = 0

    @property
    def _tmp(self) -> tempfile.TemporaryDirectory[str]:
        """The launcher's temporary folder (helper logs, per-run results): made on first use, removed by close."""
        if self._tmp_dir is None:
            self._tmp_dir = tempfile.TemporaryDirectory(prefix="vaemem-fork-")
        return self._tmp_dir

    def _helper(self, allocator: str) -> _Helper:
        start = startup_env(allocator)
        key = tuple(sorted(start.items()))
        helper = self._helpers.get(key)
        if helper is None or helper.proc.poll() is not None:
            env = clean_env(os.environ)
            env.update(start)
            helper = _Helper(env, Path(self._tmp.name, f"helper{len(self._helpers)}.log"))
            self._helpers[key] = helper
        return helper

    def run(self, task: dict[str, Any], allocator: str, timeout_s: float) -> RunOutcome:
        helper = self._helper(allocator)
        run_dir = Path(tempfile.mkdtemp(dir=self._tmp.name))
        result_path, err_path = run_dir / "result.json", run_dir / "stderr.txt"
        t0 = time.perf_counter()
        self._next_id += 1
        rid = self._next_id
        timed_out = False
        pid = None
        lost = None
        try:
            try:
                helper.send({"id": rid, "task": json.dumps(task), "result_path": str(result_path),
                             "stderr_path": str(err_path), "late_env": late_env(allocator)})
            except OSError:  # the helper died before it could take the request
                raise EOFError("fork helper gone") from None
            started = self._answer(helper, rid, 60)
            if started is None:
                raise VaememError("the fork helper did not answer")
            self._child = pid = started["pid"]
            deadline = time.monotonic() + timeout_s
            done = self._answer(helper, rid, timeout_s, deadline)
            if done is None:
                timed_out = True
                kill_group(pid)
                done = self._answer(helper, rid, 60)
            rc = done["returncode"] if done else None
        except EOFError:  # the helper died: kill its child's group, record a crash, a fresh helper comes next
            kill_group(self._child)
            helper.close()
            pid, rc = self._child, None
            lost = ("the fork helper died before the child started" if pid is None else
                    "the fork helper died during the run, and the parent killed the child's group")
        except BaseException:
            self.close()
            raise
        finally:
            self._child = None
        return RunOutcome(_read_result(result_path), rc, timed_out, _tail(err_path), time.perf_counter() - t0, pid,
                          lost)

    @staticmethod
    def _answer(helper: _Helper, rid: int, timeout_s: float, deadline: float | None = None) -> dict[str, Any] | None:
        """The helper's next message about request ``rid`` (others are stale and skipped), or None on timeout."""
        deadline = deadline if deadline is not None else time.monotonic() + timeout_s
        while True:
            msg = helper.reader.readline(timeout_s=max(0.0, deadline - time.monotonic()))
            if msg is None or msg.get("id") == rid:
                return msg

    def close(self) -> None:
        kill_group(self._child)
        self._child = None
        for helper in self._helpers.values():
            helper.close()
        self._helpers.clear()
        if self._tmp_dir is not None:
            self._tmp_dir.cleanup()
            self._tmp_dir = None


def make_launcher(name: str) -> Launcher:
    if name == "fork":
        if not hasattr(os, "fork"):
            raise VaememError("the fork launcher needs os.fork; use --launcher spawn on this platform")
        return ForkLauncher()
    if name == "spawn":
        return SpawnLauncher()
    raise VaememError(f"unknown launcher {name!r}; choose one of: {', '.join(LAUNCHERS)}")
