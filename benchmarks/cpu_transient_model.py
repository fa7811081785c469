"""How much of this CPU's calibration factor a model of its convolution transients explains.

    python benchmarks/cpu_transient_model.py [-j 2]     # 2.8 minutes with 2 workers here

A dry run counts tensors, and on this CPU each convolution also holds buffers that are no tensor
(``benchmarks/cpu_conv_transients.py`` measures them one layer at a time). This re-runs the dry run of every
measured point of the Xeon rig in the calibration domain (untiled, batch 1, the fused path; video up to 320x192
and 17 frames) with a counter that adds, during each convolution, what that convolution holds on top of the
live tensors:

- on oneDNN (every bf16 convolution, and an fp32 one where torch's ``use_mkldnn`` rule picks it: groups > 1, a
  kernel larger than 3 in both inner dims, batch > 1, or N x C x the next two dims > 20480): the weight's bytes
  plus max(input, output) bytes (its reorders into blocked formats);
- on torch's own path (a small fp32 input): the im2col buffer, input channels x kernel volume x output positions.

The rule is torch 2.13's ``use_mkldnn`` as it applies on the rig: more than one thread (its 1x1 clause then always
holds; the rig records ``torch_threads``: 2), a CPU with bf16 support (every bf16 convolution on oneDNN), and no
transposed convolution (none of these models has one).

It prints, per group, demand / dry-run peak and demand / (dry run with the transients), min / median / max, and
per kernel class the spread of the medians over architectures: one factor per class needs that spread near 1.
The model is an experiment, not part of the fit: the second column shows where it explains the factor and
where it does not.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RIG = "xeon-amx-2core"
ONEDNN_MIN_ELEMENTS = 20480  # torch's use_mkldnn: N x C x size(2) x size(3) above this takes oneDNN in fp32


def transient_bytes(args: tuple, out) -> int:
    """What one convolution (aten.convolution's ``args``, its output ``out``) holds beyond its live tensors."""
    import torch

    x, w, groups = args[0], args[1], args[8]
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    kernel = tuple(w.shape[2:])
    onednn = x.dtype != torch.float32 or groups > 1 or (kernel[-1] > 3 and kernel[-2] > 3) or x.shape[0] > 1 \
        or x.shape[0] * x.shape[1] * x.shape[2] * x.shape[3] > ONEDNN_MIN_ELEMENTS
    if onednn:
        return nbytes(w) + max(nbytes(x), nbytes(out))
    volume = 1
    for k in kernel:
        volume *= k
    return x.shape[1] * volume * out[0, 0].numel() * x.element_size()


def _patch(transient=transient_bytes) -> None:
    """Make every dry run of this process count the transients (``transient(args, out)`` bytes, bumped during
    each convolution) and keep the plain peak beside (``LAST[0].plain_peak``)."""
    import torch

    from vaemem.tracing import counter

    conv = torch.ops.aten.convolution.default

    class WithTransients(counter.LiveBytes):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            self.plain_peak = 0
            LAST[0] = self

        def track(self, t) -> None:
            super().track(t)
            self.plain_peak = max(self.plain_peak, self.current)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if func is conv and ENABLED[0]:
                self.bump(transient(args, out), self._stack[-1] if self._stack else "(top level)")
            return out

    counter.LiveBytes = WithTransients


LAST: list = [None]
ENABLED = [True]  # off: the patched counter counts as the plain one (a replayed call's peak is raised by bump)


def _dry(point: tuple) -> tuple[tuple, int, int, str]:
    """(point, plain dry-run peak, peak with the transients (bytes), the module at that peak)."""
    import gc

    from vaemem.tracing.trace import TraceSpec, trace

    model, op, dtype, width, height, frames = point
    result = trace(TraceSpec(model, op, dtype, width, height, frames=frames))
    plain = LAST[0].plain_peak
    gc.collect()
    return point, plain, result.peak_bytes, result.peak_module


def _points() -> dict[tuple, tuple[str, int]]:
    """The measured points this compares: point -> (kernel class, demand bytes)."""
    from vaemem.fit.coefficients import DOMAIN_MIN_FRAME_PIXELS, load_dataset
    from vaemem.models.zoo import get_spec

    data = load_dataset([ROOT / "measurements"])
    out = {}
    for key, pts in data.groups.values():
        for p in pts:
            q = p.point
            spec = get_spec(q["model"])
            if p.rig != RIG or q["tile"] or q["batch"] != 1 or q["attention"] != "fused" or q["slicing"] \
                    or q["conv3d"] != "native" or key["allocator"] != "glibc-fixed":
                continue
            area = q["width"] * q["height"]
            if area < DOMAIN_MIN_FRAME_PIXELS or (spec.is_video and (area > 320 * 192 or q["frames"] > 17)):
                continue
            out[(q["model"], key["op"], key["dtype"], q["width"], q["height"], q["frames"])] = (spec.kernel,
                                                                                              p.demand_bytes)
    return out


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    from vaemem.models.zoo import get_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-j", "--jobs", type=int, default=2, help="dry runs in parallel (processes)")
    jobs = parser.parse_args().jobs
    if jobs < 1:
        sys.exit("error: --jobs must be at least 1")
    points = _points()
    _patch()
    with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=20) as pool:
        dry = {r[0]: r[1:] for r in pool.imap_unordered(_dry, sorted(points), chunksize=1)}
    groups: dict[tuple, list[tuple]] = {}
    for p, (kernel, demand) in sorted(points.items()):
        plain, peak, where = dry[p]
        groups.setdefault((kernel, f"{p[2]} {p[1]}", p[0]), []).append((demand / plain, demand / peak, p, where))
    print(f"{len(points)} measured points of {RIG}; demand / dry-run peak, and / (dry run + convolution "
          f"transients): min / median / max")
    print(f"{'class':8s} {'dtype op':12s} {'architecture':18s} {'n':>3s}  {'demand / dry':18s}  demand / model")
    for (kernel, dop, model), rows in sorted(groups.items()):
        print(f"{kernel:8s} {dop:12s} {model:18s} {len(rows):3d}  {_spread([r[0] for r in rows]):18s}  "
              f"{_spread([r[1] for r in rows])}")
    print("\nper group, the points of the lowest and highest demand / model, and where the modelled peak is")
    for (kernel, dop, model), rows in sorted(groups.items()):
        for r in (min(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[1])):
            size = f"{r[2][3]}x{r[2][4]}" + (f"x{r[2][5]}" if r[2][5] > 1 or get_spec(model).is_video else "")
            print(f"{dop:12s} {model:18s} {size:12s} {r[1]:5.2f}  {r[3]}")
    print("\nper class, the medians over architectures (max / min: 1 would be one factor for the class)")
    classes: dict[tuple, list[tuple[float, float]]] = {}
    for (kernel, dop, _), rows in groups.items():
        classes.setdefault((kernel, dop), []).append((statistics.median(r[0] for r in rows),
                                                     statistics.median(r[1] for r in rows)))
    print_spreads(classes)


def print_spreads(classes: dict[tuple, list[tuple[float, float]]]) -> None:
    """Per class ((kernel, dtype and op)), the spread (max / min) of its architectures' median demand / dry run
    and demand / model."""
    for (kernel, dop), meds in sorted(classes.items()):
        a, b = [m[0] for m in meds], [m[1] for m in meds]
        print(f"{kernel:8s} {dop:12s} {len(meds)} architectures: dry {max(a) / min(a):.2f}, model "
              f"{max(b) / min(b):.2f}")


if __name__ == "__main__":
    main()
