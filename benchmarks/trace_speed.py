"""Seconds per dry run (``vaemem trace``) for untiled image, tiled and video points, and, with ``--zoo``, the
whole structure grid of every real architecture (what ``fits/traces.json`` holds).

    python benchmarks/trace_speed.py              # a few points, about a minute
    python benchmarks/trace_speed.py --zoo        # every dry run of the zoo grid into a temporary cache
    python benchmarks/trace_speed.py --zoo -j 2   # the same in two processes (vaemem trace --zoo --record FILE --jobs 2)

Goals (issue 10): at most 2 s per untiled image point, 10 s per video or tiled point, the zoo grid in under
10 minutes, on this 2-core machine. Timings are wall time of one process; on a shared machine they are upper
bounds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from vaemem.tracing.trace import TraceSpec, trace

POINTS = {
    "image": [TraceSpec("sd15", "decode", "fp32", 1024, 1024), TraceSpec("flux2", "encode", "bf16", 1024, 1024),
              TraceSpec("cogview4", "decode", "bf16", 2048, 2048), TraceSpec("sana-dc-ae", "decode", "fp32", 1024, 1024)],
    "tiled": [TraceSpec("sd15", "decode", "fp32", 1024, 1024, tile=256), TraceSpec("sd15", "decode", "fp32", 2048, 2048,
                                                                                   tile=512),
              TraceSpec("sana-dc-ae", "decode", "fp32", 2048, 2048, tile=512)],
    "video": [TraceSpec("wan21", "decode", "bf16", 832, 480, frames=81), TraceSpec("wan21", "encode", "bf16", 832, 480,
                                                                                   frames=81),
              TraceSpec("hunyuanvideo", "decode", "bf16", 848, 480, frames=61),
              TraceSpec("ltx-video", "decode", "bf16", 768, 512, frames=121)],
}


def main() -> None:
    trace(TraceSpec("tiny-kl", "decode", "fp32", 64, 64))  # imports and first-call costs out of the figures
    for kind, specs in POINTS.items():
        for s in specs:
            r = trace(s)
            print(f"{kind:6s} {s.key:75s} {r.wall_s:6.2f} s  peak {r.peak_bytes / 2**20:9.1f} MiB"
                  f"  replayed {r.replayed_calls}")
    if "--zoo" in sys.argv:
        from vaemem.tracing import cache
        from vaemem.tracing.structure import zoo_grid

        from vaemem.tracing.trace import trace_many

        jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else 1
        specs = zoo_grid()
        t0 = time.perf_counter()
        walls: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as tmp:
            results = list(trace_many(specs, None, jobs))
            cache.record(f"{tmp}/traces.json", results)
        parts: dict[tuple[str, str, str], list[float]] = {}  # (model, op, kind) -> [dry runs, summed wall s]
        for r in results:
            walls[r.spec.attention] = walls.get(r.spec.attention, 0.0) + r.wall_s
            kind = "tiled" if r.spec.tile else r.spec.attention
            part = parts.setdefault((r.spec.model, r.spec.op, kind), [0, 0.0])
            part[0] += 1
            part[1] += r.wall_s
        print("the costliest structures (summed dry-run wall of both dtypes):")
        for (model, op, kind), (n, wall) in sorted(parts.items(), key=lambda kv: -kv[1][1])[:15]:
            print(f"  {model:18s} {op:6s} {kind:6s} {n:4d} dry runs {wall / 60:5.2f} min")
        print(f"zoo grid: {len(specs)} dry runs in {(time.perf_counter() - t0) / 60:.1f} min with {jobs} process(es)"
              f"; summed dry-run wall: fused {walls.get('fused', 0) / 60:.1f} min, math {walls.get('math', 0) / 60:.1f}"
              f" min")
        # each worker reuses a fake model across the dry runs of one op and dtype: they must equal the committed
        # cache's (fresh builds) to the byte
        committed = cache.read_cache("fits/traces.json")["entries"] if Path("fits/traces.json").exists() else {}
        fields = ("peak_bytes", "output_bytes", "input_bytes", "peak_module")
        same = sum(all(committed[r.spec.key].get(f) == getattr(r, f) for f in fields)
                   and committed[r.spec.key].get("split_convs", []) == [list(c) for c in r.split_convs]
                   for r in results if r.spec.key in committed)
        print(f"equal to fits/traces.json: {same} of {sum(r.spec.key in committed for r in results)} dry runs")


if __name__ == "__main__":
    main()
