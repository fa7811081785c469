"""A 3D convolution computed as 2D convolutions.

Why: MIOpen (ROCm) has no fast solver for many 3D convolutions and falls back to Im3d2Col + GEMM, about 50x
slower, with a column buffer of several GiB. A conv3d with kernel depth kT is a sum over its kT temporal taps of
conv2d over the frames that tap sees, and conv2d has fast solvers everywhere.

Layout: input (B, C, T, H, W), weight (O, C, kT, kH, kW). With temporal stride sT and zero temporal padding pT,
output frame t of tap k reads input frame ``k + sT * t`` of the padded input. The frames are folded into the batch
once (one transposed copy of the input), so a tap is a strided view of that copy.

* ``taps``: one conv2d per tap over its (B * T_out, C, H, W) view, summed into one output buffer in place.
  Memory: input copy + one output buffer + one conv2d result at a time.
* ``stacked``: the kT tap views concatenated along channels, the weight reshaped to (O, kT * C, kH, kW), and
  one conv2d. More memory (kT copies of the input), one large call.

The summation order differs from a native conv3d's, so results match to fp32 rounding, not bit for bit.
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
import torch.nn.functional as F

Method = Literal["taps", "stacked"]
METHODS = ("taps", "stacked")
_warned: set[str] = set()


def _triple(v: int | tuple[int, ...]) -> tuple[int, int, int]:
    return (v, v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]


def _fallback_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"conv3d decomposition not possible ({reason}): using the native conv3d", stacklevel=3)


def conv3d_as_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride: int | tuple[int, int, int] = 1, padding: int | tuple[int, int, int] = 0,
                     dilation: int | tuple[int, int, int] = 1, groups: int = 1,
                     method: Method = "taps") -> torch.Tensor:
    """Same result as ``F.conv3d(x, weight, bias, stride, padding, dilation, groups)`` (zero padding), computed
    with conv2d. Dilation other than 1 or groups other than 1 fall back to the native call (warned once)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
    stride, padding, dilation = _triple(stride), _triple(padding), _triple(dilation)
    if dilation != (1, 1, 1) or groups != 1:
        _fallback_once(f"dilation={dilation}, groups={groups}")
        return F.conv3d(x, weight, bias, stride, padding, dilation, groups)
    b, c, t, h, w = x.shape
    o, _, kt, kh, kw = weight.shape
    st, sh, sw = stride
    pt, ph, pw = padding
    t_out = (t + 2 * pt - kt) // st + 1
    if t_out <= 0:
        raise ValueError(f"input has {t} frames, too few for a kernel of depth {kt} with padding {pt}")
    if pt:
        x = F.pad(x, (0, 0, 0, 0, pt, pt))
    frames = x.transpose(1, 2).contiguous()  # (B, T', C, H, W): every tap below is a view of this one copy
    # tap k reads frames k, k + sT, ...: a (B, T_out, C, H, W) view, folded into a batch of 2D images
    taps = [frames[:, k: k + st * (t_out - 1) + 1: st].reshape(b * t_out, c, h, w) for k in range(kt)]
    del frames  # the views keep the copy alive exactly as long as a tap needs it

    if method == "stacked" and kt > 1:
        stacked = torch.cat(taps, dim=1)
        w2 = weight.permute(0, 2, 1, 3, 4).reshape(o, kt * c, kh, kw)
        out = F.conv2d(stacked, w2, bias, (sh, sw), (ph, pw))
        del stacked
    else:
        out = F.conv2d(taps[0], weight[:, :, 0], bias, (sh, sw), (ph, pw))
        for k in range(1, kt):
            out.add_(F.conv2d(taps[k], weight[:, :, k], None, (sh, sw), (ph, pw)))
    del taps
    ho, wo = out.shape[-2:]
    return out.view(b, t_out, o, ho, wo).transpose(1, 2).contiguous()
