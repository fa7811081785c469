"""The dry run: exact against the same accounting on real CPU tensors, deterministic, structural known answers."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from vaemem.cli import app
from vaemem.errors import VaememError
from vaemem.models.zoo import get_spec, registry
from vaemem.tracing import cache as tc
from vaemem.tracing.trace import TraceSpec, trace

MIB = 1024 * 1024
TINY = sorted(n for n, s in registry().items() if s.tiny)


def _spec(name: str, op: str, **kw) -> TraceSpec:
    s = get_spec(name)
    f = s.spatial_factor
    frames = 1 + (s.info.frame_step or s.temporal_factor) if s.is_video else 1
    return TraceSpec(name, op, kw.pop("dtype", "fp32"), kw.pop("width", 8 * f), kw.pop("height", 6 * f),
                     frames=kw.pop("frames", frames), **kw)


@pytest.mark.parametrize("name,op", [(n, op) for n in TINY for op in get_spec(n).ops])
def test_dry_run_equals_the_same_accounting_on_real_tensors(name, op):
    spec = _spec(name, op)
    fake, real = trace(spec), trace(spec, fake=False, replay=False)
    assert fake.peak_bytes == real.peak_bytes > 0
    if op in ("decode", "encode") and "hunyuanvideo-1.5" in name:  # the mask shortcut (fake only), on the math path
        math = TraceSpec(**{**spec.to_dict(), "attention": "math"})
        assert trace(math).peak_bytes == trace(math, fake=False).peak_bytes
    assert fake.output_bytes == real.output_bytes > 0
    assert fake.input_bytes == real.input_bytes > 0
    assert fake.peak_module == real.peak_module
    # on the meta device SDPA would take the math path, with its score matrix: the dry run takes the CPU's kernel
    assert fake.attention_peak_bytes == real.attention_peak_bytes
    # oneDNN's buffers are counted alike, a replayed call (Wan's chunks) raising it by its first call's
    assert fake.onednn_peak_bytes == real.onednn_peak_bytes >= real.peak_bytes
    assert fake.onednn_peak_bytes_no_amx == real.onednn_peak_bytes_no_amx >= real.peak_bytes


@pytest.mark.parametrize("spec,reorders", [
    (_spec("tiny-kl", "decode", width=64, height=48), True),
    (_spec("tiny-hunyuanimage", "encode", width=64, height=48), True),
    (_spec("tiny-dcae", "decode", width=64, height=48), False),  # channels-last: oneDNN takes it as it is
    (_spec("tiny-mochi", "encode", width=128, height=96, frames=7), False),
    pytest.param(_spec("tiny-mochi", "encode", width=128, height=96, frames=7, dtype="bf16"), True,  # AMX's rule
                 marks=pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason=(
                     "this host's oneDNN has no bf16 (AVX2): its own path runs the convolutions contiguous, where "
                     "the dry run is of a CPU that runs them on oneDNN, channels-last, as the rigs that measured "
                     "bf16"))),
], ids=lambda v: v.key if isinstance(v, TraceSpec) else str(v))
def test_fp32_dry_runs_count_onednns_reorders_as_real_tensors_do(spec, reorders):
    """At sizes where oneDNN runs the tiny models' convolutions in fp32, the dry run with its buffers equals the same
    accounting on real tensors: the reorders of the plain-format ones counted, none on the channels-last inputs of
    the DC-AE decoder and Mochi's encoder (the meta device sees the CPU's strides), nor in bf16 without AMX."""
    fake, real = trace(spec), trace(spec, fake=False, replay=False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.onednn_peak_bytes == real.onednn_peak_bytes
    assert fake.onednn_peak_bytes_no_amx == real.onednn_peak_bytes_no_amx
    assert (real.onednn_peak_bytes > real.peak_bytes) == reorders
    if spec.dtype == "bf16":
        assert real.onednn_peak_bytes_no_amx == real.peak_bytes  # no copy of a channels-last input


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_convolution_keeps_a_channels_last_input_format_on_any_host(dtype):
    """The dry run's CPU runs half precision on oneDNN (the rigs' CPUs), which keeps a channels-last input's format:
    so on a host whose oneDNN has no bf16 (AVX2), where torch's own path gives a contiguous output, as on one that
    has it (the committed dry runs were made there)."""
    from vaemem.tracing.counter import _as_on_cpu, channels_last_strides

    conv = torch.ops.aten.convolution.default
    x = torch.empty(1, 8, 3, 16, 16, dtype=dtype, device="meta").to(memory_format=torch.channels_last_3d)
    args = (x, torch.empty(8, 8, 3, 3, 3, dtype=dtype, device="meta"), None, [1, 1, 1], [0, 0, 0], [1, 1, 1], False,
            [0, 0, 0], 1)
    out = _as_on_cpu(conv, args, {}, conv(*args))
    assert tuple(out.stride()) == channels_last_strides(tuple(out.shape))


@pytest.mark.parametrize("spec", [
    _spec("tiny-kl", "decode", width=128, height=96, tile=32),
    _spec("tiny-kl", "encode", width=128, height=96, tile=32),
    _spec("tiny-wan", "decode", width=64, height=48, tile=32),
    _spec("tiny-kl", "decode", batch=2, slicing=True),
    _spec("tiny-kl", "decode", width=64, height=64, attention="math"),
    _spec("tiny-minimax-h3", "encode", conv3d="decomposed"),
    _spec("tiny-wan", "encode", conv3d="decomposed"),
    _spec("tiny-kl", "decode", width=128, height=96, tile=32, overlap=0.5),
    _spec("tiny-hunyuanvideo", "decode", width=64, height=48, frames=21, tile=32),  # temporal windows, tiled
    _spec("tiny-hunyuanvideo", "encode", width=64, height=48, frames=21, tile=32),
    _spec("tiny-hunyuanvideo", "decode", width=64, height=48, frames=21, tile=32, whole_clip=True),
], ids=lambda s: s.key)
def test_tiled_sliced_math_and_decomposed_dry_runs_are_exact(spec):
    fake, real = trace(spec), trace(spec, fake=False, replay=False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.output_bytes == real.output_bytes
    assert fake.onednn_peak_bytes == real.onednn_peak_bytes  # replayed tiles, items and windows included
    assert fake.onednn_peak_bytes_no_amx == real.onednn_peak_bytes_no_amx


@pytest.mark.parametrize("name,op,kw", [
    ("tiny-kl", "decode", {}), ("tiny-kl", "encode", {}), ("tiny-wan", "decode", {}),
    ("tiny-hunyuanvideo", "encode", {}),
    ("tiny-kl", "decode", dict(width=128, height=96, tile=32)),  # replayed tiles
    ("tiny-hunyuanvideo", "decode", dict(width=64, height=48, frames=21, tile=32)),  # replayed windows
])
def test_half_precision_dry_runs_count_onednns_buffers_as_real_tensors_do(name, op, kw):
    """In bf16 the two oneDNN rules differ (:func:`vaemem.tracing.counter.onednn_hidden_bytes`): both peaks of the
    dry run equal the same accounting on real tensors, replayed tiles and windows included."""
    spec = _spec(name, op, dtype="bf16", **kw)
    fake, real = trace(spec), trace(spec, fake=False, replay=False)
    assert fake.peak_bytes == real.peak_bytes
    assert fake.onednn_peak_bytes == real.onednn_peak_bytes
    assert fake.onednn_peak_bytes_no_amx == real.onednn_peak_bytes_no_amx
    assert real.onednn_peak_bytes_no_amx != real.onednn_peak_bytes  # the rules differ here: the test can fail


@pytest.mark.parametrize("channels_out", [2, 32])
def test_an_fp32_convolution_holds_the_larger_of_its_input_and_its_output_on_onednn(channels_out):
    """Known answer (``benchmarks/cpu_hidden_ops.py --convs``): an fp32 convolution on oneDNN holds, beyond its
    output, a reorder of the larger of its input and output: its input where it reduces channels (SD1.5's decoder's
    256->128 convolutions, HunyuanVideo's causal ones on a padded input of three frames for one), its output where
    it widens them (SD1.5's encoder's 3->128 and 128->256); none on a channels-last input, nor where torch's own
    path runs it."""
    import torch

    from vaemem.tracing import counter

    def held(x: torch.Tensor, w: torch.Tensor) -> tuple[int, torch.Tensor]:
        args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)  # aten.convolution's
        out = counter._CONVOLUTION(*args)
        return counter.onednn_hidden_bytes(counter._CONVOLUTION, args, out), out

    x, w = torch.zeros(1, 8, 64, 64), torch.zeros(channels_out, 8, 3, 3)  # 32768 elements: oneDNN runs it
    n, out = held(x, w)
    assert n == max(x.numel(), out.numel()) * 4 == (x.numel() if channels_out < 8 else out.numel()) * 4
    # channels-last (SANA DC-AE's decoder): oneDNN takes it as it is
    assert held(x.to(memory_format=torch.channels_last), w)[0] == 0
    # torch's own path (at most ONEDNN_MIN_ELEMENTS): its im2col buffer, no reorder; at one element more oneDNN
    assert counter.ONEDNN_MIN_ELEMENTS == 20480
    assert held(torch.zeros(1, 8, 32, 32), w)[0] == 0
    w5 = torch.zeros(2, 5, 3, 3)
    assert held(torch.zeros(1, 5, 64, 64), w5)[0] == 0  # 20480 elements
    assert held(torch.zeros(1, 5, 64, 65), w5)[0] == 5 * 64 * 65 * 4  # 20800: its input's reorder
    # a clause that ignores the size (a batch): oneDNN at any size, here on a plain-format input
    assert held(torch.zeros(2, 8, 16, 16), w)[0] == max(2 * 8 * 16 * 16, 2 * channels_out * 16 * 16) * 4


def test_whole_clip_runs_without_the_windows_and_only_where_there_are_windows():
    spec = _spec("tiny-hunyuanvideo", "decode", width=64, height=48, frames=33, tile=32)
    windows, whole = trace(spec), trace(TraceSpec(**{**spec.to_dict(), "whole_clip": True}))
    assert whole.peak_bytes > windows.peak_bytes and whole.spec.key.endswith("/whole-clip")
    with pytest.raises(VaememError, match="tiny-wan has no temporal windows"):
        trace(_spec("tiny-wan", "decode", whole_clip=True))


def test_tile_replay_is_used_and_changes_nothing():
    spec = _spec("tiny-kl", "decode", width=256, height=192, tile=32)
    replayed, plain = trace(spec), trace(spec, replay=False)
    assert replayed.replayed_calls > 10 and plain.replayed_calls == 0
    assert replayed.peak_bytes == plain.peak_bytes


@pytest.mark.parametrize("spec", [
    _spec("tiny-wan", "decode", frames=17),
    _spec("tiny-wan", "encode", frames=17),
    _spec("tiny-wan", "decode", width=64, height=48, frames=9, tile=32),
    _spec("tiny-cogvideox", "decode", frames=41),  # five frame batches, four with a cache: no blend to replay
    _spec("tiny-cogvideox", "encode", frames=65),
], ids=lambda s: s.key)
def test_chunk_replay_of_wans_feature_cache_is_used_and_changes_nothing(spec):
    """Wan decodes a clip chunk by chunk, its decoder rewriting the feature cache it is passed (a list): a chunk
    whose cache holds what an earlier chunk's held is replayed, and the dry run is what real tensors give.
    CogVideoX's tiles run frame batches through a decoder that takes and returns its cache (dicts of dicts of
    tensors): replayed too (38 s a dry run of 2048x1024 x 33 frames with 256 px tiles without, 4 s with)."""
    replayed, plain = trace(spec), trace(spec, replay=False)
    assert replayed.replayed_calls >= 2 and plain.replayed_calls == 0
    real = trace(spec, fake=False, replay=False)
    assert replayed.peak_bytes == plain.peak_bytes == real.peak_bytes
    assert replayed.peak_module == real.peak_module
    # CogVideoX's split convolutions record the live bytes after each call: a replay re-applies its first call's
    assert replayed.split_convs == plain.split_convs == real.split_convs


def _replayed_peak(fn, calls: int, replay: bool) -> tuple[int, int]:
    """(peak, replays) of ``calls`` calls of ``fn(x, cache)`` and a ``.contiguous()`` of each output, counted; the
    contiguous copies are kept, so the last call's sets the peak."""
    import torch

    from vaemem.tracing.counter import LiveBytes
    from vaemem.tracing.trace import _Replay

    class Owner:
        pass

    owner, counter = Owner(), LiveBytes()
    owner.fn = fn
    r = _Replay(owner, "fn", counter)
    call = r if replay else fn
    x, cache = torch.zeros(64, 64), [None]
    counter.exclude([x])
    kept = []
    with counter:
        for _ in range(calls):
            out = call(x, cache)
            kept.append(out.contiguous())
            del out
    return counter.peak, r.replayed


