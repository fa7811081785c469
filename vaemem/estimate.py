"""Runtime estimator: how many bytes to reserve for one VAE decode or encode, from a vaemem coefficient file.

Standard library only, and no import of the rest of vaemem: an app may import it on its hot path or copy this one
file. Usage::

    from vaemem.estimate import working_memory_bytes
    need = working_memory_bytes("sdxl", "decode", 1024, 1024, dtype="fp32", loaded_dtype="fp16",
                                backend="cudnn", allocator="native", os="linux", coefficients="coefficients.json")

The file (schema 2) holds, per architecture, the **structure** of its dry-run peak (the exact peak of live tensor
bytes on fake tensors, ``vaemem trace``) as a function of width, height, batch, frames and tile, and per platform
(conv backend, allocator, dtype, OS, op, tiling) and kernel class (conv2d, conv3d) a **calibration**: upper
envelopes ``demand <= factor x dry + per_sample_factor x dry_of_one_sample + base (+ single_frame_factor x dry +
single_frame_bytes for a one-frame clip of a video model)`` over the measured points,
one per measured architecture and one pooled over the class. Pricing, in this declared order:

(a) **measured**: the architecture was measured on this platform: its own calibration line at its dry-run peak
    (or, where no structure covers the request, e.g. tiled video, its measured pixel line
    ``slope x pixels [+ tile_slope x tile^2] + base``);
(b) **transfer**: the platform was measured with other architectures of the same kernel class: the class's pooled
    line at this architecture's dry-run peak; the estimate says whether the class's architectures agreed
    (factors within 15 %) or the transfer is unverified;
(c) **fallback**: the platform was never measured: ``max(legacy rule, legacy rule x dry(architecture) /
    dry(SD family))``, both dry runs at the same width, height, batch and tile; for a video VAE the legacy rule is
    taken for one frame and the architecture's dry run is of the whole clip. Never below the legacy rule, and a CPU
    measurement never sets a GPU platform's price.

Then, in every case, the **cast term**: when the run dtype is wider than the dtype the weights were loaded in
(an fp16-loaded SDXL decoded in fp32), add parameters x (run element size - loaded element size).

A platform that was measured for this architecture, but not in the requested dtype, is an error (ValueError naming
the dtypes measured) rather than a guess. The margin is already in the file.
"""

from __future__ import annotations

import json
import os as _os

# Kept light on purpose (no dataclasses, typing or pathlib): apps import this on their start-up path.

SCHEMA_VERSION = 2
# Dry runs in fp16 and bf16 are identical for every zoo architecture (checked by vaemem's tests), so half precision
# shares one structure.
STRUCTURE_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16"}
PLATFORM_KEYS = ("conv_backend", "allocator", "dtype", "os", "op", "tiled")
AGREE_SPREAD = 1.15  # a kernel class's architectures agree when their factors differ by at most this ratio
REFERENCE_MODEL = "sd15"  # the SD family, the legacy rule's reference in the fallback
MIB = 1024 * 1024
ELEMENT_SIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
OPS = ("decode", "encode")
BACKENDS = ("cudnn", "miopen", "onednn", "aten", "mps", "xpu")
ALLOCATORS = ("native", "cudaMallocAsync", "expandable", "expandable-off", "glibc", "glibc-fixed")
OSES = ("linux", "windows", "darwin")
GROUP_KEYS = ("architecture", "op", "conv_backend", "allocator", "dtype", "os", "tiled")

# The legacy rule (prior-art.md), reproduced exactly: bytes = H * W * element_size * k (+ 250 MiB for an fp32
# SD/SDXL decode); tiled: the same over one tile, times 1.25.
LEGACY_K = {"miopen": {"decode": 3600, "encode": 2750}, "default": {"decode": 2200, "encode": 1100}}
LEGACY_FP32_SD_DECODE_EXTRA = 250 * MIB
LEGACY_TILED_FACTOR = 1.25
# ComfyUI's image rule, for side-by-side reports only (its per-model video rules are in comfy_bytes).
COMFY_K = {"decode": 2178, "encode": 1767}
COMFY_AMD_FACTOR = 2.73

