"""Count live tensor bytes: every storage an op creates, from its creation until it is freed.

A ``TorchDispatchMode`` sees the output of every aten op. Each new storage is counted once (views and in-place
results share their input's storage) and a weak reference on it subtracts its bytes when the last tensor using it
dies (PyTorch keeps one Python object per live storage, so the reference dies with the storage). The same counter
runs on meta tensors (the dry run) and on real CPU tensors (the known answer the tests compare against).

Storages that exist before the counter starts (weights, the op's input) are not counted: as in a measurement,
they are part of the baseline. Global module hooks keep a stack of module names, so the peak can say where it
happened, and ``attention_peak`` is the peak while any attention module runs (:func:`is_attention`): on the math
path the score matrix lives there and nowhere else, so a math-path peak is ``max(fused-path peak, attention_peak)``
(the tests check this on real tensors).

It also keeps, per convolution weight (elements, input rank), the largest input torch's ``use_mkldnn`` rule
reads in fp32 (N x C x the next two dims) and whether a clause that ignores the size holds (groups > 1, a kernel
larger than 3 in both inner dims, N > 1), and the elements of the im2col buffer torch's own path would hold:
where oneDNN runs a convolution it holds a reordered copy of the weight, where it does not the buffer, and no dry
run sees either (``vaemem.estimate.conv_transient_bytes``).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


_CONVOLUTION = torch.ops.aten.convolution.default


def is_attention(module: nn.Module) -> bool:
    """An attention module of a diffusers VAE, by its class name: ``Attention``, ``WanAttentionBlock``,
    ``HunyuanVideo15AttnBlock``, ``SanaMultiscaleLinearAttention``, ..."""
    name = type(module).__name__.lower()
    return "attention" in name or "attn" in name


class LiveBytes(TorchDispatchMode):
    """Peak of live tensor bytes while active; ``where`` is the module stack at the peak."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        super().__init__()
        self.names = names or {}  # id(module) -> qualified name
        self.live: dict[int, int] = {}  # storage address (its C pointer) -> counted bytes
        self.baseline: set[int] = set()  # storages that existed before: weights, buffers, the input
        self._refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0
        self.where = ""
        self.attention_peak = 0  # peak while inside an attention module (0: none ran)
        self._in_attention = 0  # depth of nested attention modules
        self._stack: list[str] = []
        self._hooks: list[Any] = []
        # (weight elements, input rank) -> [elements the rule reads, always, im2col columns]
        self.convs: dict[tuple[int, int], list[int]] = {}

    # -- module stack -------------------------------------------------------------------------------------------
    def _pre(self, module: nn.Module, args: Any) -> None:
        self._stack.append(self.names.get(id(module), type(module).__name__))
        if is_attention(module):
            self._in_attention += 1
            self.attention_peak = max(self.attention_peak, self.current)

    def _post(self, module: nn.Module, args: Any, out: Any) -> None:
        if self._stack:
            self._stack.pop()
        if is_attention(module):
            self._in_attention -= 1

    def __enter__(self) -> LiveBytes:
        self._hooks = [nn.modules.module.register_module_forward_pre_hook(self._pre),
                       nn.modules.module.register_module_forward_hook(self._post)]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        super().__exit__(*exc)

    # -- accounting ---------------------------------------------------------------------------------------------
    def exclude(self, tensors: Any) -> None:
        """Storages of ``tensors`` exist before the op (the baseline): views of them are never counted."""
        for t in tensors:
            self.baseline.add(t.untyped_storage()._cdata)

    def bump(self, extra: int, where: str, attention_extra: int = -1) -> None:
        """Record a transient ``extra`` bytes above the current level (a replayed sub-call's inner peak), and
        ``attention_extra`` above it inside its attention modules (-1: none ran in it)."""
        if self.current + extra > self.peak:
            self.peak = self.current + extra
            self.where = where
        if attention_extra >= 0 and self.current + attention_extra > self.attention_peak:
            self.attention_peak = self.current + attention_extra

    def track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key in self.baseline:
            return
        nbytes = st.nbytes()
        old = self.live.get(key)
        if old is not None:
            if nbytes != old:  # resized in place
                self.current += nbytes - old
                self.live[key] = nbytes
            else:
                return
        else:
            self.live[key] = nbytes
            self.current += nbytes
            self._refs[key] = weakref.ref(st, lambda _ref, key=key: self._free(key))
        if self.current > self.peak:
            self.peak = self.current
            self.where = self._stack[-1] if self._stack else "(top level)"
        if self._in_attention and self.current > self.attention_peak:
            self.attention_peak = self.current

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)
        self._refs.pop(key, None)

    def _conv(self, args: Any, out: Any) -> None:
        """Record one ``aten.convolution`` call's input as torch 2.13's fp32 ``use_mkldnn`` rule sees it (on more
        than one thread, where its 1x1 clause always holds; no zoo model has a transposed convolution)."""
        x, w, groups = args[0], args[1], args[8]
        s = x.shape if x.dim() >= 4 else (x.shape[0], x.shape[1], 1, x.shape[2])  # torch views a 1-D one as 2-D
        n = s[0] * s[1] * s[2] * s[3]
        always = int(groups > 1 or (x.dim() >= 4 and w.shape[-1] > 3 and w.shape[-2] > 3) or x.shape[0] > 1)
        volume = w[0, 0].numel()
        # im2col's buffer where oneDNN does not run it: a sample's input channels x kernel x output positions (a
        # 1x1 kernel reads its input in place)
        columns = 0 if volume == 1 else w.shape[1] * volume * out[0, 0].numel()
        seen = self.convs.setdefault((w.numel(), x.dim()), [0, 0, 0])
        seen[0], seen[1], seen[2] = max(seen[0], n), max(seen[1], always), max(seen[2], columns)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is _CONVOLUTION:
            self._conv(args, out)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t)
        return out
