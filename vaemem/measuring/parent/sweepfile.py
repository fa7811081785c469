"""Sweep files: a committed, reviewable grid (TOML or JSON) for ``vaemem measure --sweep FILE``.

Schema 1, a grid:

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
    overlaps = [0.25]             # optional, tiled points: tile overlap fraction (diffusers' default 0.25)
    slicing = [false, true]       # optional: diffusers' enable_slicing (applies to batches of more than one)
    attention = ["fused"]         # optional: fused SDPA kernel, or "math" (torch's math kernel only)
    conv3d = ["native"]           # optional: or "decomposed" (Wan, MiniMax-H3: conv3d as conv2d)

Schema 2, a plan (``vaemem plan`` writes it): points listed one by one in priority order, with the budget and
the cost model that predicted them; ``measure`` runs them in that order and, when the plan runs late, drops the
lowest-priority points (recorded as ``dropped-late``):

    schema_version = 2
    runs = 1
    device = "cpu"
    budget_min = 15.0
    [cost_model]                  # see vaemem.planning.cost
    start_s = 0.6
    build_s_per_mparam = 0.009
    source = "defaults:cpu"
    op_s_per_gib = { conv2d = 35.0, conv3d = 53.0 }
    [[point]]
    priority = 1                  # 1 first; unique
    model = "sd15"
    op = "decode"
    dtype = "fp32"
    res = "256"                   # or "WxH"
    allocator = "glibc-fixed"
    batch = 1                     # optional, default 1
    frames = 1                    # optional, default 1
    tile = 256                    # optional, default untiled
    overlap = 0.25                # optional, as slicing, attention and conv3d (one value each)
    predicted_s = 7.61
    why = "tier 1: sd15's conv2d line: smallest and largest size"
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError
from vaemem.files import schema_error
from vaemem.measuring.point import VARIANT_DEFAULTS, Point, build_grid, runs_error

SWEEP_SCHEMA_VERSION = 2  # 1: grids; 2: plans (a list of points with priorities and a budget)
# Each key of a grid and the type of its list's items (res takes "WxH" strings or a bare side as an integer).
GRID_KEYS: dict[str, tuple[type, ...]] = {
    "models": (str,), "ops": (str,), "dtypes": (str,), "res": (str, int), "allocators": (str,),
    "batches": (int,), "frames": (int,), "tiles": (int,), "overlaps": (float, int), "slicing": (bool,),
    "attention": (str,), "conv3d": (str,),
}
REQUIRED_KEYS = ("models", "ops", "dtypes", "res")


@dataclass(frozen=True)
class Sweep:
    points: list[Point]
    runs: int
    budget_s: float | None = None  # a plan's budget; None for a grid
    predicted_s: dict[str, float] | None = None  # a plan's predicted seconds per point key
    cost_model: dict[str, Any] | None = None


POINT_KEYS: dict[str, tuple[type, ...]] = {
    "priority": (int,), "model": (str,), "op": (str,), "dtype": (str,), "res": (str, int), "allocator": (str,),
    "batch": (int,), "frames": (int,), "tile": (int,), "predicted_s": (int, float), "why": (str,),
    "overlap": (float, int), "slicing": (bool,), "attention": (str,), "conv3d": (str,),
}
POINT_REQUIRED = ("priority", "model", "op", "dtype", "res", "allocator", "predicted_s")


def _parse(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")  # TOML is UTF-8, whatever the locale
    except OSError as e:
        raise VaememError(f"cannot read sweep file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise VaememError(f"{path}: not UTF-8 text, not a sweep file (TOML or JSON)") from None
    kind = "TOML" if path.suffix == ".toml" else "JSON"  # by its suffix: .toml is TOML, any other JSON
    try:
        if kind == "TOML":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except ValueError as e:
        raise VaememError(f"{path}: not valid {kind} (a sweep file is TOML, named *.toml, or JSON): {e}") from None


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
                isinstance(v, kinds) and (bool in kinds or not isinstance(v, bool)) for v in value):
            names = " or ".join({str: "strings", int: "integers", float: "numbers", bool: "true/false"}[k]
                                for k in kinds)
            raise VaememError(f"{path}: grid {i}: {key} must be a non-empty list of {names}, not {value!r}")


def load_sweep(path: str | Path, device: str) -> Sweep:
    """Every point of the sweep file at ``path`` for ``device`` (a plan carries its own device), validated."""
    path = Path(path)
    data = _parse(path)
    if not isinstance(data, dict):
        raise VaememError(f"{path}: not a sweep file (its top level must be a table of schema_version, runs and "
                          f"[[grid]]s, or a plan)")
    version = data.get("schema_version")
    wrong = schema_error(version, (1, SWEEP_SCHEMA_VERSION))  # 1 a sweep, 2 a plan
    if type(version) is not int:
        raise VaememError(f"{path}: {wrong} (this vaemem reads 1 and {SWEEP_SCHEMA_VERSION})")
    if set(data) - {"schema_version"} and not {"grid", "point", "runs"} & set(data):  # every sweep and plan has
        # held one: another file of ours (a coefficient file) is not a newer sweep to upgrade vaemem for
        raise VaememError(f"{path}: not a sweep file (no [[grid]], [[point]] or runs; its keys: "
                          f"{', '.join(sorted(data))}): write one as README's \"File formats\" shows, or with "
                          f"`vaemem plan`")
    if wrong:
        raise VaememError(f"{path}: {wrong}")
    if version == 2:
        return _load_plan(path, data)
    unknown = set(data) - {"schema_version", "runs", "grid"}
    if unknown:
        raise VaememError(f"{path}: unknown top-level keys {sorted(unknown)}; known: grid, runs, schema_version")
    runs = _runs(path, data)
    grids = data.get("grid")
    if not isinstance(grids, list) or not grids:
        raise VaememError(f"{path}: needs at least one [[grid]] table")
    points: list[Point] = []
    for i, g in enumerate(grids, 1):
        _check_grid(path, i, g)
        try:
            points += build_grid(g.get("models", []), g.get("ops", []), g.get("dtypes", []),
                                 [str(r) for r in g.get("res", [])], g.get("batches"), g.get("frames"),
                                 g.get("tiles"), g.get("allocators"), device, g.get("overlaps"), g.get("slicing"),
                                 g.get("attention"), g.get("conv3d"))
        except VaememError as e:
            raise VaememError(f"{path}: grid {i}: {e}") from None
    merged = list(dict.fromkeys(points))
    return Sweep(merged, runs)


def _runs(path: Path, data: dict[str, Any]) -> int:
    runs = data.get("runs", 2)
    if wrong := runs_error(runs, "runs"):
        raise VaememError(f"{path}: {wrong}")
    return runs


def _load_plan(path: Path, data: dict[str, Any]) -> Sweep:
    from vaemem.measuring.point import parse_res, validate

    unknown = set(data) - {"schema_version", "runs", "device", "budget_min", "cost_model", "point"}
    if unknown:
        raise VaememError(f"{path}: unknown top-level keys {sorted(unknown)} in a plan; known: budget_min, "
                          f"cost_model, device, point, runs, schema_version")
    runs = _runs(path, data)
    device, budget = data.get("device"), data.get("budget_min")
    if not isinstance(device, str):
        raise VaememError(f"{path}: a plan needs device (a string), not {device!r}")
    if not isinstance(budget, (int, float)) or isinstance(budget, bool) or not 0 < budget < 1e6:
        raise VaememError(f"{path}: budget_min must be a positive number of minutes (under 1e6), not {budget!r}")
    if not isinstance(data.get("cost_model"), dict):
        raise VaememError(f"{path}: a plan needs its [cost_model] table")
    from vaemem.planning.cost import CostModel

    CostModel.from_dict(data["cost_model"], str(path))  # refuses a damaged cost model (it is the plan's record)
    rows = data.get("point")
    if not isinstance(rows, list) or not rows:
        raise VaememError(f"{path}: a plan needs at least one [[point]] table")
    planned: list[tuple[int, Point, float]] = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise VaememError(f"{path}: point {i} is not a table")
        unknown = set(row) - set(POINT_KEYS)
        missing = [k for k in POINT_REQUIRED if k not in row]
        if unknown or missing:
            raise VaememError(f"{path}: point {i}: " + (f"unknown keys {sorted(unknown)}" if unknown else
                                                         f"no {', '.join(missing)}"))
        for key, value in row.items():
            if not isinstance(value, POINT_KEYS[key]) or (isinstance(value, bool) and bool not in POINT_KEYS[key]):
                raise VaememError(f"{path}: point {i}: {key} must be "
                                  f"{' or '.join(t.__name__ for t in POINT_KEYS[key])}, not {value!r}")
        try:
            w, h = parse_res(str(row["res"]))
            p = validate(Point(row["model"], row["op"], row["dtype"], w, h, row.get("batch", 1), row.get("frames", 1),
                               row.get("tile"), row["allocator"], device,
                               **{k: row.get(k, d) for k, d in VARIANT_DEFAULTS.items()}))
        except VaememError as e:
            raise VaememError(f"{path}: point {i}: {e}") from None
        if not 0 <= row["predicted_s"] < 1e9:
            raise VaememError(f"{path}: point {i}: predicted_s must be a finite non-negative number of seconds")
        if row["priority"] < 1:
            raise VaememError(f"{path}: point {i}: priority must be 1 or more (1 runs first)")
        planned.append((row["priority"], p, float(row["predicted_s"])))
    priorities = [q for q, _, _ in planned]
    if len(set(priorities)) != len(priorities):
        raise VaememError(f"{path}: point priorities must be unique")
    keys = [p.key for _, p, _ in planned]
    if len(set(keys)) != len(keys):
        raise VaememError(f"{path}: a point is listed twice")
    planned.sort(key=lambda e: e[0])
    return Sweep([p for _, p, _ in planned], runs, float(budget) * 60.0, {p.key: s for _, p, s in planned},
                 data["cost_model"])


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string (UTF-8: no JSON surrogate pairs)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def dumps_plan(device: str, budget_min: float, cost_model: dict[str, Any],
               points: list[tuple[int, Point, float, str]], header: str = "") -> str:
    """A plan as a schema-2 sweep file (deterministic text): ``points`` are (priority, point, predicted s, why)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"schema_version = {SWEEP_SCHEMA_VERSION}", "runs = 1", f"device = {_toml_value(device)}",
              f"budget_min = {_toml_value(float(budget_min))}", "", "[cost_model]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in cost_model.items()]
    for priority, p, predicted, why in points:
        res = f"{p.width}" if p.width == p.height else f"{p.width}x{p.height}"
        row = {"priority": priority, "model": p.model, "op": p.op, "dtype": p.dtype, "res": res,
               "allocator": p.allocator, **({"batch": p.batch} if p.batch != 1 else {}),
               **({"frames": p.frames} if p.frames != 1 else {}), **({"tile": p.tile} if p.tile else {}),
               **{k: getattr(p, k) for k, d in VARIANT_DEFAULTS.items() if getattr(p, k) != d},
               "predicted_s": predicted, "why": why}
        lines += ["", "[[point]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"
