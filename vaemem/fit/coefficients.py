"""From measurement files to the coefficient file the estimator reads, and the check that it is reproducible.

Grouping: runs with status ok are grouped by (architecture, op, conv backend, allocator, dtype, OS, tiled). Within
a group a point is (rig, point key) and counts with the largest demand of its runs. Each group gets an upper
envelope (:mod:`vaemem.fit.envelope`), multiplied by (1 + margin) and rounded *up* (slope to 0.01 B/px, base to
1 MiB) so neither rounding nor the margin ever uncovers a point.

The file is deterministic: sorted keys, floats rounded to fixed decimals, no timestamps, so the same measurements
give the same bytes on any machine, and ``vaemem fit --check`` can compare bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError
# the estimator owns the key, the line, the weight copy and the schema
from vaemem.estimate import (AMX_BACKEND, DOMAIN_MIN_FRAME_PIXELS, FLAT_TERMS, SCHEMA_VERSION, GROUP_KEYS,
                             calibration_bytes, check_key, group_id, platform_id, transfer_bytes, transfer_line,
                             variant_key, variant_parts)
from vaemem.files import schema_error, write_atomic  # noqa: F401  (re-exported: fit writes its file through it)
from vaemem.fit.envelope import MIB, Line, fit_envelope, fit_lower, fit_upper
from vaemem.measuring.parent.store import BadLine, dumps_line, expand_paths, iter_records
from vaemem.measuring.point import DEFAULT_OVERLAP, VARIANT_DEFAULTS, Point, variant_suffix
from vaemem.measuring.point import validate as validate_point

# A group of variant points (``.../untiled/sliced``) enters the calibrations through its dry runs and gets no pixel
# line.

EXCEPTIONS_SCHEMA_VERSION = 1
QUALITY_BOUND = 1.3  # worst reservation / demand allowed after the margin
# Rigs whose records say "onednn" for half precision on a CPU with AMX tiles, measured before vaemem.estimate's
# conv_backend told AMX apart (the README names their CPU: a Xeon with AVX512-BF16 and AMX): rig name -> the UTC
# time before which a record of it is read so. Their half-precision oneDNN points are keyed as AMX_BACKEND, as a
# rig records it now; a later "onednn" half-precision record of the name came from a CPU without AMX.
AMX_RIGS_BEFORE_KEY = {"xeon-amx-2core": "2026-12-03T19:00:00Z", "xeon-amx-2core-plan": "2026-12-03T19:00:00Z"}
SLOPE_STEP = 0.01  # bytes per pixel
BASE_STEP = MIB
FACTOR_STEP = 1e-4  # calibration factors (dimensionless)
FIT_METHOD = ("upper envelope by linear programme (scipy.optimize.linprog, HiGHS): minimise sum(line/demand) "
              "subject to line >= demand at every point, slope >= 0, base >= 0; then x (1 + margin), rounded up")


def ceil_step(value: float, step: float) -> float:
    """Round up to a multiple of ``step``; a 1e-9 relative guard keeps solver noise from adding a whole step."""
    units = math.ceil(round(value / step * (1 - 1e-9), 6))
    return round(units * step, 10)


@dataclass
class PointDemand:
    rig: str
    point_key: str
    pixels: int
    tile_pixels: int
    demand_bytes: int
    runs: int
    backend: str
    point: dict[str, Any] = field(default_factory=dict)  # model, width, height, batch, frames, tile
    run_demands: list[int] = field(default_factory=list)  # every ok run, bytes
    sources: list[str] = field(default_factory=list)
    torch_version: str = "?"


@dataclass
class Dataset:
    groups: dict[str, tuple[dict[str, Any], list[PointDemand]]]
    digest: str
    rigs: list[str]
    runs: int
    skipped: list[BadLine]


def record_conv_backend(r: dict[str, Any]) -> str:
    """The conv backend key of a measurement record: its rig's, or :data:`AMX_BACKEND` for a half-precision
    oneDNN record of a rig in :data:`AMX_RIGS_BEFORE_KEY` made before its time."""
    conv = r["rig"]["conv_backend"]
    before = AMX_RIGS_BEFORE_KEY.get(r["rig"]["name"])
    if conv == "onednn" and r["dtype"] != "fp32" and before is not None and r.get("utc_time", "") < before:
        return AMX_BACKEND
    return conv


def load_dataset(paths: list[str | Path], skip_bad: bool = False) -> Dataset:
    """Read every measurement under ``paths`` and group the ok runs (see module docstring)."""
    from vaemem.models.zoo import get_spec

    files = expand_paths(paths)
    skipped: list[BadLine] = []
    records, seen_lines = [], set()
    for p, n, r in iter_records(files, skip_bad=skip_bad, bad=skipped):
        if r.get("kind", "measure") != "measure":  # a bench-conv3d line beside the measurements
            continue
        line = dumps_line(r)
        if line not in seen_lines:  # a run recorded twice (a shard file copied beside the merged one) counts once
            seen_lines.add(line)
            records.append((p, n, r))
    if not records:
        raise VaememError(f"no measurements in {', '.join(str(p) for p in paths)}")
    digest = hashlib.sha256(b"".join(sorted(dumps_line(r) for _, _, r in records))).hexdigest()
    points: dict[tuple[str, str], PointDemand] = {}
    keys: dict[tuple[str, str], dict[str, Any]] = {}
    rigs: set[str] = set()
    n_ok = 0
    for path, no, r in records:
        if r.get("status") != "ok":
            continue
        try:
            rig = r["rig"]
            key = {"architecture": get_spec(r["model"]).architecture, "op": r["op"],
                   "conv_backend": record_conv_backend(r), "allocator": r["allocator"], "dtype": r["dtype"],
                   "os": rig["os"], "tiled": r["tile"] is not None}
            ident = (rig["name"], r["point_key"])
            demand, pixels = int(r["demand_bytes"]), int(r["pixels"])
            # a point that cannot run, or a key no coefficient file may hold, is no measurement (the rules of a
            # point and of a key have one owner each: vaemem.measuring.point, vaemem.estimate)
            validate_point(Point.from_dict({**VARIANT_DEFAULTS, **r}))
            check_key(key, "record")
        except (KeyError, TypeError, ValueError, VaememError) as e:
            what = "lacks a usable field" if isinstance(e, (KeyError, TypeError)) else "holds an unusable value"
            bad = BadLine(path, no, f"record {what} ({e})")
            if not skip_bad:
                raise VaememError(str(bad)) from None
            skipped.append(bad)
            continue
        n_ok += 1
        rigs.add(rig["name"])
        if ident in keys and keys[ident] != key:
            raise VaememError(f"{path}:{no}: point {r['point_key']} of rig {rig['name']} disagrees with an earlier "
                              f"run in key fields ({group_id(keys[ident])} vs {group_id(key)})")
        keys[ident] = key
        pd = points.get(ident)
        if pd is None:
            shape = {k: r[k] for k in ("model", "width", "height", "batch", "frames", "tile")}
            shape.update({k: r.get(k, d) for k, d in VARIANT_DEFAULTS.items()})
            pd = points[ident] = PointDemand(rig["name"], r["point_key"], pixels, (r["tile"] or 0) ** 2, demand,
                                             0, rig.get("backend", "?"), shape,
                                             torch_version=str(rig.get("torch_version", "?")))
        pd.demand_bytes = max(pd.demand_bytes, demand)
        pd.run_demands.append(demand)
        pd.runs += 1
        pd.sources.append(f"{path}:{no}")
    if n_ok == 0:
        raise VaememError("no run with status ok in the measurements: nothing to fit, report or plot")
    groups: dict[str, tuple[dict[str, Any], list[PointDemand]]] = {}
    for ident, pd in sorted(points.items()):
        gid = group_id(keys[ident]) + variant_suffix(pd.point)
        groups.setdefault(gid, (keys[ident], []))[1].append(pd)
    for gid, (_, pts) in groups.items():
        backends = {p.backend for p in pts}
        if len(backends) > 1:
            raise VaememError(f"group {gid} mixes device backends {sorted(backends)}: "
                              f"{pts[0].sources[0]} vs a {sorted(backends)[-1]} run")
    return Dataset(groups, digest, sorted(rigs), n_ok, skipped)


def load_exceptions(path: Path | None) -> dict[str, str]:
    """Groups allowed past the quality bound: ``{"schema_version": 1, "groups": {group id: reason}}``."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except OSError as e:  # a directory, no permission
        raise VaememError(f"cannot read exceptions file {path}: {e.strerror}") from None
    except ValueError as e:
        raise VaememError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise VaememError(f"{path}: not an exceptions file (a JSON object with schema_version and groups)")
    version = data.get("schema_version")
    if version == EXCEPTIONS_SCHEMA_VERSION and "groups" not in data:
        raise VaememError(f"{path}: not an exceptions file (a JSON object with schema_version and groups)")
    wrong = schema_error(version, (EXCEPTIONS_SCHEMA_VERSION,))
    if wrong:  # a newer file may hold its groups otherwise: said newer first
        raise VaememError(f"{path}: {wrong}")
    groups = data["groups"]
    if not isinstance(groups, dict):
        raise VaememError(f"{path}: groups must be an object of group id: reason")
    if not all(isinstance(v, str) and v.strip() for v in groups.values()):
        raise VaememError(f"{path}: every exception needs a non-empty reason")
    return dict(groups)