_CACHE: dict = {}


class Estimate:
    """A reservation and how it was reached. All sizes in bytes.

    ``source`` is "exact" or "fallback"; ``group`` the group priced (exact) or the measured group the fallback
    leaned on; ``envelope_bytes`` slope x pixels + base of that group (0 when none); ``cast_bytes`` the weight-cast
    growth; ``floor_bytes`` the legacy rule when the fallback applied it (0 for exact groups).
    """

    __slots__ = ("bytes", "source", "group", "reason", "envelope_bytes", "cast_bytes", "floor_bytes", "pixels")

    def __init__(self, bytes: int, source: str, group: str | None, reason: str, envelope_bytes: int,
                 cast_bytes: int, floor_bytes: int, pixels: int) -> None:
        self.bytes, self.source, self.group, self.reason = bytes, source, group, reason
        self.envelope_bytes, self.cast_bytes, self.floor_bytes, self.pixels = envelope_bytes, cast_bytes, floor_bytes, pixels

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return "Estimate(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


def default_coefficients_path() -> str:
    """``$VAEMEM_COEFFICIENTS``, else ``fits/coefficients.json`` of the checkout this module lives in."""
    env = _os.environ.get("VAEMEM_COEFFICIENTS")
    here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    return env or _os.path.join(here, "fits", "coefficients.json")


def load(path: object = None) -> dict:
    """The coefficient file at ``path`` (read once, then cached by the path as given); refuses an unknown or newer
    schema."""
    key = str(path) if path is not None else default_coefficients_path()
    data = _CACHE.get(key)
    if data is None:
        p = key
        try:
            with open(p) as f:
                text = f.read()
            data = json.loads(text)
        except OSError as e:
            raise ValueError(f"cannot read coefficient file {p}: {e.strerror}") from None
        except ValueError as e:
            raise ValueError(f"coefficient file {p} is not valid JSON: {e}") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            hint = ("; upgrade vaemem" if newer else
                    "; refit it from the measurements with `vaemem fit` (measurement lines of schema 1 stay "
                    "readable)" if version == 1 else "")
            raise ValueError(f"coefficient file {p} has schema_version {version!r}, "
                             f"{'newer than' if newer else 'not'} the one this estimator reads ({SCHEMA_VERSION})"
                             + hint)
        validate(data, f"coefficient file {p}")
        _CACHE[key] = data
    return data


# ---- validation: the one owner of what a coefficient file must hold -------------------------------------------

def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _need(ok: bool, where: str, what: str, v: object) -> None:
    if not ok:
        raise ValueError(f"{where} must be {what}, got {v!r}")


