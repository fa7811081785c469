"""The runtime estimator: the legacy seed rows, exact pricing, cast/batch/frames/tile terms, fallback, errors."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from vaemem import estimate as est
from vaemem.errors import VaememError
from vaemem.measuring.point import check_geometry
from vaemem.models.zoo import get_spec
from conftest import as_schema, unmeasured, with_schema18_lines

MIB = 1024 * 1024


def _coef(groups=(), **extra):
    models = {
        "sdxl": {"architecture": "sd15", "parameters": 83_653_863, "family": "sd", "spatial_factor": 8,
                 "temporal_factor": None, "force_upcast": True},
        "flux1": {"architecture": "flux1", "parameters": 83_819_683, "family": "kl", "spatial_factor": 8,
                  "temporal_factor": None, "force_upcast": True},
        "cogview4": {"architecture": "cogview4", "parameters": 406_100_643, "family": "kl", "spatial_factor": 8,
                     "temporal_factor": None, "force_upcast": True},
        "wan21": {"architecture": "wan21", "parameters": 126_892_531, "family": "wan", "spatial_factor": 8,
                  "temporal_factor": 4, "force_upcast": False},
    }
    for m in models.values():
        m.setdefault("kernel", "conv3d" if m["family"] == "wan" else "conv2d")
    models["sd15"] = dict(models["sdxl"])
    return {"schema_version": 3, "margin": 0.05, "models": models, "groups": list(groups), **extra}


# Structures of the real dry runs (bytes per pixel, one frame; Wan 832x480 bf16 decode: 1318 MiB at 1 frame,
# 3711 at 5, 4044 at 81): enough to test the pricing order without a fit.
STRUCTURES = {
    "sd15/decode/bf16/untiled": {"kind": "frames", "knots": [1], "bytes_per_pixel": [1536.0], "bytes_per_pixel_squared": [0.0], "base_bytes": [0]},
    "cogview4/decode/bf16/untiled": {"kind": "frames", "knots": [1], "bytes_per_pixel": [3072.0], "bytes_per_pixel_squared": [0.0], "base_bytes": [0]},
    "flux1/decode/bf16/untiled": {"kind": "frames", "knots": [1], "bytes_per_pixel": [1536.0], "bytes_per_pixel_squared": [0.0], "base_bytes": [0]},
    "wan21/decode/bf16/untiled": {"kind": "frames", "knots": [1, 5, 81],  # 81: a knot, to price 81 exactly
                                  "bytes_per_pixel": [1318 * MIB / (832 * 480), 3711 * MIB / (832 * 480),
                                                      4044 * MIB / (832 * 480)],
                                  "bytes_per_pixel_squared": [0.0] * 3, "base_bytes": [0] * 3},
}


def _calibration(archs, conv="cudnn", alloc="native", dtype="bf16", os_="linux", op="decode", kernel="conv2d",
                 agree=True, spread=1.05, cls=None):
    c = {"conv_backend": conv, "allocator": alloc, "dtype": dtype, "os": os_, "op": op, "tiled": False}
    lines = {a: {"dry_factor": f, "per_sample_factor": 0.0, "base_bytes": b, "n_points": 5, "dry_bytes_max": 2**31}
             for a, (f, b) in archs.items()}
    return {"calibration": est.calibration_id(c, kernel), **c, "kernel": kernel, "architectures": lines,
            "class": cls or {"dry_factor": max(f for f, _ in archs.values()), "per_sample_factor": 0.0,
                             "base_bytes": max(b for _, b in archs.values()), "n_points": 5 * len(archs),
                             "dry_bytes_max": 2**31}, "agree": agree, "spread": spread}


def _group(arch="sd15", op="decode", conv="cudnn", alloc="native", dtype="fp16", os_="linux", tiled=False,
           slope=1000.0, base=100 * MIB, tile_slope=None):
    g = {"architecture": arch, "op": op, "conv_backend": conv, "allocator": alloc, "dtype": dtype, "os": os_,
         "tiled": tiled, "slope_bytes_per_pixel": slope, "base_bytes": base}
    g["group"] = est.group_id(g)
    if tile_slope is not None:
        g["tile_slope_bytes_per_tile_pixel"] = tile_slope
    return g


# The six "before" rows of prior-art.md's seed table, to the MiB, through the estimator's fallback on platforms
# the file has never seen.
SEED_ROWS = [
    ("sdxl", "fp32", "miopen", "native", "windows", 14650),
    ("sdxl", "fp16", "miopen", "native", "windows", 7200),
    ("sdxl", "fp32", "cudnn", "cudaMallocAsync", "linux", 9050),
    ("flux1", "bf16", "cudnn", "native", "linux", 4400),
    ("cogview4", "bf16", "cudnn", "native", "linux", 4400),
    ("flux1", "bf16", "miopen", "expandable-off", "windows", 7200),
]


@pytest.mark.parametrize("model,dtype,backend,alloc,os_,mib", SEED_ROWS)
def test_legacy_rule_reproduces_the_seed_table(model, dtype, backend, alloc, os_, mib):
    e = est.explain(model, "decode", 1024, 1024, dtype=dtype, backend=backend, allocator=alloc, os=os_,
                    coefficients=_coef())
    assert e.source == "fallback" and e.bytes == e.floor_bytes
    assert e.bytes / MIB == mib


def test_exact_group_prices_slope_times_pixels_plus_base():
    coef = _coef([_group(slope=2500.0, base=300 * MIB)])
    e = est.explain("sdxl", "decode", 1024, 768, dtype="fp16", backend="cudnn", allocator="native", os="linux",
                    coefficients=coef)
    assert (e.source, e.bytes) == ("measured", int(2500.0 * 1024 * 768 + 300 * MIB))
    assert e.cast_bytes == 0 and e.floor_bytes == 0 and e.group == "sd15/decode/cudnn/native/fp16/linux/untiled"


def test_batch_and_frames_scale_the_pixel_term_not_the_base():
    coef = _coef([_group(slope=1000.0, base=500 * MIB), _group(arch="wan21", slope=800.0, base=200 * MIB)])
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux", coefficients=coef)
    one = est.working_memory_bytes("sdxl", "decode", 512, 512, **kw)
    four = est.working_memory_bytes("sdxl", "decode", 512, 512, batch=4, **kw)
    assert four - one == 3 * 1000 * 512 * 512
    video = est.working_memory_bytes("wan21", "decode", 512, 512, frames=17, batch=2, **kw)
    assert video == 800 * 512 * 512 * 34 + 200 * MIB


def test_tile_term_prices_tile_pixels_in_tiled_groups():
    coef = _coef([_group(tiled=True, slope=50.0, base=100 * MIB, tile_slope=2000.0)])
    e = est.explain("sdxl", "decode", 2048, 2048, tile=512, dtype="fp16", backend="cudnn", allocator="native",
                    os="linux", coefficients=coef)
    assert e.bytes == int(50.0 * 2048 * 2048 + 2000.0 * 512 * 512 + 100 * MIB)


def test_cast_term_for_sdxl_fp16_loaded_decoded_in_fp32_is_160_mib():
    coef = _coef([_group(dtype="fp32", slope=1000.0, base=0)])
    e = est.explain("sdxl", "decode", 1024, 1024, dtype="fp32", loaded_dtype="fp16", backend="cudnn",
                    allocator="native", os="linux", coefficients=coef)
    assert e.cast_bytes == 83_653_863 * 2 and round(e.cast_bytes / MIB) == 160
    assert e.bytes == e.envelope_bytes + e.cast_bytes
    narrower = est.explain("sdxl", "decode", 1024, 1024, dtype="fp32", loaded_dtype="fp32", backend="cudnn",
                           allocator="native", os="linux", coefficients=coef)
    assert narrower.cast_bytes == 0


def test_measured_architecture_is_priced_by_its_own_calibration_line():
    coef = _coef(structures=STRUCTURES, calibrations=[_calibration({"sd15": (2.8, 100 * MIB),
                                                                     "cogview4": (2.7, 50 * MIB)})])
    e = est.explain("sdxl", "decode", 1024, 1024, dtype="bf16", backend="cudnn", allocator="native", os="linux",
                    coefficients=coef)
    assert e.source == "measured" and e.bytes == int(2.8 * 1536 * 1024 * 1024 + 100 * MIB)
    assert "2.800 x dry-run peak 1536 MiB + 100 MiB" in e.reason


def test_tiled_video_without_a_structure_is_priced_untiled():
    """A tiled video op without a structure (MiniMax-H3's, taken out of the file: as in one fitted before it had
    one): the fallback prices the untiled request (an upper bound), not the legacy rule with frames as pixels; and
    where its untiled encode was measured (here), the measured line does."""
    doc = json.loads(COMMITTED.read_text())
    for dtype in ("bf16", "fp32"):
        del doc["structures"][f"minimax-h3/encode/{dtype}/tiled"]
    doc["calibrations"] = [c for c in doc["calibrations"] if not c["calibration"].endswith("/encode/tiled")
                           or c["kernel"] != "conv3d"]  # and the tiled points it calibrates (campaign 14)
    kw = dict(frames=85, dtype="bf16", backend="cudnn", allocator="native", os="linux", coefficients=doc)
    untiled = est.working_memory_bytes("minimax-h3", "encode", 848, 480, **kw)
    for tile in (256, 512):
        e = est.explain("minimax-h3", "encode", 848, 480, tile=tile, **kw)
        assert e.source == "fallback" and e.bytes == untiled and "priced as the untiled request, an upper bound" in e.reason
    structured = est.explain("minimax-h3", "encode", 848, 480, tile=256, **{**kw, "coefficients": None})
    assert structured.source == "fallback" and structured.bytes < untiled / 3  # its tiles: 1406 MiB dry, 8672 untiled
    cpu = dict(frames=9, dtype="bf16", backend="onednn", allocator="glibc-fixed", os="linux", coefficients=doc)
    whole = est.explain("minimax-h3", "encode", 512, 512, **cpu)
    tiled = est.explain("minimax-h3", "encode", 512, 512, tile=256, **cpu)
    assert (tiled.bytes, tiled.source, tiled.group) == (whole.bytes, "measured", whole.group)
    assert tiled.reason == whole.reason + "; tiled video has no dry-run structure: priced as the untiled request, " \
        "an upper bound"


def test_a_scaled_loop_tiles_as_diffusers_decides_on_the_sample_size():
    """Wan 2.2's encode decides to tile on the sample size (a 256 px tile of a 512x384 clip: tiled) but cuts the
    patchified clip, where one 256 px tile covers 512 px: two tiles, 512 and 128 px wide. Its decode counts
    sample pixels. A measurement point accepts the same request."""
    assert est.tile_sides(512, 384, 256, 16, 0.25, "sample", 2) == ([384], [512, 128])
    kw = dict(frames=9, dtype="bf16", backend="cudnn", allocator="native", os="linux")
    assert est.working_memory_bytes("wan22", "encode", 512, 384, tile=256, **kw) > 0
    assert 256 in est.largest_tile("wan22", "encode", 512, 384, 10 ** 13, **kw)["priced"]
    check_geometry(get_spec("wan22"), "encode", "bf16", 512, 384, 1, 9, 256)
    with pytest.raises(VaememError, match="no tiling would happen"):
        check_geometry(get_spec("wan22"), "encode", "bf16", 512, 384, 1, 9, 512)


def test_a_tile_past_the_structures_largest_is_refused_and_skipped():
    """HunyuanVideo's tiled structure stops at its grid's 512 px tiles (past about 1100 px its causal mask leads
    and the basis under-prices: 0.66x at 1280 px): a larger tile is refused, not priced; largest_tile skips it."""
    kw = dict(frames=17, dtype="bf16", backend="cudnn", allocator="native", os="linux")
    assert est.working_memory_bytes("hunyuanvideo", "decode", 2560, 1280, tile=512, **kw) > 0
    with pytest.raises(ValueError, match="priced tiled up to 512 px tiles"):
        est.working_memory_bytes("hunyuanvideo", "decode", 2560, 1280, tile=1024, **kw)
    assert est.dry_run_bytes(None, "hunyuanvideo", "decode", 2560, 1280, dtype="bf16", frames=17, tile=1024) is None
    r = est.largest_tile("hunyuanvideo", "decode", 2560, 1280, 10 ** 13, **kw)
    assert r["tile"] == 512 and max(r["priced"]) == 512


def test_the_reason_states_every_term_it_adds():
    """The packaged sd15 bf16 decode line of the AMX Xeon has a per-sample term and, on oneDNN, the copy of the
    largest convolution's weight: the reason's terms add up to the price."""
    e = est.explain("sd15", "decode", 512, 512, batch=2, dtype="bf16", backend="onednn-amx", allocator="glibc-fixed",
                    os="linux")
    m = re.search(r"([\d.]+) x dry-run peak (\d+) MiB \+ ([\d.]+) x one sample's (\d+) MiB \+ (\d+) MiB \+ "
                  r"([\d.]+) x the copy of its largest convolution's weight, (\d+) MiB", e.reason)
    assert m, e.reason
    a, dry, p, dry1, base, c, copy = map(float, m.groups())
    assert c >= 1 and copy > 0
    assert a * dry + p * dry1 + base + c * copy == pytest.approx(e.bytes / MIB, abs=2)


def test_transfer_prices_an_unmeasured_architecture_by_the_class_line_and_says_if_unverified():
    cls = {"dry_factor": 2.9, "per_sample_factor": 0.0, "base_bytes": 120 * MIB, "n_points": 5, "dry_bytes_max": 2**31}
    coef = _coef(structures=STRUCTURES, calibrations=[_calibration({"sd15": (2.8, 100 * MIB)}, agree=False,
                                                                   spread=1.0, cls=cls)])
    e = est.explain("cogview4", "decode", 1024, 1024, dtype="bf16", backend="cudnn", allocator="native",
                    os="linux", coefficients=coef)
    assert e.source == "transfer" and e.bytes == int(2.9 * 3072 * 1024 * 1024 + 120 * MIB)
    assert "UNVERIFIED" in e.reason and e.verified is False
    agreed = _coef(structures=STRUCTURES, calibrations=[_calibration({"sd15": (2.8, 100 * MIB)}, cls=cls)])
    e = est.explain("cogview4", "decode", 1024, 1024, dtype="bf16", backend="cudnn", allocator="native",
                    os="linux", coefficients=agreed)
    assert e.source == "transfer" and "UNVERIFIED" not in e.reason and e.verified is True
    own = est.explain("sd15", "decode", 1024, 1024, dtype="bf16", backend="cudnn", allocator="native",
                      os="linux", coefficients=coef)
    assert own.source == "measured" and own.verified is True
    # another kernel class, or another platform, does not transfer
    other = est.explain("wan21", "decode", 832, 480, frames=81, dtype="bf16", backend="cudnn", allocator="native",
                        os="linux", coefficients=coef)
    assert other.source == "fallback" and other.verified is False


def test_verified_says_what_the_reason_says_on_the_committed_file():
    """Across the committed file's platforms and models: a measured line is verified, the fallback is not, and a
    transfer is exactly where its reason does not say UNVERIFIED (both come from the calibration's ``agree``)."""
    doc = est.load(None)
    platforms = sorted({(c["conv_backend"], c["allocator"], c["dtype"], c["os"]) for c in doc["calibrations"]})
    seen = {"measured": 0, "transfer": 0, "fallback": 0, "unverified": 0, "agreed": 0}
    for model, m in sorted(doc["models"].items()):
        if model.startswith("tiny-"):
            continue
        frames = est.frame_step(m) + 1 if est.frame_step(m) else 1
        for backend, allocator, dtype, os_ in platforms + [("cudnn", "native", "bf16", "linux")]:
            for op in ("decode", "encode"):
                try:
                    e = est.explain(model, op, 256, 256, frames=frames, dtype=dtype, backend=backend,
                                    allocator=allocator, os=os_)
                except ValueError:
                    continue  # an op or dtype this architecture does not run
                assert e.verified == (e.source == "measured" or (e.source == "transfer" and
                                                                 "UNVERIFIED" not in e.reason)), (model, e)
                seen[e.source] += 1
                seen["unverified"] += e.source == "transfer" and not e.verified
                seen["agreed"] += e.source == "transfer" and e.verified  # e.g. CogVideoX's bf16 decode on oneDNN
    assert all(seen.values()), seen  # every case met
    # a tiled transfer its own untiled line prices is vouched for by that line, whatever the class's agreement
    own = est.explain("flux2", "decode", 1024, 1024, tile=512, dtype="bf16", backend="onednn",
                      allocator="glibc-fixed", os="linux")
    assert own.source == "transfer" and "its own untiled line on this platform" in own.reason
    assert "UNVERIFIED" in own.reason and own.verified is True


def test_fallback_scales_the_legacy_rule_by_the_dry_run_ratio_to_the_sd_family():
    coef = _coef(structures=STRUCTURES)
    kw = dict(dtype="bf16", backend="cudnn", allocator="native", os="linux", coefficients=coef)
    cog = est.explain("cogview4", "decode", 1024, 1024, **kw)
    legacy = est.legacy_bytes("decode", 1024, 1024, dtype="bf16", backend="cudnn", sd_family=False)
    assert cog.source == "fallback" and cog.bytes == 2 * legacy  # CogView4's dry run is twice the SD family's
    assert cog.bytes > 8342 * MIB  # the seeds' measured CogView4 cuDNN bf16 demand is not under-reserved
    flux = est.explain("flux1", "decode", 1024, 1024, **kw)
    assert flux.bytes == legacy == 4400 * MIB
    # a clip: the legacy rule of one frame times the clip's dry run over one SD frame's, never pixels x frames
    wan = est.explain("wan21", "decode", 832, 480, frames=81, **kw)
    one = est.legacy_bytes("decode", 832, 480, dtype="bf16", backend="cudnn", sd_family=False)
    assert wan.bytes == int(one * 4044 / (1536 * 832 * 480 / MIB))
    assert 1.5 * 4044 * MIB <= wan.bytes <= 7 * 4044 * MIB  # issue 10's goal
    assert wan.bytes < 0.1 * est.legacy_bytes("decode", 832, 480, dtype="bf16", backend="cudnn", sd_family=False,
                                               frames=81)


def test_structure_is_linear_between_knots_and_extrapolates_the_last_segment():
    s = {"kind": "frames", "knots": [1, 5, 9], "bytes_per_pixel": [10.0, 30.0, 34.0],
         "bytes_per_pixel_squared": [0.0, 0.0, 0.0], "base_bytes": [100, 100, 100]}
    assert est.structure_bytes(s, 10, 10, 1, 1, None) == 10 * 100 + 100
    assert est.structure_bytes(s, 10, 10, 1, 3, None) == 20 * 100 + 100
    assert est.structure_bytes(s, 10, 10, 2, 7, None) == 2 * (32 * 100 + 100)
    assert est.structure_bytes(s, 10, 10, 1, 17, None) == 42 * 100 + 100
    s["bytes_per_pixel_squared"] = [1.0, 1.0, 1.0]
    assert est.structure_bytes(s, 10, 10, 1, 1, None) == 10 * 100 + 100**2 + 100


def test_the_tiles_are_cut_as_diffusers_loops_cut_them():
    # 1024 px, 256 px tiles, factor 8, overlap 0.25: latent 128 stepped by int(32 * 0.75) = 24 from 0 to 120,
    # five whole tiles and one of the 8 latent px left
    assert est.tile_sides(1024, 1024, 256, 8, 0.25) == ([256] * 5 + [64], [256] * 5 + [64])
    assert est.tile_sides(1024, 512, 512, 8, 0.25) == ([512, 128], [512, 512, 256])  # stride 48 latent px
    # an encode of those classes steps int(296 x 0.75) = 222 sample px: 5 rows, the last 200 px (diffusers'
    # AutoencoderKL._tiled_encode); the latent rule would step 27 latent px = 216
    assert est.tile_sides(1088, 1088, 296, 8, 0.25, "pixel")[0] == [296, 296, 296, 296, 200]
    assert len(est.tile_sides(1088, 1088, 296, 8, 0.25, "latent")[0]) == 6
    # DC-AE (given a stride) with 320 px tiles at factor 32: the overlap 80 px rounds down to 64, a step of 256
    assert est.tile_sides(1024, 1024, 320, 32, 0.25, "sample")[0] == [320, 320, 320, 256]
    # Wan 2.2's encode cuts its patchified 768x512 input into 256 px tiles 192 apart: 512 px tiles 384 apart
    assert est.tile_sides(1536, 1024, 256, 16, 0.25, "sample", 2) == ([512, 512, 256], [512, 512, 512, 384])


def test_the_tiled_peak_is_at_the_tile_whose_working_set_on_top_of_the_store_is_largest():
    # rows [512, 128] x columns [512, 512, 256] in order: areas 262144, 262144, 131072, 65536, 65536, 32768
    areas = [262144, 262144, 131072, 65536, 65536, 32768]
    stored = [sum(areas[:k]) for k in range(6)]
    for a, s in ((1000.0, 1.0), (10.0, 1.0), (1.0, 100.0)):
        v = [a * x + s * y for x, y in zip(areas, stored)]
        k = v.index(max(v))
        assert est.tiled_peak_terms(1024, 512, 512, 8, 0.25, a, s) == (areas[k], stored[k], sum(areas), 0.0)
    assert est.tiled_peak_terms(1024, 512, 512, 8, 0.25, 1000.0, 1.0)[:2] == (262144, 262144)  # the second whole
    # tile, with the first stored; the last tile
    assert est.tiled_peak_terms(1024, 512, 512, 8, 0.25, 1.0, 100.0) == (32768, sum(areas[:5]), sum(areas), 0.0)


def test_fallback_never_prices_below_legacy():
    coef = _coef([_group(arch="sd15", dtype="fp32", slope=1.0, base=MIB)])
    for res in (256, 512, 1024, 2048):
        for backend in ("cudnn", "miopen", "xpu"):
            e = est.explain("sdxl", "decode", res, res, dtype="fp32", backend=backend, allocator="native",
                            os="windows", coefficients=coef)
            assert e.bytes >= est.legacy_bytes("decode", res, res, dtype="fp32", backend=backend, sd_family=True)


@pytest.mark.parametrize("kwargs,message", [
    (dict(model="nope"), "no model 'nope' in the coefficient file .*; it has: cogview4, flux1, sd15, sdxl, wan21"),
    (dict(model="SDXL"), r"no model 'SDXL' in the coefficient file \(did you mean sdxl\?\)"),
    (dict(model="wan21", frames=8), r"clips of 1 \+ 4k frames"),
    (dict(allocator="nativ"), "unknown allocator 'nativ'; choose one of: native, cudaMallocAsync"),
    (dict(os="Linux"), "unknown os 'Linux'; choose one of: linux, windows, darwin"),
    (dict(os="win32"), "unknown os 'win32'"),
    (dict(width=True), "width must be a positive integer"),
    (dict(width=512.0), "width must be a positive integer"),
    (dict(tile=1024), "not smaller"),
    (dict(op="blur"), "unknown op 'blur'"),
    (dict(dtype="fp8"), "unknown dtype 'fp8'"),
    (dict(loaded_dtype="int8"), "unknown loaded_dtype"),
    (dict(cast="op"), "cast='op' says which weights were cast from loaded_dtype: give loaded_dtype"),  # ignored before
    (dict(backend="tpu"), "unknown backend 'tpu'; choose one of: cudnn, miopen"),
    (dict(width=0), "width must be a positive integer"),
    (dict(width=1004), "multiples of 8"),
    (dict(batch=-1), "batch must be a positive"),
    (dict(batch=4097), "batch must be at most 4096 samples, got 4097"),  # 10**20 once priced, inexactly
    (dict(frames=5), "image model"),
    (dict(tile=100), "tile must be a positive multiple of 8"),
    (dict(cast="half"), "unknown cast 'half'; choose one of: model, op"),
    (dict(width=True, height=7), "width must be a positive integer"),
    (dict(dtype="bf16"), "no coefficient line for dtype bf16 .* measured dtypes there: fp16"),
    (dict(allocator="glibc"), "allocator glibc does not run with backend cudnn; a GPU backend takes one of: native"),
    (dict(backend="onednn"), "allocator native does not run with backend onednn; a CPU backend takes one of: glibc"),
    (dict(backend="onednn", allocator="system"), "allocator system is not the CPU allocator of os linux"),
    (dict(backend="aten", allocator="glibc-fixed", os="windows"), "not the CPU allocator of os windows: system is"),
    (dict(backend="mps"), "backend mps does not run on os linux: mps runs on darwin only"),
    (dict(os="darwin"), "backend cudnn does not run on os darwin: the GPU backend of darwin is mps"),
    (dict(backend="mps", os="darwin", allocator="cudaMallocAsync"), "does not run with backend mps: mps takes native"),
])
def test_errors_are_value_errors_naming_the_valid_choices(kwargs, message):
    args = dict(model="sdxl", op="decode", width=1024, height=1024, dtype="fp16", backend="cudnn",
                allocator="native", os="linux", coefficients=_coef([_group()]))
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        est.working_memory_bytes(args.pop("model"), args.pop("op"), args.pop("width"), args.pop("height"), **args)


def test_file_is_read_once_and_newer_schemas_are_refused(tmp_path):
    est.clear_cache()
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_coef([_group()])))
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux", coefficients=path)
    first = est.working_memory_bytes("sdxl", "decode", 512, 512, **kw)
    path.write_text("garbage")  # cached: not read again
    assert est.working_memory_bytes("sdxl", "decode", 512, 512, **kw) == first
    est.clear_cache()
    path.write_text(json.dumps({"schema_version": est.SCHEMA_VERSION + 1}))
    with pytest.raises(ValueError, match=rf"newer than this estimator reads \(3-{est.SCHEMA_VERSION}\)"):
        est.load(path)
    for old in (1, 2):  # 2 lacks the split convolutions and floors a file of 3 may hold: refused, not misread
        est.clear_cache()
        path.write_text(json.dumps({"schema_version": old, "groups": []}))
        with pytest.raises(ValueError, match="refit it from the measurements with `vaemem fit`"):
            est.load(path)
    # another file of ours is not an old coefficient file to refit: a dry-run cache, a measurement line
    for other in ({"schema_version": 1, "entries": {}, "entries_sha256": "0"},
                  {"schema_version": 1, "point_key": "sd15/decode/fp32/64x64/b1/f1/t0/glibc-fixed/cpu"}):
        est.clear_cache()
        path.write_text(json.dumps(other))
        with pytest.raises(ValueError, match=r"is not a vaemem coefficient file \(it has no list of groups\)"):
            est.load(path)
    est.clear_cache()