def stored_line(line: Line, margin: float) -> Line:
    """The line as stored: x (1 + margin), rounded up."""
    return Line(ceil_step(line.slope * (1 + margin), SLOPE_STEP), ceil_step(line.base * (1 + margin), BASE_STEP),
                ceil_step(line.tile_slope * (1 + margin), SLOPE_STEP) if line.tile_slope else 0.0)


@dataclass
class FitResult:
    document: dict[str, Any]
    violations: list[str]  # points past the quality bound in groups with no exception
    unneeded: list[str] = field(default_factory=list)  # groups with an exception whose line is within the bound


def fit_dataset(data: Dataset, margin: float = 0.05, exceptions: dict[str, str] | None = None,
                traces: dict[str, Any] | None = None) -> FitResult:
    """Fit every group and build the coefficient document (a dict, ready for :func:`dumps`). ``traces`` is the
    dry-run cache (:mod:`vaemem.tracing.cache`) the structures are derived from; without it the file has pixel
    lines only."""
    from vaemem.models.zoo import ATTENTION_OPS, LARGEST_CONV_PARAMETERS, OP_PARAMETERS, PARAMETERS, registry
    from vaemem.tracing.structure import derive_all

    if not 0 <= margin < 1:
        raise VaememError(f"margin must be in [0, 1), got {margin}")
    exceptions = exceptions or {}
    unknown = set(exceptions) - set(data.groups)
    if unknown:
        raise VaememError(f"exceptions name groups with no data: {', '.join(sorted(unknown))}")
    groups, unfitted, violations = [], [], []
    used: set[str] = set()  # the groups whose exception a line past the bound took
    structures = derive_all(list(traces["entries"].values()), traces.get("entries_sha256")) if traces else {}
    calibrations = calibrate(data, structures, margin)
    calibrated = set()  # groups priced by a calibration line: their pixel line would be dead data
    for cal in calibrations:
        for gid, (arch, line) in line_groups(cal).items():
            calibrated.add(gid)
            if line["worst_ratio"] > QUALITY_BOUND:
                if gid in exceptions:
                    line["exception"] = exceptions[gid]
                    used.add(gid)
                else:
                    violations.append(f"calibration {cal['calibration']} of {arch}: reserves up to "
                                      f"{line['worst_ratio']:.2f}x a measured demand")
    for gid, (key, pts) in sorted(data.groups.items()):
        if gid in calibrated:
            continue
        if all(priced_as(p.point, key, structures)[1] is not key for p in pts):
            unfitted.append({**key, "group": gid, "n_points": len(pts), "reason": (
                "tiled points whose first tile is the whole image: priced as the untiled request, by its "
                "platform's calibration")})
            continue
        if gid != group_id(key):
            priced = dry_of(pts[0].point, key, structures) is not None
            unfitted.append({**key, "group": gid, "n_points": len(pts), "reason": (
                "a variant (slicing or the attention path): priced through its dry run by its platform's "
                "calibration, never by a pixel line" if priced else
                "a variant no structure covers (a tile overlap other than 0.25, or the conv3d decomposition): kept "
                "as data, priced by nothing")})
            continue
        pixels = [p.pixels for p in pts]
        if len(set(pixels)) < 2:
            unfitted.append({**key, "group": gid, "reason": "fewer than 2 distinct pixel counts", "n_points": len(pts)})
            continue
        raw = fit_envelope(pixels, [p.demand_bytes for p in pts], [p.tile_pixels for p in pts] if key["tiled"] else None)
        line = stored_line(raw, margin)
        ratios = [line(p.pixels, p.tile_pixels) / p.demand_bytes for p in pts]
        worst = max(ratios)
        entry = {**key, "group": gid, "slope_bytes_per_pixel": line.slope, "base_bytes": int(line.base),
                 "n_points": len(pts), "n_runs": sum(p.runs for p in pts), "pixels_min": min(pixels),
                 "pixels_max": max(pixels), "worst_ratio": round(worst, 4),
                 "median_ratio": round(statistics.median(ratios), 4)}
        if key["tiled"]:
            entry["tile_slope_bytes_per_tile_pixel"] = line.tile_slope
        if worst > QUALITY_BOUND:
            if gid in exceptions:
                entry["exception"] = exceptions[gid]
                used.add(gid)
            else:
                violations += [f"{gid}: {p.point_key} on {p.rig} reserved {r:.2f}x its demand "
                               f"({line(p.pixels, p.tile_pixels) / MIB:.0f} MiB for {p.demand_bytes / MIB:.0f} MiB)"
                               for p, r in zip(pts, ratios) if r > QUALITY_BOUND]
        groups.append(entry)
    reg = registry()
    archs = {g["architecture"] for g in groups} | {u["architecture"] for u in unfitted}
    models = {name: {"architecture": s.architecture, "parameters": PARAMETERS[name],
                     "op_parameters": OP_PARAMETERS[name], "largest_conv_parameters": LARGEST_CONV_PARAMETERS[name],
                     "force_upcast": bool(s.config.get("force_upcast", False)),
                     "spatial_factor": s.spatial_factor, "temporal_factor": s.temporal_factor,
                     "frame_step": s.info.frame_step, "kernel": s.kernel, "ops": list(s.ops),
                     "refused": {op: s.refusal(op) for op in ("decode", "encode") if s.refusal(op)},
                     "refused_tiled": {op: s.tiled_refusal(op) for op in ("decode", "encode") if s.tiled_refusal(op)},
                     "refused_batch": {op: s.batch_refusal(op) for op in ("decode", "encode") if s.batch_refusal(op)},
                     "attention_ops": list(ATTENTION_OPS[name]),
                     "family": "sd" if s.class_name == "AutoencoderKL" and s.latent_channels == 4 else s.family}
              for name, s in reg.items() if s.architecture in archs or not s.tiny}
    document = {
        "schema_version": SCHEMA_VERSION,
        "fit_method": FIT_METHOD,
        "margin": margin,
        "quality_bound": QUALITY_BOUND,
        "rounding": {"slope_bytes_per_pixel": SLOPE_STEP, "base_bytes": BASE_STEP, "factor": FACTOR_STEP,
                     "direction": "up"},
        "pixels": "output pixels x batch x frames for decode, input pixels x batch x frames for encode; tiled "
                  "groups add tile_slope_bytes_per_tile_pixel x tile^2",
        "cast_term": "parameters x (run element size - loaded element size) when the run dtype is wider",
        "measurements_sha256": data.digest,
        "n_runs": data.runs,
        "rigs": data.rigs,
        "models": models,
        "groups": groups,
        "unfitted": unfitted,
        "structures": structures,
        "calibrations": calibrations,
        "dry_runs": ({k: traces[k] for k in ("torch_version", "diffusers_version", "entries_sha256")}
                     | {"n_entries": len(traces["entries"])}) if traces else None,
    }
    return FitResult(document, violations, sorted(set(exceptions) - used))


