"""What a convolution holds beyond the live tensors on oneDNN platforms: the dry run's record of each convolution's
input (torch's ``use_mkldnn`` rule) and im2col buffer, the structure's laws of them, and their pricing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import as_schema
from torch import nn

from vaemem import estimate as est
from vaemem.tracing.counter import LiveBytes
from vaemem.models.zoo import get_spec
from vaemem.tracing.structure import _channels_last_from, _crossing, batch_grid, derive, grid
from vaemem.tracing.trace import TraceSpec, trace


def _record(conv: nn.Module, x: torch.Tensor) -> dict:
    counter = LiveBytes()
    counter.exclude([*conv.parameters(), x])
    with torch.no_grad(), counter:
        conv(x)
    return counter.convs


def test_the_counter_reads_each_convolution_as_torchs_rule_does():
    """Known answers: the rule reads N x C x the next two dims (a 3-D input's width is not among them), the
    size-free clauses are groups > 1, a kernel above 3 in both inner dims and N > 1, and im2col holds input
    channels x kernel x output positions (none for a 1x1 kernel)."""
    c3 = nn.Conv3d(8, 4, 3, padding=1)
    one = [8 * 5 * 6, 0, 8 * 27 * 5 * 6 * 7]
    live = 2 * 4 * 5 * 6 * 7 * 4  # its fp32 output and the output's reorder (the input is the baseline's)
    assert _record(c3, torch.zeros(1, 8, 5, 6, 7)) == {(4 * 8 * 27, 5, 8, 27): [*one, 0, *one[::2], live, live]}
    c2 = nn.Conv2d(8, 4, 3)  # no padding: 4 x 5 output positions
    assert _record(c2, torch.zeros(1, 8, 6, 7)) == {(4 * 8 * 9, 4, 8, 9): [8 * 6 * 7, 0, 8 * 9 * 4 * 5, 0, 8 * 6 * 7,
                                                                            8 * 9 * 4 * 5, 640, 640]}
    cl = torch.zeros(1, 8, 5, 6, 7).contiguous(memory_format=torch.channels_last_3d)
    assert _record(c3, cl)[(4 * 8 * 27, 5, 8, 27)][3] == 1  # a channels-last input: oneDNN's copy is two
    cl2 = torch.zeros(1, 8, 6, 7).contiguous(memory_format=torch.channels_last)
    assert _record(c2, cl2)[(4 * 8 * 9, 4, 8, 9)][3] == 1  # 2-D as well
    # where oneDNN runs it (the rule reads 8 x 50 x 60 = 24000 elements, above 20480), a channels-last input leaves
    # no reorder of the output live at the call (schema 24); on torch's own path (240 elements) the bound of two
    # outputs stays, as for a contiguous input
    big = torch.zeros(1, 8, 50, 60, 7)
    out = 4 * 50 * 60 * 7 * 4
    assert _record(c3, big)[(4 * 8 * 27, 5, 8, 27)][6:] == [2 * out, 2 * out]
    assert _record(c3, big.contiguous(memory_format=torch.channels_last_3d))[(4 * 8 * 27, 5, 8, 27)][6:] == [out, out]
    assert _record(c3, cl)[(4 * 8 * 27, 5, 8, 27)][6:] == [live, live]
    assert _record(c2, cl2)[(4 * 8 * 9, 4, 8, 9)][6:] == [640, 640]
    assert _record(nn.Conv2d(8, 4, 3, groups=2), torch.zeros(1, 8, 6, 7))[(4 * 4 * 9, 4, 4, 9)][1] == 1
    assert _record(nn.Conv2d(8, 4, 5), torch.zeros(1, 8, 6, 7))[(4 * 8 * 25, 4, 8, 25)][1] == 1
    assert _record(c2, torch.zeros(2, 8, 6, 7))[(4 * 8 * 9, 4, 8, 9)][:2] == [2 * 8 * 6 * 7, 1]
    assert _record(nn.Conv2d(8, 4, 1), torch.zeros(1, 8, 6, 7))[(32, 4, 8, 1)][2] == 0
    # a padded or strided 1x1 kernel takes columns (torch's requires_columns): 8 x 8 x 9 and 8 x 3 x 4 positions
    assert _record(nn.Conv2d(8, 4, 1, padding=1), torch.zeros(1, 8, 6, 7))[(32, 4, 8, 1)][2] == 8 * 8 * 9
    assert _record(nn.Conv2d(8, 4, 1, stride=2), torch.zeros(1, 8, 6, 7))[(32, 4, 8, 1)][2] == 8 * 3 * 4
    assert _record(nn.Conv3d(8, 4, 1, padding=1), torch.zeros(1, 8, 2, 6, 7))[(32, 5, 8, 1)][2] == 8 * 4 * 8 * 9


def test_two_convolutions_of_one_size_are_two_records():
    """A 16->8 and an 8->16 convolution of 3x3 kernels hold 1152 weights each, and their inputs grow by different
    laws (16 and 8 elements per row): one record each, keyed by the weight's shape, not merged into the larger
    (LTX-2's decoder: merged, its 1024->1024 convolution was put on oneDNN at 160x96 x 9 frames by the law of its
    512->2048 one)."""
    a, b = nn.Conv2d(16, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
    counter = LiveBytes()
    x, y = torch.zeros(1, 16, 6, 7), torch.zeros(1, 8, 12, 14)
    counter.exclude([*a.parameters(), *b.parameters(), x, y])
    with torch.no_grad(), counter:
        a(x), b(y)
    # live at each call: the first's output and reorder; the second's with the first's output still held
    first, second = 8 * 6 * 7 * 4, 16 * 12 * 14 * 4
    assert counter.convs == {(1152, 4, 16, 9): [16 * 6 * 7, 0, 16 * 9 * 6 * 7, 0, 16 * 6 * 7, 16 * 9 * 6 * 7,
                                                2 * first, 2 * first],
                             (1152, 4, 8, 9): [8 * 12 * 14, 0, 8 * 9 * 12 * 14, 0, 8 * 12 * 14, 8 * 9 * 12 * 14,
                                               first + 2 * second, first + 2 * second]}


def test_the_counter_keeps_the_most_bytes_live_at_a_call_and_at_its_smallest():
    """One weight called on a small input, then a larger one beside a held tensor, then the small again beside
    it: the most live bytes are the larger call's, the smallest call's the third call's (its n equals the
    fewest, and it saw more than the first)."""
    conv = nn.Conv2d(4, 4, 3, padding=1)
    small, big = torch.zeros(1, 4, 4, 4), torch.zeros(1, 4, 8, 8)
    counter = LiveBytes()
    counter.exclude([*conv.parameters(), small, big])
    with torch.no_grad(), counter:
        conv(small)
        held = conv(big)
        conv(small)
    out_small, out_big = 4 * 4 * 4 * 4, 4 * 8 * 8 * 4
    rec = counter.convs[(144, 4, 4, 9)]
    assert rec[6] == 2 * out_big and rec[7] == out_big + 2 * out_small
    assert held.shape == (1, 4, 8, 8)


def test_the_dry_run_records_what_real_tensors_record():
    for name, op, frames in (("tiny-wan", "decode", 5), ("tiny-kl", "encode", 1)):
        spec = TraceSpec(name, op, "fp32", 96, 64, frames=frames)
        assert trace(spec).conv_inputs == trace(spec, fake=False).conv_inputs
        assert trace(spec).conv_inputs  # every convolution, heaviest weight first
        assert list(trace(spec).conv_inputs) == sorted(trace(spec).conv_inputs, reverse=True)


def test_a_replayed_chunk_records_the_live_bytes_at_its_convolutions_calls():
    """Wan's later chunks are replayed from their first call's record (the decoded clip grows beside them): the
    live bytes at their convolutions' calls are the same as with every chunk run."""
    for frames in (13, 17):
        spec = TraceSpec("tiny-wan", "decode", "fp32", 96, 64, frames=frames)
        replayed = trace(spec)
        assert replayed.replayed_calls >= 1
        assert replayed.conv_inputs == trace(spec, replay=False).conv_inputs