def _field(d: dict, name: str, where: str, kind: str) -> object:
    """``d[name]`` checked to be of ``kind``: num, num>=0, int>0, int>=0, str, bool, int>0|None, list, dict."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object, got {d!r}")
    if name not in d:
        raise ValueError(f"{where}.{name} is missing")
    v = d[name]
    w = f"{where}.{name}"
    if kind == "num":
        _need(_num(v), w, "a number", v)
    elif kind == "num>=0":
        _need(_num(v) and v >= 0, w, "a non-negative number", v)
    elif kind in ("int>0", "int>=0", "int>0|None"):
        if v is None and kind == "int>0|None":
            return v
        _need(isinstance(v, int) and not isinstance(v, bool) and v >= (0 if kind == "int>=0" else 1), w,
              "a non-negative integer" if kind == "int>=0" else "a positive integer", v)
    elif kind == "str":
        _need(isinstance(v, str) and v != "", w, "a non-empty string", v)
    elif kind == "bool":
        _need(isinstance(v, bool), w, "true or false", v)
    else:
        _need(isinstance(v, {"list": list, "dict": dict}[kind]), w, f"a JSON {'array' if kind == 'list' else 'object'}", v)
    return v


def _check_line(line: dict, where: str) -> None:
    for name in ("dry_factor", "per_sample_factor", "base_bytes", "dry_bytes_max"):
        _field(line, name, where, "num>=0")
    for name in ("single_frame_factor", "single_frame_bytes"):
        if name in line:
            _field(line, name, where, "num>=0")
    _field(line, "n_points", where, "int>0")
    if line["dry_factor"] + line["per_sample_factor"] <= 0:
        raise ValueError(f"{where}: dry_factor + per_sample_factor is {line['dry_factor'] + line['per_sample_factor']}"
                         f": the line would not grow with the dry-run peak")


def _check_structure(s: dict, where: str) -> None:
    kind = _field(s, "kind", where, "str")
    if kind == "tiled":
        coef = _field(s, "coef", where, "list")
        _need(len(coef) == 4 and all(_num(c) for c in coef), f"{where}.coef", "4 numbers", coef)
        f = _field(s, "spatial_factor", where, "int>0")
        ov = _field(s, "overlap", where, "num>=0")
        _need(ov < 1, f"{where}.overlap", "below 1", ov)
        probes = [(t, k * t) for t in (16 * f, 32 * f, 64 * f) for k in (2, 4)]
        low = [(t, w) for t, w in probes if structure_bytes(s, w, w, 1, 1, t) <= 0]
        if low:
            t, w = low[0]
            raise ValueError(f"{where} prices a {w}x{w} request with {t} px tiles at zero or less")
        return
    _need(kind == "frames", f"{where}.kind", '"frames" or "tiled"', kind)
    knots = _field(s, "knots", where, "list")
    _need(bool(knots) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in knots)
          and knots == sorted(set(knots)), f"{where}.knots", "increasing positive integers", knots)
    for name in ("bytes_per_pixel", "bytes_per_pixel_squared", "base_bytes"):
        v = _field(s, name, where, "list")
        _need(len(v) == len(knots) and all(_num(x) for x in v), f"{where}.{name}", f"{len(knots)} numbers", v)
    _need(min(s["bytes_per_pixel"]) >= 0, f"{where}.bytes_per_pixel", "non-negative", s["bytes_per_pixel"])
    area_min = s.get("area_min", 64 * 64)
    for k in knots:
        for side in (int(area_min ** 0.5), 1024):
            if structure_bytes(s, side, side, 1, k, None) <= 0:
                raise ValueError(f"{where} prices {side}x{side} x {k} frames at zero or less")


def validate(data: object, source: str = "coefficients") -> dict:
    """Check a coefficient document (schema 2) field by field and index it for pricing. Raises ValueError naming
    ``source`` and the field (``groups[3].slope_bytes_per_pixel``): a missing field, a wrong type, a negative slope
    or factor, or a line that prices a valid request at zero or less."""
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a JSON object: not a vaemem coefficient file")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{source} has schema_version {version!r}; this estimator reads {SCHEMA_VERSION}")
    for name in ("models", "groups"):
        if not isinstance(data.get(name), {"models": dict, "groups": list}[name]):
            raise ValueError(f"{source} lacks {name}: not a vaemem coefficient file, or damaged; regenerate it with "
                             f"`vaemem fit`")
    for name, m in data["models"].items():
        w = f"{source}: models.{name}"
        for f, kind in (("architecture", "str"), ("family", "str"), ("parameters", "int>=0"),
                        ("spatial_factor", "int>0"), ("temporal_factor", "int>0|None")):
            _field(m, f, w, kind)
        if m.get("frame_step") is not None:
            _field(m, "frame_step", w, "int>0")
        if "ops" in m:
            _need(isinstance(m["ops"], list) and set(m["ops"]) <= set(OPS), f"{w}.ops", f"a list of {OPS}", m["ops"])
        if m.get("kernel", "conv2d") not in ("conv2d", "conv3d"):
            raise ValueError(f"{w}.kernel must be conv2d or conv3d, got {m['kernel']!r}")
    for i, g in enumerate(data["groups"]):
        w = f"{source}: groups[{i}]"
        for f in GROUP_KEYS:
            _field(g, f, w, "bool" if f == "tiled" else "str")
        _field(g, "slope_bytes_per_pixel", w, "num>=0")
        _field(g, "base_bytes", w, "num")
        if "tile_slope_bytes_per_tile_pixel" in g:
            _field(g, "tile_slope_bytes_per_tile_pixel", w, "num>=0")
        for f in ("pixels_min", "pixels_max"):  # the measured range: optional (reasons and the far-out floor)
            if f in g:
                _field(g, f, w, "int>0")
        lo = g.get("pixels_min", 64 * 64)
        if g["slope_bytes_per_pixel"] * lo + g["base_bytes"] <= 0:
            raise ValueError(f"{w} prices its smallest measured size ({lo} px) at zero or less")
    cals = data.get("calibrations", [])
    _need(isinstance(cals, list), f"{source}: calibrations", "a JSON array", cals)
    for i, c in enumerate(cals):
        w = f"{source}: calibrations[{i}]"
        _field(c, "calibration", w, "str")
        for f in PLATFORM_KEYS:
            _field(c, f, w, "bool" if f == "tiled" else "str")
        _need(c.get("kernel") in ("conv2d", "conv3d"), f"{w}.kernel", "conv2d or conv3d", c.get("kernel"))
        _field(c, "agree", w, "bool")
        _field(c, "spread", w, "num>=0")
        for arch, line in _field(c, "architectures", w, "dict").items():
            _check_line(line, f"{w}.architectures.{arch}")
        _check_line(_field(c, "class", w, "dict"), f"{w}.class")
    structures = data.get("structures", {})
    _need(isinstance(structures, dict), f"{source}: structures", "a JSON object", structures)
    for name, st in structures.items():
        _check_structure(st, f"{source}: structures.{name}")
    _index(data)
    return data


def clear_cache() -> None:
    _CACHE.clear()


def _tiling(tiled: bool) -> str:
    return "tiled" if tiled else "untiled"


def group_id(key: dict) -> str:
    """``sd15/decode/onednn/glibc-fixed/fp32/linux/untiled``: the name of a measured pixel-line group."""
    return "/".join(str(key[k]) if k != "tiled" else _tiling(key[k]) for k in GROUP_KEYS)


def platform_id(key: dict) -> str:
    """``onednn/glibc-fixed/fp32/linux/decode/untiled``: the platform part of a key (no architecture)."""
    return "/".join(str(key[k]) if k != "tiled" else _tiling(key[k]) for k in PLATFORM_KEYS)


def calibration_id(key: dict, kernel: str) -> str:
    return f"{kernel}/{platform_id(key)}"


def structure_key(architecture: str, op: str, dtype: str, tiled: bool) -> str:
    return f"{architecture}/{op}/{STRUCTURE_DTYPE[dtype]}/{_tiling(tiled)}"


def _index(data: dict) -> None:
    data["_index"] = {group_id(g): g for g in data["groups"]}
    data["_calib"] = {c["calibration"]: c for c in data.get("calibrations", [])}


def tiled_features(width: int, height: int, tile: int, factor: int, overlap: float) -> list[float]:
    """Basis of a tiled dry run: [tile^2, tiles visited x tile^2, width x height, 1]. Tiles visited: diffusers'
    loops step through the latent by int(tile / factor x (1 - overlap)) along each side."""
    stride = max(1, int(tile // factor * (1 - overlap)))
    n = -(-(height // factor) // stride) * -(-(width // factor) // stride)
    return [float(tile * tile), float(n * tile * tile), float(width * height), 1.0]


def structure_bytes(s: dict, width: int, height: int, batch: int, frames: int, tile: int | None) -> float:
    """The dry-run peak a structure gives (bytes). Untiled: ``batch x (a x area + q x area^2 + base)`` with a, q,
    base given at frame knots, linear between them and extrapolated along the last segment past the last
    knot (by then the growth is the output clip's). Tiled: the tiled basis. Batch multiplies the whole (dry runs
    scale exactly with batch)."""
    if s["kind"] == "tiled":
        feats = tiled_features(width, height, tile or 0, s["spatial_factor"], s["overlap"])
        return batch * sum(c * x for c, x in zip(s["coef"], feats))
    knots, area = s["knots"], max(width * height, s.get("area_min", 0))
    terms = (s["bytes_per_pixel"], s["bytes_per_pixel_squared"], s["base_bytes"])
    if len(knots) == 1 or frames <= knots[0]:
        a, q, b = (t[0] for t in terms)
    else:  # linear between knots, and past the last one along the last segment
        i = next((i for i, k in enumerate(knots) if k >= frames), len(knots) - 1)
        u = (frames - knots[i - 1]) / (knots[i] - knots[i - 1])
        a, q, b = (t[i - 1] + (t[i] - t[i - 1]) * u for t in terms)
    return max(0.0, batch * (a * area + q * area * area + b))


def legacy_bytes(op: str, width: int, height: int, *, dtype: str, backend: str, sd_family: bool, batch: int = 1,
                 frames: int = 1, tile: int | None = None) -> int:
    """The legacy reservation rule. Batch and frames multiply the pixels (the rule predates both)."""
    k = LEGACY_K["miopen" if backend == "miopen" else "default"][op]
    extra = LEGACY_FP32_SD_DECODE_EXTRA if (dtype == "fp32" and op == "decode" and sd_family) else 0
    if tile is not None:  # one tile of every sample and frame
        return int((tile * tile * batch * frames * ELEMENT_SIZE[dtype] * k + extra) * LEGACY_TILED_FACTOR)
    return width * height * batch * frames * ELEMENT_SIZE[dtype] * k + extra


def comfy_bytes(op: str, width: int, height: int, *, dtype: str, amd: bool, batch: int = 1, frames: int = 1,
                model: dict | None = None) -> int:
    """ComfyUI's rules (structure.md), for side-by-side reports. Images: k[op] x H x W x element size x (2.73 on
    AMD GPUs). Video decode, per model (h, w latent, T latent frames): Wan 2.1 ``(2200 if T <= 4 else 7000) x h x
    w x 64 x es``; Wan 2.2 ``8000 x h x w x 256 x es``; HunyuanVideo ``2800 x min(8, (T-1) x 4 + 1) x h x w x 64 x
    es``; LTX-Video ``1200 x T x h x w x 512 x es``. Other video: the image rule over every frame."""
    es = ELEMENT_SIZE[dtype]
    m = model or {}
    family, f, tf = m.get("family"), m.get("spatial_factor", 8), m.get("temporal_factor")
    if op == "decode" and tf:
        h, w, t = height // f, width // f, (frames - 1) // tf + 1
        if family == "wan":
            k = 8000 * 256 if f == 16 else (2200 if t <= 4 else 7000) * 64
            return int(k * h * w * es * batch)
        if family == "hunyuanvideo":
            return int(2800 * min(8, (t - 1) * 4 + 1) * h * w * 64 * es * batch)
        if family in ("ltx", "ltx2"):
            return int(1200 * t * h * w * 512 * es * batch)
    return int(COMFY_K[op] * width * height * batch * frames * es * (COMFY_AMD_FACTOR if amd else 1.0))


def invokeai_bytes(op: str, width: int, height: int, *, dtype: str, backend: str, batch: int = 1, frames: int = 1,
                   tile: int | None = None, model: dict | None = None) -> int:
    """InvokeAI's rules (structure.md), for side-by-side reports. Wan: a per-frame term ``H x W x es x K`` (K 2900
    for one frame, 6750 multi-frame decode, 1450 encode) plus the clip ``copies x 3 x frames x H x W x es`` (2
    copies decode, 1 encode); MiniMax-H3 encode ``(17 x H x W x es x 14 + clip) x 1.6``; everything else the
    legacy rule (InvokeAI's own image rule)."""
    es = ELEMENT_SIZE[dtype]
    m = model or {}
    px = width * height
    if m.get("family") == "wan" and tile is None:
        k = (2900 if frames == 1 else 6750) if op == "decode" else 1450
        copies = 2 if op == "decode" else 1
        return int((px * es * k + copies * 3 * frames * px * es) * batch)
    if m.get("family") == "minimax" and op == "encode" and tile is None:
        return int((17 * px * es * 14 + 3 * frames * px * es) * 1.6 * batch)
    return legacy_bytes(op, width, height, dtype=dtype, backend=backend, sd_family=m.get("family") == "sd",
                        batch=batch, frames=frames, tile=tile)


def _positive_int(name: str, v: object) -> int:
    """``v`` as an int (numpy integers too, through ``__index__``), or ValueError."""
    try:
        if isinstance(v, bool):
            raise TypeError
        n = v.__index__()  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        raise ValueError(f"{name} must be a positive integer, got {v!r}") from None
    if n <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return n


def _check_request(op: str, dtype: str, loaded_dtype: str | None, backend: str, allocator: str, os: str) -> None:
    """Checks that need no coefficient file: every key names one of its valid choices (a typo is refused, never
    priced by the fallback)."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of: {', '.join(OPS)}")
    for name, d in (("dtype", dtype), ("loaded_dtype", loaded_dtype)):
        if d is not None and d not in ELEMENT_SIZE:
            raise ValueError(f"unknown {name} {d!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of: {', '.join(ALLOCATORS)}")
    if os not in OSES:
        raise ValueError(f"unknown os {os!r}; choose one of: {', '.join(OSES)}")


def _check_model(coef: dict, model: str, op: str, width: int, height: int, frames: int, tile: int | None) -> dict:
    """The model's entry in the file, after the checks that need it (the same rules as ``vaemem measure``)."""
    models = coef["models"]
    if model not in models:
        raise ValueError(f"unknown model {model!r}; the coefficient file knows: {', '.join(sorted(models))}")
    m = models[model]
    if op not in m.get("ops", OPS):
        raise ValueError(f"{model} cannot {op}: {m.get('refused', {}).get(op, 'not supported')}")
    f = m["spatial_factor"]
    if width % f or height % f:
        raise ValueError(f"{model} needs width and height in multiples of {f} px, got {width}x{height}")
    if tile is not None:
        if tile % f:  # a positive int already (explain converts it)
            raise ValueError(f"tile must be a positive multiple of {f} px for {model}, got {tile!r}")
        if tile >= max(width, height):
            raise ValueError(f"tile {tile} is not smaller than {width}x{height}: no tiling would happen")
    step = m.get("frame_step") or m["temporal_factor"]
    if m["temporal_factor"] is None:
        if frames != 1:
            raise ValueError(f"{model} is an image model: frames must be 1")
    elif (frames - 1) % step:
        raise ValueError(f"{model} takes clips of 1 + {step}k frames ({', '.join(str(1 + step * k) for k in range(4))}"
                         f", ...), got {frames}")
    return m


def dry_run_bytes(coef: dict, model: str, op: str, width: int, height: int, *, dtype: str, batch: int = 1,
                  frames: int = 1, tile: int | None = None) -> float | None:
    """The dry-run peak (bytes of live tensors the op creates) from the file's structure, or None where no
    structure covers the request (tiled video, an architecture never dry-run)."""
    m = coef["models"][model]
    s = coef.get("structures", {}).get(structure_key(m["architecture"], op, dtype, tile is not None))
    return None if s is None else structure_bytes(s, width, height, batch, frames, tile)


def calibration_bytes(c: dict, dry: float, dry1: float, single_frame: bool) -> float:
    """A calibration line at a dry-run peak ``dry`` (``dry1``: of one sample; ``single_frame``: a one-frame clip of
    a video architecture). The one evaluation of the line: the fit, the reports and the pricing all call it."""
    return (c["dry_factor"] * dry + c["per_sample_factor"] * dry1 + c["base_bytes"]
            + ((c.get("single_frame_factor", 0.0) * dry + c.get("single_frame_bytes", 0)) if single_frame else 0.0))


def explain(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None = None,
            backend: str, allocator: str, os: str, batch: int = 1, frames: int = 1, tile: int | None = None,
            coefficients: object = None) -> Estimate:
    """The reservation in bytes for one decode/encode, with its reasoning (see the module docstring)."""
    _check_request(op, dtype, loaded_dtype, backend, allocator, os)
    width, height, batch, frames = (_positive_int(n, v) for n, v in
                                    (("width", width), ("height", height), ("batch", batch), ("frames", frames)))
    tile = None if tile is None else _positive_int("tile", tile)
    coef = coefficients if isinstance(coefficients, dict) else load(coefficients)
    if "_index" not in coef:  # a document handed in as a dict: checked once, as a file would be
        validate(coef, "coefficients=")
    m = _check_model(coef, model, op, width, height, frames, tile)
    pixels = width * height * batch * frames
    tile_px = tile * tile if tile else 0
    key = {"architecture": m["architecture"], "op": op, "conv_backend": backend, "allocator": allocator,
           "dtype": dtype, "os": os, "tiled": tile is not None}
    gid = group_id(key)
    cast = 0
    if loaded_dtype is not None and ELEMENT_SIZE[dtype] > ELEMENT_SIZE[loaded_dtype]:
        cast = m["parameters"] * (ELEMENT_SIZE[dtype] - ELEMENT_SIZE[loaded_dtype])
    kw = {"dtype": dtype, "frames": frames, "tile": tile}
    dry = dry_run_bytes(coef, model, op, width, height, batch=batch, **kw)
    calib = coef["_calib"].get(calibration_id(key, m.get("kernel", "conv2d")))

    if dry is not None and calib is not None:
        dry1 = dry_run_bytes(coef, model, op, width, height, batch=1, **kw)
        own = calib["architectures"].get(m["architecture"])
        line = own if own is not None else calib["class"]
        video_arch = coef["models"].get(m["architecture"], m)["temporal_factor"] is not None
        env = int(calibration_bytes(line, dry, dry1, video_arch and frames == 1))
        if own is not None:
            source = "measured"
            reason = (f"measured on this platform ({own['n_points']} points): {own['dry_factor']:.3f} x dry-run peak "
                      f"{dry / MIB:.0f} MiB")
            if dry > own["dry_bytes_max"]:
                reason += f", {dry / own['dry_bytes_max']:.1f}x beyond its largest measured dry-run peak"
        else:
            source = "transfer"
            agree = ("architectures agree" if calib["agree"] else "UNVERIFIED: one architecture measured"
                     if len(calib["architectures"]) < 2 else "UNVERIFIED: its architectures disagree")
            reason = (f"{m['architecture']} not measured here; {calib['kernel']} class line of "
                      f"{', '.join(sorted(calib['architectures']))} ({agree}, spread {calib['spread']:.2f}) at "
                      f"dry-run peak {dry / MIB:.0f} MiB")
        return Estimate(env + cast, source, calib["calibration"], reason, env, cast, 0, pixels)

    exact = coef["_index"].get(gid)
    if exact is not None:
        env = int(exact["slope_bytes_per_pixel"] * pixels
                  + exact.get("tile_slope_bytes_per_tile_pixel", 0.0) * tile_px + exact["base_bytes"])
        reason = "measured pixel line (no dry-run structure covers this request)"
        if pixels > exact.get("pixels_max", pixels):  # honest about extrapolation: the line is only measured so far
            reason += f", extrapolated to {pixels / exact['pixels_max']:.1f}x its largest measured size"
            if pixels > 2 * exact["pixels_max"]:  # far outside: never below the legacy rule (for a clip: of one
                video = m["temporal_factor"] is not None  # frame, plus the decoded clip that must exist)
                floor = legacy_bytes(op, width, height, dtype=dtype, backend=backend, sd_family=m["family"] == "sd",
                                     batch=batch, frames=1 if video else frames, tile=tile)
                if video and op == "decode":
                    floor += 3 * frames * width * height * batch * ELEMENT_SIZE[dtype]
                if floor > env:
                    env = floor
                    reason += ", raised to the legacy rule" + (" of one frame plus the decoded clip" if video else "")
        return Estimate(env + cast, "measured", gid, reason, env, cast, 0, pixels)

    platform = {k: key[k] for k in ("architecture", "op", "conv_backend", "allocator", "os", "tiled")}
    have = sorted({g["dtype"] for g in coef["groups"] if all(g[k] == v for k, v in platform.items())}
                  | {c["dtype"] for c in coef.get("calibrations", []) if m["architecture"] in c["architectures"]
                     and all(c[k] == v for k, v in platform.items() if k != "architecture")})
    if have:
        raise ValueError(f"no coefficient line for dtype {dtype} of {model} {op} on {backend}/{allocator}/{os}; "
                         f"measured dtypes there: {', '.join(have)}")

    floor = legacy_bytes(op, width, height, dtype=dtype, backend=backend, sd_family=m["family"] == "sd",
                         batch=batch, frames=1 if dry is not None else frames, tile=tile)
    ref = dry_run_bytes(coef, REFERENCE_MODEL, op, width, height, batch=batch, dtype=dtype, tile=tile) \
        if REFERENCE_MODEL in coef["models"] else None
    if dry is not None and ref:
        ratio = dry / ref
        env = int(floor * ratio)
        if ratio > 1:
            reason = (f"platform not measured: legacy rule x {ratio:.2f} (dry-run peak {dry / MIB:.0f} MiB against "
                      f"{ref / MIB:.0f} MiB of the SD family)")
            return Estimate(env + cast, "fallback", None, reason, env, cast, floor, pixels)
        reason = f"platform not measured: legacy rule (dry-run peak {ratio:.2f}x the SD family's)"
    else:
        env = 0
        reason = "platform not measured: legacy rule (no dry-run structure" + \
                 (", frames priced as pixels)" if frames > 1 else ")")
    return Estimate(floor + cast, "fallback", None, reason, env, cast, floor, pixels)


def working_memory_bytes(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None = None,
                         backend: str, allocator: str, os: str, batch: int = 1, frames: int = 1,
                         tile: int | None = None, coefficients: object = None) -> int:
    """Bytes to reserve for one VAE ``op`` of ``width`` x ``height`` pixels; see :func:`explain` for the reasoning."""
    return explain(model, op, width, height, dtype=dtype, loaded_dtype=loaded_dtype, backend=backend,
                   allocator=allocator, os=os, batch=batch, frames=frames, tile=tile, coefficients=coefficients).bytes


def detect_allocator(backend: str, env: dict[str, str] | None = None) -> str:
    """The allocator key this process would run with, from its environment (no torch needed)."""
    env = dict(_os.environ if env is None else env)
    if backend in ("onednn", "aten"):
        return "glibc-fixed" if "MALLOC_MMAP_THRESHOLD_" in env else "glibc"
    conf = env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_HIP_ALLOC_CONF") or ""
    if "cudaMallocAsync" in conf:
        return "cudaMallocAsync"
    if "expandable_segments:True" in conf:
        return "expandable"
    if "expandable_segments:False" in conf:
        return "expandable-off"
    return "native"