@pytest.mark.parametrize("fn,replays", [
    (lambda x, cache: (x + 1).t(), 2),                           # a transposed output: its strides are recreated
    (lambda x, cache: torch_cat(x)[1:], 0),                      # a view of a larger storage: never replayed
    (lambda x, cache: cache.__setitem__(0, (x * 2).t()) or x.sum(0), 1),  # a cache item with its own strides
], ids=["strided output", "view output", "strided cache item"])
def test_replay_of_odd_outputs_equals_the_calls_it_replaces(fn, replays):
    (replayed, n), (plain, _) = _replayed_peak(fn, 3, True), _replayed_peak(fn, 3, False)
    assert replayed == plain and n == replays


def torch_cat(x):
    import torch

    return torch.cat([x, x])


def test_sdpa_on_meta_tensors_allocates_what_the_cpu_allocates():
    """The dry run's SDPA, a boolean mask included (SDPA converts it first), against real CPU tensors."""
    import torch
    import torch.nn.functional as F

    from vaemem.tracing.counter import LiveBytes
    from vaemem.tracing.trace import _attention_as_on_cpu

    def peak(device: str, mask: bool) -> int:
        q = torch.zeros(1, 4, 256, 64, device=device)
        m = torch.ones(256, 256, dtype=torch.bool, device=device) if mask else None
        counter = LiveBytes()
        counter.exclude([q] + ([m] if mask else []))
        with _attention_as_on_cpu(), counter:
            F.scaled_dot_product_attention(q, q, q, attn_mask=m)
        return counter.peak

    for mask in (False, True):
        assert peak("meta", mask) == peak("cpu", mask) < 4 * 256 * 256 * 4  # no (4 x 256 x 256) fp32 scores


