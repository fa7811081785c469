"""The sweep: every run of every point in a fresh process, each result appended the moment it exists.

Failures are data (asv, hyperfine): an OOM, a crash or a timeout becomes a record with its status, exit code and
the tail of the child's stderr, and the sweep goes on. Runs already recorded for the rig are skipped (resume)
unless ``force``. Points at the same settings as, and no smaller than, a point that ran out of memory are
recorded as ``skipped-after-oom`` without running.
"""

from __future__ import annotations

import datetime as _dt
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vaemem import __version__
from vaemem.errors import VaememError
from vaemem.measuring.allocators import late_env, startup_env
from vaemem.measuring.launcher import Launcher, RunOutcome, make_launcher
from vaemem.measuring.point import Point
from vaemem.measuring.rig import os_name
from vaemem.measuring.store import SCHEMA_VERSION, append_record, iter_records

STATUSES = ("ok", "oom", "crash", "timeout", "error", "skipped-after-oom")


@dataclass(frozen=True)
class Task:
    point: Point
    run: int  # 0-based index of the run of this point


def git_commit() -> str | None:
    """The commit of the vaemem checkout, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def classify(outcome: RunOutcome) -> str:
    """Status of a run from what the parent saw. The Linux OOM killer ends a process with SIGKILL and nothing else
    in a sweep does (a timeout is known), so an unexplained SIGKILL is recorded as oom."""
    if outcome.timed_out:
        return "timeout"
    if outcome.result is not None and outcome.result.get("status") in STATUSES:
        return outcome.result["status"]
    if outcome.returncode == -signal.SIGKILL:
        return "oom"
    return "crash"


def make_record(task: Task, outcome: RunOutcome | None, *, rig: str, launcher: str, timeout_s: float,
                status: str | None = None, commit: str | None = None) -> dict[str, Any]:
    """The measurement line of one run (schema documented in README "Measurement format")."""
    p = task.point
    result = dict(outcome.result or {}) if outcome else {}
    machine = result.pop("rig", {})
    status = status or classify(outcome)  # type: ignore[arg-type]
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        **p.to_dict(),
        "point_key": p.key,
        "pixels": p.pixels,
        "run": task.run,
        "status": status,
        "rig": {"name": rig, "os": os_name(), **machine,
                "allocator_env_set": {**startup_env(p.allocator), **late_env(p.allocator)}},
        "launcher": launcher,
        "timeout_s": timeout_s,
        "vaemem_version": __version__,
        "git_commit": commit,
        "utc_time": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "demand_bytes": result.pop("demand_bytes", None),
        **result,
    }
    if outcome is not None:
        record["exit_code"] = outcome.returncode
        record["run_wall_s"] = round(outcome.wall_s, 4)
        if status != "ok":
            record["stderr_tail"] = outcome.stderr_tail
    return record


def recorded_runs(out: Path, rig: str) -> set[tuple[str, int]]:
    """(point key, run) already in ``out`` for ``rig``: what a resumed sweep skips."""
    if not out.exists():
        return set()
    return {(r["point_key"], r["run"]) for _, _, r in iter_records([out]) if r.get("rig", {}).get("name") == rig}


def _setting(p: Point) -> tuple:
    """A point's settings without its size: an OOM here makes larger sizes pointless."""
    return (p.model, p.op, p.dtype, p.batch, p.frames, p.tile, p.allocator, p.device_type)


def plan(points: Sequence[Point], runs: int, done: set[tuple[str, int]], force: bool) -> list[Task]:
    """Run-major order (every point once, then every point again) so an interrupted sweep covers all points."""
    return [Task(p, r) for r in range(runs) for p in points if force or (p.key, r) not in done]


def check_options(points: Sequence[Point], runs: int, launcher: str, timeout_s: float,
                  devices: Sequence[int] | None) -> None:
    """Refuse bad sweep options before anything starts."""
    from vaemem.measuring.launcher import LAUNCHERS

    if runs < 1:
        raise VaememError(f"--runs must be at least 1, got {runs}")
    if timeout_s <= 0:
        raise VaememError(f"--timeout must be positive, got {timeout_s}")
    if launcher not in LAUNCHERS:
        raise VaememError(f"unknown launcher {launcher!r}; choose one of: {', '.join(LAUNCHERS)}")
    if devices and any(p.device_type != "cuda" for p in points):
        raise VaememError("--devices applies to cuda points only")


def measure(
    points: Sequence[Point],
    out: str | Path,
    *,
    rig: str,
    runs: int = 2,
    launcher: str = "fork",
    timeout_s: float = 900.0,
    force: bool = False,
    devices: Sequence[int] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    launcher_factory: Callable[[str], Launcher] = make_launcher,
) -> list[dict[str, Any]]:
    """Measure every run of ``points`` not yet in ``out`` and return the new records.

    ``devices`` (GPU indices) runs one point per GPU at a time, the point's device rewritten to ``cuda:N``.
    ``on_plan`` is told how many runs will happen (after resume), before the first; ``on_record`` is called after
    each record is safely on disk (the progress bar hooks in to both).
    """
    check_options(points, runs, launcher, timeout_s, devices)
    out = Path(out)
    tasks = plan(points, runs, set() if force else recorded_runs(out, rig), force)
    if on_plan:
        on_plan(len(tasks))
    commit = git_commit()
    oom_at: dict[tuple, int] = {}
    lock = threading.Lock()
    stopping = threading.Event()  # set on Ctrl-C: runs killed by the interrupt are not results
    records: list[dict[str, Any]] = []

    def finish(record: dict[str, Any]) -> None:
        with lock:
            append_record(out, record)
            records.append(record)
            if record["status"] == "oom":
                key = _setting(Point.from_dict(record))
                oom_at[key] = min(oom_at.get(key, record["pixels"]), record["pixels"])
        if on_record:
            on_record(record)

    def do(task: Task, launch: Launcher) -> None:
        with lock:
            limit = oom_at.get(_setting(task.point))
        if limit is not None and task.point.pixels >= limit:
            finish(make_record(task, None, rig=rig, launcher=launch.name, timeout_s=timeout_s,
                               status="skipped-after-oom", commit=commit))
            return
        outcome = launch.run({"kind": "measure", "point": task.point.to_dict()}, task.point.allocator, timeout_s)
        if stopping.is_set():
            return
        finish(make_record(task, outcome, rig=rig, launcher=launch.name, timeout_s=timeout_s, commit=commit))

    if not devices:
        launch = launcher_factory(launcher)
        try:
            for task in tasks:
                do(task, launch)
        finally:
            launch.close()
        return records

    slots: queue.Queue[tuple[int, Launcher]] = queue.Queue()
    launchers = [(d, launcher_factory(launcher)) for d in devices]
    for slot in launchers:
        slots.put(slot)

    def on_gpu(task: Task) -> None:
        index, launch = slots.get()
        try:
            do(Task(replace(task.point, device=f"cuda:{index}"), task.run), launch)
        finally:
            slots.put((index, launch))

    pool = ThreadPoolExecutor(max_workers=len(devices))
    try:
        for fut in [pool.submit(on_gpu, t) for t in tasks]:
            fut.result()
    except BaseException:
        stopping.set()
        raise
    finally:
        for _, launch in launchers:
            launch.close()
        pool.shutdown(wait=True, cancel_futures=True)
    return records
