"""An experiment toward a CPU variant of the dry run: each op's hidden buffer added at its time, against the bf16
demand of the AVX512-BF16 EPYC (no AMX: the ``onednn`` bf16 platform, campaign 17).

    python benchmarks/cpu_hidden_model.py [--rules conv|mean|both]     # 10 s here

``benchmarks/cpu_hidden_ops.py`` measured, op by op on this EPYC, what an op holds beyond its output: a bf16
convolution on oneDNN its weight's reorder and twice its output; a half-precision ``aten.mean.dim`` an fp32 copy of
its input (and of its result). This re-runs the dry run of every untiled bf16 point of that platform with a counter
that adds those buffers while the op runs (``--rules`` picks them), and prints, per architecture, demand / plain
dry-run peak and demand / modelled peak. A transfer within a kernel class needs the architectures' factors to agree
(``vaemem.estimate.AGREE_SPREAD``, 1.15): the model is worth building where it brings them together.

Found on 2026-12-03 (torch 2.13.0), the spread of the architectures' medians in each class: conv2d bf16 encode
1.83 over the dry run (SD1.5, FLUX.1, CogView4 1.04; HunyuanImage-2.1 1.91), 1.10 over the model with both rules
(0.87 and 0.95: within AGREE_SPREAD; with the convolution rule alone HunyuanImage-2.1 stays at 1.14, the mean's copy
is its excess); conv2d decode 1.13 -> 1.10 (HunyuanImage-2.1's resident floor at 256 px aside). The conv3d classes
(HunyuanVideo, Wan 2.1: two points each) do not come together (decode 1.15 -> 1.16, encode 1.08 -> 1.16). The model
over-counts (factors below 1: twice the output is held by some convolutions, not all) but evenly across the image
architectures, which is what a transfer needs. Not built: it is
CPU-only (a GPU's reduction reads half precision in place) and would be a CPU variant of the structures; the AMX
Xeon's rules were not measured op by op.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from cpu_transient_model import print_spreads  # beside this file

ROOT = Path(__file__).resolve().parent.parent
RIG = "epyc-bf16-2core"


def main() -> None:
    import torch

    from vaemem.fit.coefficients import load_dataset
    from vaemem.tracing import counter
    from vaemem.tracing.trace import TraceSpec, trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", choices=("conv", "mean", "both"), default="both")
    rules = parser.parse_args().rules
    conv, mean, last = torch.ops.aten.convolution.default, torch.ops.aten.mean.dim, [None]

    class WithHidden(counter.LiveBytes):  # the dry run's counter, plus each op's hidden buffer during the op
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            self.plain_peak = 0
            last[0] = self

        def track(self, t) -> None:  # noqa: ANN001
            super().track(t)
            self.plain_peak = max(self.plain_peak, self.current)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            out = super().__torch_dispatch__(func, types, args, kwargs)
            extra = 0
            if func is conv and rules in ("conv", "both"):  # the weight's reorder and twice the output
                extra = args[1].numel() * args[1].element_size() + 2 * out.numel() * out.element_size()
            elif func is mean and args[0].dtype in (torch.bfloat16, torch.float16) and rules in ("mean", "both"):
                extra = 4 * (args[0].numel() + out.numel())  # the fp32 copy of the input, and the fp32 result
            if extra:
                self.bump(extra, self._stack[-1] if self._stack else "(top level)")
            return out

    counter.LiveBytes = WithHidden
    data = load_dataset([ROOT / "measurements"])
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for key, points in data.groups.values():
        if key["conv_backend"] != "onednn" or key["dtype"] != "bf16" or key["tiled"]:
            continue
        for p in points:
            q = p.point
            if p.rig != RIG or q["batch"] != 1:
                continue
            modelled = trace(TraceSpec(q["model"], key["op"], "bf16", q["width"], q["height"],
                                       frames=q["frames"]), replay=False).peak_bytes
            kernel = "conv3d" if q["frames"] > 1 else "conv2d"
            rows.setdefault((kernel, key["op"], key["architecture"]), []).append(
                (p.demand_bytes / last[0].plain_peak, p.demand_bytes / modelled))
    print(f"{RIG}, bf16 untiled, rules: {rules}; demand / dry-run peak and / modelled peak, min / median / max")
    classes: dict[tuple, list[tuple[float, float]]] = {}
    for (kernel, op, arch), rs in sorted(rows.items()):
        a, b = [r[0] for r in rs], [r[1] for r in rs]
        print(f"{kernel} {op:7s} {arch:18s} {len(rs)}  {min(a):.2f} / {statistics.median(a):.2f} / {max(a):.2f}"
              f"   {min(b):.2f} / {statistics.median(b):.2f} / {max(b):.2f}")
        classes.setdefault((kernel, f"bf16 {op}"), []).append((statistics.median(a), statistics.median(b)))
    print("per class, the spread of the architectures' medians (max / min)")
    print_spreads(classes)


if __name__ == "__main__":
    main()
