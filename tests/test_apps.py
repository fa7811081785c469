"""What an app needs (issue 12): the exported module, platform detection, tile by budget, layered files, the
cast term, the light entry point and the CLI's defaults."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vaemem import estimate as est
from vaemem.cli import app
from conftest import as_schema, scale_slope, unmeasured

ROOT = Path(__file__).parent.parent
PACKAGED = ROOT / "vaemem" / "coefficients.json"
MIB = 1024 * 1024
runner = CliRunner()


def _requests(doc: dict) -> list[dict]:
    """Requests covering every committed pixel group and every architecture of every calibration, two sizes
    each, plus fallbacks on a GPU platform for every zoo model."""
    by_arch: dict[str, str] = {}
    for name, m in sorted(doc["models"].items()):
        by_arch.setdefault(m["architecture"], name)
    out = []
    for g in doc["groups"]:
        m = doc["models"][by_arch[g["architecture"]]]
        f, tile = m["spatial_factor"], (128 if g["tiled"] else None)
        for side in (256, 512):
            out.append(dict(model=by_arch[g["architecture"]], op=g["op"], width=side, height=side, dtype=g["dtype"],
                            backend=g["conv_backend"], allocator=g["allocator"], os=g["os"], tile=tile,
                            frames=1 if m["temporal_factor"] is None else 1 + (m.get("frame_step") or
                                                                              m["temporal_factor"])))
    for c in doc["calibrations"]:
        for arch in c["architectures"]:
            m = doc["models"][by_arch[arch]]
            for side in (512, 640) if c["tiled"] else (256, 640):
                out.append(dict(model=by_arch[arch], op=c["op"], width=side, height=side, dtype=c["dtype"],
                                backend=c["conv_backend"], allocator=c["allocator"], os=c["os"],
                                tile=256 if c["tiled"] else None,  # the tiled structures' smallest tile
                                frames=1 if m["temporal_factor"] is None else 1 + 4 * (m.get("frame_step") or
                                                                                       m["temporal_factor"])))
    for name, m in sorted(doc["models"].items()):
        for op in m["ops"]:
            structured = f"{m['architecture']}/{op}/bf16/untiled" in doc["structures"]  # math needs a structure
            for attention in ("fused", "math") if structured else ("fused",):
                out.append(dict(model=name, op=op, width=1024, height=1024, dtype="bf16", backend="cudnn",
                                allocator="native", os="linux", tile=None, attention=attention,
                                frames=1 if m["temporal_factor"] is None else 1 + 2 * (m.get("frame_step") or
                                                                                       m["temporal_factor"])))
    return out


# ---- export --python -------------------------------------------------------------------------------------------

def test_the_exported_module_is_deterministic_self_contained_and_prices_what_the_package_prices(tmp_path):
    a, b = tmp_path / "a" / "vaemem_estimate.py", tmp_path / "b" / "vaemem_estimate.py"
    for out in (a, b):
        res = runner.invoke(app, ["export", "--python", str(out)])
        assert res.exit_code == 0, res.output
    assert a.read_bytes() == b.read_bytes()
    reqs = _requests(json.loads(PACKAGED.read_text()))
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport vaemem_estimate as e\n"
            "out = []\nfor r in json.loads(sys.argv[2]):\n"
            "    m, op, w, h = r.pop('model'), r.pop('op'), r.pop('width'), r.pop('height')\n"
            "    out.append(e.working_memory_bytes(m, op, w, h, **r))\n"
            "mods = sorted(n for n in sys.modules if n.split('.')[0] in ('vaemem', 'torch', 'numpy'))\n"
            "print(json.dumps({'bytes': out, 'modules': mods, 'path': e.default_coefficients_path(),\n"
            "                  'sha256': e.coefficients_sha256()}))")
    env = {"PATH": os.environ.get("PATH", ""), "VAEMEM_COEFFICIENTS": "/nonexistent.json"}  # embedded wins
    res = subprocess.run([sys.executable, "-I", "-c", code, str(a.parent), json.dumps(reqs)], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    assert got["modules"] == [] and got["path"] == "<embedded>"
    want = [est.working_memory_bytes(r["model"], r["op"], r["width"], r["height"], coefficients=PACKAGED,
                                     **{k: v for k, v in r.items() if k not in ("model", "op", "width", "height")})
            for r in reqs]
    assert got["bytes"] == want and len(want) > 60
    # which coefficients priced: the package's digest of the same document, named in the module's header
    assert got["sha256"] == est.coefficients_sha256(PACKAGED) == est.coefficients_sha256(json.loads(
        PACKAGED.read_text()))
    assert f"coefficients sha256:{got['sha256']}." in a.read_text().splitlines()[0]
    changed = json.loads(PACKAGED.read_text())
    changed["models"]["sd15"]["force_upcast"] = not changed["models"]["sd15"].get("force_upcast", False)
    assert est.coefficients_sha256(changed) != got["sha256"]  # one field changed, another digest


def test_export_refuses_a_bad_coefficient_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"schema_version": 3, "margin": 0.05, "models": {}, "groups": [{"op": "decode"}]}))
    res = runner.invoke(app, ["export", "--python", str(tmp_path / "x.py"), "--coefficients", str(bad)])
    assert res.exit_code == 2 and "groups[0].architecture is missing" in res.output and not (tmp_path / "x.py").exists()


# ---- detect_platform with fake torch modules ---------------------------------------------------------------------

def fake_torch(device: str = "cpu", hip: str | None = None, mkldnn: bool = True, bf16: bool = True,
               fp16: bool = False, allocator_backend: str = "native", flash: bool = True, sdpa: bool = True,
               kernel: bool = True, probes: list | None = None, amx: bool | None = False):
    """A torch module as detect_platform reads it. ``flash``: the fused SDPA switches; ``kernel``: whether a fused
    kernel takes the probe's head (else SDPA refuses as torch does under sdpa_kernel); ``probes`` collects the
    kernels each probe allowed and the probe tensor's dtype and device."""
    cuda = types.SimpleNamespace(is_available=lambda: device in ("cuda", "rocm"),
                                 memory=types.SimpleNamespace(get_allocator_backend=lambda: allocator_backend))
    backends = types.SimpleNamespace(
        mkldnn=types.SimpleNamespace(is_available=lambda: mkldnn),
        mps=types.SimpleNamespace(is_available=lambda: device == "mps"),
        cuda=types.SimpleNamespace(flash_sdp_enabled=lambda: flash, mem_efficient_sdp_enabled=lambda: flash))
    allowed: list = []

    @contextlib.contextmanager
    def sdpa_kernel(kernels):
        allowed.append(list(kernels))
        yield

    def attend(q, k, v):
        if probes is not None:
            probes.append((allowed[-1], q))
        if not kernel:
            raise RuntimeError("No available kernel. Aborting execution.")

    functional = types.SimpleNamespace(**({"scaled_dot_product_attention": attend} if sdpa else {}))
    attention = types.SimpleNamespace(sdpa_kernel=sdpa_kernel, SDPBackend=types.SimpleNamespace(
        FLASH_ATTENTION="flash", EFFICIENT_ATTENTION="efficient", CUDNN_ATTENTION="cudnn", MATH="math"))
    # torch.cpu._is_amx_tile_supported (None: a torch without it)
    cpu = types.SimpleNamespace(**({} if amx is None else {"_is_amx_tile_supported": lambda: amx}))
    return types.SimpleNamespace(
        cpu=cpu, cuda=cuda, backends=backends, version=types.SimpleNamespace(hip=hip, cuda="12.4" if not hip else None),
        xpu=types.SimpleNamespace(is_available=lambda: device == "xpu"),
        ops=types.SimpleNamespace(mkldnn=types.SimpleNamespace(_is_mkldnn_bf16_supported=lambda: bf16,
                                                               _is_mkldnn_fp16_supported=lambda: fp16)),
        float16="f16", bfloat16="bf16", float32="f32",
        zeros=lambda shape, dtype, device: types.SimpleNamespace(shape=shape, dtype=dtype, device=device),
        nn=types.SimpleNamespace(functional=functional, attention=attention))


