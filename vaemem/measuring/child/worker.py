"""The worker: runs one task in a fresh process and writes exactly one JSON result (pyperf's contract).

Spawned:  ``python -m vaemem.measuring.child.worker TASK_JSON RESULT_PATH``
Forked:   :func:`run_forked` in a child of the fork helper, with the same two arguments.

A task is ``{"kind": "measure", "point": {...}}`` (one run of a point) or ``{"kind": "conv3d", ...}`` (one path of
``vaemem bench-conv3d``, see :mod:`vaemem.conv3d.bench`).

The result is written atomically (temporary file, then rename): a worker that dies leaves no result at all and
the parent records the crash. Expected failures (device out of memory, an error raised by the model) are results:
the worker writes them with a status and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from vaemem.measuring.point import Point

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _is_oom(e: BaseException) -> bool:
    """The allocator's own out-of-memory error (torch.OutOfMemoryError, Python's MemoryError, or its message on
    the CPU)."""
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" \
        or any(m in str(e).lower() for m in OOM_MARKERS)


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:500]


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    """Write ``result`` as JSON to ``path`` atomically."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(result, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextmanager
def _variant(model: Any, point: Point) -> Iterator[None]:
    """The point's attention path (torch's SDPA math kernel only) and conv3d path (the conv2d decomposition), as
    the dry run applies them."""
    with ExitStack() as stack:
        if point.attention == "math":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        if point.conv3d == "decomposed":
            from vaemem.conv3d.patch import decomposed_conv3d

            stack.enter_context(decomposed_conv3d(model))
        yield


def measure_point(point: Point, started_s: float) -> dict[str, Any]:
    """Build the model, take a baseline, run the op once (the first call, as an app's fresh process would) and read
    the peak. ``started_s`` is ``time.perf_counter()`` when the process (or fork) began, for ``import_s``."""
    import torch

    from vaemem.measuring.plumbing.allocators import allocator_mismatch, memory_env_seen, seen_allocator_settings
    from vaemem.measuring.child.probes import demand_from, make_probe
    from vaemem.measuring.child.rig import rig_info
    from vaemem.models.build import build_model, configure_tiling, input_shape, make_input, run_op
    from vaemem.models.zoo import get_spec

    import diffusers  # noqa: F401  (imported here so import_s counts it in a spawned worker)

    t_imported = time.perf_counter()
    spec = get_spec(point.model)
    probe = make_probe(point.device)
    rig = rig_info(torch, point.device, point.dtype)
    rig["allocator_env_seen"] = seen_allocator_settings()
    rig["memory_env_seen"] = memory_env_seen()
    result: dict[str, Any] = {"pid": os.getpid(), "rig": rig, "import_s": round(t_imported - started_s, 4)}
    mismatch = allocator_mismatch(point.allocator, rig.get("allocator_backend_seen"),
                                  rig.get("allocator_settings_seen"))
    if mismatch:
        return {**result, "status": "error", "error": mismatch}

    try:  # an out-of-memory while the weights are placed is an OOM of this point too
        model = build_model(point.model, point.op, point.device, point.dtype)
        configure_tiling(model, spec, point.tile, point.overlap)
        if point.slicing:
            model.use_slicing = True
        x = make_input(input_shape(spec, point.op, point.width, point.height, point.batch, point.frames),
                       point.device, point.dtype)
    except Exception as e:
        if not _is_oom(e):
            raise
        return {**result, "status": "oom", "error": f"while building: {_one_line(e)}"}
    t_built = time.perf_counter()
    result["build_s"] = round(t_built - t_imported, 4)

    with _variant(model, point):  # patched before the baseline, as in the dry run
        probe.start()
        t0 = time.perf_counter()
        status, error = "ok", None
        out = None
        try:
            with torch.inference_mode():
                out = run_op(model, point.op, x)
        except Exception as e:  # an OOM or a model error is a result, not a crash
            status = "oom" if _is_oom(e) else "error"
            error = _one_line(e)
        finally:
            readings = probe.stop()
    result["op_wall_s"] = round(time.perf_counter() - t0, 4)
    result["readings"] = readings
    from vaemem.estimate import _fused_attention
    from vaemem.models.zoo import ATTENTION_OPS

    # "fused" is torch's own choice of kernel: where none takes a VAE's head, torch materialised the score matrices
    # and the demand is the math path's, not to be recorded under the fused key (detect_platform says math there).
    # Probed after the op: before the baseline its one-time costs (kernels, thread pools) would leave the delta
    if status == "ok" and point.attention == "fused" and point.op in ATTENTION_OPS.get(spec.architecture, ()) \
            and not _fused_attention(torch, point.device, point.dtype):
        status, error = "error", ("no fused attention kernel takes a VAE's head on this device in this dtype "
                                  "(torch materialised the score matrices): measure it with --attention math")
    demand, deltas = demand_from(readings)
    result["delta_bytes"] = deltas
    result["demand_bytes"] = demand if status == "ok" else None
    result["status"] = status
    result["error"] = error
    if out is not None:
        result["output_shape"] = list(out.shape)
        result["output_finite"] = bool(torch.isfinite(out).all())
    return result


def measure_task(task: dict[str, Any], started_s: float) -> dict[str, Any]:
    """The ``measure`` task: one run of one point."""
    return measure_point(Point.from_dict(task["point"]), started_s)


# The task kinds a worker runs, by "module:function" (each takes the task and the start time): a table, not an
# import, so the measuring engine never imports the tools that use it (bench-conv3d imports the engine).
TASKS = {"measure": "vaemem.measuring.child.worker:measure_task", "conv3d": "vaemem.conv3d.bench:run_task"}


def run(task_json: str, result_path: str, started_s: float) -> None:
    """Run the task and write the one result. An unexpected exception becomes an ``error`` result with its
    traceback tail, so the parent can tell a Python failure from a hard crash."""
    try:
        import importlib

        task = json.loads(task_json)
        if task.get("kind") not in TASKS:
            raise ValueError(f"unknown task kind {task.get('kind')!r}; known: {', '.join(TASKS)}")
        module, func = TASKS[task["kind"]].split(":")
        result = getattr(importlib.import_module(module), func)(task, started_s)
    except Exception as e:
        tail = traceback.format_exc().strip().splitlines()[-3:]
        result = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500], "traceback_tail": tail}
    write_result(result_path, result)


def run_forked(task_json: str, result_path: str, late_env: dict[str, str]) -> None:
    """Entry point of a child forked from the helper: apply the late allocator settings, then run."""
    os.environ.update(late_env)
    run(task_json, result_path, time.perf_counter())


if __name__ == "__main__":
    _started = time.perf_counter()
    if len(sys.argv) != 3:
        sys.exit("usage: python -m vaemem.measuring.child.worker TASK_JSON RESULT_PATH")
    from vaemem.measuring.plumbing.forkserver import PARENT_ENV, die_with_parent

    # spawned: a sweep killed outright, even while this one imports, must not leave it holding memory or a device
    die_with_parent(int(os.environ.get(PARENT_ENV, os.getppid())))
    run(sys.argv[1], sys.argv[2], _started)
