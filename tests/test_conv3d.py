"""The conv3d decomposition against F.conv3d, the model patch, and the gate."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from vaemem.conv3d.decompose import conv3d_as_conv2d
from vaemem.conv3d.gate import decide, parse_hip
from vaemem.conv3d.patch import decomposed_conv3d, patch, unpatch
from vaemem.errors import VaememError
from vaemem.models.build import build_model, configure_tiling, input_shape, make_input, run_op
from vaemem.models.zoo import get_spec


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 difference; the absolute one where the reference is all zeros (a stride that samples only the
    temporal padding gives an all-zero output, and 0/0 would be nan)."""
    diff, norm = (a.double() - b.double()).norm(), b.double().norm()
    return float(diff / norm) if norm > 0 else float(diff)


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 2), c=st.integers(1, 5), o=st.integers(1, 6), t=st.integers(1, 7), h=st.integers(3, 9),
       w=st.integers(3, 9), kt=st.integers(1, 3), kh=st.sampled_from([1, 3]), kw=st.sampled_from([1, 3]),
       st_=st.integers(1, 2), sh=st.integers(1, 2), pt=st.integers(0, 1), ph=st.integers(0, 1),
       use_bias=st.booleans(), method=st.sampled_from(["taps", "stacked"]))
def test_matches_native_conv3d_fp32(b, c, o, t, h, w, kt, kh, kw, st_, sh, pt, ph, use_bias, method):
    if t + 2 * pt < kt or h + 2 * ph < kh or w + 2 * ph < kw:
        return
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, c, t, h, w, generator=g)
    weight = torch.randn(o, c, kt, kh, kw, generator=g)
    bias = torch.randn(o, generator=g) if use_bias else None
    args = dict(stride=(st_, sh, sh), padding=(pt, ph, ph))
    ref = F.conv3d(x, weight, bias, **args)
    got = conv3d_as_conv2d(x, weight, bias, method=method, **args)
    assert got.shape == ref.shape and got.is_contiguous()
    assert _rel(got, ref) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method", ["taps", "stacked"])
def test_matches_native_conv3d_half_precision(dtype, method):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 8, 5, 12, 10, generator=g).to(dtype)
    weight = (torch.randn(6, 8, 3, 3, 3, generator=g) / 8).to(dtype)
    bias = torch.randn(6, generator=g).to(dtype)
    try:
        ref = F.conv3d(x, weight, bias, padding=(1, 1, 1))
    except RuntimeError as e:  # pragma: no cover - a CPU build without this dtype's conv3d
        pytest.skip(f"native {dtype} conv3d unsupported here: {e}")
    got = conv3d_as_conv2d(x, weight, bias, padding=(1, 1, 1), method=method)
    assert got.dtype == dtype and _rel(got, ref.float()) < (2e-2 if dtype == torch.bfloat16 else 5e-3)