@pytest.mark.parametrize("torch_kw,dtype,env,platform,want", [
    (dict(device="cuda"), "bf16", {}, "linux", ("cuda", "cudnn", "native", "linux", "fused")),
    (dict(device="cuda", allocator_backend="cudaMallocAsync"), "fp16", {}, "linux",
     ("cuda", "cudnn", "cudaMallocAsync", "linux", "fused")),
    (dict(device="cuda"), "fp16", {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, "win32",
     ("cuda", "cudnn", "expandable", "windows", "fused")),
    (dict(device="cuda"), "fp16", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments: False"}, "linux",
     ("cuda", "cudnn", "expandable-off", "linux", "fused")),
    (dict(device="rocm", hip="6.2", flash=False), "fp16", {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"},
     "linux", ("cuda", "miopen", "expandable", "linux", "math")),
    (dict(device="rocm", hip="6.2"), "fp32", {}, "win32", ("cuda", "miopen", "native", "windows", "fused")),
    (dict(device="mps"), "fp16", {}, "darwin", ("mps", "mps", "native", "darwin", "fused")),
    # the switches on, no kernel for the head: a ROCm build whose kernels stop at 256 channels, an MPS with none
    (dict(device="rocm", hip="6.2", kernel=False), "fp16", {}, "linux", ("cuda", "miopen", "native", "linux", "math")),
    (dict(device="mps", kernel=False), "fp16", {}, "darwin", ("mps", "mps", "native", "darwin", "math")),
    (dict(kernel=False), "fp32", {}, "linux", ("cpu", "onednn", "glibc", "linux", "math")),
    (dict(flash=False), "fp32", {}, "linux", ("cpu", "onednn", "glibc", "linux", "math")),
    (dict(device="xpu", sdpa=False), "bf16", {}, "linux", ("xpu", "xpu", "native", "linux", "math")),
    (dict(), "fp32", {}, "linux", ("cpu", "onednn", "glibc", "linux", "fused")),
    (dict(), "fp32", {"MALLOC_MMAP_THRESHOLD_": "65536"}, "linux", ("cpu", "onednn", "glibc-fixed", "linux", "fused")),
    (dict(bf16=False), "bf16", {}, "linux", ("cpu", "aten", "glibc", "linux", "fused")),
    (dict(bf16=True), "bf16", {}, "linux", ("cpu", "onednn", "glibc", "linux", "fused")),
    # half precision on a CPU with AMX tiles is a platform of its own; fp32 there is oneDNN's as anywhere
    (dict(bf16=True, amx=True), "bf16", {}, "linux", ("cpu", "onednn-amx", "glibc", "linux", "fused")),
    (dict(fp16=True, amx=True), "fp16", {}, "linux", ("cpu", "onednn-amx", "glibc", "linux", "fused")),
    (dict(amx=True), "fp32", {}, "linux", ("cpu", "onednn", "glibc", "linux", "fused")),
    (dict(bf16=False, amx=True), "bf16", {}, "linux", ("cpu", "aten", "glibc", "linux", "fused")),

    (dict(fp16=False), "fp16", {}, "linux", ("cpu", "aten", "glibc", "linux", "fused")),
    (dict(mkldnn=False), "fp32", {}, "darwin", ("cpu", "aten", "system", "darwin", "fused")),
    (dict(), "fp32", {}, "win32", ("cpu", "onednn", "system", "windows", "fused")),
])
def test_detect_platform_on_fake_torch_modules(monkeypatch, torch_kw, dtype, env, platform, want):
    monkeypatch.setattr(sys, "platform", platform)
    got = est.detect_platform(fake_torch(**torch_kw), dtype, env=env)
    assert (got["device"], got["backend"], got["allocator"], got["os"], got["attention"]) == want
    assert got["dtype"] == dtype  # the keys hold for it: pricing another dtype with them is a TypeError, not 3x off


@pytest.mark.parametrize("probe,flags,want", [
    (None, "fpu avx512f avx512_bf16", "onednn"),  # no torch probe: Linux's flags tell
    (None, "fpu avx512_bf16 amx_bf16 amx_tile amx_int8", "onednn-amx"),
    (None, None, "onednn-amx"),  # neither tells: the platform that holds more
    ("raises", "fpu avx512_bf16", "onednn"),  # a probe that raises: the flags still tell
    (False, "fpu amx_tile", "onednn"),  # torch's probe wins
])
def test_amx_without_torchs_probe(monkeypatch, tmp_path, probe, flags, want):
    """A torch without ``torch.cpu._is_amx_tile_supported`` (pyproject allows torch 2.1) must not price an AMX
    CPU by the lines of one without AMX (0.79-0.88x its demand in bf16)."""
    cpuinfo = tmp_path / "cpuinfo"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(est, "CPUINFO", str(cpuinfo))
    torch = fake_torch(bf16=True, amx=None if probe in (None, "raises") else probe)
    if probe == "raises":
        def broken() -> bool:
            raise RuntimeError("no cpuinfo")
        torch.cpu._is_amx_tile_supported = broken
    assert est.conv_backend(torch, "cpu", "bf16") == want
    assert est.conv_backend(torch, "cpu", "fp32") == "onednn"


def test_the_attention_probe_is_one_vae_head_on_the_device_with_the_enabled_fused_kernels():
    probes: list = []
    assert est.detect_platform(fake_torch(device="cuda", probes=probes), "bf16", env={})["attention"] == "fused"
    (kernels, q), = probes
    assert kernels == ["flash", "efficient"] and q.shape == (1, 1, 64, 512) and q.dtype == "bf16" \
        and q.device == "cuda"
    old = fake_torch()
    del old.nn.attention  # torch before 2.3: the switches alone
    assert est.detect_platform(old, "fp32", env={})["attention"] == "fused"


def test_detect_platform_refuses_what_it_cannot_name(monkeypatch):
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        est.detect_platform(fake_torch(), "fp8")
    for not_torch in (None, "torch", 3):  # an AttributeError before
        with pytest.raises(ValueError, match=r"detect_platform needs the torch module \(import torch"):
            est.detect_platform(not_torch, "fp32", device="cuda" if not_torch == 3 else None)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        est.detect_platform(fake_torch(), "fp32", device="tpu")
    monkeypatch.setattr(sys, "platform", "aix")
    with pytest.raises(ValueError, match="unsupported platform 'aix'"):
        est.detect_platform(fake_torch(), "fp32")


def test_the_rig_records_what_detect_platform_finds():
    from vaemem.measuring.child.rig import backend_of

    assert backend_of(fake_torch(device="rocm", hip="6.2"), "cuda:0", "fp16") == ("rocm", "miopen")
    assert backend_of(fake_torch(bf16=False), "cpu", "bf16") == ("cpu", "aten")
    assert backend_of(fake_torch(), "cpu", "bf16") == ("cpu", "onednn")


# ---- tile by budget ----------------------------------------------------------------------------------------------

GPU = dict(dtype="bf16", backend="cudnn", allocator="native", os="linux")


def test_largest_tile_picks_the_largest_candidate_within_the_budget():
    priced = {t: est.working_memory_bytes("flux1", "decode", 2048, 2048, tile=t, **GPU) for t in (1024, 768, 512, 384, 256)}
    assert priced[1024] > priced[768] > priced[512] > priced[384] > priced[256]  # the premise of the search
    budget = (priced[768] + priced[512]) // 2
    r = est.largest_tile("flux1", "decode", 2048, 2048, budget, **GPU)
    assert r["tile"] == 512 and r["tile_bytes"] == priced[512] and r["priced"] == priced
    assert r["untiled_fits"] is False and r["untiled_bytes"] == est.working_memory_bytes("flux1", "decode", 2048,
                                                                                         2048, **GPU)
    assert est.largest_tile("flux1", "decode", 2048, 2048, priced[256] - 1, **GPU)["tile"] is None
    big = est.largest_tile("flux1", "decode", 2048, 2048, 10**12, **GPU)
    assert big["untiled_fits"] and big["tile"] == 1024
    small = est.largest_tile("flux1", "decode", 600, 512, 10**12, candidates=[512, 520, 256, 128, 12, 8], **GPU)
    assert list(small["priced"]) == [520, 512, 256]  # smaller than the long side, multiples of 8, not below 256
    with pytest.raises(ValueError, match="priced tiled from 256 px tiles up"):  # the tiled structure's grid
        est.working_memory_bytes("flux1", "decode", 1024, 1024, tile=128, **GPU)
    assert est.largest_tile("flux1", "decode", 1024, 1024, 0, **GPU)["tile"] is None  # nothing fits no memory
    assert est.largest_tile("flux1", "decode", 2048, 2048, budget * 1.0, **GPU)["tile"] == 512  # free x 0.9 alike
    for bad in (-1, True, float("nan"), "1e9"):
        with pytest.raises(ValueError, match="budget_bytes must be a number of bytes, 0 or more"):
            est.largest_tile("flux1", "decode", 1024, 1024, bad, **GPU)


def test_largest_tile_prices_the_tiles_of_a_request_that_cannot_run_untiled():
    """CogVideoX's decode of 1920x1088 x 49 frames is refused untiled (a convolution's input split shorter than
    its kernel) while its tiles run: the search must not raise where tiling is the remedy. A model that cannot
    run tiled keeps its untiled answer with no tile priced; a request neither way can run raises."""
    r = est.largest_tile("cogvideox", "decode", 1920, 1088, 40 * 2**30, frames=49, **GPU)
    assert r["untiled_bytes"] is None and r["untiled_fits"] is False and "cannot run this" in r["untiled_refused"]
    assert r["priced"] and r["tile"] == max(t for t, b in r["priced"].items() if b <= 40 * 2**30)
    assert r["priced"][r["tile"]] == est.working_memory_bytes("cogvideox", "decode", 1920, 1088, frames=49,
                                                              tile=r["tile"], **GPU)
    with pytest.raises(ValueError, match="cannot run this"):
        est.working_memory_bytes("cogvideox", "decode", 1920, 1088, frames=49, **GPU)
    assert r["tiled_refused"] is None
    whole = est.largest_tile("hunyuanimage-2.1", "encode", 1024, 1024, 40 * 2**30, **GPU)
    assert whole["untiled_fits"] and whole["priced"] == {} and whole["tile"] is None
    assert "tiled_encode unpacks a 5-D shape" in whole["tiled_refused"]
    # the CLI says why no tile is priced (it read "no tile fits (tiles priced, MiB: none smaller than the image")
    res = runner.invoke(app, ["estimate", "-m", "hunyuanimage-2.1", "--op", "encode", "--res", "2048", "--dtype",
                              "bf16", "--backend", "cudnn", "--allocator", "native", "--os", "linux", "--budget",
                              "100"])
    assert res.exit_code == 1 and "budget 100 MiB: untiled" in res.output
    assert "does not fit; tiled refused: " in res.output and "tiles priced" not in res.output
    with pytest.raises(ValueError, match="width must be a positive integer"):
        est.largest_tile("flux1", "decode", -8, 1024, 2**30, **GPU)
    with pytest.raises(ValueError, match="width must be a positive integer"):
        est.largest_tile("flux1", "decode", "1024", 1024, 2**30, **GPU)
    # a platform vaemem will not price is refused, not tiled by the fallback (bf16 under glibc: only glibc-fixed
    # was measured in bf16 here)
    with pytest.raises(ValueError, match="no coefficient line for dtype bf16") as refused:
        est.largest_tile("sd15", "decode", 1024, 1024, 2**34, dtype="bf16", backend="onednn", allocator="glibc",
                         os="linux")
    assert not isinstance(refused.value, est.Unrunnable)
    np = pytest.importorskip("numpy")
    assert est.largest_tile("cogvideox", "decode", 1920, 1088, np.float32(40 * 2**30), frames=49, **GPU) == r
    res = runner.invoke(app, ["estimate", "-m", "cogvideox", "--op", "decode", "--res", "1920x1088", "--frames",
                              "49", "--budget", "40960", "--dtype", "bf16", "--backend", "cudnn", "--allocator",
                              "native", "--os", "linux"])
    assert res.exit_code == 0 and "cannot run untiled" in res.output and \
        f"largest tile that fits: {r['tile']} px" in res.output, res.output


def test_a_dict_of_coefficients_is_validated_once_and_the_cache_stays_small():
    """An app that builds a fresh dict per call must not grow the cache without bound (200 such calls once held
    449 MiB); the same dict handed in again is a cache hit."""
    text = PACKAGED.read_text()
    est.clear_cache()
    doc = json.loads(text)
    first = est.load(doc)
    assert est.load(doc) is first
    for _ in range(est.DICTS_KEPT + 2):  # past the bound
        est.load(json.loads(text))
    assert sum(1 for k in est._CACHE if isinstance(k, tuple) and k[0] == "dict") == est.DICTS_KEPT
    # layered over the packaged file, a fresh dict per call: as bounded (each call added an entry, 6.6 MiB)
    mine = json.loads(text)
    assert est.load([mine, None]) is est.load([mine, None])
    for _ in range(est.DICTS_KEPT + 2):  # past the bound
        est.load([json.loads(text), None])
    assert sum(1 for k in est._CACHE if isinstance(k, tuple) and k[0] == "layers") == est.DICTS_KEPT
    est.clear_cache()


def test_load_is_one_caller_at_a_time(monkeypatch):
    """Two threads loading fresh dicts: the second validates only after the first is done (unguarded, two
    evictions at once raised "dictionary changed size during iteration")."""
    import threading

    est.clear_cache()
    inside, overlap, b_in, calls = threading.Event(), [], threading.Event(), []
    real = est.validate

    def slow_validate(data, source="coefficients", layered=False):
        calls.append(source)
        if inside.is_set():
            overlap.append(source)
            b_in.set()
        if len(calls) == 1:
            inside.set()
            b_in.wait(0.5)  # the first stays inside while the second tries; with the lock it cannot come in
            inside.clear()
        return real(data, source, layered)

    monkeypatch.setattr(est, "validate", slow_validate)
    text = PACKAGED.read_text()
    a = threading.Thread(target=est.load, args=(json.loads(text),))
    a.start()
    inside.wait(5)
    b = threading.Thread(target=est.load, args=(json.loads(text),))
    b.start()
    a.join(10)
    b.join(10)
    assert not overlap
    assert sum(1 for k in est._CACHE if isinstance(k, tuple) and k[0] == "dict") == 2
    est.clear_cache()


def test_estimate_budget_on_the_cli():
    res = runner.invoke(app, ["estimate", "-m", "flux1", "--op", "decode", "--res", "2048", "--dtype", "bf16",
                              "--backend", "cudnn", "--allocator", "native", "--os", "linux", "--budget", "3000"])
    assert res.exit_code == 0, res.output
    r = est.largest_tile("flux1", "decode", 2048, 2048, 3000 * MIB, **GPU)
    assert f"largest tile that fits: {r['tile']} px" in res.output and "spatial tiling only" in res.output
    # every price the budget line shows is rounded up as the reservation is: a budget a MiB short of the untiled
    # price reads "untiled <that price> does not fit" (it read one MiB less, as the budget itself)
    cpu = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    priced = est.explain("flux1", "decode", 2048, 2048, **cpu).bytes / MIB
    untiled = math.ceil(priced)
    assert untiled - priced > 0.5  # rounded to the nearest, the line would read the budget itself
    res = runner.invoke(app, ["estimate", "-m", "flux1", "--op", "decode", "--res", "2048", "--dtype", "fp32",
                              "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux", "--budget",
                              str(untiled - 1)])
    assert f"{untiled} MiB for flux1" in res.output
    assert f"budget {untiled - 1} MiB: untiled {untiled} MiB does not fit" in res.output


@pytest.mark.parametrize("as_json", [False, True])
def test_a_budget_nothing_fits_exits_1_with_the_answer_printed(as_json):
    """A script asking what fits must not read "nothing" as success; the untiled fit alone exits 0."""
    args = ["estimate", "-m", "flux1", "--op", "decode", "--res", "2048", "--dtype", "bf16", "--backend", "cudnn",
            "--allocator", "native", "--os", "linux"] + (["--json"] if as_json else [])
    small = min(est.largest_tile("flux1", "decode", 2048, 2048, 2**40, **GPU)["priced"].values()) / MIB
    res = runner.invoke(app, args + ["--budget", str(math.floor(small * 0.99))])
    assert res.exit_code == 1, res.output
    if as_json:
        got = json.loads(res.output)["budget"]
        assert got["budget_bytes"] == math.floor(small * 0.99) * MIB
        assert got["tile"] is None and not got["untiled_fits"]
    else:
        assert "no tile fits" in res.output and "does not fit" in res.output and "Traceback" not in res.output
    assert runner.invoke(app, args + ["--budget", str(math.ceil(small * 1.01))]).exit_code == 0
    assert runner.invoke(app, args + ["--budget", "1000000"]).exit_code == 0  # untiled fits


# ---- layered files, the cast term --------------------------------------------------------------------------------

def test_a_rig_owners_fit_layered_over_the_packaged_one_wins_for_its_groups(tmp_path):
    shipped = json.loads(PACKAGED.read_text())
    mine = json.loads(PACKAGED.read_text())
    for c in mine["calibrations"]:
        for ln in c["architectures"].values():
            scale_slope(ln, 2)
    mine["calibrations"] = [c for c in mine["calibrations"] if c["op"] == "decode"]
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    layered = [tmp_path / "mine.json", None]
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    dec = [est.working_memory_bytes("sd15", "decode", 512, 512, coefficients=c, **kw) for c in
           (layered, PACKAGED, tmp_path / "mine.json")]
    assert dec[0] == dec[2] > dec[1]  # mine wins where it has the calibration
    enc = [est.working_memory_bytes("sd15", "encode", 512, 512, coefficients=c, **kw) for c in (layered, PACKAGED)]
    assert enc[0] == enc[1]  # the packaged file fills in what mine lacks
    with pytest.raises(ValueError, match="lacks groups"):
        est.working_memory_bytes("sd15", "decode", 512, 512, coefficients=[{"schema_version": 3, "models": {}},
                                                                           shipped], **kw)
    # on the CLI the packaged file is named `packaged`: mine over it, as the API's [mine, None] (mine alone left
    # the encode to the fallback)
    args = ["estimate", "-m", "sd15", "--res", "512", "--dtype", "fp32", "--backend", "onednn", "--allocator",
            "glibc-fixed", "--os", "linux", "--json", "--coefficients", str(tmp_path / "mine.json")]
    for op, want in (("decode", dec[0]), ("encode", enc[0])):
        res = runner.invoke(app, [*args, "--coefficients", "packaged", "--op", op])
        assert res.exit_code == 0 and json.loads(res.stdout)["bytes"] == want, res.output
    assert json.loads(runner.invoke(app, [*args, "--op", "encode"]).stdout)["source"] == "fallback"


def test_the_cast_term_counts_the_whole_model_or_the_half_the_op_runs():
    kw = dict(dtype="fp32", loaded_dtype="bf16", frames=17, **{k: v for k, v in GPU.items() if k != "dtype"})
    whole = est.explain("minimax-h3", "encode", 512, 512, **kw)
    half = est.explain("minimax-h3", "encode", 512, 512, cast="op", **kw)
    assert whole.cast_bytes == 2_603_868_984 * 2 and "(the whole model)" in whole.reason
    assert half.cast_bytes == 180_337_888 * 2 and "(its encoder)" in half.reason
    assert whole.bytes - half.bytes == whole.cast_bytes - half.cast_bytes


# ---- the CLI an integrator meets ---------------------------------------------------------------------------------

def test_every_option_of_every_command_has_help_text():
    import typer.main

    group = typer.main.get_command(app)
    missing = [f"{name} {p.name}" for name, cmd in group.commands.items() for p in cmd.params
               if getattr(p, "help", "x") in (None, "") and p.param_type_name == "option"]
    assert missing == []


def test_fit_will_not_replace_the_packaged_file_from_a_subset_without_replace(tmp_path):
    shutil = __import__("shutil")
    shutil.copy(ROOT / "measurements" / "epyc-avx2-2core.jsonl", tmp_path / "m.jsonl")
    before = PACKAGED.read_bytes()
    res = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl")])
    assert res.exit_code == 2 and "add --replace" in res.output and PACKAGED.read_bytes() == before


def test_written_files_respect_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        res = runner.invoke(app, ["export", "--python", str(tmp_path / "x.py")])
    finally:
        os.umask(old)
    assert res.exit_code == 0 and stat.S_IMODE((tmp_path / "x.py").stat().st_mode) == 0o640


def test_estimate_without_a_backend_detects_the_platform_and_says_so():
    res = subprocess.run([sys.executable, "-m", "vaemem.cli", "estimate", "-m", "sd15", "--op", "decode", "--res",
                          "512", "--dtype", "fp32"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "assumed backend onednn (detected: cpu)" in res.stderr and "MiB for sd15 decode" in res.stdout


def test_version():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"vaemem {__import__('vaemem').__version__}"


# ---- what a hostile caller tries (the review of issue 12) ----------------------------------------------------------

def test_a_layered_list_of_dicts_is_never_served_from_another_documents_cache():
    import copy
    import gc

    shipped = json.loads(PACKAGED.read_text())
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    base = est.working_memory_bytes("sdxl", "decode", 1024, 1024, coefficients=PACKAGED, **kw)
    for extra_gib in range(1, 6):  # each loop's dict dies before the next is made: ids get reused
        d = copy.deepcopy(shipped)
        for c in d["calibrations"]:
            for line in [*c["architectures"].values(), c["class"]]:
                for branch in (line, line.get("flat", {"base_bytes": 0})):  # the lower of the two prices
                    branch["base_bytes"] += extra_gib * 2**30
        got = est.working_memory_bytes("sdxl", "decode", 1024, 1024, coefficients=[d, None], **kw)
        assert got == base + extra_gib * 2**30, extra_gib
        del d
        gc.collect()


def test_layering_keeps_the_shipped_lines_of_architectures_the_rig_did_not_measure(tmp_path):
    shipped = json.loads(PACKAGED.read_text())
    cid = "conv2d/onednn/glibc-fixed/fp32/linux/decode/untiled"
    mine = {**shipped, "calibrations": [{**c, "architectures": {"flux1": {**c["architectures"]["flux1"],
                                                                          "dry_factor": 2.0}},
                                         "transfer_lines": {"flux1": c["transfer_lines"]["flux1"]},
                                         "variants": {}, "variant_transfer_lines": {}}
                                        for c in shipped["calibrations"] if c["calibration"] == cid]}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    layered = [tmp_path / "mine.json", None]
    cog = [est.explain("cogview4", "decode", 1024, 1024, coefficients=c, **kw) for c in (layered, PACKAGED)]
    assert cog[0].source == cog[1].source == "measured" and cog[0].bytes == cog[1].bytes
    flux = est.explain("flux1", "decode", 1024, 1024, coefficients=layered, **kw)
    assert flux.source == "measured" and "2.000 x dry-run peak" in flux.reason


def test_layering_keeps_every_layers_variant_lines_and_only_schema_13_and_14_layer(tmp_path):
    """A rig's refit of the six fp32 image encoders with no math-path points, layered over the packaged file: its
    pool is as wide as the packaged one's and wins the class and transfer lines, yet FLUX.1 on the math path is still
    priced by SD1.5's packaged math-path line (a variant's lines are one architecture's measurement, kept from
    every layer). Files of schema 13 (their lines pool the variants) and 14 price their oneDNN lines alike and
    layer; beside the packaged schema (15 and newer), which prices the math path's otherwise, either is refused."""
    shipped = json.loads(PACKAGED.read_text())
    cid = "conv2d/onednn/glibc-fixed/fp32/linux/encode/untiled"
    mine = {**shipped, "calibrations": [{**c, "variants": {}, "variant_transfer_lines": {}}
                                        for c in shipped["calibrations"] if c["calibration"] == cid]}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", attention="math")
    packaged = est.working_memory_bytes("flux1", "encode", 1280, 1280, **kw)
    assert est.working_memory_bytes("flux1", "encode", 1280, 1280, coefficients=[tmp_path / "mine.json", None],
                                    **kw) == packaged
    assert est.working_memory_bytes("flux1", "encode", 1280, 1280, coefficients=tmp_path / "mine.json", **kw) \
        < packaged
    for version in (13, 14):
        (tmp_path / f"{version}.json").write_text(json.dumps(as_schema(json.loads(PACKAGED.read_text()), version)))
    fourteen = est.working_memory_bytes("flux1", "encode", 1280, 1280, coefficients=tmp_path / "14.json", **kw)
    assert est.working_memory_bytes("flux1", "encode", 1280, 1280, coefficients=[tmp_path / "13.json",
                                                                                  tmp_path / "14.json"], **kw) \
        == fourteen
    with pytest.raises(ValueError,
                       match=rf"hold oneDNN lines of schemas 13 and {est.SCHEMA_VERSION}, .* refit layer 1"):
        est.working_memory_bytes("flux1", "encode", 1280, 1280, coefficients=[tmp_path / "13.json", None], **kw)


def test_a_layer_may_add_an_architecture_beside_the_widest_pools_transfer_lines(tmp_path):
    """A rig's fit that measured CogVideoX beside Wan 2.1 (2 architectures) layered over a file of 9 in the conv3d
    fp32 decode calibration, CogVideoX not among them (the packaged one before campaign 37): CogVideoX is priced by
    its own line, and the class line and transfer lines stay the wider file's (the widest pool), which have none for
    CogVideoX; a single file that claims to be layered gets no such leave."""
    shipped = unmeasured(json.loads(PACKAGED.read_text()))
    (tmp_path / "shipped.json").write_text(json.dumps(shipped))
    cid = "conv3d/onednn/glibc-fixed/fp32/linux/decode/untiled"
    (c,) = [c for c in shipped["calibrations"] if c["calibration"] == cid]
    assert "cogvideox" not in c["architectures"]
    mine = {**shipped, "calibrations": [{**c, "architectures": {
        "wan21": c["architectures"]["wan21"], "cogvideox": {**c["architectures"]["wan21"], "dry_factor": 2.0}},
        "transfer_lines": {"wan21": c["transfer_lines"]["wan21"], "cogvideox": c["transfer_lines"]["wan21"]}}]}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    kw = dict(dtype="fp32", frames=9, backend="onednn", allocator="glibc-fixed", os="linux")
    cog = est.explain("cogvideox", "decode", 320, 192, coefficients=[tmp_path / "mine.json",
                                                                      tmp_path / "shipped.json"], **kw)
    assert cog.source == "measured" and "2.000 x dry-run peak" in cog.reason
    claims = {**shipped, "layered": True, "calibrations": [{**c, "transfer_lines": {}}]}
    with pytest.raises(ValueError, match=r"transfer_lines must be one line per architecture of architectures"):
        est.validate(claims, "c.json")


def _without_onednn(doc: dict) -> dict:
    """``doc`` with only other backends' lines (aten's), in place."""
    doc["calibrations"] = [c for c in doc["calibrations"] if c["conv_backend"] not in est.WEIGHT_COPY_BACKENDS]
    doc["groups"] = [g for g in doc["groups"] if g["conv_backend"] not in est.WEIGHT_COPY_BACKENDS]
    assert doc["calibrations"]
    return doc


def _older(version: int) -> dict:
    """The packaged document as a file of schema ``version``: before 9 its structures carry no factor, before 7
    its calibrations no transfer lines."""
    doc = as_schema(json.loads(PACKAGED.read_text()), version)
    for s in doc["structures"].values():
        if version < 9:
            s.pop("onednn_hidden_factor", None)
    for c in doc["calibrations"]:
        if version < 7:
            c.pop("transfer_lines", None)
    return doc


ONEDNN = dict(dtype="fp32", frames=9, backend="onednn", allocator="glibc-fixed", os="linux")


@pytest.mark.parametrize("version", [5, 7, 8, 9, 10, 14])
def test_onednn_lines_of_different_schemas_are_refused(version):
    """The oneDNN lines changed meaning at schemas 8 (AMX apart), 9 (in the dry run with oneDNN's buffers), 10
    (tiled as well) and 15 (the math path's, on the fused part), and a layered document prices them by one schema:
    an older file's oneDNN lines beside the packaged ones (a schema-9 file's tiled lines at factor 1 beside the
    packaged tiled lines, fitted with it: 0.63x) are refused either way round, naming the layer to refit. Alone it prices, and layers of one schema layer."""
    old = _older(version)
    for layers, stale in (([old, None], 1), ([None, old], 2)):
        first, then = (version, est.SCHEMA_VERSION) if stale == 1 else (est.SCHEMA_VERSION, version)
        with pytest.raises(ValueError, match=rf"coefficients layers 1 and 2 hold oneDNN lines of schemas {first} "
                                             rf"and {then}, .* refit layer {stale} with `vaemem fit`"):
            est.explain("cogvideox", "decode", 320, 192, coefficients=layers, **ONEDNN)
    alone = est.explain("hunyuanvideo", "decode", 320, 192, coefficients=old, **ONEDNN)
    assert ("for the buffers oneDNN's ops hold" in alone.reason) == (version >= 9)
    assert est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[old, old], **ONEDNN).bytes == alone.bytes
    shipped = est.explain("hunyuanvideo", "decode", 320, 192, **ONEDNN)
    assert est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[None, None], **ONEDNN).bytes == shipped.bytes


@pytest.mark.parametrize("version", [5, 7, 8, 9, 10, 11, 14, 23, 25])
def test_an_older_file_of_other_backends_lines_layers_after_the_packaged_one_and_never_before_it(version):
    """An older file of aten's lines only (a GPU rig owner's would be cuDNN's) beside the packaged one: after it,
    the packaged structures win every key and the oneDNN prices (with AMX as well: the document is of the oneDNN
    lines' schema: the packaged tiled lines keep their factor) are the packaged ones. Put first, its structures
    would price the packaged oneDNN lines by an older schema's rules (schema 7's and 8's carry no factor: 1, where
    HunyuanVideo's bf16 decode needs 1.22; 23's the calls' live bytes before 24's rule): refused, naming both."""
    old = _without_onednn(_older(version))
    amx = dict(dtype="bf16", backend="onednn-amx", allocator="glibc-fixed", os="linux")
    for kw, args in ((ONEDNN, ("hunyuanvideo", "decode", 320, 192)), (amx, ("flux2", "encode", 768, 768)),
                     ({**amx, "tile": 512}, ("sd15", "decode", 1024, 1024))):  # tiled: the schema-10 factor
        shipped = est.explain(*args, **kw)
        after = est.explain(*args, coefficients=[None, old], **kw)
        assert (after.bytes, after.reason) == (shipped.bytes, shipped.reason)
    aten = dict(dtype="bf16", backend="aten", allocator="glibc-fixed", os="linux")
    with pytest.raises(ValueError, match=rf"coefficients layer 1's structure \S+ \(schema {version}\) would price "
                                         rf"layer 2's oneDNN lines \(schema {est.SCHEMA_VERSION}\), which were "
                                         r"fitted by other rules; refit layer 1 with `vaemem fit`"):
        est.explain("sd15", "decode", 512, 512, coefficients=[old, None], **aten)


def test_a_newer_file_of_other_backends_lines_never_serves_an_older_files_onednn_lines():
    """The other way round: a file of the packaged schema without oneDNN lines (a GPU rig owner's) put first over
    an older file of oneDNN lines would price them with its structures, whose numbers are of other rules (a newer
    aten layer's structure priced Mochi's fp32 encode of a schema-23 file at 0.51x that file's own price, its calls'
    live bytes changed at 24): refused, naming the older layer; of the same schema it layers, the same prices. And a
    third, older layer of aten lines after them does not lift a refusal of the two (the batch's factors are read by
    the oneDNN lines' schema, not the oldest layer's)."""
    gpu = _without_onednn(json.loads(PACKAGED.read_text()))
    kw = dict(dtype="fp32", frames=7, backend="onednn", allocator="glibc-fixed", os="linux")
    for version in (10, 16, 23, 25):
        with pytest.raises(ValueError, match=rf"coefficients layer 1's structure \S+ \(schema {est.SCHEMA_VERSION}\) "
                                             rf"would price layer 2's oneDNN lines \(schema {version}\), which were "
                                             r"fitted by other rules; refit layer 2 with `vaemem fit`"):
            est.explain("mochi", "encode", 320, 192, coefficients=[gpu, _older(version)], **kw)
    for args, frames in ((("mochi", "encode", 320, 192), 7), (("hunyuanvideo-1.5", "encode", 320, 192), 9)):
        for dtype in ("fp32", "bf16"):
            one = dict(kw, dtype=dtype, frames=frames)
            assert est.explain(*args, coefficients=[gpu, None], **one).bytes == est.explain(*args, **one).bytes
    key = "sd15/decode/fp32/untiled"
    without = json.loads(PACKAGED.read_text())
    without["structures"][key].pop("onednn_hidden_factor_batch")
    batch = dict(dtype="fp32", batch=2, backend="onednn", allocator="glibc-fixed", os="linux")
    for layers in ([None, without], [None, without, _without_onednn(_older(24))]):
        with pytest.raises(ValueError, match=r"layer 2's oneDNN lines were fitted without a batch's oneDNN factor"):
            est.explain("sd15", "decode", 512, 512, coefficients=layers, **batch)


def test_an_older_layers_math_path_structure_never_prices_lines_of_schema_15():
    """From schema 15 the math path's dry runs count the mask its softmax holds: a file of 14 (its own lines
    aten's, a GPU rig owner's would be cuDNN's) put first, whose math-path structures would win and price the
    packaged lines on dry runs without it (SD1.5's 1536 px math-path encode 0.94x), is refused, naming the structure;
    after the packaged file the packaged structures win and price as the packaged file alone does."""
    old = _without_onednn(_older(14))
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", attention="math")
    with pytest.raises(ValueError, match=r"coefficients layer 1's structure \S+ \(schema 14\) would price layer 2's "
                                         r"oneDNN lines"):  # the packaged oneDNN lines: by their rules first
        est.explain("sd15", "encode", 1536, 1536, coefficients=[old, None], **kw)
    gpu = _without_onednn(json.loads(PACKAGED.read_text()))  # lines of no oneDNN backend: the math path's own check
    with pytest.raises(ValueError, match=r"coefficients layer 1's structure [\w.-]+/\w+/\w+/untiled/math is of "
                                         r"schema 14, whose math-path dry runs leave out the mask the softmax holds, "
                                         rf"and layer 2's lines \(schema {est.SCHEMA_VERSION}\) are priced with it; "
                                         r"refit layer 1"):
        est.explain("sd15", "encode", 1536, 1536, coefficients=[old, gpu], **dict(kw, backend="aten"))
    shipped = est.explain("sd15", "encode", 1536, 1536, **kw)
    after = est.explain("sd15", "encode", 1536, 1536, coefficients=[None, old], **kw)
    assert (after.bytes, after.reason) == (shipped.bytes, shipped.reason)


def test_a_structure_without_the_live_bytes_at_its_calls_never_serves_lines_fitted_with_them():
    """A file of the packaged schema whose fp32 video structure lists its convolutions without the live bytes at
    their calls (a fit from a dry-run cache without them: 7 fields) put first would price the packaged oneDNN
    lines, fitted in the call peak, without it: refused, naming the structure and the layer to refit."""
    plain = _without_onednn(json.loads(PACKAGED.read_text()))
    key = est.structure_key("ltx-2", "decode", "fp32", False)
    plain["structures"][key]["conv_transients"] = [c[:7] for c in plain["structures"][key]["conv_transients"]]
    with pytest.raises(ValueError, match=rf"coefficients layer 1's structure {key} lacks the live bytes at its "
                                         r"convolutions' calls, which layer 2's oneDNN lines were fitted with; "
                                         r"refit layer 1"):
        est.explain("ltx-2", "decode", 320, 192, coefficients=[plain, None], **ONEDNN)


def test_a_structure_without_the_factor_is_refused_wherever_it_wins():
    """After the packaged file, another layer's structure still wins a key the packaged one lacks: one of an older
    schema is refused by its rules, one of the packaged schema without the factor (a file fitted from a dry-run
    cache without oneDNN's peaks) would serve the packaged oneDNN lines at 1 (HunyuanVideo's 1.22: 0.82x): refused,
    naming the factor; first, so is a whole file of it. With the key in the packaged layer the older layer layers."""
    eight = _without_onednn(_older(8))
    nine = json.loads(PACKAGED.read_text())
    key = est.structure_key("hunyuanvideo", "decode", "fp32", False)
    assert max(nine["structures"][key]["onednn_hidden_factor"]) > 1.1
    assert (est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[nine, eight], **ONEDNN).bytes
            == est.explain("hunyuanvideo", "decode", 320, 192, coefficients=nine, **ONEDNN).bytes)
    lacking = {**nine, "structures": {k: v for k, v in nine["structures"].items() if k != key}}
    with pytest.raises(ValueError, match=rf"coefficients layer 2's structure {key} \(schema 8\) would price "
                                         r"layer 1's oneDNN lines"):
        est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[lacking, eight], **ONEDNN)
    with pytest.raises(ValueError, match=rf"coefficients layer 2's structure {key} has no onednn_hidden_factor"):
        est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[lacking, _without_onednn(
            {**nine, "structures": {key: {k: v for k, v in nine["structures"][key].items()
                                          if not k.startswith("onednn_hidden_factor")}}})], **ONEDNN)
    plain = json.loads(PACKAGED.read_text())
    for s in plain["structures"].values():
        s.pop("onednn_hidden_factor", None)
        s.pop("onednn_hidden_factor_batch", None)
    with pytest.raises(ValueError, match=r"coefficients layer 1's structure \S+ has no onednn_hidden_factor, "
                                         r"which layer 2's oneDNN lines"):
        est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[plain, None], **ONEDNN)
    # after the packaged file its structures win and would serve its oneDNN lines with a factor they were not
    # fitted with: refused as well
    with pytest.raises(ValueError, match=r"coefficients layer 2's oneDNN lines were fitted without "
                                         r"onednn_hidden_factor, which layer 1's structure \S+ would price them with; "
                                         r"refit layer 2"):
        est.explain("hunyuanvideo", "decode", 320, 192, coefficients=[None, plain], **ONEDNN)


