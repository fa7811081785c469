"""``vaemem plan``: the points that fix a platform's calibration, chosen from the dry runs, within a time budget.

A calibration line (``demand <= a x dry + b``, per architecture and pooled per kernel class) is fixed by points
whose dry-run peaks span a range; the rest of an architecture's demand comes from its structure. So a plan, per
platform key asked (op, dtype, allocator, tiled, batch), takes in declared priority tiers:

1. the first architecture of each kernel class asked (conv2d images; conv3d video when video is asked): its
   smallest and largest size of the device's ladder (for video at a longer clip, and at one frame: a regime of its
   own, with a factor and bytes of its own, so two points);
2. the other architectures of each class the same way (their own lines; transfer is checked, not assumed);
3. tiled points (the first conv2d architecture: two tile sizes at the larger image, one at the smaller) where
   tiling is asked;
4. a batch-2 point per class (the per-sample term) where batch is asked;
5. the middle sizes of the ladder, as checks.

Units (an architecture's line for one key: both ends of its range, and a one-frame clip for video) are added whole
in that order while the predicted time (:mod:`vaemem.planning.cost`) stays within the budget; a unit that would
overrun is skipped and cheaper later ones still tried. One run per point: under glibc-fixed and
the GPU allocators a run repeats to 0.1 %. The same inputs (and rig history) give the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vaemem.errors import VaememError
from vaemem.measuring.point import Point, validate
from vaemem.models.zoo import get_spec
from vaemem.planning.cost import CostModel, dry_bytes, work_bytes

# Declared order of architectures per kernel class: the most used first, then those whose factor differs from
# the class (DC-AE, HunyuanImage: structure.md), which need their own points.
ARCHITECTURES = {
    "conv2d": ("sd15", "flux1", "cogview4", "sana-dc-ae", "hunyuanimage-2.1", "flux2"),
    "conv3d": ("wan21", "hunyuanvideo", "ltx-video", "wan22", "minimax-h3"),
}
# Size ladders per device kind: images (WxH), video frames (WxH), image sizes and tile sizes of tiled points.
LADDERS = {
    "cpu": {"image": ("256", "384x256", "512"), "video": ("64", "96x64", "128"), "tiled": ("512", "768"),
            "tiles": (256, 384)},
    "cuda": {"image": ("512", "768", "1024", "1536"), "video": ("256", "480x272", "512"), "tiled": ("1536", "2048"),
             "tiles": (512, 1024)},
}


@dataclass(frozen=True)
class PlannedPoint:
    point: Point
    priority: int  # 1 = most informative; a late plan drops the highest numbers first
    predicted_s: float
    why: str


@dataclass(frozen=True)
class Plan:
    points: list[PlannedPoint]
    skipped: list[PlannedPoint]  # candidates that did not fit the budget
    budget_s: float
    device: str
    cost: CostModel

    @property
    def predicted_s(self) -> float:
        return sum(p.predicted_s for p in self.points)


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.partition("x")
    return int(w), int(h or w)


def _long_clip(model: str) -> int:
    spec = get_spec(model)
    step = spec.info.frame_step or spec.temporal_factor or 1
    return 1 + 2 * step


def candidates(device: str, ops: list[str], dtypes: list[str], allocators: list[str], video: bool, tiles: bool,
               batch: bool) -> list[tuple[int, list[Point], str]]:
    """(tier, points, why) units a plan may take, in priority order; a unit is taken whole or not at all (an
    architecture's line needs both ends of its range)."""
    kind = device.split(":")[0]
    ladder = LADDERS.get(kind, LADDERS["cuda"])
    classes = ["conv2d"] + (["conv3d"] if video else [])
    keys = [(op, dtype, alloc) for op in ops for dtype in dtypes for alloc in allocators]
    units: list[tuple[int, list[Point], str]] = []

    def point(model: str, op: str, dtype: str, alloc: str, res: str, **kw: Any) -> Point | None:
        if op not in get_spec(model).ops:
            return None
        w, h = _size(res)
        try:
            return validate(Point(model, op, dtype, w, h, allocator=alloc, device=device, **kw))
        except VaememError:
            return None  # e.g. a size off this architecture's spatial factor, a tile not smaller than the image

    def unit(tier: int, why: str, pts: list[Point | None]) -> None:
        kept = [p for p in pts if p is not None]
        if kept:
            units.append((tier, kept, why))

    def line(tier: int, kernel: str, model: str, op: str, dtype: str, alloc: str) -> None:
        sizes = ladder["image" if kernel == "conv2d" else "video"]
        if kernel == "conv2d":
            unit(tier, f"{model}'s conv2d line: smallest and largest size",
                 [point(model, op, dtype, alloc, sizes[0]), point(model, op, dtype, alloc, sizes[-1])])
        else:
            f = _long_clip(model)  # a one-frame clip is a regime of its own (its own factor and bytes): two points
            unit(tier, f"{model}'s conv3d line: smallest and largest clip of {f} frames and of one frame",
                 [point(model, op, dtype, alloc, sizes[0], frames=f), point(model, op, dtype, alloc, sizes[-1], frames=f),
                  point(model, op, dtype, alloc, sizes[0]), point(model, op, dtype, alloc, sizes[-1])])

    for op, dtype, alloc in keys:  # 1: every key's every class, by its first architecture
        for kernel in classes:
            line(1, kernel, ARCHITECTURES[kernel][0], op, dtype, alloc)
    depth = max(len(ARCHITECTURES[k]) for k in classes)
    for i in range(1, depth):  # 2: the other architectures, the classes taking turns
        for kernel in classes:
            if i < len(ARCHITECTURES[kernel]):
                for op, dtype, alloc in keys:
                    line(2, kernel, ARCHITECTURES[kernel][i], op, dtype, alloc)
    if tiles:  # 3: a tiled line (decode, the op apps tile most)
        model = ARCHITECTURES["conv2d"][0]
        small, large = ladder["tiled"]
        for op, dtype, alloc in keys:  # tile size and image size both vary: a tiled line spans both
            unit(3, f"{model}'s tiled line: two tile sizes at {large}, one at {small}",
                 [point(model, op, dtype, alloc, large, tile=t) for t in ladder["tiles"]]
                 + [point(model, op, dtype, alloc, small, tile=ladder["tiles"][0])])
    if batch:  # 4: the per-sample term
        for kernel in classes:
            model = ARCHITECTURES[kernel][0]
            sizes = ladder["image" if kernel == "conv2d" else "video"]
            extra = {} if kernel == "conv2d" else {"frames": _long_clip(model)}
            for op, dtype, alloc in keys:
                unit(4, f"the {kernel} class's per-sample term", [point(model, op, dtype, alloc, sizes[0], batch=2,
                                                                         **extra)])
    for kernel in classes:  # 5: checks at the middle sizes
        sizes = ladder["image" if kernel == "conv2d" else "video"]
        for model in ARCHITECTURES[kernel]:
            extra = {} if kernel == "conv2d" else {"frames": _long_clip(model)}
            for op, dtype, alloc in keys:
                for res in sizes[1:-1]:
                    unit(5, f"a check of {model}'s line at a middle size", [point(model, op, dtype, alloc, res,
                                                                                   **extra)])
    return units


def make_plan(budget_min: float, device: str, cost: CostModel, ops: list[str], dtypes: list[str],
              allocators: list[str], video: bool = True, tiles: bool = True, batch: bool = True,
              coef: dict[str, Any] | None = None) -> Plan:
    """The plan: candidate units in priority order, each taken whole where it fits in what the budget has left
    (first fit: a unit that does not fit is left out, a later, cheaper one may still be taken)."""
    if not 0 < budget_min < 1e6:  # nan and inf too
        raise VaememError(f"--budget-min must be a positive number of minutes (under 1e6), got {budget_min:g}")
    for dtype in dtypes:  # a key the device cannot take is an error, not a plan without its points
        for alloc in allocators:
            validate(Point(ARCHITECTURES["conv2d"][0], ops[0] if ops else "decode", dtype, 256, 256,
                           allocator=alloc, device=device))
    budget_s = budget_min * 60.0
    taken: list[PlannedPoint] = []
    skipped: list[PlannedPoint] = []
    seen: set[str] = set()
    total = 0.0
    priority = 0
    cheapest_unit = None
    for tier, pts, why in candidates(device, ops, dtypes, allocators, video, tiles, batch):
        pts = [p for p in pts if p.key not in seen]  # a point asked twice is planned once, at its best tier
        if not pts:
            continue
        try:
            for p in pts:
                dry_bytes(p, coef)  # a structure must cover the point itself, or nothing calibrates against it
            costs = [round(cost.seconds(p, work_bytes(p, coef)), 2) for p in pts]
        except VaememError:  # no structure covers it: nothing to calibrate it against
            continue
        fits = total + sum(costs) <= budget_s
        cheapest_unit = sum(costs) if cheapest_unit is None else min(cheapest_unit, sum(costs))
        for p, c in zip(pts, costs):
            priority += 1
            (taken if fits else skipped).append(PlannedPoint(p, priority, c, f"tier {tier}: {why}"))
            seen.add(p.key)
        if fits:
            total += sum(costs)
    if not taken:
        cheapest = f" (the cheapest unit of points is predicted {cheapest_unit:.0f} s)" if cheapest_unit else ""
        raise VaememError(f"no point fits {budget_min:g} min on {device}{cheapest}")
    return Plan(taken, skipped, budget_s, device, cost)
