"""Seconds per dry run (``vaemem trace``) for untiled image, tiled and video points, and, with ``--zoo``, the
whole structure grid of every real architecture (what ``fits/traces.json`` holds).

    python benchmarks/trace_speed.py          # a few points, about a minute
    python benchmarks/trace_speed.py --zoo    # every dry run of the zoo grid into a temporary cache

Goals (issue 10): at most 2 s per untiled image point, 10 s per video or tiled point, the zoo grid in under
10 minutes, on this 2-core machine. Timings are wall time of one process; on a shared machine they are upper
bounds.
"""

from __future__ import annotations

import sys
import tempfile
import time

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

        specs = zoo_grid()
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            cache.record(f"{tmp}/traces.json", [trace(s) for s in specs])
        print(f"zoo grid: {len(specs)} dry runs in {(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