def test_the_dry_run_is_deterministic():
    spec = _spec("tiny-wan", "decode", frames=9)
    a, b = trace(spec), trace(spec)
    assert (a.peak_bytes, a.output_bytes, a.peak_module) == (b.peak_bytes, b.output_bytes, b.peak_module)


def test_untiled_image_decode_is_linear_in_pixels():
    """sd15 decode: exactly 3072 B/px plus a constant (structure.md)."""
    peaks = {w: trace(TraceSpec("sd15", "decode", "fp32", w, w)).peak_bytes for w in (256, 512, 768)}
    slope = (peaks[768] - peaks[256]) / (768**2 - 256**2)
    assert slope == pytest.approx(3072, rel=1e-3)
    assert peaks[512] - peaks[256] == pytest.approx(slope * (512**2 - 256**2), rel=1e-6)


def test_a_dry_run_allocates_nothing():
    """A 12 GiB peak on a CI machine with less free memory than that: nothing is allocated."""
    r = trace(TraceSpec("sd15", "decode", "fp32", 2048, 2048))
    assert r.peak_bytes == pytest.approx(3072 * 2048 * 2048, rel=0.01)


def test_wan_decode_is_nearly_flat_in_frames_beyond_the_first_chunk():
    """Wan 2.1 decode 832x480 bf16 (structure.md): 1318 MiB at 1 frame, 3711 at 5, 4044 at 81."""
    peaks = [trace(TraceSpec("wan21", "decode", "bf16", 832, 480, frames=f)).peak_bytes / MIB for f in (1, 5, 81)]
    assert [round(p) for p in peaks] == [1318, 3711, 4044]


