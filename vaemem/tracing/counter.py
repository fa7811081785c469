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

It also keeps, per convolution weight shape (elements, input rank, input channels, kernel volume), the largest
input torch's ``use_mkldnn`` rule reads in fp32 (N x C x the next two dims, :func:`conv_call`) and whether a
clause that ignores the size holds (groups > 1, a kernel larger than 3 in both inner dims, N > 1), and the
elements of the im2col buffer torch's own path would hold: where oneDNN runs a convolution it holds a reordered
copy of the weight, where it does not the buffer, and no dry run sees either
(``vaemem.estimate.conv_transient_bytes``), whether its input is channels-last (two copies), and the most bytes
live at a call (:func:`conv_live_bytes`): a transient adds to those, not to the peak, which is elsewhere.

And ``onednn_peak``: the peak with, while each op runs, the buffers a CPU op on oneDNN holds beyond its output
and no tensor shows (:func:`onednn_hidden_bytes`): the dry run's CPU variant; ``onednn_peak_no_amx`` the same on
a CPU without AMX tiles, whose half-precision convolutions hold other buffers.
On the meta device (``cpu_strides``) it gives convolutions' and 3-D pads' outputs the strides the CPU gives them
(:func:`_as_on_cpu`), and takes back a channels-last format a meta kernel made up (:func:`_new_format_on_meta`),
so that format is followed as the CPU follows it (the group norm's own rule is ``vaemem.tracing.trace``'s).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vaemem.estimate import ONEDNN_MIN_ELEMENTS


_CONVOLUTION = torch.ops.aten.convolution.default
_MEAN = torch.ops.aten.mean.dim
_SAFE_SOFTMAX = torch.ops.aten._safe_softmax.default
_HALF = (torch.bfloat16, torch.float16)


_FAKE_CPU: Any = None  # one FakeTensorMode for every convolution's stride question (made on first use)


def _is_channels_last(t: object) -> bool:
    """A 4-D or 5-D tensor that torch's ``suggest_memory_format`` (what its convolution backends read) calls
    channels-last, and not contiguous. In 4-D the answer can turn on the stride of a size-1 batch dim, which some
    meta kernels set otherwise than the CPU's: :func:`_new_format_on_meta` puts those back."""
    from torch._prims_common import suggest_memory_format

    if not isinstance(t, torch.Tensor) or t.dim() not in (4, 5) or t.is_contiguous():
        return False
    return suggest_memory_format(t) == (torch.channels_last_3d if t.dim() == 5 else torch.channels_last)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (computed, not allocated: under the counter an empty tensor
    would count)."""
    strides, size = [], 1
    for d in reversed(shape):
        strides.append(size)
        size *= d
    return tuple(reversed(strides))


def channels_last_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a channels-last tensor of ``shape`` (N, C, spatial...), computed as :func:`contiguous_strides`."""
    n, c, *space = shape
    inner, size = [0] * len(space), c
    for i in range(len(space) - 1, -1, -1):
        inner[i] = size
        size *= space[i]
    return (size, 1, *inner)


def _new_format_on_meta(args: Any, kwargs: Any, out: Any) -> Any:
    """``out`` of a meta op, restrided contiguous where it is a new 4-D storage channels-last to torch while none
    of the op's inputs is: the CPU's kernel kept its input's strides, a size-1 batch dim's among them, where the
    meta kernel recomputed them (KL's ``rescale_output_factor`` division after its attention: (1, 32, 16, 24) of
    strides (32, 1, 768, 32) gives (32, 1, 768, 32) on the CPU, (12288, 1, 768, 32), channels-last, on the meta
    device, and two convolutions after it copied their weight twice in the dry run, once on the CPU). Any layout
    that is not channels-last runs the same convolution path and holds the same bytes."""
    if not isinstance(out, torch.Tensor) or out.dim() != 4 or not _is_channels_last(out):
        return out
    inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    key = out.untyped_storage()._cdata
    if any(_is_channels_last(a) or a.untyped_storage()._cdata == key for a in inputs):
        return out
    return out.as_strided(out.shape, contiguous_strides(tuple(out.shape)))


