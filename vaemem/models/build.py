"""Build a zoo model with random weights on a device, cheaply and reproducibly.

Why random weights are enough: the memory a VAE pass needs is set by tensor shapes, dtypes and the kernels the
backend picks, none of which depend on the weight values. The values must still stay finite and of ordinary
size: a NaN or inf would not change the shapes, but it would make drift comparisons (bench-conv3d) meaningless
and could push fp16 into overflow handling paths. So weights are drawn N(0, 1/fan_in), norm scales are 1 and
biases 0, which keeps activations O(1) through GroupNorm-ed residual stacks.

Why build on the meta device: the default initialisers (kaiming on 400M parameters) cost seconds per point on
a CPU and would run again in every fresh process. Parameters are created on ``meta`` (shape only), the half of
the model the op does not use is dropped, and the rest is allocated on the target device and filled in place
from a seeded CPU generator (in place, so no freed temporaries sit in the allocator's cache at baseline).
Buffers are built for real (they are small and some are computed, e.g. rotary frequencies), then moved to the
target device; for the dry run that is the meta device too, where their values are gone (nothing reads them for
a shape).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from vaemem.estimate import sample_stride
from vaemem.models.zoo import LATENT_STRIDE_CLASSES, ModelSpec, get_spec

DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# The decode timestep the LTX-Video 0.9.5 pipelines pass to a timestep-conditioned decoder (its shape, not its
# value, sets the memory).
DECODE_TIMESTEP = 0.05


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Register every new nn.Parameter on the meta device; buffers stay real (their values are computed: a meta
    factory context would lose them). A module's constructor still makes each weight in host memory first, one at
    a time: the build needs the largest weight's bytes (9 MiB for SD's VAE), and a config of absurd widths fails
    there with torch's allocation error.

    Also quiets diffusers' notes about published config keys its classes ignore (flux2's force_upcast, wan22's
    clip_output): they are expected here and would bury the output of every run.
    """
    from diffusers.utils import logging as dlogging

    level = dlogging.get_verbosity()
    dlogging.set_verbosity_error()
    original = nn.Module.register_parameter

    def register(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]
        dlogging.set_verbosity(level)


def _drop_unused_half(model: nn.Module, spec: ModelSpec, op: str) -> None:
    """Replace the encoder (for decode) or decoder (for encode) by an empty module: it never runs."""
    unused = ("encoder", "quant_conv") if op == "decode" else ("decoder", "post_quant_conv")
    for attr in unused:
        if getattr(model, attr, None) is not None:
            setattr(model, attr, nn.Module())


def _fill_(model: nn.Module, device: torch.device, dtype: torch.dtype, seed: int | None) -> None:
    """Allocate every meta parameter on ``device`` in ``dtype`` and fill it in place from a seeded generator
    (``seed`` None: leave it empty, as the dry run does on the meta device)."""
    gen = torch.Generator(device="cpu").manual_seed(seed) if seed is not None else None
    for module in model.modules():
        for name, meta in list(module._parameters.items()):
            if meta is None:
                continue
            shape = tuple(meta.shape)
            if gen is None:  # the dry run: shapes only, on the meta device
                module._parameters[name] = nn.Parameter(torch.empty(shape, dtype=dtype, device=device),
                                                        requires_grad=False)
                continue
            host = torch.empty(shape, dtype=dtype, device="cpu")
            if name.endswith("bias"):
                host.zero_()
            elif meta.numel() == (shape[0] if shape else 1):  # per-channel scale (norm weight, RMS gamma)
                host.fill_(1.0)
            else:
                fan_in = math.prod(shape[1:])
                host.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=gen)
            tensor = host if device.type == "cpu" else host.to(device)
            module._parameters[name] = nn.Parameter(tensor, requires_grad=False)
            del host, tensor
        for name, buf in list(module._buffers.items()):
            if buf is not None:
                module._buffers[name] = buf.to(device=device, dtype=dtype if buf.is_floating_point() else buf.dtype)


def build_meta(spec: ModelSpec, op: str) -> nn.Module:
    """``spec``'s model with every parameter on the meta device and the half ``op`` does not run dropped."""
    import diffusers

    with _parameters_on_meta():
        model = getattr(diffusers, spec.class_name).from_config(spec.config)
    _drop_unused_half(model, spec, op)
    return model


def ignored_config_keys(cfg: dict) -> list[str]:
    """The keys of a config its diffusers class does not take, sorted. diffusers ignores them (with a log line) and
    builds its default there, so a misspelt ``base_dim`` traces a full-size model; published configs carry a few
    from other diffusers versions (FLUX.2's ``force_upcast``, Wan 2.2's ``clip_output``), so this is said, not
    refused."""
    import inspect

    import diffusers

    params = inspect.signature(getattr(diffusers, cfg["_class_name"]).__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):  # the class takes any key
        return []
    return sorted(k for k in cfg if not k.startswith("_") and k not in params)


def build_model(name: str | ModelSpec, op: str, device: str | torch.device, dtype: str,
                seed: int | None = 0) -> nn.Module:
    """The zoo model ``name`` (or any spec) ready to run ``op`` on ``device`` in ``dtype`` (fp16|bf16|fp32),
    in eval mode. ``seed`` None leaves the weights unfilled (the dry run builds it on the meta device)."""
    spec = get_spec(name) if isinstance(name, str) else name
    model = build_meta(spec, op)
    _fill_(model, torch.device(device), DTYPES[dtype], seed)
    return model.eval()


def count_parameters(name: str) -> int:
    """Parameter count of the whole model (both halves), from a meta build: no memory, no initialisers."""
    spec = get_spec(name)
    import diffusers

    with _parameters_on_meta():
        model = getattr(diffusers, spec.class_name).from_config(spec.config)
    return sum(p.numel() for p in model.parameters())


