"""Predicted wall time of a sweep, from comparable runs already measured (printed before a sweep starts).

Method: a run's wall time is taken as proportional to the pixels it touches (width x height x batch x frames) at
fixed model, op, dtype and tiling, plus the fixed start cost of a run (process, imports, build), which is the
measured ``run_wall_s - op_wall_s``. For each planned point the nearest measured point of the same model, op,
dtype and tiling (closest in log pixels, on any rig file read) scales its op time by the pixel ratio; without
one, the median seconds per pixel of the same op, dtype and kernel class (conv2d or conv3d) is used, and the
point is counted as "guessed"; with neither it is "unknown" and adds nothing. It is a plan, not a promise:
on this kind of machine a run's time varies by 30 % between processes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vaemem.measuring.point import Point
from vaemem.models.zoo import get_spec, registry


@dataclass(frozen=True)
class Eta:
    """Predicted seconds of a list of runs, and how each was predicted."""

    seconds: float
    runs: int
    from_same_point_kind: int  # runs priced from a measured point of the same model/op/dtype/tiling
    guessed: int  # runs priced from other models of the same kernel class
    unknown: int  # runs with nothing comparable (not counted in ``seconds``)

    def describe(self) -> str:
        parts = [f"{self.runs} runs, predicted {self.seconds / 60:.1f} min"]
        if self.guessed:
            parts.append(f"{self.guessed} from other models of the same kernel class")
        if self.unknown:
            parts.append(f"{self.unknown} with nothing comparable measured (not counted)")
        return "; ".join(parts)


def _kind(model: str, op: str, dtype: str, tiled: bool) -> tuple:
    return (model, op, dtype, tiled)


def predict(points: Sequence[Point], history: Iterable[dict[str, Any]]) -> Eta:
    """Predicted wall seconds of running each of ``points`` once (pass a point twice for two runs)."""
    same: dict[tuple, list[tuple[int, float]]] = {}
    per_px: dict[tuple, list[float]] = {}
    starts: list[float] = []
    names = registry()
    for r in history:
        if r.get("status") != "ok" or not r.get("op_wall_s") or r.get("model") not in names:
            continue
        px, op_s = int(r["pixels"]), float(r["op_wall_s"])
        if r.get("run_wall_s"):
            starts.append(max(0.0, float(r["run_wall_s"]) - op_s))
        same.setdefault(_kind(r["model"], r["op"], r["dtype"], bool(r.get("tile"))), []).append((px, op_s))
        if not names[r["model"]].tiny:  # a tiny model says nothing about a real one's speed
            per_px.setdefault((names[r["model"]].kernel, r["op"], r["dtype"]), []).append(op_s / px)
    start_s = statistics.median(starts) if starts else 5.0
    total, exact, guessed, unknown = 0.0, 0, 0, 0
    for p in points:
        found = same.get(_kind(p.model, p.op, p.dtype, p.tile is not None))
        if found:
            px, op_s = min(found, key=lambda e: abs(math.log(e[0] / p.pixels)))
            total += start_s + op_s * p.pixels / px
            exact += 1
            continue
        rates = per_px.get((get_spec(p.model).kernel, p.op, p.dtype))
        if rates:
            total += start_s + statistics.median(rates) * p.pixels
            guessed += 1
        else:
            unknown += 1
    return Eta(total, len(points), exact, guessed, unknown)
