"""The evidence behind pricing a math-path request below its attention structure's sizes
(``vaemem.estimate.attention_eval``: the structure's peak at its smallest traced size, ``area_min``, scaled by the
area where its bytes per pixel grow over the traced sizes, else taken whole): fresh math-path dry runs of every
architecture with an attention structure, at 4-40 latent px a side below ``area_min`` (one frame, and a second
knot's frames for video), against the committed structures' price, and against the old rule (the peak at
``area_min`` always whole).

    python benchmarks/math_small_check.py [ARCH ...]

Prints one row per dry run (the rule that priced its attention peak: scaled, its line, or whole), then the worst
fresh / priced, of the whole peak and of the attention peak alone, and the old rule's range. On the CPU of
2026-12-08: 336 dry runs of 10 architectures, both ops, fp32 and bf16 (288 with the attention peak scaled; 24 on
its line, DC-AE's linear attention, whose 1536 px peak taken whole had priced it up to 55x its dry run at 128 px;
24 whole: Mochi's encode, whose attention over frames runs in chunks and whose bytes per pixel shrink with the
area, where scaling would price its 13-frame clips 1.085x under); fresh / priced at most 1.012 (HunyuanVideo's
bf16 encode at 320x320 x 9, which the old rule prices 0.99x too: the structures' own 1 %), the attention peak
alone at most 1.000; the old rule 0.99-137x the dry run.
About five minutes.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from vaemem import estimate as est
from vaemem.models.zoo import get_spec
from vaemem.tracing.trace import TraceSpec, trace

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def main(names: list[str]) -> None:
    doc = est.load(ROOT / "vaemem" / "coefficients.json")
    structures = doc["structures"]
    archs = sorted({k.split("/")[0] for k in structures if k.endswith("/math")})
    worst, worst_attention, old_over, rules = 0.0, 0.0, [], {}
    print("| dry run | attention peak | fresh MiB | priced MiB | fresh / priced | its attention: fresh / priced | "
          "old rule / fresh |\n|---|---|---|---|---|---|---|")
    for name in names or archs:
        spec = get_spec(name)
        frames_at = [1] if not spec.is_video else [1, 1 + 2 * (spec.temporal_factor or 4)]
        for op in ("decode", "encode"):
            for dtype in ("bf16", "fp32"):
                key = est.structure_key(spec.architecture, op, dtype, False, "math")
                if key not in structures:
                    continue
                attn, fused = structures[key], structures[est.structure_key(spec.architecture, op, dtype, False)]
                side_min = int(attn["area_min"] ** 0.5)
                for frames in frames_at:
                    for k in (4, 8, 16, 24, 32, 40):
                        w = k * spec.spatial_factor
                        if w >= side_min:
                            continue
                        dry = trace(TraceSpec(name, op, dtype, w, w, frames=frames, attention="math"))
                        fresh = dry.peak_bytes
                        priced = est.structure_peak_bytes(doc, name, op, w, w, dtype=dtype, frames=frames,
                                                          attention="math")
                        old = max(est.structure_bytes(fused, w, w, 1, frames, None),
                                  est.structure_bytes(attn, side_min, side_min, 1, frames, None))
                        whole = est.structure_bytes(attn, side_min, side_min, 1, frames, None)
                        attention = est.attention_eval(est.compile_structure(attn), w, w, 1, frames)
                        rule = ("scaled" if math.isclose(attention, whole * w * w / attn["area_min"]) else
                                "line" if attention < whole else "whole")
                        rules[rule] = rules.get(rule, 0) + 1
                        worst = max(worst, fresh / priced)
                        worst_attention = max(worst_attention, dry.attention_peak_bytes / attention)
                        old_over.append(old / fresh)
                        print(f"| {name} {op} {dtype} {w}x{w} x {frames} | {rule} | {fresh / MIB:.2f} | "
                              f"{priced / MIB:.2f} | {fresh / priced:.3f} | "
                              f"{dry.attention_peak_bytes / attention:.3f} | {old / fresh:.2f} |", flush=True)
    print(f"\n{len(old_over)} dry runs ({rules.get('scaled', 0)} with the attention peak scaled, "
          f"{rules.get('line', 0)} on its line, {rules.get('whole', 0)} whole); fresh / priced at most {worst:.3f}, "
          f"the attention peak alone at most {worst_attention:.3f}; the old rule "
          f"{min(old_over):.2f}-{max(old_over):.2f}x the fresh dry run")


if __name__ == "__main__":
    main(sys.argv[1:])