def test_math_attention_materialises_the_score_matrix():
    fused = trace(_spec("tiny-kl", "decode", width=256, height=256)).peak_bytes
    math_ = trace(_spec("tiny-kl", "decode", width=256, height=256, attention="math")).peak_bytes
    tokens = (256 // 4) ** 2
    assert math_ - fused >= tokens * tokens * 4 * 0.9  # one fp32 (tokens x tokens) matrix at least


def test_slicing_decodes_one_batch_item_at_a_time():
    whole = trace(_spec("tiny-kl", "decode", batch=4)).peak_bytes
    sliced = trace(_spec("tiny-kl", "decode", batch=4, slicing=True)).peak_bytes
    one = trace(_spec("tiny-kl", "decode", batch=1)).peak_bytes
    assert sliced < whole and sliced < 2 * one


@pytest.mark.parametrize("spec,message", [
    (TraceSpec("nope", "decode", "fp32", 64, 64), "unknown model"),
    (TraceSpec("minimax-h3", "decode", "fp32", 64, 64), "decoder is a ViT"),
    (TraceSpec("wan21", "decode", "fp32", 64, 64, frames=4), r"1 \+ 4k"),
    (TraceSpec("sd15", "decode", "fp32", 60, 64), "multiples of 8"),
    (TraceSpec("sd15", "decode", "fp32", 64, 64, tile=64), "not smaller"),
    (TraceSpec("sd15", "decode", "fp32", 64, 64, attention="flash"), "attention path"),
    (TraceSpec("sd15", "decode", "fp32", 64, 64, conv3d="decomposed"), "conv3d decomposition applies"),
    (TraceSpec("sd15", "decode", "fp32", 128, 128, tile=64, overlap=1.0), "overlap"),
])
def test_bad_dry_runs_are_refused_with_the_reason(spec, message):
    with pytest.raises(VaememError, match=message):
        trace(spec)


def _one_trace(res) -> dict:
    """The one point of a ``trace --json`` that traced one: the document is versioned and a list at any count."""
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and len(doc["traces"]) == 1, doc.keys()
    return doc["traces"][0]


def test_cli_trace_json_and_config_file(tmp_path):
    runner = CliRunner()
    doc = _one_trace(runner.invoke(app, ["trace", "-m", "tiny-kl", "--op", "decode", "--res", "64x48", "--json"]))
    assert doc["peak_bytes"] == trace(_spec("tiny-kl", "decode", width=64, height=48)).peak_bytes
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(get_spec("tiny-kl").config))
    got = _one_trace(runner.invoke(app, ["trace", "--config", str(cfg), "--op", "decode", "--res", "64x48", "--json"]))
    assert got["peak_bytes"] == doc["peak_bytes"]
    assert got["key"].startswith(f"config:{tmp_path.name}/decode/")  # its folder names it
    # labelled with a zoo name, it is still the config's dry run: never under the zoo model's own key
    got = _one_trace(runner.invoke(app, ["trace", "--config", str(cfg), "-m", "sdxl", "--op", "decode", "--res", "64",
                                         "--json"]))
    assert got["key"].startswith("config:sdxl/decode/")


