"""Judging the structural model on measured points: measured / dry-run ratios, held-out calibration lines,
leave-one-architecture-out transfer, and the apps' rules on the same points.

* **Measured / dry run** per group: demand divided by the dry-run peak its architecture's structure gives.
* **Held out** (per architecture and platform, 4+ points over 2+ image sizes): each image size (width x height
  x tile, all its frame counts and batches together) is left out in turn, the architecture's calibration line is refitted on the
  rest exactly as ``vaemem fit`` does (envelope, margin, rounding up) and the left-out points are priced.
* **Leave one architecture out** (per platform and kernel class, 2+ architectures): the class line and the
  architectures' transfer lines are refitted without architecture X and X's points are priced by the highest of
  them: what transfer would have reserved.
"""

from __future__ import annotations

import statistics
from typing import Any

from vaemem import estimate
from vaemem.errors import VaememError
from vaemem.fit.coefficients import (DOMAIN_MIN_FRAME_PIXELS, FLOOR_NAMES, Dataset, held_out_prices, own_line,
                                     own_lines, priced_as, request_of, row_of, split_variants, variant_of)
from vaemem.measuring.point import variant_suffix
from vaemem.models.zoo import get_spec
from vaemem.report.accuracy import GOAL_MAX, GOAL_MEDIAN, GOAL_MIN_SIZES, apps_bytes

LOAO_MEDIAN, LOAO_LIST = 1.15, 1.35


def _stats(ratios: list[float]) -> dict[str, Any]:
    return {"n": len(ratios), "under": sum(r < 1 for r in ratios), "min": round(min(ratios), 4),
            "median": round(statistics.median(ratios), 4), "max": round(max(ratios), 4)}


def _points(data: Dataset, structures: dict[str, Any]) -> dict[str, list[tuple]]:
    """Per calibration id: (architecture, group id, point, dry, dry of one sample, demand, single frame, frame
    pixels, weight copy bytes, the live tensors' dry run, group key, variant as the fit keys it): the point and its
    group as the fit takes them (:func:`vaemem.fit.coefficients.priced_as`: a tiled point whose tile is the whole
    image is untiled; :func:`vaemem.fit.coefficients.variant_of`: a math-path point whose score matrices do not lead
    is in its plain group), the dry runs those the platform's lines are in (:func:`vaemem.fit.coefficients.row_of`)."""
    out: dict[str, list[tuple]] = {}
    for _, (key, pts) in sorted(data.groups.items()):  # in the fit's order (calibrate)
        kernel = get_spec(pts[0].point["model"]).kernel
        for p in pts:
            point, as_key = priced_as(p.point, key, structures)
            r = row_of(point, as_key, structures)
            if r is not None:
                variant, suffix = variant_of(point, as_key, structures), variant_suffix(point)
                if "/math" in suffix and "/math" not in variant:
                    suffix = suffix.replace("/math", "")
                out.setdefault(estimate.calibration_id(as_key, kernel), []).append(
                    (key["architecture"], estimate.group_id(as_key) + suffix, point, r[0], r[1], p.demand_bytes,
                     *r[3:], as_key, variant))
    return out