def _call_truth(result: TraceSpec) -> float:
    """The most bytes a convolution's call holds by a dry run's own record: the live bytes at its largest call and
    its copy or buffer, or at its smallest call and that call's buffer where that one alone stays on im2col."""
    top = 0.0
    for weight, _, _, _, elements, always, cols, last, fewest, cols_fewest, live, live_fewest in \
            trace(result).conv_inputs:
        if always or elements > est.ONEDNN_MIN_ELEMENTS:
            top = max(top, live + 4 * weight * (2 if last else 1))
            if not always and fewest <= est.ONEDNN_MIN_ELEMENTS:
                top = max(top, live_fewest + 4 * cols_fewest)
        else:
            top = max(top, live + 4 * cols)
    return top


def _truth(result: TraceSpec) -> tuple[int, int]:
    """(heaviest weight copied, largest im2col buffer) by the rule, from a dry run's own record."""
    copied, columns = 0, 0
    for weight, _, _, _, elements, always, cols, last, fewest, cols_fewest, *_ in trace(result).conv_inputs:
        if always or elements > est.ONEDNN_MIN_ELEMENTS:
            copied = max(copied, weight * (2 if last else 1))
            if not always and fewest <= est.ONEDNN_MIN_ELEMENTS:  # its smallest call stays on im2col
                columns = max(columns, cols_fewest)
        else:
            columns = max(columns, cols)
    return copied, columns


