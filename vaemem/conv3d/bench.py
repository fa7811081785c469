"""``vaemem bench-conv3d``: native conv3d against its conv2d decomposition on real causal video encoders.

Each path runs in its own fresh process (the measure launchers), on the same seeded weights and the same seeded
input chunk, so the two outputs can be compared. Per path: the first call (warm-up, kernel search) apart from the
steady state (median of the remaining calls), peak memory through the backend's probe, the conv FLOPs of a chunk
and the throughput they were achieved at, next to this device's matrix-multiply throughput measured in the same
process (how close each path gets to the machine's limit). With both paths: speed and memory ratios and the drift
of decomposed against native.

``--tiles RxC`` cuts the frame into R x C equal spatial tiles (no overlap: the cost of the convs, not of blending)
and encodes them one after another; times are per chunk, all tiles together.
"""

from __future__ import annotations

import re

import datetime as _dt
import os
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from vaemem import __version__
from vaemem.conv3d.gate import env_override
from vaemem.errors import VaememError
from vaemem.measuring.parent.store import SCHEMA_VERSION, append_record, check_out_path, iter_records

BENCH_MODELS = ("minimax-h3", "wan21", "wan22", "tiny-minimax-h3", "tiny-wan")
DTYPES = ("fp32", "fp16-autocast", "bf16-autocast")
PATHS = ("native", "decomposed")  # plus "auto": the path the declared gate chooses in the child (conv3d/apply.py)
MATMUL_N = 2048


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _matmul_gflops(torch: Any, device: str, dtype: Any) -> float:
    """Best of 3 timed n x n matmuls after a warm-up, in GFLOP/s (2 n^3 flops each)."""
    a = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device).to(dtype)
    best = float("inf")
    for i in range(4):
        _sync(torch, device)
        t0 = time.perf_counter()
        a @ b
        _sync(torch, device)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * MATMUL_N**3 / best / 1e9


def _count_conv_flops(torch: Any, model: Any) -> tuple[list[Any], list[float]]:
    """Forward hooks adding 2 x MACs of every conv (2D and 3D) call into a counter."""
    total = [0.0]

    def hook(module: Any, inputs: Any, output: Any) -> None:
        k = 1
        for s in module.kernel_size:
            k *= s
        total[0] += 2.0 * output.numel() * (module.in_channels // module.groups) * k

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))]
    return handles, total


def run_task(task: dict[str, Any], started_s: float) -> dict[str, Any]:
    """The worker's entry for a ``conv3d`` task (see :data:`vaemem.measuring.child.worker.TASKS`)."""
    return run_path(task)


def run_path(task: dict[str, Any]) -> dict[str, Any]:
    """In the child: build the encoder, run ``runs`` chunks on one path, save the first output, report."""
    import torch

    from vaemem.conv3d.patch import decomposed_conv3d
    from vaemem.measuring.child.probes import demand_from, make_probe
    from vaemem.measuring.child.rig import rig_info
    from vaemem.models.build import build_model, configure_tiling, make_input, run_op
    from vaemem.models.zoo import get_spec

    device, name = task["device"], task["model"]
    spec = get_spec(name)
    model = build_model(name, "encode", device, "fp32")
    configure_tiling(model, spec, None)
    x = make_input((1, 3, task["frames"], task["height"], task["width"]), device, "fp32")
    rows, cols = task["tiles"]
    th, tw = task["height"] // rows, task["width"] // cols
    tiles = [x[..., r * th:(r + 1) * th, c * tw:(c + 1) * tw] for r in range(rows) for c in range(cols)]
    amp_dtype = {"fp16-autocast": torch.float16, "bf16-autocast": torch.bfloat16}.get(task["dtype"])
    device_type = device.split(":")[0]
    amp = torch.autocast(device_type, dtype=amp_dtype) if amp_dtype else nullcontext()
    gate = None
    if task["path"] == "auto":  # the gate as an app applies it, with the parent's VAEMEM_CONV3D
        from vaemem.conv3d.apply import apply_conv3d_gate
        from vaemem.conv3d.gate import ENV_VAR

        gate = apply_conv3d_gate(model, torch, {ENV_VAR: task.get("conv3d_env") or "auto"}, task["method"])
        path = nullcontext(gate["patched"])
    else:
        path = decomposed_conv3d(model, task["method"]) if task["path"] == "decomposed" else nullcontext(0)
    handles, flops = _count_conv_flops(torch, model)
    probe = make_probe(device)
    times = []
    probe.start()
    with torch.inference_mode(), path as n_patched, amp:
        for i in range(task["runs"]):
            _sync(torch, device)
            t0 = time.perf_counter()
            outs = [run_op(model, "encode", t) for t in tiles]
            _sync(torch, device)
            times.append(time.perf_counter() - t0)
            if i == 0:
                for h in handles:
                    h.remove()
                torch.save([o.float().cpu() for o in outs], task["output_path"])
            del outs
    readings = probe.stop()
    demand, _ = demand_from(readings)
    steady = statistics.median(times[1:]) if len(times) > 1 else None
    mm = _matmul_gflops(torch, device, amp_dtype or torch.float32)
    info = rig_info(torch, device, {"fp16-autocast": "fp16", "bf16-autocast": "bf16"}.get(task["dtype"], "fp32"))
    return {"status": "ok", "first_call_s": round(times[0], 4), "steady_s_per_chunk": steady and round(steady, 4),
            "all_calls_s": [round(t, 4) for t in times], "readings": readings, "demand_bytes": demand,
            "conv_gflop_per_chunk": round(flops[0] / 1e9, 3),
            "conv_gflops_achieved": round(flops[0] / 1e9 / (steady or times[0]), 2),
            "matmul_gflops": round(mm, 2), "n_patched_modules": n_patched, "rig": info,
            **({"gate": {k: v for k, v in gate.items() if k != "undo"}} if gate is not None else {})}


