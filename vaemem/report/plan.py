"""A plan's calibration judged on the full campaigns: every point priced by the coefficients fitted from a plan's
runs alone, beside the full fit's held-out statistics on the same groups (issue 13).

A campaign point whose key the plan measured too is in-sample for the plan; every other point is held out from
it by construction (the plan never saw it). The full fit's column is its leave-one-size-out held-out statistic
(:func:`vaemem.report.structural.held_out`, groups with four or more sizes). Groups the full fit lists as
exceptions are reported apart, as are points on platforms the plan did not measure (priced by the fallback).
"""

from __future__ import annotations

import statistics
from typing import Any

from vaemem import estimate
from vaemem.fit.coefficients import Dataset, request_of
from vaemem.models.zoo import get_spec
from vaemem.report.structural import GOAL_MAX, GOAL_MEDIAN, _f, _stats, held_out


def compare(data: Dataset, plan_coef: dict[str, Any], full_coef: dict[str, Any], plan_keys: set[str],
            exceptions: dict[str, str], allocator: str = "glibc-fixed") -> dict[str, Any]:
    """Per group of ``data`` on ``allocator``: plan-fit ratios (reservation / demand) and the full fit's held out."""
    full_held = held_out(data, full_coef.get("structures", {}), full_coef["margin"])
    rows = []
    for gid, (key, pts) in sorted(data.groups.items()):
        if key["allocator"] != allocator or get_spec(pts[0].point["model"]).tiny:  # the tiny test models: not apps'
            continue
        ratios, held, sources = [], [], set()
        for p in pts:
            pt = p.point
            req = request_of(pt, key)
            if req is None:
                continue
            try:
                e = estimate.explain(pt["model"], key["op"], pt["width"], pt["height"], coefficients=plan_coef, **req)
            except ValueError as err:
                sources.add(f"refused: {err}")
                continue
            r = e.bytes / p.demand_bytes
            ratios.append(r)
            sources.add(e.source)
            if p.point_key not in plan_keys:
                held.append(r)
        rows.append({"group": gid, "points": len(pts), "plan_all": _stats(ratios) if ratios else None,
                     "plan_held_out": _stats(held) if held else None, "sources": sorted(sources),
                     "full_held_out": full_held.get(gid), "exception": gid in exceptions,
                     "platform_in_plan": bool(ratios) and "fallback" not in sources})
    return {"rows": rows, "goal": {"median": GOAL_MEDIAN, "max": GOAL_MAX}}


def _pool(stats: list[dict[str, Any]]) -> str:
    """min / median-of-medians / max over groups (medians are pooled by group, not by point)."""
    if not stats:
        return "-"
    under = sum(s["under"] for s in stats)
    n = sum(s["n"] for s in stats)
    text = f"{min(s['min'] for s in stats):.2f} / {statistics.median(s['median'] for s in stats):.2f} / " \
           f"{max(s['max'] for s in stats):.2f}"
    return (f"**{under}/{n} under**: " if under else "") + text


def markdown(result: dict[str, Any], title: str) -> str:
    g = result["goal"]
    out = [f"## {title}\n",
           f"Reservation / demand of every point, priced by the plan's fit (all points; held out: those the plan "
           f"did not measure) beside the full fit's leave-one-size-out held out. min / median / max; goal: no point "
           f"under 1, median <= {g['median']}, max <= {g['max']}.\n",
           "| group | points | plan fit, all | plan fit, held out | full fit, held out | priced by |",
           "|---|---|---|---|---|---|"]
    sections = [("", lambda r: r["platform_in_plan"] and not r["exception"]),
                ("Groups the full fit lists as exceptions", lambda r: r["platform_in_plan"] and r["exception"]),
                ("Platforms the plan did not measure (the fallback prices them, or the estimator refuses a dtype "
                 "measured on another)", lambda r: not r["platform_in_plan"])]
    for head, pick in sections:
        rows = [r for r in result["rows"] if pick(r)]
        if not rows:
            continue
        if head:
            out += [f"| **{head}** | | | | | |"]
        out += [f"| {r['group']} | {r['points']} | {_f(r['plan_all'])} | {_f(r['plan_held_out'])} | "
                f"{_f(r['full_held_out'])} | {', '.join(r['sources'])} |" for r in rows]
        out += [f"| pooled over these groups | {sum(r['points'] for r in rows)} | "
                f"{_pool([r['plan_all'] for r in rows if r['plan_all']])} | "
                f"{_pool([r['plan_held_out'] for r in rows if r['plan_held_out']])} | "
                f"{_pool([r['full_held_out'] for r in rows if r['full_held_out']])} | |"]
    return "\n".join(out) + "\n"