def test_lines_fitted_without_the_factor_of_a_cpu_without_amx_are_not_served_with_it():
    """A file of the packaged schema whose structures lack onednn_hidden_factor_no_amx (fitted through the API from
    a cache without those peaks) has bf16 oneDNN lines in the AMX rule's dry run: after the packaged file, whose
    structures carry the smaller factor, they would be priced 0.79-0.84x. Refused, naming it; alone it prices."""
    theirs = json.loads(PACKAGED.read_text())
    for s in theirs["structures"].values():
        s.pop("onednn_hidden_factor_no_amx", None)
        s.pop("onednn_hidden_factor_no_amx_batch", None)
    kw = dict(dtype="bf16", backend="onednn", allocator="glibc-fixed", os="linux")
    alone = est.explain("sd15", "decode", 1024, 1024, coefficients=theirs, **kw)
    assert f"x {theirs['structures']['sd15/decode/bf16/untiled']['onednn_hidden_factor']:.4g} for the" in alone.reason
    for layers, msg in (([None, theirs], r"layer 2's oneDNN lines were fitted without onednn_hidden_factor_no_amx, "
                                         r"which layer 1's structure \S+ would price them with; refit layer 2"),
                        ([theirs, None], r"layer 1's structure \S+ has no onednn_hidden_factor_no_amx, which layer "
                                         r"2's oneDNN lines are priced with")):
        with pytest.raises(ValueError, match=msg):
            est.explain("sd15", "decode", 1024, 1024, coefficients=layers, **kw)


