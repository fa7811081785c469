"""The structure of the dry-run peak: a small declared basis per (architecture, op, dtype, tiling), from dry runs.

Facts it rests on (dry runs, torch 2.13 / diffusers 0.42; tests re-check them on fresh dry runs):

* Untiled, at fixed frames the peak is ``batch x (a x area + q x area^2 + base)``, area = width x height: linear
  for convolutions (sd15 decode fp32: exactly 3072 B/px), plus a quadratic term where an attention over all
  tokens materialises a (tokens x tokens) tensor (HunyuanVideo's causal mask is one, whatever the SDPA kernel).
  For an image model the three numbers are fixed. For a video model ``g`` changes regime with the clip (Wan's first chunk, HunyuanVideo's
  16-frame windows, the growing output clip), so each of the three is declared piecewise linear in frames over the
  knots of 1, 2, 3, 4, 5 and 9 latent frames (a knot at every latent frame up to HunyuanVideo's 16-frame
  window, where its mask stops growing quadratically), extrapolated past the last knot along the last segment (by
  then the growth is the output clip's copies). Below the smallest traced area a max of regimes can take over (a
  tiny model's mask against its convolutions), so the estimator prices smaller areas at the smallest traced one:
  an upper bound, as the peak grows with area. A video model has a second area piece (``upper``), fitted from
  the largest of the three sizes up 16x in area: at the sizes apps run a term the small sizes barely see can lead
  (HunyuanVideo's causal mask in encode, Mochi's and CogVideoX's convolutions), and one fit through 64-256 px
  under-priced them by up to a third.
* Tiled (images, decode and encode; the video classes of :data:`TILED_VIDEO_OPS`), the peak follows diffusers' loop:
  each tile's working set grows with its own area, and every finished tile is kept until the blend, so
  ``peak = max(max over tiles (a x its area + s x the area of the tiles finished before it), s x the area of all
  tiles + o x width x height) + base``, the second term the assembly (the rows and the output concatenated while
  every tile is kept: it leads for images many tiles wide, :data:`TILE_ASSEMBLY`), the tiles as the
  class's loop visits them (:func:`vaemem.estimate.tile_sides`, edge tiles cut). Fitted on tiles of 256-512 px,
  it is exact in sample to the byte for every image class (SD1.5 decode fp32: 3072 B per pixel of the tile at
  work, 12 per stored pixel, its three fp32 channels), and Wan's, from its 20 dry runs, is within 0.02 % of all
  168 of a larger grid (1-33 frames); the basis it replaces (one tile, the tile count and the output area) was
  0.8 % off for images and 2.7 % for Wan's clips. 128 and 192 px tiles are exact too (SD1.5 decode), 64 px ones
  miss (0.73x), so it records ``tile_min`` (the grid's 256 px) and the estimator prices no smaller tile. Tiled
  clips (:data:`TILED_VIDEO_OPS`) have (a, s, o, base) at each of their frame knots (:data:`TILE_GRID_VIDEO`),
  linear in frames between knots and along the last segment past it: each tile's clip is run whole or chunk by
  chunk, so ``s`` is the stored clip's bytes per pixel (12 B x frames in fp32). HunyuanVideo's clips of more than
  16 frames run in temporal windows: its knots are every window length, traced with the windows off, and the
  estimator runs the windows on top. Which term a grid point peaks in is read from the dry run (a peak outside
  every module is the assembly). Mochi's tiles run its untiled op at the tile's size, split convolutions
  included, so the tile at work is its untiled structure there (``tile_working_set``). MiniMax-H3's encode runs
  17-frame clips one after another (a shorter clip padded to 17 by repeating its last frame), each tiled with
  whole tiles, the overlaps widened to fit (stride rule "spread"): its tiled knots are one frame and one clip, and
  the estimator runs the clips on top (``clips``: each clip's output kept until the end, the padded copy held),
  on its untiled structure too, at its 17-frame knot.
* fp16 and bf16 dry runs are identical for all twenty architectures (checked); fp32 is not always twice them
  (fp32 upcasts in some norms), so fp32 and half precision each have their own structure.
* The math attention path (no fused SDPA kernel: the (tokens x tokens) score matrix is materialised) changes only
  what happens inside attention modules, so its peak is ``max(fused-path peak, attention peak)``, where the
  attention peak (:attr:`TraceResult.attention_peak_bytes`, the live bytes while an attention module runs) is
  exactly quadratic in area: the score matrix plus the features around it. It gets a structure of its own, of the
  same untiled basis and grid, for the ops :data:`vaemem.models.zoo.ATTENTION_OPS` lists (sd15 decode 2048 px fp32:
  12.0 GiB fused, 32.9 GiB math).
* A size-triggered split (CogVideoX's and Mochi's 3D convolutions cut an input of more than 2^30 elements into
  chunks along time) makes a step wherever an input crosses a multiple of 2^30 elements: Mochi encode at 49
  frames costs 646 B per pixel and frame whole, 845 split in two (640x640), 959 in sixteen (2048x2048), and one
  smooth fit through such steps priced 848x480 x 85 frames at 0.79x its dry run. So the pieces of such a model
  are fitted on dry runs with the split off (``unsplit``), and the structure lists, per knot, each split
  convolution (its input's elements per padded pixel, scale, padding, frames and temporal kernel, its output
  elements per pixel, and the live bytes after it as per-pixel and base bytes through the knot's two largest dry
  runs, from the dry runs' record of the calls), which the estimator splits as diffusers does.
* A convolution holds, beyond the live tensors, a reordered copy of its weight where oneDNN runs it and an im2col
  buffer where torch's own path does (``benchmarks/cpu_conv_transients.py``), and torch's ``use_mkldnn`` rule
  picks the path from the input's shape: in fp32 at batch 1 oneDNN only where N x C x the next two dims exceed
  20480. So an untiled fp32 structure carries ``conv_transients``: per convolution weight, at each knot, the
  elements the rule reads and the buffer's, affine in the request's size (:func:`_conv_transients`), from the
  dry runs' ``conv_inputs``; the estimator applies the rule (:func:`vaemem.estimate.conv_transient_elements`).
  LTX-Video 0.9.5's decoder copies its 432 MiB weight at 320x192 x 9 frames and not at 256x160 x 9 (the rule
  reads 24576 and 20480 elements); Mochi's encoder holds a 101 MiB buffer at one frame of 160x96. A transient adds
  to the bytes live at its call, not to the peak: per convolution the structure also carries the most bytes live
  at a call, per knot at the grid's square sizes, and the estimator takes the larger of the dry-run peak and the
  largest sum (:func:`vaemem.estimate.conv_call_peak_bytes`). LTX-2's decoder copies its 432 MiB weight where
  2-40 MiB are live: its demand is 1.04-1.06x that larger one at every size from 128x128 to 1024x576 x 9 frames.
* Slicing (diffusers' ``enable_slicing``: a batch run one sample at a time) peaks at one sample's peak plus the
  outputs of the samples before it: ``peak(1) + (batch - 1) x output(1)``, exact in dry runs of every class probed.
  So an untiled structure also carries one sample's output bytes per pixel at each knot, and slicing needs no dry
  runs of its own.

The evaluation lives in :mod:`vaemem.estimate` (stdlib only); this module chooses the dry runs and fits the basis.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from vaemem import estimate as est
from vaemem.models.zoo import ModelSpec, get_spec, registry
from vaemem.tracing.cache import CONV_INPUT_FIELDS
from vaemem.tracing.trace import TraceSpec

STRUCTURE_DTYPES = ("fp32", "bf16")  # fp16 is priced by the bf16 structure (identical dry runs)
GRID_OVERLAP = 0.25  # the tile overlap of every tiled dry run of the grid (diffusers' default, TraceSpec's)
TILE_GRID = ((256, 768, 512), (256, 1024, 1024), (320, 1024, 768), (384, 1024, 768), (384, 768, 768),
             (512, 1024, 768), (512, 1280, 1024))  # (tile, width, height)
TILED_MODELS_KINDS = ("conv2d",)  # image classes whose tiling is structured
# Video whose tiling is structured: these classes tile in space only, and each tile's clip is run whole (LTX-Video,
# LTX-2, HunyuanVideo 1.5: LTX's temporal tiling, use_framewise_*, is off by default and vaemem keeps the
# defaults) or chunk by chunk (Wan; CogVideoX, two latent frames at a time), so the image basis holds at each
# frame knot: from 20 dry runs each is exact, or within 0.3 %, at 49-161 frames off the grid. HunyuanVideo also
# tiles in time by default (17-frame windows): its basis is traced with the windows off at every window length
# (``whole_clip``) and the estimator runs the windows on top (vaemem.estimate.window_peak). Mochi's tiles run whole clips
# through its size-triggered split convolutions, a step the per-area basis cannot follow (0.45-1.29x off the
# grid): each tile at work is priced by Mochi's untiled structure at the tile's size, splits included
# (``tile_working_set``), the rest of the basis on top: within 0.03 % off the grid (848x480 to 1280x720, 31-85
# frames, 256-512 px tiles). Wan 2.2's encode patchifies first and
# then tiles the patchified input, so a 256 px tile covers 512 px (``tile_scale`` 2: its grid's images are twice
# as wide and high) and the patchified copy of the clip, the input's bytes, is held for the whole op
# (``held_bytes_per_pixel_frame``); without the two its structure was 1.08-9.1x, then 0.94-1.11x, off the grid,
# with them exact (``benchmarks/structure_check.py --tiled``). Wan 2.1's (and Qwen-Image's) needs neither.
# MiniMax-H3's encode (tiled by default in diffusers) runs 17-frame clips one after another, each tiled with whole
# tiles (``clips``, stride rule "spread"): its knots are one frame and one clip, 10 dry runs per dtype; priced as
# the untiled request it was 5-14x its tiled dry runs.
TILED_VIDEO_OPS = {"wan21": ("decode", "encode"), "wan22": ("decode", "encode"), "ltx-video": ("decode", "encode"),
                   "ltx-video-0.9.5": ("decode", "encode"), "ltx-2": ("decode", "encode"),
                   "ltx-2.3": ("decode", "encode"), "hunyuanvideo-1.5": ("decode", "encode"),
                   "cogvideox": ("decode", "encode"), "hunyuanvideo": ("decode", "encode"),
                   "mochi": ("decode", "encode"), "minimax-h3": ("encode",)}
# A tiled clip's grid: four tiles and the assembly's point at four knots (1, 5, 9, 17 frames for Wan), 20 dry
# runs (HunyuanVideo: five tiles at its five window lengths, 30). Against the seven tiles of the image grid at six knots (1-33 frames; 168 dry runs, 25.5 minutes for Wan
# 2.1 and 2.2 in fp32 and bf16) it is within 0.02 % at every one, 33 frames included.
TILE_GRID_VIDEO = ((256, 768, 512), (384, 768, 768), (512, 1024, 768), (512, 1280, 1024))
TILED_VIDEO_LATENT_KNOTS = (1, 2, 3, 5)
# A fifth point of the tile loop for a class whose tiles build a causal mask (a q x area^2 term: the tiny
# HunyuanVideo's mask leads at every tile; the real one's never does up to 512 px tiles, so its q fits 0, and past
# about 1100 px tiles of a 17-frame window its mask peak, at another moment than the convolutions', leads:
# 1280 px tiles of 2560x1280 x 17 frames were priced 0.66x, so its structure records ``tile_max``).
TILE_MASK_EXTRA = (320, 1024, 768)


def frame_knots(spec: ModelSpec, tiled: bool = False) -> list[int]:
    """The frame counts a structure is traced at. A tiled class with temporal windows: every clip length a window
    runs (HunyuanVideo's 1, 5, 9, 13 and 17 frames), so each window is priced at a knot."""
    if not spec.is_video:
        return [1]
    s = spec.info.frame_step or spec.temporal_factor
    if tiled and spec.info.encodes_in_clips:  # one frame runs alone, more in whole clips: one knot each
        return [1, spec.config["clip_length"]]
    latent = TILED_VIDEO_LATENT_KNOTS if tiled else (1, 2, 3, 4, 5, 9)
    if tiled and spec.info.temporal_windows:
        latent = tuple(range(1, spec.info.temporal_windows[0] // s + 2))
    return [1 + s * (t - 1) for t in latent]


# Where the assembly leads (all tiles kept while the rows and the output are concatenated): an image many tiles
# wide. SD1.5 decode fp32 at 3072 px with 256 px tiles peaks there at 402 MiB, where the tile loop alone gave 368.
TILE_ASSEMBLY = (256, 3072, 3072)
TILE_ASSEMBLY_VIDEO = (256, 2048, 1024)


def _tiles(spec: ModelSpec, op: str) -> tuple[tuple[int, int, int], ...]:
    """(tile, width, height) of a tiled structure's dry runs at each frame knot: the tile loop's grid, then the
    assembly's point. A class whose tiles build a causal mask fits one more term, so gets one more point; one
    whose loop counts scaled pixels (:meth:`~vaemem.models.zoo.ModelSpec.tile_scale`) has its images scaled, so
    each tile covers what it covers elsewhere in the grid's pixels."""
    if not spec.is_video:
        return (*TILE_GRID, TILE_ASSEMBLY)
    k = spec.tile_scale(op)
    return tuple((t, w * k, h * k) for t, w, h in (*TILE_GRID_VIDEO, *((TILE_MASK_EXTRA,) if spec.info.causal_mask
                                                                     else ()), TILE_ASSEMBLY_VIDEO))


def _sizes(spec: ModelSpec, attention: str = "fused") -> tuple[tuple[int, int], ...]:
    """Three square sizes spanning 16-64x in area from 64 px: the smallest bounds the range priced exactly. The
    math path's attention peak is traced at 48, 64 and 96 latent pixels a side: from there on it is exactly
    quadratic in area (FLUX.2 encode: 512, 736, 1376, 2272, 4832, 8416 B/px at 48-256 latent px, bf16 and fp32
    alike), while below it another term can lead (bf16 at 32: 368 B/px, 16 above the quadratic)."""
    if attention == "math":
        return tuple((k * spec.spatial_factor, k * spec.spatial_factor) for k in (48, 64, 96))
    a = 256 if spec.spatial_factor >= 32 else 128
    return (64, 64), (a, a), (2 * a, 2 * a)


def _upper_sizes(spec: ModelSpec) -> tuple[tuple[int, int], ...]:
    """A video model's second area piece, from the largest size of :func:`_sizes` up 16x in area: past it a term
    the small sizes barely see can lead (HunyuanVideo encode at 1280x704 x 17 frames needed 1.49x what the small
    sizes' fit gave; Mochi decode 1.39x; CogVideoX encode 1.20x)."""
    a = 256 if spec.spatial_factor >= 32 else 128
    return (2 * a, 2 * a), (4 * a, 4 * a), (8 * a, 8 * a)


def grid(name: str, op: str, dtype: str, tiled: bool, attention: str = "fused") -> list[TraceSpec]:
    """The dry runs a structure is derived from."""
    spec = get_spec(name)
    if tiled:  # a class with temporal windows: each window's own tile loop, the windows evaluated on top
        whole = spec.info.temporal_windows is not None
        return [TraceSpec(name, op, dtype, w, h, frames=f, tile=t, whole_clip=whole) for f in frame_knots(spec, True)
                for t, w, h in _tiles(spec, op)]
    sizes = _sizes(spec, attention)
    if spec.is_video and attention == "fused":
        sizes += _upper_sizes(spec)[1:]
    unsplit = spec.info.split_convs and attention == "fused"  # the smooth part; the split is evaluated on top
    return [TraceSpec(name, op, dtype, w, h, frames=f, attention=attention, unsplit=unsplit)
            for f in frame_knots(spec) for w, h in sizes]


# the batch of the dry runs an image structure's oneDNN factors of a batch and its calls' live bytes come from
# (the estimator, which scales those live bytes by batch / it, owns the number)
BATCH_KNOT = est.BATCH_LIVE_SAMPLES


def batch_grid(name: str, op: str, dtype: str) -> list[TraceSpec]:
    """The dry runs of a batch (:data:`BATCH_KNOT`) an untiled image structure's oneDNN factors of a batch are
    derived from (``onednn_hidden_factor_batch``: :func:`derive`), at its grid's sizes in the calibration domain; none
    for a video architecture, whose batches keep one sample's factor (HunyuanVideo's fp32 decode in two and three
    needed 1.96x and 2.93x one sample at 160x96)."""
    spec = get_spec(name)
    if spec.is_video:
        return []
    return [TraceSpec(name, op, dtype, w, h, batch=BATCH_KNOT) for w, h in _sizes(spec)
            if w * h >= est.DOMAIN_MIN_FRAME_PIXELS]


def structured(name: str) -> list[tuple[str, str, bool, str]]:
    """(op, dtype, tiled, attention) combinations with a structure for zoo model ``name``."""
    from vaemem.models.zoo import ATTENTION_OPS

    spec = get_spec(name)
    out = []
    for op in spec.ops:
        for dtype in STRUCTURE_DTYPES:
            out.append((op, dtype, False, "fused"))
            tiles = spec.kernel in TILED_MODELS_KINDS or op in TILED_VIDEO_OPS.get(name, ())
            if tiles and not spec.tiled_refusal(op):
                out.append((op, dtype, True, "fused"))
            if op in ATTENTION_OPS[name]:
                out.append((op, dtype, False, "math"))
    return out


def zoo_grid() -> list[TraceSpec]:
    """Every dry run that derives the structure of every real architecture (identical layers traced once)."""
    out = []
    for name, spec in registry().items():
        if spec.tiny or spec.architecture != name:
            continue
        for op, dtype, tiled, attention in structured(name):
            out += grid(name, op, dtype, tiled, attention)
            if not tiled and attention == "fused":
                out += batch_grid(name, op, dtype)
    return out


def _solve(rows: list[list[float]], y: list[float]) -> list[float]:
    """The least-squares solution of ``rows x = y``, the same to the last bit on every machine: a square system
    exactly in rationals, an overdetermined one by Householder QR in plain Python floats over unit-scaled columns (a
    column of zeros or one dependent on those before it gets 0). Why not LAPACK: its kernels differ between CPUs
    (AVX2, AVX-512) in the last bits, which a 7-digit quadratic term of pure noise (1e-17 B/px^2) carries into the
    coefficient file, so ``fit --check`` failed on another machine with the same data."""
    n = len(rows[0])
    if len(rows) == n:
        exact = _exact(rows, y)
        if exact is not None:
            return exact
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(n)]
    a = [[r[j] / scale[j] for j in range(n)] + [v] for r, v in zip(rows, y)]  # y as the last column
    m, rank_cols = len(a), []
    for j in range(n):
        k = len(rank_cols)  # the next row of R
        norm = math.sqrt(math.fsum(a[i][j] * a[i][j] for i in range(k, m)))  # x * x: pow may round differently by libm
        if norm <= 1e-12 or k >= m:  # no new direction: this coefficient is 0
            continue
        alpha = -norm if a[k][j] > 0 else norm
        v = [0.0] * k + [a[k][j] - alpha] + [a[i][j] for i in range(k + 1, m)]
        vv = math.fsum(x * x for x in v)
        for jj in range(j, n + 1):
            d = 2 * math.fsum(v[i] * a[i][jj] for i in range(k, m)) / vv
            for i in range(k, m):
                a[i][jj] -= d * v[i]
        rank_cols.append(j)
    x = [0.0] * n
    for k in range(len(rank_cols) - 1, -1, -1):  # back substitution over the kept columns
        j = rank_cols[k]
        x[j] = (a[k][n] - math.fsum(a[k][jj] * x[jj] for jj in rank_cols[k + 1:])) / a[k][j]
    return [x[j] / scale[j] for j in range(n)]


def _exact(rows: list[list[float]], y: list[float]) -> list[float] | None:
    """``rows x = y`` solved exactly (Gauss-Jordan over fractions), None if singular."""
    from fractions import Fraction

    n = len(rows)
    a = [[Fraction(v) for v in r] + [Fraction(t)] for r, t in zip(rows, y)]
    for j in range(n):
        p = next((i for i in range(j, n) if a[i][j] != 0), None)
        if p is None:
            return None
        a[j], a[p] = a[p], a[j]
        for i in range(n):
            if i != j and a[i][j] != 0:
                f = a[i][j] / a[j][j]
                a[i] = [u - f * w for u, w in zip(a[i], a[j])]
    return [float(a[i][n] / a[i][i]) for i in range(n)]


ASSEMBLY_MODULE = "(top level)"  # a dry run's peak_module where the peak is in the tiling code, outside every module


def _tiled_piece(points: list[tuple[int, int, int]], ys: list[float], assembly: list[bool], factor: int,
                 rule: str, quadratic: bool = False, scale: int = 1,
                 working: Callable[[int, int], float] | None = None) -> tuple[list[float], float | None]:
    """(a, s, base) and ``o`` of ``max(max over tiles (a x area + s x stored), s x all tiles + o x width x height)
    + base`` through the dry runs at (width, height, tile) ``points``; ``o`` is None where no point peaks in the
    assembly. Which term a point peaks in is the dry run's evidence: the assembly (the rows and the output
    concatenated) runs in the tiling code itself, so its peak is outside every module (``assembly``). The loop's
    points are fitted at the tile each peaks at, found by iteration: start at every point's last tile, fit by
    least squares jointly with the assembly's points, move each point to its argmax under the fit, until no point
    moves (the best fit seen if it cycles). ``o`` is then the most any assembly point needs beside its stored
    tiles (rounded up), so those points are priced at least at their dry run. Fitting the loop alone was 0.97-1.11x
    in sample for LTX-Video's fp32 decode, whose assembly leads at three of its five points at 17 frames.
    ``quadratic``: the tile at work also costs ``q x its area^2`` (a causal mask over its tokens), and the result
    is (a, s, base, q). ``scale``: the class's :meth:`~vaemem.models.zoo.ModelSpec.tile_scale`. ``working``: the
    bytes the tile at work also costs at (width, height), known (the untiled op's structure, for a class whose
    tiles run it), taken off before the fit. Rounded: per pixel to 1e-3, q to 7 significant digits, bytes whole."""
    def terms(c: list[float]) -> list[tuple[float, float, float]]:
        q = c[3] if quadratic else 0.0
        return [(x[0], x[1], x[3]) for x in (est.tiled_peak_terms(w, h, t, factor, GRID_OVERLAP, c[0], c[1], rule, q,
                                                                  scale, working) for w, h, t in points)]

    totals = [est.tiled_peak_terms(w, h, t, factor, GRID_OVERLAP, 0.0, 0.0, rule, 0.0, scale)[2]
              for w, h, t in points]
    areas = [float(w * h) for w, h, _ in points]
    any_assembly = any(assembly)

    def loop_value(c: list[float], a: float, st: float, u: float) -> float:
        return a * c[0] + st * c[1] + c[2] + u + (c[3] * a * a if quadratic else 0.0)

    def fit(at: list[tuple[float, float, float]]) -> tuple[list[float], float]:
        # columns: a, s, o, base, q
        rows = [[0.0, tot, area, 1.0, 0.0] if asm else [a, st, 0.0, 1.0, a * a]
                for (a, st, _), tot, area, asm in zip(at, totals, areas, assembly)]
        keep = [0, 1, *([2] if any_assembly else []), 3, *([4] if quadratic else [])]
        sol = _solve([[r[i] for i in keep] for r in rows], [y - (0.0 if asm else u)
                                                             for y, (_, _, u), asm in zip(ys, at, assembly)])
        full = dict(zip(keep, sol))
        c = [max(full[0], 0.0), max(full[1], 0.0), full[3], *([max(full[4], 0.0)] if quadratic else [])]
        err = max(abs(loop_value(c, *t) - y) / y for t, y, asm in zip(terms(c), ys, assembly) if not asm)
        return c, err

    def last(w: int, h: int, t: int) -> tuple[float, float, float]:
        rows, cols = est.tile_sides(w, h, t, factor, GRID_OVERLAP, rule, scale)
        total = float(sum(rows) * sum(cols))
        return (float(rows[-1] * cols[-1]), total - rows[-1] * cols[-1],
                0.0 if working is None else working(cols[-1], rows[-1]))

    # which tile a point peaks at depends only on s / a: besides every point's last tile, start from the tiles
    # that ratios from 0 to 1 pick (from the last tile alone LTX-Video's fp32 decode settled 4 % off at 17 frames,
    # where a, s and o are exactly 2480, 204 and 408 B/px); with a known working set, s against its bytes per pixel
    unit = 1.0 if working is None else working(points[0][2], points[0][2]) / points[0][2] ** 2
    starts = [[last(*p) for p in points]] + [terms([1.0 if working is None else 0.0, r * unit, 0.0, 0.0])
                                             for r in [0.0, *(10 ** (k / 20) for k in range(-100, 1))]]
    best, best_err = None, math.inf
    seen: dict[tuple, tuple] = {}  # a state's fit and where it moves: the starts' paths soon join
    for at in starts:
        for _ in range(50):
            state = tuple(at)
            hit = seen.get(state)
            if hit is None:
                c, err = fit(at)
                hit = seen[state] = (c, err, terms(c))
            c, err, moved = hit
            if err < best_err - 1e-12:
                best, best_err = c, err
            if moved == at:
                break
            at = moved
    a, s, base = round(best[0], 3), round(best[1], 3), round(best[2])  # type: ignore[index]
    c = [a, s, base, *([float(f"{best[3]:.6e}")] if quadratic else [])]  # type: ignore[index]
    loop = [loop_value(c, *t) for t in terms(c)]
    need = [y for y, lp, asm in zip(ys, loop, assembly) if asm and y > lp * (1 + 1e-4)]
    if not need:  # the loop covers every assembly point: the assembly never leads in sample
        return c, None
    o = max(0.0, *(math.ceil((y - base - s * tot) / area * 1000) / 1000
              for y, tot, area, lp, asm in zip(ys, totals, areas, loop, assembly) if asm and y > lp * (1 + 1e-4)))
    return c, o


def _tiled_knot(frames: int, keys: list[tuple], peaks: dict, modules: dict, factor: int, rule: str,
                o_copies: float | None, quadratic: bool = False, scale: int = 1, held: float = 0.0,
                ws: dict[str, Any] | None = None) -> list[float]:
    """(a, s, o, base), and q where ``quadratic``, of one frame knot from its dry runs ``keys`` (the loop's grid, then the assembly's point),
    by the better of two readings of which term each peaks in: the grid's design (only the last point can peak in
    the assembly) and the dry runs' evidence (those whose peak is outside every module). The design is exact for
    every image class; the evidence for LTX-Video's fp32 decode, whose assembly leads at small images too. The one
    whose structure is nearer every dry run of the knot wins (the design on a tie). Where the assembly leads at
    none, it holds the class's copies of the output (``o_copies``): Wan 2.2's never leads at 2048x1024, and with
    two copies its 4096x2048 x 9 frames was priced 0.79x (it holds three). ``held``: bytes per pixel and frame
    of the whole clip the op holds throughout, known, taken off before the fit. ``ws``: the untiled structure
    that prices the tile at work, for a class whose tiles each run the untiled op (``tile_working_set``)."""
    points = [(w, h, t) for w, h, _, t in keys]
    # compiled once and memoised: the fit asks it for the same few tile sizes many times
    working = None if ws is None else est.tile_working_set(est.compile_structure(ws), frames)
    ys = [peaks[k] - held * k[0] * k[1] * frames for k in keys]
    best, best_err = None, math.inf
    unknowns = 4 if quadratic else 3
    for assembly in ([k == keys[-1] for k in keys], [modules[k] == ASSEMBLY_MODULE for k in keys]):
        if all(assembly) or len(keys) < unknowns + any(assembly):  # too few points to fit every term jointly
            continue
        (a, s, base, *q), o = _tiled_piece(points, ys, assembly, factor, rule, quadratic, scale, working)
        if o is None:
            if o_copies is None:
                raise ValueError(f"{frames} frames: the assembly's dry run records no output bytes")
            o = o_copies
        one = {"kind": "tiled", "overlap": GRID_OVERLAP, "spatial_factor": factor, "stride_rule": rule,
               **({"tile_scale": scale, "held_bytes_per_pixel_frame": held} if scale > 1 else {}),
               **({"tile_working_set": ws} if ws is not None else {}), "knots": [frames], "coef": [[a, s, o, base, *q]]}
        err = max(abs(est.structure_bytes(one, *k[:2], 1, frames, k[3]) - peaks[k]) / peaks[k] for k in keys)
        if err < best_err:
            best, best_err = [a, s, o, base, *q], err
    return best  # type: ignore[return-value]


def _piece(peaks: dict, knots: list[int], sizes: tuple[tuple[int, int], ...]) -> tuple[list, list, list]:
    """Per knot, ``a x area + q x area^2 + base`` through the three sizes (rounded: per pixel to 1e-3, bytes
    whole)."""
    slopes, quads, bases = [], [], []
    for fr in knots:
        areas = [float(w * h) for w, h in sizes]
        ys = [peaks[(w, h, fr, None)] for w, h in sizes]
        a, q, b = _solve([[x, x * x, 1.0] for x in areas], ys)
        if q < 0:  # concave (a base that matters at small sizes): the chord through the two largest sizes lies
            q = 0.0  # above the curve everywhere outside it, so the structure never falls with area
            a = (ys[2] - ys[1]) / (areas[2] - areas[1])
            b = ys[2] - a * areas[2]
        slopes.append(round(a, 3))
        quads.append(float(f"{q:.6e}"))
        bases.append(round(b))
    return slopes, quads, bases


def split_layers(calls: list[list[int]], width: int, height: int) -> list[list[float]]:
    """The split convolutions of a dry run's ``split_convs`` at ``width`` x ``height``, as the first six numbers of
    a layer of :func:`vaemem.estimate.split_peak_bytes` and the live bytes after the call: the scale is the power
    of two nearest frame / input width, the padding what is left on each side (the same both ways, or the record
    is refused), in the order of first calls. Output elements are per sample; the live bytes are the record's, so
    of a dry run of batch 1 (as the structure grid is)."""
    out: list[list[float]] = []
    for b, c, t, h, w, kt, out_n, live in calls:
        scale = 2.0 ** round(math.log2(width / w))
        pad = (w - width / scale) / 2
        if pad != (h - height / scale) / 2 or pad < 0 or pad != int(pad):
            raise ValueError(f"a split convolution's input {w}x{h} is not a {width}x{height} frame at one scale "
                             f"with equal padding")
        out.append([c * t, scale, int(pad), t, kt, round(out_n / (b * width * height), 6), live])
    return out


def _split_piece(calls: dict, knot_sizes: list[tuple[int, int, int, Any]]) -> list[list[float]]:
    """One knot's layers of :func:`vaemem.estimate.split_peak_bytes`: the geometry from the largest dry run, the
    live bytes after each call as ``per_px x area + base`` through the two largest (the activations around a
    convolution grow with the frame's area)."""
    (w0, h0, *_), (w1, h1, *_) = knot_sizes[-2:]
    a, b = split_layers(calls[knot_sizes[-2]], w0, h0), split_layers(calls[knot_sizes[-1]], w1, h1)
    if len(a) != len(b) or any(x[:6] != y[:6] for x, y in zip(a, b)):
        raise ValueError("the split convolutions differ between two sizes of one frame count")
    out = []
    for x, y in zip(a, b):
        per_px = math.ceil((y[6] - x[6]) / (w1 * h1 - w0 * h0) * 1000) / 1000  # rounded up to 1e-3 B/px
        out.append([*y[:6], per_px, math.ceil(y[6] - per_px * w1 * h1)])
    return out


def _affine(e: dict[int, int], rank: int) -> list[float]:
    """``[a, b, c]`` of ``a x U + b x (width + height) / 2 + c`` through ``e`` (square side -> elements), U a
    frame's pixels, or its height where ``rank`` is 5 (the input elements torch's rule reads of a 3-D input):
    rank 5 from the two larger of the three smallest sides, else the three solve the three terms exactly; then
    ``c`` rises to cover every side (an upper bound off the grid)."""
    sides = sorted(e)
    if rank == 5:
        s1, s2 = sides[1:3] if len(sides) >= 3 else (sides[0], sides[-1])
        a = _milli_up((e[s2] - e[s1]) / (s2 - s1)) if s2 > s1 else 0.0
        return [a, 0.0, float(math.ceil(max(e[x] - a * x for x in sides)))]
    if len(sides) < 3:
        raise ValueError("a convolution's law needs three sizes per knot")
    a, b, _ = _solve([[v * v, v, 1.0] for v in sides[:3]], [float(e[v]) for v in sides[:3]])
    a, b = _milli_up(max(a, 0.0)), _milli_up(max(b, 0.0))
    return [a, b, float(math.ceil(max(e[v] - a * v * v - b * v for v in sides)))]


def _conv_transients(convs: dict[tuple, list[list[int]]], knots: list[int]) -> list[list[Any]]:
    """The structure's ``conv_transients`` (:func:`vaemem.estimate.conv_transient_bytes`) from the dry runs'
    ``conv_inputs`` (``convs``: (width, height, frames, tile) -> its conv_inputs, square sizes): per weight's shape
    (two of one size grow by different laws), heaviest first, at each knot the input elements torch's oneDNN rule
    reads (:func:`_affine` of rank 5 for a 3-D input, N x C x depth x height, the width not among them; else of
    the frame's pixels), or None
    where a clause that ignores the size held (or the input is 1-D), the elements of its im2col buffer
    (:func:`_affine` in the frame's pixels), where its input is channels-last (:func:`_channels_last_from`), and
    the same two laws of its smallest call (torch decides call by call), and the most bytes live at a call and at
    a smallest call (:func:`vaemem.tracing.counter.conv_live_bytes`), what a copy or buffer adds to, as
    [pixels, bytes] at each square side of the grid (not a law: where its most-live call moves to another block,
    it steps, as HunyuanVideo's encoder's 7 M weight from 512 to 1024 px, 4.0x to 5.4x its bytes, and a law
    through the smaller sides, raised to cover it, put 887 MiB at every size). Why affine, not per unit: LTX-2's
    decoder pads its latent by a row on each side before the convolution (one frame at 128 px reads 18432
    elements, 144 per row, at 64 px 192 per row: a ratio through 64 px would have copied at 128 px a 432 MiB
    weight oneDNN never held)."""
    # (weight, rank, input channels, kernel volume) -> knot -> side -> the record (square sizes: one per side)
    per: dict[tuple[int, int, int, int], dict[int, dict[int, list[int]]]] = {}
    for (w, h, fr, _), calls in convs.items():
        for weight, rank, channels, volume, *rec in calls:
            per.setdefault((weight, rank, channels, volume), {}).setdefault(knots.index(fr), {})[h] = rec
    none = [0.0, 0.0, 0.0]  # at a knot where the convolution does not run (Wan's 2-D ones run at one frame only)
    ordered = sorted(per.items(), key=lambda kv: tuple(-x for x in kv[0]))

    def laws(at: dict, rank: int, field: int, rule: bool) -> list[Any]:  # per knot: None where the rule never reads
        return [none if i not in at else None if rule and (rank == 3 or any(r[1] for r in at[i].values()))
                else _affine({h: r[field] for h, r in at[i].items()}, rank if rule else 4)
                for i in range(len(knots))]

    def polyline(at: dict, field: int) -> list[list[list[int]]]:  # per knot, [pixels, bytes] at each square side
        return [[[h * h, r[field]] for h, r in sorted(at[i].items())] if i in at else [] for i in range(len(knots))]

    built = [(weight, rank, at, laws(at, rank, 0, True), laws(at, rank, 4, True))
             for (weight, rank, *_), at in ordered]
    # per knot, the square sides where some convolution's call changes path (its rule's law crosses the threshold):
    # between two grid sizes a format can change only there
    crossings = [sorted({c for _, rank, _, rule, fewest in built for law in (rule[i], fewest[i]) if law is not None
                         for c in [_crossing(law, rank)] if c is not None}) for i in range(len(knots))]
    return [[weight, rank, rule, laws(at, rank, 2, False),
             [_channels_last_from({h: (-1 if r[1] or rank == 3 else r[0], r[3]) for h, r in at[i].items()},
                                  crossings[i], rule[i], rank) if i in at else None for i in range(len(knots))],
             fewest, laws(at, rank, 5, False), polyline(at, 6), polyline(at, 7)]
            for weight, rank, at, rule, fewest in built]


def _law_at(law: list[float], rank: int, side: float) -> float:
    """A rule's law (:func:`_affine`) at a square side: its U is the height for a 3-D input, else the pixels."""
    a, b, c = law
    return (a * side if rank == 5 else a * side * side) + b * side + c


def _crossing(law: list[float], rank: int) -> float | None:
    """The square side above which a convolution's rule (its law, :func:`_affine`) passes torch's oneDNN threshold
    (:data:`vaemem.estimate.ONEDNN_MIN_ELEMENTS`), or None where it never does at a positive side."""
    a, b, c = law
    t = est.ONEDNN_MIN_ELEMENTS - c
    if rank == 5 or a == 0:  # linear in the side
        slope = a + b if rank == 5 else b
        side = t / slope if slope > 0 else None
    else:
        side = (-b + math.sqrt(b * b + 4 * a * t)) / (2 * a) if b * b + 4 * a * t >= 0 else None
    return side if side is not None and side > 0 else None


def _channels_last_from(seen: dict[int, tuple[int, int]], crossings: list[float], law: list[float] | None,
                        rank: int) -> int | None:
    """Where a convolution's input is channels-last at one knot (which doubles oneDNN's weight copy), from the
    grid's dry runs (side -> (elements the rule read, -1 where it always runs on oneDNN; channels-last)): None where
    no dry run's was, else the rule's elements above which it is taken to be (-1: at every size). Why a threshold in
    the convolution's own elements: the format comes from an earlier convolution's path (HunyuanVideo 1.5's
    attention projection keeps its channels-last output only where oneDNN runs it, at 128x128 x 9 frames and not
    at 160x96), and both grow with the frame. Between the largest grid side without it and the smallest with it,
    the format can change only where some convolution changes path (``crossings``, square sides, from every
    convolution's law at the knot): the threshold is this convolution's elements (its ``law``) at the first such
    side, or, where none lies there, the most that grid side read (an upper bound). Exact where the convolution
    that decides the format is the first to cross: 160x96 x 9 frames, between the grid's 64 and 128 px, held one
    copy and was priced two by the grid's bound (1848 MiB for 895)."""
    on = [s for s, (_, last) in seen.items() if last]
    if not on:
        return None
    below = [s for s, (_, last) in seen.items() if not last and s < min(on)]
    if not below:
        return -1
    bound = max(seen[s][0] for s in below)
    first = [c for c in crossings if max(below) < c <= min(on)]
    if bound >= 0 and law is not None and first:
        return max(bound, math.floor(_law_at(law, rank, min(first))))
    return bound


def _milli_up(x: float) -> float:
    """Bytes per pixel rounded up to 1e-3 B (an upper bound that keeps the file short and deterministic)."""
    return math.ceil(x * 1000 - 1e-6) / 1000


def _input_bytes_per_pixel_frame(spec: ModelSpec, dtype: str) -> int:
    """The op's input (a sample clip) in bytes per pixel and frame: its channels x the element size."""
    return spec.config.get("in_channels", 3) * est.ELEMENT_SIZE[dtype]


def _per_knot(ratios: dict[tuple, float], wanted: list[tuple], knots: list[int]) -> float | list[float]:
    """Per knot, the largest of ``ratios`` over the grid's sizes at that knot and every later one, rounded up to
    1e-4: an upper bound for every clip from that knot on, so the list never rises. One number where every knot has
    the same, else one per knot (:func:`vaemem.estimate.hidden_factor_at`). Of the sizes in the calibration domain
    (:data:`vaemem.estimate.DOMAIN_MIN_FRAME_PIXELS`) where a knot has any: at 64 px the peak falls elsewhere and
    the factor runs up to 3 % higher (LTX-2's fp32 decode at 9 frames 1.247 at 64 px, 1.216-1.207 from 256 px; its
    bf16 one without AMX at one frame 1.309 and 1.273), which over-stated the clips apps run and, left out by size,
    put LTX-2's fp32 decode at 160x96 x 9 under (0.98); a request below the domain may hold up to that more than
    the factor says, and the lines below the domain (``small``) are fitted in the same dry runs."""
    def sizes(fr: int) -> list[tuple]:  # the knot's sizes in the calibration domain, where it has any
        at = [k for k in wanted if k[2] == fr]
        return [k for k in at if k[0] * k[1] >= est.DOMAIN_MIN_FRAME_PIXELS] or at

    per = [math.ceil(max(ratios[k] for k in sizes(fr)) * 1e4 - 1e-6) / 1e4 for fr in knots]
    per = [max(per[i:]) for i in range(len(per))]
    return per[0] if len(set(per)) == 1 else per


def derive(entries: list[dict[str, Any]], name: str, op: str, dtype: str, tiled: bool,
           attention: str = "fused") -> dict[str, Any] | None:
    """The structure of (``name``, op, dtype, tiling, attention path) from dry-run cache entries, or None if the
    cache lacks its grid; on the math path it is the structure of the attention peak. Rounded to whole bytes (per
    pixel to 1e-3) so the file is deterministic."""
    spec = get_spec(name)
    peaks, outputs, splits, modules, convs, hidden, no_amx = {}, {}, {}, {}, {}, {}, {}
    value = "attention_peak_bytes" if attention == "math" else "peak_bytes"
    unsplit = spec.info.split_convs and attention == "fused" and not tiled
    whole_clip = tiled and spec.info.temporal_windows is not None
    for e in entries:
        s = e["spec"]
        if (s["model"], s["op"], s["dtype"], bool(s["tile"])) == (name, op, dtype, tiled) and s["batch"] == 1 \
                and s["overlap"] == GRID_OVERLAP and s["attention"] == attention and not s["slicing"] \
                and s["conv3d"] == "native" and s.get("unsplit", False) == unsplit \
                and s.get("whole_clip", False) == whole_clip:
            k = (s["width"], s["height"], s["frames"], s["tile"])
            peaks[k], outputs[k], splits[k] = e[value], e.get("output_bytes"), e.get("split_convs", [])
            modules[k] = e.get("peak_module")
            convs[k] = e.get("conv_inputs")
            hidden[k] = e["onednn_peak_bytes"] / e["peak_bytes"] if "onednn_peak_bytes" in e else None
            no_amx[k] = e["onednn_peak_bytes_no_amx"] / e["peak_bytes"] if "onednn_peak_bytes_no_amx" in e else None
            _check_conv_inputs(convs[k], f"{k} of {name} {op} {dtype}")
    wanted = [(g.width, g.height, g.frames, g.tile) for g in grid(name, op, dtype, tiled, attention)]
    if any(k not in peaks for k in wanted):
        return None
    f = spec.spatial_factor
    ws = derive(entries, name, op, dtype, False) if tiled and spec.info.tiles_run_untiled_op else None
    if tiled and spec.info.tiles_run_untiled_op and ws is None:
        return None  # its tiles are priced by the untiled structure, whose grid the cache lacks
    if tiled and ws is None and any(math.prod(c[:5]) > est.SPLIT_INPUT_ELEMENTS for k in wanted for c in splits[k]):
        # (CogVideoX's two-latent-frame batches would split only past ~2900 px tiles)
        raise ValueError(f"{name} {op} {dtype}: a tiled dry run of the grid split a convolution, a step the tiled "
                         f"basis does not describe")
    if tiled:
        knots = frame_knots(spec, True)
        coef = []
        rule, scale = spec.tile_stride_rule(op), spec.tile_scale(op)
        # a class that patchifies before it tiles (Wan 2.2's encode) holds the patchified copy of the whole clip,
        # the input's bytes, for the whole op: a term of the image, not of a tile (without it 0.94-1.11x off the grid)
        held = _input_bytes_per_pixel_frame(spec, dtype) / scale ** 2 if scale > 1 else 0.0
        for fr in knots:
            at = [k for k in wanted if k[2] == fr]  # the loop's grid, then the assembly's point
            big = at[-1]
            o_copies = (_milli_up(spec.info.tiled_output_copies * outputs[big] / (big[0] * big[1]))
                        if outputs[big] else None)
            try:
                coef.append(_tiled_knot(fr, at, peaks, modules, f, rule, o_copies, spec.info.causal_mask, scale,
                                        held, ws))
            except ValueError as e:
                raise ValueError(f"{name} {op} {dtype}: {e}") from None
        out = {"kind": "tiled", "overlap": GRID_OVERLAP, "spatial_factor": f, "stride_rule": rule,
               **({"tile_scale": scale, "held_bytes_per_pixel_frame": held} if scale > 1 else {}),
               **({"tile_working_set": ws} if ws is not None else {}), "tile_min": min(t for *_, t in wanted),
               "knots": knots, "coef": coef}
        if spec.info.causal_mask:  # past its grid's tiles the mask leads (TILE_MASK_EXTRA)
            out["tile_max"] = max(t for *_, t in wanted)
        if whole_clip:  # the windows, with their output's bytes per pixel and frame (rounded up to 1e-3 B)
            min_frames, stride = spec.info.temporal_windows  # type: ignore[misc]
            tf = spec.temporal_factor
            if any(outputs[k] is None for k in wanted):
                raise ValueError(f"{name} {op} {dtype}: a tiled dry run records no output bytes")
            per = max(outputs[k] / (k[0] * k[1] * (k[2] if op == "decode" else (k[2] - 1) // tf + 1))
                      for k in wanted)
            out["windows"] = {"op": op, "frames": min_frames, "stride_frames": stride, "temporal_factor": tf,
                              "bytes_per_pixel_frame": _milli_up(per)}
    else:
        knots = frame_knots(spec)
        slopes, quads, bases = _piece(peaks, knots, _sizes(spec, attention))
        out = {"kind": "frames", "knots": knots, "bytes_per_pixel": slopes, "bytes_per_pixel_squared": quads,
               "base_bytes": bases, "area_min": min(w * h for w, h in _sizes(spec, attention))}
        if spec.is_video and attention == "fused":
            up = _upper_sizes(spec)
            u_slopes, u_quads, u_bases = _piece(peaks, knots, up)
            out["upper"] = {"area_from": up[0][0] * up[0][1], "bytes_per_pixel": u_slopes,
                            "bytes_per_pixel_squared": u_quads, "base_bytes": u_bases}
        if attention == "math" and len(knots) >= 3:  # scores over frames (Mochi) grow faster than the clip
            out["extrapolate"] = "quadratic"
        if attention == "fused" and all(outputs[k] is not None for k in wanted):
            # one sample's output per pixel (what slicing keeps per finished sample): exactly linear in area, so
            # the largest ratio of the three sizes, rounded up to 1e-3 B/px
            out["output_bytes_per_pixel"] = [
                _milli_up(max(outputs[(w, h, fr, None)] / (w * h) for w, h in _sizes(spec))) for fr in knots]
    if spec.info.encodes_in_clips and attention == "fused":  # a clip's output per pixel (rounded up to 1e-3 B)
        # and the input's bytes per pixel and frame, of the padded copy and the repeated frames held to the end
        cf = spec.config["clip_length"]
        if any(outputs[k] is None for k in wanted if k[2] == cf):
            raise ValueError(f"{name} {op} {dtype}: a dry run of one clip records no output bytes")
        per = max(outputs[k] / (k[0] * k[1]) for k in wanted if k[2] == cf)
        out["clips"] = {"frames": cf, "output_bytes_per_pixel": _milli_up(per),
                        "pad_bytes_per_pixel_frame": _input_bytes_per_pixel_frame(spec, dtype)}
    if not tiled and attention == "fused" and dtype == "fp32" and all(convs[k] is not None for k in wanted):
        out["conv_transients"] = _conv_transients({k: convs[k] for k in wanted}, out["knots"])
        batch = _batch_entries(entries, name, op, dtype)
        if batch and all(e.get("conv_inputs") for e in batch):  # schema 26: the live bytes at a batch's calls
            _add_batch_live(out["conv_transients"], batch, {tuple(c[:4]) for k in wanted for c in convs[k]})
    if not tiled and all(hidden[k] is not None for k in wanted):
        # the dry run with the buffers oneDNN's ops hold while they run, a multiple of the plain one: for an image
        # architecture the same at every size (to 1e-4; in fp32 of one sample: a batch runs channels-last, which holds
        # no reorder, and SD1.5's decode in two is 1.0x its plain dry run; on the math path 1.12-1.20 where the score
        # matrix leads, the fused path's factor below, so the largest is the fused one); for a video one nearly the
        # same at every size (within 0.01-0.03) but not at every clip length: a one-frame clip differs most
        # (HunyuanVideo 1.5's bf16 encode without AMX 1.44, its clips of 5-33 frames 1.0; Wan 2.1's 1.31 and
        # 1.05-1.08) and the longer clips settle by 9 frames. Per knot (schema 17), the largest ratio of its sizes in
        # the calibration domain and of every later knot's (_per_knot). Why per knot: one factor for every clip, the
        # grid's largest, put the 9-frame clips' dry runs up to 1.44x too high, and left out by architecture the bf16
        # video rows without AMX 1.21-1.56x over at the median (HunyuanVideo's encode 1.21, HunyuanVideo 1.5's 1.56;
        # 1.07 and 1.12 per knot). Why the later knots' too: where a one-frame clip holds less than the clips
        # (HunyuanVideo's bf16 decode with AMX 1.35 against 1.41-1.44), its demand followed the clips' factor: with
        # its own, left out HunyuanVideo's one frame at 320x192 came out under (0.99), and held out LTX-2.3's fp32
        # one-frame encode at 1024x576 (0.94)
        out["onednn_hidden_factor"] = _per_knot(hidden, wanted, out["knots"])
    if not tiled and dtype != "fp32" and all(no_amx[k] is not None for k in wanted):
        # the same on a CPU without AMX tiles, whose half-precision convolutions hold a copy of their input (two for
        # a 1x1 kernel) where the AMX rule counts twice their output (vaemem.tracing.counter.onednn_hidden_bytes)
        out["onednn_hidden_factor_no_amx"] = _per_knot(no_amx, wanted, out["knots"])
    if not tiled and attention == "fused" and "onednn_hidden_factor" in out:
        out.update(_batch_factors(entries, name, op, dtype, "onednn_hidden_factor_no_amx" in out))
    errors = [abs(est.structure_bytes(out, w, h, 1, fr, t) - peaks[(w, h, fr, t)]) / max(peaks[(w, h, fr, t)], 1)
              for w, h, fr, t in wanted]  # of the smooth part: a split model's dry runs here are unsplit
    out["max_rel_error_in_sample"] = round(max(errors), 5)
    if unsplit:  # the split convolutions per knot, from its two largest dry runs
        layers = [_split_piece(splits, sorted((k for k in wanted if k[2] == fr), key=lambda k: k[0] * k[1]))
                  for fr in out["knots"]]
        if len(layers) > 1 and not est.split_compatible(layers[-2], layers[-1]):
            raise ValueError(f"{name} {op} {dtype}: its last two knots list different split convolutions, so "
                             f"longer clips cannot be extrapolated")
        out["split"] = {"bytes_per_element": est.ELEMENT_SIZE[dtype], "layers": layers}
    out["n_dry_runs"] = len(wanted)
    return out


def _check_conv_inputs(convs: list[list[int]] | None, where: str) -> None:
    """Refuse a dry run (``where`` names it) whose convolution records are an older vaemem's (another length)."""
    if convs is not None and any(len(c) != CONV_INPUT_FIELDS for c in convs):
        raise ValueError(f"the dry run {where} holds an older vaemem's conv_inputs: re-run it "
                         f"(`vaemem trace --zoo --record`)")


def _batch_entries(entries: list[dict[str, Any]], name: str, op: str, dtype: str) -> list[dict[str, Any]]:
    """The cache entries of :func:`batch_grid` (all of them, in its order), or [] where any is missing."""
    want = [g.key for g in batch_grid(name, op, dtype)]  # as derive's filter: the grid's very dry runs
    got = {k: e for e in entries if e["spec"]["model"] == name and e["spec"]["batch"] == BATCH_KNOT
           for k in [TraceSpec.from_dict(e["spec"]).key] if k in want}
    for k, e in got.items():  # an older vaemem's records lack the live bytes read here
        _check_conv_inputs(e.get("conv_inputs"), k)
    return [got[k] for k in want] if want and len(got) == len(want) else []


def _add_batch_live(transients: list[list[Any]], batch: list[dict[str, Any]], keys: set[tuple]) -> None:
    """Append to each convolution of an image structure's ``conv_transients`` (one knot) the most bytes live at its
    calls in the dry runs of a batch (:data:`BATCH_KNOT` samples, :func:`batch_grid`), as [pixels, bytes] at each of
    their square sides (schema 26), where the batch's convolutions are exactly one sample's (``keys``: weight
    elements, input rank, input channels, kernel volume) with a record at every size (else none is appended: a
    batch is then priced by one sample's calls, over). Why: a 2-D
    batch's convolutions take their input channels-last, and a call then holds no reorder of its output
    (:func:`vaemem.tracing.counter.conv_live_bytes`), where a batch's call priced as its samples' calls held one:
    SD1.5's bf16 decode at 512 px in two priced its call peak at 961 MiB, whose live tensors' peak is 768 and demand
    794 (campaign 39)."""
    per: dict[tuple, list[list[int]]] = {}
    for e in sorted(batch, key=lambda e: e["spec"]["width"] * e["spec"]["height"]):
        px = e["spec"]["width"] * e["spec"]["height"]
        for weight, rank, channels, volume, *rec in e["conv_inputs"]:
            per.setdefault((weight, rank, channels, volume), []).append([px, rec[6]])
    ordered = sorted(per.items(), key=lambda kv: tuple(-x for x in kv[0]))  # _conv_transients' order
    if set(per) != keys or len(ordered) != len(transients) or any(
            (k[0], k[1]) != (c[0], c[1]) or len(v) != len(batch) for (k, v), c in zip(ordered, transients)):
        return
    for (_, v), c in zip(ordered, transients):
        c.append([v])


def _batch_factors(entries: list[dict[str, Any]], name: str, op: str, dtype: str,
                   no_amx: bool) -> dict[str, float]:
    """An untiled image structure's oneDNN factors of a batch (schema 25): the largest ratio of the dry run with
    oneDNN's buffers to the plain one over its dry runs of :func:`batch_grid` (rounded up to 1e-4), as
    ``onednn_hidden_factor_batch`` and, beside one sample's (``no_amx``), ``onednn_hidden_factor_no_amx_batch``; none
    where the
    entries lack them (an older cache) or the architecture has none (video). Why: a 2-D batch's convolutions take
    their input channels-last on the CPU, and oneDNN holds no copy or reorder of such an input
    (vaemem.tracing.counter.onednn_hidden_bytes): SD1.5's and FLUX.1's bf16 decodes at 512 px in two and three
    needed their plain dry run plus 26 MiB without AMX (campaign 39), where one sample's factor, 1.333, priced them
    1.39x; the batch's dry run of 1.0 prices them at 1.05x."""
    got = _batch_entries(entries, name, op, dtype)
    if not got or any("onednn_peak_bytes" not in e for e in got):
        return {}
    up = lambda field: math.ceil(max(e[field] / e["peak_bytes"] for e in got) * 1e4 - 1e-6) / 1e4  # noqa: E731
    out = {"onednn_hidden_factor_batch": up("onednn_peak_bytes")}
    if no_amx and all("onednn_peak_bytes_no_amx" in e for e in got):
        out["onednn_hidden_factor_no_amx_batch"] = up("onednn_peak_bytes_no_amx")
    return out


_DERIVED: dict[str, dict[str, dict[str, Any]]] = {}  # per entries digest: this process's structures of them


def derive_all(entries: list[dict[str, Any]], digest: str | None = None) -> dict[str, dict[str, Any]]:
    """Every structure the cache can give, keyed by :func:`vaemem.estimate.structure_key`. ``digest``: the
    entries' ``entries_sha256``, which :func:`vaemem.tracing.cache.read_cache` checked: the structures of the same
    entries are derived once per process, each call getting its own copy (deriving all of them takes 10 s here,
    35 s before _tiled_piece's iteration was memoised; a session that fits several times, as the test suite's CLI
    tests do, derived them each time)."""
    if digest is not None and digest in _DERIVED:
        return copy.deepcopy(_DERIVED[digest])
    out = {}
    for name, spec in registry().items():
        if spec.tiny or spec.architecture != name:
            continue
        for op, dtype, tiled, attention in structured(name):
            s = derive(entries, name, op, dtype, tiled, attention)
            if s is not None:
                out[est.structure_key(name, op, dtype, tiled, attention)] = s
    if digest is not None:
        _DERIVED[digest] = copy.deepcopy(out)
    return out