def dry_ratios(data: Dataset, structures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per group: min / median / max of measured demand / dry-run peak (of the live tensors)."""
    rows: dict[str, list[float]] = {}
    for entries in _points(data, structures).values():
        for e in entries:
            rows.setdefault(e[1], []).append(e[5] / e[9])
    return {gid: _stats(r) for gid, r in sorted(rows.items())}


def _price(line: dict[str, Any], e: tuple) -> float:
    """A calibration line at the point of entry ``e`` (architecture, group, point, dry, dry1, demand, single, frame
    pixels, weight copy: a line with ``weight_copy_factor`` adds it, live tensors' dry run)."""
    return estimate.calibration_bytes(line, e[3], e[4], e[6], e[7], e[8], live=e[9])


def _worst(e: tuple, ratio: float) -> dict[str, Any]:
    """The point of entry ``e`` priced at ``ratio`` x its demand, as a report names it (where the model is most
    wrong: a group's or a left-out architecture's lowest ratio where one is under, else its highest)."""
    p = e[2]
    return {"point": f"{p['model']} {p['width']}x{p['height']}" + (f" x {p['frames']}" if p["frames"] > 1 else "")
            + (f", batch {p['batch']}" if p["batch"] > 1 else "") + (f", {p['tile']} px tiles" if p.get("tile") else ""),
            "demand_mib": round(e[5] / estimate.MIB, 1), "priced_mib": round(ratio * e[5] / estimate.MIB, 1),
            "ratio": round(ratio, 4)}


def held_out(data: Dataset, structures: dict[str, Any], margin: float) -> dict[str, dict[str, Any]]:
    """Per group with 4+ sizes: held-out ratios of its own calibration line at every size, and (``domain``) at the
    sizes of the calibration domain, where the goal is judged when they are 4 or more."""
    out = {}
    for entries in _points(data, structures).values():
        by_group: dict[str, list[tuple]] = {}
        for e in entries:
            by_group.setdefault(e[1], []).append(e)
        for gid, rows in sorted(by_group.items()):
            copies = rows[0][10]["conv_backend"] in estimate.WEIGHT_COPY_BACKENDS
            size = lambda e: (e[2]["width"], e[2]["height"], e[2]["tile"])  # noqa: E731
            sizes = sorted({size(e) for e in rows}, key=str)
            if len(rows) < GOAL_MIN_SIZES or len(sizes) < 2:
                continue
            priced: list[tuple[float, tuple]] = []  # (reservation / demand, entry) of every held-out point
            for left in sizes:
                train = [(e[3], e[4], e[5], e[6], e[7], e[8], e[9]) for e in rows if size(e) != left]
                if len({t[0] for t in train}) < 2:
                    continue
                line = own_line(train, margin, copies)
                priced += [(_price(line, e) / e[5], e) for e in rows if size(e) == left]
            ratios = [r for r, _ in priced]
            inside = [r for r, e in priced if e[7] >= DOMAIN_MIN_FRAME_PIXELS]
            if ratios:
                s = _stats(ratios)
                s["sizes"] = len(sizes)
                n_inside = len({size(e) for e in rows if e[7] >= DOMAIN_MIN_FRAME_PIXELS})
                s["domain_sizes"] = n_inside
                s["domain"] = _stats(inside) if inside else None
                d = s["domain"]
                judged = d if n_inside else s  # a group measured only below the domain has one line: every size
                s["goal"] = ("met" if judged["under"] == 0 and judged["median"] <= GOAL_MEDIAN
                             and judged["max"] <= GOAL_MAX else "missed") \
                    if n_inside >= GOAL_MIN_SIZES or n_inside == 0 else f"n/a ({n_inside} sizes in the domain)"
                # where the model is most wrong among the judged points: the lowest where one is under, else the
                # highest
                judged_points = [q for q in priced if not n_inside or q[1][7] >= DOMAIN_MIN_FRAME_PIXELS]
                r, e = min(judged_points, key=lambda q: q[0]) if judged["under"] else \
                    max(judged_points, key=lambda q: q[0])
                s["worst"] = _worst(e, r)
                out[gid] = s
    return out


def leave_one_architecture_out(data: Dataset, structures: dict[str, Any], margin: float) -> list[dict[str, Any]]:
    """Per platform, kernel class and architecture X (2+ architectures): X priced as a transfer from the rest
    (:func:`vaemem.fit.coefficients.held_out_prices`, whose ratios also decide whether a class agrees)."""
    out = []
    points = _points(data, structures)

    def keyed(entries: list[tuple]) -> tuple[dict[str, list[tuple]], dict[str, list[tuple]], dict[str, list[tuple]]]:
        """(rows per architecture, per architecture and variant, as the fit keeps them, and the entries of the
        latter's rows)."""
        per_arch: dict[str, list[tuple]] = {}
        per_key: dict[str, list[tuple]] = {}
        of_key: dict[str, list[tuple]] = {}
        for e in entries:
            row = (e[3], e[4], e[5], e[6], e[7], e[8], e[9])
            per_arch.setdefault(e[0], []).append(row)
            per_key.setdefault(e[0] + e[11], []).append(row)
            of_key.setdefault(e[0] + e[11], []).append(e)
        return per_arch, per_key, of_key

    for cid, entries in sorted(points.items()):
        per_arch, per_key, of_key = keyed(entries)
        if len(per_arch) < 2:
            continue
        copies = entries[0][10]["conv_backend"] in estimate.WEIGHT_COPY_BACKENDS
        # a tiled class: each architecture's own untiled line on the platform, which a tiled transfer also takes
        twin = estimate.untiled_twin(cid)
        untiled = own_lines(split_variants(keyed(points[twin])[1])[0], margin, copies) if twin in points else {}
        # why a listed one is: its own demand / dry run against the others' (medians over the domain's points)
        factor = {a: round(statistics.median(r[2] / r[0] for r in rows if r[4] >= DOMAIN_MIN_FRAME_PIXELS)
                           if any(r[4] >= DOMAIN_MIN_FRAME_PIXELS for r in rows)
                           else statistics.median(r[2] / r[0] for r in rows), 3) for a, rows in per_arch.items()}
        for x, prices in held_out_prices(per_key, margin, copies, untiled, twin is not None).items():
            others = [factor[a] for a in per_arch if a != x]
            row = {"calibration": cid, "architecture": x, "trained_on": sorted(a for a in per_arch if a != x),
                   **_stats([p[0] for p in prices]), "demand_per_dry": factor[x],
                   "others_demand_per_dry": [min(others), max(others)]}
            row["listed"] = row["under"] > 0 or row["max"] > LOAO_LIST
            # the point that lists it (its lowest where under, else its highest): which line priced it, and the
            # share of that price the weight copy added
            worst = min(prices) if row["under"] else max(prices)
            row["worst_line"], row["worst_copy_share"] = worst[1], round(worst[2], 3)
            # its entries in held_out_prices' order: per key, sorted, the points in the calibration domain
            priced = [e for k in sorted(of_key) if estimate.variant_parts(k)[0] == x for e in of_key[k]
                      if e[7] >= DOMAIN_MIN_FRAME_PIXELS]
            if len(priced) != len(prices):
                raise VaememError(f"internal error, a vaemem bug: {len(prices)} prices of {x} in {cid} for "
                                  f"{len(priced)} points")
            row["worst"] = _worst(priced[prices.index(worst)], worst[0])
            out.append(row)
    return out


def apps_side_by_side(data: Dataset, coef: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per group: reservation / demand of vaemem (the file as fitted), the legacy rule, ComfyUI's and
    InvokeAI's published per-model rules, on the same points."""
    out = {}
    for gid, (key, pts) in sorted(data.groups.items()):
        cols: dict[str, list[float]] = {"vaemem": [], "legacy": [], "comfyui": [], "invokeai": []}
        for p in pts:
            pt = p.point
            req = request_of(pt, key)
            try:
                if req is None:
                    continue
                mine = estimate.explain(pt["model"], key["op"], pt["width"], pt["height"], coefficients=coef,
                                        **req).bytes
            except ValueError:
                continue
            cols["vaemem"].append(mine / p.demand_bytes)
            for rule, v in apps_bytes(p, key, coef).items():
                cols[rule].append(v / p.demand_bytes)
        if cols["vaemem"]:
            out[gid] = {k: _stats(v) for k, v in cols.items()}
    return out


def demand_tables(data: Dataset) -> dict[str, list[dict[str, Any]]]:
    """Demand in MiB against frames (video), tile size (tiled) and batch, per architecture, op and platform."""
    frames: list[dict[str, Any]] = []
    tiles: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    for gid, (key, pts) in sorted(data.groups.items()):
        for p in pts:
            pt = p.point
            row = {"group": gid, "width": pt["width"], "height": pt["height"], "frames": pt["frames"],
                   "tile": pt["tile"], "batch": pt["batch"], "demand_mib": round(p.demand_bytes / 2**20, 1)}
            if get_spec(pt["model"]).is_video and not pt["tile"] and pt["batch"] == 1:
                frames.append(row)
            if pt["tile"]:
                tiles.append(row)
            if pt["batch"] > 1:
                batches.append(row)
    # batch tables carry their batch-1 points too, for the ratio
    batch_groups = {(r["group"], r["width"], r["height"], r["frames"]) for r in batches}
    for gid, (key, pts) in sorted(data.groups.items()):
        for p in pts:
            pt = p.point
            if pt["batch"] == 1 and not pt["tile"] and (gid, pt["width"], pt["height"], pt["frames"]) in batch_groups:
                batches.append({"group": gid, "width": pt["width"], "height": pt["height"], "frames": pt["frames"],
                                "tile": None, "batch": 1, "demand_mib": round(p.demand_bytes / 2**20, 1)})
    key = lambda r: (r["group"], r["width"], r["height"], r["tile"] or 0, r["frames"], r["batch"])  # noqa: E731
    return {"frames": sorted(frames, key=key), "tiles": sorted(tiles, key=key), "batch": sorted(batches, key=key)}


MATH_SIZES = ((1024, 1024, 1), (2048, 2048, 1))  # images; a video architecture also at 832x480 x 81 frames
MATH_CLIP = (832, 480, 81)


def attention_paths(coef: dict[str, Any]) -> list[dict[str, Any]]:
    """Per architecture with an attention structure: its bf16 dry-run peak on the fused and the math path at
    the sizes apps run, from the file's structures (what the estimator prices before calibration)."""
    rows = []
    for name, m in sorted(coef["models"].items()):
        if m["architecture"] != name or not m.get("attention_ops"):
            continue
        sizes = MATH_SIZES + ((MATH_CLIP,) if m["temporal_factor"] is not None else ())
        for op in m["attention_ops"]:
            for w, h, f in sizes:
                kw = dict(dtype="bf16", frames=f)
                try:
                    fused = estimate.dry_run_bytes(coef, name, op, w, h, **kw)
                    math = estimate.dry_run_bytes(coef, name, op, w, h, attention="math", **kw)
                except ValueError:  # a size or clip length this model cannot take
                    continue
                if fused is None or math is None:
                    continue
                rows.append({"architecture": name, "op": op, "width": w, "height": h, "frames": f,
                             "fused_mib": round(fused / 2**20), "math_mib": round(math / 2**20),
                             "ratio": round(math / fused, 2)})
    return rows


def summary(data: Dataset, coef: dict[str, Any]) -> dict[str, Any]:
    """Every structural table, as one JSON-ready dict."""
    structures, margin = coef.get("structures", {}), coef["margin"]
    return {"dry_ratios": dry_ratios(data, structures), "held_out": held_out(data, structures, margin),
            "leave_one_architecture_out": leave_one_architecture_out(data, structures, margin),
            "apps": apps_side_by_side(data, coef), "tables": demand_tables(data),
            "attention_paths": attention_paths(coef),
            "goal": {"held_out_median_max": GOAL_MEDIAN, "held_out_max_max": GOAL_MAX, "min_sizes": GOAL_MIN_SIZES,
                     "domain_min_frame_pixels": DOMAIN_MIN_FRAME_PIXELS,
                     "loao_median_max": LOAO_MEDIAN, "loao_listed_above": LOAO_LIST}}


def _f(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    under = f"**{s['under']}/{s['n']} under**: " if s["under"] else ""
    return f"{under}{s['min']:.2f} / {s['median']:.2f} / {s['max']:.2f}"


def _line_named(name: str) -> str:
    """A transfer line as :func:`vaemem.estimate.transfer_bytes` names it, in the estimator's words. A class line
    that ties an architecture's (with two architectures left, the higher one's) is named the class line."""
    if name == "class":
        return "the class line"
    if name == estimate.OWN_UNTILED:
        return name
    if name in FLOOR_NAMES.values():
        return f"the {name}"
    return estimate.transfer_line_words(name)


def _listed(r: dict[str, Any]) -> str:
    """The listed column of a leave-one-architecture-out row: why, from its demand / dry run against the others',
    the line that priced its lowest point (under) or its highest (over), and the share of that price the weight
    copy added where it is a tenth or more."""
    if not r["listed"]:
        return ""
    lo, hi = r["others_demand_per_dry"]
    if r["under"]:
        why = ["its demand / dry above the others'"] if r["demand_per_dry"] > hi else []
    else:
        why = ["its demand / dry below the others'"] if r["demand_per_dry"] < lo else []
    why.append(f"{'at its lowest' if r['under'] else 'at its highest'} priced by {_line_named(r['worst_line'])}")
    if r["worst_copy_share"] >= 0.1:  # a weight copy that is a tenth of the price or more: say so
        why.append(f"{r['worst_copy_share']:.0%} of it the weight copy")
    w = r["worst"]
    return (f"{'under' if r['under'] else 'over'}: " + ", ".join(why)
            + f"; {w['point']}: {w['demand_mib']:.1f} -> {w['priced_mib']:.1f} MiB")


NO_STRUCTURE = "no measured group has a dry-run structure (the tiny test models have none)"


def _table(head: list[str], rows: list[str], none: str) -> list[str]:
    """A Markdown table, or where it has no row a line saying why (not a table of headers alone)."""
    return [*head, *rows] if rows else [f"None: {none}."]


def markdown(s: dict[str, Any]) -> str:
    """The structural tables as Markdown (min / median / max of reservation or demand ratios)."""
    out = ["## Measured demand / dry-run peak, per group\n"]
    out += _table(["| group | points | min / median / max |", "|---|---|---|"],
                  [f"| {g} | {r['n']} | {r['min']:.3f} / {r['median']:.3f} / {r['max']:.3f} |"
                   for g, r in s["dry_ratios"].items()], NO_STRUCTURE)
    out += ["", "## Held out: each size left out of its architecture's calibration line in turn\n",
            f"Goal ({s['goal']['min_sizes']}+ sizes in the calibration domain, frames of at least "
            f"{s['goal']['domain_min_frame_pixels']} px): no point under 1, median <= "
            f"{s['goal']['held_out_median_max']}, max <= {s['goal']['held_out_max_max']}, judged in the domain (at every "
            f"size for a group measured only below it); the ratio at every size beside it (below the domain the line "
            f"of the points measured there prices).\n"]
    out += _table(["| group | sizes (in the domain) | points | held out, in the domain | held out, every size | goal "
                   "| its worst point: demand -> priced MiB |", "|---|---|---|---|---|---|---|"],
                  [f"| {g} | {r['sizes']} ({r['domain_sizes']}) | {r['n']} | {_f(r['domain'])} | {_f(r)} | "
                   f"{r['goal']} | {r['worst']['point']}: {r['worst']['demand_mib']:.1f} -> "
                   f"{r['worst']['priced_mib']:.1f} |" for g, r in s["held_out"].items()],
                  f"no group with a dry-run structure has {s['goal']['min_sizes']} points of two sizes or more")
    out += ["", "## Leave one architecture out: its points priced as a transfer from the others (the highest of "
            "their class line and each one's line)\n",
            f"Goal: no point under 1, median <= {s['goal']['loao_median_max']}; listed: under, or a point above "
            f"{s['goal']['loao_listed_above']}. Points in the calibration domain. Demand / dry run: the medians "
            f"over the domain's points (over all its points where none is in it), its own and the others' range, "
            f"of the dry run the lines are in (on oneDNN with the buffers its ops hold, the untiled structure's "
            f"onednn_hidden_factor at the clip's length x the plain one); a listed architecture's reason is there "
            f"(docs/results.md, \"Why the architectures of a class disagree\").\n"]
    out += _table(["| calibration | left out | trained on | ratio | its demand / dry | the others' | listed |",
                   "|---|---|---|---|---|---|---|"],
                  [f"| {r['calibration']} | {r['architecture']} | {', '.join(r['trained_on'])} | {_f(r)} | "
                   f"{r['demand_per_dry']:.2f} | {r['others_demand_per_dry'][0]:.2f}-"
                   f"{r['others_demand_per_dry'][1]:.2f} | {_listed(r)} |" for r in s["leave_one_architecture_out"]],
                  "no platform and kernel class has two architectures measured with dry-run structures")
    out += ["", "## Reservation / demand: vaemem against the apps' rules, same points\n"]
    out += _table(["| group | vaemem | legacy rule | ComfyUI | InvokeAI |", "|---|---|---|---|---|"],
                  [f"| {g} | {_f(r['vaemem'])} | {_f(r['legacy'])} | {_f(r['comfyui'])} | {_f(r['invokeai'])} |"
                   for g, r in s["apps"].items()], "no measured point is a request the estimator prices")
    if s.get("attention_paths"):
        out += ["", "## The math attention path: dry-run peak (MiB, bf16) against the fused path\n",
                "Where no fused SDPA kernel runs, the score matrices are materialised; the estimator prices "
                "`max(fused structure, attention structure)`.\n", "| architecture | op | size | frames | fused | math "
                "| math / fused |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['architecture']} | {r['op']} | {r['width']}x{r['height']} | {r['frames']} | {r['fused_mib']} | "
                f"{r['math_mib']} | {r['ratio']:.2f} |" for r in s["attention_paths"]]
    for name, title, col in (("frames", "Video: demand (MiB) against frames", "frames"),
                             ("tiles", "Tiled: demand (MiB) against tile size", "tile"),
                             ("batch", "Batch: demand (MiB) against batch", "batch")):
        rows = s["tables"][name]
        if not rows:
            continue
        out += ["", f"## {title}\n", f"| group | size | {col} | demand MiB |", "|---|---|---|---|"]
        out += [f"| {r['group']} | {r['width']}x{r['height']} | {r[col]} | {r['demand_mib']:.1f} |" for r in rows]
    return "\n".join(out) + "\n"