def test_cli_trace_json_is_one_shape_at_any_count():
    """Two points are two traces in the grid's order; a point given twice is traced once, still in the list."""
    args = ["trace", "-m", "tiny-kl", "--res", "64", "--json"]
    res = CliRunner().invoke(app, [*args, "--op", "decode", "--op", "encode"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1
    assert [t["spec"]["op"] for t in doc["traces"]] == ["decode", "encode"]
    twice = _one_trace(CliRunner().invoke(app, [*args, "--op", "decode", "--res", "64"]))
    assert twice["peak_bytes"] == doc["traces"][0]["peak_bytes"]


def test_cli_models_json_is_versioned_and_lists_the_zoo():
    from vaemem.models.zoo import registry

    res = CliRunner().invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1
    assert [m["name"] for m in doc["models"]] == list(registry())
    sd15 = next(m for m in doc["models"] if m["name"] == "sd15")
    assert (sd15["spatial_factor"], sd15["temporal_factor"], sd15["latent_channels"]) == (8, None, 4)


def test_a_config_key_its_class_does_not_take_is_said(tmp_path):
    """diffusers ignores a key its class does not take and builds its default there: a misspelt ``base_dim`` traced
    a full-size Wan. The dry run goes on (published configs carry such keys), and a warning names the key."""
    good = get_spec("tiny-wan").config
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**{k: v for k, v in good.items() if k != "base_dim"}, "base_dims": good["base_dim"]}))
    args = ["trace", "--config", str(cfg), "--op", "decode", "--res", "64", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    wrong = _one_trace(res)
    assert res.stderr.strip() == (f"warning: {cfg}: diffusers' AutoencoderKLWan takes no base_dims: ignored, its "
                                  f"defaults traced")
    cfg.write_text(json.dumps(good))
    right = CliRunner().invoke(app, args)
    assert right.stderr == ""
    assert wrong["peak_bytes"] > 2 * _one_trace(right)["peak_bytes"]


def test_cli_trace_table_piped_keeps_every_cell_whole():
    """Piped (not a terminal), the table is printed at its natural width: the point key and the module whole."""
    res = CliRunner().invoke(app, ["trace", "-m", "tiny-wan", "--op", "decode", "--res", "64x48", "--frames", "5",
                                   "--tile", "32", "--overlap", "0.5"])
    assert res.exit_code == 0, res.output
    r = trace(_spec("tiny-wan", "decode", width=64, height=48, frames=5, tile=32, overlap=0.5))
    assert r.spec.key in res.output and r.peak_module in res.output and "…" not in res.output


def test_cli_trace_in_parallel_processes_gives_the_same_dry_runs(tmp_path):
    args = ["trace", "-m", "tiny-kl", "--op", "decode", "--op", "encode", "--res", "64", "--res", "96x64",
            "--attention", "math", "--json"]
    one, two = (CliRunner().invoke(app, args + ["--jobs", j]) for j in ("1", "2"))
    assert one.exit_code == two.exit_code == 0, two.output
    strip = [[{k: v for k, v in d.items() if k != "wall_s"} for d in json.loads(r.stdout)["traces"]]
             for r in (one, two)]
    assert strip[0] == strip[1] and len(strip[0]) == 4 and all(d["attention_peak_bytes"] > 0 for d in strip[0])
    twice = CliRunner().invoke(app, args + ["--op", "decode", "--res", "64x64"])  # points given again: traced once
    assert twice.exit_code == 0
    assert [d["key"] for d in json.loads(twice.stdout)["traces"]] == [d["key"] for d in strip[0]]
    bad = CliRunner().invoke(app, ["trace", "-m", "tiny-kl", "--op", "decode", "--res", "64", "--res", "66",
                                   "--jobs", "2"])
    assert bad.exit_code == 2 and "multiples of 4" in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize("args,message", [
    (["trace", "-m", "tiny-kl", "--op", "decode", "--res", "64", "--jobs", "0"], "--jobs must be 1 or more"),
    (["trace", "--op", "decode", "--res", "64"], "give --model"),
    (["trace", "-m", "tiny-kl", "--res", "64"], "at least one --op"),
    (["trace", "-m", "tiny-kl", "--op", "decode", "--res", "6x"], "bad resolution"),
    (["trace", "--config", "/nonexistent.json", "--op", "decode", "--res", "64"], "cannot read config"),
])
def test_cli_trace_bad_input_is_one_line(args, message):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("config,message", [
    ({"block_out_channels": [30, 60]}, "must be divisible by num_groups"),
])
def test_a_config_diffusers_cannot_build_is_one_line(tmp_path, config, message):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 4,
                               "down_block_types": ["DownEncoderBlock2D"] * 2,
                               "up_block_types": ["UpDecoderBlock2D"] * 2, **config}))
    res = CliRunner().invoke(app, ["trace", "--config", str(cfg), "--op", "decode", "--res", "64"])
    assert res.exit_code == 2 and "diffusers cannot build or run decode of this AutoencoderKL config" in res.output
    assert message in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("config,message", [
    # diffusers failed on each without naming the field: a TypeError of string formatting, a bare AssertionError,
    # an IndexError, a division by zero
    ({"block_out_channels": "wide"}, "block_out_channels must be a non-empty list of positive integers, got 'wide'"),
    ({"layers_per_block": -1}, "layers_per_block must be a non-negative integer or a list of them, got -1"),
    ({"down_block_types": ["DownEncoderBlock2D"] * 4}, "down_block_types must list one block per block_out_channels "
                                                      "entry (2)"),
    ({"latent_channels": 0}, "latent_channels must be a positive integer, got 0"),
])
def test_a_config_field_diffusers_would_fail_on_unnamed_is_named(tmp_path, config, message):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 4, "block_out_channels": [32, 64],
                               "down_block_types": ["DownEncoderBlock2D"] * 2,
                               "up_block_types": ["UpDecoderBlock2D"] * 2, **config}))
    res = CliRunner().invoke(app, ["trace", "--config", str(cfg), "--op", "decode", "--res", "64"])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_a_zoo_point_diffusers_cannot_run_is_an_error_and_a_bug_still_propagates(monkeypatch):
    """CogVideoX's decode at 1920x1088 x 49 frames: diffusers' own convolution refuses its padded input (a
    RuntimeError), which the CLI printed as a 150-line traceback. Any other error of a zoo model is vaemem's bug."""
    from vaemem.tracing import trace as tr

    def fails(error):
        def run(*args, **kwargs):
            raise error
        return run

    spec = TraceSpec("tiny-cogvideox", "decode", "fp32", 64, 64, frames=9)
    monkeypatch.setattr(tr, "_trace", fails(RuntimeError("Kernel size can't be greater than actual input size\nmore")))
    with pytest.raises(VaememError, match=r"^diffusers cannot run decode of tiny-cogvideox at 64x64 x 9 frames: "
                                          r"RuntimeError: Kernel size can't be greater than actual input size$"):
        trace(spec)
    monkeypatch.setattr(tr, "_trace", fails(KeyError("a bug")))
    with pytest.raises(KeyError):
        trace(spec)


