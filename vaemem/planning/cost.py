"""The declared cost model of a run, for plans: what a point costs in wall seconds on a rig.

    run_s = start_s + build_s_per_mparam x parameters of the half the op runs (millions)
                    + op_s_per_gib[kernel class] x work (GiB)

where the work is the dry-run peak of the point untiled (from the packaged structures, no torch): it stands for
the compute of the whole image, which tiling does not reduce; the build term is the
seeded fill of the weights; ``start_s`` the process start and imports a launcher adds. The rates are a rig's: read
from its measured runs (medians, per kernel class) where the rig has any, else the declared defaults of its device
kind below; during a sweep the runner rescales the rest of a plan by what its finished runs really took. It is a
plan, not a promise: on this CPU the op time per GiB of dry-run peak spans 12-990 s across points (the dry-run
peak is a rough stand-in for FLOPs), which is why a plan re-predicts itself as it runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from vaemem import estimate
from vaemem.errors import VaememError
from vaemem.measuring.point import Point
from vaemem.models.zoo import OP_PARAMETERS, get_spec

GIB = 1024**3


@dataclass(frozen=True)
class CostModel:
    start_s: float
    build_s_per_mparam: float
    op_s_per_gib: dict[str, float]  # kernel class -> seconds of op per GiB of dry-run peak
    source: str  # "defaults:<device>" or "history:<rig> (<n> runs)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> "CostModel":
        try:
            rates = {str(k): float(v) for k, v in d["op_s_per_gib"].items()}
            model = cls(float(d["start_s"]), float(d["build_s_per_mparam"]), rates, str(d.get("source", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise VaememError(f"{where}: cost_model needs start_s, build_s_per_mparam and op_s_per_gib ({e})") from None
        import math

        values = [model.start_s, model.build_s_per_mparam, *rates.values()]
        if not all(math.isfinite(v) for v in values) or model.start_s < 0 or model.build_s_per_mparam < 0 \
                or any(v <= 0 for v in rates.values()):
            raise VaememError(f"{where}: cost_model rates must be finite and positive")
        return model

    def seconds(self, p: Point, work: float) -> float:
        """Predicted wall seconds of one run of ``p`` whose work (:func:`work_bytes`) is ``work``."""
        spec = get_spec(p.model)
        rate = self.op_s_per_gib.get(spec.kernel)
        if rate is None:
            raise VaememError(f"the cost model has no rate for {spec.kernel} ({self.source})")
        return self.start_s + self.build_s_per_mparam * OP_PARAMETERS[p.model][p.op] / 1e6 + rate * work / GIB


# Declared defaults per device kind. cpu: medians of this 2-core Xeon's 576 runs (fork launcher, fp32; see
# fits/REPORT.md). cuda: a guess for a current GPU (no GPU run was measured yet), replaced by the rig's own runs.
DEFAULTS = {
    "cpu": CostModel(0.6, 0.009, {"conv2d": 35.0, "conv3d": 53.0}, "defaults:cpu"),  # s/GiB of untiled dry peak
    "cuda": CostModel(3.0, 0.002, {"conv2d": 0.5, "conv3d": 1.0}, "defaults:cuda"),
}


def dry_bytes(p: Point, coef: dict[str, Any] | None = None) -> float:
    """The dry-run peak of ``p`` from the coefficient file's structures (the packaged file by default)."""
    doc = estimate.load(coef)
    d = estimate.dry_run_bytes(doc, p.model, p.op, p.width, p.height, dtype=p.dtype, batch=p.batch, frames=p.frames,
                               tile=p.tile, slicing=p.slicing and p.batch > 1)
    if d is None:
        raise VaememError(f"no dry-run structure for {p.key}: it cannot be planned (run `vaemem trace --zoo`)")
    return d


def work_bytes(p: Point, coef: dict[str, Any] | None = None) -> float:
    """The cost model's measure of a run's work: the dry-run peak of ``p`` untiled."""
    from dataclasses import replace

    return dry_bytes(replace(p, tile=None), coef)


def from_history(records: Iterable[dict[str, Any]], rig: str, device: str,
                 coef: dict[str, Any] | None = None) -> CostModel:
    """The rig's own rates (medians over its ok runs of real models), each missing one from the defaults."""
    kind = device.split(":")[0]
    base = DEFAULTS.get(kind) or replace(DEFAULTS["cuda"], source=f"defaults:cuda (none for {kind})")
    starts, builds, ops = [], [], {}  # type: ignore[var-annotated]
    n = 0
    for r in records:
        if r.get("rig", {}).get("name") != rig or r.get("status") != "ok" or r.get("kind"):
            continue
        try:
            spec = get_spec(r["model"])
            p = Point.from_dict(r)
            d = work_bytes(p, coef)
            dry_bytes(p, coef)  # only points a plan could take
        except (VaememError, KeyError, TypeError, ValueError):
            continue
        if spec.tiny or not r.get("op_wall_s") or not r.get("run_wall_s"):
            continue
        n += 1
        build = float(r.get("build_s") or 0.0)
        starts.append(max(0.0, float(r["run_wall_s"]) - float(r["op_wall_s"]) - build))
        builds.append(build / (OP_PARAMETERS[p.model][p.op] / 1e6))
        ops.setdefault(spec.kernel, []).append(float(r["op_wall_s"]) / (d / GIB))
    if not n:
        return base
    return CostModel(round(statistics.median(starts), 4), round(statistics.median(builds), 6),
                     {k: round(statistics.median(ops[k]), 4) if k in ops else v for k, v in base.op_s_per_gib.items()},
                     f"history:{rig} ({n} runs)")