def request_of(point: dict[str, Any], key: dict[str, Any]) -> dict[str, Any] | None:
    """The estimator's keyword arguments that price a measured point (after model, op, width, height), or None
    for a variant the estimator cannot express (another tile overlap, the conv3d decomposition)."""
    if point.get("overlap", DEFAULT_OVERLAP) != DEFAULT_OVERLAP or point.get("conv3d", "native") != "native":
        return None
    return {"dtype": key["dtype"], "backend": key["conv_backend"], "allocator": key["allocator"], "os": key["os"],
            "batch": point["batch"], "frames": point["frames"], "tile": point["tile"],
            "attention": point.get("attention", "fused"), "slicing": point.get("slicing", False)}


def dry_of(point: dict[str, Any], key: dict[str, Any], structures: dict[str, Any],
           hidden: float = 1.0, hidden_batch: float | None = None) -> tuple[float, float] | None:
    """(dry-run peak, dry-run peak of one sample) of a measured point from its architecture's structures, by the
    estimator's own evaluation (:func:`vaemem.estimate.structure_peak_bytes`) of the point's request, with oneDNN's
    buffers where ``hidden`` (:func:`hidden_of`) is given (``hidden_batch``: an unsliced batch's, schema 25); None
    where nothing covers it (a variant the estimator cannot express, or no structure for it)."""
    from vaemem import estimate as est
    from vaemem.models.zoo import ATTENTION_OPS

    req = request_of(point, key)
    if req is None:
        return None
    arch, op = key["architecture"], key["op"]
    doc = {"models": {arch: {"architecture": arch, "attention_ops": list(ATTENTION_OPS[arch])}},
           "structures": structures}
    kw = dict(dtype=req["dtype"], frames=req["frames"], tile=req["tile"], attention=req["attention"], hidden=hidden)
    w, h = point["width"], point["height"]
    dry = est.structure_peak_bytes(doc, arch, op, w, h, batch=req["batch"], slicing=req["slicing"],
                                   hidden_batch=hidden_batch, **kw)
    return None if dry is None else (dry, est.structure_peak_bytes(doc, arch, op, w, h, batch=1, **kw))


def hidden_of(key: dict[str, Any], structures: dict[str, Any], *, frames: int, batch: int = 1) -> float:
    """The factor from the dry-run peak of a point of group ``key`` to the one its platform's lines are in
    (:func:`vaemem.estimate.onednn_hidden_factor`: on oneDNN, with the buffers its ops hold while they run; every
    point of the group takes its untiled structure's, a tiled or sliced one too; a math-path point's attention peak
    takes none, :func:`dry_of`); of ``batch`` samples in flight (an unsliced batch: its factor of a batch, where its
    structure has one)."""
    from vaemem import estimate as est

    arch, op, dtype = key["architecture"], key["op"], key["dtype"]
    return est.onednn_hidden_factor(key["conv_backend"], structures.get(est.structure_key(arch, op, dtype, False)),
                                    frames=frames, batch=batch)