def _any_channels_last(args: Any, kwargs: Any) -> bool:
    """Whether an op's tensor arguments include a channels-last one."""
    return any(_is_channels_last(t) for t in tree_flatten((args, kwargs))[0])


# Ops whose CPU kernels give a channels-last input's format to their output, where their meta kernels give a
# contiguous one (checked on real CPU tensors by the tests); elementwise ops, cat, interpolation and the constant
# pad already agree on the meta device (TensorIterator's rule is the device's own). A group norm of a channels-last
# input, which the CPU runs as it is and the meta device copies to contiguous first, is vaemem.tracing.trace's
# _group_norm_as_on_cpu.
_KEEPS_FORMAT_ON_CPU = {torch.ops.aten.replication_pad3d.default, torch.ops.aten.reflection_pad3d.default}


# The backends torch takes for a half-precision CPU convolution only on a host whose oneDNN cannot run it, and
# oneDNN's in their place (a transposed one is left to the host: torch binds no oneDNN transposed backend to
# Python, and no zoo model has one)
_B = torch._C._ConvBackend
_HOST_ONLY_BACKENDS = {_B.Slow2d: _B.Mkldnn, _B.Slow3d: _B.Mkldnn, _B.SlowDilated2d: _B.Mkldnn,
                       _B.SlowDilated3d: _B.Mkldnn}


def _as_on_cpu(func: Any, args: Any, kwargs: Any, out: Any) -> Any:
    """``out`` of a meta op whose input is channels-last, with the strides the CPU gives it. Why: the meta kernels
    know no backend, and some return contiguous outputs where the CPU keeps a channels-last input's format: a
    convolution that oneDNN runs (decided by torch's own rule, its meta function run on fake CPU tensors, about 1
    ms), a replication or reflection pad. HunyuanVideo 1.5's attention permutes its output to
    channels-last, and on the CPU every convolution after it then runs channels-last where its 1x1 projection ran
    on oneDNN, copying its weight twice (the dry run saw none of it).

    The CPU is one whose oneDNN runs half precision, bf16 as every CPU rig's that measured it (AVX512-BF16, AMX)
    and fp16 as well (no rig measured fp16; an AVX512-BF16 CPU without AVX512-FP16 runs it on torch's own path),
    whatever this host: on one without (AVX2), torch runs a half-precision convolution on its own path, whose
    output is contiguous where oneDNN's keeps a channels-last input's format (Mochi's bf16 encode at 128x128 x 7:
    the dry run with oneDNN's buffers rose from 78.2 to 97.7 MB on such a host). A dry run is the same on any host."""
    global _FAKE_CPU
    if func is _CONVOLUTION:
        from torch._subclasses.fake_tensor import FakeTensorMode

        if _FAKE_CPU is None:
            _FAKE_CPU = FakeTensorMode()
        with _FAKE_CPU:
            fake = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="cpu")
                    if isinstance(a, torch.Tensor) else a for a in args]
            backend = torch._C._select_conv_backend(*fake)
            if fake[0].dtype in _HALF and fake[1].dim() > 3 and backend in _HOST_ONLY_BACKENDS:
                fmt = torch._C._conv_determine_backend_memory_format(fake[0], fake[1], _HOST_ONLY_BACKENDS[backend])
                shape = tuple(out.shape)
                want = contiguous_strides(shape) if fmt == torch.contiguous_format else channels_last_strides(shape)
            else:
                want = _CONVOLUTION(*fake).stride()
    elif func in _KEEPS_FORMAT_ON_CPU:
        want = channels_last_strides(tuple(out.shape))
    else:
        return out
    # the same storage seen with other strides (a dense tensor's bytes are the same in either format)
    return out if tuple(out.stride()) == tuple(want) else out.as_strided(out.shape, want)