@pytest.mark.parametrize("name,op,sizes", [
    ("tiny-wan", "decode", [(320, 192, 9), (448, 256, 5), (160, 96, 13), (512, 512, 21)]),
    ("tiny-kl", "decode", [(640, 384, 1), (256, 512, 1), (1024, 768, 1)]),
    ("tiny-mochi", "encode", [(320, 192, 7), (256, 160, 13)]),
    ("tiny-ltx-2", "decode", [(160, 96, 9), (320, 192, 17), (256, 160, 9)])])  # two weights of each of two sizes
def test_the_structures_laws_reproduce_fresh_dry_runs_off_the_grid(name, op, sizes):
    """Derived from the grid's square sizes, the laws give at other sizes, oblong ones and between knots, the
    same copied weight as the dry run there and an im2col buffer no smaller (exact in 2-D and 3-D alike where the
    padding is the convolution's own)."""
    entries = [{"spec": r.spec.to_dict(), "peak_bytes": r.peak_bytes, "output_bytes": r.output_bytes,
                "conv_inputs": [list(c) for c in r.conv_inputs]}
               for r in map(trace, grid(name, op, "fp32", False))]
    s = derive(entries, name, op, "fp32", False)
    assert s is not None and "conv_transients" in s
    for w, h, f in sizes:
        copied, columns = est.conv_transient_elements(s, w, h, 1, f)
        want_copied, want_columns = _truth(TraceSpec(name, op, "fp32", w, h, frames=f))
        assert copied == want_copied, (w, h, f)
        assert want_columns <= columns <= want_columns * 1.01 + 64, (w, h, f)
        # the call peak: the live bytes between grid sizes (linear in pixels) within 1 % of the dry run's
        call = est.conv_call_peak_bytes(s, w, h, f)
        want_call = _call_truth(TraceSpec(name, op, "fp32", w, h, frames=f))
        assert abs(call - want_call) <= 0.01 * want_call, (w, h, f, call, want_call)


def _structure(rule: list, cols: list, knots=(1, 9), last: list | None = None, rule_min: list | None = None,
               cols_min: list | None = None, live: list | None = None) -> dict:
    zero, one = [[0, 0, 0]] * len(knots), [[1.0, 0, 0]] * len(knots)
    lives = [] if live is None else [live, live]
    return {"knots": list(knots), "conv_transients": [
        [100_000, 5, rule, cols, last or [None] * len(knots), rule_min or rule, cols_min or cols, *lives],
        [10, 4, zero, one, [None] * len(knots), zero, one, *([[[]] * len(knots)] * 2 if lives else [])]]}