def _drift(native_path: str, decomposed_path: str) -> dict[str, Any]:
    import torch

    a, b = torch.load(native_path), torch.load(decomposed_path)
    n = torch.cat([t.flatten() for t in a]).double()
    d = torch.cat([t.flatten() for t in b]).double()
    finite = bool(torch.isfinite(n).all() and torch.isfinite(d).all())
    return {"rel_norm": float((d - n).norm() / n.norm()) if finite else None,
            "max_abs": float((d - n).abs().max()) if finite else None,
            "scale_max_abs": float(n.abs().max()) if finite else None, "all_finite": finite}


def bench(model: str, conv3d: str, *, method: str | None = None, frames: int = 17, width: int = 256, height: int = 256,
          tiles: tuple[int, int] = (1, 1), dtype: str = "fp32", runs: int = 3, device: str = "cpu",
          out: Path | None = None, rig: str = "bench", launcher: str = "fork",
          timeout_s: float = 3600) -> list[dict[str, Any]]:
    """Run the requested path(s) in fresh processes; append and return one record per path (all at the end: the
    decomposed path's record compares itself with the native one's). ``method``: the decomposition, taps (the
    default) or stacked; refused with the native path alone, where it means nothing."""
    from vaemem.measuring.plumbing.launcher import make_launcher
    from vaemem.measuring.point import default_allocator, runs_error
    from vaemem.measuring.parent.runner import child_fields, classify, git_commit, see_devices
    from vaemem.models.zoo import get_spec

    if model not in BENCH_MODELS:
        raise VaememError(f"bench-conv3d runs causal video encoders; choose one of: {', '.join(BENCH_MODELS)}")
    if conv3d not in (*PATHS, "both", "auto"):
        raise VaememError(f"unknown --conv3d {conv3d!r}; choose one of: native, decomposed, both, auto")
    if method is not None and conv3d == "native":
        raise VaememError("--method chooses the decomposition: --conv3d native runs none")
    method = "taps" if method is None else method
    if method not in ("taps", "stacked"):
        raise VaememError(f"unknown --method {method!r}; choose one of: taps, stacked")
    if conv3d == "auto":  # the child applies the gate with the parent's VAEMEM_CONV3D: a bad one said here, not
        env_override()  # recorded as two error runs and exit 0
    if dtype not in DTYPES:
        raise VaememError(f"unknown --dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    spec = get_spec(model)
    rows, cols = tiles
    f = spec.spatial_factor
    if wrong := runs_error(runs):
        raise VaememError(wrong)
    if frames < 1 or rows < 1 or cols < 1:
        raise VaememError("--frames and --tiles must be positive")
    if spec.frames_error(frames):
        raise VaememError(spec.frames_error(frames))
    if width <= 0 or height <= 0:
        raise VaememError(f"width and height must be positive, got {width}x{height}")
    if height % rows or width % cols or (height // rows) % f or (width // cols) % f:
        raise VaememError(f"{width}x{height} cut into {rows}x{cols} tiles must give tiles in multiples of {f} px")
    if not re.fullmatch(r"(cpu|cuda|xpu)(:\d+)?|mps", device):
        raise VaememError(f"bad device {device!r}; choose one of: cpu, cuda, cuda:N, mps, xpu, xpu:N")
    see_devices({device})  # a device this torch lacks: refused, not two error runs and exit 0
    if out is not None:  # before minutes of benchmark: a file that cannot take lines, or of a newer schema
        check_out_path(out)
        if out.exists():
            for _ in iter_records([out]):
                pass
    paths = PATHS if conv3d == "both" else (conv3d,)
    launch = make_launcher(launcher)
    records: list[dict[str, Any]] = []
    outputs: dict[str, str] = {}
    commit = git_commit()
    try:
        with tempfile.TemporaryDirectory(prefix="vaemem-conv3d-") as tmp:
            for p in paths:
                task = {"kind": "conv3d", "model": model, "path": p, "method": method, "frames": frames,
                        "width": width, "height": height, "tiles": [rows, cols], "dtype": dtype, "runs": runs,
                        "device": device, "output_path": str(Path(tmp, f"{p}.pt")),
                        "conv3d_env": os.environ.get("VAEMEM_CONV3D")}
                allocator = default_allocator(device)
                outcome = launch.run(task, allocator, timeout_s)
                result, machine = child_fields(outcome)
                status, evidence = classify(outcome)  # the parent's view, as a measurement's
                rec = {**result,  # the child's own fields: never one the parent sets below
                       "schema_version": SCHEMA_VERSION, "kind": "conv3d", **{k: v for k, v in task.items()
                                                                              if k not in ("kind", "output_path")},
                       "allocator": allocator,
                       "method": method if p == "decomposed" else None, "status": status,
                       "status_evidence": evidence,
                       "exit_code": outcome.returncode, "run_wall_s": round(outcome.wall_s, 4),
                       "rig": {**machine, "name": rig},
                       "vaemem_version": __version__, "git_commit": commit,
                       "utc_time": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                if rec["status"] != "ok":
                    rec["stderr_tail"] = outcome.stderr_tail
                else:
                    outputs[p] = task["output_path"]
                records.append(rec)
            if len(outputs) == 2:
                nat, dec = records
                dec["versus_native"] = {**ratios(nat, dec), **_drift(outputs["native"], outputs["decomposed"])}
    finally:
        launch.close()
    if out is not None:
        for rec in records:
            append_record(out, rec)
    return records


def ratios(nat: dict[str, Any], dec: dict[str, Any]) -> dict[str, float | None]:
    """The decomposed path's record against the native one's: ``speed_ratio`` native s / decomposed s per chunk in
    the steady state (None with one run: the warm-up call alone, which ``first_call_ratio`` compares), and
    ``peak_ratio`` decomposed / native demand."""
    return {"speed_ratio": _ratio(nat.get("steady_s_per_chunk"), dec.get("steady_s_per_chunk")),
            "first_call_ratio": _ratio(nat["first_call_s"], dec["first_call_s"]),
            "peak_ratio": _ratio(dec["demand_bytes"], nat["demand_bytes"])}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def table(records: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table("model", "path", "dtype", "size", "tiles", "status", "first s", "steady s/chunk", "peak MiB",
              "conv GFLOP/s", "matmul GFLOP/s", "speedup", "peak ratio", "drift rel / max abs",
              title="bench-conv3d (speedup = native s / decomposed s; peak ratio = decomposed / native)")
    for r in records:
        vs = r.get("versus_native", {})
        drift = (f"{vs['rel_norm']:.1e} / {vs['max_abs']:.1e}" if vs.get("all_finite") else
                 ("non-finite" if vs else ""))
        t.add_row(r["model"], r["path"] + (f" ({r['method']})" if r.get("method") else ""), r["dtype"],
                  f"{r['width']}x{r['height']}x{r['frames']}", "x".join(map(str, r["tiles"])), r["status"],
                  _num(r.get("first_call_s")), _num(r.get("steady_s_per_chunk")),
                  _num(r["demand_bytes"] / 2**20 if r.get("demand_bytes") else None, 0),
                  _num(r.get("conv_gflops_achieved"), 1), _num(r.get("matmul_gflops"), 1),
                  _num(vs.get("speed_ratio"), 2), _num(vs.get("peak_ratio"), 2), drift)
    return t


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