@pytest.mark.parametrize("kwargs,message", [
    (dict(dtype=["fp32"]), "dtype must be a string"),
    (dict(backend={}), "backend must be a string"),
    (dict(model=["sdxl"]), "model must be a string"),
    (dict(coefficients={"a"}), "coefficients must be a path, a dict or a list of them"),
    (dict(coefficients=[123, None]), "coefficients must be a path, a dict or a list of them, got int"),
    (dict(coefficients={"_plans": {}, "_valid": True}), "schema_version"),
])
def test_unhashable_or_wrong_arguments_are_value_errors(kwargs, message):
    args = dict(model="sdxl", dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        est.working_memory_bytes(args.pop("model"), "decode", 512, 512, **args)
    with pytest.raises(ValueError, match=message):
        est.explain(kwargs.get("model", "sdxl"), "decode", 512, 512,
                    **{k: v for k, v in args.items()})


def test_more_wrong_arguments_are_value_errors():
    with pytest.raises(ValueError, match="candidates must be a list"):
        est.largest_tile("flux1", "decode", 1024, 1024, 2**30, candidates=512, **GPU)
    with pytest.raises(ValueError, match="device must be a string"):
        est.detect_platform(fake_torch(), "fp32", device=0)

    class NoCuda:  # a CPU build asked for cuda: torch's allocator query raises; the environment decides
        def get_allocator_backend(self):
            raise AttributeError("module 'torch._C' has no attribute '_cuda_getAllocatorBackend'")

    t = fake_torch(device="cuda")
    t.cuda.memory = NoCuda()
    assert est.detect_platform(t, "fp16", env={})["allocator"] == "native"
    # the platform helpers an app may call alone: a wrong type or name is a ValueError, never an AttributeError
    for call, message in ((lambda: est.detect_platform(fake_torch(), "fp32", device="cuda"), "not available"),
                          (lambda: est.detect_platform(fake_torch(), "fp32", device="mps:0"), "not available"),
                          (lambda: est.conv_backend(fake_torch(), None), "device must be a string"),
                          (lambda: est.conv_backend(fake_torch(), "cpu", "float32"), "unknown dtype 'float32'"),
                          (lambda: est.os_key(5), "platform must be a string"),
                          (lambda: est.detect_allocator(None, {}), "unknown backend None"),
                          (lambda: est.detect_allocator("nope", {}), "unknown backend 'nope'")):
        with pytest.raises(ValueError, match=message):
            call()
    # an XPU's allocator takes no settings vaemem keys, as detect_platform says
    assert est.detect_allocator("xpu", {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == "native"


@pytest.mark.parametrize("budget,message", [("0", "--budget must be a positive number of MiB"),
                                            ("-3", "--budget must be a positive number of MiB"),
                                            ("inf", "'--budget': Input should be a valid integer"),
                                            # whole MiB: a fraction printed rounded up read "4442 MiB fits" 4441.5
                                            ("4441.5", "'--budget': Input should be a valid integer")])
def test_estimate_budget_edge_cases_are_one_line(budget, message):
    res = runner.invoke(app, ["estimate", "-m", "sdxl", "--op", "decode", "--res", "1024", "--dtype", "fp32",
                              "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux",
                              "--budget", budget])
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and message in lines[0], res.output


def test_the_atomic_writer_refuses_devices_and_writes_through_links(tmp_path):
    from vaemem.errors import VaememError
    from vaemem.files import write_atomic

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(VaememError, match="not a regular file"):
        write_atomic(tmp_path / "fifo", "x")
    with pytest.raises(VaememError, match="not a regular file"):
        write_atomic("/dev/null", "x")
    (tmp_path / "target.py").write_text("old")
    (tmp_path / "link.py").symlink_to("target.py")
    write_atomic(tmp_path / "link.py", "new")
    assert (tmp_path / "link.py").is_symlink() and (tmp_path / "target.py").read_text() == "new"


def test_the_live_bytes_at_the_calls_must_match_the_onednn_lines_they_price():
    """Schema 12's untiled fp32 oneDNN lines are in the call peak (the live bytes at the convolutions' calls that
    the 3-D classes' structures carry). A winning structure must carry them exactly where the lines' own layer
    does: one without them would price those lines by the dry run plus nothing (under), one with them lines fitted
    with the transient added (a schema-12 file fitted from structures without them) by the call peak without it."""
    key = est.structure_key("ltx-2", "decode", "fp32", False)
    packaged = json.loads(PACKAGED.read_text())
    assert est._call_peaks(packaged["structures"][key])

    def lacking() -> dict:  # the packaged file with structures without them (of schema 12 still)
        doc = json.loads(PACKAGED.read_text())
        for s in doc["structures"].values():
            if "conv_transients" in s:
                s["conv_transients"] = [c[:7] for c in s["conv_transients"]]
        return doc

    with pytest.raises(ValueError, match=r"coefficients layer 1's structure \S+ lacks the live bytes at its "
                                         r"convolutions' calls, which layer 2's oneDNN lines were fitted with; "
                                         r"refit layer 1"):
        est.explain("ltx-2", "decode", 512, 320, coefficients=[_without_onednn(lacking()), None], **ONEDNN)
    with pytest.raises(ValueError, match=r"coefficients layer 1's structure \S+ carries the live bytes at its "
                                         r"convolutions' calls, which layer 2's oneDNN lines were fitted without; "
                                         r"refit layer 2"):
        est.explain("ltx-2", "decode", 512, 320, coefficients=[_without_onednn(packaged), lacking()], **ONEDNN)
    # a layer of the same structures layers
    same = est.explain("ltx-2", "decode", 512, 320, coefficients=[_without_onednn(json.loads(PACKAGED.read_text())),
                                                                  None], **ONEDNN)
    assert same.bytes == est.explain("ltx-2", "decode", 512, 320, **ONEDNN).bytes


def test_a_batch_is_never_priced_below_one_sample():
    """One sample of an untiled fp32 request on oneDNN is priced by the most a convolution's call holds, a batch by
    its dry run plus its transient: where that is less (LTX-2's encode at 128x128, whose one sample copies its 432
    MiB weight beside 1 MiB), the batch takes one sample's price, and says so."""
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    one = est.explain("ltx-2", "encode", 128, 128, **kw)
    for batch, slicing in ((2, False), (2, True), (3, False), (4, True)):
        e = est.explain("ltx-2", "encode", 128, 128, batch=batch, slicing=slicing, **kw)
        assert e.bytes >= one.bytes
        assert ("at one sample's price" in e.reason) == (e.bytes == one.bytes)
    two = est.explain("ltx-2", "encode", 128, 128, batch=2, **kw)
    assert two.bytes == one.bytes and two.reason.endswith(one.reason) and two.source == one.source


def test_a_file_of_pixel_lines_alone_layers_either_way():
    """A fit of tiny models' measurements holds oneDNN pixel lines and no structure-priced line: no structure
    prices its lines, so it layers before or after the packaged file (it was refused as fitted without the
    oneDNN factor), and the packaged prices stand."""
    pixel = json.loads(PACKAGED.read_text())
    pixel["calibrations"], pixel["structures"] = [], {}
    assert any(g["conv_backend"] == "onednn" for g in pixel["groups"])
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    for layers in ([pixel, None], [None, pixel]):
        assert est.explain("sd15", "decode", 512, 512, coefficients=layers, **kw).bytes == \
            est.explain("sd15", "decode", 512, 512, **kw).bytes


def test_the_reason_names_the_model_its_architecture_and_what_a_pipeline_would_run():
    """sd3 is priced by flux1's lines and sdxl by sd15's: the reason says so first (it began "flux1 not measured
    here" for sd3). An fp16 request of SDXL, whose config sets force_upcast, says that its pipelines honour it and run
    fp32. On the math path, the reason says whether the score matrices raise the dry run at this size."""
    cpu = dict(dtype="fp32", backend="onednn", allocator="glibc", os="linux")
    assert est.explain("sd3", "decode", 1024, 1024, **cpu).reason.startswith("sd3, flux1's architecture: flux1 not")
    assert est.explain("flux1", "decode", 1024, 1024, **cpu).reason.startswith("flux1 not measured")
    gpu = dict(backend="cudnn", allocator="native", os="linux")
    assert "sdxl's config sets force_upcast" in est.explain("sdxl", "decode", 1024, 1024, dtype="fp16", **gpu).reason
    assert "force_upcast" not in est.explain("sdxl", "decode", 1024, 1024, dtype="bf16", **gpu).reason
    assert "force_upcast" not in est.explain("sd15", "decode", 1024, 1024, dtype="fp16", **gpu).reason
    # FLUX.1's config sets the flag too, and its pipeline ignores it
    assert "force_upcast" not in est.explain("flux1", "decode", 1024, 1024, dtype="fp16", **gpu).reason
    rocm = dict(dtype="bf16", backend="miopen", allocator="native", os="linux")
    for model, w, h, frames, leads in (("wan21", 832, 480, 81, False), ("sd15", 2048, 2048, 1, True)):
        math = est.explain(model, "decode", w, h, frames=frames, attention="math", **rocm)
        fused = est.working_memory_bytes(model, "decode", w, h, frames=frames, **rocm)
        assert (math.bytes > fused) == leads, (model, math.bytes, fused)
        assert ("dry-run peak with its score matrices" in math.reason) == leads
        assert ("its score matrices do not lead here" in math.reason) != leads


def test_an_estimate_says_how_far_past_its_measured_points_it_went():
    """``extrapolation``: the request's dry-run peak over the largest of the line that priced it (a pixel line: its
    pixels over its largest), the figure the reason states in words; None where no measured line priced it."""
    cpu = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")
    inside = est.explain("sd15", "decode", 512, 512, **cpu)
    assert inside.source == "measured" and 0 < inside.extrapolation <= 1
    far = est.explain("sd15", "decode", 1024, 1024, dtype="bf16", backend="aten", allocator="glibc-fixed", os="linux")
    assert far.extrapolation > 100 and f"{far.extrapolation:.1f}x beyond" in far.reason
    moved = est.explain("sd3", "decode", 1024, 1024, **{**cpu, "allocator": "glibc"})  # a transfer
    assert moved.source == "transfer" and f"{moved.extrapolation:.1f}x beyond that line's" in moved.reason
    assert est.explain("sd15", "decode", 512, 512, dtype="fp16", backend="cudnn", allocator="native",
                       os="linux").extrapolation is None  # the fallback
    doc = est.load(None)
    line = next(g for g in doc["groups"] if g["architecture"] == "tiny-kl" and g["op"] == "decode")
    # its pixel line at its largest pixel count (8 px wide: a pixel line prices pixels alone), exactly at its edge
    assert line["pixels_max"] % 64 == 0
    assert est.explain("tiny-kl", "decode", 8, line["pixels_max"] // 8, **cpu).extrapolation == 1.0
    # just past its largest dry run: not rounded to 1, so the CLI says what the reason says
    just = est.explain("sd15", "decode", 1024, 1024, **{**cpu, "dtype": "bf16"})
    assert 1 < just.extrapolation < 1.01 and "just beyond" in just.reason
    # a tiled price capped by the untiled one: the untiled request's line's figure
    args = ("ltx-2", "decode", 2048, 2048)
    aten = dict(dtype="bf16", backend="aten", allocator="glibc-fixed", os="linux")
    capped = est.explain(*args, tile=1024, **aten)
    assert "capped at this request's untiled price" in capped.reason
    assert capped.extrapolation == est.explain(*args, **aten).extrapolation > 1
    res = runner.invoke(app, ["estimate", "-m", "sd15", "--op", "decode", "--res", "512", "--dtype", "fp32",
                              "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["extrapolation"] == inside.extrapolation
    assert json.loads(res.output)["verified"] is inside.verified is True
    doc = json.loads(res.output)  # versioned, and the request beside its price
    assert doc["schema_version"] == 1 and doc["request"] == {
        "model": "sd15", "op": "decode", "width": 512, "height": 512, "batch": 1, "frames": 1, "tile": None,
        "dtype": "fp32", "loaded_dtype": None, "cast": "model", "slicing": False}
    res = runner.invoke(app, ["estimate", "-m", "sd15", "--op", "decode", "--res", "1024", "--dtype", "bf16",
                              "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux"])
    assert res.exit_code == 0 and "just past its largest measured point" in res.output
