"""The zoo: names, shared architectures, parameter counts of the published configs, tiny models run."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from vaemem.errors import VaememError
from vaemem.measuring.point import Point, validate
from vaemem.models.build import (_parameters_on_meta, build_model, configure_tiling, count_parameters, input_shape,
                                 make_input, run_op)
from vaemem.models.zoo import ATTENTION_OPS, CLASS_DEFAULTS, CLASSES, LARGEST_CONV_PARAMETERS, OP_PARAMETERS, PARAMETERS, SAME_LAYERS, get_spec, registry

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"

# From ../shared/reference/prior-art.md (random init, whole model).
PUBLISHED_PARAMS = {"sd15": 83_653_863, "sdxl": 83_653_863, "sd3": 83_819_683, "flux1": 83_819_683,
                    "flux2": 84_046_115, "cogview4": 406_100_643, "wan21": 126_892_531, "wan22": 704_688_668,
                    "minimax-h3": 2_603_868_984}
MORE = ["cogvideox", "hunyuanimage-2.1", "hunyuanvideo", "hunyuanvideo-1.5", "ltx-2", "ltx-2.3", "ltx-video",
        "ltx-video-0.9.5", "mochi", "qwen-image", "sana-dc-ae"]
REAL = sorted([*PUBLISHED_PARAMS, *MORE])
TINY = sorted(n for n, s in registry().items() if s.tiny)


def _meta(name):
    import diffusers

    spec = get_spec(name)
    with _parameters_on_meta():
        return getattr(diffusers, spec.class_name).from_config(spec.config)


def test_registry_has_all_twenty_real_architectures_and_a_tiny_one_per_class():
    assert set(REAL) == {n for n, s in registry().items() if not s.tiny} and len(REAL) == 20
    assert {get_spec(n).family for n in TINY} == {info.family for info in CLASSES.values()}


def test_packaged_configs_are_the_reference_ones():
    if not REFERENCE.exists():
        pytest.skip("no ../shared/reference beside this checkout")
    for file in ("vae_configs.json", "more_vae_configs.json"):
        packaged = json.loads((Path(__file__).parents[1] / "vaemem" / "models" / file).read_text())
        assert packaged == json.loads((REFERENCE / file).read_text())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_matches_published(name):
    assert count_parameters(name) == PUBLISHED_PARAMS[name] == PARAMETERS[name]


@pytest.mark.parametrize("name", MORE + TINY)
def test_static_parameter_table_matches_meta_builds(name):
    assert count_parameters(name) == PARAMETERS[name]


def test_parameter_table_covers_the_zoo():
    assert set(PARAMETERS) == set(registry()) == set(OP_PARAMETERS)


@pytest.mark.parametrize("name", sorted(OP_PARAMETERS))
def test_per_op_parameter_table_matches_meta_builds(name):
    from vaemem.models.build import count_op_parameters

    halves = OP_PARAMETERS[name]
    assert {op: count_op_parameters(name, op) for op in ("decode", "encode")} == halves
    assert halves["decode"] + halves["encode"] <= PARAMETERS[name]


@pytest.mark.parametrize("name", sorted(LARGEST_CONV_PARAMETERS))
def test_largest_convolution_table_matches_meta_builds(name):
    from vaemem.models.build import largest_conv_parameters

    assert set(LARGEST_CONV_PARAMETERS) == set(registry())
    largest = LARGEST_CONV_PARAMETERS[name]
    assert {op: largest_conv_parameters(name, op) for op in ("decode", "encode")} == largest
    assert all(0 < largest[op] <= OP_PARAMETERS[name][op] for op in largest)


@pytest.mark.parametrize("name", sorted(ATTENTION_OPS))
def test_attention_table_matches_meta_builds(name):
    from vaemem.models.build import attention_ops

    assert set(ATTENTION_OPS) == set(registry())
    assert attention_ops(name) == ATTENTION_OPS[name]


@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_split_convolution_flags_match_meta_builds(cls):
    from vaemem.models.build import build_meta
    from vaemem.tracing.trace import SPLIT_CONVS

    name = next(n for n, s in registry().items() if s.class_name == cls)
    spec = get_spec(name)
    found = any(type(m).__name__ in SPLIT_CONVS for op in spec.ops for m in build_meta(spec, op).modules())
    assert found == CLASSES[cls].split_convs


@pytest.mark.parametrize("name", REAL)
def test_geometry_matches_the_built_class(name):
    """The zoo reads factors from the config without torch; the class computes them itself."""
    spec, model = get_spec(name), _meta(name)
    spatial = vars(model).get("spatial_compression_ratio") or model.config.get("spatial_compression_ratio")
    if spatial is not None:
        assert spatial == spec.spatial_factor
    temporal = vars(model).get("temporal_compression_ratio") or model.config.get("temporal_compression_ratio")
    if spec.is_video and temporal is not None:
        assert temporal == spec.temporal_factor
    assert not spec.is_video or spec.info.five_d


def test_identical_architectures_are_known_and_different_ones_are_not():
    reg = registry()
    assert reg["sdxl"].architecture == "sd15"
    assert reg["sd3"].architecture == "flux1"
    assert reg["qwen-image"].architecture == "wan21"
    distinct = set(REAL) - {"sdxl", "sd3", "qwen-image"}
    assert {reg[n].architecture for n in distinct} == distinct


@pytest.mark.parametrize("name,same", sorted(SAME_LAYERS.items()))
def test_declared_same_layers_have_identical_parameter_shapes(name, same):
    a, b = _meta(name), _meta(same)
    assert {k: tuple(v.shape) for k, v in a.state_dict().items()} == {k: tuple(v.shape)
                                                                     for k, v in b.state_dict().items()}


def test_class_defaults_match_diffusers():
    import diffusers

    for cls_name, defaults in CLASS_DEFAULTS.items():
        sig = inspect.signature(getattr(diffusers, cls_name).__init__)
        for key, value in defaults.items():
            default = sig.parameters[key].default
            assert (tuple(default) if isinstance(default, (list, tuple)) else default) == value, (cls_name, key)


def test_geometry_of_real_models():
    assert (get_spec("wan22").spatial_factor, get_spec("wan22").temporal_factor) == (16, 4)
    assert (get_spec("minimax-h3").spatial_factor, get_spec("minimax-h3").ops) == (16, ("encode",))
    assert get_spec("flux2").latent_channels == 32 and get_spec("sdxl").temporal_factor is None
    assert (get_spec("ltx-video").spatial_factor, get_spec("ltx-video").temporal_factor) == (32, 8)
    assert (get_spec("mochi").spatial_factor, get_spec("mochi").temporal_factor) == (8, 6)
    assert get_spec("qwen-image").temporal_factor is None and get_spec("qwen-image").info.five_d
    assert get_spec("sana-dc-ae").spatial_factor == 32 and get_spec("hunyuanimage-2.1").latent_channels == 64


@pytest.mark.parametrize("name,good,bad", [
    ("wan21", 9, 8), ("hunyuanvideo", 17, 16), ("mochi", 19, 17), ("ltx-video", 17, 9 + 4), ("cogvideox", 49, 45), ("cogvideox", 81, 80),
    ("ltx-2", 121, 120), ("hunyuanvideo-1.5", 33, 31), ("minimax-h3", 17, 18),
])
def test_each_class_has_its_own_frame_rule(name, good, bad):
    op = get_spec(name).ops[0]
    f = get_spec(name).spatial_factor
    validate(Point(name, op, "fp32", 2 * f, 2 * f, frames=good, allocator="glibc-fixed"))
    step = get_spec(name).info.frame_step or get_spec(name).temporal_factor
    with pytest.raises(VaememError, match=rf"1 \+ {step}k"):
        validate(Point(name, op, "fp32", 2 * f, 2 * f, frames=bad, allocator="glibc-fixed"))


@pytest.mark.parametrize("name", ["qwen-image", "sana-dc-ae", "hunyuanimage-2.1"])
def test_image_classes_refuse_frames(name):
    f = get_spec(name).spatial_factor
    with pytest.raises(VaememError, match="image model"):
        validate(Point(name, "decode", "fp32", 2 * f, 2 * f, frames=5, allocator="glibc-fixed"))


def test_refused_op_says_why():
    with pytest.raises(VaememError, match="decoder is a ViT"):
        validate(Point("minimax-h3", "decode", "fp32", 64, 64, frames=1, allocator="glibc-fixed"))


def _tiny_cases():
    for name in TINY:
        spec = get_spec(name)
        for op in ("decode", "encode"):
            yield name, op, op in spec.ops


@pytest.mark.parametrize("name,op,supported", list(_tiny_cases()))
@pytest.mark.parametrize("tile", [None, 32])
def test_tiny_models_run_finite_with_expected_shapes(name, op, supported, tile):
    spec = get_spec(name)
    f = spec.spatial_factor
    width, height = 8 * f, 6 * f
    frames = 1 + (spec.info.frame_step or spec.temporal_factor) if spec.is_video else 1
    if not supported:
        with pytest.raises(VaememError, match=spec.refusal(op)[:20]):
            validate(Point(name, op, "fp32", width, height, frames=frames, allocator="glibc-fixed"))
        return
    if tile is not None and tile >= max(width, height):
        tile = max(width, height) // 2 // f * f
    if tile is not None and spec.tiled_refusal(op):
        with pytest.raises(VaememError, match="cannot run a tiled"):
            validate(Point(name, op, "fp32", width, height, frames=frames, tile=tile, allocator="glibc-fixed"))
        return
    validate(Point(name, op, "fp32", width, height, frames=frames, tile=tile, allocator="glibc-fixed"))
    model = build_model(name, op, "cpu", "fp32")
    configure_tiling(model, spec, tile)
    x = make_input(input_shape(spec, op, width, height, 1, frames), "cpu", "fp32")
    with torch.inference_mode():
        y = run_op(model, op, x)
    assert torch.isfinite(y).all()
    if op == "decode":
        assert tuple(y.shape[-2:]) == (height, width) and y.shape[1] == 3
        if spec.info.five_d:
            assert y.shape[2] == frames
    else:
        assert tuple(y.shape[-2:]) == (height // f, width // f)
        assert y.shape[1] == spec.latent_channels
        if spec.info.five_d and spec.family != "minimax":  # MiniMax-H3 encodes in clips of its own length
            assert y.shape[2] == spec.latent_frames(frames)


def test_weights_are_seeded_and_only_the_used_half_is_built():
    a = build_model("tiny-kl", "decode", "cpu", "fp32", seed=0)
    b = build_model("tiny-kl", "decode", "cpu", "fp32", seed=0)
    c = build_model("tiny-kl", "decode", "cpu", "fp32", seed=1)
    wa, wb, wc = (m.decoder.conv_in.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert not any(p.device.type == "meta" for p in a.parameters())
    assert sum(p.numel() for p in a.encoder.parameters()) == 0  # decode never runs the encoder
    enc = build_model("tiny-kl", "encode", "cpu", "fp32")
    assert sum(p.numel() for p in enc.decoder.parameters()) == 0


@pytest.mark.parametrize("tile", [128, 256, 384, 512])
def test_the_spread_tile_rule_is_minimax_split_tiles(tile):
    """The estimator's "spread" rule lays the tiles MiniMax-H3's own _split_tiles does (its code, at its factor of
    16, and at the tiny model's 4), at the overlap vaemem gives it (configure_tiling), rows and columns apart, edges
    cut as the slicing cuts them (a side no multiple of the factor leaves slack the loop cannot spread)."""
    from types import SimpleNamespace

    from diffusers import AutoencoderKLMiniMaxH3

    from vaemem.estimate import sample_stride, tile_sides

    spec = get_spec("tiny-minimax-h3")
    model = build_model("tiny-minimax-h3", "encode", "cpu", "fp32")
    configure_tiling(model, spec, tile)
    assert model.tile_sample_min_overlap_width == tile - sample_stride(tile, spec.spatial_factor, 0.25)
    for factor in (spec.spatial_factor, 16):
        split = AutoencoderKLMiniMaxH3._split_tiles.__get__(SimpleNamespace(spatial_compression_ratio=factor))
        least = tile - sample_stride(tile, factor, 0.25)
        for width, height in [(64, 48), (256, 272), (480, 848), (720, 1280), (1088, 1920), (500, 333), (1920, 1080)]:
            want = []
            for length in (height, width):
                starts, sides, _ = split(length, tile, least)
                want.append([min(s, length - i) for i, s in zip(starts, sides)])
            assert list(tile_sides(width, height, tile, factor, 0.25, spec.tile_stride_rule("encode"))) == want


def test_a_spread_tile_no_larger_than_its_overlap_is_refused():
    from vaemem.estimate import tile_sides

    with pytest.raises(ValueError, match="a 16 px tile with a 16 px overlap cannot cover 64 px"):
        tile_sides(64, 64, 16, 16, 0.25, "spread")


def test_minimax_ships_tiled_and_no_tile_turns_it_off():
    spec = get_spec("tiny-minimax-h3")
    model = build_model("tiny-minimax-h3", "encode", "cpu", "fp32")
    assert model.use_tiling is True
    configure_tiling(model, spec, None)
    assert model.use_tiling is False


def test_hunyuanvideo_15_cannot_run_an_unsliced_batch_in_diffusers_and_says_so():
    """Campaign 36: HunyuanVideo 1.5's decode and encode of a batch of two failed (its attention mask is built for
    one sample). The refusal is diffusers' own: the tiny model of the class fails the same way in plain diffusers
    (when a diffusers release runs it, this test says to drop the refusal), and runs sliced (one sample a call).
    Points and dry runs refuse such a batch, naming why; a sliced one, or one sample, passes."""
    import diffusers

    spec = get_spec("tiny-hunyuanvideo-1.5")
    vae = getattr(diffusers, spec.class_name).from_config(spec.config).eval()
    x = torch.randn(2, 3, 5, 32, 32)
    with torch.no_grad(), pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        vae.encode(x)
    z = torch.randn(2, spec.latent_channels, 2, 2, 2)
    with torch.no_grad(), pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        vae.decode(z)
    vae.enable_slicing()
    with torch.no_grad():
        assert vae.encode(x).latent_dist.mode().shape[0] == 2 and vae.decode(z).sample.shape[0] == 2
    for op in ("decode", "encode"):
        assert spec.batch_refusal(op) and get_spec("hunyuanvideo-1.5").batch_refusal(op)
        with pytest.raises(VaememError, match=f"cannot {op} a batch of 2 unsliced: diffusers 0.42's"):
            validate(Point("hunyuanvideo-1.5", op, "bf16", 256, 160, 2, 9, allocator="glibc-fixed"))
        validate(Point("hunyuanvideo-1.5", op, "bf16", 256, 160, 2, 9, allocator="glibc-fixed", slicing=True))
        validate(Point("hunyuanvideo-1.5", op, "bf16", 256, 160, 1, 9, allocator="glibc-fixed"))
    assert all(not s.batch_refusal(op) for s in registry().values() if s.class_name != spec.class_name
               for op in ("decode", "encode"))
