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
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vaemem import __version__
from vaemem.errors import VaememError
from vaemem.measuring.plumbing.allocators import late_env, startup_env
from vaemem.measuring.plumbing.launcher import Launcher, RunOutcome, make_launcher
from vaemem.measuring.point import MAX_TIMEOUT_S, Point, runs_error
from vaemem.measuring.child.rig import os_name
from vaemem.measuring.parent.store import (SCHEMA_VERSION, STATUSES, append_record, check_out_path, demand_error,
                                           expand_paths, iter_records, sweep_lock)



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


def oom_kill_count(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The kernel's OOM-kill count of this process's memory cgroup, or None where it cannot be read (not Linux,
    no memory controller). cgroup v2: ``oom_kill`` of ``memory.events``; v1: ``oom_kill`` of
    ``memory.oom_control``. A child's OOM kill is counted in the cgroup it inherited."""
    try:
        with open(proc_cgroup) as f:
            entries = [line.strip().split(":", 2) for line in f if line.strip()]
    except OSError:
        return None
    candidates = []
    for _, controllers, path in entries:
        if "memory" in controllers.split(","):
            candidates.append(f"{root}/memory{path}/memory.oom_control")
        elif controllers == "":
            candidates.append(f"{root}{path.rstrip('/')}/memory.events")
    for file in candidates:
        try:
            with open(file) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


_SIGKILL = getattr(signal, "SIGKILL", 9)  # Windows has none (nor a cgroup count)
CHILD_STATUSES = ("ok", "oom", "error")  # what a child may say of its own run: the others are the parent's


def classify(outcome: RunOutcome, oom_kills: int | None = None) -> tuple[str, str]:
    """(status, evidence) of a run. The parent's view wins: a timeout is a timeout whatever the child wrote; a
    result counts only from a child that exited 0, and says only ok, oom or error (an ok one with a usable
    demand); an OOM needs evidence (the allocator's out-of-memory error in the child's result, or the cgroup's
    OOM-kill count rising across a run the kernel SIGKILLed, as its OOM killer does); a child the parent lost
    (its fork helper died) or any other death is a crash."""
    if outcome.timed_out:
        w = outcome.wall_s
        return "timeout", f"parent: no exit within {f'{w:.1f}' if w >= 1 else f'{w:.2g}'} s, killed"
    result = outcome.result or {}
    said = result.get("status")
    if outcome.returncode == 0 and said in CHILD_STATUSES:
        unusable = demand_error(result.get("demand_bytes")) if said == "ok" else None
        if unusable:  # recorded as ok it would be a line every reader refuses
            return "error", f"parent: the child's result (exit 0) is unusable: {unusable}"
        evidence = {"oom": "child: the allocator's out-of-memory error", "ok": "child: result, exit 0"}
        return said, evidence.get(said, f"child: {said}, exit 0")
    if outcome.lost:
        return "crash", f"parent: {outcome.lost}"
    if oom_kills and outcome.returncode == -_SIGKILL:  # the count is the cgroup's: other processes' too
        return "oom", f"kernel: cgroup oom_kill count rose by {oom_kills} during the run"
    if outcome.returncode == 0:
        return "crash", "parent: child exited 0 without a usable result" + (
            f" (it said {said!r}, which is the parent's to say)" if said in STATUSES else "")
    how = f"signal {-outcome.returncode}" if outcome.returncode and outcome.returncode < 0 else \
        f"exit {outcome.returncode}"
    return "crash", f"parent: child died ({how}) with no OOM evidence"


def child_fields(outcome: RunOutcome | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run's result as the child wrote it, less its ``status`` (the parent's: :func:`classify`), and its ``rig``
    dict apart ({} where none, or damaged): a record puts the parent's own fields over both."""
    result = dict(outcome.result or {}) if outcome else {}
    machine = result.pop("rig", {})
    result.pop("status", None)
    return result, machine if isinstance(machine, dict) else {}


def make_record(task: Task, outcome: RunOutcome | None, *, rig: str, launcher: str, timeout_s: float,
                status: str | None = None, commit: str | None = None, oom_kills: int | None = None,
                evidence: str | None = None) -> dict[str, Any]:
    """The measurement line of one run (schema documented in README "Measurement format"). The status is the
    parent's (:func:`classify`): the child's own ``status`` never overrides it."""
    p = task.point
    result, machine = child_fields(outcome)
    if status is None:
        status, evidence = classify(outcome, oom_kills)  # type: ignore[arg-type]
    else:
        evidence = "parent: " + status + (f" ({evidence})" if evidence else "")
    if status != "ok":
        result["demand_bytes"] = None
    demand = result.pop("demand_bytes", None)
    record: dict[str, Any] = {
        **result,  # the child's own fields (timings, readings, error): never one the parent sets below
        "schema_version": SCHEMA_VERSION,
        **p.to_dict(),
        "point_key": p.key,
        "pixels": p.pixels,
        "run": task.run,
        "status": status,
        "rig": {"os": os_name(), **machine, "name": rig,
                "allocator_env_set": {**startup_env(p.allocator), **late_env(p.allocator)}},
        "launcher": launcher,
        "timeout_s": timeout_s,
        "vaemem_version": __version__,
        "git_commit": commit,
        "utc_time": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "demand_bytes": demand,
        "status_evidence": evidence,
    }
    if outcome is not None:
        record["exit_code"] = outcome.returncode
        record["run_wall_s"] = round(outcome.wall_s, 4)
        if status != "ok":
            record["stderr_tail"] = outcome.stderr_tail
    return record


RETRYABLE = ("crash", "timeout", "skipped-after-oom", "dropped-late")
MIN_RUNS_TO_RESCALE = 3  # a plan trusts its finished runs' pace over the cost model from this many on


def read_history(out: Path) -> list[dict[str, Any]]:
    """Every record of ``out`` and of the other ``*.jsonl`` beside it (the shards of a sweep write files of their
    own): what a sweep resumes from and predicts its time with. ``out``, the file appended to, is read strictly;
    a damaged line of a neighbour does not stop a sweep, but one of a newer schema does (its runs, unread, would
    be measured again)."""
    others = sorted(set(expand_paths([out.parent])) - {out}) if out.parent.is_dir() else []
    records = [r for _, _, r in iter_records([out])] if out.exists() else []
    bad: list = []
    beside = [r for _, _, r in iter_records(others, skip_bad=True, bad=bad)]
    newer = next((b for b in bad if b.newer), None)
    if newer is not None:
        raise VaememError(f"{newer}; a sweep resumes from every file of {out.parent}: upgrade vaemem, or move that "
                          f"file out of the folder")
    # measurement lines only: bench-conv3d's results (a ``kind`` of their own) may share the folder
    return [r for r in records + beside if "point_key" in r]


def recorded_runs(out: Path, rig: str, retry_failed: bool = False,
                  history: list[dict[str, Any]] | None = None) -> set[tuple[str, int]]:
    """(point key, run) already recorded for ``rig`` (in ``history``, default :func:`read_history` of ``out``):
    what a resumed sweep skips. With ``retry_failed`` a run recorded only as crash, timeout or skipped-after-oom
    is not done (its old line stays: nothing is lost)."""
    records = read_history(out) if history is None else history
    return {(r["point_key"], r["run"]) for r in records
            if r.get("rig", {}).get("name") == rig and not (retry_failed and r.get("status") in RETRYABLE)}


def sweep_plan(points: Sequence[Point], out: Path, rig: str, runs: int, force: bool = False,
               retry_failed: bool = False) -> tuple[list[Task], list[dict[str, Any]]]:
    """The runs a sweep would do after resume, and the history it read (one read of the folder)."""
    history = read_history(out)
    check_rig_name(points, rig, history)
    done = set() if force else recorded_runs(out, rig, retry_failed, history)
    return plan(points, runs, done, force), history


def _setting(p: Point) -> tuple:
    """A point's settings without its size: an OOM here makes larger sizes pointless."""
    return (p.model, p.op, p.dtype, p.batch, p.frames, p.tile, p.allocator, p.device_type, p.variant)


def plan(points: Sequence[Point], runs: int, done: set[tuple[str, int]], force: bool) -> list[Task]:
    """Run-major order (every point once, then every point again) so an interrupted sweep covers all points."""
    return [Task(p, r) for r in range(runs) for p in points if force or (p.key, r) not in done]


def check_rig_name(points: Sequence[Point], rig: str, history: list[dict[str, Any]]) -> None:
    """Refuse a rig name that the output file's folder (its ``history``, :func:`read_history`) recorded on another
    CPU: the name labels one machine, and
    campaigns 14 and 15 of this project ran on two AMD EPYCs under the name of the Intel Xeon of campaigns 2-13 (their
    records said so; the names were put right by hand). A GPU's name needs torch: the worker records it."""
    from vaemem.measuring.child.rig import _cpu_name

    if not any(p.device_type == "cpu" for p in points):
        return
    here = _cpu_name()
    for r in history:
        seen = r.get("rig") if r.get("device", "cpu") == "cpu" else None
        if isinstance(seen, dict) and seen.get("name") == rig and seen.get("device_name") not in (None, here):
            raise VaememError(f"rig {rig!r} is recorded beside the output file on a {seen['device_name']!r} CPU; "
                              f"this one is {here!r}: give this machine a --rig of its own")


def check_options(points: Sequence[Point], runs: int, launcher: str, timeout_s: float,
                  devices: Sequence[int] | None, os: str | None = None) -> None:
    """Refuse bad sweep options before anything starts; ``os`` is this host's (default: detected): a CPU point's
    allocator must be that OS's, else its runs would be recorded under an allocator that never ran."""
    from vaemem.estimate import cpu_allocator_error
    from vaemem.measuring.child.rig import os_name
    from vaemem.measuring.plumbing.launcher import LAUNCHERS

    host = os or os_name()
    for p in points:
        problem = cpu_allocator_error(p.allocator, host) if p.device_type == "cpu" else None
        if problem:
            raise VaememError(f"{p.key}: {problem}")

    if wrong := runs_error(runs):
        raise VaememError(wrong)
    if not 0 < timeout_s <= MAX_TIMEOUT_S:  # NaN too: no comparison holds
        raise VaememError(f"--timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:.0f} (a week), got "
                          f"{timeout_s}")
    if launcher not in LAUNCHERS:
        raise VaememError(f"unknown launcher {launcher!r}; choose one of: {', '.join(LAUNCHERS)}")
    if devices and any(p.device_type != "cuda" for p in points):
        raise VaememError("--devices applies to cuda points only")


# What the torch of this environment sees (a child of its own: the parent never touches a device, whose context
# would sit in the memory its children measure)
DEVICE_PROBE = ("import json, torch; print(json.dumps({'cuda': torch.cuda.device_count() if torch.cuda.is_available() "
                "else 0, 'mps': bool(getattr(torch.backends, 'mps', None) and torch.backends.mps.is_available()), "
                "'xpu': torch.xpu.device_count() if hasattr(torch, 'xpu') and torch.xpu.is_available() else 0}))")


def check_devices(points: Sequence[Point], devices: Sequence[int] | None,
                  probe: Sequence[str] | None = None) -> None:
    """Refuse points on a device this environment's torch does not see, before any run: each would be recorded
    as an error run and, resumed, skipped. ``probe``: the command that prints what torch sees as JSON (default:
    :data:`DEVICE_PROBE` in this interpreter; tests pass a fake). CPU points need no probe."""
    see_devices({p.device for p in points if p.device_type != "cpu"} | {f"cuda:{i}" for i in devices or ()}, probe)


def see_devices(wanted: set[str], probe: Sequence[str] | None = None) -> None:
    """Refuse any of the devices ``wanted`` (``cuda``, ``cuda:1``, ``mps``, ``xpu``...) that this environment's
    torch does not see (:func:`check_devices`' test, also bench-conv3d's)."""
    import json
    import sys

    wanted = {d for d in wanted if d != "cpu"}
    if not wanted:
        return
    try:
        out = subprocess.run(list(probe or [sys.executable, "-c", DEVICE_PROBE]), capture_output=True, text=True,
                             timeout=300)
        seen = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        raise VaememError(f"cannot ask torch which devices it sees: {e}") from None
    for device in sorted(wanted):
        kind, _, index = device.partition(":")
        count = seen.get(kind, 0) if kind != "mps" else int(bool(seen.get("mps")))
        if count == 0:
            raise VaememError(f"device {device}: this environment's torch sees no {kind} device "
                              f"(torch.{kind}.is_available() is False); run on a rig that has one")
        if index and int(index) >= count:
            raise VaememError(f"device {device}: torch sees {count} {kind} device{'s' if count > 1 else ''} "
                              f"(indices 0-{count - 1})")


def measure(
    points: Sequence[Point],
    out: str | Path,
    *,
    rig: str,
    runs: int = 2,
    launcher: str = "fork",
    timeout_s: float = 900.0,
    force: bool = False,
    retry_failed: bool = False,
    devices: Sequence[int] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_plan: Callable[[list[Task], list[dict[str, Any]]], None] | None = None,
    launcher_factory: Callable[[str], Launcher] = make_launcher,
    budget_s: float | None = None,
    predicted_s: dict[str, float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[dict[str, Any]]:
    """Measure every run of ``points`` not yet in ``out`` and return the new records.

    ``devices`` (GPU indices) runs one point per GPU at a time, the point's device rewritten to ``cuda:N``.
    ``on_plan`` is given the runs that will happen (after resume) and the history they were planned from, before
    the first; ``on_record`` is called after each record is safely on disk (the CLI's plan line and progress bar
    hook in to both).

    A plan (``budget_s`` with ``predicted_s`` per point key, points in priority order) runs in that order. The
    first point whose predicted time (rescaled by what the finished runs took against the cost model, once
    :data:`MIN_RUNS_TO_RESCALE` have) would take the sweep past the budget is not started, nor is any point after
    it: each is recorded as ``dropped-late`` with the figures that dropped it (``--retry-failed`` runs them
    later). So a plan that runs late loses its lowest-priority points, in order. The budget counts from the start
    of this call: a resumed plan gets its budget again.
    """
    check_options(points, runs, launcher, timeout_s, devices)
    if budget_s is not None and (devices or predicted_s is None):
        raise VaememError("a plan's budget needs its predicted times and runs on one device at a time")
    if budget_s is not None and not 0 < budget_s < float("inf"):
        raise VaememError(f"a plan's budget must be a positive number of seconds, got {budget_s!r}")
    out = Path(out)
    check_out_path(out)
    with sweep_lock(out):  # one sweep appends to a file at a time: two would each run every point
        tasks, history = sweep_plan(points, out, rig, runs, force, retry_failed)
        if on_plan:
            on_plan(tasks, history)
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
            before = oom_kill_count()
            outcome = launch.run({"kind": "measure", "point": task.point.to_dict()}, task.point.allocator, timeout_s)
            after = oom_kill_count()
            if stopping.is_set():
                return
            kills = after - before if before is not None and after is not None else None
            finish(make_record(task, outcome, rig=rig, launcher=launch.name, timeout_s=timeout_s, commit=commit,
                               oom_kills=kills))

        if not devices:
            launch = launcher_factory(launcher)
            started = clock()
            predicted_done = actual_done = 0.0
            finished = 0
            late = False
            try:
                for task in tasks:
                    if budget_s is not None:  # run in priority order; once a point would overrun, it and every
                        # point after it (all of lower priority) are dropped: a late plan loses its tail, in order
                        assert predicted_s is not None
                        # rescaled by the finished runs' own wall time (not the launcher's one-off start) once a few
                        # have run: one run's ratio to the cost model is noise (0.3-3.7x on this CPU)
                        scale = (actual_done / predicted_done if finished >= MIN_RUNS_TO_RESCALE and predicted_done
                                 else 1.0)
                        spent = clock() - started
                        need = scale * predicted_s.get(task.point.key, 0.0)
                        if late or spent + need > budget_s:
                            why = ("a higher-priority point was dropped" if late else
                                   f"{spent:.0f} s spent, this run predicted {need:.0f} s at {scale:.2f}x the cost "
                                   f"model")
                            late = True
                            finish(make_record(task, None, rig=rig, launcher=launch.name, timeout_s=timeout_s,
                                               status="dropped-late", commit=commit,
                                               evidence=f"plan of {budget_s:.0f} s: {why}"))
                            continue
                    n_before = len(records)
                    do(task, launch)
                    if budget_s is not None and len(records) > n_before and records[-1].get("run_wall_s"):
                        finished += 1
                        predicted_done += predicted_s.get(task.point.key, 0.0)  # type: ignore[union-attr]
                        actual_done += records[-1]["run_wall_s"]
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
