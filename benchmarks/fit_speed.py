"""Fitting speed: 10,000 synthetic points in 50 groups, grouped and fitted exactly as `vaemem fit` does.

    python benchmarks/fit_speed.py

Goal: under 2 s on the 2-core CPU machine. Prints the figure; asserts nothing (not a timed test).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from vaemem.fit import coefficients as co

MIB = 1024 * 1024


def main() -> None:
    rng = random.Random(0)
    models = ["sd15", "flux1", "flux2", "cogview4", "wan21"]
    allocators = ["glibc", "glibc-fixed"]
    ops, dtypes = ["decode", "encode"], ["fp32", "bf16", "fp16"]
    groups = [(m, o, d, a) for m in models for o in ops for d in dtypes for a in allocators][:50]
    lines = []
    for model, op, dtype, alloc in groups:
        slope, base = rng.uniform(500, 5000), rng.uniform(50, 500) * MIB
        for i in range(200):  # 200 points per group, one run each
            w = 8 * rng.randint(32, 256)
            h = 8 * rng.randint(32, 256)
            px = w * h
            lines.append(json.dumps({
                "schema_version": 1, "model": model, "op": op, "dtype": dtype, "width": w, "height": h,
                "batch": 1, "frames": 1, "tile": None, "allocator": alloc, "device": "cpu", "run": 0,
                "point_key": f"{model}/{op}/{dtype}/{w}x{h}/b1/f1/t0/{alloc}/cpu#{i}", "pixels": px,
                "status": "ok", "demand_bytes": int((slope * px + base) * rng.uniform(0.8, 1.0)),
                "rig": {"name": "synthetic", "os": "linux", "conv_backend": "onednn", "backend": "cpu"}}))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "m.jsonl")
        path.write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        data = co.load_dataset([path])
        t1 = time.perf_counter()
        result = co.fit_dataset(data, 0.05, {gid: "synthetic noise" for gid in data.groups})
        text = co.dumps(result.document)
        t2 = time.perf_counter()
    n = sum(len(p) for _, p in data.groups.values())
    print(f"{n} points in {len(data.groups)} groups: read+group {t1 - t0:.2f} s, fit+serialise {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s (goal < 2 s); {len(text)} bytes of coefficients")


if __name__ == "__main__":
    main()
