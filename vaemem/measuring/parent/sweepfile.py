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
# Each key of a grid and the type of its list's items (res takes "WxH" strings or a bare side as an integer).
GRID_KEYS: dict[str, tuple[type, ...]] = {
    "models": (str,), "ops": (str,), "dtypes": (str,), "res": (str, int), "allocators": (str,),
    "batches": (int,), "frames": (int,), "tiles": (int,),
}
REQUIRED_KEYS = ("models", "ops", "dtypes", "res")


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


def _check_grid(path: Path, i: int, g: Any) -> None:
    """Refuse a grid with an unknown or missing key, or a value that is not a list of the key's type."""
    if not isinstance(g, dict):
        raise VaememError(f"{path}: grid {i} is not a table")
    unknown = set(g) - set(GRID_KEYS)
    if unknown:
        raise VaememError(f"{path}: grid {i} has unknown keys {sorted(unknown)}; known: {sorted(GRID_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in g]
    if missing:
        raise VaememError(f"{path}: grid {i} has no {', '.join(missing)}")
    for key, value in g.items():
        kinds = GRID_KEYS[key]
        if not isinstance(value, list) or not value or not all(
                isinstance(v, kinds) and not isinstance(v, bool) for v in value):
            names = " or ".join({str: "strings", int: "integers"}[k] for k in kinds)
            raise VaememError(f"{path}: grid {i}: {key} must be a non-empty list of {names}, not {value!r}")


def load_sweep(path: str | Path, device: str) -> Sweep:
    """Every point of the sweep file at ``path`` for ``device``, validated."""
    path = Path(path)
    data = _parse(path)
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise VaememError(f"{path}: no integer schema_version (this vaemem reads {SWEEP_SCHEMA_VERSION})")
    if version > SWEEP_SCHEMA_VERSION:
        raise VaememError(f"{path}: schema_version {version} is newer than this vaemem understands "
                          f"({SWEEP_SCHEMA_VERSION}); upgrade vaemem")
    if version != SWEEP_SCHEMA_VERSION:
        raise VaememError(f"{path}: schema_version {version!r} is not {SWEEP_SCHEMA_VERSION}, the one this vaemem reads")
    unknown = set(data) - {"schema_version", "runs", "grid"}
    if unknown:
        raise VaememError(f"{path}: unknown top-level keys {sorted(unknown)}; known: grid, runs, schema_version")
    runs = data.get("runs", 2)
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise VaememError(f"{path}: runs must be a positive integer, not {runs!r}")
    grids = data.get("grid")
    if not isinstance(grids, list) or not grids:
        raise VaememError(f"{path}: needs at least one [[grid]] table")
    points: list[Point] = []
    for i, g in enumerate(grids, 1):
        _check_grid(path, i, g)
        try:
            points += build_grid(g.get("models", []), g.get("ops", []), g.get("dtypes", []),
                                 [str(r) for r in g.get("res", [])], g.get("batches"), g.get("frames"),
                                 g.get("tiles"), g.get("allocators"), device)
        except VaememError as e:
            raise VaememError(f"{path}: grid {i}: {e}") from None
    merged = list(dict.fromkeys(points))
    return Sweep(merged, runs)
