"""Does a CPU rig's demand carry to another CPU of the same platform key? The key (conv backend, allocator, dtype,
OS, op) names no CPU. This sets each point of ``measurements/cross-rig/`` (measured on one rig, fitted by nothing)
beside the same point measured on another rig in ``measurements/`` (the fitted data), and prices it with the
committed coefficient file as an app on the cross-rig CPU would be priced.

    python benchmarks/cross_rig_check.py

Prints one row per point: its demand on the cross-rig CPU, on the fitted rig, their ratio, and vaemem's
reservation / demand on the cross-rig CPU; then the ratio's range per dtype.

On 2026-12-03 (campaign 17, ``measurements/sweeps/cpu17-1-cross-rig.toml``: 38 runs on an AMD EPYC with
AVX512-BF16 and no AMX, against the Xeon with AMX, and the AVX2 EPYC for LTX-2 and LTX-2.3): fp32 demand agrees
within 1.6 % (0.985-1.016x: LTX's convolution transients step at the same sizes on all three CPUs), as SD1.5's
fp32 points did between the AVX2 EPYC and the Xeon (0.3 %). bf16 does not: without AMX, SD1.5, FLUX.1 and
CogView4 need 0.79-0.88x the Xeon's demand (oneDNN's AMX kernels hold more), HunyuanImage-2.1's decode 0.81x above
its resident floor, HunyuanVideo and Wan 2.1 0.89-0.97x, and HunyuanImage-2.1's encode the same (0.996-0.998x),
its excess over the dry run not being in its convolutions (``benchmarks/cpu_hidden_ops.py``). The committed fit
reserves 1.04-1.34x the EPYC's demand, none under.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from vaemem import estimate
from vaemem.fit.coefficients import load_dataset

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def main() -> None:
    fitted = load_dataset([ROOT / "measurements"])
    other = load_dataset([ROOT / "measurements" / "cross-rig"])
    index = {}
    for gid, (_, points) in fitted.groups.items():
        for p in points:
            index[(gid, p.point["width"], p.point["height"], p.point["batch"], p.point["frames"], p.point["tile"])] = p
    coef = estimate.load(None)
    ratios: dict[str, list[float]] = {}
    print("| group | point | demand here (MiB) | fitted rig (MiB) | here / there | reservation / demand here |")
    print("|---|---|---|---|---|---|")
    for gid, (key, points) in sorted(other.groups.items()):
        for p in sorted(points, key=lambda p: (p.point["frames"], p.point["width"] * p.point["height"])):
            q = p.point
            there = index.get((gid, q["width"], q["height"], q["batch"], q["frames"], q["tile"]))
            price = estimate.working_memory_bytes(
                q["model"], key["op"], q["width"], q["height"], dtype=key["dtype"], backend=key["conv_backend"],
                allocator=key["allocator"], os=key["os"], batch=q["batch"], frames=q["frames"], tile=q["tile"],
                coefficients=coef)
            ratio = p.demand_bytes / there.demand_bytes if there else None
            if ratio is not None:
                ratios.setdefault(key["dtype"], []).append(ratio)
            point = f"{q['width']}x{q['height']}" + (f" x {q['frames']}" if q["frames"] > 1 else "")
            print(f"| {gid} | {point} | {p.demand_bytes / MIB:.1f} ({p.rig}) | "
                  + (f"{there.demand_bytes / MIB:.1f} ({there.rig}) | {ratio:.3f}" if there else "- | -")
                  + f" | {price / p.demand_bytes:.2f} |")
    for dtype, r in sorted(ratios.items()):
        print(f"{dtype}: {len(r)} points, here / there {min(r):.3f} / {statistics.median(r):.3f} / {max(r):.3f}")


if __name__ == "__main__":
    main()
