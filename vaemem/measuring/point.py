"""A point: the identity of one measurement, kept apart from its data (like torch.utils.benchmark's TaskSpec).

Everything here is pure Python: points are validated in the parent before any process starts.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from vaemem.errors import VaememError
from vaemem.estimate import ATTENTION, MAX_OVERLAP, batch_error, geometry_error, variant_key
from vaemem.models.zoo import ModelSpec, get_spec, registry

OPS = ("decode", "encode")
DTYPES = ("fp16", "bf16", "fp32")
GPU_ALLOCATORS = ("native", "cudaMallocAsync", "expandable", "expandable-off")
CPU_ALLOCATORS = ("glibc", "glibc-fixed", "system")  # glibc's on Linux, the system's elsewhere (checked per host)
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
CONV3D = ("native", "decomposed")
DECOMPOSABLE = ("wan", "minimax")  # families whose causal conv3d vaemem.conv3d.patch can decompose
DEFAULT_OVERLAP = 0.25  # diffusers' tile_overlap_factor
MAX_RUNS = 1000  # runs per point (or chunks per bench-conv3d path): past it a typo, whose planning alone took hours
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a run's time limit: past a week a typo, and past ~1e9 s the OS's clocks overflow


def runs_error(runs: object, name: str = "--runs") -> str | None:
    """What is wrong with a count of runs, or None: an int from 1 to :data:`MAX_RUNS` (a bool is no count)."""
    if type(runs) is not int or not 1 <= runs <= MAX_RUNS:
        return f"{name} must be an integer from 1 to {MAX_RUNS}, got {runs!r}"
    return None


# A point's variant fields and their defaults: the default variant is what lines measured before these fields
# existed ran, so they read as it and their keys carry no suffix.
VARIANT_DEFAULTS = {"overlap": DEFAULT_OVERLAP, "slicing": False, "attention": "fused", "conv3d": "native"}


@dataclass(frozen=True, order=True)
class Point:
    """One (model, op, dtype, size, batch, frames, tile, allocator, device, variant) to measure.

    ``width``/``height`` are pixels of the image (decode output, encode input); ``frames`` is 1 for image
    models; ``tile`` is the square tile side in pixels for diffusers' tiled decode/encode, or None. The variant:
    ``overlap`` (tile overlap fraction), ``slicing`` (diffusers' ``enable_slicing``), ``attention`` (``fused``
    SDPA kernel or the ``math`` path) and ``conv3d`` (``native`` or the conv2d decomposition).
    """

    model: str
    op: str
    dtype: str
    width: int
    height: int
    batch: int = 1
    frames: int = 1
    tile: int | None = None
    allocator: str = "glibc"
    device: str = "cpu"
    overlap: float = DEFAULT_OVERLAP
    slicing: bool = False
    attention: str = "fused"
    conv3d: str = "native"

    @property
    def pixels(self) -> int:
        """Pixels the op touches: width x height x batch x frames."""
        return self.width * self.height * self.batch * self.frames

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    @property
    def key(self) -> str:
        """Stable identity used for resume and sharding. The device index is left out on purpose: on a rig
        with several equal GPUs a point is the same point whichever GPU ran it."""
        tile = self.tile or 0
        return (
            f"{self.model}/{self.op}/{self.dtype}/{self.width}x{self.height}/b{self.batch}/f{self.frames}"
            f"/t{tile}/{self.allocator}/{self.device_type}{self.variant}"
        )

    @property
    def variant(self) -> str:
        """The non-default variant fields as a key suffix (``/o0.5/sliced/math/decomposed``); "" for the default,
        so keys of points measured before these fields existed are unchanged."""
        return variant_suffix(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Point:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def variant_suffix(point: dict[str, Any]) -> str:
    """The key suffix of a point's (or a measurement line's) non-default variant fields; absent fields are
    defaults."""
    v = {k: point.get(k, d) for k, d in VARIANT_DEFAULTS.items()}
    return "".join((f"/o{v['overlap']:g}" if v["overlap"] != DEFAULT_OVERLAP else "",
                    variant_key(v["attention"], v["slicing"]), "/decomposed" if v["conv3d"] != "native" else ""))


def check_variant(spec: ModelSpec, tile: int | None, overlap: object, slicing: object, attention: object,
                  conv3d: object, batch: int, op: str) -> None:
    """Raise VaememError naming what is wrong with a variant of ``spec`` (an unsliced batch its ``op`` cannot run
    too); measurement points and dry runs both call it."""
    if batch > 1 and slicing is not True and spec.batch_refusal(op):
        raise VaememError(f"{spec.name} cannot {op} a batch of {batch} unsliced: {spec.batch_refusal(op)}")
    if attention not in ATTENTION:
        raise VaememError(f"unknown attention path {attention!r}; choose one of: {', '.join(ATTENTION)}")
    if conv3d not in CONV3D:
        raise VaememError(f"unknown conv3d path {conv3d!r}; choose one of: {', '.join(CONV3D)}")
    if conv3d == "decomposed" and spec.family not in DECOMPOSABLE:
        raise VaememError(f"the conv3d decomposition applies to the causal conv3d of Wan and MiniMax-H3, not to "
                          f"{spec.name} ({spec.class_name})")
    if not isinstance(overlap, (int, float)) or isinstance(overlap, bool) or not 0.0 <= overlap <= MAX_OVERLAP:
        # past half, each pixel is computed in three or more tiles a side, and diffusers' edge tiles shrink below
        # a convolution's kernel (0.97: a stride of zero in its decode, a 1 px tile in its encode)
        raise VaememError(f"tile overlap is a fraction from 0 to {MAX_OVERLAP:g} (diffusers' default "
                          f"{DEFAULT_OVERLAP:g}), got {overlap!r}")
    if overlap != DEFAULT_OVERLAP and tile is None:
        raise VaememError(f"a tile overlap ({overlap:g}) applies to tiled points only: give a tile")
    if not isinstance(slicing, bool):
        raise VaememError(f"slicing is true or false, got {slicing!r}")
    if slicing and batch == 1:
        raise VaememError("slicing runs a batch one sample at a time: a sliced point needs batch > 1")


def default_allocator(device: str, os: str | None = None) -> str:
    """The allocator a point on ``device`` gets when none is asked for: on the CPU, the one of ``os`` (default: this
    host's), glibc's with fixed thresholds (``glibc-fixed``) on Linux and the system's elsewhere. Why fixed on
    Linux: with glibc's default thresholds a process's demand varies 25 % between runs of one point."""
    if device.split(":")[0] != "cpu":
        return "native"
    from vaemem.measuring.child.rig import os_name

    return "glibc-fixed" if (os or os_name()) == "linux" else "system"


def parse_res(text: str) -> tuple[int, int]:
    """'512' -> (512, 512); '768x448' -> (768, 448) as (width, height)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", text)
    if not m:
        raise VaememError(f"bad resolution {text!r}: write WIDTH or WIDTHxHEIGHT in pixels, e.g. 512 or 768x448")
    w = int(m.group(1))
    h = int(m.group(2)) if m.group(2) else w
    if not (w > 0 and h > 0):
        raise VaememError(f"bad resolution {text!r}: width and height must be positive")
    return w, h


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N -> (K, N)."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not (1 <= int(m.group(1)) <= int(m.group(2))):
        raise VaememError(f"bad shard {text!r}: write K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def check_geometry(spec: ModelSpec, op: str, dtype: str, width: int, height: int, batch: int, frames: int,
                   tile: int | None) -> None:
    """Raise VaememError naming what is wrong with this (op, dtype, size, batch, frames, tile) of ``spec``.

    The one owner of these rules: measurement points and dry runs both call it."""
    if op not in OPS:
        raise VaememError(f"unknown op {op!r}; choose one of: {', '.join(OPS)}")
    if op not in spec.ops:
        raise VaememError(f"{spec.name} cannot {op}: {spec.refusal(op)}")
    if dtype not in DTYPES:
        raise VaememError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    for name, value in (("width", width), ("height", height), ("batch", batch), ("frames", frames)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise VaememError(f"{name} must be a positive integer, got {value!r}")
    problem = batch_error(batch)
    if problem:
        raise VaememError(problem)
    if spec.frames_error(frames):
        if not spec.is_video:
            video = ", ".join(n for n, s in registry().items() if s.is_video and not s.tiny)
            raise VaememError(f"{spec.name} is an image model: frames apply only to {video}")
        raise VaememError(spec.frames_error(frames))
    if tile is not None:
        if spec.tiled_refusal(op):
            raise VaememError(f"{spec.name} cannot run a tiled {op}: {spec.tiled_refusal(op)}")
        if not isinstance(tile, int) or isinstance(tile, bool):
            raise VaememError(f"tile must be a positive multiple of {spec.spatial_factor} px for {spec.name}, "
                              f"got {tile!r}")
    problem = geometry_error(spec.name, spec.spatial_factor, width, height, tile)
    if problem:
        raise VaememError(problem)


def allocators_for(device_type: str) -> tuple[str, ...]:
    """The allocators a point on ``device_type`` may name: MPS has only its own (no CUDA allocator setting
    reaches it)."""
    return CPU_ALLOCATORS if device_type == "cpu" else ("native",) if device_type == "mps" else GPU_ALLOCATORS


def validate(p: Point) -> Point:
    """Return ``p`` if it can run, else raise VaememError naming what is wrong and the valid choices."""
    spec = get_spec(p.model)
    check_geometry(spec, p.op, p.dtype, p.width, p.height, p.batch, p.frames, p.tile)
    check_variant(spec, p.tile, p.overlap, p.slicing, p.attention, p.conv3d, p.batch, p.op)
    if p.device_type not in DEVICE_TYPES or not re.fullmatch(r"[a-z]+(:\d+)?", p.device):
        raise VaememError(f"bad device {p.device!r}; choose one of: cpu, cuda, cuda:N, mps, xpu, xpu:N")
    allowed = allocators_for(p.device_type)
    if p.allocator not in allowed:
        if p.device_type == "cpu":  # the choices this host's OS takes (check_options refuses the others)
            from vaemem.estimate import cpu_allocator_error
            from vaemem.measuring.child.rig import os_name

            allowed = tuple(a for a in allowed if cpu_allocator_error(a, os_name()) is None)
        raise VaememError(f"allocator {p.allocator!r} is not for {p.device_type}; choose one of: {', '.join(allowed)}")
    return p


def build_grid(
    models: list[str],
    ops: list[str],
    dtypes: list[str],
    resolutions: list[str],
    batches: list[int] | None = None,
    frames: list[int] | None = None,
    tiles: list[int | None] | None = None,
    allocators: list[str] | None = None,
    device: str = "cpu",
    overlaps: list[float] | None = None,
    slicing: list[bool] | None = None,
    attention: list[str] | None = None,
    conv3d: list[str] | None = None,
) -> list[Point]:
    """Every combination of the options, validated, in a stable order (smallest pixels first within a setting,
    so an OOM is met before the larger points it makes pointless). Overlaps apply to tiled points, slicing to
    batches of more than one."""
    if not (models and ops and dtypes and resolutions):
        raise VaememError("a sweep needs at least one --model, --op, --dtype and --res")
    allocators = allocators or [default_allocator(device)]
    if frames and not any(get_spec(m).is_video for m in models):
        validate(Point(models[0], ops[0], dtypes[0], 8, 8, frames=frames[0]))  # raises: frames on an image model
    points = []
    for model, op, dtype, res, batch, frame, tile, alloc, ov, sl, att, c3 in itertools.product(
        models, ops, dtypes, resolutions, batches or [1], frames or [None], tiles or [None], allocators,
        *(given or [VARIANT_DEFAULTS[k]] for k, given in (("overlap", overlaps), ("slicing", slicing),
                                                           ("attention", attention), ("conv3d", conv3d)))
    ):
        w, h = parse_res(res)
        if not get_spec(model).is_video:
            frame = 1  # a mixed grid's --frames apply to its video models
        elif frame is None:
            frame = 17
        if tile is None and overlaps:
            ov = DEFAULT_OVERLAP  # a grid's overlaps apply to its tiled points
        if sl and batch == 1:
            continue  # slicing splits a batch: batch 1 is the unsliced point, listed once
        points.append(validate(Point(model, op, dtype, w, h, batch, frame, tile, alloc, device, ov, sl, att, c3)))
    if not points:
        raise VaememError("the grid has no point: slicing needs a batch of more than one")
    if overlaps and not any(p.tile for p in points):  # else the overlap given is silently never measured
        raise VaememError("an overlap applies to tiled points, and the grid has none: give --tile too")
    unique = dict.fromkeys(points)  # the same point named twice runs once
    return sorted(unique, key=lambda p: (p.model, p.op, p.dtype, p.allocator, p.variant, p.tile or 0, p.batch,
                                         p.frames, p.pixels, p.width))


def shard(points: list[Point], k: int, n: int) -> list[Point]:
    """The stable K-th of N (1-based) of ``points``: by a hash of each point's key, independent of grid order,
    so every shard of a scheduler array agrees without talking to the others."""
    return [p for p in points if int(hashlib.sha256(p.key.encode()).hexdigest(), 16) % n == k - 1]