def test_the_call_peak_known_answers():
    """The 100,000-weight convolution of :func:`test_conv_transient_bytes_known_answers` with 2 bytes live per
    pixel at its calls, and the 10-weight one with none: below its threshold the larger of the first's live bytes
    and the second's buffer (1 element per pixel), above it its live bytes plus its copy; no live laws: None."""
    two = [[0, 0], [10**6, 2 * 10**6]]  # [pixels, bytes]: 2 bytes per pixel
    s = _structure([[100.0, 0, 0], [200.0, 0, 0]], [[0, 0, 0], [0, 0, 0]], live=[two, two])
    assert est.conv_call_peak_bytes(s, 50, 204, 1) == 4 * 50 * 204  # the buffer, 4 bytes per pixel, above 2 live
    assert est.conv_call_peak_bytes(s, 50, 205, 1) == 2 * 50 * 205 + 400_000
    assert est.conv_call_peak_bytes(s, 8, 103, 9) == 2 * 8 * 103 + 400_000
    assert est.conv_call_peak_bytes(_structure([[100.0, 0, 0]] * 2, [[0, 0, 0]] * 2), 50, 205, 1) is None
    # in half precision every call copies its weight, at 2 bytes, and the live bytes are half the fp32 ones: below
    # the fp32 threshold the copy too, where fp32 held the buffer
    assert est.conv_call_peak_bytes(s, 50, 204, 1, "bf16") == 50 * 204 + 200_000
    assert est.conv_call_peak_bytes(s, 50, 205, 1, "fp16") == 50 * 205 + 200_000
    # where the lines are in it: untiled, of one sample, on a weight-copying backend
    assert est.call_peak(s, "fp32", "onednn", False, 1, 50, 205, 1) == 2 * 50 * 205 + 400_000
    assert est.call_peak(s, "bf16", "onednn", False, 1, 50, 204, 1) == 50 * 204 + 200_000
    # a half-precision batch (schema 21): its live bytes twice one sample's, the copy once; doubled where the
    # elements the rule reads, twice one sample's (20,400 at 50x204), pass the channels-last threshold
    assert est.call_peak(s, "bf16", "onednn", False, 2, 50, 204, 1) == 2 * 50 * 204 + 200_000
    last = _structure([[100.0, 0, 0], [200.0, 0, 0]], [[0, 0, 0], [0, 0, 0]], last=[30_600, 30_600],
                      live=[two, two])
    assert est.conv_call_peak_bytes(last, 50, 204, 1, "bf16") == 50 * 204 + 200_000
    assert est.conv_call_peak_bytes(last, 50, 204, 1, "bf16", batch=2) == 2 * 50 * 204 + 400_000
    assert est.call_dry_runs(s, "bf16", "onednn", False, 2, 50, 204, 1, 10.0, 5.0) == \
        (2 * 50 * 204 + 200_000, 50 * 204 + 200_000, 2 * 50 * 204 + 200_000)
    # not with AMX, whose calls' buffers were never measured: the copy stays added there; nor a batch in fp32 (it
    # moves every convolution to oneDNN), nor a sliced batch or a file of schema 20 (``batched``)
    for dtype, backend, tiled, batch in (("bf16", "onednn-amx", False, 1), ("bf16", "cudnn", False, 1),
                                         ("fp32", "cudnn", False, 1),
                                         ("fp32", "onednn", True, 1), ("bf16", "onednn", True, 1),
                                         ("fp32", "onednn", False, 2), ("bf16", "onednn-amx", False, 2)):
        assert est.call_peak(s, dtype, backend, tiled, batch, 50, 205, 1) is None
    assert est.call_peak(s, "bf16", "onednn", False, 2, 50, 205, 1, batched=False) is None


def _half_call_truth(spec: TraceSpec) -> float:
    """The most bytes a convolution's call holds by a half-precision dry run's own record: on oneDNN at any size,
    the live bytes at its largest call and its weight's copy at 2 bytes (two where its input is channels-last)."""
    return max(live + 2 * weight * (2 if last else 1)
               for weight, _, _, _, _, _, _, last, _, _, live, _ in trace(spec).conv_inputs)


@pytest.mark.parametrize("name,op,w,h,f", [
    ("tiny-wan", "decode", 320, 192, 9), ("tiny-ltx-2", "decode", 256, 160, 9), ("tiny-mochi", "encode", 256, 160, 13),
    ("tiny-kl", "decode", 640, 384, 1), ("tiny-hunyuanimage", "encode", 384, 256, 1)])
def test_the_half_precision_call_peak_from_the_fp32_structure_equals_a_half_precision_dry_run(name, op, w, h, f):
    """The fp32 structure's laws, at half the live bytes and 2-byte copies on every call, give a half-precision
    dry run's own call peak within 1 % at sizes off the grid (its tensors are the fp32 run's in half the bytes, and
    a call's output and its reorder are counted by the fp32 rule in both)."""
    entries = [{"spec": r.spec.to_dict(), "peak_bytes": r.peak_bytes, "output_bytes": r.output_bytes,
                "conv_inputs": [list(c) for c in r.conv_inputs]}
               for r in map(trace, grid(name, op, "fp32", False))]
    s = derive(entries, name, op, "fp32", False)
    call = est.conv_call_peak_bytes(s, w, h, f, "bf16")
    want = _half_call_truth(TraceSpec(name, op, "bf16", w, h, frames=f))
    assert abs(call - want) <= 0.01 * want, (call, want)


@pytest.mark.parametrize("name,op,w,h,f", [
    ("ltx-2", "decode", 320, 192, 9),  # its 216 MiB copy where few tensors are live
    ("hunyuanvideo-1.5", "decode", 256, 160, 9),  # two copies: a channels-last input
    ("wan22", "decode", 320, 192, 9)])
