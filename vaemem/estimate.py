"""Runtime estimator: how many bytes to reserve for one VAE decode or encode, from a vaemem coefficient file.

Standard library only, and no import of the rest of vaemem: an app may import it on its hot path or copy this one
file. Usage::

    from vaemem.estimate import working_memory_bytes
    need = working_memory_bytes("sdxl", "decode", 1024, 1024, dtype="fp32", loaded_dtype="fp16",
                                backend="cudnn", allocator="native", os="linux", coefficients="coefficients.json")

Pricing, in this order:

1. **Exact group** (architecture, op, conv backend, allocator, dtype, OS, tiled) in the file:
   ``slope x pixels [+ tile_slope x tile^2] + base`` (the margin is already in the file), where pixels =
   width x height x batch x frames: batch and frames scale the pixel term, never the base.
2. **Declared fallback** for a platform with no group at all (backend / allocator / OS never measured):
   ``max(legacy rule, the highest measured envelope of the same architecture, op, dtype and tiling on any
   platform)``. It is never below the legacy rule that apps used before vaemem, and it does not repeat that rule's
   known under-reservation of models measured elsewhere (CogView4 needs twice what the legacy rule gives).

Then, in both cases, the **cast term**: when the run dtype is wider than the dtype the weights were loaded in
(an fp16-loaded SDXL decoded in fp32), add parameters x (run element size - loaded element size).

A platform that was measured, but not in the requested dtype, is an error (ValueError naming the dtypes that
have a line) rather than a guess.
"""

from __future__ import annotations

import json
import os as _os

# Kept light on purpose (no dataclasses, typing or pathlib): apps import this on their start-up path.

SCHEMA_VERSION = 1
MIB = 1024 * 1024
ELEMENT_SIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
OPS = ("decode", "encode")
BACKENDS = ("cudnn", "miopen", "onednn", "aten", "mps", "xpu")
GROUP_KEYS = ("architecture", "op", "conv_backend", "allocator", "dtype", "os", "tiled")

# The legacy rule (prior-art.md), reproduced exactly: bytes = H * W * element_size * k (+ 250 MiB for an fp32
# SD/SDXL decode); tiled: the same over one tile, times 1.25.
LEGACY_K = {"miopen": {"decode": 3600, "encode": 2750}, "default": {"decode": 2200, "encode": 1100}}
LEGACY_FP32_SD_DECODE_EXTRA = 250 * MIB
LEGACY_TILED_FACTOR = 1.25
# The other app's rule (ComfyUI), for side-by-side reports only.
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
            raise ValueError(f"coefficient file {p} has schema_version {version!r}, "
                             f"{'newer than' if newer else 'not'} the one this estimator reads ({SCHEMA_VERSION})"
                             + ("; upgrade vaemem" if newer else ""))
        data["_index"] = {_group_id(g): g for g in data["groups"]}
        _CACHE[key] = data
    return data


def clear_cache() -> None:
    _CACHE.clear()


def _group_id(key: dict) -> str:
    return "/".join(str(key[k]) if k != "tiled" else ("tiled" if key[k] else "untiled") for k in GROUP_KEYS)


def legacy_bytes(op: str, width: int, height: int, *, dtype: str, backend: str, sd_family: bool, batch: int = 1,
                 frames: int = 1, tile: int | None = None) -> int:
    """The legacy reservation rule. Batch and frames multiply the pixels (the rule predates both)."""
    k = LEGACY_K["miopen" if backend == "miopen" else "default"][op]
    extra = LEGACY_FP32_SD_DECODE_EXTRA if (dtype == "fp32" and op == "decode" and sd_family) else 0
    if tile is not None:
        return int((tile * tile * ELEMENT_SIZE[dtype] * k + extra) * LEGACY_TILED_FACTOR)
    return width * height * batch * frames * ELEMENT_SIZE[dtype] * k + extra


def comfy_bytes(op: str, width: int, height: int, *, dtype: str, amd: bool, batch: int = 1, frames: int = 1) -> int:
    """The other app's rule: k[op] x H x W x element size x (2.73 on AMD GPUs, else 1)."""
    return int(COMFY_K[op] * width * height * batch * frames * ELEMENT_SIZE[dtype] * (COMFY_AMD_FACTOR if amd else 1.0))