@pytest.mark.parametrize("dtype,copies", [("fp32", 1), ("bf16", 2)])
def test_onednn_peak_adds_each_ops_buffer_only_while_it_runs(dtype, copies):
    """Known answer on real tensors: a convolution that widens its channels holds its output's reorder (once in fp32,
    on oneDNN: 4 x 64 x 96 input elements pass torch's threshold; twice in half precision with AMX) while it runs, a
    half-precision mean an fp32 copy of its input and result in place of its output (its peak 4 bytes per element
    of both above the live tensors before it); the plain peak counts neither, and a buffer is gone when its op
    returns (the later, larger tensor alone sets neither peak)."""
    import torch

    from vaemem.tracing.counter import LiveBytes

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    x, w = torch.randn(1, 4, 64, 96, dtype=dt), torch.randn(8, 4, 3, 3, dtype=dt)
    size = torch.finfo(dt).bits // 8
    with LiveBytes() as c:
        c.exclude([x, w])
        y = torch.nn.functional.conv2d(x, w, padding=1)  # 8 x 64 x 96 elements
        conv = 8 * 64 * 96 * size
        assert (c.peak, c.onednn_peak) == (conv, conv + copies * conv)
        m = y.mean(dim=(2, 3), keepdim=True)  # 8 elements out
        held = 4 * (y.numel() + m.numel()) - m.untyped_storage().nbytes() if dtype == "bf16" else 0
        assert c.onednn_peak == max(conv + copies * conv, conv + m.untyped_storage().nbytes() + held)
        z = torch.zeros(2 * (conv + copies * conv + held) // size, dtype=dt)  # no op buffer: both peaks alike
        assert c.onednn_peak == c.peak == c.current
    del y, m, z


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_math_paths_softmax_holds_a_mask_of_its_scores_while_it_runs(dtype, monkeypatch):
    """Known answer on real tensors: ``aten._safe_softmax`` (SDPA's softmax on its math path) holds a boolean mask
    of its input, one byte per element, beside its output while it runs: on an n x n input the peak is the output
    plus n x n bytes, and the record says the mask; the live bytes after it are the output's alone. Through SDPA on
    its math path the peak is the one without the mask plus it."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from vaemem.tracing import counter

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    n, ch = 64, 8
    x = torch.randn(1, 1, n, n, dtype=dt)
    with torch.no_grad(), counter.LiveBytes() as c:
        c.exclude([x])
        out = torch.ops.aten._safe_softmax(x, -1)
        size = out.untyped_storage().nbytes()
        assert (c.peak, c.current, c.softmax_mask) == (size + n * n, size, n * n)
    del out
    q, k, v = (torch.randn(1, 1, n, ch, dtype=dt) for _ in range(3))

    def peak() -> int:
        with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), counter.LiveBytes() as c:
            c.exclude([q, k, v])
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return c.peak

    with_mask = peak()
    monkeypatch.setattr(counter, "safe_softmax_hidden_bytes", lambda args: 0)
    assert with_mask == peak() + n * n


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_without_amx_a_half_precision_convolution_holds_a_copy_of_its_input(dtype):
    """Known answer on real tensors, the rule measured call by call on the AVX512-BF16 EPYC
    (``benchmarks/cpu_hidden_ops.py``): a 3x3 bf16 convolution holds a copy of its input, a 1x1 one two, where the
    AMX rule counts twice the output, and none on a channels-last input (Mochi's encoder); in fp32 both rules hold
    a reorder of the larger of input and output, here the input."""
    import torch

    from vaemem.tracing.counter import LiveBytes

    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    size = torch.finfo(dt).bits // 8
    x = torch.randn(1, 16, 48, 48, dtype=dt)  # 36864 elements: oneDNN runs it in fp32 too
    w3, w1 = torch.randn(4, 16, 3, 3, dtype=dt), torch.randn(4, 16, 1, 1, dtype=dt)
    x_bytes, out = 16 * 48 * 48 * size, 4 * 48 * 48 * size  # the output a quarter of the input
    for w, copies in ((w3, 1), (w1, 2)):
        with LiveBytes() as c:
            c.exclude([x, w])
            y = torch.nn.functional.conv2d(x, w, padding=w.shape[-1] // 2)
            assert c.peak == out
            if dtype == "fp32":
                assert c.onednn_peak == c.onednn_peak_no_amx == out + x_bytes
            else:
                assert (c.onednn_peak, c.onednn_peak_no_amx) == (3 * out, out + copies * x_bytes)
        del y
    last = x.to(memory_format=torch.channels_last)
    with LiveBytes() as c:
        c.exclude([last, w3])
        y = torch.nn.functional.conv2d(last, w3, padding=1)
        assert c.onednn_peak_no_amx == c.peak  # no copy of a channels-last input
        assert c.onednn_peak == (c.peak if dtype == "fp32" else 3 * c.peak)  # the AMX rule is the AMX rule
    del y


def test_cache_records_verifies_and_refuses_tampering(tmp_path):
    path = tmp_path / "traces.json"
    results = [trace(_spec("tiny-kl", op)) for op in ("decode", "encode")]
    tc.record(path, results)
    doc = tc.read_cache(path)
    assert doc["entries"][results[0].spec.key]["peak_bytes"] == results[0].peak_bytes
    text = path.read_text()
    assert tc.dumps(doc) == text  # deterministic bytes
    tampered = json.loads(text)
    tampered["entries"][results[0].spec.key]["peak_bytes"] += 1
    path.write_text(json.dumps(tampered))
    with pytest.raises(VaememError, match="entries_sha256"):
        tc.read_cache(path)
    newer = {**json.loads(text), "schema_version": 99}
    path.write_text(json.dumps(newer))
    with pytest.raises(VaememError, match="newer"):
        tc.read_cache(path)


def test_an_entry_is_complete_exactly_when_it_holds_this_vaemems_records(tmp_path):
    """A resumed ``trace --zoo --record`` re-runs only incomplete entries: an fp32 untiled entry with this
    vaemem's conv_inputs is complete, one with the older vaemem's 8-field records (read, not refused) or none is not
    (a check of a stale length once re-ran all 666 of them on every resume), an entry that keeps no record is
    complete without one, and ``fit`` refuses a cache with incomplete entries, saying how to re-run them."""
    path = tmp_path / "traces.json"
    results = [trace(_spec("tiny-kl", "decode")), trace(TraceSpec("tiny-kl", "decode", "bf16", 64, 64))]
    doc = tc.record(path, results)
    fp32, bf16 = (doc["entries"][r.spec.key] for r in results)
    assert tc.complete(fp32) and tc.complete(bf16) and "conv_inputs" not in bf16 and tc.incomplete(doc) == []
    assert not tc.complete({k: v for k, v in fp32.items() if k != "conv_inputs"})
    fp32["conv_inputs"] = [c[:2] + c[4:] for c in fp32["conv_inputs"]]  # the older layout: no channels, volume
    path.write_text(tc.dumps(doc))
    assert tc.incomplete(tc.read_cache(path)) == [results[0].spec.key]
    res = CliRunner().invoke(app, ["fit", "--traces", str(path), "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 1 and "1 dry runs lack records this vaemem reads" in res.output
    assert "vaemem trace --zoo --record" in res.output and "Traceback" not in res.output
    fp32["conv_inputs"] = [c + c[:1] for c in results[0].conv_inputs]  # neither layout
    path.write_text(tc.dumps(doc))
    with pytest.raises(VaememError, match="conv_inputs must be lists"):
        tc.read_cache(path)
    fp32["conv_inputs"] = [list(results[0].conv_inputs[0])] * 2  # one weight shape twice
    path.write_text(tc.dumps(doc))
    with pytest.raises(VaememError, match="two records of one convolution weight shape"):
        tc.read_cache(path)


def test_untiled_entries_keep_their_onednn_peaks(tmp_path):
    """The untiled, unsliced entries record ``onednn_peak_bytes``, the half-precision ones
    ``onednn_peak_bytes_no_amx`` too (in fp32 the rules agree); tiled ones neither. An entry without one is
    incomplete (re-run on resume) and a value below the plain peak is refused."""
    path = tmp_path / "traces.json"
    specs = [_spec("tiny-kl", "decode", width=256, height=192),  # large enough for oneDNN to run it in fp32
             _spec("tiny-kl", "decode", width=128, height=96, tile=32),
             _spec("tiny-wan", "decode"), _spec("tiny-kl", "decode", dtype="bf16"),
             _spec("tiny-kl", "decode", dtype="bf16", width=128, height=96, tile=32)]
    doc = tc.record(path, [trace(s) for s in specs])
    untiled, tiled, video, half, half_tiled = (doc["entries"][s.key] for s in specs)
    assert untiled["onednn_peak_bytes"] > untiled["peak_bytes"]
    # (a tiny video model's convolutions read too few elements for oneDNN in fp32: torch's own path, no reorder)
    assert "onednn_peak_bytes" not in tiled and video["onednn_peak_bytes"] == video["peak_bytes"]
    assert half["onednn_peak_bytes"] >= half["onednn_peak_bytes_no_amx"] > half["peak_bytes"]
    assert all("onednn_peak_bytes_no_amx" not in e for e in (untiled, tiled, video, half_tiled))
    assert tc.incomplete(doc) == []
    for entry, field in ((untiled, "onednn_peak_bytes"), (half, "onednn_peak_bytes_no_amx")):
        assert not tc.complete({k: v for k, v in entry.items() if k != field})
        kept = entry[field]
        entry[field] = entry["peak_bytes"] - 1
        path.write_text(tc.dumps(doc))
        with pytest.raises(VaememError, match=f"{field} must be an integer at least its peak_bytes"):
            tc.read_cache(path)
        entry[field] = kept


def test_an_entry_of_older_rules_of_onednns_buffers_is_re_run_and_a_newer_one_refused(tmp_path):
    """An entry records the rules its oneDNN peaks and its convolutions' live bytes were counted by
    (``onednn_rule``), a sliced one of its live bytes alone: one without it (an older vaemem's, which counted an
    fp32 convolution's output alone) or of an older rule (2: a channels-last call's output reorder) is incomplete
    (a resumed ``trace --zoo`` re-runs it, ``fit`` refuses the cache), one of a newer rule is refused on reading;
    a tiled entry records neither."""
    from vaemem.tracing.counter import ONEDNN_RULE

    path = tmp_path / "traces.json"
    spec = _spec("tiny-kl", "decode")
    sliced, tiled = _spec("tiny-kl", "decode", batch=2, slicing=True), _spec("tiny-kl", "decode", width=64, height=48, tile=32)
    doc = tc.record(path, [trace(spec), trace(sliced), trace(tiled)])
    assert "onednn_peak_bytes" not in doc["entries"][sliced.key] and "conv_inputs" in doc["entries"][sliced.key]
    assert doc["entries"][sliced.key]["onednn_rule"] == ONEDNN_RULE
    assert "onednn_rule" not in doc["entries"][tiled.key]
    doc["entries"][sliced.key].pop("onednn_rule")
    assert tc.incomplete(doc) == [sliced.key]
    doc["entries"] = {spec.key: doc["entries"][spec.key]}
    doc["entries_sha256"] = tc._entries_digest(doc["entries"])
    entry = doc["entries"][spec.key]
    assert entry["onednn_rule"] == ONEDNN_RULE == 3 and tc.incomplete(doc) == []
    for rule in (None, 1, 2):
        if rule is None:
            entry.pop("onednn_rule")
        else:
            entry["onednn_rule"] = rule
        path.write_text(tc.dumps(doc))
        assert tc.incomplete(tc.read_cache(path)) == [spec.key]
    entry["onednn_rule"] = ONEDNN_RULE + 1
    path.write_text(tc.dumps(doc))
    with pytest.raises(VaememError, match=rf"of rule {ONEDNN_RULE + 1}, newer than this vaemem's "
                                          rf"\({ONEDNN_RULE}\); upgrade vaemem"):
        tc.read_cache(path)
    entry["onednn_rule"] = "2"
    path.write_text(tc.dumps(doc))
    with pytest.raises(VaememError, match="onednn_rule must be a positive integer"):
        tc.read_cache(path)


def test_a_math_path_entry_without_its_softmax_mask_is_an_older_vaemems(tmp_path):
    """A math-path entry records the mask its softmax held (``softmax_mask_bytes``, counted in its peaks); one
    without it was traced before the mask was counted, so it is incomplete (a resumed ``trace --zoo --record``
    re-runs it, ``fit`` refuses the cache) and a fused entry needs none; a mask that is no integer is refused."""
    path = tmp_path / "traces.json"
    specs = [_spec("tiny-kl", "decode", width=64, height=64, attention="math"), _spec("tiny-kl", "decode")]
    doc = tc.record(path, [trace(s) for s in specs])
    math_e, fused = (doc["entries"][s.key] for s in specs)
    tokens = (64 // get_spec("tiny-kl").spatial_factor) ** 2  # one head: a tokens x tokens score matrix
    assert math_e["softmax_mask_bytes"] == tokens**2 and "softmax_mask_bytes" not in fused
    assert tc.incomplete(doc) == []
    del math_e["softmax_mask_bytes"]
    path.write_text(tc.dumps(doc))
    assert tc.incomplete(tc.read_cache(path)) == [specs[0].key]
    res = CliRunner().invoke(app, ["fit", "--traces", str(path), "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 1 and "1 dry runs lack records this vaemem reads" in res.output
    math_e["softmax_mask_bytes"] = "1"
    path.write_text(tc.dumps(doc))
    with pytest.raises(VaememError, match="softmax_mask_bytes must be an integer"):
        tc.read_cache(path)


def test_a_reused_fake_model_gives_what_a_fresh_build_gives():
    """A process reuses a zoo model's fake build across dry runs of one op and dtype: after a sliced, a tiled, a
    math-path, a decomposed and another overlap's dry run, each next one equals the same dry run of a fresh
    build."""
    from vaemem.tracing import trace as tr

    specs = [TraceSpec("tiny-kl", "decode", "fp32", 128, 96, batch=2, slicing=True),
             TraceSpec("tiny-kl", "decode", "fp32", 128, 96, batch=2),
             TraceSpec("tiny-kl", "decode", "fp32", 128, 96, tile=32),
             TraceSpec("tiny-kl", "decode", "fp32", 128, 96, attention="math"),
             TraceSpec("tiny-kl", "decode", "fp32", 128, 96),
             TraceSpec("tiny-wan", "encode", "fp32", 64, 48, frames=5, conv3d="decomposed"),
             TraceSpec("tiny-wan", "encode", "fp32", 64, 48, frames=5),
             # diffusers' enable_tiling keeps the model's value for a 0 argument: an overlap of 0 after 0.5
             TraceSpec("tiny-cogvideox", "decode", "fp32", 128, 96, frames=9, tile=32, overlap=0.5),
             TraceSpec("tiny-cogvideox", "decode", "fp32", 128, 96, frames=9, tile=32, overlap=0.0),
             TraceSpec("tiny-hunyuanvideo-1.5", "decode", "fp32", 128, 96, frames=5, tile=64, overlap=0.5),
             TraceSpec("tiny-hunyuanvideo-1.5", "decode", "fp32", 128, 96, frames=5, tile=64, overlap=0.0)]
    reused = []
    for s in specs:
        reused.append(trace(s))
    assert tr._FAKE_MODELS  # the last model is kept
    for s, r in zip(specs, reused):
        tr._FAKE_MODELS.clear()
        fresh = trace(s)
        assert (r.peak_bytes, r.output_bytes, r.attention_peak_bytes, r.peak_module) == \
            (fresh.peak_bytes, fresh.output_bytes, fresh.attention_peak_bytes, fresh.peak_module), s.key


def test_a_tile_no_larger_than_the_spatial_factor_is_refused():
    """Tiles overlap by at least one latent pixel: a tile of the spatial factor would not advance (diffusers would
    keep the model's previous stride)."""
    with pytest.raises(VaememError, match="tile must be larger than 8 px for tiny-wan"):
        trace(TraceSpec("tiny-wan", "decode", "fp32", 128, 96, frames=5, tile=8))
    from vaemem import estimate as est

    with pytest.raises(ValueError, match="tile must be larger than 8 px for sd15"):  # the estimator agrees
        est.working_memory_bytes("sd15", "decode", 512, 512, tile=8, dtype="fp32", backend="onednn",
                                 allocator="glibc-fixed", os="linux")