def test_dilation_and_groups_fall_back_with_one_warning():
    x, weight = torch.randn(1, 4, 5, 6, 6), torch.randn(4, 2, 3, 3, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            got = conv3d_as_conv2d(x, weight, groups=2)
    assert torch.equal(got, F.conv3d(x, weight, groups=2))
    assert len([w for w in caught if "groups=2" in str(w.message)]) == 1
    with pytest.raises(ValueError, match="unknown method"):
        conv3d_as_conv2d(x, torch.randn(4, 4, 3, 3, 3), method="magic")


@pytest.mark.parametrize("name,size", [("tiny-minimax-h3", (64, 48)), ("tiny-wan", (48, 64))])
@pytest.mark.parametrize("method", ["taps", "stacked"])
def test_tiny_video_encoders_match_patched_and_unpatched(name, size, method):
    spec = get_spec(name)
    model = build_model(name, "encode", "cpu", "fp32")
    configure_tiling(model, spec, None)
    x = make_input(input_shape(spec, "encode", size[0], size[1], 1, 9), "cpu", "fp32")
    with torch.inference_mode():
        ref = run_op(model, "encode", x)
        with decomposed_conv3d(model, method) as n:
            got = run_op(model, "encode", x)
        again = run_op(model, "encode", x)
    assert n > 5
    assert _rel(got, ref) < 1e-5 and torch.isfinite(got).all()
    assert torch.equal(again, ref)  # restored


def test_tiny_wan_decode_matches_patched_non_square():
    spec = get_spec("tiny-wan")
    model = build_model("tiny-wan", "decode", "cpu", "fp32")
    configure_tiling(model, spec, None)
    z = make_input(input_shape(spec, "decode", 64, 40, 1, 9), "cpu", "fp32")
    with torch.inference_mode():
        ref = run_op(model, "decode", z)
        with decomposed_conv3d(model):
            got = run_op(model, "decode", z)
    assert _rel(got, ref) < 1e-5


def test_patch_touches_only_causal_conv3d_and_restores():
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d

    model = build_model("tiny-wan", "encode", "cpu", "fp32")
    before = {id(m): dict(m.__dict__) for m in model.modules()}
    patched = patch(model)
    assert patched and all(isinstance(m, WanCausalConv3d) and a == "_conv_forward" for m, a in patched)
    changed = [m for m in model.modules() if m.__dict__.keys() != before[id(m)].keys()]
    assert set(map(id, changed)) == {id(m) for m, _ in patched}
    unpatch(patched)
    assert all(m.__dict__.keys() == before[id(m)].keys() for m in model.modules())


@pytest.mark.parametrize("family,hip,env,expected", [
    ("minimax", "7.2.26015", {}, "decomposed"),
    ("minimax", "7.1.52802", {}, "decomposed"),
    ("minimax", None, {}, "native"),
    ("wan", "7.2.26015", {}, "native"),
    ("wan", "7.1.52802", {}, "decomposed"),
    ("wan", "6.4.0", {}, "decomposed"),
    ("wan", None, {}, "native"),
    ("kl", "7.1.0", {}, "native"),
    ("minimax", "7.1.0", {"VAEMEM_CONV3D": "native"}, "native"),
    ("wan", "7.2.0", {"VAEMEM_CONV3D": "decomposed"}, "decomposed"),
    ("wan", None, {"VAEMEM_CONV3D": "decomposed"}, "decomposed"),
    ("wan", "7.1.0", {"VAEMEM_CONV3D": "auto"}, "decomposed"),
])
def test_gate(family, hip, env, expected):
    assert decide(family, hip, env) == expected


def test_gate_refuses_bad_override_and_version():
    with pytest.raises(VaememError, match="choose one of: native, decomposed, auto"):
        decide("wan", "7.1", {"VAEMEM_CONV3D": "fast"})
    with pytest.raises(VaememError, match="cannot read HIP version"):
        parse_hip("rocm")


# ---- bench-conv3d ---------------------------------------------------------------------------------------------------

def test_bench_conv3d_both_paths_in_fresh_processes(tmp_path):
    from typer.testing import CliRunner

    from vaemem.cli import app

    out = tmp_path / "c.jsonl"
    r = CliRunner().invoke(app, ["bench-conv3d", "-m", "tiny-wan", "--conv3d", "both", "--frames", "5", "--res",
                                 "64x32", "--tiles", "1x2", "--runs", "2", "--out", str(out), "--rig", "t", "--json"])
    assert r.exit_code == 0, r.output
    nat, dec = json.loads(r.stdout)
    assert (nat["path"], dec["path"], nat["status"], dec["status"]) == ("native", "decomposed", "ok", "ok")
    assert nat["n_patched_modules"] == 0 and dec["n_patched_modules"] > 5
    assert nat["conv_gflop_per_chunk"] == dec["conv_gflop_per_chunk"] > 0
    assert len(nat["all_calls_s"]) == 2 and nat["steady_s_per_chunk"] == nat["all_calls_s"][1]
    vs = dec["versus_native"]
    assert vs["all_finite"] and vs["rel_norm"] < 1e-5 and vs["scale_max_abs"] > 0
    assert vs["speed_ratio"] == round(nat["steady_s_per_chunk"] / dec["steady_s_per_chunk"], 4) > 0
    assert vs["peak_ratio"] > 0 and vs["first_call_ratio"] > 0
    assert [json.loads(l)["path"] for l in out.read_text().splitlines()] == ["native", "decomposed"]


@pytest.mark.parametrize("args,message", [
    (["-m", "sdxl"], "causal video encoders"),
    (["-m", "tiny-wan", "--conv3d", "fast"], "unknown --conv3d"),
    (["-m", "tiny-wan", "--method", "im2col"], "unknown --method"),
    (["-m", "tiny-wan", "--dtype", "fp8"], "unknown --dtype"),
    (["-m", "tiny-wan", "--frames", "4"], "1 + 4k"),
    (["-m", "tiny-wan", "--res", "64", "--tiles", "3x1"], "multiples of 8"),
    (["-m", "tiny-wan", "--tiles", "2"], "bad --tiles"),
    (["-m", "tiny-wan", "--res", "64x64", "--frames", "5", "--device", "xpu:7"], "torch sees no xpu device"),
    # accepted and ignored before
    (["-m", "tiny-wan", "--conv3d", "native", "--method", "stacked"], "--method chooses the decomposition: "
     "--conv3d native runs none"),
    # recorded as two error runs and exit 0 before
    (["-m", "tiny-wan", "--conv3d", "auto", "VAEMEM_CONV3D=bogus"], "VAEMEM_CONV3D='bogus'; choose one of: native, "
     "decomposed, auto"),
])
def test_bench_conv3d_bad_input(args, message, monkeypatch):
    from typer.testing import CliRunner

    from vaemem.cli import app

    for a in [a for a in args if "=" in a]:  # an environment variable of the case's
        monkeypatch.setenv(*a.split("=", 1))
    r = CliRunner().invoke(app, ["bench-conv3d", *[a for a in args if "=" not in a]])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


# ---- the gate applied for apps (issue 12) -------------------------------------------------------------------------

class _Torch:
    """A torch whose version says ROCm ``hip`` (None: CUDA or CPU); the rest is the real torch."""

    def __init__(self, hip):
        self.version = type("V", (), {"hip": hip})()


@pytest.mark.parametrize("name,hip,env,path,reason", [
    ("tiny-wan", "7.1.52802", {}, "decomposed", "decomposed below HIP 7.2"),
    ("tiny-wan", "7.2.0", {}, "native", "wan on HIP 7.2.0"),
    ("tiny-wan", None, {}, "native", "not a HIP build"),
    ("tiny-minimax-h3", "7.2.0", {}, "decomposed", "decomposed on every HIP version"),
    ("tiny-wan", None, {"VAEMEM_CONV3D": "decomposed"}, "decomposed", "VAEMEM_CONV3D forces decomposed"),
    ("tiny-kl", "6.4", {}, "native", "no causal conv3d"),
])
def test_apply_conv3d_gate_does_what_the_gate_says_and_undoes_it(name, hip, env, path, reason):
    from vaemem.conv3d.apply import apply_conv3d_gate, conv3d_gate

    spec = get_spec(name)
    model = build_model(name, "encode", "cpu", "fp32")
    x = make_input(input_shape(spec, "encode", 64, 64, 1, 5 if spec.is_video else 1), "cpu", "fp32")
    with torch.inference_mode():
        native = run_op(model, "encode", x)
        with conv3d_gate(model, _Torch(hip), env) as done:
            assert (done["path"], reason in done["reason"]) == (path, True), done
            assert (done["patched"] > 0) == (path == "decomposed")
            gated = run_op(model, "encode", x)
        assert not any("_conv_forward" in m.__dict__ or "forward" in m.__dict__ for m in model.modules())
    assert torch.allclose(native, gated, rtol=1e-4, atol=1e-5)
    done = apply_conv3d_gate(model, _Torch(hip), env)
    done["undo"]()
    assert not any("_conv_forward" in m.__dict__ for m in model.modules())


def test_the_speedup_is_the_steady_states_and_one_run_has_none():
    """With --runs 1 there is no steady state: the speedup is not the warm-up call's ratio passed off as one."""
    from vaemem.conv3d.bench import ratios

    one = ratios({"first_call_s": 2.0, "steady_s_per_chunk": None, "demand_bytes": 10},
                 {"first_call_s": 1.0, "steady_s_per_chunk": None, "demand_bytes": 25})
    assert one == {"speed_ratio": None, "first_call_ratio": 2.0, "peak_ratio": 2.5}
    steady = ratios({"first_call_s": 2.0, "steady_s_per_chunk": 0.9, "demand_bytes": 10},
                    {"first_call_s": 1.0, "steady_s_per_chunk": 0.3, "demand_bytes": 10})
    assert steady == {"speed_ratio": 3.0, "first_call_ratio": 2.0, "peak_ratio": 1.0}


def test_a_bench_run_is_classified_by_the_parent(tmp_path, monkeypatch):
    """Its status is the parent's view, as a measurement's: a crash was stored as a ["crash", evidence] pair, and a
    child's own result overrode the parent's fields."""
    from vaemem.conv3d import bench as b
    from vaemem.measuring.plumbing import launcher as lm
    from vaemem.measuring.plumbing.launcher import RunOutcome

    class Fake(lm.Launcher):
        name = "fake"

        def __init__(self, outcomes):
            self.outcomes = outcomes

        def run(self, task, allocator, timeout_s):
            return self.outcomes.pop(0)

    crashed = Fake([RunOutcome(None, -11, False, "Segmentation fault", 1.0, 1),
                    RunOutcome({"status": "timeout", "model": "other", "rig": {"name": "x"}}, 0, False, "", 1.0, 1)])
    monkeypatch.setattr(lm, "make_launcher", lambda name: crashed)
    nat, dec = b.bench("tiny-wan", "both", frames=5, width=64, height=32, runs=1, rig="t")
    assert (nat["status"], nat["status_evidence"]) == ("crash", "parent: child died (signal 11) with no OOM evidence")
    assert dec["status"] == "crash" and "which is the parent's to say" in dec["status_evidence"]
    assert (dec["model"], dec["rig"]["name"]) == ("tiny-wan", "t") and "versus_native" not in dec


def test_bench_conv3d_auto_goes_through_the_gate(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vaemem.cli import app

    monkeypatch.setenv("VAEMEM_CONV3D", "decomposed")  # this CPU has no HIP: force the path to see it taken
    r = CliRunner().invoke(app, ["bench-conv3d", "-m", "tiny-wan", "--conv3d", "auto", "--frames", "5", "--res",
                                 "64x32", "--runs", "1", "--out", str(tmp_path / "c.jsonl"), "--rig", "t", "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = json.loads(r.stdout)
    assert rec["path"] == "auto" and rec["gate"]["path"] == "decomposed" and rec["n_patched_modules"] > 5
    assert "VAEMEM_CONV3D forces decomposed" in rec["gate"]["reason"]