def _check_request(op: str, width: int, height: int, dtype: str, loaded_dtype: str | None, backend: str,
                   batch: int, frames: int) -> None:
    """Checks that need no coefficient file."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of: {', '.join(OPS)}")
    for name, d in (("dtype", dtype), ("loaded_dtype", loaded_dtype)):
        if d is not None and d not in ELEMENT_SIZE:
            raise ValueError(f"unknown {name} {d!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    for name, v in (("width", width), ("height", height), ("batch", batch), ("frames", frames)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _check_model(coef: dict, model: str, width: int, height: int, frames: int,
                 tile: int | None) -> dict:
    """The model's entry in the file, after the checks that need it."""
    models = coef["models"]
    if model not in models:
        raise ValueError(f"unknown model {model!r}; the coefficient file knows: {', '.join(sorted(models))}")
    m = models[model]
    f = m["spatial_factor"]
    if width % f or height % f:
        raise ValueError(f"{model} needs width and height in multiples of {f} px, got {width}x{height}")
    if tile is not None and (not isinstance(tile, int) or tile <= 0 or tile % f):
        raise ValueError(f"tile must be a positive multiple of {f} px for {model}, got {tile!r}")
    if m["temporal_factor"] is None and frames != 1:
        raise ValueError(f"{model} is an image model: frames must be 1")
    return m


def explain(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None = None,
            backend: str, allocator: str, os: str, batch: int = 1, frames: int = 1, tile: int | None = None,
            coefficients: object = None) -> Estimate:
    """The reservation in bytes for one decode/encode, with its reasoning (see the module docstring)."""
    _check_request(op, width, height, dtype, loaded_dtype, backend, batch, frames)
    coef = coefficients if isinstance(coefficients, dict) else load(coefficients)
    if "_index" not in coef:
        coef["_index"] = {_group_id(g): g for g in coef["groups"]}
    m = _check_model(coef, model, width, height, frames, tile)
    pixels = width * height * batch * frames
    tile_px = tile * tile if tile else 0
    key = {"architecture": m["architecture"], "op": op, "conv_backend": backend, "allocator": allocator,
           "dtype": dtype, "os": os, "tiled": tile is not None}
    gid = _group_id(key)
    cast = 0
    if loaded_dtype is not None and ELEMENT_SIZE[dtype] > ELEMENT_SIZE[loaded_dtype]:
        cast = m["parameters"] * (ELEMENT_SIZE[dtype] - ELEMENT_SIZE[loaded_dtype])

    def price(g: dict) -> int:
        return int(g["slope_bytes_per_pixel"] * pixels + g.get("tile_slope_bytes_per_tile_pixel", 0.0) * tile_px
                   + g["base_bytes"])

    exact = coef["_index"].get(gid)
    if exact is not None:
        env = price(exact)
        reason = "measured group"
        if pixels > exact.get("pixels_max", pixels):  # honest about extrapolation: the line is only measured so far
            reason += f", extrapolated to {pixels / exact['pixels_max']:.1f}x its largest measured size"
        return Estimate(env + cast, "exact", gid, reason, env, cast, 0, pixels)

    platform = {k: key[k] for k in ("architecture", "op", "conv_backend", "allocator", "os", "tiled")}
    same_platform = [g for g in coef["groups"] if all(g[k] == v for k, v in platform.items())]
    if same_platform:
        have = sorted({g["dtype"] for g in same_platform})
        raise ValueError(f"no coefficient line for dtype {dtype} of {model} {op} on {backend}/{allocator}/{os}; "
                         f"measured dtypes there: {', '.join(have)}")

    floor = legacy_bytes(op, width, height, dtype=dtype, backend=backend, sd_family=m["family"] == "sd",
                         batch=batch, frames=frames, tile=tile)
    similar = [g for g in coef["groups"] if g["architecture"] == key["architecture"] and g["op"] == op
               and g["dtype"] == dtype and g["tiled"] == key["tiled"]]
    best = max(similar, key=price, default=None)
    env = price(best) if best is not None else 0
    if env + cast > floor:
        reason = f"platform not measured: highest measured envelope of this model elsewhere ({best['group']})"
        return Estimate(env + cast, "fallback", best["group"], reason, env, cast, floor, pixels)
    reason = "platform not measured: legacy rule" + (f" (above the measured {best['group']})" if best else "")
    return Estimate(floor, "fallback", best["group"] if best else None, reason, env, cast, floor, pixels)


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