def test_group_ids_agree_with_the_fitter():
    from vaemem.fit import coefficients

    assert coefficients.group_id is est.group_id  # one owner: the estimator


def test_detect_allocator_reads_the_environment():
    assert est.detect_allocator("cudnn", {"PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync"}) == "cudaMallocAsync"
    assert est.detect_allocator("miopen", {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}) == "expandable"
    assert est.detect_allocator("cudnn", {}) == "native"
    assert est.detect_allocator("onednn", {"MALLOC_MMAP_THRESHOLD_": "65536"}) == "glibc-fixed"


def test_importing_the_estimator_imports_no_heavy_package():
    code = ("import sys, vaemem.estimate; heavy = {'torch', 'diffusers', 'pandas', 'numpy', 'scipy'} & "
            "set(m.split('.')[0] for m in sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_estimator_imports_nothing_from_vaemem():
    """So an app can copy the one file."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(est))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [n for n in names if n.startswith("vaemem")]


def test_numpy_integers_are_sizes():
    np = pytest.importorskip("numpy")
    coef = _coef([_group()])
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux", coefficients=coef)
    assert est.working_memory_bytes("sdxl", "decode", np.int64(1024), np.int32(768), batch=np.int64(2), **kw) == \
        est.working_memory_bytes("sdxl", "decode", 1024, 768, batch=2, **kw)


def test_structures_never_fall_with_area_nor_go_negative():
    """A concave fit (a base that matters at small sizes) must not turn into a falling or negative price."""
    s = {"kind": "frames", "knots": [1], "bytes_per_pixel": [10.0], "bytes_per_pixel_squared": [-1e-6],
         "base_bytes": [0]}
    assert est.structure_bytes(s, 10**4, 10**4, 1, 1, None) == 0.0


def test_wan_tiled_decode_is_priced_by_its_tiled_structure():
    """Wan 2.1's tiled decode has a structure: an unmeasured platform prices its tiled dry run (881.7 MiB at 832x480
    x 81 frames with 256 px tiles, a fresh dry run's figure: past the structure's last knot), not the untiled
    request; this CPU prices it by its measured calibration (campaign 10) and refuses a tile below the structure's."""
    kw = dict(frames=81, dtype="fp16", backend="cudnn", allocator="native", os="linux")
    untiled = est.working_memory_bytes("wan21", "decode", 832, 480, **kw)
    tiled = est.explain("wan21", "decode", 832, 480, tile=256, **kw)
    assert tiled.source == "fallback" and "untiled" not in tiled.reason and tiled.bytes < untiled / 3
    dry = est.dry_run_bytes(None, "wan21", "decode", 832, 480, dtype="fp16", frames=81, tile=256)
    assert dry == pytest.approx(881.6875 * MIB, rel=0.001)
    assert f"dry-run peak {dry / MIB:.0f} MiB" in tiled.reason
    cpu = dict(frames=5, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    e = est.explain("wan21", "decode", 512, 512, tile=256, **cpu)
    assert (e.source, e.group) == ("measured", "conv3d/onednn/glibc-fixed/fp32/linux/decode/tiled")
    with pytest.raises(ValueError, match="priced tiled from 256 px tiles up"):
        est.working_memory_bytes("wan21", "decode", 512, 512, tile=128, **cpu)


def test_a_tiled_fallback_scales_with_batch():
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux", tile=512, coefficients=_coef())
    one = est.working_memory_bytes("sdxl", "decode", 1024, 1024, **kw)
    assert est.working_memory_bytes("sdxl", "decode", 1024, 1024, batch=4, **kw) == 4 * one


def test_a_pixel_line_far_outside_its_range_is_raised_to_the_legacy_rule_and_the_clip():
    flat = _group(arch="wan21", tiled=True, slope=0.0, base=150 * MIB, tile_slope=0.0)
    flat["pixels_max"] = 256 * 256 * 5
    e = est.explain("wan21", "decode", 1920, 1088, frames=81, tile=256, dtype="fp16", backend="cudnn",
                    allocator="native", os="linux", coefficients=_coef([flat]))
    clip = 3 * 81 * 1920 * 1088 * 2
    assert e.bytes == est.legacy_bytes("decode", 1920, 1088, dtype="fp16", backend="cudnn", sd_family=False,
                                       tile=256) + clip
    assert "raised to the legacy rule of one frame plus the decoded clip" in e.reason
    assert e.floor_bytes == e.envelope_bytes == e.bytes  # the floor that priced it, as a fallback reports its own
    inside = est.explain("wan21", "decode", 512, 256, frames=5, tile=256, dtype="fp16", backend="cudnn",
                         allocator="native", os="linux", coefficients=_coef([flat]))
    assert inside.floor_bytes == 0 and "raised" not in inside.reason


COMMITTED = __import__("pathlib").Path(__file__).parent.parent / "vaemem" / "coefficients.json"


MUTATIONS = [  # (where in the committed file, new value or DELETE, what the error must name)
    # a key that names no architecture of the file prices nothing: a typo would drop a platform to the fallback
    (("groups", 0, "architecture"), "nope", "groups[0].architecture must be an architecture of the file's models"),
    (("calibrations", 0, "architectures", "nope"), {}, "architectures must be keyed by architectures of the file's"),
    (("structures", "garbage"), {}, "structures must be keyed ARCHITECTURE/OP/DTYPE/TILING[/math]"),
    (("structures", "sd15/decode/fp64/untiled"), {}, "got 'sd15/decode/fp64/untiled'"),
    (("structures", "nope/decode/fp32/untiled"), {}, "of an architecture of the file's models"),
    # the tiles a price loops over grow as (1 - overlap)^-2: 0.999 took 6 s at 16384 px
    (("structures", "sd15/decode/fp32/tiled", "overlap"), 0.999, "tiled.overlap must be at most 0.5"),
    (("calibrations",), "DELETE", "lacks calibrations: not a vaemem coefficient file"),  # else: the fallback, unsaid
    (("structures",), "DELETE", "lacks structures: not a vaemem coefficient file"),
    (("groups", 0, "base_bytes"), "DELETE", "groups[0].base_bytes is missing"),
    (("groups", 0, "slope_bytes_per_pixel"), -3.0, "groups[0].slope_bytes_per_pixel must be a non-negative number"),
    (("groups", 0, "slope_bytes_per_pixel"), "12", "must be a non-negative number at most 1e+15, got '12'"),
    (("groups", 0, "base_bytes"), -(1 << 40), "groups[0].base_bytes must be a non-negative number"),
    # a base below zero priced an 8x8 request at -7957284 bytes: the fit bounds it at 0, so must the reader
    (("groups", 0, "base_bytes"), -1000.0, "groups[0].base_bytes must be a non-negative number"),
    (("groups", 0, "group"), "DELETE", "groups[0].group is missing"),  # pricing names it: a KeyError there
    (("models", "sd15", "parameters"), 10**20, "models.sd15.parameters must be a non-negative integer at most 1e+15"),
    (("calibrations", 0, "class", "dry_bytes_max"), 0, "class.dry_bytes_max must be a positive number"),
    # a negative quadratic term passes the 64 px and 1024 px probes and clamps a 4096 px decode's peak to 0
    (("structures", "sd15/decode/fp32/untiled", "bytes_per_pixel_squared"), [-1e-9],
     "bytes_per_pixel_squared must be non-negative"),
    (("groups", 0, "tiled"), "no", "groups[0].tiled must be true or false"),
    (("calibrations", 0, "class", "dry_factor"), -1.0, "calibrations[0].class.dry_factor must be a non-negative"),
    (("calibrations", 0, "class", "dry_factor"), float("nan"), "calibrations[0].class.dry_factor"),
    (("calibrations", 0, "kernel"), "conv4d", "calibrations[0].kernel must be conv2d or conv3d"),
    (("calibrations", 0, "architectures"), [], "calibrations[0].architectures must be a JSON object"),
    # schema 14: a variant's lines (calibrations[13]: SD1.5's fp32 encode on oneDNN, with its math-path points)
    (("calibrations", 13, "variants", "nosuch/math"), {}, "variants.nosuch/math must be a key of architectures"),
    (("calibrations", 13, "variants", "sd15/tiled"), {}, "and one of /sliced, /math, /sliced/math"),
    (("calibrations", 13, "variant_transfer_lines", "sd15/math"), "DELETE", "one line per entry of variants"),
    (("calibrations", 13, "variants"), [], "calibrations[13].variants must be a JSON object"),
    (("calibrations", 13, "variant_transfer_lines", "sd15/math", "floor_bytes"), 1, "floor_bytes must be absent"),
    (("models", "sd15", "spatial_factor"), 0, "models.sd15.spatial_factor must be a positive integer"),
    (("models", "sd15", "parameters"), "DELETE", "models.sd15.parameters is missing"),
    (("structures", "sd15/decode/fp32/untiled", "knots"), [5, 1], "knots must be increasing positive integers"),
    # a convolution's laws: a negative slope would take a transient away as the size grows
    (("structures", "ltx-2/decode/fp32/untiled", "conv_transients", 0, 2, 0), [-96.0, 0.0, 1e6],
     "rule laws (null: always on oneDNN, or [a >= 0, b >= 0, c])"),
    (("structures", "ltx-2/decode/fp32/untiled", "conv_transients", 0, 3, 1), [27.0, -1.0, 0.0],
     "im2col laws [a >= 0, b >= 0, c]"),
    (("structures", "ltx-2/decode/fp32/untiled", "conv_transients", 0, 6, 1), [27.0, 0.0],
     "the smallest call's rule and im2col laws"),
    (("structures", "ltx-2/decode/fp32/untiled", "conv_transients", 0, 4, 1), -2,
     "channels-last thresholds (null: never, or elements >= -1)"),
    (("structures", "sd15/decode/fp32/untiled", "bytes_per_pixel"), [-1.0], "bytes_per_pixel must be non-negative"),
    (("structures", "sd15/decode/fp32/untiled", "base_bytes"), [-1e15], "prices 64x64 x 1 frames at zero or less"),
    (("structures", "sd15/decode/fp32/tiled", "coef"), [[0, 0, 0, -1]], "with 256 px tiles at zero or less"),
    (("structures", "sd15/decode/fp32/tiled", "coef"), [0, 0, 0, -1], "coef must be 1 lists (one per knot)"),
    (("structures", "sd15/decode/fp32/tiled", "coef"), [[-1, 0, 0, 1e9]], "bytes per tile pixel >= 0"),
    (("structures", "sd15/decode/fp32/tiled", "coef"), [[3072, 12, 24, 0, 0, 0]], "per output pixel in the assembly"),
    (("structures", "sd15/decode/fp32/tiled", "coef"), [[3072, 12, 24, 0, -1e-6]], "per squared tile pixel >= 0"),
    (("structures", "hunyuanvideo/decode/bf16/tiled", "windows", "op"), "both", 'windows.op must be "decode"'),
    (("structures", "hunyuanvideo/decode/bf16/tiled", "windows", "stride_frames"), 20,
     "windows.stride_frames must be at most frames"),
    (("structures", "hunyuanvideo/encode/bf16/tiled", "windows", "bytes_per_pixel_frame"), -1,
     "bytes_per_pixel_frame"),
    (("structures", "hunyuanvideo/decode/bf16/tiled", "windows", "stride_frames"), 2,
     "windows.stride_frames must be a multiple of temporal_factor 4"),
    (("structures", "hunyuanvideo/decode/bf16/tiled", "tile_max"), 128, "tile_max must be an int >= tile_min"),
    (("structures", "hunyuanvideo/decode/bf16/tiled", "windows", "op"), "encode", "its key's op"),
    (("structures", "sd15/decode/fp32/tiled", "stride_rule"), "px", 'stride_rule must be one of "latent", "pixel", "sample", "spread"'),
    (("structures", "wan21/decode/bf16/tiled", "knots"), [1, 5], "coef must be 2 lists (one per knot)"),
    (("structures", "wan21/decode/bf16/tiled", "coef", -1), [0, 0, 0, -1], "x 17 frames with 256 px tiles at zero"),
    (("structures", "sd15/decode/fp32/tiled", "tile_min"), -256, "tile_min must be an int > 0"),
    (("structures", "sd15/decode/fp32/tiled", "kind"), "cubic", 'kind must be "frames" or "tiled"'),
    (("groups",), {}, "lacks groups"),
    (("structures", "sd15/decode/fp32/untiled", "area_min"), "4096", "area_min must be a non-negative integer"),
    (("models", "sd15", "ops"), [["decode"]], "models.sd15.ops must be a list of decode, encode"),
    (("calibrations", 0, "class", "dry_factor"), 1e308, "must be a non-negative number at most 1e+15"),
    (("models", "sdxl", "architecture"), "nosuch", "models.sdxl.architecture 'nosuch' is not a model of the file"),
    (("calibrations", 0, "conv_backend"), "bogus", "calibrations[0].conv_backend must be one of cudnn"),
    (("calibrations", 0, "tiled"), True, "is not its key's id"),
    (("groups", 0, "op"), "decodee", "groups[0].op must be one of decode, encode"),
    (("groups", 0, "dtype"), "fp64", "groups[0].dtype must be one of fp16, bf16, fp32"),
    (("models", "sd15", "op_parameters", "decode"), 10**12, "op_parameters.decode must be at most parameters"),
    (("structures", "mochi/encode/bf16/untiled", "split", "layers", 5, 0), [1, 1, 1, 0, 3, 1],
     "split.layers[5][0] must be [elements per padded pixel > 0"),
    (("structures", "mochi/encode/bf16/untiled", "split", "layers"), [[]], "split.layers must be 6 lists"),
    (("structures", "mochi/encode/bf16/untiled", "split", "layers", 5), [], "split.layers must be the same layers at"),
    (("structures", "mochi/encode/bf16/untiled", "split", "bytes_per_element"), 4, "bytes_per_element must be 2"),
    (("structures", "sd15/decode/fp32/tiled", "split"), {}, "split must be absent on a tiled structure"),
    (("structures", "wan22/encode/bf16/tiled", "tile_scale"), 3, "tile_scale must be an int > 0 that divides "
     "spatial_factor 16"),
    (("structures", "wan22/encode/bf16/tiled", "tile_scale"), 2.0, "tile_scale must be an int > 0"),
    (("structures", "wan22/encode/bf16/tiled", "held_bytes_per_pixel_frame"), -6.0, "held_bytes_per_pixel_frame"),
    (("structures", "mochi/decode/bf16/tiled", "tile_working_set", "kind"), "tiled",
     'tile_working_set.kind must be "frames"'),
    (("structures", "mochi/decode/bf16/tiled", "tile_working_set", "bytes_per_pixel", 0), -1.0,
     "tile_working_set.bytes_per_pixel must be non-negative"),
    (("structures", "mochi/decode/bf16/tiled", "tile_working_set"), [], "tile_working_set must be a JSON object"),
    (("structures", "minimax-h3/encode/bf16/tiled", "clips", "frames"), 13, "clips.frames must be the last knot (17)"),
    (("structures", "minimax-h3/encode/bf16/tiled", "clips", "frames"), 1, "clips.frames must be the last knot (17)"),
    (("structures", "minimax-h3/encode/bf16/tiled", "clips"), "DELETE",
     'stride_rule must be "spread" exactly where the structure has clips'),
    (("structures", "sd15/decode/fp32/tiled", "stride_rule"), "spread",
     'stride_rule must be "spread" exactly where the structure has clips'),
    (("structures", "minimax-h3/encode/bf16/untiled", "clips", "frames"), 21, "clips.frames must be a knot"),
    (("structures", "minimax-h3/encode/fp32/untiled", "clips"), [17], "clips must be a JSON object"),
    (("structures", "minimax-h3/encode/bf16/tiled", "clips", "pad_bytes_per_pixel_frame"), -6,
     "clips.pad_bytes_per_pixel_frame must be a non-negative number"),
    (("structures", "minimax-h3/encode/bf16/tiled", "clips", "output_bytes_per_pixel"), "DELETE",
     "clips.output_bytes_per_pixel is missing"),
    (("schema_version",), 2.0, "no integer schema_version"),
    (("schema_version",), True, "no integer schema_version"),
    # fields whose loss changed a price without a word (a helper's review of 590a29d)
    (("structures", "wan22/encode/bf16/tiled", "held_bytes_per_pixel_frame"), "DELETE",
     "held_bytes_per_pixel_frame must be present exactly where tile_scale is above 1"),
    (("structures", "sd15/decode/fp32/tiled", "held_bytes_per_pixel_frame"), 0.0,
     "held_bytes_per_pixel_frame must be present exactly where tile_scale is above 1"),
    (("structures", "sd15/decode/fp32/tiled", "tile_min"), "DELETE", "tile_min must be an int > 0"),
    (("calibrations", 3, "architectures", "sd15", "small"), "DELETE",
     "architectures.sd15.small must be present exactly where n_points_below_domain"),
    (("calibrations", 3, "architectures", "sd15", "n_points_below_domain"), 0,
     "architectures.sd15.small must be present exactly where n_points_below_domain (0)"),
    (("calibrations", 0, "class", "small"), {}, "calibrations[0].class.small must be present exactly where"),
    (("calibrations", 17, "architectures", "wan21", "single_frame_factor"), "DELETE",
     "calibrations[17].architectures.wan21.single_frame_factor is missing"),
    (("calibrations", 17, "class", "single_frame_bytes"), "DELETE",
     "calibrations[17].class.single_frame_bytes is missing"),
    # a line's envelope fitted on bytes (schema 16), the lower of the two prices
    (("calibrations", 23, "architectures", "ltx-video", "flat", "dry_factor"), -1.0,
     "calibrations[23].architectures.ltx-video.flat.dry_factor must be a non-negative number"),
    (("calibrations", 23, "class", "flat", "base_bytes"), "DELETE", "calibrations[23].class.flat.base_bytes is missing"),
    (("calibrations", 23, "class", "flat"), [1.0], "calibrations[23].class.flat must be a JSON object"),
    (("calibrations", 23, "class", "flat"), {"dry_factor": 0.0, "per_sample_factor": 0.0, "base_bytes": 1},
     "calibrations[23].class.flat must be a branch that grows with the dry-run peak"),
    (("calibrations", 23, "class", "flat", "resident_bytes"), 5,
     "calibrations[23].class.flat must be only the terms dry_factor, per_sample_factor, base_bytes, got "
     "'resident_bytes'"),
]


def test_a_transfer_on_onednn_adds_the_requests_own_convolution_transient():
    """CogVideoX's untiled fp32 decode, as if not measured on these CPUs (campaign 37 measured it): it transfers the
    highest of the conv3d class line and each architecture's line. At one sample they are in the larger of the dry run
    with oneDNN's buffers and the most a convolution's call holds (:func:`est.call_peak`: the bytes live there and its
    copy or buffer), and add nothing; at two samples (every convolution on oneDNN) in the dry run, plus their
    weight_copy_factor x the transient of this request (:func:`est.conv_transient_bytes`); in bf16 on oneDNN the copy
    of its largest convolution (7,077,888 elements); the aten (reference-path) bf16 calibration adds nothing. The
    reason names the line that set the price and how far beyond its points it went."""
    from vaemem.models.zoo import LARGEST_CONV_PARAMETERS

    doc = unmeasured(json.loads(COMMITTED.read_text()))
    kw = dict(dtype="fp32", frames=9, backend="onednn", allocator="glibc-fixed", os="linux", coefficients=doc)
    e = est.explain("cogvideox", "decode", 320, 192, **kw)
    assert e.source == "transfer" and "what a convolution holds at this size" not in e.reason
    (calib,) = [c for c in doc["calibrations"] if c["calibration"] == e.group]
    line, dry = calib["class"], est.dry_run_bytes(None, "cogvideox", "decode", 320, 192, dtype="fp32", frames=9)
    s = doc["structures"]["cogvideox/decode/fp32/untiled"]
    # on oneDNN the lines are in the dry run with the buffers its ops hold: k x the plain peak, floored on the plain
    k = est.onednn_hidden_factor("onednn", s, frames=9)  # its 9-frame clips' (schema 17: one per knot)
    assert k == est.hidden_factor_at(s["onednn_hidden_factor"], s["knots"], 9)
    assert ("for the buffers oneDNN's ops hold" in e.reason) == (k != 1)
    call = est.call_peak(s, "fp32", "onednn", False, 1, 320, 192, 9)
    top_dry = max(k * dry, call)
    lines = [line, *calib["transfer_lines"].values()]
    assert e.bytes == int(max(est.calibration_bytes(ln, top_dry, top_dry, False, 320 * 192, live=dry)
                              for ln in lines))
    # two samples: the dry run, and the transient on top
    two = est.explain("cogvideox", "decode", 320, 192, batch=2, **kw)
    dry2 = est.dry_run_bytes(None, "cogvideox", "decode", 320, 192, dtype="fp32", frames=9, batch=2)
    transient = est.conv_transient_bytes(doc["models"]["cogvideox"], s, "decode", "fp32", "onednn", 320, 192, 2, 9,
                                         False)
    assert transient > 0 and f"{transient / MIB:.0f} MiB" in two.reason
    assert line["weight_copy_factor"] == 1 + doc["margin"]
    assert {ln["weight_copy_factor"] for ln in lines} == {1 + doc["margin"]}
    assert two.bytes == int(est.transfer_bytes(calib, k * dry2, k * dry, False, 320 * 192, transient, dry2)[0])
    top = est.transfer_bytes(calib, top_dry, top_dry, False, 320 * 192, live=dry)[1]
    # the highest line prices, and the reason names it first: LTX-Video 0.9.5's here (the class line where it is
    # the highest)
    assert top == "ltx-video-0.9.5"
    assert e.reason.startswith("cogvideox not measured here; ltx-video-0.9.5's line, the highest here of the ")
    chosen = calib["transfer_lines"][top]  # the terms it says are that line's (or its flat branch's, where that
    # prices)
    assert any(f"{t['dry_factor']:.3f} x dry-run peak" in e.reason for t in (chosen, chosen.get("flat")) if t)
    # how far from the measured points it went: 832x480 x 49 frames is far beyond the line that prices it
    big = est.dry_run_bytes(None, "cogvideox", "decode", 832, 480, dtype="fp32", frames=49)
    far = est.explain("cogvideox", "decode", 832, 480, **{**kw, "frames": 49})
    big = max(k * big, est.call_peak(s, "fp32", "onednn", False, 1, 832, 480, 49))
    top = est.transfer_bytes(calib, big, big, False, 832 * 480, live=big)[1]
    line = calib["class"] if top == "class" else calib["transfer_lines"][top]
    assert big > line["dry_bytes_max"] and \
        f"{big / line['dry_bytes_max']:.1f}x beyond that line's largest measured dry-run peak" in far.reason
    assert ("beyond" in e.reason) == (top_dry > chosen["dry_bytes_max"])
    assert [est._times(r) for r in (1.004, 1.04, 2.34)] == ["just", "1.04x", "2.3x"]  # not "1.0x beyond"
    assert est.conv_transient_bytes(doc["models"]["cogvideox"], s, "decode", "bf16", "onednn", 320, 192, 1, 9,
                                    False) == LARGEST_CONV_PARAMETERS["cogvideox"]["decode"] * 2
    assert all("weight_copy_factor" not in c["class"] for c in doc["calibrations"] if c["conv_backend"] == "aten")
    # an own line says how it was fitted: on the whole demand (with the largest transient its points held, beyond
    # which it adds a request's), else less the transients, which it adds whole, or as a live line (on the whole
    # demand, adding nothing) beside a copy branch (less the transients, adding them)
    own = {(c["calibration"], a): ln for c in doc["calibrations"] if c["conv_backend"] in est.WEIGHT_COPY_BACKENDS
           for a, ln in c["architectures"].items()}
    assert {ln["weight_copy_factor"] for ln in own.values() if "copy_line" not in ln} == {1 + doc["margin"]}
    assert {(ln["weight_copy_factor"], ln["copy_line"]["weight_copy_factor"]) for ln in own.values()
            if "copy_line" in ln} == {(0.0, 1 + doc["margin"])}
    assert {"transient_seen_bytes" in ln for ln in own.values()} == {True, False}
    assert "copy_line" in own[("conv3d/onednn-amx/glibc-fixed/bf16/linux/decode/untiled", "ltx-video")]


def test_an_own_line_prices_the_kernel_switch_in_its_call_peak():
    """LTX-2's fp32 decode copies its 432 MiB weight at 128x128 x 9 frames and not at 128x128 x 1 (torch's rule
    reads 24576 and 18432 elements of its input): the most a convolution's call holds is that copy and the few MiB
    live beside it at the one, an im2col buffer at the other, and its own line covers both measured demands (452.0
    and 32.4 MiB) within 1.3x."""
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    one, nine = (est.explain("ltx-2", "decode", 128, 128, frames=f, **kw) for f in (1, 9))
    assert one.source == nine.source == "measured"
    s = est.load(COMMITTED)["structures"]["ltx-2/decode/fp32/untiled"]
    calls = [est.call_peak(s, "fp32", "onednn", False, 1, 128, 128, f) for f in (1, 9)]
    assert calls[0] < 30 * MIB and 432 * MIB < calls[1] < 440 * MIB
    assert f"the most a convolution's call holds, {calls[1] / MIB:.0f} MiB" in nine.reason
    big = est.explain("ltx-2", "decode", 1024, 576, frames=17, **kw)  # the live tensors lead: said so
    assert "with the bytes live at its call, stays below that" in big.reason and "call holds" not in big.reason
    assert 32.4 * MIB <= one.bytes < 1.3 * 32.4 * MIB and 452.0 * MIB <= nine.bytes < 1.3 * 452.0 * MIB


def test_a_whole_demand_own_line_prices_a_transient_beyond_its_points_and_says_so():
    """Wan 2.1's fp32 decode line is fitted on the whole demand: its points of two and three samples held
    transients (every convolution on oneDNN) of at most ``transient_seen_bytes``, so a request of two samples adds
    nothing for its copy; with that record halved (a line whose points held less), it adds 1.05 x the excess; each
    reason says which."""
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", batch=2, frames=9)
    cid = "conv3d/onednn/glibc-fixed/fp32/linux/decode/untiled"
    doc = json.loads(COMMITTED.read_text())
    (calib,) = [c for c in doc["calibrations"] if c["calibration"] == cid]
    s = doc["structures"]["wan21/decode/fp32/untiled"]
    t = est.conv_transient_bytes(doc["models"]["wan21"], s, "decode", "fp32", "onednn", 320, 192, 2, 9, False)
    dry = est.structure_peak_bytes(doc, "wan21", "decode", 320, 192, dtype="fp32", frames=9, batch=2)
    one = est.structure_peak_bytes(doc, "wan21", "decode", 320, 192, dtype="fp32", frames=9)
    k = est.onednn_hidden_factor("onednn", s, frames=9)
    for halved in (False, True):
        if halved:
            calib["architectures"]["wan21"]["transient_seen_bytes"] //= 2
        line = calib["architectures"]["wan21"]
        seen = line["transient_seen_bytes"]
        e = est.explain("wan21", "decode", 320, 192, coefficients=json.loads(json.dumps(doc)), **kw)
        assert (t <= seen) != halved and e.source == "measured"
        # (one sample's term: the larger of k x its dry run and its call peak, call_dry_runs; the first here, since
        # the dry run counts its convolutions' input reorders: 1242 MiB against 1194, where it was the second)
        kd, k1, _ = est.call_dry_runs(s, "fp32", "onednn", False, 2, 320, 192, 9, k * dry, k * one)
        assert k1 == k * one > est.call_peak(s, "fp32", "onednn", False, 1, 320, 192, 9)
        assert e.bytes == int(est.calibration_bytes({**line, "weight_copy_factor": 0.0}, kd, k1, False,
                                                    320 * 192, live=dry) + line["weight_copy_factor"] * max(0, t - seen))
        assert (f"within the {seen / MIB:.0f} MiB its points held" in e.reason) != halved
        assert (f"less the {seen / MIB:.1f} MiB its points held" in e.reason) == halved


def test_weight_copy_fields_are_validated(tmp_path):
    doc = unmeasured(json.loads(COMMITTED.read_text()))  # CogVideoX's fp32 decode a transfer, as before campaign 37
    i = next(i for i, c in enumerate(doc["calibrations"]) if "weight_copy_factor" in c["class"])
    j = next(j for j, c in enumerate(doc["calibrations"]) if c["conv_backend"] == "aten")
    k = next(k for k, c in enumerate(doc["calibrations"])
             if c["calibration"] == "conv3d/onednn/glibc-fixed/fp32/linux/decode/untiled")
    for mutate, message in [
        (lambda d: d["calibrations"][i]["class"].__setitem__("weight_copy_factor", -1.05),
         f"calibrations[{i}].class.weight_copy_factor must be a non-negative number"),
        (lambda d: d["calibrations"][j]["class"].__setitem__("weight_copy_factor", 1.05),
         f"calibrations[{j}].class.weight_copy_factor must be absent off onednn"),
        (lambda d: d["models"]["ltx-2"].__delitem__("largest_conv_parameters"),
         "models.ltx-2.largest_conv_parameters is missing"),
        (lambda d: d["models"]["ltx-2"]["largest_conv_parameters"].__setitem__("encode", 10**12),
         "models.ltx-2.largest_conv_parameters.encode must be at most op_parameters.encode"),
        (lambda d: d["models"]["ltx-2"]["largest_conv_parameters"].__setitem__("decode", 0),
         "models.ltx-2.largest_conv_parameters.decode must be a positive integer"),
        (lambda d: d["calibrations"][i]["class"].__delitem__("weight_copy_factor"),
         f"calibrations[{i}].class.weight_copy_factor is missing"),
        (lambda d: d["calibrations"][i]["class"].__setitem__("weight_copy_factor", 0.5),
         f"calibrations[{i}].class.weight_copy_factor must be at least 1"),
        (lambda d: d["calibrations"][k]["architectures"]["ltx-2"].__delitem__("weight_copy_factor"),
         f"calibrations[{k}].architectures.ltx-2.weight_copy_factor is missing"),
        (lambda d: d["calibrations"][k]["architectures"]["ltx-2"].__setitem__("weight_copy_factor", 0.5),
         f"calibrations[{k}].architectures.ltx-2.weight_copy_factor must be 0 (fitted on the whole demand) or at "
         f"least 1"),
        (lambda d: d["calibrations"][k]["architectures"]["wan21"].__setitem__("transient_seen_bytes", -1),
         f"calibrations[{k}].architectures.wan21.transient_seen_bytes must be a non-negative integer"),
        (lambda d: d["calibrations"][k]["architectures"]["wan21"].__setitem__("transient_seen_bytes", 1.5),
         f"calibrations[{k}].architectures.wan21.transient_seen_bytes must be a non-negative integer"),
        (lambda d: d["calibrations"][k]["architectures"]["wan21"].__setitem__("weight_copy_factor", 0.0),
         f"calibrations[{k}].architectures.wan21.transient_seen_bytes must be only on an own line with "
         f"weight_copy_factor of at least 1"),
        (lambda d: d["calibrations"][k]["class"].__setitem__("transient_seen_bytes", 0),
         f"calibrations[{k}].class.transient_seen_bytes must be only on an own line"),
        (lambda d: d["calibrations"][k].__delitem__("transfer_lines"),
         f"calibrations[{k}].transfer_lines is missing"),
        (lambda d: d["calibrations"][k]["transfer_lines"].__delitem__("wan21"),
         f"calibrations[{k}].transfer_lines must be one line per architecture of architectures"),
        (lambda d: d["calibrations"][k]["transfer_lines"]["wan21"].__setitem__("floor_bytes", 10**8),
         f"calibrations[{k}].transfer_lines.wan21.floor_bytes must be absent"),
        (lambda d: d["calibrations"][k]["transfer_lines"]["wan21"].__setitem__("weight_copy_factor", 0.0),
         f"calibrations[{k}].transfer_lines.wan21.weight_copy_factor must be at least 1"),
        (lambda d: d["calibrations"][k]["transfer_lines"]["wan21"].__setitem__("transient_seen_bytes", 0),
         f"calibrations[{k}].transfer_lines.wan21.transient_seen_bytes must be only on an own line"),
        (lambda d: d["calibrations"][j]["transfer_lines"]["sd15"].__setitem__("weight_copy_factor", 1.05),
         f"calibrations[{j}].transfer_lines.sd15.weight_copy_factor must be absent off onednn"),
        (lambda d: d["calibrations"][k]["architectures"]["ltx-2"].__setitem__("resident_bytes", -1),
         f"calibrations[{k}].architectures.ltx-2.resident_bytes must be a non-negative number"),
        (lambda d: d["calibrations"][k]["architectures"]["ltx-2"].__delitem__("resident_factor"),
         f"calibrations[{k}].architectures.ltx-2.resident_factor must be present exactly where resident_bytes or "
         f"single_frame_resident_bytes is"),
        (lambda d: d["calibrations"][k]["class"].update(resident_factor=1.05, resident_bytes=0),
         f"calibrations[{k}].class.resident_factor must be only on an own line on onednn"),
        (lambda d: d["calibrations"][j]["architectures"]["sd15"].update(resident_factor=1.05, resident_bytes=0),
         f"calibrations[{j}].architectures.sd15.resident_factor must be only on an own line on onednn"),
        (lambda d: as_schema(d, 12) and d["calibrations"][k]["architectures"]["ltx-2"].update(
            resident_factor=1.05, resident_bytes=0),
         f"calibrations[{k}].architectures.ltx-2.resident_factor must be only on an own line on onednn, onednn-amx "
         f"(from schema 13)"),
    ]:
        bad = json.loads(json.dumps(doc))
        mutate(bad)
        with pytest.raises(ValueError, match=re.escape(message)):
            est.validate(bad, "c.json")
    old = json.loads(json.dumps(doc))  # a file of schema 4 has neither: readable, and no transfer adds a copy
    as_schema(old, 4)
    for m in old["models"].values():
        del m["largest_conv_parameters"]
    for c in old["calibrations"]:
        del c["transfer_lines"]
        for line in (c["class"], *c["architectures"].values()):
            line.pop("weight_copy_factor", None)
            line.pop("transient_seen_bytes", None)
    six = json.loads(json.dumps(doc))  # schema 6: a whole-demand own line's factor is 0, and it adds nothing;
    as_schema(six, 6)  # no transfer_lines: a transfer takes the class line
    for c in six["calibrations"]:
        del c["transfer_lines"]
        for line in c["architectures"].values():
            if line.pop("transient_seen_bytes", None) is not None:
                line["weight_copy_factor"] = 0.0
    assert est.validate(six, "c.json")
    e6 = est.explain("cogvideox", "decode", 320, 192, dtype="fp32", frames=9, backend="onednn",
                     allocator="glibc-fixed", os="linux", coefficients=six)
    assert "conv3d class line of" in e6.reason and e6.bytes < est.explain(
        "cogvideox", "decode", 320, 192, dtype="fp32", frames=9, backend="onednn", allocator="glibc-fixed",
        os="linux", coefficients=as_schema(json.loads(json.dumps(doc)), 15)).bytes  # its lines without flat branches
    line = next(c for c in six["calibrations"]
                if c["calibration"] == doc["calibrations"][k]["calibration"])["architectures"]["wan21"]
    assert est.calibration_bytes(line, 100 * MIB, 100 * MIB, False, 320 * 192, 10**12) == \
        est.calibration_bytes(line, 100 * MIB, 100 * MIB, False, 320 * 192)
    five = json.loads(json.dumps(doc))  # schema 5: own lines without the factor (fitted on the whole demand)
    as_schema(five, 5)
    for c in five["calibrations"]:
        del c["transfer_lines"]
        for line in c["architectures"].values():
            line.pop("weight_copy_factor", None)
            line.pop("transient_seen_bytes", None)
    assert est.validate(five, "c.json")
    e = est.explain("cogvideox", "decode", 320, 192, dtype="fp32", frames=9, backend="onednn",
                    allocator="glibc-fixed", os="linux", coefficients=old)
    assert e.source == "transfer" and "copy" not in e.reason
    for layers, message in (([old, None], rf"schemas 4 and {est.SCHEMA_VERSION}, .* refit layer 1"),
                            ([None, old], rf"schemas {est.SCHEMA_VERSION} and 4, .* refit layer 2")):
        est.clear_cache()  # a rig owner's older fit layered with the packaged one: refused (the packaged oneDNN
        with pytest.raises(ValueError, match=message):  # lines are in another dry run), with the cure
            est.working_memory_bytes("cogvideox", "decode", 320, 192, dtype="fp32", frames=9, backend="onednn",
                                     allocator="glibc-fixed", os="linux", coefficients=layers)
    est.clear_cache()


def test_the_fallback_on_onednn_adds_the_weight_copy():
    """Linux's default glibc allocator is not measured for the conv3d class here: LTX-2's fp32 encode falls back,
    and the fallback adds its 432 MiB copy with the margin (the measured demand at 128x128 is 451 MiB under
    glibc-fixed); on cuDNN it adds nothing."""
    kw = dict(dtype="fp32", os="linux")
    e = est.explain("ltx-2", "encode", 128, 128, backend="onednn", allocator="glibc", **kw)
    assert e.source == "fallback" and "432" not in e.reason and "454 MiB with the margin" in e.reason
    g = est.explain("ltx-2", "encode", 128, 128, backend="cudnn", allocator="native", **kw)
    assert e.bytes - g.bytes == int(113_246_208 * 4 * 1.05) and "copy" not in g.reason


def test_a_structureless_fallback_adds_its_weight_copy_and_its_envelope_holds_the_price():
    """Without a dry-run structure (a file fitted without the cache) the fallback on oneDNN said it added the
    weight copy and priced the legacy rule alone, with an envelope of 0: both now hold what the price holds."""
    doc = json.loads(COMMITTED.read_text())
    doc["structures"] = {k: v for k, v in doc["structures"].items() if not k.startswith("ltx-2/")}
    kw = dict(dtype="bf16", os="windows", coefficients=est.validate(doc, "c.json"))
    e = est.explain("ltx-2", "decode", 512, 512, backend="onednn", allocator="system", **kw)
    g = est.explain("ltx-2", "decode", 512, 512, backend="cudnn", allocator="native", **kw)
    assert e.source == g.source == "fallback" and "no dry-run structure" in e.reason
    assert e.bytes - g.bytes == int(113_246_208 * 2 * 1.05) and "227 MiB with the margin" in e.reason
    assert e.bytes == e.envelope_bytes + e.cast_bytes and e.floor_bytes == g.bytes


def test_a_tiled_fallback_is_capped_at_the_measured_untiled_price():
    """LTX-2 in bf16 on aten is measured untiled only: a 1024 px tile of a 2048 px decode was priced by the
    legacy rule at 2.1x the measured untiled request, though its tiles hold a quarter of the live bytes (dry run)
    and the same weights; now the untiled price bounds it and the reason says so. Smaller tiles, priced below it,
    keep the fallback."""
    kw = dict(dtype="bf16", backend="aten", allocator="glibc-fixed", os="linux")
    whole = est.explain("ltx-2", "decode", 2048, 2048, **kw)
    big = est.explain("ltx-2", "decode", 2048, 2048, tile=1024, **kw)
    small = est.explain("ltx-2", "decode", 2048, 2048, tile=512, **kw)
    assert whole.source == "measured" and big.source == small.source == "fallback"
    assert big.bytes == whole.bytes and "capped at this request's untiled price (measured: its own line" in big.reason
    assert big.bytes == big.envelope_bytes + big.cast_bytes
    assert est.working_memory_bytes("ltx-2", "decode", 2048, 2048, tile=1024, **kw) == big.bytes
    assert small.bytes < whole.bytes and "capped" not in small.reason
    uncapped = est.dry_run_bytes(None, "ltx-2", "decode", 2048, 2048, dtype="bf16", tile=1024)
    assert uncapped < est.dry_run_bytes(None, "ltx-2", "decode", 2048, 2048, dtype="bf16")


def test_a_tiled_fallback_never_prices_a_larger_image_lower():
    """The fallback scaled the legacy rule of one tile by the whole request's dry runs, whose ratio the assembly
    of the tiles (the same bytes for every architecture) takes towards 1 as the image grows: CogView4's fp16 decode
    in 256 px tiles on an unmeasured cuDNN was priced 683 MiB at 512 px and 479 at 3072, Wan 2.1's fp16 decode of 5
    frames in 512 px tiles 8721 at 768 px and 8190 at 4096. Now one tile's dry runs scale the rule and the
    assembly is added: every architecture, both tile sizes, 1.5 tiles to 4096 px."""
    from vaemem.models.zoo import registry

    platforms = (dict(dtype="fp16", backend="cudnn", allocator="native"),
                 dict(dtype="bf16", backend="onednn-amx", allocator="glibc-fixed"))
    checked = 0
    for name, spec in registry().items():
        if spec.tiny:
            continue
        for op in spec.ops:
            for kw in platforms:
                for tile in (256, 512):
                    last = 0
                    for side in range(tile + tile // 2, 4097, 256):
                        try:
                            e = est.explain(name, op, side, side, frames=spec.temporal_factor + 1 if spec.is_video else 1,
                                            tile=tile, os="linux", **kw)
                        except ValueError:  # a tile below the structure's smallest, or a size diffusers refuses
                            continue
                        if e.source != "fallback":
                            continue
                        assert e.bytes >= last, (name, op, kw["backend"], tile, side, e.bytes, last)
                        last, checked = e.bytes, checked + 1
    assert checked > 500


def test_a_tile_that_is_the_whole_image_is_priced_as_the_untiled_request():
    """Wan 2.2's encode cuts its patchified input, so a 256 px tile covers 512 px and the loop steps 384: at 512 px
    its first tile is the whole image, the others crops of it, and it measured 636.5 MiB tiled and untiled alike
    (campaign 24). Such a request is the untiled one, priced by that estimate x the dry runs' ratio (the outputs the
    blend keeps), in every tier: its own untiled line (in bf16 with AMX it had been the tiled fallback at 1.7x that
    line), the fallback on an unmeasured cuDNN (the tiled fallback had been 1.25x the untiled one). A loop none of
    whose tiles is the whole image is not, nor one whose untiled request is the fallback where the tiled one is
    measured (a transfer is the better evidence)."""
    for kw, size, frames, tile, source in ((dict(dtype="fp32", backend="onednn", allocator="glibc-fixed"), 512, 1, 256,
                                            "measured"),
                                           (dict(dtype="bf16", backend="onednn-amx", allocator="glibc-fixed"), 512, 1,
                                            256, "measured"),
                                           (dict(dtype="fp32", backend="onednn", allocator="glibc-fixed"), 640, 17,
                                            320, "measured"),
                                           (dict(dtype="fp16", backend="cudnn", allocator="native"), 1024, 17, 512,
                                            "fallback")):
        args = ("wan22", "encode", size, size)
        whole = est.explain(*args, frames=frames, os="linux", **kw)
        tiled = est.explain(*args, frames=frames, os="linux", tile=tile, **kw)
        ratio = max(1.0, est.dry_run_bytes(None, *args, dtype=kw["dtype"], frames=frames, tile=tile) /
                    est.dry_run_bytes(None, *args, dtype=kw["dtype"], frames=frames))  # never below untiled
        assert abs(ratio - 1) < 0.001
        assert tiled.source == whole.source == source and tiled.group == whole.group
        # dry_run_bytes rounds each dry run to a byte
        assert abs(tiled.envelope_bytes - whole.envelope_bytes * ratio) < 1e-8 * whole.envelope_bytes + 1
        assert tiled.bytes == tiled.envelope_bytes + tiled.cast_bytes and tiled.floor_bytes == whole.floor_bytes
        assert tiled.reason.startswith("a tile is the whole image") and f"x {ratio:.4f}" in tiled.reason
        assert tiled.reason.endswith(whole.reason)
        assert est.working_memory_bytes(*args, frames=frames, os="linux", tile=tile, **kw) == tiled.bytes
    structures = est._doc(None)["structures"]
    assert est.tile_is_whole(structures, "wan22", "encode", 512, 512, 256, dtype="bf16")
    assert not est.tile_is_whole(structures, "wan22", "encode", 1024, 1024, 256, dtype="bf16")
    assert not est.tile_is_whole(structures, "sd15", "encode", 768, 512, 512, dtype="fp16")
    assert "a tile is the whole image" not in est.explain("wan22", "encode", 1024, 1024, tile=256, dtype="fp32",
                                                          backend="onednn", allocator="glibc-fixed", os="linux").reason
    # the tiled class line cloned to an allocator nothing was measured untiled with: the tiled transfer stands
    doc = json.loads(COMMITTED.read_text())
    tiled_line = next(c for c in doc["calibrations"]
                      if c["calibration"] == "conv3d/onednn/glibc-fixed/fp32/linux/encode/tiled")
    clone = {**json.loads(json.dumps(tiled_line)), "allocator": "glibc"}
    doc["calibrations"].append({**clone, "calibration": est.calibration_id(clone, clone["kernel"])})
    t = est.explain("wan22", "encode", 512, 512, tile=256, dtype="fp32", backend="onednn", allocator="glibc",
                    os="linux", coefficients=doc)
    u = est.explain("wan22", "encode", 512, 512, dtype="fp32", backend="onednn", allocator="glibc", os="linux",
                    coefficients=doc)
    assert t.source == "measured" and u.source == "fallback" and "whole image" not in t.reason  # its tiled line
    est.clear_cache()


def test_a_tiled_transfer_takes_the_architectures_own_untiled_line_at_its_tiles():
    """Wan 2.2's fp32 encode in 256 px tiles of 768 px, one frame, needed 640.1 MiB (campaign 27), 1.30x its tiles'
    dry run, where MiniMax-H3's tiles need 1.16x. Its tiled line taken out (as if never measured tiled), the
    transfer from MiniMax-H3's tiled line alone reserved 0.93x; the transfer also takes Wan 2.2's own untiled line
    at its tiles' dry run, which covers it, and says so. Without an own untiled line on the platform, the class's."""
    def without(*calibrations: str) -> dict:  # the committed file without Wan 2.2's own lines there
        doc = json.loads(COMMITTED.read_text())
        for c in doc["calibrations"]:
            if c["calibration"] in calibrations:
                del c["architectures"]["wan22"], c["transfer_lines"]["wan22"]
                if c["calibration"].endswith("/tiled"):
                    c["class"] = c["transfer_lines"]["minimax-h3"]  # the class of one architecture: its line
        return doc

    tiled = "conv3d/onednn/glibc-fixed/fp32/linux/encode/tiled"
    doc = without(tiled)
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    e = est.explain("wan22", "encode", 768, 768, tile=256, coefficients=doc, **kw)
    demand = 640.1 * est.MIB
    assert e.source == "transfer" and e.reason.startswith("wan22 not measured tiled here; its own untiled line on "
                                                          "this platform (28 points) at its tiles' dry run")
    assert demand < e.bytes < 1.15 * demand
    plan = est._plan(est._doc(doc), "wan22", "encode", "fp32", None, "onednn", "glibc-fixed", "linux", True, "model")
    _, live1, dry, one = plan.dry_runs(768, 768, 1, 1, 256)
    copy = plan.copy_at(768, 768, 1, 1, 256)
    own = est.calibration_bytes(plan.own_untiled(1), dry, one, True, 768 * 768, copy, live=live1)
    assert e.envelope_bytes == int(own)
    # no own untiled line: the class's lines (those of every clip length's factor, schema 17, cover this demand
    # too, 1.03x; with schema 16's one factor MiniMax-H3's tiled line alone reserved 0.93x), below the own line's
    e2 = est.explain("wan22", "encode", 768, 768, tile=256, coefficients=without(tiled, tiled[:-5] + "untiled"), **kw)
    assert e2.source == "transfer" and "own untiled" not in e2.reason and demand < e2.bytes < e.bytes
    # an own untiled line whose copy branch prices (LTX-Video's bf16 decode with AMX, taken out of the tiled class:
    # one frame in 256 px tiles holds 10 MiB of live tensors beside its 108 MiB weight copy), said so; its branch
    # raised by 32 MiB, as Hunyuanvideo's line, in the dry run of schema 17, prices 1 MiB above it here
    doc = json.loads(COMMITTED.read_text())
    for c in doc["calibrations"]:
        if c["calibration"] == "conv3d/onednn-amx/glibc-fixed/bf16/linux/decode/tiled":
            del c["architectures"]["ltx-video"], c["transfer_lines"]["ltx-video"]
        if c["calibration"] == "conv3d/onednn-amx/glibc-fixed/bf16/linux/decode/untiled":
            c["architectures"]["ltx-video"]["copy_line"]["base_bytes"] += 32 * MIB
    kw = dict(dtype="bf16", backend="onednn-amx", allocator="glibc-fixed", os="linux", coefficients=doc)
    e = est.explain("ltx-video", "decode", 640, 384, tile=256, **kw)
    assert "the copy branch (the weight copy outweighs the live tensors) of its own untiled line" in e.reason
    plan = est._plan(est._doc(doc), "ltx-video", "decode", "bf16", None, "onednn-amx", "glibc-fixed", "linux", True,
                     "model")
    _, live1, dry, one = plan.dry_runs(640, 384, 1, 1, 256)
    branch = plan.own_untiled(1)["copy_line"]
    assert e.envelope_bytes == int(est.calibration_bytes(branch, dry, one, True, 640 * 384,
                                                         plan.copy_at(640, 384, 1, 1, 256), live=live1))
    assert f"{branch['dry_factor']:.3f} x dry-run peak" in e.reason
    est.clear_cache()


def test_a_tiled_price_is_capped_only_where_the_evidence_allows():
    """The cap needs the tiles' dry run at most the whole image's, and never rests on a price the live floor set:
    LTX-Video 0.9.5's untiled bf16 decode without AMX at 832x480 x 33 frames is its floor (its line of 3 points as
    schema 18 fitted it, where its weight copy set the demand, is far below its live tensors there), so its tiled
    price keeps its own. A capped fallback says the untiled request's legacy floor, not its tile's, which it may
    price below (SD1.5's fp16 decode at 512x2048 in 1024 px tiles on cuDNN said 4400 MiB, legacy floor 5500)."""
    kw = dict(dtype="bf16", backend="onednn", allocator="glibc-fixed", os="linux", frames=33,
              coefficients=with_schema18_lines(json.loads(COMMITTED.read_text())))
    whole = est.explain("ltx-video-0.9.5", "decode", 832, 480, **kw)  # its bf16 line without AMX: 3 points
    tiled = est.explain("ltx-video-0.9.5", "decode", 832, 480, tile=768, **kw)
    assert "never less than the live tensors" in whole.reason and tiled.bytes > whole.bytes
    assert "capped" not in tiled.reason
    # a tiled fallback whose tiles hold more than the whole image (SD1.5's 768x512 encode, 512 px tiles: the
    # overlap's assembly) is not capped though its price is above the untiled one
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux", attention="math")
    t = est.explain("sd15", "encode", 768, 512, tile=512, **kw)
    assert est.dry_run_bytes(None, "sd15", "encode", 768, 512, dtype="fp16", tile=512, attention="math") > \
        est.dry_run_bytes(None, "sd15", "encode", 768, 512, dtype="fp16", attention="math")
    assert "capped" not in t.reason and t.bytes > est.working_memory_bytes("sd15", "encode", 768, 512, **kw)
    capped = est.explain("ltx-2", "decode", 2048, 2048, tile=1024, dtype="bf16", backend="aten",
                         allocator="glibc-fixed", os="linux")
    assert capped.source == "fallback" and "capped" in capped.reason and capped.floor_bytes == 0  # a measured line
    kw = dict(dtype="fp16", backend="cudnn", allocator="native", os="linux")
    capped, whole = (est.explain("sd15", "decode", 512, 2048, tile=tile, **kw) for tile in (1024, None))
    assert "capped" in capped.reason and capped.bytes == whole.bytes and capped.floor_bytes == whole.floor_bytes > 0
    # a tiled transfer is capped by the architecture's own untiled line only, not by an untiled transfer (here
    # Wan 2.2's untiled line taken out, the untiled class's lines lowered to their floor, 1.05 x the dry run, and
    # the tiled class's raised, so that the untiled transfer prices less; at 528 px its first 256 px tile covers
    # 512 px, not the whole image)
    doc = json.loads(COMMITTED.read_text())
    for c in doc["calibrations"]:
        if c["calibration"] == "conv3d/onednn/glibc-fixed/fp32/linux/encode/tiled":
            del c["architectures"]["wan22"], c["transfer_lines"]["wan22"]  # its own tiled line (campaign 27)
            for line in (c["class"], *c["transfer_lines"].values()):
                line.pop("flat", None)
                line.update(dry_factor=2.0)
        if c["calibration"] == "conv3d/onednn/glibc-fixed/fp32/linux/encode/untiled":
            del c["architectures"]["wan22"], c["transfer_lines"]["wan22"]
            for line in (c["class"], *c["transfer_lines"].values()):
                line.update(dry_factor=0.5, per_sample_factor=0.0, single_frame_factor=0.0)
                line.pop("single_frame_dry_max", None)  # no one-frame term left to stop
    kw = dict(frames=17, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", coefficients=doc)
    whole = est.explain("wan22", "encode", 528, 528, **kw)
    tiled = est.explain("wan22", "encode", 528, 528, tile=256, **kw)
    assert est.dry_run_bytes(None, "wan22", "encode", 528, 528, dtype="fp32", frames=17, tile=256) < \
        est.dry_run_bytes(None, "wan22", "encode", 528, 528, dtype="fp32", frames=17)
    assert whole.source == tiled.source == "transfer" and tiled.bytes > whole.bytes and "capped" not in tiled.reason
    est.clear_cache()


def test_half_precision_on_a_cpu_with_amx_is_a_platform_of_its_own():
    """On the AMX Xeon SD1.5's bf16 decode needs 1.14-1.17x what an AVX512-BF16 EPYC needs (campaign 17): each
    CPU has its line. An architecture measured in bf16 only on the AMX CPU is priced there by its AMX line (an
    upper bound, said so); fp32 on onednn-amx is refused (fp32 runs there as onednn)."""
    kw = dict(dtype="bf16", allocator="glibc-fixed", os="linux")
    amx = est.explain("sd15", "decode", 512, 512, backend="onednn-amx", **kw)
    plain = est.explain("sd15", "decode", 512, 512, backend="onednn", **kw)
    assert amx.group == "conv2d/onednn-amx/glibc-fixed/bf16/linux/decode/untiled"
    assert plain.group == "conv2d/onednn/glibc-fixed/bf16/linux/decode/untiled" and plain.bytes < amx.bytes
    # FLUX.1's tiled bf16 decode is measured with AMX only (its untiled one on both CPUs)
    bound = est.explain("flux1", "decode", 1024, 1024, tile=512, backend="onednn", **kw)
    assert bound.group == "conv2d/onednn-amx/glibc-fixed/bf16/linux/decode/tiled" and \
        bound.bytes == est.working_memory_bytes("flux1", "decode", 1024, 1024, tile=512, backend="onednn-amx", **kw)
    assert "its own line on onednn-amx, a CPU with AMX tiles" in bound.reason and "an upper bound here" in bound.reason
    # no line of the video decoders' class tiled without AMX (Wan 2.2's one point there makes none): the AMX
    # class's transfer, said so
    tiled = est.explain("wan22", "decode", 1280, 720, frames=17, tile=256, backend="onednn", **kw)
    assert tiled.source == "transfer" and "class line of cogvideox, hunyuanvideo, ltx-video, wan21, their own on " \
        "onednn-amx" in tiled.reason
    # the line that sets it named, with its terms: Wan 2.1's, the highest of them here
    (calib,) = [c for c in est.load(COMMITTED)["calibrations"] if c["calibration"] == tiled.group]
    assert tiled.reason.startswith("wan22 not measured here; wan21's line, the highest here of the conv3d class line")
    assert f"{calib['transfer_lines']['wan21']['dry_factor']:.3f} x dry-run peak" in tiled.reason
    # on the AMX CPU it also takes Wan 2.2's own untiled line there (in the same dry run), here not (its own
    # untiled line without AMX is in another): never less there
    amx = est.explain("wan22", "decode", 1280, 720, frames=17, tile=256, backend="onednn-amx", **kw)
    assert "their own and its own untiled line" in amx.reason and "its own untiled line" not in tiled.reason
    assert tiled.bytes <= amx.bytes
    # SANA's tiled decode is measured without AMX (campaign 21): CogView4's is priced by that class there
    cog = est.explain("cogview4", "decode", 1024, 1024, tile=512, backend="onednn", **kw)
    assert cog.group == "conv2d/onednn/glibc-fixed/bf16/linux/decode/tiled" and "sana-dc-ae" in cog.reason
    with pytest.raises(ValueError, match="fp32 runs there as onednn"):
        est.working_memory_bytes("sd15", "decode", 512, 512, backend="onednn-amx", dtype="fp32",
                                 allocator="glibc-fixed", os="linux")
    bad = json.loads(COMMITTED.read_text())
    bad["calibrations"][0].update(conv_backend="onednn-amx", dtype="fp32")
    with pytest.raises(ValueError, match=r"calibrations\[0\]\.conv_backend.*half precision only"):
        est.load(bad)


def test_a_schema_7_file_prices_half_precision_on_an_amx_cpu_by_its_onednn_lines():
    """A file of schema 7 keys half precision on oneDNN as onednn whatever the CPU had: on a CPU with AMX those
    lines price as they did (not the fallback); such a file may not say onednn-amx."""
    doc = as_schema(json.loads(COMMITTED.read_text()), 7)
    kw = dict(dtype="bf16", allocator="glibc-fixed", os="linux", coefficients=doc)
    amx = est.explain("sd15", "decode", 512, 512, backend="onednn-amx", **kw)
    assert amx.source == "measured" and amx.group == "conv2d/onednn/glibc-fixed/bf16/linux/decode/untiled"
    assert amx.bytes == est.working_memory_bytes("sd15", "decode", 512, 512, backend="onednn", **kw)
    bad = as_schema(json.loads(COMMITTED.read_text()), 17)  # every field of 18 and later gone
    bad["schema_version"] = 7
    with pytest.raises(ValueError, match=r"conv_backend must be another backend in a file of schema 7 or older "
                                         r"\(onednn-amx is a key from schema 8\)"):
        est.load(bad)
    est.clear_cache()


def test_no_line_reserves_less_than_the_live_tensors():
    """HunyuanVideo 1.5's fp32 decode line was 0.023 x dry run + its weight copies (8 points where one convolution's
    1728 MiB copy set the demand): at 1024x1024 x 17 frames, whose live tensors are 52224 MiB, it priced 3036 MiB.
    LTX-Video 0.9.5's bf16 line without AMX (3 points, where its 216 MiB weight copy sets the demand) is as flat: at
    the same request it is under its live tensors. A line never reserves less than LIVE_FLOOR_FACTOR x the dry-run
    peak, and the reason says when that floor prices; at its measured points the line is above it. (From schema 19
    the latter's line is in the call peak and follows its dry run: its line of schema 18.)"""
    doc = with_schema18_lines(json.loads(COMMITTED.read_text()))
    kw = dict(dtype="bf16", backend="onednn", allocator="glibc-fixed", os="linux", frames=17, coefficients=doc)
    e = est.explain("ltx-video-0.9.5", "decode", 1024, 1024, **kw)  # 3 points: its line is nearly flat
    dry = est.dry_run_bytes(None, "ltx-video-0.9.5", "decode", 1024, 1024, dtype="bf16", frames=17)
    assert e.bytes == int(est.LIVE_FLOOR_FACTOR * dry) and e.source == "measured"
    assert "never less than the live tensors" in e.reason
    small = est.explain("ltx-video-0.9.5", "decode", 512, 320, **{**kw, "frames": 9})
    assert "never less than the live tensors" not in small.reason and small.bytes > est.LIVE_FLOOR_FACTOR * \
        est.dry_run_bytes(None, "ltx-video-0.9.5", "decode", 512, 320, dtype="bf16", frames=9)
    line = {"dry_factor": 0.5, "per_sample_factor": 0.0, "base_bytes": 10}
    assert est.calibration_bytes(line, 1000.0, 1000.0, False, 10**6) == est.LIVE_FLOOR_FACTOR * 1000
    assert est.calibration_bytes(line, 10.0, 10.0, False, 10**6) == 15.0


def test_a_dict_handed_in_is_validated_once_and_left_as_it_was():
    """``coefficients=doc`` used to index the caller's dict in place (tuple keys: json.dumps then failed)."""
    doc = json.loads(COMMITTED.read_text())
    before = json.dumps(doc, sort_keys=True)
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", coefficients=doc)
    a = est.working_memory_bytes("sd15", "decode", 512, 512, **kw)
    assert json.dumps(doc, sort_keys=True) == before
    assert est.working_memory_bytes("sd15", "decode", 512, 512, **kw) == a == est.working_memory_bytes(
        "sd15", "decode", 512, 512, **{**kw, "coefficients": None})
    est.clear_cache()


def test_dry_run_bytes_are_whole_bytes_within_the_batch_limit():
    d = est.dry_run_bytes(None, "sd15", "decode", 512, 512, dtype="fp32")
    assert type(d) is int and d == math.ceil(est.structure_peak_bytes(est.load(None), "sd15", "decode", 512, 512,
                                                                      dtype="fp32"))
    with pytest.raises(ValueError, match="batch must be at most 4096"):
        est.dry_run_bytes(None, "sd15", "decode", 512, 512, dtype="fp32", batch=10**6)


@pytest.mark.parametrize("path,value,message", MUTATIONS)
def test_every_mutation_of_the_committed_file_is_refused_naming_the_field(tmp_path, path, value, message):
    doc = json.loads(COMMITTED.read_text())
    target = doc
    for k in path[:-1]:
        target = target[k]
    if value == "DELETE":
        del target[path[-1]]
    else:
        target[path[-1]] = value
    est.clear_cache()
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(message)):
        est.load(bad)
    with pytest.raises(ValueError, match=re.escape(message)):  # a document handed in as a dict: the same check
        est.explain("sd15", "decode", 512, 512, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux",
                    coefficients=json.loads(bad.read_text()))
    from typer.testing import CliRunner

    from vaemem.cli import app

    res = CliRunner().invoke(app, ["estimate", "-m", "sd15", "--op", "decode", "--res", "512", "--dtype", "fp32",
                                   "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux",
                                   "--coefficients", str(bad)])
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and message in lines[0] and "c.json" in lines[0], res.output
    est.clear_cache()


def test_the_committed_file_passes_the_validator():
    est.validate(json.loads(COMMITTED.read_text()), "committed")


def test_a_reasons_per_sample_term_is_the_dry_run_of_one_sample():
    """The reason names the figures the price used: a sliced or unsliced batch's per-sample term is the dry run of
    one sample (what a batch-1 request's reason calls its dry-run peak), not the batch's peak divided by the batch
    (a sliced batch of 4 once said 194 MiB where 768 were priced)."""
    import re

    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    one = re.search(r"dry-run peak (\d+) MiB", est.explain("sd15", "decode", 512, 512, **kw).reason).group(1)
    for slicing in (False, True):
        reason = est.explain("sd15", "decode", 512, 512, batch=4, slicing=slicing, **kw).reason
        assert f"one sample's {one} MiB" in reason, reason


@pytest.mark.parametrize("field,message", [("calibrations", "calibrations must be one entry per calibration id"),
                                           ("groups", "groups must be one entry per group")])
def test_a_duplicated_calibration_or_group_is_refused(tmp_path, field, message):
    """Two entries of one id would be indexed last-wins, unsaid: the file is refused naming the id."""
    doc = json.loads(COMMITTED.read_text())
    doc[field].append(doc[field][0])
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps(doc))
    est.clear_cache()
    with pytest.raises(ValueError, match=re.escape(message)):
        est.load(bad)


def test_a_math_path_request_is_priced_by_the_lines_of_the_points_measured_on_it():
    """SD1.5's fp32 encode at 1280 px on the math attention path needed 6014 MiB, FLUX.1's 6003 (campaign 24), and
    at 1536 px 12197 (campaign 25): 1.12x their dry run until it counted the mask SDPA's softmax holds, 1.002-1.007x
    since. Where their score matrices lead they have math-path lines (two points each; FLUX.2, measured there at
    1280 px alone, none) pricing them at 1.05-1.06x, and their plain lines alone (a reader of schema 13's view of the
    file) cover them too: the dry run explains the path. SD1.5's decoder, led by its score matrices at 1536 px alone,
    is priced there by its plain line, whose oneDNN buffers are its fused part's (schema 15): 1.06x, where schema
    14's rule (the factor 1.25 on the whole peak) prices the same line 1.3x. FLUX.2, measured on the path where its
    score matrices lead at one size, takes SD1.5's math-path line there, above its own plain one; CogView4's encoder
    holds no attention module, so its math path is its fused one; a plain request is priced as its plain points'
    line, whatever the variants."""
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    coef = json.loads(COMMITTED.read_text())
    cid = "conv2d/onednn/glibc-fixed/fp32/linux/encode/untiled"
    calib = next(c for c in coef["calibrations"] if c["calibration"] == cid)
    assert calib == coef["calibrations"][13]
    assert set(calib["variants"]) == {"sd15/math", "sd15/sliced", "flux1/math"}
    plain = as_schema(json.loads(COMMITTED.read_text()), 13)
    for model, op, side, needed_mib in (("sd15", "encode", 1280, 6014), ("flux1", "encode", 1280, 6003),
                                        ("sd15", "encode", 1536, 12197), ("sd15", "decode", 1536, 12196)):
        e = est.explain(model, op, side, side, attention="math", **kw)
        assert needed_mib * MIB <= e.bytes <= 1.07 * needed_mib * MIB
        assert est.working_memory_bytes(model, op, side, side, attention="math", coefficients=plain, **kw) \
            >= needed_mib * MIB
        assert ("its own line of its math-attention points" in e.reason) == (op == "encode")
    e = est.explain("sd15", "decode", 1536, 1536, attention="math", **kw)
    assert "its own line on this platform" in e.reason and \
        "at its score matrices, 12169 MiB, which no op holding oneDNN's buffers joins" in e.reason
    whole = as_schema(json.loads(COMMITTED.read_text()), 14)
    assert est.working_memory_bytes("sd15", "decode", 1536, 1536, attention="math", coefficients=whole, **kw) \
        > 1.25 * 12196 * MIB
    sd = est.explain("sd15", "encode", 1280, 1280, attention="math", **kw)
    fx = est.explain("flux2", "encode", 1280, 1280, attention="math", **kw)
    assert "the line of sd15's math-attention points" in fx.reason and "flux2 has no math-attention points" \
        in fx.reason and 6003 * MIB <= fx.bytes
    # a sliced batch of one is the plain request, whatever the sliced lines (at 2048 px beyond the sliced points)
    for model in ("sd15", "cogview4"):
        assert est.working_memory_bytes(model, "decode", 2048, 2048, slicing=True, **kw) == \
            est.working_memory_bytes(model, "decode", 2048, 2048, **kw)
    assert est.working_memory_bytes("cogview4", "encode", 768, 768, attention="math", **kw) == \
        est.working_memory_bytes("cogview4", "encode", 768, 768, **kw)
    # a sliced math request holds the math path's score matrices: its math lines price it (and its sliced ones)
    assert est.working_memory_bytes("sd15", "encode", 1280, 1280, attention="math", slicing=True, **kw) == sd.bytes
    both = est.explain("flux1", "encode", 1024, 1024, attention="math", slicing=True, batch=2, **kw)
    assert both.bytes >= est.working_memory_bytes("flux1", "encode", 1024, 1024, attention="math", **kw)
    novar = json.loads(COMMITTED.read_text())  # the committed lines without the variants' (flat branches kept)
    for c in novar["calibrations"]:
        c["variants"], c["variant_transfer_lines"] = {}, {}
    for model in ("sd15", "flux1", "hunyuanimage-2.1"):  # the variants change no plain request's price
        assert est.working_memory_bytes(model, "encode", 768, 768, **kw) == est.working_memory_bytes(
            model, "encode", 768, 768, coefficients=novar, **kw)


def test_a_math_path_request_whose_score_matrices_do_not_lead_is_the_fused_request():
    """From schema 15 a math-path request whose dry run with oneDNN's buffers is the fused path's (its score
    matrices do not lead) is the fused request: priced by the plain lines, and its measured point is a plain one in
    the fit, so they cover it (campaign 26: Wan 2.1's fp32 encode at 768 px, 2843 MiB, led by its convolutions; at
    1024 px, 5277 MiB, by its score matrices, a point of its own plain line as its only led one). Its two points as
    a math-path line had been 0.895 x dry run + 850 MiB, Wan 2.2's 256 px x 9-frame encode 2.2x its fused price
    under it. A file of 14 takes the math-path lines there too (SD1.5's encode at 1024 px, led by its
    convolutions), one of 15 says why it does not."""
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    for model, op, side, frames in (("wan22", "encode", 256, 9), ("wan21", "encode", 256, 9),
                                    ("wan21", "encode", 768, 1), ("sd15", "decode", 1280, 1),
                                    ("sd15", "encode", 1024, 1)):
        math = est.explain(model, op, side, side, frames=frames, attention="math", **kw)
        fused = est.explain(model, op, side, side, frames=frames, **kw)
        assert math.bytes == fused.bytes and "its score matrices do not lead" in math.reason, model
    fourteen = as_schema(json.loads(COMMITTED.read_text()), 14)
    assert est.working_memory_bytes("sd15", "encode", 1024, 1024, attention="math", coefficients=fourteen, **kw) \
        > est.working_memory_bytes("sd15", "encode", 1024, 1024, attention="math", **kw)
    for side, needed_mib in ((768, 2843), (1024, 5277)):
        assert est.working_memory_bytes("wan21", "encode", side, side, attention="math", **kw) >= needed_mib * MIB
    coef = json.loads(COMMITTED.read_text())
    cid = "conv3d/onednn/glibc-fixed/fp32/linux/encode/untiled"
    assert not next(c for c in coef["calibrations"] if c["calibration"] == cid)["variants"]
    led = est.explain("wan21", "encode", 1024, 1024, attention="math", **kw)
    assert "dry-run peak with its score matrices" in led.reason
    assert led.bytes > est.working_memory_bytes("wan21", "encode", 1024, 1024, **kw)


def test_the_reason_says_when_the_resident_branch_prices():
    """Wan 2.2's bf16 encode on the AMX Xeon, 4.2x past its largest point: its line (0.977 x the dry run) falls
    below 1.05 x (dry run + the 7 MiB every point held beyond it), which prices it and is said."""
    kw = dict(dtype="bf16", backend="onednn-amx", allocator="glibc-fixed", os="linux", frames=9)
    e = est.explain("wan22", "encode", 512, 512, **kw)
    assert e.source == "measured" and "the least any of its points needed beyond its dry run, with the margin), above" in e.reason
    (cal,) = [c for c in est.load()["calibrations"]
              if c["calibration"] == "conv3d/onednn-amx/glibc-fixed/bf16/linux/encode/untiled"]
    line = cal["architectures"]["wan22"]
    assert line["resident_factor"] == 1.05 and line["resident_bytes"] > 0
    small = est.explain("wan22", "encode", 160, 96, **kw)
    assert "the least any of its points needed" not in small.reason  # in its points' range the line prices


def test_a_batch_at_one_samples_price_explains_that_sample_as_requested(monkeypatch):
    """Where a batch takes one sample's price (its line prices one sample by the most a convolution's call holds,
    the batch below it), the reason explains that one sample's request, tiled as the batch is: not the untiled
    request, which another line prices. No shipped line prices a tiled batch so: the plan's price is made to."""
    real = est._Plan.price

    def price(self, w, h, b, f, t):  # noqa: ANN001, ANN202
        r = real(self, w, h, 1, f, t)
        return r[:4] + ("one sample",) + r[5:] if b > 1 else r

    monkeypatch.setattr(est._Plan, "price", price)
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", frames=9, tile=256)
    one = est.explain("wan21", "decode", 768, 512, **kw)
    two = est.explain("wan21", "decode", 768, 512, batch=2, **kw)
    untiled = est.explain("wan21", "decode", 768, 512, **{**kw, "tile": None})
    assert "at one sample's price" in two.reason and two.reason.endswith(one.reason)
    assert two.group == one.group != untiled.group
    est.clear_cache()


def test_an_unsliced_batch_the_model_cannot_run_is_refused_as_unrunnable():
    """The packaged file's ``refused_batch`` (HunyuanVideo 1.5, campaign 36): pricing and the dry run refuse an
    unsliced batch with the reason, as a request the model cannot run; one sample and a sliced batch are priced;
    a file without the field refuses nothing."""
    kw = dict(dtype="bf16", backend="onednn", allocator="glibc-fixed", os="linux", frames=9)
    for op in ("decode", "encode"):
        with pytest.raises(est.Unrunnable, match=f"hunyuanvideo-1.5 cannot {op} a batch of 2 unsliced"):
            est.working_memory_bytes("hunyuanvideo-1.5", op, 256, 160, batch=2, **kw)
        with pytest.raises(est.Unrunnable, match=f"cannot {op} a batch of 3 unsliced"):
            est.dry_run_bytes(None, "hunyuanvideo-1.5", op, 256, 160, dtype="bf16", batch=3, frames=9)
        assert est.working_memory_bytes("hunyuanvideo-1.5", op, 256, 160, **kw) > 0
        assert est.working_memory_bytes("hunyuanvideo-1.5", op, 256, 160, batch=2, slicing=True, **kw) > 0
        for call in (lambda: est.explain("hunyuanvideo-1.5", op, 256, 160, batch=2, **kw),
                     lambda: est.largest_tile("hunyuanvideo-1.5", op, 1024, 576, 10**12, batch=2, **kw),
                     lambda: est.working_memory_bytes("hunyuanvideo-1.5", op, 256, 160, batch=2,
                                                      **{**kw, "backend": "cudnn", "allocator": "native"})):
            with pytest.raises(est.Unrunnable, match="unsliced"):  # the reason, the fallback's too
                call()
    with pytest.raises(ValueError, match="batch must be"):  # the geometry first, as pricing checks it
        est.dry_run_bytes(None, "hunyuanvideo-1.5", "decode", 256, 160, dtype="bf16", batch=0, frames=9)
    bad = json.loads(COMMITTED.read_text())
    bad["models"]["hunyuanvideo-1.5"]["refused_batch"]["decode"] = None
    with pytest.raises(ValueError, match="refused_batch must be a reason"):
        est.load(bad)
    doc = json.loads(COMMITTED.read_text())
    for m in doc["models"].values():
        m.pop("refused_batch", None)
    assert est.working_memory_bytes("hunyuanvideo-1.5", "decode", 256, 160, batch=2, coefficients=doc, **kw) > 0


def test_validate_leaves_the_callers_dict_alone_and_an_edit_after_it_is_checked():
    """validate(d) marked d as validated and indexed it in place: an edit of d after priced from it unchecked (a
    negative slope gave a negative price) and d no longer serialised to JSON."""
    doc = json.loads(COMMITTED.read_text())
    before = json.dumps(doc, sort_keys=True)
    checked = est.validate(doc, "mine")
    assert json.dumps(doc, sort_keys=True) == before and checked is not doc
    g = doc["groups"][0]
    g["slope_bytes_per_pixel"] = -1e9
    with pytest.raises(ValueError, match=r"groups\[0\]\.slope_bytes_per_pixel must be a non-negative number"):
        est.working_memory_bytes(g["architecture"], g["op"], 128, 128, dtype=g["dtype"], backend=g["conv_backend"],
                                 allocator=g["allocator"], os=g["os"], coefficients=doc)
    del doc["margin"]
    with pytest.raises(ValueError, match=r"\.margin is missing"):
        est.validate(doc, "mine")


def test_a_fallback_says_where_the_platform_was_measured_under_another_allocator():
    """A CPU rig measures glibc-fixed, an app's process runs glibc: the fallback says the platform was measured
    under the other allocator (the one key a process may change); a platform never measured says nothing of it."""
    cpu = est.explain("sd15", "decode", 512, 512, dtype="bf16", backend="onednn-amx", allocator="glibc", os="linux")
    assert cpu.source == "fallback"
    assert cpu.reason.endswith("; onednn-amx bf16 decode on linux was measured under allocator glibc-fixed, not glibc")
    gpu = est.explain("sd15", "decode", 512, 512, dtype="bf16", backend="cudnn", allocator="native", os="linux")
    assert gpu.source == "fallback" and "measured under allocator" not in gpu.reason
    # measured under this allocator too (SD1.5's own glibc line): an architecture not measured there is not told to
    # change allocator
    wan = est.explain("wan21", "decode", 512, 512, frames=5, dtype="fp32", backend="onednn", allocator="glibc",
                      os="linux")
    assert wan.source == "fallback" and "measured under allocator" not in wan.reason


def test_the_apps_rules_refuse_what_pricing_refuses():
    """The legacy, ComfyUI and InvokeAI rules are public in the exported module: a negative width gave a negative
    reservation, an unknown dtype a KeyError. An ``__index__`` of its own that raises or returns no int is a
    ValueError too (it escaped as OverflowError)."""
    kw = dict(dtype="fp32", backend="cudnn")
    with pytest.raises(ValueError, match="width must be a positive integer, got -512"):
        est.legacy_bytes("decode", -512, 512, sd_family=True, **kw)
    with pytest.raises(ValueError, match="unknown dtype 'fp64'"):
        est.comfy_bytes("decode", 512, 512, dtype="fp64", amd=False)
    with pytest.raises(ValueError, match="tile must be a positive integer"):
        est.invokeai_bytes("decode", 512, 512, tile=0, **kw)
    assert est.legacy_bytes("decode", 1024, 1024, sd_family=True, **kw) == 9050 * est.MIB  # the seeds' "before"
    # a backend that is none (rocm priced at CUDA's constant), a flag that is no bool, a model given by name
    # (an AttributeError)
    with pytest.raises(ValueError, match="unknown backend 'rocm'; choose one of: cudnn, miopen"):
        est.legacy_bytes("decode", 512, 512, dtype="fp16", backend="rocm", sd_family=True)
    with pytest.raises(ValueError, match="sd_family is True or False, got 'no'"):
        est.legacy_bytes("decode", 512, 512, dtype="fp16", backend="miopen", sd_family="no")
    with pytest.raises(ValueError, match="amd is True or False"):
        est.comfy_bytes("decode", 512, 512, dtype="fp16", amd=None)
    for rule in (lambda: est.comfy_bytes("decode", 832, 480, dtype="bf16", amd=False, frames=81, model="wan21"),
                 lambda: est.invokeai_bytes("decode", 832, 480, dtype="bf16", backend="cudnn", model="wan21")):
        with pytest.raises(ValueError, match="model is a coefficient document's entry of a model"):
            rule()

    class Index:
        def __init__(self, result: object) -> None:
            self.result = result

        def __index__(self) -> object:
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

    for bad in (Index(OverflowError()), Index(RuntimeError("boom")), Index("512")):
        with pytest.raises(ValueError, match="width must be a positive integer"):
            est.working_memory_bytes("sd15", "decode", bad, 512, **kw, allocator="native", os="linux")


def test_force_upcast_advice_names_the_request_that_prices_what_the_pipeline_runs():
    """SDXL's pipelines run its fp16 VAE in fp32: the fp16 estimate says so and which request prices that, and that
    request costs more (the fp32 working set and the weights' cast)."""
    kw = dict(backend="cudnn", allocator="native", os="linux")
    half = est.explain("sdxl", "decode", 1024, 1024, dtype="fp16", **kw)
    assert half.reason.endswith("they run this fp16 VAE in fp32: for them, price dtype fp32 with loaded dtype fp16")
    upcast = est.explain("sdxl", "decode", 1024, 1024, dtype="fp32", loaded_dtype="fp16", **kw)
    assert upcast.cast_bytes > 0 and upcast.bytes > half.bytes
    assert "force_upcast" not in upcast.reason
    assert "force_upcast" not in est.explain("flux1", "decode", 1024, 1024, dtype="fp16", **kw).reason