def count_op_parameters(name: str, op: str) -> int:
    """Parameters of the half ``op`` runs, from a meta build (the other half dropped as for a measurement)."""
    return sum(p.numel() for p in build_meta(get_spec(name), op).parameters())


def largest_conv_parameters(name: str, op: str) -> int:
    """The largest convolution weight (elements) of the half ``op`` runs, from a meta build."""
    convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
    return max((m.weight.numel() for m in build_meta(get_spec(name), op).modules() if isinstance(m, convs)), default=0)


def attention_ops(name: str) -> tuple[str, ...]:
    """The ops of zoo model ``name`` whose half holds an attention module, from meta builds."""
    from vaemem.tracing.counter import is_attention

    spec = get_spec(name)
    return tuple(op for op in spec.ops if any(is_attention(m) for m in build_meta(spec, op).modules()))


def configure_tiling(model: nn.Module, spec: ModelSpec, tile: int | None, overlap: float = 0.25) -> None:
    """Turn diffusers' own tiled decode/encode on with square ``tile``-pixel tiles, or off when ``tile`` is None.

    ``overlap`` is the fraction of a tile shared with its neighbour (diffusers' own default, its
    ``tile_overlap_factor``, is 0.25): classes that take a stride get ``tile`` minus the overlap, rounded down to
    the spatial factor. Temporal tiling, where a class has it, keeps
    the class's defaults. MiniMax-H3 ships with tiling on (256 px), so "no tile" must switch it off explicitly.
    """
    if tile is None:
        model.use_tiling = False
        return
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"tile overlap is a fraction in [0, 1), got {overlap}")
    f = spec.spatial_factor
    stride = sample_stride(tile, f, overlap)
    overlap_px = tile - stride
    cls = spec.class_name
    if cls in LATENT_STRIDE_CLASSES:  # the estimator's stride rule for these is the same list
        _overlap_factor_tiling(model, cls, tile, f, overlap)
    elif cls == "AutoencoderKLMiniMaxH3":
        model.enable_tiling(tile, tile, overlap_px, overlap_px)
    else:  # Wan, Qwen-Image, HunyuanVideo, LTX, LTX-2, Mochi, DC-AE: min size and stride in sample pixels
        model.enable_tiling(tile_sample_min_height=tile, tile_sample_min_width=tile,
                            tile_sample_stride_height=stride, tile_sample_stride_width=stride)


def _overlap_factor_tiling(model: nn.Module, cls: str, tile: int, f: int, overlap: float) -> None:
    """Tiling of the :data:`~vaemem.models.zoo.LATENT_STRIDE_CLASSES`, which take an overlap factor. diffusers'
    ``enable_tiling`` keeps the model's own value for an argument that is 0 (``arg or self.x``), so the overlap is
    also set directly: else an overlap of 0 would run at the class default, or at what a reused dry-run model last
    had."""
    if cls in ("AutoencoderKL", "AutoencoderKLFlux2"):
        model.use_tiling = True
        model.tile_sample_min_size = tile
        model.tile_latent_min_size = tile // f
        model.tile_overlap_factor = overlap
    elif cls == "AutoencoderKLCogVideoX":
        model.enable_tiling(tile, tile, overlap, overlap)
        model.tile_overlap_factor_height = model.tile_overlap_factor_width = overlap
        model.tile_latent_min_height = model.tile_latent_min_width = tile // f
    elif cls == "AutoencoderKLHunyuanImage":
        model.enable_tiling(tile, overlap)
        model.tile_overlap_factor = overlap
        model.tile_latent_min_size = tile // f
    elif cls == "AutoencoderKLHunyuanVideo15":
        model.enable_tiling(tile, tile, tile // f, tile // f, overlap)
        model.tile_overlap_factor = overlap
    else:
        raise AssertionError(f"{cls} is in LATENT_STRIDE_CLASSES without a tiling branch here")


def input_shape(spec: ModelSpec, op: str, width: int, height: int, batch: int, frames: int) -> tuple[int, ...]:
    """Shape of the tensor fed to ``op``: pixels (3 channels) for encode, latents for decode; classes with a time
    axis (Qwen-Image too, with one frame) take (batch, channels, frames, height, width)."""
    if op == "encode":
        spatial: tuple[int, ...] = (height, width)
        channels = 3
        time = (frames,) if spec.info.five_d else ()
    else:
        spatial = (height // spec.spatial_factor, width // spec.spatial_factor)
        channels = spec.latent_channels
        time = (spec.latent_frames(frames),) if spec.info.five_d else ()
    return (batch, channels, *time, *spatial)


def make_input(shape: tuple[int, ...], device: str | torch.device, dtype: str, seed: int = 1) -> torch.Tensor:
    """A seeded N(0, 1) tensor, generated on the CPU so every device sees the same values."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    host = torch.empty(shape, dtype=DTYPES[dtype]).normal_(generator=gen)
    return host if torch.device(device).type == "cpu" else host.to(device)


def run_op(model: nn.Module, op: str, x: torch.Tensor) -> torch.Tensor:
    """One decode or encode pass as a pipeline calls it; returns the output tensor (decoded sample, latent mean,
    or DC-AE's deterministic latent). A timestep-conditioned decoder (LTX-Video 0.9.5) gets the pipelines'
    decode timestep."""
    if op == "decode":
        if getattr(getattr(model, "config", None), "timestep_conditioning", False):
            t = torch.full((x.shape[0],), DECODE_TIMESTEP, dtype=x.dtype, device=x.device)
            return model.decode(x, temb=t).sample
        return model.decode(x).sample
    out: Any = model.encode(x)
    return out.latent if hasattr(out, "latent") else out.latent_dist.mean
