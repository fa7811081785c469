"""The pixel lines against measured demand, beside the legacy rule and ComfyUI's: the schema-1 model, kept for
comparison and for the groups the file still prices by it.

Ratio = reservation / measured demand of a point (the largest of its runs). Below 1 is an under-reservation
(out-of-memory or spill), far above 1 is waste. Held-out: per group, each distinct pixel count in turn is left
out, the group's pixel line is refitted on the rest exactly as ``vaemem fit`` does (envelope, margin, rounding up)
and the left-out points are priced. The goal (:data:`GOAL_MIN_SIZES` or more pixel counts: no held-out
under-reservation, median at most :data:`GOAL_MEDIAN`, maximum at most :data:`GOAL_MAX`) is judged here only for
a group the file prices by its pixel line; a calibrated group's is judged by :mod:`vaemem.report.structural`,
on the calibration line that prices it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from vaemem import estimate
from vaemem.fit.coefficients import Dataset, PointDemand, request_of, stored_line
from vaemem.fit.envelope import fit_envelope

# the held-out goal, one definition for both reports (issue 10)
GOAL_MIN_SIZES = 4
GOAL_MEDIAN = 1.10
GOAL_MAX = 1.25
CALIBRATED = "calibrated"
UNPRICED = "fallback"  # no line of the file prices it: the declared fallback does
RULES = ("fitted", "held_out", "legacy", "comfy")


@dataclass(frozen=True)
class Stats:
    n: int
    under: int
    min: float
    median: float
    max: float

    @classmethod
    def of(cls, ratios: list[float]) -> Stats | None:
        if not ratios:
            return None
        return cls(len(ratios), sum(r < 1 for r in ratios), round(min(ratios), 4),
                   round(statistics.median(ratios), 4), round(max(ratios), 4))


@dataclass
class PointRatios:
    group: str
    point_key: str
    rig: str
    pixels: int
    demand_bytes: int
    fitted: float | None
    held_out: float | None
    legacy: float
    comfy: float
    calibrated: bool = False  # the file prices the group by a calibration line, not the fallback


def apps_bytes(p: PointDemand, key: dict[str, Any], coef: dict[str, Any]) -> dict[str, int]:
    """The apps' rules at a measured point (bytes): ``legacy``, ``comfyui`` and ``invokeai`` (their published
    per-model rules, :mod:`vaemem.estimate`), as both reports price them."""
    pt = p.point
    m = coef["models"][pt["model"]]
    kw = {"dtype": key["dtype"], "batch": pt["batch"], "frames": pt["frames"]}
    return {"legacy": estimate.legacy_bytes(key["op"], pt["width"], pt["height"], backend=key["conv_backend"],
                                            sd_family=m["family"] == "sd", tile=pt["tile"], **kw),
            "comfyui": estimate.comfy_bytes(key["op"], pt["width"], pt["height"],
                                            amd=key["conv_backend"] == "miopen", model=m, **kw),
            "invokeai": estimate.invokeai_bytes(key["op"], pt["width"], pt["height"], backend=key["conv_backend"],
                                                model=m, tile=pt["tile"], **kw)}


def _calibrated(p: PointDemand, key: dict[str, Any], coef: dict[str, Any]) -> bool:
    """Whether the file prices a measured point by a calibration line (its platform's, or one the estimator's
    declared order takes in its place), not by the fallback for a platform it never measured."""
    req = request_of(p.point, key)
    if req is None:
        return False
    try:
        e = estimate.explain(p.point["model"], key["op"], p.point["width"], p.point["height"], coefficients=coef,
                             **req)
    except ValueError:
        return False
    return e.source != "fallback"


def point_ratios(data: Dataset, coef: dict[str, Any]) -> list[PointRatios]:
    """Every measured point priced by each rule."""
    margin = coef["margin"]
    fitted_groups = {g["group"] for g in coef["groups"]}
    out = []
    for gid, (key, pts) in sorted(data.groups.items()):
        calibrated = gid not in fitted_groups and _calibrated(pts[0], key, coef)
        held: dict[str, float] = {}
        sizes = sorted({p.pixels for p in pts})
        if len(sizes) >= 3:
            for left in sizes:
                train = [p for p in pts if p.pixels != left]
                line = stored_line(fit_envelope([p.pixels for p in train], [p.demand_bytes for p in train],
                                                [p.tile_pixels for p in train] if key["tiled"] else None), margin)
                for p in pts:
                    if p.pixels == left:
                        held[p.point_key + p.rig] = line(p.pixels, p.tile_pixels) / p.demand_bytes
        for p in pts:
            pt = p.point
            fitted = None
            req = request_of(pt, key)
            if gid in fitted_groups and req is not None:
                try:
                    fitted = estimate.explain(pt["model"], key["op"], pt["width"], pt["height"], coefficients=coef,
                                              **req).bytes / p.demand_bytes
                except ValueError:  # a request the estimator refuses (a platform it deems impossible): no price
                    fitted = None
            rules = apps_bytes(p, key, coef)
            legacy, comfy = rules["legacy"] / p.demand_bytes, rules["comfyui"] / p.demand_bytes
            out.append(PointRatios(gid, p.point_key, p.rig, p.pixels, p.demand_bytes, fitted,
                                   held.get(p.point_key + p.rig), legacy, comfy, calibrated))
    return out


def summarize(rows: list[PointRatios]) -> dict[str, Any]:
    """Per group and overall: Stats for each rule, and whether the held-out goal is met (for a group the file
    prices by its pixel line: one with a ``fitted`` ratio; else :data:`CALIBRATED` where a calibration line prices
    it, :data:`UNPRICED` where the fallback does)."""
    groups: dict[str, list[PointRatios]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)

    def block(rs: list[PointRatios]) -> dict[str, Any]:
        stats = {rule: Stats.of([getattr(r, rule) for r in rs if getattr(r, rule) is not None]) for rule in RULES}
        return {rule: asdict(s) if s else None for rule, s in stats.items()}

    summary: dict[str, Any] = {"groups": {}, "overall": block(rows), "goal": {
        "min_resolutions": GOAL_MIN_SIZES, "held_out_median_max": GOAL_MEDIAN, "held_out_max_max": GOAL_MAX}}
    for gid, rs in sorted(groups.items()):
        b = block(rs)
        n_res = len({r.pixels for r in rs})
        h = b["held_out"]
        if b["fitted"] is None:
            # priced by a calibration (judged by vaemem.report.structural), else by no line of the file at all
            goal = CALIBRATED if any(r.calibrated for r in rs) else UNPRICED
        elif n_res < GOAL_MIN_SIZES or h is None:
            goal = "n/a"
        else:
            goal = "met" if (h["under"] == 0 and h["median"] <= GOAL_MEDIAN and h["max"] <= GOAL_MAX) else "missed"
        summary["groups"][gid] = {**b, "resolutions": n_res, "goal": goal}
    return summary


def _fmt(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return f"{s['under']}/{s['n']} under, {s['min']:.2f} / {s['median']:.2f} / {s['max']:.2f}"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (for the README and fits/REPORT.md)."""
    head = ("| group | sizes | fitted | pixel line held out | goal | legacy rule | ComfyUI |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = [f"| {gid} | {g['resolutions']} | {_fmt(g['fitted'])} | {_fmt(g['held_out'])} | {g['goal']} | "
             f"{_fmt(g['legacy'])} | {_fmt(g['comfy'])} |" for gid, g in summary["groups"].items()]
    o = summary["overall"]
    lines.append(f"| **all** | | {_fmt(o['fitted'])} | {_fmt(o['held_out'])} | | {_fmt(o['legacy'])} | "
                 f"{_fmt(o['comfy'])} |")
    note = ("\nEach cell: points under-reserved (ratio < 1) / points, then min / median / max of reservation ÷ "
            "measured demand. Held-out: each resolution left out of the pixel line's fit in turn. Goal (a group "
            f"priced by its pixel line, {GOAL_MIN_SIZES}+ resolutions): no held-out point under 1, median <= "
            f"{GOAL_MEDIAN}, max <= {GOAL_MAX}; a calibrated group's is judged on its calibration line, held out "
            "by size.\n")
    return head + "\n".join(lines) + "\n" + note


def rich_table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table("group", "sizes", "fitted", "pixel line held out", "goal", "legacy rule", "ComfyUI",
                  title="reservation / measured demand: under/n, min / median / max")
    for gid, g in summary["groups"].items():
        table.add_row(gid, str(g["resolutions"]), _fmt(g["fitted"]), _fmt(g["held_out"]), g["goal"],
                      _fmt(g["legacy"]), _fmt(g["comfy"]))
    o = summary["overall"]
    table.add_row("all", "", _fmt(o["fitted"]), _fmt(o["held_out"]), "", _fmt(o["legacy"]), _fmt(o["comfy"]))
    return table