def is_attention(module: nn.Module) -> bool:
    """An attention module of a diffusers VAE, by its class name: ``Attention``, ``WanAttentionBlock``,
    ``HunyuanVideo15AttnBlock``, ``SanaMultiscaleLinearAttention``, ..."""
    name = type(module).__name__.lower()
    return "attention" in name or "attn" in name


def conv_call(args: Any, out: Any) -> tuple[int, int, int, int]:
    """One ``aten.convolution`` call (``args``, its output ``out``) as torch 2.13's fp32 ``use_mkldnn`` rule sees it
    (on more than one thread, where its 1x1 clause always holds; no zoo model has a transposed convolution):
    (the elements the rule reads, N x C x the next two dims; 1 where a clause that ignores the size holds; the
    elements of the im2col buffer torch's own path holds; 1 where its input or weight is channels-last)."""
    x, w, groups = args[0], args[1], args[8]
    s = x.shape if x.dim() >= 4 else (x.shape[0], x.shape[1], 1, x.shape[2])  # torch views a 1-D one as 2-D
    n = s[0] * s[1] * s[2] * s[3]
    always = int(groups > 1 or (x.dim() >= 4 and w.shape[-1] > 3 and w.shape[-2] > 3) or x.shape[0] > 1)
    volume = w[0, 0].numel()
    # im2col's buffer where oneDNN does not run it: a sample's input channels x kernel x output positions (a 1x1
    # kernel of stride 1 and no padding reads its input in place; padded or strided it does not: a padded 64->8
    # 1x1x1 convolution of a 4x64x4096 input held 396 MiB of columns here, a strided one 32 MiB)
    in_place = volume == 1 and all(v == 1 for v in args[3]) and all(v == 0 for v in args[4])
    columns = 0 if in_place else w.shape[1] * volume * out[0, 0].numel()
    # a channels-last input (or weight) on oneDNN: torch makes a channels-last copy of the weight before oneDNN
    # reorders it, two copies for the call (benchmarks/cpu_conv_transients.py: 864.6 -> 1727.8 MiB)
    last = int(_is_channels_last(x) or _is_channels_last(w))
    return n, always, columns, last


def conv_live_bytes(out: torch.Tensor, reorder: bool) -> int:
    """Bytes a convolution call adds to the live tensors before any transient of its own: its output and, where
    ``reorder``, the output's reorder: on oneDNN, and on torch's own path in fp32 too, where the call holds an im2col
    buffer (and, on a channels-last input, a contiguous copy of it) instead: a bound above by one output, which the
    small inputs that take that path carry easily. Not the input's reorder that :func:`onednn_hidden_bytes` counts
    where the input is the larger: at a call that copies its weight the copy is what it holds (LTX-Video's 512->512
    3x3x3 convolution at 320x192 x 9: 29.3 MiB beyond its 1.4 MiB output, the copy 28.3, its input 2.3). No reorder
    (the caller's ``reorder=False``) where oneDNN runs a call on a channels-last input, as
    :func:`onednn_hidden_bytes` holds none there: oneDNN takes it as it is (Mochi's bf16 64->64 3x3x3 convolution at
    256x160 x 7, channels-last, holds 0.2 MiB beyond its 35 MiB output; with the reorder counted, Mochi's encodes
    needed 0.89-0.95x their call peak). With the live bytes before it, what a weight copy or buffer adds to
    (``vaemem.estimate.conv_call_peak_bytes``): LTX-2's decoder copies its 432 MiB weight where 2-40 MiB are live,
    not at its 1129 MiB peak."""
    return (2 if reorder else 1) * out.numel() * out.element_size()


