"""An experiment toward a CPU variant of the dry run: each op's hidden buffer added at its time, against the
measured demand on oneDNN (by default the bf16 demand of the AVX512-BF16 EPYC: no AMX, the ``onednn`` bf16 platform).

    python benchmarks/cpu_hidden_model.py [--rules conv|mean|both] [--dtype bf16|fp32] [--rig NAME|all]
                                          [--kernel conv2d|conv3d|all]      # 10 s for the defaults here

``benchmarks/cpu_hidden_ops.py`` measured, op by op on this EPYC, what an op holds beyond its output: a convolution
on oneDNN its weight's reorder and its output's, once in fp32 and twice in bf16; a half-precision ``aten.mean.dim``
an fp32 copy of its input (and of its result). This re-runs the dry run of every untiled batch-1 point of the
chosen dtype, rigs and kernel class on oneDNN (images from 128x96 px; video up to 320x192 x 17 frames) with a
counter that adds those buffers while the op runs (``--rules`` picks them), and prints, per architecture, demand /
plain dry-run peak and demand / modelled peak. A transfer within a kernel class needs the architectures' factors to
agree (``vaemem.estimate.AGREE_SPREAD``, 1.15): the model is worth building where it brings them together.

Found on 2026-12-03 (torch 2.13.0), the spread of the architectures' medians in each class: EPYC bf16 conv2d encode
1.83 over the dry run (SD1.5, FLUX.1, CogView4 1.04; HunyuanImage-2.1 1.91), 1.10 over the model with both rules
(0.87 and 0.95: within AGREE_SPREAD; with the mean's rule alone 1.09, with the convolution's alone HunyuanImage-2.1
stays at 1.14: the mean's copy is its excess); conv2d decode 1.13 -> 1.10; the conv3d classes (HunyuanVideo, Wan
2.1: two points each) do not come together (decode 1.15 -> 1.16, encode 1.08 -> 1.16). In fp32 on every rig
(``--dtype fp32 --rig all --kernel conv2d --rules conv``) the convolution's buffer brings the image architectures
together: decode medians 1.05-1.33 -> 1.01-1.06, encode 1.02-1.37 -> 1.02-1.05 (HunyuanImage-2.1's 1.37 -> 1.03).
For an image architecture that dry run is a constant multiple of the plain one, so it was built as one
(``vaemem.tracing.counter.onednn_hidden_bytes`` without the weight, which ``conv_transient_bytes`` prices; the
structure's ``onednn_hidden_factor``; :func:`vaemem.estimate.onednn_hidden_factor`); a video architecture's is
nearly constant in size, not in clip length, and its structure takes one per knot (schema 17; the largest of its
grid before, with which, left out by architecture, HunyuanVideo's untiled rows went from 0.80-0.99 to 1.04-1.12:
``fits/REPORT.md``).
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
    from vaemem.models.zoo import get_spec
    from vaemem.tracing import counter
    from vaemem.tracing.trace import TraceSpec, trace

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", choices=("conv", "mean", "both"), default="both")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--rig", default=RIG, help="a rig of measurements/ ('all': every rig)")
    parser.add_argument("--kernel", choices=("conv2d", "conv3d", "all"), default="all")
    a = parser.parse_args()
    rules, dtype, rig = a.rules, a.dtype, a.rig
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
            if func is conv and rules in ("conv", "both"):  # the weight's reorder and the output's, twice in bf16
                copies = 1 if out.dtype == torch.float32 else 2
                extra = args[1].numel() * args[1].element_size() + copies * out.numel() * out.element_size()
            elif func is mean and args[0].dtype in (torch.bfloat16, torch.float16) and rules in ("mean", "both"):
                extra = 4 * (args[0].numel() + out.numel())  # the fp32 copy of the input, and the fp32 result
            if extra:
                self.bump(extra, self._stack[-1] if self._stack else "(top level)")
            return out

    counter.LiveBytes = WithHidden
    data = load_dataset([ROOT / "measurements"])
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for key, points in data.groups.values():
        if key["conv_backend"] not in ("onednn", "onednn-amx") or key["dtype"] != dtype or key["tiled"]:
            continue
        for p in points:
            q = p.point
            if get_spec(q["model"]).tiny or (a.kernel != "all" and get_spec(q["model"]).kernel != a.kernel):
                continue
            if (rig != "all" and p.rig != rig) or q["batch"] != 1 or q["width"] * q["height"] < 128 * 96 \
                    or q["attention"] != "fused" or q["slicing"] or q["conv3d"] != "native" \
                    or (q["frames"] > 1 and (q["frames"] > 17 or q["width"] * q["height"] > 320 * 192)):
                continue
            modelled = trace(TraceSpec(q["model"], key["op"], dtype, q["width"], q["height"],
                                       frames=q["frames"]), replay=False).peak_bytes
            kernel = get_spec(q["model"]).kernel
            rows.setdefault((kernel, key["op"], key["architecture"]), []).append(
                (p.demand_bytes / last[0].plain_peak, p.demand_bytes / modelled))
    print(f"{rig}, {dtype} untiled, rules: {rules}; demand / dry-run peak and / modelled peak, min / median / max")
    classes: dict[tuple, list[tuple[float, float]]] = {}
    for (kernel, op, arch), rs in sorted(rows.items()):
        a, b = [r[0] for r in rs], [r[1] for r in rs]
        print(f"{kernel} {op:7s} {arch:18s} {len(rs)}  {min(a):.2f} / {statistics.median(a):.2f} / {max(a):.2f}"
              f"   {min(b):.2f} / {statistics.median(b):.2f} / {max(b):.2f}")
        classes.setdefault((kernel, f"{dtype} {op}"), []).append((statistics.median(a), statistics.median(b)))
    print("per class, the spread of the architectures' medians (max / min)")
    print_spreads(classes)


if __name__ == "__main__":
    main()
