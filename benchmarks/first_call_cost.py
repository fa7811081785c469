"""What a fresh process's first decode or encode costs beyond a warm one, and how close a warm call is to the dry run.

    python benchmarks/first_call_cost.py                      # Linux; re-runs itself under glibc-fixed
    python benchmarks/first_call_cost.py wan21 encode bf16 160 96 9 [MODEL OP DTYPE WIDTH HEIGHT FRAMES ...]

A measurement is the op's first call in a fresh process (``vaemem.measuring.child.worker``), as an app's first
call is. Each point here runs in a process of its own: the model built from its config, the op run twice under
the CPU probe (``CpuProbe``: the resident peak above the resident size before the call), then the dry run of the
same point the CPU's calibration lines are in: with oneDNN's buffers for this CPU's backend
(``vaemem.estimate.conv_backend``), or its convolutions' call peak where the estimator prices by that
(``vaemem.estimate.call_peak``). Prints, in MiB:
the first call's demand, the second's, the dry run, warm / dry, first - warm, and what the first call left
resident for good, file-backed (code pages of the kernels it ran for the first time: clean, shared, reclaimable)
and anonymous.

Found on 2026-12-06 (AMD EPYC, AVX512-BF16, no AMX, torch 2.13.0; 15 points, 6 min): a warm call is its dry run
with oneDNN's buffers within 0.4 % for the SD, FLUX, CogView4, SANA and Wan families (SD1.5's bf16 decode at
256 px: 127.9 MiB warm, 128.0 dry; Wan 2.1's bf16 encode at 160x96 x 9: 115.9 and 115.4), the weight-copy
architectures (HunyuanImage-2.1's decode, whose largest convolution's reordered weight no dry run holds) apart.
The first call costs 10-25 MiB more, independent of size (SD1.5's decode: 20.5, 22.3, 22.7 MiB at 128, 256,
512 px) and of threads (20.1 with one) and not oneDNN's primitive caches (the same with
``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 LRU_CACHE_CAPACITY=0``): it leaves about 16 MiB of code pages and 7 MiB of
anonymous memory resident. That one-time cost is the intercept of every CPU calibration line, and it is an
architecture's own: Wan 2.1 and 2.2 (29 distinct convolution calls, more kernels) pay 18-22 MiB in an encode
where the image encoders pay 10, which is why Wan 2.1's smallest clips, priced from the other video
architectures' lines, come out 0.97-0.98 on the AMX Xeon (``fits/REPORT.md``, leave one architecture out).

Found on 2026-12-07 (the same EPYC; 1.2 min): the one-time cost is not one number per architecture either. LTX-2.3's
fp32 one-frame decode (``ltx-2.3 decode fp32 160 96 1 ltx-2.3 decode fp32 128 128 1 ltx-2.3 decode fp32 320 192 1
ltx-2.3 decode fp32 512 320 1``), whose warm call is its call peak within 1 MiB at each size, costs 10.1, 14.9,
24.7 and 14.3 MiB more on its first call (6.8-13.5 MiB of code pages; 12.0 MiB anonymous at 320x192, 3.6-3.9 at
the others), by which kernels the size sends its convolutions to (torch's im2col path or oneDNN): a line that
covers every size carries the largest, and over-reserves the smallest one-frame clips 1.3-1.6x held out by size
(the LTX family's fp32 groups that miss the goal, ``fits/REPORT.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}  # glibc-fixed, as a CPU rig measures
MIB = 2**20
DEFAULT = (("sd15", "encode", "bf16", 256, 256, 1), ("sd15", "decode", "bf16", 256, 256, 1),
           ("sd15", "decode", "bf16", 128, 128, 1), ("sd15", "decode", "bf16", 512, 512, 1),
           ("flux1", "decode", "bf16", 256, 256, 1), ("cogview4", "encode", "bf16", 256, 256, 1),
           ("sana-dc-ae", "decode", "bf16", 256, 256, 1), ("hunyuanimage-2.1", "decode", "bf16", 256, 256, 1),
           ("wan21", "encode", "bf16", 160, 96, 9), ("wan21", "encode", "bf16", 320, 192, 9),
           ("wan21", "decode", "bf16", 160, 96, 9), ("wan22", "encode", "bf16", 160, 96, 9),
           ("hunyuanvideo", "encode", "bf16", 160, 96, 9), ("ltx-video", "encode", "bf16", 160, 96, 9),
           ("sd15", "decode", "fp32", 256, 256, 1))


def one(model: str, op: str, dtype: str, width: int, height: int, frames: int) -> dict:
    """In this process: the first and the second call's readings and the dry run's peak, in bytes."""
    import torch

    from vaemem.estimate import WEIGHT_COPY_BACKENDS, call_peak, conv_backend, load, structure_key
    from vaemem.measuring.child.probes import CpuProbe, demand_from
    from vaemem.models.build import build_model, input_shape, make_input, run_op
    from vaemem.models.zoo import get_spec
    from vaemem.tracing.trace import TraceSpec, trace

    spec = get_spec(model)
    m = build_model(model, op, "cpu", dtype)
    x = make_input(input_shape(spec, op, width, height, 1, frames), "cpu", dtype)
    calls = []
    for _ in range(2):
        probe = CpuProbe()
        probe.start()
        with torch.inference_mode():
            out = run_op(m, op, x)
        readings = probe.stop()
        del out
        calls.append({"demand": demand_from(readings)[0], **readings})
    t = trace(TraceSpec(model, op, dtype, width, height, frames=frames))
    # the dry run this CPU's lines are in: by the estimator's rule for the backend (a CPU without AMX: its own in
    # half precision; aten: the plain one)
    backend = conv_backend(torch, "cpu", dtype)
    dry = t.peak_bytes if backend not in WEIGHT_COPY_BACKENDS else \
        t.onednn_peak_bytes_no_amx if backend == "onednn" and dtype != "fp32" else t.onednn_peak_bytes
    # where the estimator prices the point by its convolutions' calls (live bytes there plus the weight copy or
    # im2col buffer each holds), the lines are in the larger of that call peak and the dry run, as the fit takes it
    s = load()["structures"].get(structure_key(spec.architecture, op, "fp32", False))
    cp = call_peak(s, dtype, backend, False, 1, width, height, frames)
    return {"first": calls[0], "warm": calls[1], "dry": max(dry, cp or 0)}


def main(points: list[tuple]) -> None:
    print("| point | first call | warm call | dry run | warm / dry | first - warm | first call left resident: file, "
          "anonymous |")
    print("|---|---|---|---|---|---|---|")
    for p in points:
        r = subprocess.run([sys.executable, __file__, "--one", *map(str, p)], capture_output=True, text=True)
        if r.returncode:
            print(f"| {' '.join(map(str, p))} | failed: {(r.stderr.strip().splitlines() or ['?'])[-1]} |||||| ")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        f, w = d["first"], d["warm"]
        left = (f"{(f['after_rss_file_bytes'] - f['baseline_rss_file_bytes']) / MIB:.1f}, "
                f"{(f['after_rss_anon_bytes'] - f['baseline_rss_anon_bytes']) / MIB:.1f}"
                if "after_rss_file_bytes" in f else "n/a")
        print(f"| {p[0]} {p[1]} {p[2]} {p[3]}x{p[4]} x {p[5]} | {f['demand'] / MIB:.1f} | {w['demand'] / MIB:.1f} | "
              f"{d['dry'] / MIB:.1f} | {w['demand'] / d['dry']:.3f} | {(f['demand'] - w['demand']) / MIB:.1f} | "
              f"{left} |", flush=True)


def _points(args: list[str]) -> list[tuple]:
    if len(args) % 6:
        sys.exit("give points as MODEL OP DTYPE WIDTH HEIGHT FRAMES, six words each")
    return [(a, b, c, int(w), int(h), int(f)) for a, b, c, w, h, f in zip(*[iter(args)] * 6)]


if __name__ == "__main__":
    if any(os.environ.get(k) != v for k, v in ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENV})
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one(*_points(sys.argv[2:])[0])))
    else:
        main(_points(sys.argv[1:]) or list(DEFAULT))