def safe_softmax_hidden_bytes(args: Any) -> int:
    """Bytes ``aten._safe_softmax`` (the softmax of SDPA's math path) holds beyond its output while it runs: a
    boolean mask of its input's elements (``input == -inf``, one byte each), made after the softmax, beside it, and
    never returned, so no dispatch mode sees it. Measured on the CPU (``benchmarks/cpu_hidden_ops.py --math``, torch
    2.13): 0.25x an fp32 score matrix (the CPU's math path computes half-precision scores in fp32 too); the
    math-path encodes of SD1.5 and FLUX.1 at 1280 and 1536 px needed 1.12x their dry run before it was counted."""
    return args[0].numel()


# The version of the rules of oneDNN's buffers (:func:`onednn_hidden_bytes`, :func:`conv_live_bytes`), which a
# dry-run cache entry records beside its oneDNN peaks and its convolutions' live bytes (``vaemem.tracing.cache``):
# an entry of another is re-run. 3: a channels-last call's live bytes hold its output alone (where oneDNN runs
# it), a half-precision mean's fp32 copies are in place of its output; 2: an fp32
# convolution's input reorder, none on a channels-last input or torch's own path (1, unstamped: its output's
# reorder wherever it ran).
ONEDNN_RULE = 3


def onednn_hidden_bytes(func: Any, args: Any, out: Any, amx: bool = True) -> int:
    """Bytes one aten op holds on a CPU's oneDNN beyond the live tensors while it runs, measured call by call
    (``benchmarks/cpu_hidden_ops.py --convs``, torch 2.13, the AVX512-BF16 EPYC). The weight's reorder is left to
    ``vaemem.estimate.conv_transient_bytes``, which prices it.

    - An fp32 convolution: a reorder of the larger of its input and its output (SD1.5's decoder at 512 px holds
      257 MiB beyond the 256->128 3x3 convolution's 128 MiB output, its input 256, and 141 beyond conv_out's 3,
      its input 128; its encoder 128 beyond the 3->128 one's 128 MiB output; HunyuanVideo's causal 3x3x3
      convolutions, whose input is padded to three frames for one, 1.01-1.03x that input at one frame of 256x256,
      3x their output). Why the input too: with the output alone, HunyuanVideo's fp32 decode needed 1.59x its dry
      run at 160x96 x 1 and 1.38x at 320x192 x 1, 54-137 MiB beyond it growing with the frame at any clip length,
      where the other architectures need 1.01-1.09x; with it 1.21x and 1.06x (Mochi's one frame 1.15 -> 1.09x).
      None where torch's own path runs it (:func:`conv_call`, ``vaemem.estimate.ONEDNN_MIN_ELEMENTS``), which
      holds its im2col buffer instead (LTX-Video's decoder at 160x96 x 1: 6.1 MiB beyond a 0.2 MiB output, its
      columns 6.6), priced call by call (``vaemem.estimate.conv_call_peak_bytes``).
    - A half-precision convolution on a CPU without AMX tiles (``amx=False``): a copy of its input, two for a
      kernel of one element (SD1.5's decoder at 512 px: 128 MiB beyond the 256->128 3x3 convolution's 64 MiB
      output, 256 beyond the 1x1 one's; Wan 2.1's causal 3x3x3 convolutions their padded input, 1.54x the output).
      With AMX (``amx=True``) twice its output, the rule the AMX Xeon's lines were fitted with (its convolutions
      were never measured call by call).
    - None, in fp32 or without AMX, on a channels-last input, which oneDNN takes as it is: SANA DC-AE's decoder
      and Mochi's encoder run channels-last (DC-AE's 512->512 3x3 convolution at 128x128 holds 17.9 MiB beyond a
      32 MiB output, its weight's two copies; Mochi's bf16 64->64 3x3x3 one at 256x160 x 7, 0.2 beyond 35 MiB), and
      SD1.5's decoder in fp32 on a batch, whose convolutions' inputs are channels-last (at 256 px in two: 0-2 MiB
      beyond 64). Counted, DC-AE's fp32 decode's dry run rose 1.22x over a demand 1.05x the plain one.
    - A half-precision ``aten.mean.dim``: an fp32 copy of its input and its fp32 result, which its peak holds in
      place of its half-precision output, not beside it: 4 bytes per element of both, less the output's bytes
      (HunyuanImage-2.1's encoder at 512 px: its channel-group means rise 192.0, 96.0, 40.0 and 12.0 MiB above the
      live tensors before them, 4 bytes per element of their input and result, 160 beyond the largest's 32 MiB
      output; LTX-2.3's encoder at 512x320 x 9, 67.4 for 67.5; with the output added, the dry run over-stated
      HunyuanImage-2.1's bf16 encode, which needed 0.95x it, where the other image encoders need 1.03-1.04x). A
      mean given another result ``dtype`` (no diffusers autoencoder asks for one) is not measured: float64 holds
      more."""
    if func is _CONVOLUTION:
        x = args[0]
        if out.dtype == torch.float32:
            n, always, _, _ = conv_call(args, out)
            if _is_channels_last(x) or not (always or n > ONEDNN_MIN_ELEMENTS):
                return 0
            return max(out.numel() * out.element_size(), x.numel() * x.element_size())
        if amx:
            return 2 * out.numel() * out.element_size()
        if _is_channels_last(x):
            return 0
        return (2 if args[1][0, 0].numel() == 1 else 1) * x.numel() * x.element_size()
    if func is _MEAN and args[0].dtype in _HALF:
        return 4 * (args[0].numel() + out.numel()) - out.numel() * out.element_size()
    return 0


