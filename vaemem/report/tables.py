"""Rich tables of finished sweeps."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Any

from vaemem.estimate import MIB


def spread(values: list[float]) -> float | None:
    """Run-to-run spread of demand: (max - min) / min, or None with fewer than two values."""
    if len(values) < 2 or min(values) <= 0:
        return None
    return (max(values) - min(values)) / min(values)


def sweep_table(records: list[dict[str, Any]]) -> Any:
    """One row per point: runs, statuses, max demand in MiB, run-to-run spread, median op seconds."""
    from rich.table import Table

    by_point: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_point[r["point_key"]].append(r)
    table = Table("point", "allocator", "runs", "status", "MiB", "spread", "op s",
                  title="sweep (MiB: max demand of the runs; spread: (max-min)/min; op s: median)")
    order = sorted(by_point, key=lambda k: (by_point[k][0]["model"], by_point[k][0]["op"], by_point[k][0]["dtype"],
                                            by_point[k][0]["allocator"], by_point[k][0]["tile"] or 0,
                                            by_point[k][0]["batch"], by_point[k][0]["frames"],
                                            by_point[k][0]["pixels"]))
    for key in order:
        rs = by_point[key]
        p = rs[0]
        ok = [r["demand_bytes"] / MIB for r in rs if r["status"] == "ok"]
        secs = [r["op_wall_s"] for r in rs if r.get("op_wall_s") is not None]
        sp = spread(ok)
        extra = "".join([f" b{p['batch']}" if p["batch"] > 1 else "", f" f{p['frames']}" if p["frames"] > 1 else "",
                         f" tile{p['tile']}" if p["tile"] else ""])
        table.add_row(f"{p['model']} {p['op']} {p['dtype']} {p['width']}x{p['height']}{extra}", p["allocator"],
                      str(len(rs)), ",".join(sorted({r["status"] for r in rs})), f"{max(ok):.1f}" if ok else "-",
                      f"{sp:.1%}" if sp is not None else "-", f"{statistics.median(secs):.2f}" if secs else "-")
    return table


def markdown_renderables(text: str) -> list[Any]:
    """The report's Markdown as rich renderables for the terminal: each table a rich table whose long cells wrap
    (rich's own Markdown rendering cut the group ids to the terminal's width), headings bold, other lines as they
    are. Tables are the report's own: one row a line, ``|`` between cells, the second line the separator."""
    from rich.table import Column, Table
    from rich.text import Text

    out: list[Any] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i].strip())
                i += 1
            if len(block) > 1 and re.fullmatch(r"\|[\s:|-]+\|", block[1]):  # the separator, not a row of "-"
                del block[1]
            rows = [_cells(r) for r in block]
            table = Table(*(Column(header=_inline(h), overflow="fold") for h in rows[0]))
            for row in rows[1:]:
                table.add_row(*map(_inline, row))
            out.append(table)
            continue
        out.append(Text(line.lstrip("# "), style="bold") if line.startswith("#") else _inline(line))
        i += 1
    return out


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells: split at the pipes that are not escaped, ``\\|`` a pipe in a cell."""
    inner = row[1:-1] if row.endswith("|") and not row.endswith("\\|") else row[1:]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _inline(text: str) -> Any:
    """A line of the report's Markdown as rich text: ``**bold**`` bold, code without its backticks."""
    from rich.text import Text

    out = Text()
    for k, part in enumerate(text.replace("`", "").split("**")):
        out.append(part, style="bold" if k % 2 else "")
    return out