def test_the_packaged_half_precision_call_peaks_reproduce_fresh_dry_runs(name, op, w, h, f):
    """The packaged fp32 structures price a bf16 request's call peak within 1 % of a fresh bf16 dry run's record."""
    s = est.load(None)["structures"][est.structure_key(name, op, "fp32", False)]
    call = est.conv_call_peak_bytes(s, w, h, f, "bf16")
    want = _half_call_truth(TraceSpec(name, op, "bf16", w, h, frames=f))
    assert abs(call - want) <= 0.01 * want, (call, want)


@pytest.mark.parametrize("name,op,w,h,f,over", [
    ("tiny-ltx-2", "encode", 128, 128, 1, False), ("tiny-wan", "decode", 160, 96, 9, False),
    ("tiny-kl", "decode", 256, 256, 1, True)])
def test_a_half_precision_batch_call_peak_from_the_fp32_structure_equals_a_batch_dry_run(name, op, w, h, f, over):
    """Schema 21: a half-precision batch of 2's call peak, the fp32 structure's live bytes at each call twice one
    sample's (halved) and each weight's copy once, is within 1 % of a half-precision dry run of that batch, where
    the batch's convolutions take their input as one sample does. Where a 2-D batch runs channels-last (tiny-kl's,
    as SD1.5's), the batch holds no output reorder at its calls (schema 24) that one sample's record holds: from
    the batch's own dry runs (schema 26: the structure's tenth field, from :func:`batch_grid`) within 1 % as well;
    from one sample's record, above the batch's dry run by less than that reorder (a bound above, as in fp32)."""
    def entries(specs):
        return [{"spec": r.spec.to_dict(), "peak_bytes": r.peak_bytes, "output_bytes": r.output_bytes,
                 "conv_inputs": [list(c) for c in r.conv_inputs], "onednn_peak_bytes": r.onednn_peak_bytes}
                for r in map(trace, specs)]

    plain = entries(grid(name, op, "fp32", False))
    s = derive(plain + entries(batch_grid(name, op, "fp32")), name, op, "fp32", False)
    assert all(len(c) == (9 if get_spec(name).is_video else 10) for c in s["conv_transients"])
    spec = TraceSpec(name, op, "bf16", w, h, batch=2, frames=f)
    want = _half_call_truth(spec)
    call = est.conv_call_peak_bytes(s, w, h, f, "bf16", batch=2)
    assert abs(call - want) <= 0.01 * want, (call, want)
    if not over:
        return
    # a batch of three from the batch of two's calls, x 3 / 2: within 1 % of its own dry run as well
    three = _half_call_truth(TraceSpec(name, op, "bf16", w, h, batch=3, frames=f))
    assert abs(est.conv_call_peak_bytes(s, w, h, f, "bf16", batch=3) - three) <= 0.01 * three
    # below the batch's dry runs (from 128 px, the calibration domain): its samples' record, a bound above, where
    # the batch record's end segment extended down fell under
    small, at = TraceSpec(name, op, "bf16", 96, 96, batch=2, frames=f), est.conv_call_peak_bytes
    assert _half_call_truth(small) <= at(s, 96, 96, f, "bf16", batch=2) == at(
        {**s, "conv_transients": [c[:9] for c in s["conv_transients"]]}, 96, 96, f, "bf16", batch=2)
    s = derive(plain, name, op, "fp32", False)  # without the batch's dry runs: one sample's record, twice
    assert all(len(c) == 9 for c in s["conv_transients"])
    call = est.conv_call_peak_bytes(s, w, h, f, "bf16", batch=2)
    from vaemem.models.build import build_model, input_shape, run_op

    outputs: list[int] = []  # each convolution output's bytes, on real tensors of the batch
    model = build_model(name, op, "cpu", "bf16")
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(lambda _m, _i, o: outputs.append(o.numel() * o.element_size()))
    with torch.no_grad():
        run_op(model, op, torch.zeros(input_shape(get_spec(name), op, w, h, 2, f), dtype=torch.bfloat16))
    assert any(c[7] for c in trace(spec).conv_inputs)
    assert want < call <= want + max(outputs), (call, want, max(outputs))  # its reorder, at the most


