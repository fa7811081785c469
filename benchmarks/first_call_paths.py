"""What a measured fp32 point needed beyond its convolutions' call peak, beside which path torch sent them down.

    python benchmarks/first_call_paths.py [MODEL ...]        # default: the LTX family's decoders and encoders; 1 s

Reads the committed measurements (``measurements/``) and the packaged coefficients' structures. For each untiled
batch-1 fp32 point on oneDNN of the given models it prints, in MiB, the demand, the call peak the estimator prices
it by (:func:`vaemem.estimate.call_peak`: the bytes live at a convolution's call plus the weight copy or im2col
buffer it holds there, the dry run the CPU lines are in) and the excess (demand - call peak: the first call's
one-time cost, ``benchmarks/first_call_cost.py``), with how many distinct convolutions torch 2.13's ``use_mkldnn``
rule sends to oneDNN and how many to its own im2col path at that size (:func:`vaemem.estimate._conv_calls`).

Found on 2026-12-07 (torch 2.13.0): the one-time cost follows the kernel paths a size takes, not the size.
LTX-2.3's one-frame decode needs 11.1-11.3 MiB beyond its call peak at 160x96, the only size of its group where no
convolution runs on oneDNN (9 on im2col), and 18.8-25.7 MiB at 128x128, 256x160 and 320x192, where one does; with
eight on oneDNN (512x320 and up) 16.3-17.2. Its first call repeats within 0.6 MiB in fresh processes
(``benchmarks/first_call_cost.py``: 9.6-10.2 MiB over the warm call at 160x96 in four, 24.2-24.3 at 320x192 in
three), so this is no noise. Within one path mix the cost
still grows with size (LTX-Video 0.9.5's one-frame decode, every convolution on im2col from 160x96 to 320x192:
11.2-17.8 MiB). A line over sizes carries the largest, which prices LTX-2.3's 160x96 decode 1.62x held out
(``fits/REPORT.md``): a term for the path mix would need it measured in every group it prices, and the smallest
one-frame clips are the only all-im2col sizes of most LTX groups.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
DEFAULT = ("ltx-2", "ltx-2.3", "ltx-video", "ltx-video-0.9.5")


def main(models: tuple[str, ...]) -> None:
    sys.path.insert(0, str(ROOT))
    from vaemem import estimate as est
    from vaemem.models.zoo import get_spec

    structures = est.load()["structures"]
    rows: dict[tuple, list[float]] = {}
    for f in sorted((ROOT / "measurements").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if (r.get("model") not in models or r.get("status") != "ok" or r["dtype"] != "fp32" or r["tile"]
                    or r["batch"] != 1 or r["rig"]["conv_backend"] != "onednn"):
                continue
            s = structures.get(est.structure_key(get_spec(r["model"]).architecture, r["op"], "fp32", False))
            peak = est.call_peak(s, "fp32", "onednn", False, 1, r["width"], r["height"], r["frames"]) if s else None
            if peak is None:
                continue
            calls = list(est._conv_calls(s, r["width"], r["height"], r["frames"]))
            key = (r["model"], r["op"], r["frames"], r["width"] * r["height"], r["width"], r["height"],
                   sum(c > 0 for c, _, _ in calls), sum(b > 0 for _, b, _ in calls), peak)
            rows.setdefault(key, []).append(r["demand_bytes"])
    print("| point | demand | call peak | excess | convolutions on oneDNN / im2col |")
    print("|---|---|---|---|---|")
    for (model, op, frames, _, w, h, dnn, col, peak), demands in sorted(rows.items()):
        lo, hi = min(demands) - peak, max(demands) - peak
        excess = f"{lo / MIB:.1f}" + (f"-{hi / MIB:.1f}" if hi - lo >= 0.05 * MIB else "")
        print(f"| {model} {op} {w}x{h} x {frames} | {max(demands) / MIB:.1f} | {peak / MIB:.1f} | {excess} | "
              f"{dnn} / {col} |")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or DEFAULT)
