"""The zoo: names, shared architectures, parameter counts of the published configs, tiny models run."""

from __future__ import annotations

import inspect

import pytest
import torch

from vaemem.models.build import build_model, configure_tiling, count_parameters, input_shape, make_input, run_op
from vaemem.models.zoo import CLASS_DEFAULTS, PARAMETERS, get_spec, registry

# From ../shared/reference/prior-art.md (random init, whole model).
PUBLISHED_PARAMS = {"sd15": 83_653_863, "sdxl": 83_653_863, "sd3": 83_819_683, "flux1": 83_819_683,
                    "flux2": 84_046_115, "cogview4": 406_100_643, "wan21": 126_892_531, "wan22": 704_688_668,
                    "minimax-h3": 2_603_868_984}


def test_registry_has_every_published_name_and_the_tiny_ones():
    assert set(PUBLISHED_PARAMS) | {"tiny-kl", "tiny-wan", "tiny-minimax-h3"} == set(registry())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_matches_published(name):
    assert count_parameters(name) == PUBLISHED_PARAMS[name] == PARAMETERS[name]


def test_static_parameter_table_matches_meta_builds_of_tiny_models():
    assert set(PARAMETERS) == set(registry())
    for name in ("tiny-kl", "tiny-wan", "tiny-minimax-h3"):
        assert count_parameters(name) == PARAMETERS[name]


def test_identical_architectures_are_known_and_different_ones_are_not():
    reg = registry()
    assert reg["sdxl"].architecture == "sd15"
    assert reg["sd3"].architecture == "flux1"
    distinct = {"sd15", "flux1", "flux2", "cogview4", "wan21", "wan22", "minimax-h3"}
    assert {reg[n].architecture for n in distinct} == distinct


def test_class_defaults_match_diffusers():
    import diffusers

    for cls_name, defaults in CLASS_DEFAULTS.items():
        sig = inspect.signature(getattr(diffusers, cls_name).__init__)
        for key, value in defaults.items():
            assert sig.parameters[key].default == value, (cls_name, key)


def test_geometry_of_real_models():
    assert (get_spec("wan22").spatial_factor, get_spec("wan22").temporal_factor) == (16, 4)
    assert (get_spec("minimax-h3").spatial_factor, get_spec("minimax-h3").ops) == (16, ("encode",))
    assert get_spec("flux2").latent_channels == 32 and get_spec("sdxl").temporal_factor is None


@pytest.mark.parametrize("name,op", [("tiny-kl", "decode"), ("tiny-kl", "encode"), ("tiny-wan", "decode"),
                                     ("tiny-wan", "encode"), ("tiny-minimax-h3", "encode")])
@pytest.mark.parametrize("tile", [None, 32])
def test_tiny_models_run_finite_with_expected_shapes(name, op, tile):
    spec = get_spec(name)
    frames = 5 if spec.is_video else 1
    model = build_model(name, op, "cpu", "fp32")
    configure_tiling(model, spec, tile)
    x = make_input(input_shape(spec, op, 64, 48, 1, frames), "cpu", "fp32")
    with torch.inference_mode():
        y = run_op(model, op, x)
    assert torch.isfinite(y).all()
    if op == "decode":
        assert tuple(y.shape[-2:]) == (48, 64) and y.shape[1] == 3
    else:
        assert tuple(y.shape[-2:]) == (48 // spec.spatial_factor, 64 // spec.spatial_factor)
        assert y.shape[1] == spec.latent_channels


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


def test_minimax_ships_tiled_and_no_tile_turns_it_off():
    spec = get_spec("tiny-minimax-h3")
    model = build_model("tiny-minimax-h3", "encode", "cpu", "fp32")
    assert model.use_tiling is True
    configure_tiling(model, spec, None)
    assert model.use_tiling is False
