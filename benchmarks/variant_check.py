"""Price the measured variant points (the math attention path, sliced batches) with a coefficient file fitted
without them: does a platform's fused-path, unsliced calibration price their dry-run peaks?

    vaemem fit --out /tmp/no-variants.json $(for f in measurements/*.jsonl; do \
        [ "$f" = measurements/xeon-amx-2core-variants.jsonl ] || echo --measurements "$f"; done)
    python benchmarks/variant_check.py /tmp/no-variants.json

Prints one Markdown row per point: dry-run peak, demand, demand / dry run, vaemem's reservation / demand, and the
same request priced as fused and unsliced / demand.
"""

from __future__ import annotations

import json
import sys

from vaemem import estimate as est
from vaemem.fit.coefficients import record_conv_backend
from vaemem.tracing.trace import TraceSpec, trace

MIB = 2**20


def main(coefficients: str, measurements: str = "measurements/xeon-amx-2core-variants.jsonl") -> None:
    print("| point | dry-run MiB | demand MiB | demand / dry | vaemem / demand | fused, unsliced / demand |")
    print("|---|---|---|---|---|---|")
    for line in open(measurements):
        r = json.loads(line)
        if r["status"] != "ok":
            continue
        kw = dict(dtype=r["dtype"], backend=record_conv_backend(r), allocator=r["allocator"], os=r["rig"]["os"],
                  batch=r["batch"], frames=r["frames"], coefficients=coefficients)
        mine = est.working_memory_bytes(r["model"], r["op"], r["width"], r["height"], attention=r["attention"],
                                        slicing=r["slicing"], **kw)
        try:  # the plain request of a sliced batch a model cannot run unsliced (HunyuanVideo 1.5) is refused
            plain: float | None = est.working_memory_bytes(r["model"], r["op"], r["width"], r["height"], **kw)
        except est.Unrunnable:
            plain = None
        dry = trace(TraceSpec(r["model"], r["op"], r["dtype"], r["width"], r["height"], batch=r["batch"],
                              frames=r["frames"], attention=r["attention"], slicing=r["slicing"])).peak_bytes
        d = r["demand_bytes"]
        print(f"| {r['point_key']} | {dry / MIB:.0f} | {d / MIB:.0f} | {d / dry:.2f} | {mine / d:.2f} | "
              f"{'refused' if plain is None else f'{plain / d:.2f}'} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