def priced_as(point: dict[str, Any], key: dict[str, Any],
              structures: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(point, group key) of the request the estimator prices a measured point as: a tiled point one of whose tiles
    is the whole image (:func:`vaemem.estimate.tile_is_whole`) is its untiled twin, in the untiled lines, as the
    estimator prices such a request by the untiled request's. Why: Wan 2.2's fp32 encode at 288 and 512 px in
    256 px tiles needs 220.5 and 636.5 MiB, as untiled; fitted as tiled points, its two-point tiled line
    extrapolated 4x, and left out the other architecture's tiled line priced them 0.93-0.99x."""
    from vaemem import estimate as est

    if point["tile"] and est.tile_is_whole(structures, key["architecture"], key["op"], point["width"],
                                           point["height"], point["tile"], dtype=key["dtype"]):
        return {**point, "tile": None}, {**key, "tiled": False}
    return point, key


def row_of(point: dict[str, Any], key: dict[str, Any], structures: dict[str, Any]) -> tuple | None:
    """A measured point as a calibration row: (dry, dry of one sample, demand, one-frame clip of a video model,
    frame pixels, transient, live tensors' dry run), demand left out (0 here, the caller's), or None where no
    structure covers it. The dry runs are those the platform's lines are in (:func:`hidden_of`), as the estimator
    takes them (:func:`vaemem.estimate.call_dry_runs`: where the point is priced by its convolutions' calls, the
    larger of that and the dry run, with no transient)."""
    from vaemem import estimate as est
    from vaemem.models.zoo import get_spec

    d = dry_of(point, key, structures)
    if d is None:
        return None
    kd = dry_of(point, key, structures, hidden_of(key, structures, frames=point["frames"]),
                hidden_of(key, structures, frames=point["frames"], batch=1 if point.get("slicing") else point["batch"]))
    q = point
    single = get_spec(get_spec(q["model"]).architecture).is_video and q["frames"] == 1  # a regime of the architecture
    s = structures.get(est.structure_key(key["architecture"], key["op"], "fp32", False))
    dry, one, cp = est.call_dry_runs(s, key["dtype"], key["conv_backend"], bool(q["tile"]), q["batch"], q["width"],
                                     q["height"], q["frames"], *kd,  # type: ignore[misc]
                                     batched=not (q.get("slicing", False) and q["batch"] > 1))
    transient = 0 if cp is not None else transient_bytes(point, key, structures)
    return dry, one, 0, single, q["width"] * q["height"], transient, d[0]


def _live(r: tuple) -> float:
    """A calibration row's live tensors' dry-run peak (its seventh field; the first where the row has none): what
    :data:`vaemem.estimate.LIVE_FLOOR_FACTOR` is of, where the first is oneDNN's dry run."""
    return r[6] if len(r) > 6 else r[0]


def calibration_line(rows: list[tuple], margin: float, floor: bool = False,
                     weight_copy: bool = False, resident: bool = False, transfer: bool = False) -> dict[str, Any]:
    """The stored envelope of (dry, dry of one sample, demand, single frame of a video model, frame pixels[, weight
    copy bytes[, live tensors' dry run]]) rows (dry: the dry run the platform's lines are in, :func:`hidden_of`):
    ``factor x dry + per_sample_factor x dry1 + base (+ single_frame_factor x dry + single_frame_bytes for a
    one-frame clip)``, x (1 + margin), rounded up (with its ``flat`` branch: :func:`_line_through`), fitted on the
    rows of the domain
    (:data:`DOMAIN_MIN_FRAME_PIXELS`); the rows below it get the same envelope of their own in ``small``, which
    :func:`vaemem.estimate.calibration_bytes` applies below the domain (where fewer than two dry-run peaks lie
    on either side, every row is fitted in one line). The per-sample term is free only where the rows hold more
    than one batch size, the single-frame term only where they hold one-frame and longer clips of a video model (a
    one-frame clip is its own regime: MiniMax-H3 and Wan encode one frame with other kernels, at up to 2x the factor
    of a longer clip). ``floor``: one architecture's line may also carry ``floor_bytes`` (see :func:`_envelope`); a
    line pooled over architectures never does (their floors differ). ``weight_copy`` (a line on a backend with
    convolution transients, :data:`vaemem.estimate.WEIGHT_COPY_BACKENDS`): each row's transient (its sixth field,
    :func:`transient_bytes`: a weight copy or an im2col buffer) is a fixed part of its reservation, the line (and
    its floor) is fitted to the rest, and the line carries ``weight_copy_factor``, 1 + margin, by which a price
    adds a request's transient. Why: on this CPU LTX-2's 432 MiB convolution sets a 452-460 MiB demand at clips of
    6-102 MiB dry runs, which a line over architectures whose largest convolutions are 15-216 MiB priced at
    0.15-0.38x (campaign 15). ``resident`` (an architecture's own line on such a backend): the line also carries
    :func:`resident_fields`. ``transfer`` (a line that prices other architectures: the class line, an
    architecture's transfer line): where it has a one-frame term, it carries ``single_frame_dry_max``, its one-frame
    rows' largest dry-run peak, beyond which that term stops growing (schema 23). Why: the term is the one-frame
    kernels' excess of the architectures that measured it, at their one-frame dry runs, which another's one-frame
    clips may pass many times over: left out, LTX-Video's fp32 decode line (one-frame dry runs of 17-96 MiB) priced
    HunyuanVideo 1.5's one frame, an 870-900 MiB call peak, at 1.31x (1.20 with it), and the LTX-2 family's at
    1.30-1.31 (medians 1.21-1.25). Not an own line, whose one-frame requests past its points follow its own
    kernels: a 15-minute plan's own LTX-Video lines, held so, under-priced two more of its larger one-frame points."""
    below = [r for r in rows if r[4] < DOMAIN_MIN_FRAME_PIXELS]
    domain = _domain(rows)
    split = domain is not rows
    line = _envelope(domain, margin, floor, weight_copy)
    if split:
        line["domain_min_frame_pixels"] = DOMAIN_MIN_FRAME_PIXELS
        line["small"] = {**_envelope(below, margin, floor, weight_copy), "n_points": len(below),
                         "dry_bytes_max": int(max(r[0] for r in below))}
    if weight_copy:
        line["weight_copy_factor"] = round(1 + margin, 6)
    if resident:
        line.update(resident_fields(domain, margin, weight_copy))
    if transfer:  # its one-frame term no further than its one-frame points (schema 23)
        branches = [(line, domain), (line["small"], below)] if split else [(line, domain)]
        for branch, part in branches:
            if branch["single_frame_factor"] > 0:
                branch["single_frame_dry_max"] = int(max(r[0] for r in part if r[3]))
    dry = [r[0] for r in rows]
    ratios = [calibration_bytes(line, r[0], r[1], bool(r[3]), r[4], r[5] if weight_copy else 0, live=_live(r))
              / r[2] for r in rows]
    return {**line, "n_points": len(rows), "n_points_below_domain": len(below) if split else 0,
            "worst_ratio": round(max(ratios), 4), "median_ratio": round(statistics.median(ratios), 4),
            "dry_bytes_max": int(max(dry))}


# A floor is taken only where the points show one: the line over the other points would reserve less than this
# fraction of some floor point's demand (a resident floor the line cannot reach), or two or more floor points need
# the same demand (within FLOOR_FLAT) where that line rises by FLOOR_LINE_RISE or more between them: demand that
# does not follow the line. Not for a line a little tighter without its smallest point, which held out would
# price a smaller point at a larger one's demand (CogView4 encode 1.54x). The flat case is HunyuanImage-2.1's bf16
# decoder: 162.5-163.1 MiB from 256x256 to 384x256 (dry runs of 56-84 MiB); with 256x256 held out, the line over
# the rest reached 0.75 of the two floor points left, so no floor was taken and 256x256 was priced at 0.93.
FLOOR_NEEDED = 0.75
FLOOR_FLAT = 1.02
FLOOR_LINE_RISE = 1.1


def _envelope(rows: list[tuple], margin: float, floor: bool = False, weight_copy: bool = False) -> dict[str, Any]:
    """The line of :func:`calibration_line` through ``rows``. With ``floor``, also ``max(floor_bytes, line)``
    where that reserves less: the points of the k smallest dry-run peaks (k at most half the points) set a floor,
    their largest demand plus the margin, and the line is fitted over the others; the k of the least summed
    reservation / demand wins, k = 0 (no floor) on a tie. Why: on this CPU HunyuanImage-2.1's decoder needs
    309 MiB at 256x256 and at 384x256 alike (dry runs of 112 and 168 MiB), a resident floor, and from 640x384 up
    1.16-1.20x its dry run; one line through both bent the line and under-priced a held-out size."""
    best = _line_through(rows, margin, weight_copy)
    if not floor:
        return best

    copy = (lambda r: r[5]) if weight_copy else (lambda r: 0)  # noqa: E731  (the copy each row's line adds)

    def score(line: dict[str, Any]) -> float:
        return sum(calibration_bytes(line, r[0], r[1], bool(r[3]), r[4], copy(r), live=_live(r)) / r[2] for r in rows)

    order = sorted(rows, key=lambda r: r[0])
    best_score = score(best)
    for k in range(1, len(rows) // 2 + 1):
        if order[k - 1][0] == order[k][0]:  # a floor ends between two dry-run peaks
            continue
        if len({r[0] for r in order[k:]}) < 2:
            break
        if _terms(order[k:]) != _terms(rows):  # the line over the rest must keep every term the points need: a
            continue  # one-frame or batch term left to the floor would vanish for larger requests
        line = _line_through(order[k:], margin, weight_copy)
        if weight_copy:
            line["weight_copy_factor"] = round(1 + margin, 6)
        low = [r[2] - copy(r) for r in order[:k]]  # the floor is of what the copy leaves, as the line is
        # the evidence of a floor is the line's own terms at the points below it (its bound below its smallest dry
        # run, estimate._terms_at, would make any demand it leaves there look like one)
        bare = {n: v for n, v in line.items() if n != "dry_bytes_min"}
        first, last = (calibration_bytes(bare, r[0], r[1], bool(r[3]), r[4], live=_live(r))
                       for r in (order[0], order[k - 1]))
        flat = k >= 2 and max(low) <= FLOOR_FLAT * min(low) and last >= FLOOR_LINE_RISE * first
        if not flat and all(calibration_bytes(bare, r[0], r[1], bool(r[3]), r[4], copy(r), live=_live(r))
                            >= FLOOR_NEEDED * r[2]
                            for r in order[:k]):
            continue  # the line alone nearly covers them and their demand is not flat: no evidence of a floor
        line["floor_bytes"] = int(ceil_step(max(low) * (1 + margin), BASE_STEP))
        s = score(line)
        if s < best_score - 1e-9:
            best, best_score = line, s
    return best


def _domain(rows: list[tuple]) -> list[tuple]:
    """The rows a line's main envelope is fitted on: those in the calibration domain where both sides of it hold two
    dry-run peaks or more (below it the line of its own, ``small``), else every row (``rows`` itself)."""
    below = {r[0] for r in rows if r[4] < DOMAIN_MIN_FRAME_PIXELS}
    inside = [r for r in rows if r[4] >= DOMAIN_MIN_FRAME_PIXELS]
    return inside if len({r[0] for r in inside}) >= 2 and len(below) >= 2 else rows


def resident_fields(rows: list[tuple], margin: float, weight_copy: bool = False) -> dict[str, Any]:
    """The least bytes every one of an architecture's ``rows`` needed beyond its dry run (and, ``weight_copy``, its
    transient), as a line's second branch ``resident_factor x dry + resident_bytes`` (the margin in both; bytes
    rounded down to the MiB: a bound the points showed), which :func:`vaemem.estimate.calibration_bytes` never
    prices below; a one-frame clip of a video model by its own rows' (``single_frame_resident_bytes``, where the
    rows hold both regimes: it runs other kernels). None for a regime where a row needed no more than its dry run
    (LTX-Video's bf16 encode needs 0.84x it at 33 frames of 768x512, where 1.05 x the dry run would over-reserve).
    Why: the process holds bytes whatever the size (oneDNN's scratch and primitive cache, the allocator's arenas:
    6-59 MiB with the margin on this CPU's untiled fp32 video lines), which a line whose points all lie far above a
    request folds into its slope. LTX-2's fp32 decode needs 1.04x its dry run from 435 to 1148 MiB (17-44 MiB above
    it) and 63 MiB at 160x96 x 9 frames (46 MiB dry run, 17 above): held out there, the line over the rest, nearly
    through the origin, reserved 0.80x; with the branch 1.03-1.05x. The branch has the dry run's own slope, so it
    never bends the fitted line: an affine demand steeper than the dry run keeps its exact fit (a lower bound on the
    line's base would have lowered its slope, under-reserving past the largest point). Only on oneDNN: on aten the
    demand above the dry run grows with it (SD1.5 bf16: 27-49 MiB at dry runs of 6-14 MiB, 4.7-5.5x); and over the
    rows the line's main envelope is fitted on (those in the calibration domain where the line has one of its own
    below it, ``small``), where a frame's kernels are those of the sizes apps run. Where the rows hold one regime,
    its bytes serve both, as the line's terms do."""
    def least(part: list[tuple]) -> float:
        return min(r[2] - r[0] - (r[5] if weight_copy else 0.0) for r in part)

    single = [r for r in rows if r[3]]
    longer = [r for r in rows if not r[3]]
    gaps = {"resident_bytes": least(longer or single)}
    if single and longer:
        gaps["single_frame_resident_bytes"] = least(single)
    kept = {n: int(g * (1 + margin) // BASE_STEP * BASE_STEP) for n, g in gaps.items() if g > 0}
    if "single_frame_resident_bytes" in gaps and "single_frame_resident_bytes" not in kept:
        return {}  # a one-frame request would take the longer clips' branch
    return {"resident_factor": round(1 + margin, 6), **kept} if kept else {}


# A batch tells a per-sample cost from a per-byte one only where its dry run is well above one sample's: where a
# weight copy held at one call leads both (LTX-2's bf16 encode at batch 2 and 128x128: its call peak 1.01x one
# sample's), the two columns are one, and a line fitted with both put its slope on the per-sample term (LTX-2's
# 0.0 x dry + 0.73 x one sample's), which priced a large batch, led by its live tensors, below its call peak.
PER_SAMPLE_MIN_RATIO = 1.25


def _terms(rows: list[tuple]) -> tuple[bool, bool]:
    """(per-sample term, single-frame terms): which of the optional terms a line through ``rows`` is fitted with:
    the first where a row's dry run is at least :data:`PER_SAMPLE_MIN_RATIO` x its sample's (a batch its live
    tensors lead), the second where they hold one-frame and longer clips of a video model."""
    single = sum(1 for r in rows if r[3])
    return any(r[0] >= PER_SAMPLE_MIN_RATIO * r[1] for r in rows), 0 < single < len(rows)


def _line_through(rows: list[tuple], margin: float, weight_copy: bool = False) -> dict[str, Any]:
    """The envelope line of :func:`calibration_line` over ``rows``, with the margin, rounded up (``weight_copy``:
    over what each row's weight copy leaves of its demand), fitted on the summed reservation / demand, with
    ``flat``, the terms of the envelope of the same rows fitted on the summed reservation
    (:data:`vaemem.estimate.FLAT_TERMS`), where they differ: both cover every row, so the lower of the two does (:func:`vaemem.estimate.calibration_bytes` takes it, but for a one-frame
    clip of a video model). Why: demand a dry run plus a resident part that does not follow it (LTX-Video's fp32
    decode: plus 12-37 MiB from 17 MiB to 1.4 GiB) gives a line steep from its small points (1.215 x dry run +
    22 MiB) that reserved its own largest clips 1.20x and, as the highest line of its class, the other
    architectures' large clips 1.16-1.33x (medians, left out); the flat one (1.047 x + 39 MiB) prices them. Not for a
    one-frame clip: those few small points have little weight in bytes, and the flat line, left out, under-priced
    HunyuanVideo's one-frame fp32 decode at 320x192 (0.986). Where a row needed less than its dry run (its dry runs
    over-state), the line carries ``dry_bytes_min``, its rows' smallest dry-run peak, below which, growing slower
    than the dry run, it never prices more beyond the dry run than there (:func:`vaemem.estimate._terms_at`); not
    where only the demand less the transient (what a ``weight_copy`` line is fitted on) is below it: a copy held
    beside few live tensors (a copy branch's rows) says nothing of the dry run."""
    line = _line_of(rows, margin, weight_copy, "ratio")
    if any(r[2] < r[0] for r in rows):  # its dry runs over-state
        line["dry_bytes_min"] = int(min(r[0] for r in rows))
    # the flat branch prices only beyond a one-frame clip: its terms there, and none where they are the line's
    flat = {n: v for n, v in _line_of(rows, margin, weight_copy, "bytes").items() if n in FLAT_TERMS}
    # none where it is the line, nor where it does not grow with the dry run (a constant would cap every larger
    # request at its points' largest price; the reader refuses it)
    if all(flat[n] == line[n] for n in FLAT_TERMS) or flat["dry_factor"] + flat["per_sample_factor"] <= 0:
        return line
    return {**line, "flat": flat}


def _line_of(rows: list[tuple], margin: float, weight_copy: bool, objective: str) -> dict[str, Any]:
    """:func:`_line_through`'s envelope under one objective (:func:`vaemem.fit.envelope.fit_upper`)."""
    dry, dry1, demand = ([r[i] for r in rows] for i in range(3))
    single = [1.0 if r[3] else 0.0 for r in rows]
    batched, regimes = _terms(rows)
    names = ["dry_factor", *(["per_sample_factor"] if batched else []), "base_bytes",
             *(["single_frame_factor", "single_frame_bytes"] if regimes else [])]
    columns = {"dry_factor": dry, "per_sample_factor": dry1, "base_bytes": [1.0] * len(rows),
               "single_frame_factor": [a * s for a, s in zip(dry, single)], "single_frame_bytes": single}
    coef = dict(zip(names, fit_upper([columns[n] for n in names], demand,
                                     [r[5] for r in rows] if weight_copy else None, objective)))
    line = {"dry_factor": ceil_step(coef["dry_factor"] * (1 + margin), FACTOR_STEP),
            "per_sample_factor": ceil_step(coef.get("per_sample_factor", 0.0) * (1 + margin), FACTOR_STEP),
            "base_bytes": int(ceil_step(coef["base_bytes"] * (1 + margin), BASE_STEP)),
            "single_frame_factor": ceil_step(coef.get("single_frame_factor", 0.0) * (1 + margin), FACTOR_STEP),
            "single_frame_bytes": int(ceil_step(coef.get("single_frame_bytes", 0.0) * (1 + margin), BASE_STEP))}
    return line


def transient_bytes(point: dict[str, Any], key: dict[str, Any], structures: dict[str, Any]) -> int:
    """What a measured point's convolutions hold beyond the live tensors on its platform
    (:func:`vaemem.estimate.conv_transient_bytes`: a weight copy or an im2col buffer, by torch's oneDNN rule where
    its architecture's untiled fp32 structure lists the convolutions): a calibration row's sixth field, priced as
    the estimator prices a request."""
    from vaemem import estimate as est
    from vaemem.models.zoo import LARGEST_CONV_PARAMETERS

    q = point
    s = structures.get(est.structure_key(key["architecture"], key["op"], "fp32", False))
    return est.conv_transient_bytes({"largest_conv_parameters": LARGEST_CONV_PARAMETERS[q["model"]]}, s,
                                    key["op"], key["dtype"], key["conv_backend"], q["width"], q["height"],
                                    1 if q["slicing"] else q["batch"], q["frames"], bool(q["tile"]))


def calibrate(data: Dataset, structures: dict[str, Any], margin: float) -> list[dict[str, Any]]:
    """Per platform and kernel class: one calibration line per measured architecture and one pooled over the
    class (see :mod:`vaemem.estimate`). Points whose architecture has no structure for them are left out (they
    keep their pixel line)."""
    from vaemem import estimate as est
    from vaemem.models.zoo import get_spec

    buckets: dict[str, tuple[dict[str, Any], str, dict[str, list], set[str]]] = {}
    for gid, (key, pts) in sorted(data.groups.items()):
        spec = get_spec(pts[0].point["model"])
        for p in pts:
            point, as_key = priced_as(p.point, key, structures)
            row = row_of(point, as_key, structures)
            if row is None:
                continue
            cid = est.calibration_id(as_key, spec.kernel)
            entry = buckets.setdefault(cid, ({k: as_key[k] for k in est.PLATFORM_KEYS}, spec.kernel, {}, set()))
            entry[2].setdefault(key["architecture"] + variant_of(point, as_key, structures), []).append(
                (*row[:2], p.demand_bytes, *row[3:]))
            entry[3].add(p.torch_version)
    out = []
    owned = {cid: own_lines(split_variants(per_key)[0], margin, platform["conv_backend"] in est.WEIGHT_COPY_BACKENDS)
             for cid, (platform, _, per_key, _) in buckets.items()}
    for cid, (platform, kernel, per_key, torches) in sorted(buckets.items()):
        copies = platform["conv_backend"] in est.WEIGHT_COPY_BACKENDS
        per_arch, variants = split_variants(per_key)
        archs = owned[cid]
        if not archs:
            continue
        # a tiled class's transfer also takes each architecture's own untiled line (estimate.transfer_bytes)
        untiled = owned.get(est.untiled_twin(cid), {})
        pooled = [r for a in archs for r in per_arch[a]]
        ref = statistics.median(r[0] for r in pooled)
        # each own line's factor at the class's median dry run, less the weight copy, as the class line is
        # fitted: the spread says how far the architectures are apart where a transfer prices them alike
        factors = [calibration_bytes(ln, ref, ref, False, DOMAIN_MIN_FRAME_PIXELS, live_floor=False) / ref
                   for ln in archs.values()]
        spread = max(factors) / min(factors)
        uncovered = held_out_uncovered({k: rows for k, rows in per_key.items() if _arch(k) in archs}, margin, copies,
                                       untiled, platform["tiled"])
        agree = len(archs) >= 2 and spread <= est.AGREE_SPREAD and not uncovered
        out.append({"calibration": cid, **platform, "kernel": kernel, "architectures": archs,
                    "variants": {k: own_line(rows, margin, copies) for k, rows in variants.items()},
                    "class": calibration_line(pooled, margin, weight_copy=copies, transfer=True),
                    "transfer_lines": transfer_lines({a: per_arch[a] for a in archs}, margin, copies),
                    "variant_transfer_lines": transfer_lines(variants, margin, copies),
                    "spread": round(spread, 4), "agree": agree, "torch_versions": sorted(torches)})
        if not platform["tiled"]:
            out[-1]["first_call_bytes"] = first_call_bytes({a: per_arch[a] for a in archs})
    return out


FIRST_CALL_STEP = 1024  # bytes: first_call_bytes is rounded down to it


def first_call_bytes(per_arch: dict[str, list[tuple]]) -> int:
    """The most, over a class's architectures, of the part of the bytes each one needed beyond its dry run at its
    points in the calibration domain that no frame size sets (rows as :func:`calibration_line` takes them): the
    intercept of the lower envelope of those bytes against frame pixels (:func:`fit_lower`; the least of them where
    the points have one frame size). That is a fresh process's first call's one-time cost, the code pages and state
    of the kernels it runs, which is an architecture's own and which no dry run sees
    (``benchmarks/first_call_cost.py``); an untiled transfer's floor adds it (:func:`vaemem.estimate.transfer_floor`).
    0 where no architecture has a point in the domain. Why not the least bytes beyond the dry run: HunyuanVideo's
    fp32 decode needs 54 MiB beyond it at 160x96, growing with the frame (not the clip) to 137-166 MiB at 320x192
    at any length, a per-frame buffer its own dry run misses and its own lines carry; taken whole as the class's
    one-time cost, it floored the LTX family's 17-20 MiB dry runs, left out, at 1.8-2.6x their demand (1.7-1.9x with
    its intercept, 28 MiB; no row left out under)."""
    least = [fit_lower([r[4] for r in inside], [r[2] - r[0] for r in inside])[0] for rows in per_arch.values()
             if (inside := [r for r in rows if r[4] >= DOMAIN_MIN_FRAME_PIXELS])]
    # exact (fit_lower), down to the step: a floor never above what its points showed
    return max(0, int(max(least, default=0) // FIRST_CALL_STEP) * FIRST_CALL_STEP)


def calibrated_groups(doc: dict[str, Any]) -> tuple[set[str], list[dict[str, Any]]]:
    """(the group ids a calibration of ``doc`` prices by a line of their own, the ``unfitted`` entries, groups
    without a pixel line, that a calibration prices all the same: by their own line, or as a transfer from the
    class line their architecture's points are pooled in): fitted, not failures."""
    lined = {g for cal in doc["calibrations"] for g in line_groups(cal)}
    pooled = {(platform_id(cal), a) for cal in doc["calibrations"] for a in cal.get("transfer_lines", {})}
    # pooled: a plain group only (a variant no line covers, an overlap or the conv3d decomposition, prices nothing)
    return lined, [u for u in doc["unfitted"] if u["group"] in lined
                   or u["group"] == group_id(u) and (platform_id(u), u["architecture"]) in pooled]


def line_groups(cal: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Group id -> (line name, own line) of a calibration's own lines: an architecture's prices its plain group, a
    variant's (``sd15/math``) the group of that variant (``sd15/.../untiled/math``, as :func:`load_dataset` names
    it)."""
    out = {}
    for name, line in [*cal["architectures"].items(), *cal.get("variants", {}).items()]:
        arch, variant = variant_parts(name)
        out[group_id({**{k: cal[k] for k in GROUP_KEYS if k != "architecture"}, "architecture": arch}) + variant] = \
            (name, line)
    return out


def variant_of(point: dict[str, Any], key: dict[str, Any], structures: dict[str, Any]) -> str:
    """The variant a measured point's request names (:func:`vaemem.estimate.variant_key`), as the estimator keys
    it: "" for a plain one; the math path of an op with no attention module is the fused one, and so is a
    math-path point whose score matrices do not lead (:func:`vaemem.estimate.math_path_leads`: the estimator prices
    such a request by the plain lines, which must cover it; Wan 2.1's fp32 encode at 768 px, led by its
    convolutions, had bent its 2-point math-path line to 0.895 x dry run + 850 MiB)."""
    from vaemem import estimate as est
    from vaemem.models.zoo import ATTENTION_OPS

    math = point.get("attention", "fused") == "math" and key["op"] in ATTENTION_OPS[point["model"]] and \
        est.math_path_leads(structures, key["architecture"], key["op"], point["width"], point["height"],
                            dtype=key["dtype"], backend=key["conv_backend"], batch=point["batch"],
                            frames=point["frames"], tile=point["tile"], slicing=point.get("slicing", False))
    return variant_key("math" if math else "fused", point.get("slicing", False))


def _arch(key: str) -> str:
    """The architecture of a calibration row key (``sd15`` or ``sd15/math``)."""
    return variant_parts(key)[0]


def split_variants(per_key: dict[str, list[tuple]]) -> tuple[dict[str, list[tuple]], dict[str, list[tuple]]]:
    """(per architecture: its plain rows, per variant key such as ``sd15/math``: its rows), from rows keyed by
    architecture and variant (:func:`variant_of`). A variant keeps lines of its own where its rows and its
    architecture's plain rows each hold two dry-run peaks or more; else its rows join the plain ones (one line
    covers them). Why apart: SD1.5's fp32 encode on the math attention path needs 1.12x its dry run at 1280 px, and
    sliced 1.09-1.13x, where its plain points need 1.01-1.08x; pooled, its transfer line priced the other five
    architectures' plain encodes 1.15-1.17x (median), apart 1.05x. A variant request is priced by the larger of its
    variant's line and the plain one (:func:`vaemem.estimate.transfer_bytes`, the estimator's own line)."""
    peaks = lambda rows: len({r[0] for r in rows})  # noqa: E731
    plain = {_arch(k): [] for k in per_key}
    variants: dict[str, list[tuple]] = {}
    for k, rows in sorted(per_key.items()):
        a = _arch(k)
        if k != a and peaks(rows) >= 2 and peaks(per_key.get(a, [])) >= 2:
            variants[k] = rows
        else:
            plain[a] += rows
    return plain, variants


def own_lines(per_arch: dict[str, list[tuple]], margin: float, copies: bool) -> dict[str, dict[str, Any]]:
    """Per architecture with two dry-run peaks or more: its :func:`own_line` (a calibration's ``architectures``)."""
    return {a: own_line(rows, margin, copies) for a, rows in sorted(per_arch.items())
            if len({r[0] for r in rows}) >= 2}


def own_line(rows: list[tuple], margin: float, copies: bool) -> dict[str, Any]:
    """One architecture's line over its ``rows`` (:func:`calibration_line`, with a floor). On a weight-copying
    backend (``copies``) it is fitted on what each row's weight copy leaves of its demand and adds the copy of the
    request, where that reserves less at its worst point than the line fitted on the whole demand. Why both: a copy set
    by torch's rule is a step the dry run cannot see (LTX-2's decoder copies its 432 MiB weight from 256x160 up at
    one frame and from 128x128 at nine: a size held out across the step was priced 0.43x by the whole-demand line),
    while where the copy coincides with fewer live tensors than the peak the sum over-reserves (HunyuanImage-2.1's
    decoder, 1.32x in sample against 1.05x); the whole-demand line then adds only what a request's transient holds
    beyond the largest its points held (``transient_seen_bytes``), so in sample both price as fitted. Where the
    points fall on both sides of their transients, the larger of the two (:func:`copy_branch_line`) where it
    reserves less at its worst point than either."""
    plain = calibration_line(rows, margin, floor=True, resident=copies)
    if not copies:
        return plain
    net = calibration_line(rows, margin, floor=True, weight_copy=True, resident=True)
    # on a tie (points that all hold the same transient give both lines alike) the net one: held out, a size
    # whose transient differs from the others' is priced by it (LTX-2's encode: 1.21x at most, against 10.05x by
    # the whole-demand line at its one point that copies nothing; Mochi's encode: 1.02x against 0.41x at its
    # im2col spike)
    if net["worst_ratio"] <= plain["worst_ratio"]:
        best = net
    else:
        # the whole-demand line has priced the transients its points held; a request's beyond the largest of them
        # is a step no point showed it (LTX-Video 0.9.5's decoder copies its 432 MiB weight only at 320x192 x 9
        # frames: held out there, the line over the rest, whose transients are at most 108 MiB, reserved 0.48x)
        best = {**plain, "weight_copy_factor": round(1 + margin, 6),
                "transient_seen_bytes": int(max(r[5] for r in rows))}
    split = copy_branch_line(rows, margin)
    return split if split is not None and split["worst_ratio"] < best["worst_ratio"] else best


def copy_branch_line(rows: list[tuple], margin: float) -> dict[str, Any] | None:
    """The line ``max(live line, transient + copy line)`` over one architecture's ``rows`` on a weight-copying
    backend, or None where its points do not fall on both sides: the rows whose transient is at least their dry-run
    peak fit the copy line (on the demand less the transient, which it adds: ``copy_line``), the others the live
    line (on the whole demand), each with two dry-run peaks or more, and every row must be covered. Why: a
    convolution's weight copy is held while few tensors are live, so where it outweighs the dry-run peak the demand
    is the copy and a little, and where the live tensors outgrow it, the dry run and a little: the larger of the
    two, not their sum. LTX-2's fp32 decode needs 452-499 MiB wherever its 432 MiB weight is copied (dry runs of
    28-270 MiB) and 1.04x its dry run at 1024x576 x 9 frames (1192 MiB): the line of the sum reserves 512x320 x 9
    frames (472 MiB) 1.46x (campaign 23). A threshold searched over the points' transient / dry-run ratios fitted
    the points as well and put three image groups under held out (0.91-0.99): one fixed by what it means is kept."""
    live_rows = [r for r in rows if r[5] < r[0]]
    copy_rows = [r for r in rows if r[5] >= r[0]]
    if len({r[0] for r in live_rows}) < 2 or len({r[0] for r in copy_rows}) < 2:
        return None
    stats = ("n_points", "n_points_below_domain", "worst_ratio", "median_ratio")
    live = calibration_line(live_rows, margin, floor=True)
    copy = calibration_line(copy_rows, margin, floor=True, weight_copy=True)
    # the resident branch is the whole line's, of every row's whole demand (those its live line prices, not its
    # small line's): a branch's own would hold for its rows only
    line = {**{n: v for n, v in live.items() if n not in stats}, "weight_copy_factor": 0.0,
            "copy_line": {n: v for n, v in copy.items() if n not in stats[2:]},
            **resident_fields([r for r in rows if r[4] >= DOMAIN_MIN_FRAME_PIXELS] if "small" in live else rows,
                              margin)}
    ratios = [calibration_bytes(line, r[0], r[1], bool(r[3]), r[4], r[5], live=_live(r)) / r[2] for r in rows]
    if min(ratios) < 1:
        return None
    return {**line, "n_points": len(rows), "n_points_below_domain": live["n_points_below_domain"],
            "worst_ratio": round(max(ratios), 4), "median_ratio": round(statistics.median(ratios), 4),
            "dry_bytes_max": int(max(r[0] for r in rows))}


def transfer_lines(per_arch: dict[str, list[tuple]], margin: float, weight_copy: bool) -> dict[str, dict[str, Any]]:
    """Per architecture of a class (rows as :func:`calibration_line` takes them, two dry-run peaks or more), its
    line as a transfer to another architecture takes it (:func:`vaemem.estimate.transfer_bytes`): as the class line
    is fitted (less the transients on a weight-copying backend), without a floor (a resident floor is the
    architecture's own: HunyuanImage-2.1's decoder's 326 MiB would price every small image of the class)."""
    return {a: calibration_line(rows, margin, weight_copy=weight_copy, transfer=True)
            for a, rows in sorted(per_arch.items())
            if len({r[0] for r in rows}) >= 2}


# what held_out_prices names a point a floor priced (estimate.transfer_bytes), untiled and tiled
FLOOR_NAMES = {False: "floor of the dry run and a first call", True: "floor of the live tensors"}


def held_out_ratios(per_key: dict[str, list[tuple]], margin: float, weight_copy: bool = False,
                    untiled: dict[str, dict[str, Any]] | None = None, tiled: bool = False) -> dict[str, list[float]]:
    """Leave one architecture out: per architecture, the reservation / demand at each of its points in the
    calibration domain (:func:`held_out_prices`, whose arguments these are)."""
    return {a: [p[0] for p in prices]
            for a, prices in held_out_prices(per_key, margin, weight_copy, untiled, tiled).items()}


def held_out_prices(per_key: dict[str, list[tuple]], margin: float, weight_copy: bool = False,
                    untiled: dict[str, dict[str, Any]] | None = None,
                    tiled: bool = False) -> dict[str, list[tuple[float, str, float]]]:
    """Leave one architecture out: per architecture of a class (rows as :func:`calibration_line` takes them, keyed
    by architecture and variant as :func:`split_variants` takes them), a transfer from the others (the highest of
    their pooled line and each one's :func:`transfer_lines`, and a variant point's of their lines of its variant;
    ``weight_copy``: with each row's convolution transient, as a transfer prices it; ``untiled``: per
    architecture, its own untiled line on the platform of a tiled class, which a tiled transfer also takes;
    ``tiled``: the class's points are tiled, else a transfer's untiled floor applies) at each
    of its points in the calibration domain (architectures whose rest has fewer than two dry-run peaks, or that
    have no point in the domain, are left out): (reservation / demand, the line that set it as
    :func:`vaemem.estimate.transfer_bytes` names it, or :data:`FLOOR_NAMES` where a floor did, the share of the
    reservation the weight copy added on that line), the evidence a listed row's reason is read from."""
    out = {}
    per_arch, variants = split_variants(per_key)
    lines = transfer_lines(per_arch, margin, weight_copy)
    moved = transfer_lines(variants, margin, weight_copy)
    for a in sorted(per_arch):
        rest = [r for b, rs in per_arch.items() if b != a for r in rs]
        if len({r[0] for r in rest}) < 2:
            continue
        calib = {"class": calibration_line(rest, margin, weight_copy=weight_copy, transfer=True),
                 "transfer_lines": {b: ln for b, ln in lines.items() if b != a},
                 "variant_transfer_lines": {k: ln for k, ln in moved.items() if _arch(k) != a}}
        if not tiled:
            calib["first_call_bytes"] = first_call_bytes({b: rs for b, rs in per_arch.items() if b != a})
        prices = []
        for k, rows in sorted(per_key.items()):
            if _arch(k) != a:
                continue
            for r in rows:
                if r[4] < DOMAIN_MIN_FRAME_PIXELS:
                    continue
                args = (r[0], r[1], bool(r[3]), r[4])
                kw = dict(live=_live(r), variant=variant_parts(k)[1], own_untiled=(untiled or {}).get(a),
                          untiled=not tiled)
                total, name = transfer_bytes(calib, *args, r[5] if weight_copy else 0, **kw)
                line = transfer_line(calib, name, kw["own_untiled"])
                # the copy's share of the line that priced it (its price there without the copy)
                bare = calibration_bytes(line, *args, 0, live=None if not tiled else kw["live"]) \
                    if weight_copy and r[5] else total
                if total > calibration_bytes(line, *args, r[5] if weight_copy else 0, live_floor=False):
                    name = FLOOR_NAMES[tiled]  # no line: the floor priced it
                prices.append((total / r[2], name, (total - bare) / total))
        if prices:
            out[a] = prices
    return out


def held_out_uncovered(per_key: dict[str, list[tuple]], margin: float, weight_copy: bool = False,
                       untiled: dict[str, dict[str, Any]] | None = None, tiled: bool = False) -> list[str]:
    """The architectures of a class not shown covered by a transfer from the others (:func:`held_out_ratios`, with
    ``untiled`` as there): under-reserved at a point of the calibration domain, or with no held-out evidence (no
    point in the domain): what a transfer to an unmeasured architecture would risk. Why a condition of agreement
    beside the spread: the spread compares the lines at one dry-run peak, and on this CPU the fp32 conv3d encoders
    were within 1.10 there while LTX-Video, held out, was under-reserved at 0.80 (9-frame clips of 128x128)."""
    ratios = held_out_ratios(per_key, margin, weight_copy, untiled, tiled)
    return [a for a in sorted({_arch(k) for k in per_key}) if a not in ratios or min(ratios[a]) < 1]


def dumps(document: dict[str, Any]) -> str:
    """The canonical text of a coefficient file: sorted keys, two-space indent, trailing newline."""
    return json.dumps(document, sort_keys=True, indent=2) + "\n"


def read_coefficients(path: Path) -> dict[str, Any]:
    """A coefficient file, refusing one of an unknown or newer schema (the estimator's reader, so both agree)."""
    from vaemem import estimate

    try:
        return estimate.load(path)
    except ValueError as e:
        raise VaememError(str(e)) from None


def diff_documents(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences: top-level fields, then per group (added, removed, changed fields)."""
    out = []
    for k in sorted(set(old) | set(new)):
        if k in ("groups", "models") or old.get(k) == new.get(k):
            continue
        out.append(f"{k}: {json.dumps(old.get(k))[:80]} -> {json.dumps(new.get(k))[:80]}")
    for section in ("models", "groups"):
        a = old.get(section, {}) if section == "models" else {g["group"]: g for g in old.get("groups", [])}
        b = new.get(section, {}) if section == "models" else {g["group"]: g for g in new.get("groups", [])}
        for gid in sorted(set(a) | set(b)):
            if gid not in b:
                out.append(f"{section[:-1]} {gid}: removed")
            elif gid not in a:
                out.append(f"{section[:-1]} {gid}: added")
            elif a[gid] != b[gid]:
                changed = [f"{f} {a[gid].get(f)} -> {b[gid].get(f)}" for f in sorted(set(a[gid]) | set(b[gid]))
                           if a[gid].get(f) != b[gid].get(f)]
                out.append(f"{section[:-1]} {gid}: " + "; ".join(changed))
    return out


def refuse_newer(path: Path, doc: object = None) -> None:
    """A VaememError where the coefficient file at ``path`` (or its parsed ``doc``) is of a newer schema than this
    vaemem writes: a check of it says upgrade, not "differs", and a fit does not overwrite it with an older one.
    Anything else (no file, not JSON, an older schema) is the caller's to judge."""
    if doc is None:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if type(version) is int and version > SCHEMA_VERSION:
        raise VaememError(f"{path}: schema_version {version} is newer than this vaemem writes ({SCHEMA_VERSION}); "
                          f"upgrade vaemem to fit or check it")


def check(committed: Path, derived_text: str) -> list[str]:
    """Differences between the committed file and the derived text; [] when byte-identical. A file that cannot be
    read is an error (:class:`VaememError`), not a difference."""
    try:
        committed_text = committed.read_text()
    except OSError as e:
        raise VaememError(f"cannot read coefficient file {committed}: {e.strerror}") from None
    if committed_text == derived_text:
        return []
    try:
        old = json.loads(committed_text)
    except ValueError as e:
        return [f"{committed} is not valid JSON ({e}): regenerate it with vaemem fit"]
    refuse_newer(committed, old)
    diffs = diff_documents(old, json.loads(derived_text)) if isinstance(old, dict) else []
    return diffs or ["the files differ in formatting only (hand-edited?): regenerate with vaemem fit"]
