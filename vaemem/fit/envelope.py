"""The upper-envelope fit: the tightest line that no measured point lies above.

Model: ``demand(pixels) <= slope * pixels + tile_slope * tile_pixels + base``, with slope, tile_slope, base >= 0.

Objective: among all lines on or above every point, minimise the total *relative* over-reservation
``sum_i line(x_i) / demand_i``. Why relative: a reservation is judged as a ratio to what was needed (a 100 MiB
over-reservation is waste at 300 MiB and noise at 10 GiB), so every point counts by its ratio, not by its bytes;
minimising absolute area instead would let the largest resolutions dictate the line and overcharge small ones.
Because the objective and the constraints are linear in (slope, tile_slope, base), this is a linear programme;
``scipy.optimize.linprog`` with HiGHS solves it exactly. Its optimum lies on a vertex: the line touches at least
as many points as it has free terms (two points, or one point and a zero term).

Units: the programme is solved in megapixels and MiB (well-conditioned) and reported in bytes and pixels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from vaemem.errors import VaememError

from vaemem.estimate import MIB
MPX = 1_000_000


@dataclass(frozen=True)
class Line:
    """``slope`` bytes per pixel, ``tile_slope`` bytes per tile pixel, ``base`` bytes."""

    slope: float
    base: float
    tile_slope: float = 0.0

    def __call__(self, pixels: float, tile_pixels: float = 0.0) -> float:
        return self.slope * pixels + self.tile_slope * tile_pixels + self.base


def fit_envelope(pixels: Sequence[float], demand: Sequence[float],
                 tile_pixels: Sequence[float] | None = None) -> Line:
    """Fit the upper envelope of (pixels, demand bytes) points; see the module docstring for the objective.

    ``tile_pixels`` adds a second term for tiled runs (tile side squared). With fewer than two distinct tile sizes
    that term cannot be told apart from the base, so it is fixed at 0 and the base carries it.
    Needs at least two distinct pixel counts and positive demands.
    """
    import numpy as np
    from scipy.optimize import linprog

    x = np.asarray(pixels, dtype=float) / MPX
    y = np.asarray(demand, dtype=float) / MIB
    if x.shape != y.shape or x.ndim != 1:
        raise VaememError("pixels and demand must be equal-length sequences")
    if len(np.unique(x)) < 2:
        raise VaememError("an envelope needs at least two distinct pixel counts")
    if (y <= 0).any() or (x <= 0).any():
        raise VaememError("pixels and demand must be positive")
    t = np.zeros_like(x) if tile_pixels is None else np.asarray(tile_pixels, dtype=float) / MPX
    use_tile = len(np.unique(t)) >= 2
    columns = [x, t, np.ones_like(x)] if use_tile else [x, np.ones_like(x)]
    a = np.stack(columns, axis=1)
    cost = (a / y[:, None]).sum(axis=0)  # sum_i line(x_i) / y_i, linear in the coefficients
    res = linprog(cost, A_ub=-a, b_ub=-y, bounds=[(0, None)] * a.shape[1], method="highs")
    if res.status != 0:
        raise VaememError(f"envelope fit failed: {res.message}")
    coef = res.x
    slope, base = coef[0] * MIB / MPX, coef[-1] * MIB
    tile_slope = coef[1] * MIB / MPX if use_tile else 0.0
    return Line(float(slope), float(base), float(tile_slope))


def fit_upper(columns: Sequence[Sequence[float]], demand: Sequence[float],
              offset: Sequence[float] | None = None, objective: str = "ratio") -> list[float]:
    """The same objective for any non-negative basis: coefficients ``c >= 0`` minimising
    ``sum_i (sum_k c_k x_ki + offset_i) / d_i`` (``objective="ratio"``: the summed reservation / demand, which the
    small points lead) or ``sum_i sum_k c_k x_ki`` (``"bytes"``: the summed reservation, which the large points lead)
    subject to ``sum_k c_k x_ki + offset_i >= d_i`` at every point,
    ``offset`` (bytes, default 0) a fixed part of each point's reservation that the coefficients do not scale (a
    convolution's weight copy: :func:`vaemem.fit.coefficients.calibration_line`). Columns are scaled to unit
    maximum for the solver and the coefficients scaled back. Used by the calibration
    ``demand <= factor x dry + per_sample_factor x dry_of_one_sample + base``."""
    import numpy as np
    from scipy.optimize import linprog

    y = np.asarray(demand, dtype=float)
    a = np.stack([np.asarray(c, dtype=float) for c in columns], axis=1)
    off = np.zeros_like(y) if offset is None else np.asarray(offset, dtype=float)
    if a.ndim != 2 or y.ndim != 1 or a.shape[0] != y.shape[0] or off.shape != y.shape or (y <= 0).any() \
            or (a < 0).any() or (off < 0).any():
        raise VaememError("an envelope needs equal-length, non-negative columns and offsets and positive demands")
    if objective not in ("ratio", "bytes"):
        raise VaememError(f"unknown envelope objective {objective!r}; choose ratio or bytes")
    # the report fits the same point sets again and again (held out, left out, the apps' table): with a plan's fit
    # 25,042 programmes, 9,724 distinct, at 3 ms each; the solution is a function of the inputs, so the same inputs
    # return it again
    key = hashlib.sha256(b"%d %d %s|" % (*a.shape, objective.encode())
                         + a.tobytes() + y.tobytes() + off.tobytes()).digest()
    hit = _SOLVED.get(key)
    if hit is None:
        scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
        a_s, y_s = a / scale, y / y.max()
        cost = (a_s / y_s[:, None]).sum(axis=0) if objective == "ratio" else a_s.sum(axis=0)
        res = linprog(cost, A_ub=-a_s, b_ub=-(y - off) / y.max(),
                      bounds=[(0, None)] * a.shape[1], method="highs")
        if res.status != 0:
            raise VaememError(f"envelope fit failed: {res.message}")
        if len(_SOLVED) >= SOLVED_KEPT:
            del _SOLVED[next(iter(_SOLVED))]  # the oldest
        hit = _SOLVED[key] = tuple(float(c) * float(y.max()) / float(s) for c, s in zip(res.x, scale))
    return list(hit)


SOLVED_KEPT = 32768  # fit_upper's solutions kept, by a digest of their inputs (a few MiB)
_SOLVED: dict[bytes, tuple[float, ...]] = {}


def fit_lower(x: Sequence[float], y: Sequence[float]) -> tuple[Fraction, Fraction]:
    """(intercept, slope >= 0) of the lower envelope of (x, y) points: the line ``intercept + slope x`` on or below
    every point with the largest summed value over them, in exact arithmetic (``Fraction``: the same answer on every
    machine, which ``vaemem fit --check`` needs), in the points' units. Method: that line is the supporting line of
    the points' lower convex hull at their mean ``x`` (the sum is n x the line's value there), with each point
    lowered to the least ``y`` at or right of it (a slope never below 0); where the mean is a hull vertex, the edge to
    its left (the lesser slope, the larger intercept). Where fewer than two ``x`` differ, the least ``y`` and 0. Used
    for what an architecture needs beyond its dry run at every frame size
    (:func:`vaemem.fit.coefficients.first_call_bytes`): its intercept is the part that no frame size sets."""
    if len(x) != len(y) or not len(x):
        raise VaememError("a lower envelope needs equal-length, non-empty x and y")
    least: dict[Fraction, Fraction] = {}
    for xi, yi in zip(map(Fraction, x), map(Fraction, y)):
        least[xi] = min(yi, least.get(xi, yi))
    xs = sorted(least)
    if len(xs) < 2:
        return least[xs[0]], Fraction(0)
    lowered, run = [], least[xs[-1]]
    for xi in reversed(xs):  # a slope >= 0: no point is higher than one right of it
        run = min(run, least[xi])
        lowered.append((xi, run))
    hull: list[tuple[Fraction, Fraction]] = []
    for p in reversed(lowered):  # Andrew's monotone chain, lower hull
        while len(hull) >= 2 and (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0]) \
                >= (p[1] - hull[-2][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append(p)
    mean = sum(map(Fraction, x)) / len(x)
    for (x1, y1), (x2, y2) in zip(hull, hull[1:]):
        if x1 <= mean <= x2:
            slope = (y2 - y1) / (x2 - x1)
            return y1 - slope * x1, slope
    return hull[0][1], Fraction(0)  # one hull point left: a flat line through the least