class LiveBytes(TorchDispatchMode):
    """Peak of live tensor bytes while active; ``where`` is the module stack at the peak."""

    def __init__(self, names: dict[int, str] | None = None, cpu_strides: bool = False) -> None:
        super().__init__()
        self.cpu_strides = cpu_strides  # on the meta device: give outputs the CPU's strides (_as_on_cpu)
        self.names = names or {}  # id(module) -> qualified name
        self.live: dict[int, int] = {}  # storage address (its C pointer) -> counted bytes
        self.baseline: set[int] = set()  # storages that existed before: weights, buffers, the input
        self._refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0
        self.where = ""
        self.attention_peak = 0  # peak while inside an attention module (0: none ran)
        self.onednn_peak = 0  # the peak with each op's oneDNN buffers while it runs (onednn_hidden_bytes)
        self.onednn_peak_no_amx = 0  # the same on a CPU without AMX tiles (differs in half precision only)
        self.softmax_mask = 0  # the largest mask a math-path softmax held (safe_softmax_hidden_bytes)
        self._in_attention = 0  # depth of nested attention modules
        self._stack: list[str] = []
        self._hooks: list[Any] = []
        # (weight elements, input rank, input channels, kernel volume) -> [the most elements the rule read, always,
        # the largest im2col buffer, channels-last, the fewest elements the rule read, that call's buffer, the most
        # bytes live at a call (conv_live_bytes), the most at a call of the fewest elements]
        self.convs: dict[tuple[int, int, int, int], list[int]] = {}
        # (its weight's identity, the elements the rule read, the live bytes) per call, in order: a replayed
        # sub-call re-applies its first call's, relative to its start (vaemem.tracing.trace._Replay)
        self.conv_events: list[tuple[tuple[int, int, int, int], int, int]] = []

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

    def bump(self, extra: int, where: str, attention_extra: int = -1, onednn_extra: int = -1,
             no_amx_extra: int = -1) -> None:
        """Record a transient ``extra`` bytes above the current level (a replayed sub-call's inner peak),
        ``attention_extra`` above it inside its attention modules (-1: none ran in it), ``onednn_extra`` with
        oneDNN's buffers and ``no_amx_extra`` with them on a CPU without AMX (-1: ``extra``)."""
        if self.current + extra > self.peak:
            self.peak = self.current + extra
            self.where = where
        self.onednn_peak = max(self.onednn_peak, self.current + (extra if onednn_extra < 0 else onednn_extra))
        self.onednn_peak_no_amx = max(self.onednn_peak_no_amx,
                                      self.current + (extra if no_amx_extra < 0 else no_amx_extra))
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
        if self.current > self.onednn_peak:
            self.onednn_peak = self.current
        if self.current > self.onednn_peak_no_amx:
            self.onednn_peak_no_amx = self.current
        if self._in_attention and self.current > self.attention_peak:
            self.attention_peak = self.current

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)
        self._refs.pop(key, None)

    def _conv(self, args: Any, out: Any) -> None:
        """Record one ``aten.convolution`` call (:func:`conv_call`) under its weight's shape, with the bytes live at
        it (:func:`conv_live_bytes`; ``out`` is not tracked yet)."""
        x, w = args[0], args[1]
        n, always, columns, last = conv_call(args, out)
        # one record per convolution weight's shape, not its size: LTX-2's decoder has a 1024->1024 and a 512->2048
        # convolution of 28.3 M parameters each, whose inputs grow by different laws; merged, the larger of the two
        # fitted as one law put the first on oneDNN at 160x96 x 9 frames (a 108 MiB copy torch never made)
        ident = (w.numel(), x.dim(), w.shape[1], w[0, 0].numel())
        seen = self.convs.get(ident)
        if seen is None:
            self.convs[ident] = [n, always, columns, last, n, columns, 0, 0]
        else:
            seen[0], seen[1], seen[2] = max(seen[0], n), max(seen[1], always), max(seen[2], columns)
            seen[3] = max(seen[3], last)
            # the smallest call too, with its buffer: torch decides call by call, and where the largest runs on
            # oneDNN a smaller one may stay on im2col (Wan's first chunk of 3 frames against the later ones of 6;
            # CogVideoX's convolutions at two resolutions): its buffer is a transient the largest call's record
            # would lose
            if n < seen[4]:
                seen[4], seen[5], seen[7] = n, columns, 0
            elif n == seen[4]:
                seen[5] = max(seen[5], columns)
        # no output reorder where oneDNN takes a channels-last input as it is; where torch's fp32 rule keeps the call
        # on its own path the bound of one output stays, in every dtype: the half-precision call peak is the fp32
        # record at the element size's ratio (vaemem.estimate.conv_call_peak_bytes), over by a small call's output
        on_onednn = always or n > ONEDNN_MIN_ELEMENTS
        self.conv_live(ident, n, self.current + conv_live_bytes(out, not (_is_channels_last(x) and on_onednn)))

    def conv_live(self, ident: tuple[int, int, int, int], n: int, live: int) -> None:
        """Record ``live`` bytes at a call of the convolution ``ident`` whose rule read ``n`` elements (a replay
        re-applies its first call's at its own level)."""
        seen = self.convs[ident]
        seen[6] = max(seen[6], live)
        if n == seen[4]:
            seen[7] = max(seen[7], live)
        self.conv_events.append((ident, n, live))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.cpu_strides and (func is _CONVOLUTION or func in _KEEPS_FORMAT_ON_CPU) \
                and _any_channels_last(args, kwargs):
            out = _as_on_cpu(func, args, kwargs or {}, out)
        elif self.cpu_strides:
            out = _new_format_on_meta(args, kwargs, out)
        if func is _CONVOLUTION:
            self._conv(args, out)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t)
        if func is _SAFE_SOFTMAX:
            extra = safe_softmax_hidden_bytes(args)
            self.softmax_mask = max(self.softmax_mask, extra)
            self.bump(extra, self._stack[-1] if self._stack else "(top level)",
                      attention_extra=extra if self._in_attention else -1)
        if func is _CONVOLUTION or func is _MEAN:
            self.onednn_peak = max(self.onednn_peak, self.current + onednn_hidden_bytes(func, args, out))
            self.onednn_peak_no_amx = max(self.onednn_peak_no_amx,
                                          self.current + onednn_hidden_bytes(func, args, out, amx=False))
        return out