def test_conv_transient_bytes_known_answers():
    """A 3-D convolution of 100,000 weights whose rule reads 100 x height + 0 (one frame) to 200 x height (nine):
    oneDNN above 20480, so from a height of 205 at one frame, 103 at nine, 137 at five (between the knots), and
    always with two samples; a 2-D one of 10 weights, never on oneDNN, holds 1 element per pixel of im2col."""
    s = _structure([[100.0, 0, 0], [200.0, 0, 0]], [[0, 0, 0], [0, 0, 0]])
    m = {"largest_conv_parameters": {"decode": 100_000}}
    at = lambda w, h, b=1, f=1, dtype="fp32", backend="onednn", tiled=False: est.conv_transient_bytes(  # noqa: E731
        m, s, "decode", dtype, backend, w, h, b, f, tiled)
    assert at(50, 204) == 50 * 204 * 4 and at(50, 205) == 400_000  # the buffer, then the copy (the larger)
    assert at(8, 102, f=9) == 8 * 102 * 4 and at(8, 103, f=9) == 400_000
    assert at(8, 136, f=5) == 8 * 136 * 4 and at(8, 137, f=5) == 400_000
    assert at(8, 8, b=2) == 400_000  # N > 1: every convolution on oneDNN, the heaviest copied
    assert at(8, 8, dtype="bf16") == 200_000 and at(8, 8, tiled=True) == 400_000  # the largest: no rule read
    assert at(8, 8, backend="aten") == 0
    always = _structure([None, [1.0, 0, 0]], [[0, 0, 0], [0, 0, 0]])
    assert est.conv_transient_elements(always, 8, 8, 1, 5) == (100_000, 8 * 8)  # a knot always copying: its segment too
    assert est.conv_transient_elements(always, 8, 8, 1, 9) == (0, 8 * 8)
    # channels-last inputs at nine frames above 25600 elements (a height of 128): two copies there, one below
    last = _structure([[100.0, 0, 0], [200.0, 0, 0]], [[0, 0, 0], [0, 0, 0]], last=[None, 25600])
    assert est.conv_transient_elements(last, 8, 128, 1, 9)[0] == 100_000
    assert est.conv_transient_elements(last, 8, 129, 1, 9)[0] == 200_000
    # a batch: every convolution on oneDNN, its rule reading twice the elements (2 x 200 x 64 = 25,600: one copy)
    assert est.conv_transient_elements(last, 8, 64, 2, 9) == (100_000, 0.0)
    assert est.conv_transient_elements(last, 8, 65, 2, 9) == (200_000, 0.0)
    assert est.conv_transient_elements(last, 8, 300, 1, 1)[0] == 100_000  # one frame never saw it
    assert est.conv_transient_elements(last, 8, 8, 2, 1)[0] == 100_000  # a batch below the threshold: one copy
    # a smaller call of the same weight (Wan's first chunk) reads 50 x height and holds 3 elements per pixel: where
    # the largest copies and it does not, its buffer counts too
    two = _structure([[200.0, 0, 0]] * 2, [[0, 0, 0]] * 2, rule_min=[[50.0, 0, 0]] * 2, cols_min=[[3.0, 0, 0]] * 2)
    assert est.conv_transient_elements(two, 100, 200, 1, 1) == (100_000, 3 * 100 * 200)  # 10000: on im2col
    assert est.conv_transient_elements(two, 100, 500, 1, 1) == (100_000, 100 * 500)  # 25000: both on oneDNN


