"""The runtime estimator: the legacy seed rows, exact pricing, cast/batch/frames/tile terms, fallback, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vaemem import estimate as est

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
    return {"schema_version": 1, "margin": 0.05, "models": models, "groups": list(groups), **extra}


def _group(arch="sd15", op="decode", conv="cudnn", alloc="native", dtype="fp16", os_="linux", tiled=False,
           slope=1000.0, base=100 * MIB, tile_slope=None):
    g = {"architecture": arch, "op": op, "conv_backend": conv, "allocator": alloc, "dtype": dtype, "os": os_,
         "tiled": tiled, "slope_bytes_per_pixel": slope, "base_bytes": base}
    g["group"] = est._group_id(g)
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
    assert (e.source, e.bytes) == ("exact", int(2500.0 * 1024 * 768 + 300 * MIB))
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


def test_fallback_order_exact_then_measured_elsewhere_then_legacy():
    # CogView4 measured on cuDNN/native: an unmeasured allocator must not get the legacy rule's 2x under-reservation
    big = _group(arch="cogview4", dtype="bf16", slope=8000.0, base=400 * MIB)
    coef = _coef([big])
    kw = dict(dtype="bf16", backend="cudnn", os="linux", coefficients=coef)
    exact = est.explain("cogview4", "decode", 1024, 1024, allocator="native", **kw)
    assert exact.source == "exact"
    other = est.explain("cogview4", "decode", 1024, 1024, allocator="cudaMallocAsync", **kw)
    assert other.source == "fallback" and other.bytes == exact.bytes > other.floor_bytes
    assert other.group == big["group"]
    # a model measured nowhere, or measured below the legacy rule, gets the legacy rule
    low = _coef([_group(arch="flux1", dtype="bf16", slope=10.0, base=MIB)])
    e = est.explain("flux1", "decode", 1024, 1024, allocator="native", dtype="bf16", backend="miopen", os="windows",
                    coefficients=low)
    assert e.bytes == e.floor_bytes == 7200 * MIB and e.source == "fallback"


def test_fallback_never_prices_below_legacy():
    coef = _coef([_group(arch="sd15", dtype="fp32", slope=1.0, base=MIB)])
    for res in (256, 512, 1024, 2048):
        for backend in ("cudnn", "miopen", "xpu"):
            e = est.explain("sdxl", "decode", res, res, dtype="fp32", backend=backend, allocator="native",
                            os="windows", coefficients=coef)
            assert e.bytes >= est.legacy_bytes("decode", res, res, dtype="fp32", backend=backend, sd_family=True)


@pytest.mark.parametrize("kwargs,message", [
    (dict(model="nope"), "unknown model 'nope'; the coefficient file knows: cogview4, flux1, sdxl, wan21"),
    (dict(op="blur"), "unknown op 'blur'"),
    (dict(dtype="fp8"), "unknown dtype 'fp8'"),
    (dict(loaded_dtype="int8"), "unknown loaded_dtype"),
    (dict(backend="tpu"), "unknown backend 'tpu'; choose one of: cudnn, miopen"),
    (dict(width=0), "width must be a positive integer"),
    (dict(width=1004), "multiples of 8"),
    (dict(batch=-1), "batch must be a positive"),
    (dict(frames=5), "image model"),
    (dict(tile=100), "tile must be a positive multiple of 8"),
    (dict(dtype="bf16"), "no coefficient line for dtype bf16 .* measured dtypes there: fp16"),
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
    path.write_text(json.dumps({"schema_version": 2}))
    with pytest.raises(ValueError, match="newer than the one this estimator reads"):
        est.load(path)
    est.clear_cache()


def test_group_ids_agree_with_the_fitter():
    from vaemem.fit.coefficients import GROUP_KEYS, group_id

    g = _group()
    assert GROUP_KEYS == est.GROUP_KEYS and group_id(g) == est._group_id(g)


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
