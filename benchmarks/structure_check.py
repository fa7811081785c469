"""The committed video structures against fresh dry runs at the sizes apps run (832x480 and 1280x704 clips of
25 to 121 frames, bf16): every case the structural model still gets wrong, with the point.

    python benchmarks/structure_check.py            # every video architecture, one process
    python benchmarks/structure_check.py mochi      # one architecture
    python benchmarks/structure_check.py --tiled    # tiled: 256 px tiles at 832x480, 384 px at 1280x704, for
                                                    # every video architecture with a tiled structure

Prints one row per point: the fresh dry-run peak, the structure's price and their ratio (under 1: the structure
under-prices the dry run). None of these points is in the structure's grid.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vaemem import estimate as est
from vaemem.models.zoo import get_spec, registry
from vaemem.tracing.trace import TraceSpec, trace

SIZES = ((832, 480), (1280, 704))
TILES = {(832, 480): 256, (1280, 704): 384}  # --tiled
FRAMES = (25, 49, 85, 121)
ROOT = Path(__file__).resolve().parents[1]


def _frames(spec, want: int) -> int:
    s = spec.info.frame_step or spec.temporal_factor
    return 1 + s * max(1, round((want - 1) / s))


def main(names: list[str], tiled: bool) -> None:
    doc = est.load(ROOT / "vaemem" / "coefficients.json")
    names = names or [n for n, s in registry().items() if s.is_video and not s.tiny and s.architecture == n]
    worst = (2.0, "")
    print(f"{'point':55s} {'dry MiB':>10s} {'priced MiB':>10s} {'ratio':>6s}")
    for name in names:
        spec = get_spec(name)
        for op in spec.ops:
            s = doc["structures"].get(est.structure_key(name, op, "bf16", tiled))
            if s is None:
                continue
            for w, h in SIZES:
                t = TILES[(w, h)] if tiled else None
                for f in sorted({_frames(spec, x) for x in FRAMES}):
                    fresh = trace(TraceSpec(name, op, "bf16", w, h, frames=f, tile=t)).peak_bytes
                    priced = est.structure_bytes(s, w, h, 1, f, t)
                    r = priced / fresh
                    label = f"{name} {op} {w}x{h}x{f}" + (f" t{t}" if t else "")
                    worst = min(worst, (r, label))
                    print(f"{label:55s} {fresh / 2**20:10.0f} {priced / 2**20:10.0f} {r:6.3f}", flush=True)
    print(f"lowest ratio: {worst[0]:.3f} ({worst[1]})")


if __name__ == "__main__":
    main([a for a in sys.argv[1:] if a != "--tiled"], "--tiled" in sys.argv[1:])