def test_a_malformed_conv_transients_is_refused():
    doc = est.load(None)
    key = "ltx-2/decode/fp32/untiled"  # a 3-D class's: with the live bytes at the calls
    for bad, message in ((lambda c: c.__setitem__(0, [1, 5, [], []]), "conv_transients must be lists of"),
                         (lambda c: c.reverse(), "the heaviest weight first"),
                         (lambda c: c[0][7].__setitem__(0, c[0][7][0][::-1]), "conv_transients must be lists of"),
                         (lambda c: c[0][7].__setitem__(0, [[1, -5]]), "conv_transients must be lists of"),
                         # no live bytes at a knot where it runs
                         (lambda c: c[0][7].__setitem__(0, []), "conv_transients must be lists of")):
        import json

        d = json.loads(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
        bad(d["structures"][key]["conv_transients"])
        with pytest.raises(ValueError, match=message):
            est.validate(d, "c.json")
    # the live bytes at the calls are fields from schema 12: a file of 11 with them was not fitted in them
    d = as_schema(json.loads(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")})), 12)
    d["schema_version"] = 11  # with the live bytes at the calls still there
    with pytest.raises(ValueError, match=r"conv_transients must be 7 fields per convolution \(the live bytes at its "
                                         r"calls are fields from schema 12\)"):
        est.validate(d, "c.json")


def _meta_and_cpu(fn, x: torch.Tensor) -> tuple[tuple, tuple]:
    """(strides of ``fn(x)`` on the meta device under the counter, on real CPU tensors)."""
    out = {}
    for device in ("meta", "cpu"):
        t = x.to(device) if device == "cpu" else torch.empty_strided(x.shape, x.stride(), device="meta")
        counter = LiveBytes(cpu_strides=device == "meta")
        with torch.no_grad(), counter:
            out[device] = tuple(fn(t).stride())
    return out["meta"], out["cpu"]


@pytest.mark.parametrize("frames,height", [(3, 6), (3, 12), (1, 8)])  # 640 x 3 x 6 = 11520: both sides of 20480
def test_the_dry_run_gives_outputs_the_cpus_memory_format(frames, height):
    """Known answers from real CPU tensors: a channels-last input keeps its format through a convolution oneDNN
    runs (not through torch's own path) and a replication or reflection pad, where the meta kernels return
    contiguous outputs, and elementwise ops; the counter's meta outputs have the CPU's strides."""
    torch.manual_seed(0)
    x = torch.randn(1, 640, frames, height, 10).contiguous(memory_format=torch.channels_last_3d)
    conv = nn.Conv3d(640, 8, 1)
    with torch.no_grad():
        meta_conv = nn.Conv3d(640, 8, 1, device="meta")
    for fn in (lambda t: (conv if t.device.type == "cpu" else meta_conv)(t),
               lambda t: torch.nn.functional.pad(t, (1, 1, 1, 1, 2, 0), mode="replicate"),
               lambda t: torch.nn.functional.pad(t, (1, 1, 1, 1, 0, 0), mode="reflect"),
               lambda t: torch.nn.functional.silu(t) + 1):
        meta, cpu = _meta_and_cpu(fn, x)
        assert meta == cpu


def test_hunyuanvideo_15s_channels_last_convolutions_are_where_the_measurements_doubled():
    """Campaign 15 measured HunyuanVideo 1.5's fp32 decode at 887-899 MiB at one frame and 160x96 x 9 (one copy
    of its 864 MiB convolution weight) and 1761-1786 MiB at 128x128, 256x160 and 320x192 x 9 (two): the dry run
    sees that convolution's input channels-last exactly at the latter (its attention's projection ran on oneDNN)."""
    for w, h, f, last in ((128, 128, 1, 0), (160, 96, 9, 0), (128, 128, 9, 1), (256, 160, 9, 1)):
        big = trace(TraceSpec("hunyuanvideo-1.5", "decode", "fp32", w, h, frames=f)).conv_inputs[0]
        assert big[0] == 226_492_416 and big[7] == last, (w, h, f)


def test_a_channels_last_threshold_between_grid_sizes_is_where_a_convolution_changes_path():
    """Known answers (:func:`_channels_last_from`): the grid read 100 elements at side 64 without the format and 400
    at 128 with it; a convolution's law crosses torch's threshold at side 100, so the threshold is this one's law
    there (3 x 100 + 8 = 308); with no crossing between the two sides, the bound (100); none seen, None; seen at the
    smallest side, -1."""
    seen = {64: (100, 0), 128: (400, 1), 256: (800, 1)}
    assert _channels_last_from(seen, [30.0, 100.0, 120.0, 300.0], [3.0, 0.0, 8.0], 5) == 308
    assert _channels_last_from(seen, [30.0, 300.0], [3.0, 0.0, 8.0], 5) == 100
    assert _channels_last_from({64: (100, 0), 128: (400, 0)}, [100.0], [3.0, 0.0, 8.0], 5) is None
    assert _channels_last_from({64: (100, 1), 128: (400, 1)}, [100.0], [3.0, 0.0, 8.0], 5) == -1
    assert _crossing([192.0, 0.0, 0.0], 5) == pytest.approx(20480 / 192)  # HunyuanVideo 1.5's projection
    assert _crossing([1.0, 0.0, 480.0], 4) == pytest.approx(20000 ** 0.5)  # 2-D: in the frame's pixels


def test_hunyuanvideo_15s_copies_between_grid_sizes_follow_its_projection():
    """The committed structure of HunyuanVideo 1.5's fp32 decode doubles its 864 MiB copy at 9 frames exactly where
    a fresh dry run sees that convolution's input channels-last: from a height of 112 px on (its attention's
    projection reads 1024 x 3 x 7 = 21504 elements there, 18432 at 96; heights are multiples of 16), so one copy
    at 160x96 (measured 895 MiB) and two at 128x128 (measured 1761 MiB). The grid has 64 and 128 px only."""
    doc = json.loads((Path(__file__).parent.parent / "vaemem" / "coefficients.json").read_text())
    s = doc["structures"]["hunyuanvideo-1.5/decode/fp32/untiled"]
    for w, h, want in ((160, 96, 1), (256, 96, 1), (160, 112, 2), (128, 128, 2)):
        copied, _ = est.conv_transient_elements(s, w, h, 1, 9)
        assert copied == want * 226_492_416, (w, h)
    big = trace(TraceSpec("hunyuanvideo-1.5", "decode", "fp32", 160, 112, frames=9)).conv_inputs[0]
    assert big[0] == 226_492_416 and big[7] == 1


@pytest.mark.parametrize("name,op,w,h,f", [
    ("ltx-2", "decode", 160, 96, 9),  # its kernel switch: an im2col buffer where the copy comes later
    ("ltx-2", "decode", 512, 320, 97),  # past the last knot
    ("wan21", "decode", 832, 480, 81),  # replayed chunks
    ("cogvideox", "decode", 720, 480, 49),  # split convolutions
    ("mochi", "encode", 320, 192, 31)])  # 6 s for the five
def test_the_packaged_call_peaks_reproduce_fresh_dry_runs_of_real_architectures(name, op, w, h, f):
    """The packaged structures' call peak at app sizes off the grid (oblong, between and past the frame knots)
    against a fresh dry run's own record, within 1 % (0.1 % at these, 2026-12-04)."""
    s = est.load(None)["structures"][est.structure_key(name, op, "fp32", False)]
    call, want = est.conv_call_peak_bytes(s, w, h, f), _call_truth(TraceSpec(name, op, "fp32", w, h, frames=f))
    assert abs(call - want) <= 0.01 * want, (call, want)


@pytest.mark.parametrize("name,op,channels_last", [
    ("tiny-hunyuanimage", "decode", 3), ("tiny-hunyuanimage", "encode", 3),  # after its attention, through norms
    ("tiny-dcae", "decode", 10), ("tiny-dcae", "encode", 6),
    ("tiny-kl", "decode", 0),  # a meta kernel's made-up format after its attention, taken back
    ("tiny-mochi", "encode", 2)])
def test_the_dry_run_sees_the_channels_last_inputs_the_cpu_sees(name, op, channels_last):
    """Known answers from real CPU tensors: the convolutions whose input is channels-last (which doubles oneDNN's
    weight copy), 2-D and 3-D alike, are those of the dry run, and every record and peak agrees."""
    spec = TraceSpec(name, op, "fp32", 128, 96, frames=7 if name == "tiny-mochi" else 1)
    fake, real = trace(spec), trace(spec, fake=False)
    assert fake.conv_inputs == real.conv_inputs and fake.peak_bytes == real.peak_bytes
    assert fake.onednn_peak_bytes == real.onednn_peak_bytes
    assert sum(c[7] for c in fake.conv_inputs) == channels_last


def test_a_group_norm_of_a_channels_last_meta_tensor_runs_as_on_the_cpu():
    """On the meta device ``aten.group_norm`` copies a channels-last input to contiguous first and returns a
    contiguous output; on the CPU it runs on the input as it is and keeps its format. Within the dry run's block the
    meta one does the same: no copy counted, a channels-last output."""
    from vaemem.tracing.trace import _group_norm_as_on_cpu

    norm = nn.GroupNorm(4, 8)
    cpu_out = norm(torch.zeros(1, 8, 6, 5).contiguous(memory_format=torch.channels_last))
    with torch.no_grad():
        meta_norm = nn.GroupNorm(4, 8, device="meta")
    x = torch.empty(1, 8, 6, 5, device="meta").contiguous(memory_format=torch.channels_last)
    counter = LiveBytes(cpu_strides=True)
    counter.exclude([*meta_norm.parameters(), x])
    with torch.no_grad(), _group_norm_as_on_cpu(), counter:
        out = meta_norm(x)
    assert out.stride() == cpu_out.stride() == (240, 1, 40, 8)
    assert counter.peak == out.numel() * 4 + 2 * 4 * 4  # the output and its mean and rstd, no copy of the input
