"""Predicted wall time of a sweep, from comparable runs already measured (printed before a sweep starts).

Method: a run's wall time is taken as proportional to the pixels it touches (width x height x batch x frames) at
fixed model, op, dtype and tiling, plus the fixed start cost of a run (process, imports, build), which is the
measured ``run_wall_s - op_wall_s``. For each planned point the nearest measured point of the same model, op,
dtype, tiling and device type (closest in log pixels) scales its op time by the pixel ratio; without one, the
median seconds per pixel of the same op, dtype, device type and kernel class (conv2d or conv3d) is used, and the
point is counted as
"guessed"; with neither it is "unknown" and adds nothing. Runs of the sweep's own rig are asked first, then those
of any other rig file read: rigs differ by far more than sizes do (bf16 SD1.5 at 64-128 px took 84-227 s to
decode and 29-81 s to encode on an AVX2 EPYC, where convolution falls back to aten, and 0.1-2.3 s on an AMX
Xeon; predicted from both, a 48-point bf16 sweep of 6 minutes on the Xeon was put at 292). It is a plan, not a
promise: on this kind of machine a run's time varies by 30 % between processes.
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
    from_same_point_kind: int  # runs priced from a measured point of the same model/op/dtype/tiling/device type
    guessed: int  # runs priced from other models of the same kernel class
    unknown: int  # runs with nothing comparable (not counted in ``seconds``)

    def describe(self) -> str:
        if not self.runs:
            return "0 runs due"
        if self.unknown == self.runs:  # nothing comparable: no figure at all rather than 0.0 min
            return f"{self.runs} run{'' if self.runs == 1 else 's'}, time unknown (nothing comparable measured)"
        when = f"{self.seconds / 60:.1f} min" if self.seconds >= 60 else f"{self.seconds:.0f} s"  # 0.0 min said nothing
        parts = [f"{self.runs} run{'' if self.runs == 1 else 's'}, predicted {when}"]
        if self.guessed:
            parts.append(f"{self.guessed} from other models of the same kernel class")
        if self.unknown:
            parts.append(f"{self.unknown} with nothing comparable measured (not counted)")
        return "; ".join(parts)


def _kind(model: str, op: str, dtype: str, tiled: bool, device: str) -> tuple:
    """A point's kind for its time: the device type too (a GPU sweep's time is not a CPU's: a GPU plan in a folder
    of CPU campaigns was predicted by their times)."""
    return (model, op, dtype, tiled, device.split(":")[0])


def predict(points: Sequence[Point], history: Iterable[dict[str, Any]], rig: str | None = None) -> Eta:
    """Predicted wall seconds of running each of ``points`` once (pass a point twice for two runs) on ``rig``
    (its runs in ``history`` are asked first; None: every rig alike)."""
    tables = (_Rates(), _Rates())  # this rig's runs, every rig's
    names = registry()
    for r in history:
        if r.get("status") != "ok" or not r.get("op_wall_s") or r.get("model") not in names:
            continue
        own = rig is not None and r.get("rig", {}).get("name") == rig
        for t in tables if own else tables[1:]:
            t.add(r, names[r["model"]].tiny, names[r["model"]].kernel)
    starts = tables[0].starts or tables[1].starts
    start_s = statistics.median(starts) if starts else 5.0
    total, exact, guessed, unknown = 0.0, 0, 0, 0
    for p in points:
        kind = _kind(p.model, p.op, p.dtype, p.tile is not None, p.device_type)
        rate_key = (get_spec(p.model).kernel, p.op, p.dtype, p.device_type)
        for t in tables:  # this rig's runs of the kind, then of the class; then every rig's
            if kind in t.same:
                px, op_s = min(t.same[kind], key=lambda e: abs(math.log(e[0] / p.pixels)))
                total += start_s + op_s * p.pixels / px
                exact += 1
                break
            if rate_key in t.per_px:
                total += start_s + statistics.median(t.per_px[rate_key]) * p.pixels
                guessed += 1
                break
        else:
            unknown += 1
    return Eta(total, len(points), exact, guessed, unknown)


class _Rates:
    """Measured op times of one set of runs: (pixels, op seconds) per point kind, seconds per pixel per kernel
    class, op and dtype (real models only: a tiny model says nothing about a real one's speed), start costs."""

    def __init__(self) -> None:
        self.same: dict[tuple, list[tuple[int, float]]] = {}
        self.per_px: dict[tuple, list[float]] = {}
        self.starts: list[float] = []

    def add(self, r: dict[str, Any], tiny: bool, kernel: str) -> None:
        px, op_s = int(r["pixels"]), float(r["op_wall_s"])
        if r.get("run_wall_s"):
            self.starts.append(max(0.0, float(r["run_wall_s"]) - op_s))
        device = str(r.get("device", "cpu")).split(":")[0]
        self.same.setdefault(_kind(r["model"], r["op"], r["dtype"], bool(r.get("tile")), device), []).append(
            (px, op_s))
        if not tiny:
            self.per_px.setdefault((kernel, r["op"], r["dtype"], device), []).append(op_s / px)
