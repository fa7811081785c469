"""The dry run of one point: build the model on the meta device, run the op there, count live tensor bytes.

Method (see ../shared/reference/structure.md): the model is built with its weights on the meta device and the op
runs there, so weights and activations carry shapes, strides, dtypes and storages but no memory and no arithmetic
(torch's meta kernels). The op's input is created before counting starts (as in a measurement, it is part of the
baseline), then :class:`~vaemem.tracing.counter.LiveBytes` counts every storage the op creates until it is freed.
The result is exact and deterministic for a given torch and diffusers. One thing the meta device does otherwise
than the CPU: SDPA there always takes the math path, with its score matrix, so the dry run asks the CPU's own
kernel choice (:func:`_attention_as_on_cpu`). Meta tensors replaced ``FakeTensorMode`` (fake tensors that claim
to be on the CPU), whose Python dispatch cost about 0.2 ms an op here; the whole zoo grid gives the same bytes
either way (``benchmarks/trace_speed.py --zoo`` compares every dry run with the committed cache).

Speed: a tiled op calls its decoder (or encoder) once per tile with mostly equal tile shapes, Wan's decoder and
encoder run once per chunk of a clip, and a sliced batch once per item; a naive dry run pays one Python pass per
call. A call whose arguments are tensors, scalars and lists of them is replayed for the next call of the same
signature: the counter is raised by the first call's inner peak and what the call left alive is created anew,
with the same shapes and strides (its output, and the tensors it put into a list argument: Wan's feature cache,
whose items before the call are part of the signature; CogVideoX's convolution cache, dicts of tensors passed in
and returned beside the output). That is exact whenever the module's memory depends on those shapes alone (true
of convolutional stacks); a call that leaves alive anything else or a view of a larger storage, or is passed an
object, is never replayed. The tests compare replayed dry runs with the same
accounting on real tensors.

One more shortcut, in the dry run only: HunyuanVideo 1.5 builds its causal attention mask token by token, an
in-place write per token that allocates nothing (tens of thousands of Python-level ops at 1024 px). Its values
mean nothing on the meta device, so the dry run builds the same (tokens x tokens) tensor without the loop
(:data:`_MASK_BUILDERS`); the tests compare these dry runs with real tensors, which run the loop.

Size-triggered splits: CogVideoX's and Mochi's 3D convolutions (:data:`SPLIT_CONVS`) split an input of more than
2^30 elements into chunks along time, each later chunk a copy with the temporal kernel's overlap, and concatenate
the outputs: a step in the peak wherever an input crosses a multiple of 2^30 elements. Every dry run records the
input shape, temporal kernel, output size and the live bytes after each such convolution (``split_convs``), so
the structure can evaluate the split exactly (:func:`vaemem.estimate.split_peak_bytes`); and a dry run with
``unsplit`` set (a modelling device, not a point anyone runs) calls those convolutions whole, which gives the
smooth part the split's peak is compared with.

Temporal windows: HunyuanVideo runs a clip of more than 16 frames in overlapping 17-frame windows
(:attr:`vaemem.models.zoo.ClassInfo.temporal_windows`), each window tiled in space when tiling is on. A dry run
with ``whole_clip`` set (again a modelling device) turns the windows off, as each window's own tile loop runs:
the tiled structure evaluates the windows on top (:func:`vaemem.estimate.window_peak`).
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

from vaemem.errors import VaememError
from vaemem.models.zoo import ModelSpec, get_spec


@dataclass(frozen=True, order=True)
class TraceSpec:
    """One dry-run point. ``overlap`` is the tile overlap fraction (diffusers' default 0.25); ``attention`` is
    ``fused`` (an SDPA kernel, no score matrix) or ``math`` (the score matrix is materialised); ``slicing`` is
    diffusers' ``enable_slicing`` (one batch item at a time); ``conv3d`` is ``native`` or ``decomposed``;
    ``unsplit`` runs the size-triggered split convolutions whole and ``whole_clip`` a clip without its temporal
    windows (see the module docstring)."""

    model: str
    op: str
    dtype: str
    width: int
    height: int
    batch: int = 1
    frames: int = 1
    tile: int | None = None
    overlap: float = 0.25
    attention: str = "fused"
    slicing: bool = False
    conv3d: str = "native"
    unsplit: bool = False
    whole_clip: bool = False

    @property
    def key(self) -> str:
        """Stable identity of the dry run (cache key)."""
        return (f"{self.model}/{self.op}/{self.dtype}/{self.width}x{self.height}/b{self.batch}/f{self.frames}"
                f"/t{self.tile or 0}/o{self.overlap:g}/{self.attention}/{'sliced' if self.slicing else 'whole'}"
                f"/{self.conv3d}" + ("/unsplit" if self.unsplit else "") + ("/whole-clip" if self.whole_clip else ""))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSpec:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class TraceResult:
    """The dry run's answer: ``peak_bytes`` of live tensors the op created, where the peak happened, how much of
    it is the output, the input's bytes (baseline, not in the peak), and ``attention_peak_bytes``, the peak while
    an attention module ran (0 where none did): on the math path the score matrix lives only there.
    ``split_convs``: each distinct call of a size-triggered split convolution, in the order of first calls, as
    (batch, channels, frames, height, width of its input, temporal kernel, output elements, the most live bytes
    right after a call of it). ``conv_inputs``: per convolution weight's shape, (its elements, its input's rank, its
    input channels, its kernel's volume, the most elements torch's fp32 oneDNN rule read of its input, N x C x the
    next two dims, and 1 where a clause that ignores the size held: groups, kernel or N > 1, and the elements of its
    im2col buffer: a sample's input channels x kernel x output positions, 0 for a 1x1 kernel of stride 1 without
    padding, 1 where a call's input or weight was channels-last, which makes oneDNN's copy two, and the fewest
    elements a call read with that call's buffer: torch decides call by call, the most bytes live at a call, its
    output and the output's oneDNN reorder with them, and the most at a call of the fewest elements), the heaviest
    weight first: where oneDNN runs it, it holds a copy of the weight, where it does not, the buffer
    (:func:`vaemem.estimate.conv_transient_bytes`). ``onednn_peak_bytes``: the peak with, while each op runs, what
    it holds on a CPU's oneDNN beyond its output (:func:`vaemem.tracing.counter.onednn_hidden_bytes`; a replayed
    call raises it by its first call's inner one); ``onednn_peak_bytes_no_amx`` the same on a CPU without AMX tiles
    (equal in fp32). ``softmax_mask_bytes``: the largest mask a math-path softmax held, counted in the peaks
    (:func:`vaemem.tracing.counter.safe_softmax_hidden_bytes`; 0 where none ran)."""

    spec: TraceSpec
    peak_bytes: int
    output_bytes: int
    input_bytes: int
    peak_module: str
    attention_peak_bytes: int
    split_convs: tuple[tuple[int, ...], ...]
    conv_inputs: tuple[tuple[int, ...], ...]
    replayed_calls: int
    onednn_peak_bytes: int
    onednn_peak_bytes_no_amx: int
    softmax_mask_bytes: int
    wall_s: float
    torch_version: str
    diffusers_version: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        d["key"] = self.spec.key
        d["split_convs"] = [list(c) for c in self.split_convs]
        d["conv_inputs"] = [list(c) for c in self.conv_inputs]
        return d


def validate_trace(spec: TraceSpec, model: ModelSpec) -> None:
    """Refuse a dry run that cannot happen, with the reason (the same rules as measurement points)."""
    from vaemem.measuring.point import check_geometry, check_variant

    check_geometry(model, spec.op, spec.dtype, spec.width, spec.height, spec.batch, spec.frames, spec.tile)
    check_variant(model, spec.tile, spec.overlap, spec.slicing, spec.attention, spec.conv3d, spec.batch, spec.op)
    if spec.unsplit and not model.info.split_convs:
        raise VaememError(f"{spec.model} has no size-triggered split convolutions to run unsplit")
    if spec.whole_clip and not model.info.temporal_windows:
        raise VaememError(f"{spec.model} has no temporal windows to run the clip without")


def load_config(path: str) -> dict[str, Any]:
    """A diffusers VAE ``config.json`` from a file, as a dict."""
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        raise VaememError(f"cannot read config {path}: {e.strerror}") from None
    except ValueError as e:
        raise VaememError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(cfg, dict) or "_class_name" not in cfg:
        raise VaememError(f"{path}: a diffusers VAE config needs a _class_name")
    return cfg


def _weak(item: Any) -> Any:
    """A callable giving ``item`` back while it lives: a weak reference for a tensor, else the value itself."""
    import torch

    return weakref.ref(item) if isinstance(item, torch.Tensor) else (lambda: item)


class _Replay:
    """Replays calls of one callable whose memory depends on the shapes of what it is given only (see the module
    docstring). Its arguments may be tensors, scalars and lists of them, which the call may rewrite (Wan's feature
    cache and its index): a list's items before the call are part of the signature, and the items the call put
    there are part of what a replay reproduces. A call is replayable when the storages it leaves alive are exactly
    its output (or none, where it returns one of its arguments, as diffusers' in-place ``blend_v``/``blend_h``
    do) and the new tensors it put into the lists, each owning its whole storage. Tuples and str-keyed dicts
    (CogVideoX's convolution cache) may be passed and returned: their tensors count as the output's."""

    def __init__(self, owner: Any, attr: str, counter: Any) -> None:
        self.owner, self.attr, self.counter = owner, attr, counter
        self.original = getattr(owner, attr)
        self.seen: dict[tuple, tuple | None] = {}
        self.replayed = 0
        # the split convolutions' records (vaemem.tracing.trace._split_convs): (calls, events), events one
        # (call index, live bytes right after it) per call; a replay re-applies its first call's, relative to its start
        self.split: tuple[list[list[int]], list[tuple[int, int]]] = ([], [])

    @classmethod
    def _item(cls, v: Any) -> tuple | None:
        import torch

        if isinstance(v, torch.Tensor):
            return ("T", tuple(v.shape), v.stride(), v.dtype, v.device.type, v.untyped_storage().nbytes())
        if v is None or isinstance(v, (bool, int, float, str)):
            return ("V", type(v).__name__, v)
        if isinstance(v, tuple) or (isinstance(v, dict) and all(isinstance(k, str) for k in v)):
            # read-only nests (CogVideoX's convolution cache, a dict of dicts of tensors): what the call leaves
            # alive is checked by storage, so a nest it filled in place is never replayed
            items = [cls._item(x) for x in v] if isinstance(v, tuple) else \
                [(k, cls._item(v[k])) for k in sorted(v)]
            if any((i[1] if isinstance(v, dict) else i) is None for i in items):
                return None
            return ("U" if isinstance(v, tuple) else "D", tuple(items))
        return None  # modules, objects: state may flow through them unseen, never replay

    @classmethod
    def _signature(cls, values: list[Any], names: tuple[str, ...]) -> tuple | None:
        sig: list[Any] = [names]
        for v in values:
            items = [cls._item(i) for i in v] if isinstance(v, list) else [cls._item(v)]
            if any(i is None for i in items):
                return None
            sig.append(("L", tuple(items)) if isinstance(v, list) else items[0])
        return tuple(sig)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        names = tuple(sorted(kwargs))
        values = [*args, *(kwargs[k] for k in names)]
        sig = self._signature(values, names)
        entry = self.seen.get(sig) if sig is not None else None
        c = self.counter
        if entry is not None:
            return self._replay(entry, values)
        # the lists' items before the call, by weak reference: holding them would keep alive what the call frees
        lists = [(i, [_weak(item) for item in v]) for i, v in enumerate(values) if isinstance(v, list)]
        before, peak_before, where_before, attention_before = c.current, c.peak, c.where, c.attention_peak
        onednn_before, no_amx_before = c.onednn_peak, c.onednn_peak_no_amx
        live_before = dict(c._refs)  # storage -> its weak reference (an address may be reused by a new storage)
        # measure this call's own inner peaks
        c.peak, c.attention_peak, c.onednn_peak, c.onednn_peak_no_amx = c.current, -1, c.current, c.current
        first_event, first_conv = len(self.split[1]), len(c.conv_events)
        out = self.original(*args, **kwargs)
        split_after = tuple((i, live - before) for i, live in self.split[1][first_event:])
        convs_after = tuple((ident, n, live - before) for ident, n, live in c.conv_events[first_conv:])
        inner, where = c.peak - before, c.where
        attention = c.attention_peak - before if c.attention_peak >= 0 else -1
        onednn, no_amx = c.onednn_peak - before, c.onednn_peak_no_amx - before
        if c.peak < peak_before:
            c.peak, c.where = peak_before, where_before
        c.attention_peak = max(c.attention_peak, attention_before)
        c.onednn_peak = max(c.onednn_peak, onednn_before)
        c.onednn_peak_no_amx = max(c.onednn_peak_no_amx, no_amx_before)
        if sig is not None and sig not in self.seen:
            entry = self._record(out, values, lists, live_before, c.current - before,
                                 (inner, attention, where, onednn, no_amx))
            self.seen[sig] = None if entry is None else (*entry, split_after, convs_after)
        return out

    def _record(self, out: Any, values: list[Any], lists: list[tuple[int, list]], live_before: dict[int, Any],
                left: int, peaks: tuple) -> tuple | None:
        """What a replay of this call must reproduce, or None where it cannot be replayed exactly."""
        import torch

        same = [i for i, a in enumerate(values) if a is out] if isinstance(out, torch.Tensor) else []
        leaves: list[Any] = []
        template = None if same else _template(out, leaves)  # an output nest: (tensor, CogVideoX's new cache)
        if not same and (template is None or not all(_dense(t) for t in leaves)):
            return None  # a view of a larger storage (a frame dropped from a concatenation): not recreated
        created = [] if same else leaves
        changes = []  # (value index, item index, ("T", shape, stride, dtype, device) or ("V", value))
        for i, items in lists:
            now = values[i]
            if len(now) != len(items):
                return None
            for j, (old, new) in enumerate(zip(items, now)):
                if new is old():
                    continue
                if isinstance(new, torch.Tensor):
                    if not _dense(new):
                        return None
                    created.append(new)
                    changes.append((i, j, ("T", tuple(new.shape), new.stride(), new.dtype, new.device)))
                elif self._item(new) is not None:
                    changes.append((i, j, ("V", new)))
                else:
                    return None
        keys = [t.untyped_storage()._cdata for t in created]
        new = {k for k, ref in self.counter._refs.items() if live_before.get(k) is not ref}
        if len(set(keys)) != len(keys) or new != set(keys):
            return None  # it left alive something else, or shares storages: not shapes alone
        result = ("arg", same[0]) if same else ("new", template)
        return (*peaks, result, tuple(changes), left)

    def _replay(self, entry: tuple, values: list[Any]) -> Any:
        """Raise the counter by the recorded inner peak, then create what the call left alive: the list items it
        replaced are dropped first, so the recreation never holds old and new together (the inner peak covers
        whatever order the call itself took)."""
        import torch

        inner, attention, where, onednn, no_amx, (kind, payload), changes, left, split_after, convs_after = entry
        c = self.counter
        before = c.current
        c.bump(inner, where, attention, onednn, no_amx)
        calls, events = self.split
        for i, live in split_after:  # the records the skipped inner calls would have raised
            calls[i][-1] = max(calls[i][-1], before + live)
            events.append((i, before + live))
        for ident, n, live in convs_after:  # and the live bytes at its convolutions' calls (Wan's later chunks:
            c.conv_live(ident, n, before + live)  # the clip decoded so far is live beside them)
        self.replayed += 1
        for i, j, _ in changes:
            values[i][j] = None
        for i, j, (what, *spec) in changes:  # spec: (shape, stride, dtype, device) of a tensor, or (value,)
            values[i][j] = (torch.empty_strided(spec[0], spec[1], dtype=spec[2], device=spec[3]) if what == "T"
                            else spec[0])
        out = values[payload] if kind == "arg" else _build(payload)
        if c.current - before != left:  # an old item still referenced elsewhere: the call was not shapes alone
            raise VaememError(f"internal error, a vaemem bug: the replay of {self.attr} left {c.current - before} "
                              f"bytes where its first call left {left}; trace(..., replay=False) avoids it")
        return out


def _template(v: Any, leaves: list[Any]) -> tuple | None:
    """How to recreate an output nest of tensors (tuples and str-keyed dicts of tensors, None and scalars),
    appending its tensors to ``leaves``; None for anything else."""
    import torch

    if isinstance(v, torch.Tensor):
        leaves.append(v)
        return ("T", tuple(v.shape), v.stride(), v.dtype, v.device)
    if v is None or isinstance(v, (bool, int, float, str)):
        return ("V", v)
    if isinstance(v, tuple) or (isinstance(v, dict) and all(isinstance(k, str) for k in v)):
        pairs = list(enumerate(v)) if isinstance(v, tuple) else list(v.items())  # a dict keeps its order
        parts = [(k, _template(x, leaves)) for k, x in pairs]
        if any(p is None for _, p in parts):
            return None
        return ("U" if isinstance(v, tuple) else "D", tuple(parts))
    return None


def _build(t: tuple) -> Any:
    """The output nest a :func:`_template` describes, with fresh tensors."""
    import torch

    if t[0] == "T":
        return torch.empty_strided(t[1], t[2], dtype=t[3], device=t[4])
    if t[0] == "V":
        return t[1]
    parts = [(k, _build(p)) for k, p in t[1]]
    return tuple(x for _, x in parts) if t[0] == "U" else dict(parts)


def _dense(t: Any) -> bool:
    """``t`` owns its whole storage (no view of a larger one), whatever its strides."""
    return t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()


def _mask_without_loop(n_frame: int, n_hw: int, dtype: Any, device: Any, batch_size: int | None = None) -> Any:
    """HunyuanVideo 1.5's ``prepare_causal_attention_mask`` as allocated: one (tokens x tokens) tensor (its loop
    only writes into it)."""
    import torch

    seq_len = n_frame * n_hw
    mask = torch.full((seq_len, seq_len), float("-inf"), dtype=dtype, device=device)
    return mask if batch_size is None else mask.unsqueeze(0).expand(batch_size, -1, -1)


_MASK_BUILDERS = {"HunyuanVideo15AttnBlock": "prepare_causal_attention_mask"}  # class -> loop-built mask method


@contextmanager
def _fast_masks(model: Any) -> Iterator[None]:
    """Within the block, the classes of :data:`_MASK_BUILDERS` in ``model`` build their masks without the loop."""
    patched = {}
    for m in model.modules():
        cls = type(m)
        attr = _MASK_BUILDERS.get(cls.__name__)
        if attr and cls not in patched:
            patched[cls] = cls.__dict__[attr]
            setattr(cls, attr, staticmethod(_mask_without_loop))
    try:
        yield
    finally:
        for cls, original in patched.items():
            setattr(cls, _MASK_BUILDERS[cls.__name__], original)


@contextmanager
def _attention_as_on_cpu() -> Iterator[None]:
    """Within the block, SDPA on meta tensors takes the kernel the CPU would take (on the meta device it always takes
    the math path, with its score matrix): the CPU's own choice function is asked (it reads shapes, strides, dtypes
    and the backends ``sdpa_kernel`` allows, never data) and, where it picks flash attention, that kernel's meta
    function runs, after the boolean-mask conversion SDPA does first (as ``aten::scaled_dot_product_attention``)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    original = F.scaled_dot_product_attention
    choose = torch.ops.aten._fused_sdp_choice.default
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)

    def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
        if query.device.type == "meta":
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(attn_mask.logical_not(),
                                                                                       float("-inf"))
            # (the flash meta function skips SDPA's input checks: a mask of another float dtype than the query
            # runs here where the CPU refuses it; no diffusers VAE passes one)
            if choose.redispatch(cpu, query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                 enable_gqa=enable_gqa) == SDPBackend.FLASH_ATTENTION.value:
                return flash(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


@contextmanager
def _group_norm_as_on_cpu() -> Iterator[None]:
    """Within the block, a group norm of a channels-last meta tensor runs as on the CPU: on its input as it is,
    its output channels-last. On the meta device ``aten.group_norm`` first copies such an input to contiguous (a
    clone the CPU never makes, counted), and its output is contiguous, so the convolutions after it lost the format
    the CPU keeps: HunyuanImage-2.1's decoder runs every convolution after its mid-block attention on a
    channels-last input, each holding two copies of its weight (288 MiB for its 144 MiB one at 256 px, measured call
    by call), where the dry run saw one."""
    import torch
    import torch.nn.functional as F

    from vaemem.tracing.counter import _is_channels_last, channels_last_strides

    original = F.group_norm

    def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
        if input.device.type != "meta" or not _is_channels_last(input):
            return original(input, num_groups, weight, bias, eps)
        n, c = input.shape[:2]
        out = torch.ops.aten.native_group_norm(input, weight, bias, n, c, input.numel() // (n * c), num_groups,
                                               eps)[0]
        return out.as_strided(out.shape, channels_last_strides(tuple(out.shape)))

    F.group_norm = group_norm
    try:
        yield
    finally:
        F.group_norm = original


SPLIT_CONVS = ("CogVideoXSafeConv3d",)  # classes whose forward splits an input of more than 2^30 elements


@contextmanager
def _split_convs(model: Any, unsplit: bool, counter: Any, calls: list[list[int]],
                 events: list[tuple[int, int]]) -> Iterator[None]:
    """Within the block, the :data:`SPLIT_CONVS` classes in ``model`` record each distinct call in ``calls`` (see
    :attr:`TraceResult.split_convs`; the live bytes are the most ``counter`` saw right after any call of that
    signature) and each call in ``events``, for a replay to re-apply, and, with ``unsplit``, convolve their input
    whole."""
    from torch import nn

    patched = {}
    index: dict[tuple[int, ...], int] = {}
    for m in model.modules():
        cls = type(m)
        if cls.__name__ in SPLIT_CONVS and cls not in patched:
            patched[cls] = cls.__dict__["forward"]

            def forward(self: Any, x: Any, _split: Any = patched[cls]) -> Any:
                out = nn.Conv3d.forward(self, x) if unsplit else _split(self, x)
                sig = (*(int(d) for d in x.shape), int(self.kernel_size[0]), int(out.numel()))
                if sig not in index:
                    index[sig] = len(calls)
                    calls.append([*sig, 0])
                call = calls[index[sig]]
                call[-1] = max(call[-1], int(counter.current))
                events.append((index[sig], int(counter.current)))
                return out

            cls.forward = forward
    try:
        yield
    finally:
        for cls, original in patched.items():
            cls.forward = original


@contextmanager
def _replaying(model: Any, counter: Any) -> Iterator[list[_Replay]]:
    """Replay the decoder and encoder (per tile, per chunk of a clip, per item of a sliced batch) and the blend
    helpers of a tiled op."""
    replays = []
    for name in ("decoder", "encoder"):
        sub = getattr(model, name, None)
        if sub is not None and any(True for _ in sub.parameters()):
            replays.append(_Replay(sub, "forward", counter))
    for name in ("blend_v", "blend_h"):
        if callable(getattr(model, name, None)):
            replays.append(_Replay(model, name, counter))
    for r in replays:
        setattr(r.owner, r.attr, r)
    try:
        yield replays
    finally:
        for r in replays:
            del r.owner.__dict__[r.attr]


def check(spec: TraceSpec, config: dict[str, Any] | None = None) -> None:
    """Refuse ``spec`` (of a zoo model, or of ``config``) before anything heavy is imported: the rules of
    :func:`validate_trace`, which the dry run applies again."""
    validate_trace(spec, _model_spec(spec, config))


def _model_spec(spec: TraceSpec, config: dict[str, Any] | None) -> ModelSpec:
    from vaemem.models.zoo import spec_from_config

    return spec_from_config(spec.model, config) if config is not None else get_spec(spec.model)


_FAKE_MODELS: dict[tuple[str, str, str], Any] = {}  # (zoo model, op, dtype) -> its model on the meta device


def _fake_model(mspec: ModelSpec, spec: TraceSpec, reuse: bool) -> Any:
    """The model of ``spec`` on the meta device. A zoo model's is built once per process and reused by the next
    dry runs of the same op and dtype (the last one kept): building it is half or more of a small dry run, and a
    dry run changes nothing a later one sees (its tiling and slicing are set anew, every patch is undone; the zoo
    grid re-traced this way equals the cache of fresh builds to the byte)."""
    from vaemem.models.build import build_model

    key = (spec.model, spec.op, spec.dtype)
    if reuse and key in _FAKE_MODELS:
        return _FAKE_MODELS[key]
    model = build_model(mspec, spec.op, "meta", spec.dtype, seed=None)
    if reuse:
        _FAKE_MODELS.clear()
        _FAKE_MODELS[key] = model
    return model


def trace(spec: TraceSpec, config: dict[str, Any] | None = None, *, fake: bool = True,
          replay: bool = True) -> TraceResult:
    """Dry-run ``spec`` (a zoo model, or any supported diffusers VAE ``config`` under the name ``spec.model``).

    ``fake=False`` runs the same accounting on real CPU tensors with seeded weights: the known answer the tests
    compare the dry run against (affordable for tiny models only). ``replay=False`` turns replay off (of tiles,
    of Wan's chunks and of the items of a sliced batch). A ``config`` diffusers cannot build or run raises
    VaememError with diffusers' reason; so does a zoo model's point that diffusers cannot run (a RuntimeError or
    ValueError of the op: CogVideoX's decode at 1920x1088 x 49 frames, a convolution's padded input smaller than
    its kernel), where any other error of a zoo model is a bug and propagates.
    """
    try:
        return _trace(spec, config, fake, replay)
    except VaememError:
        raise
    except Exception as e:  # noqa: BLE001  (diffusers' own checks raise what they like)
        if config is None and not isinstance(e, (RuntimeError, ValueError)):
            raise
        reason = (str(e).strip().splitlines() or [""])[0][:300]
        what = f"this {config.get('_class_name')} config" if config is not None else spec.model
        raise VaememError(f"diffusers cannot {'build or run' if fake and config is not None else 'run'} {spec.op} "
                          f"of {what} at {spec.width}x{spec.height}"
                          + (f" x {spec.frames} frames" if spec.frames > 1 else "")
                          + f": {type(e).__name__}: {reason}") from None


def _trace(spec: TraceSpec, config: dict[str, Any] | None, fake: bool, replay: bool) -> TraceResult:
    """:func:`trace` itself."""
    import diffusers
    import torch

    from vaemem.models.build import DTYPES, build_model, configure_tiling, input_shape, run_op
    from vaemem.tracing.counter import LiveBytes

    mspec = _model_spec(spec, config)
    validate_trace(spec, mspec)
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if fake:
            model = _fake_model(mspec, spec, config is None)
        else:
            model = build_model(mspec, spec.op, "cpu", spec.dtype, seed=0)
        configure_tiling(model, mspec, spec.tile, spec.overlap)
        model.use_slicing = spec.slicing  # set either way: a reused model keeps what the last dry run set
        if mspec.info.temporal_windows:
            model.use_framewise_decoding = model.use_framewise_encoding = not spec.whole_clip
        shape = input_shape(mspec, spec.op, spec.width, spec.height, spec.batch, spec.frames)
        dtype = DTYPES[spec.dtype]
        x = torch.zeros(shape, dtype=dtype, device="meta") if fake else torch.randn(shape).to(dtype)
        if spec.conv3d == "decomposed":
            from vaemem.conv3d.patch import decomposed_conv3d

            stack.enter_context(decomposed_conv3d(model))
        if spec.attention == "math":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        names = {id(m): n or type(model).__name__ for n, m in model.named_modules()}
        counter = LiveBytes(names, cpu_strides=x.device.type == "meta")
        counter.exclude([*model.parameters(), *model.buffers(), x])
        stack.enter_context(torch.no_grad())
        replays = stack.enter_context(_replaying(model, counter)) if replay else []
        if fake:
            stack.enter_context(_fast_masks(model))
            stack.enter_context(_attention_as_on_cpu())
            stack.enter_context(_group_norm_as_on_cpu())
        split_calls: list[list[int]] = []
        events: list[tuple[int, int]] = []
        for r in replays:
            r.split = (split_calls, events)
        stack.enter_context(_split_convs(model, spec.unsplit, counter, split_calls, events))
        with counter:
            out = run_op(model, spec.op, x)
            output_bytes = out.untyped_storage().nbytes()
        peak, where = counter.peak, counter.where
        replayed = sum(r.replayed for r in replays)
        input_bytes = x.untyped_storage().nbytes()
        del out
    return TraceResult(spec, int(peak), int(output_bytes), int(input_bytes), where, int(counter.attention_peak),
                       tuple(map(tuple, split_calls)),
                       tuple(sorted(((*ident, *rec) for ident, rec in counter.convs.items()), reverse=True)),
                       replayed, int(counter.onednn_peak), int(counter.onednn_peak_no_amx),
                       int(counter.softmax_mask), round(time.perf_counter() - t0, 3), torch.__version__,
                       diffusers.__version__)


def _ignore_interrupts() -> None:
    """A dry-run worker's start: SIGINT ignored (see :func:`trace_many`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def trace_many(specs: list[TraceSpec], config: dict[str, Any] | None = None, jobs: int = 1) -> Iterator[TraceResult]:
    """Dry-run every spec, yielding results in ``specs`` order; ``jobs`` > 1 runs them in that many spawned
    processes (a dry run is one core's Python; the results are exact, so the order of completion changes
    nothing). A failing dry run raises here, after the pool is shut down."""
    if jobs <= 1 or len(specs) <= 1:
        for s in specs:
            yield trace(s, config)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # the workers ignore Ctrl-C, which the terminal sends to the whole group: the parent stops and shuts them down
    # (each printed a traceback of its own under the parent's one line)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_ignore_interrupts) as pool:
        futures = [pool.submit(trace, s, config) for s in specs]
        try:
            for f in futures:
                yield f.result()
        finally:
            for f in futures:
                f.cancel()

