"""Sweep files: a committed, reviewable grid (TOML or JSON) for ``vaemem measure --sweep FILE``.

    schema_version = 1
    runs = 2                      # optional, default 2
    [[grid]]                      # one or more grids; their points are merged (a point named twice runs once)
    models = ["sd15", "flux1"]
    ops = ["decode", "encode"]
    dtypes = ["fp32", "bf16"]
    res = ["256", "512", "768x448"]
    allocators = ["glibc-fixed"]  # optional
    batches = [1, 2]              # optional
    frames = [17]                 # optional, video models
    tiles = [256]                 # optional
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError
from vaemem.measuring.point import Point, build_grid

SWEEP_SCHEMA_VERSION = 1
GRID_KEYS = {"models", "ops", "dtypes", "res", "allocators", "batches", "frames", "tiles"}


@dataclass(frozen=True)
class Sweep:
    points: list[Point]
    runs: int


def _parse(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise VaememError(f"cannot read sweep file {path}: {e.strerror}") from None
    try:
        if path.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except ValueError as e:
        raise VaememError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {e}") from None


def load_sweep(path: str | Path, device: str) -> Sweep:
    """Every point of the sweep file at ``path`` for ``device``, validated."""
    path = Path(path)
    data = _parse(path)
    version = data.get("schema_version")
    if version != SWEEP_SCHEMA_VERSION:
        raise VaememError(f"{path}: schema_version {version!r} is not {SWEEP_SCHEMA_VERSION}, the one this vaemem reads")
    grids = data.get("grid")
    if not isinstance(grids, list) or not grids:
        raise VaememError(f"{path}: needs at least one [[grid]] table")
    points: list[Point] = []
    for i, g in enumerate(grids, 1):
        unknown = set(g) - GRID_KEYS
        if unknown:
            raise VaememError(f"{path}: grid {i} has unknown keys {sorted(unknown)}; known: {sorted(GRID_KEYS)}")
        try:
            points += build_grid(g.get("models", []), g.get("ops", []), g.get("dtypes", []),
                                 [str(r) for r in g.get("res", [])], g.get("batches"), g.get("frames"),
                                 g.get("tiles"), g.get("allocators"), device)
        except VaememError as e:
            raise VaememError(f"{path}: grid {i}: {e}") from None
    merged = list(dict.fromkeys(points))
    return Sweep(merged, int(data.get("runs", 2)))
