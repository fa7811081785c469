"""Does a CPU rig's demand carry to another CPU? Every request measured on two rigs (the same model, op, dtype,
allocator, size, batch, frames, tile and variant), the demand on each, their ratio, each rig's platform key and
the committed coefficient file's reservation / demand at each: how an app on either CPU is priced.

    python benchmarks/cross_rig_check.py

On 2026-12-03 (campaign 17, ``measurements/sweeps/cpu17-1-cross-rig.toml``: 38 runs on an AMD EPYC with AVX512-BF16
and no AMX, of points the Xeon with AMX or the AVX2 EPYC had measured): fp32 demand agrees within 1.5 %
(0.985-1.007x: LTX's convolution transients step at the same sizes on both EPYCs and on the Xeon), as SD1.5's fp32
points did between the AVX2 EPYC and the Xeon (0.3 %). bf16 does not: without AMX, SD1.5, FLUX.1 and CogView4 need
0.79-0.88x the Xeon's demand (oneDNN's AMX kernels hold more), HunyuanImage-2.1's decode 0.81x above its resident
floor, HunyuanVideo and Wan 2.1 0.89-0.97x, and HunyuanImage-2.1's encode the same (0.996-0.998x), its excess over
the dry run not being in its convolutions (``benchmarks/cpu_hidden_ops.py``). Before the half-precision key split
by AMX (``onednn-amx``) the Xeon's bf16 lines reserved 1.05-1.32x the EPYC's demand; now each CPU has its own.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from vaemem import estimate
from vaemem.fit.coefficients import load_dataset

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def main() -> None:
    data = load_dataset([ROOT / "measurements"])
    coef = estimate.load(None)
    by_request: dict[tuple, list[tuple]] = {}
    for gid, (key, points) in data.groups.items():
        for p in points:
            q = p.point
            request = (q["model"], key["op"], key["dtype"], key["allocator"], key["os"], q["width"], q["height"],
                       q["batch"], q["frames"], q["tile"], q["attention"], q["slicing"], q["conv3d"])
            by_request.setdefault(request, []).append((p.rig, key, p))
    ratios: dict[str, list[float]] = {}
    print("| request | rig: key, demand (MiB), reservation / demand | other rig | demand ratio |")
    print("|---|---|---|---|")
    for request, seen in sorted(by_request.items(), key=str):
        if len({rig for rig, _, _ in seen}) < 2:
            continue
        (rig_a, key_a, a), (rig_b, key_b, b) = sorted(seen, key=lambda t: t[0])[:2]
        cells = []
        for rig, key, p in ((rig_a, key_a, a), (rig_b, key_b, b)):
            q = p.point
            price = estimate.working_memory_bytes(
                q["model"], key["op"], q["width"], q["height"], dtype=key["dtype"], backend=key["conv_backend"],
                allocator=key["allocator"], os=key["os"], batch=q["batch"], frames=q["frames"], tile=q["tile"],
                attention=q["attention"], slicing=q["slicing"], coefficients=coef)
            cells.append(f"{rig}: {key['conv_backend']}, {p.demand_bytes / MIB:.1f}, {price / p.demand_bytes:.2f}")
        model, op, dtype, _, _, w, h, batch, frames, tile = request[:10]
        name = f"{model} {op} {dtype} {w}x{h}" + (f" x {frames}" if frames > 1 else "") + \
            (f" b{batch}" if batch > 1 else "") + (f" t{tile}" if tile else "")
        ratio = a.demand_bytes / b.demand_bytes
        ratios.setdefault(f"{dtype}, {rig_a} ({key_a['conv_backend']}) / {rig_b} ({key_b['conv_backend']})",
                          []).append(ratio)
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratio:.3f} |")
    for pair, r in sorted(ratios.items()):
        print(f"{pair}: {len(r)} requests, demand ratio {min(r):.3f} / {statistics.median(r):.3f} / {max(r):.3f}")


if __name__ == "__main__":
    main()
