"""Swap the causal conv3d of a diffusers video VAE for the conv2d decomposition, and back.

Only the causal conv3d modules are touched, and only through instance attributes, so restoring is deleting them:

* ``WanCausalConv3d`` keeps its own forward (feature cache, causal and spatial zero padding) and calls
  ``nn.Conv3d._conv_forward``; the instance's ``_conv_forward`` is replaced.
* ``MiniMaxH3VideoCausalConv3d`` calls ``F.conv3d`` inside its forward after reflect spatial and causal temporal
  padding; the instance's ``forward`` is replaced by the same padding followed by the decomposition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from vaemem.conv3d.decompose import Method, conv3d_as_conv2d


def _wan_conv_forward(module: nn.Conv3d, method: Method, x: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None) -> torch.Tensor:
    return conv3d_as_conv2d(x, weight, bias, module.stride, module.padding, module.dilation, module.groups, method)


def _minimax_forward(module: nn.Conv3d, method: Method, x: torch.Tensor) -> torch.Tensor:
    if module.spatial_padding > 0:
        p = module.spatial_padding
        x = F.pad(x, (p, p, p, p, 0, 0), mode=module.spatial_padding_mode)
    if module.temporal_padding > 0:
        x = F.pad(x, (0, 0, 0, 0, module.temporal_padding, 0), mode="constant")
    return conv3d_as_conv2d(x, module.weight, module.bias, module.stride, 0, module.dilation, module.groups, method)


def _targets() -> dict[type, tuple[str, object]]:
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3 import MiniMaxH3VideoCausalConv3d
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d

    return {WanCausalConv3d: ("_conv_forward", _wan_conv_forward),
            MiniMaxH3VideoCausalConv3d: ("forward", _minimax_forward)}


def patch(model: nn.Module, method: Method = "taps") -> list[tuple[nn.Module, str]]:
    """Decompose every causal conv3d of ``model``; returns what :func:`unpatch` needs to undo it."""
    targets = _targets()
    done = []
    for module in model.modules():
        hit = targets.get(type(module))
        if hit is not None and hit[0] not in module.__dict__:
            attr, fn = hit
            setattr(module, attr, partial(fn, module, method))  # type: ignore[operator]
            done.append((module, attr))
    return done


def unpatch(patched: list[tuple[nn.Module, str]]) -> None:
    for module, attr in patched:
        module.__dict__.pop(attr, None)


@contextmanager
def decomposed_conv3d(model: nn.Module, method: Method = "taps") -> Iterator[int]:
    """Within the block, ``model``'s causal conv3d run as conv2d; yields how many modules were patched."""
    patched = patch(model, method)
    try:
        yield len(patched)
    finally:
        unpatch(patched)
