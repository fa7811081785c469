"""The envelope fit (known answers, brute force), the coefficient file and its reproducibility check."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vaemem import estimate as est
from vaemem.errors import VaememError
from vaemem.fit import coefficients as co
from vaemem.fit.envelope import MIB, Line, fit_envelope

ROOT = Path(__file__).parent.parent
TINY = ROOT / "measurements" / "epyc-avx2-2core-tiny.jsonl"


# ---- known answers ------------------------------------------------------------------------------------------------

def test_points_on_an_exact_line_recover_slope_and_base():
    px = [65_536, 262_144, 589_824, 1_048_576, 2_359_296]
    line = fit_envelope(px, [1234.5 * x + 300 * MIB for x in px])
    assert line.slope == pytest.approx(1234.5, rel=1e-7)
    assert line.base == pytest.approx(300 * MIB, rel=1e-7)


def test_points_under_a_known_line_are_covered_and_never_above_it():
    true = Line(2000.0, 500 * MIB)
    px = [100_000 * k for k in range(1, 12)]
    frac = [1.0, 0.9, 0.95, 0.8, 1.0, 0.85, 0.9, 0.97, 0.88, 0.92, 0.99]  # first and fifth touch the line
    demand = [true(x) * f for x, f in zip(px, frac)]
    line = fit_envelope(px, demand)
    assert all(line(x) >= d * (1 - 1e-9) for x, d in zip(px, demand))
    assert all(line(x) <= true(x) * (1 + 1e-9) for x in (min(px), max(px)))  # a line: the ends bound the range


def _brute_force(px: list[float], demand: list[float]) -> float:
    """Least sum(line/demand) over the candidate vertices: lines through two points, through one point with
    base 0, and the flat line at the highest point."""
    cands = [Line(0.0, max(demand))] + [Line(d / x, 0.0) for x, d in zip(px, demand)]
    for (x1, y1), (x2, y2) in itertools.combinations(zip(px, demand), 2):
        if x1 != x2:
            s = (y2 - y1) / (x2 - x1)
            if s >= 0 and y1 - s * x1 >= 0:
                cands.append(Line(s, y1 - s * x1))
    feasible = [c for c in cands if all(c(x) >= d * (1 - 1e-9) for x, d in zip(px, demand))]
    return min(sum(c(x) / d for x, d in zip(px, demand)) for c in feasible)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), min_size=2, max_size=8,
                unique_by=lambda t: t[0]))
def test_lp_matches_brute_force(pairs):
    px = [p * 50_000 for p, _ in pairs]
    demand = [d * MIB for _, d in pairs]
    line = fit_envelope(px, demand)
    assert all(line(x) >= d * (1 - 1e-7) for x, d in zip(px, demand))
    assert sum(line(x) / d for x, d in zip(px, demand)) == pytest.approx(_brute_force(px, demand), rel=1e-6)


def test_tile_term_is_fitted_when_two_tile_sizes_exist():
    rows = [(px, t) for px in (262_144, 589_824, 1_048_576) for t in (65_536, 262_144)]
    demand = [800 * px + 3000 * t + 100 * MIB for px, t in rows]
    line = fit_envelope([r[0] for r in rows], demand, [r[1] for r in rows])
    assert (line.slope, line.tile_slope) == (pytest.approx(800, rel=1e-6), pytest.approx(3000, rel=1e-6))
    assert line.base == pytest.approx(100 * MIB, rel=1e-6)


def test_envelope_refuses_degenerate_input():
    with pytest.raises(VaememError, match="two distinct pixel counts"):
        fit_envelope([100, 100], [1, 2])
    with pytest.raises(VaememError, match="positive"):
        fit_envelope([100, 200], [0, 2])


def test_rounding_is_up_and_margin_multiplies():
    assert co.ceil_step(1234.561, 0.01) == 1234.57 and co.ceil_step(1234.56, 0.01) == 1234.56
    line = co.stored_line(Line(1000.0, 100 * MIB + 1), 0.05)
    assert line.slope == 1050.0 and line.base == 106 * MIB


# ---- the coefficient file from synthetic measurement files ---------------------------------------------------------

def _record(model="tiny-kl", op="decode", dtype="fp32", w=64, h=64, run=0, demand=None, allocator="glibc-fixed",
            os_="linux", conv="onednn", tile=None, status="ok", rig="r", backend="cpu"):
    px = w * h
    key = f"{model}/{op}/{dtype}/{w}x{h}/b1/f1/t{tile or 0}/{allocator}/cpu"
    return {"schema_version": 1, "model": model, "op": op, "dtype": dtype, "width": w, "height": h, "batch": 1,
            "frames": 1, "tile": tile, "allocator": allocator, "device": "cpu", "point_key": key, "pixels": px,
            "run": run, "status": status, "demand_bytes": demand if demand is not None else 500 * px + 20 * MIB,
            "rig": {"name": rig, "os": os_, "conv_backend": conv, "backend": backend}}


def _write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _fit(tmp_path, records, margin=0.05):
    data = co.load_dataset([_write(tmp_path / "m.jsonl", records)])
    return co.fit_dataset(data, margin)


def test_groups_keep_allocator_os_dtype_and_backend_apart(tmp_path):
    recs = []
    for alloc, os_, dtype, conv in [("glibc-fixed", "linux", "fp32", "onednn"), ("glibc", "linux", "fp32", "onednn"),
                                    ("glibc-fixed", "windows", "fp32", "onednn"),
                                    ("glibc-fixed", "linux", "bf16", "aten")]:
        recs += [_record(w=s, h=s, allocator=alloc, os_=os_, dtype=dtype, conv=conv, rig=f"r-{os_}")
                 for s in (64, 128)]
    doc = _fit(tmp_path, recs).document
    assert sorted(g["group"] for g in doc["groups"]) == sorted([
        "tiny-kl/decode/onednn/glibc-fixed/fp32/linux/untiled", "tiny-kl/decode/onednn/glibc/fp32/linux/untiled",
        "tiny-kl/decode/onednn/glibc-fixed/fp32/windows/untiled", "tiny-kl/decode/aten/glibc-fixed/bf16/linux/untiled"])


def test_point_demand_is_the_largest_run_and_failures_are_ignored(tmp_path):
    recs = [_record(w=64, h=64, run=0, demand=100 * MIB), _record(w=64, h=64, run=1, demand=120 * MIB),
            _record(w=128, h=128, run=0, demand=200 * MIB), _record(w=256, h=256, status="oom", demand=None)]
    recs[-1]["demand_bytes"] = None
    g = _fit(tmp_path, recs, margin=0.0).document["groups"][0]
    assert (g["n_points"], g["n_runs"]) == (2, 3)
    slope = (200 - 120) * MIB / (128 * 128 - 64 * 64)
    assert g["slope_bytes_per_pixel"] == co.ceil_step(slope, 0.01)


def test_single_size_groups_are_reported_not_guessed(tmp_path):
    doc = _fit(tmp_path, [_record(w=64, h=64), _record(w=64, h=64, run=1)]).document
    assert doc["groups"] == [] and doc["unfitted"][0]["reason"] == "fewer than 2 distinct pixel counts"


def test_quality_bound_names_points_and_exceptions_let_a_group_pass(tmp_path):
    # a concave curve: the straight envelope over-reserves the middle point
    recs = [_record(w=64, h=64, demand=10 * MIB), _record(w=128, h=128, demand=100 * MIB),
            _record(w=256, h=256, demand=130 * MIB)]
    result = _fit(tmp_path, recs)
    assert any("tiny-kl/decode/fp32/64x64" in v and "reserved" in v for v in result.violations)
    gid = result.document["groups"][0]["group"]
    data = co.load_dataset([tmp_path / "m.jsonl"])
    ok = co.fit_dataset(data, 0.05, {gid: "concave first-run curve"})
    assert not ok.violations and ok.document["groups"][0]["exception"] == "concave first-run curve"
    assert ok.unneeded == [] and result.unneeded == []
    # a straight line within the bound: its listed exception is named as not needed, and not stored
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(_record(w=s, h=s, demand=s * s * 40)) + "\n"
                                              for s in (64, 128, 256)))
    straight = co.fit_dataset(co.load_dataset([tmp_path / "m.jsonl"]), 0.05, {gid: "no longer true"})
    assert straight.unneeded == [gid] and "exception" not in straight.document["groups"][0]
    with pytest.raises(VaememError, match="no data"):
        co.fit_dataset(data, 0.05, {"nope/decode": "x"})


@pytest.mark.parametrize("content,message", [
    ('{"schema_version": 1, "model": "tiny-kl"\n', "m.jsonl:1: malformed JSON"),
    ('{"schema_version": 3}\n', "m.jsonl:1: schema_version 3 is newer"),
    ('{"schema_version": 1, "status": "ok", "model": "tiny-kl"}\n', "m.jsonl:1: op missing or not a string"),
])
def test_bad_lines_name_file_and_line(tmp_path, content, message):
    (tmp_path / "m.jsonl").write_text(content)
    with pytest.raises(VaememError, match=message):
        co.load_dataset([tmp_path / "m.jsonl"])


@pytest.mark.parametrize("change,message", [
    (dict(dtype="fp8"), r"unknown dtype 'fp8'"), (dict(op="explode"), r"unknown op 'explode'"),
    (dict(tile="big"), r"tile must be a positive multiple of 4 px"), (dict(tile=-5), r"got -5"),
    (dict(allocator="weird"), r"allocator 'weird' is not for cpu"), (dict(width=130), r"multiples of 4 px"),
    (dict(frames=4), r"tiny-kl is an image model"), (dict(attention="flash"), r"unknown attention path 'flash'"),
    (dict(rig={"name": "r", "os": "beos", "conv_backend": "onednn", "backend": "cpu"}), r"record\.os must be one of"),
    (dict(rig={"name": "r", "os": "linux", "conv_backend": "cuda", "backend": "cpu"}), r"conv_backend must be one"),
    (dict(demand_bytes=10**30), r"above an exbibyte"),
])
def test_a_line_of_a_point_that_cannot_run_or_an_unknown_key_is_refused(tmp_path, change, message):
    """A measurement line whose point no sweep could have run (its rules: vaemem.measuring.point) or whose
    platform key no coefficient file may hold (vaemem.estimate) is refused by name and line before anything is
    fitted, as a malformed one is; with skip_bad it is listed and the rest fitted."""
    good = [_record(w=s, h=s) for s in (64, 128)]
    _write(tmp_path / "m.jsonl", [*good, {**_record(w=256, h=256), **change}])
    with pytest.raises(VaememError, match=r"m\.jsonl:3: .*" + message):
        co.load_dataset([tmp_path / "m.jsonl"])
    data = co.load_dataset([tmp_path / "m.jsonl"], skip_bad=True)
    assert [b.line for b in data.skipped] == [3] and data.runs == 2


def test_skip_bad_lists_lines_and_fits_the_rest(tmp_path):
    good = "".join(json.dumps(_record(w=s, h=s)) + "\n" for s in (64, 128))
    (tmp_path / "m.jsonl").write_text(good + "garbage\n" + '{"schema_version": 9}\n')
    data = co.load_dataset([tmp_path / "m.jsonl"], skip_bad=True)
    assert [b.line for b in data.skipped] == [3, 4]
    assert len(co.fit_dataset(data).document["groups"]) == 1


def test_empty_measurements_are_an_error(tmp_path):
    (tmp_path / "m.jsonl").write_text("")
    with pytest.raises(VaememError, match="no measurements"):
        co.load_dataset([tmp_path / "m.jsonl"])
    _write(tmp_path / "m.jsonl", [_record(status="crash")])
    with pytest.raises(VaememError, match="no run with status ok"):
        co.load_dataset([tmp_path / "m.jsonl"])


def test_a_group_mixing_device_backends_is_refused(tmp_path):
    recs = [_record(w=64, h=64), _record(w=128, h=128, backend="xpu")]
    with pytest.raises(VaememError, match="mixes device backends"):
        _fit(tmp_path, recs)


def test_file_is_deterministic_and_written_atomically(tmp_path):
    recs = [_record(w=s, h=s) for s in (64, 128, 256)]
    a = co.dumps(_fit(tmp_path, recs).document)
    b = co.dumps(_fit(tmp_path, list(reversed(recs))).document)
    assert a == b and a.endswith("\n") and f"\"schema_version\": {est.SCHEMA_VERSION}" in a
    out = tmp_path / "fits" / "c.json"
    co.write_atomic(out, a)
    assert out.read_text() == a and [p.name for p in out.parent.iterdir()] == ["c.json"]


# ---- the reproducibility check catches each kind of drift -----------------------------------------------------------

@pytest.fixture
def committed(tmp_path):
    """A copy of the committed tiny data set and its freshly derived coefficient file."""
    shutil.copy(TINY, tmp_path / "m.jsonl")
    text = co.dumps(co.fit_dataset(co.load_dataset([tmp_path / "m.jsonl"])).document)
    (tmp_path / "c.json").write_text(text)
    return tmp_path


def _recheck(d: Path, margin=0.05) -> list[str]:
    return co.check(d / "c.json", co.dumps(co.fit_dataset(co.load_dataset([d / "m.jsonl"]), margin).document))


def test_check_passes_on_untouched_data(committed):
    assert _recheck(committed) == []


def test_check_catches_a_hand_edited_slope(committed):
    doc = json.loads((committed / "c.json").read_text())
    doc["groups"][0]["slope_bytes_per_pixel"] += 0.01
    (committed / "c.json").write_text(co.dumps(doc))
    assert any("slope_bytes_per_pixel" in d for d in _recheck(committed))


def test_check_catches_a_dropped_base_term(committed):
    doc = json.loads((committed / "c.json").read_text())
    doc["groups"][0]["base_bytes"] = 0
    (committed / "c.json").write_text(co.dumps(doc))
    assert any("base_bytes" in d for d in _recheck(committed))


def test_check_catches_a_changed_margin(committed):
    diffs = _recheck(committed, margin=0.06)
    assert any(d.startswith("margin") for d in diffs) and any("slope_bytes_per_pixel" in d for d in diffs)


def test_check_catches_a_point_added_to_the_measurements(committed):
    lines = (committed / "m.jsonl").read_text().splitlines()
    extra = json.loads(lines[0])
    extra["run"] = 7
    with open(committed / "m.jsonl", "a") as f:
        f.write(json.dumps(extra) + "\n")
    assert any(d.startswith("measurements_sha256") for d in _recheck(committed))


def test_check_catches_a_grouping_that_ignores_a_key(committed, monkeypatch):
    # measurements that differ only in allocator; a grouping without the allocator key would merge them
    lines = [json.loads(l) for l in (committed / "m.jsonl").read_text().splitlines()]
    for r in lines[:6]:
        r["allocator"] = "glibc"
        r["point_key"] = r["point_key"].replace("glibc-fixed", "glibc")
    (committed / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (committed / "c.json").write_text(co.dumps(co.fit_dataset(co.load_dataset([committed / "m.jsonl"])).document))
    assert _recheck(committed) == []
    for key in ("allocator", "os", "dtype"):
        from vaemem import estimate  # the owner of the group key

        monkeypatch.setattr(estimate, "GROUP_KEYS", tuple(k for k in ("architecture", "op", "conv_backend",
                                                                        "allocator", "dtype", "os", "tiled")
                                                            if k != key))
        assert _recheck(committed), f"dropping {key} from the grouping went unnoticed"


def test_the_committed_coefficient_file_is_reproducible():
    """The same check `make check` runs, over the committed data."""
    from vaemem.tracing.cache import read_cache

    data = co.load_dataset([ROOT / "measurements"])
    result = co.fit_dataset(data, 0.05, co.load_exceptions(ROOT / "fits" / "exceptions.json"),
                            read_cache(ROOT / "fits" / "traces.json"))
    assert not result.violations
    assert co.check(ROOT / "vaemem" / "coefficients.json", co.dumps(result.document)) == []


def test_a_variant_measured_at_two_sizes_gets_lines_of_its_own_named_as_its_group(tmp_path):
    """SD1.5's fp32 encode measured plain at three sizes and on the math attention path at two where its score
    matrices lead (1280 and 1536 px): the calibration keeps the math points apart (``variants["sd15/math"]``, its
    transfer line beside it), the plain line is of the plain points alone, and the math line is named as the math
    group ``load_dataset`` makes (so a line past the quality bound finds its exception and the group leaves
    ``unfitted``). Measured at one size, the variant joins the plain points; a math-path point whose score matrices
    do not lead (1024 px: its convolutions do) is a plain point, as the estimator prices it."""
    structures = json.loads((ROOT / "vaemem" / "coefficients.json").read_text())["structures"]

    def rec(w, demand, math=False):
        r = _record("sd15", "encode", w=w, h=w, demand=demand * MIB)
        return {**r, "attention": "math", "point_key": r["point_key"] + "/math"} if math else r
    plain = [rec(256, 180), rec(384, 260), rec(512, 660)]
    led = [rec(1280, 6014, True), rec(1536, 12197, True)]
    for math, want, n_plain in ((led, {"sd15/math"}, 3), (led[:1], set(), 4),
                                ([rec(1024, 2573, True), *led], {"sd15/math"}, 4)):
        data = co.load_dataset([_write(tmp_path / "m.jsonl", plain + math)])
        (cal,) = co.calibrate(data, structures, 0.05)
        assert set(cal["variants"]) == set(cal["variant_transfer_lines"]) == want
        assert cal["architectures"]["sd15"]["n_points"] == n_plain
        if want:
            assert cal["variants"]["sd15/math"]["n_points"] == 2
        gids = co.line_groups(cal)
        assert set(gids) == {gid for gid in data.groups if not want or gid.endswith(("/untiled", "/math"))} - \
            ({"sd15/encode/onednn/glibc-fixed/fp32/linux/untiled/math"} if not want else set())
        assert all(gid in data.groups for gid in gids)


def test_read_coefficients_refuses_newer_and_unknown_schemas(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"schema_version": est.SCHEMA_VERSION + 1}))
    with pytest.raises(VaememError, match="newer than"):
        co.read_coefficients(tmp_path / "c.json")
    (tmp_path / "c.json").write_text('{"schema_version": 3}')
    with pytest.raises(VaememError, match="lacks models"):
        co.read_coefficients(tmp_path / "c.json")
    (tmp_path / "c.json").write_text('{"schema_version": "1"}')
    with pytest.raises(VaememError, match="has no integer schema_version"):
        co.read_coefficients(tmp_path / "c.json")
    (tmp_path / "c.json").write_text('{"schema_version": 0, "groups": []}')
    with pytest.raises(VaememError, match=rf"which this estimator does not read \(it reads 3-{est.SCHEMA_VERSION}\)"):
        co.read_coefficients(tmp_path / "c.json")


def test_report_known_ratios_on_points_exactly_on_a_line(tmp_path):
    from vaemem.report import accuracy

    sizes = [(64, 64), (128, 64), (128, 128), (256, 128), (256, 256)]
    recs = [_record(w=w, h=h, demand=1000 * w * h + 100 * MIB) for w, h in sizes]
    data = co.load_dataset([_write(tmp_path / "m.jsonl", recs)])
    doc = co.fit_dataset(data, 0.05).document
    g = doc["groups"][0]
    assert (g["slope_bytes_per_pixel"], g["base_bytes"]) == (1050.0, 105 * MIB)
    rows = accuracy.point_ratios(data, doc)
    assert [r.fitted for r in rows] == pytest.approx([1.05] * 5, abs=1e-9)
    assert [r.held_out for r in rows] == pytest.approx([1.05] * 5, abs=1e-9)  # the line survives leaving any out
    # legacy for tiny-kl (an SD-family AutoencoderKL: 4 latent channels) decode fp32: px*4*2200 + 250 MiB
    rows.sort(key=lambda r: r.pixels)
    assert [r.legacy for r in rows] == pytest.approx(
        [(w * h * 4 * 2200 + 250 * MIB) / (1000 * w * h + 100 * MIB) for w, h in sizes])
    assert [r.comfy for r in rows] == pytest.approx([2178 * w * h * 4 / (1000 * w * h + 100 * MIB) for w, h in sizes])
    s = accuracy.summarize(rows)["groups"][g["group"]]
    assert s["goal"] == "met" and s["held_out"]["under"] == 0 and s["fitted"]["median"] == 1.05


def test_the_amx_xeons_earlier_half_precision_records_are_keyed_onednn_amx():
    """Records of the AMX Xeon made before conv_backend told AMX apart say "onednn" for bf16: read as onednn-amx.
    fp32 stays onednn, and a later "onednn" bf16 record of that name came from a CPU without AMX."""
    def rec(dtype: str, when: str, name: str = "xeon-amx-2core") -> dict:
        return {"dtype": dtype, "utc_time": when, "rig": {"name": name, "conv_backend": "onednn"}}

    assert co.record_conv_backend(rec("bf16", "2026-12-02T10:00:00Z")) == "onednn-amx"
    assert co.record_conv_backend(rec("fp32", "2026-12-02T10:00:00Z")) == "onednn"
    assert co.record_conv_backend(rec("bf16", "2027-01-01T00:00:00Z")) == "onednn"
    assert co.record_conv_backend(rec("bf16", "2026-12-02T10:00:00Z", "epyc-bf16-2core")) == "onednn"


def test_a_tiled_point_whose_tile_is_the_whole_image_is_an_untiled_point():
    """Wan 2.2's fp32 encode at 288 and 512 px in 256 px tiles (each covers 512 px) runs the whole image as its
    first tile and needed what the untiled runs needed (220.5 and 636.5 MiB, campaign 24): the fit takes those points
    as untiled ones (``priced_as``), in the untiled calibration, as the estimator prices such a request; its tiles of
    crops (768 px and 1024x768, one and five frames: campaign 27) make its tiled line. A group of whole-tile points
    alone gets no pixel line, and says why."""
    structures = json.loads((ROOT / "vaemem" / "coefficients.json").read_text())["structures"]
    m = ROOT / "measurements"
    data = co.load_dataset([m / "epyc-avx2-2core-campaign24.jsonl", m / "epyc-avx2-2core-campaign27.jsonl"])
    key = data.groups["wan22/encode/onednn/glibc-fixed/fp32/linux/tiled"][0]
    whole = {"model": "wan22", "width": 512, "height": 512, "tile": 256, "frames": 1, "batch": 1}
    point, as_key = co.priced_as(whole, key, structures)
    assert point["tile"] is None and as_key == {**key, "tiled": False}
    crops = {**whole, "width": 768, "height": 768}
    assert co.priced_as(crops, key, structures) == (crops, key)
    cals = {c["calibration"]: c for c in co.calibrate(data, structures, 0.05)}
    assert cals["conv3d/onednn/glibc-fixed/fp32/linux/encode/untiled"]["architectures"]["wan22"]["n_points"] == 4
    assert cals["conv3d/onednn/glibc-fixed/fp32/linux/encode/tiled"]["architectures"]["wan22"]["n_points"] == 4
    only = co.load_dataset([m / "epyc-avx2-2core-campaign24.jsonl"])
    from vaemem.tracing.cache import read_cache

    result = co.fit_dataset(only, 0.05, {}, read_cache(ROOT / "fits" / "traces.json"))
    (entry,) = [u for u in result.document["unfitted"] if u["group"].endswith("fp32/linux/tiled")]
    assert entry["reason"].startswith("tiled points whose first tile is the whole image")


def test_the_reports_points_are_grouped_as_the_fit_takes_them():
    """The report's held-out and demand / dry-run tables group a point as the fit and the estimator take it: Wan 2.1's
    one-frame fp32 encode on the math path (campaign 26) is a plain point at 768 px, where its convolutions lead,
    and a math-path one at 1024 px, where its score matrices do; Wan 2.2's encodes in 256 px tiles that are the
    whole image (campaign 24) are untiled points."""
    from vaemem.report.structural import _points

    structures = json.loads((ROOT / "vaemem" / "coefficients.json").read_text())["structures"]
    m = ROOT / "measurements"
    data = co.load_dataset([m / "epyc-avx2-2core-campaign24.jsonl", m / "epyc-avx2-2core-campaign26.jsonl"])
    entries = [e for rows in _points(data, structures).values() for e in rows]
    gid = {(e[2]["model"], e[2]["width"], e[2].get("attention")): e[1] for e in entries}
    assert gid[("wan21", 768, "math")] == "wan21/encode/onednn/glibc-fixed/fp32/linux/untiled"
    assert gid[("wan21", 1024, "math")] == "wan21/encode/onednn/glibc-fixed/fp32/linux/untiled/math"
    wan22 = [e for e in entries if e[0] == "wan22"]
    assert len(wan22) == 4 and {e[1] for e in wan22} == {"wan22/encode/onednn/glibc-fixed/fp32/linux/untiled"}
    assert all(e[2]["tile"] is None and not e[10]["tiled"] for e in wan22)


def test_a_group_no_line_of_the_file_prices_is_not_called_calibrated():
    """The pixel-line report's goal column: a group the file prices by no pixel line is "calibrated" where a
    calibration line prices it, and "fallback" where the declared fallback does (a file of no group and no
    calibration called every group calibrated)."""
    from vaemem.report import accuracy

    doc = json.loads((ROOT / "vaemem" / "coefficients.json").read_text())
    empty = {**doc, "groups": [], "calibrations": []}
    for paths, priced in (([TINY], "pixel lines"), ([ROOT / "measurements" / "epyc-bf16-2core-campaign39.jsonl"],
                                                    accuracy.CALIBRATED)):
        data = co.load_dataset(paths)
        goals = {s["goal"] for s in accuracy.summarize(accuracy.point_ratios(data, empty))["groups"].values()}
        assert goals == {accuracy.UNPRICED}
        goals = {s["goal"] for s in accuracy.summarize(accuracy.point_ratios(data, doc))["groups"].values()}
        assert accuracy.UNPRICED not in goals and (priced != accuracy.CALIBRATED or goals == {priced})


def test_groups_without_a_pixel_line_that_a_calibration_prices_are_told_apart_from_unfitted_ones():
    """Known answer: of six groups without a pixel line, the one with a calibration line of its own, its variant,
    and another architecture pooled in that calibration are priced by it; an architecture the calibration never
    saw, the same architecture on another platform (tiled) and a variant of it no line covers are not."""
    platform = {"op": "decode", "conv_backend": "onednn", "allocator": "glibc-fixed", "dtype": "fp32", "os": "linux"}
    cal = {**platform, "tiled": False, "architectures": {"sd15": {}}, "variants": {"sd15/math": {}},
           "transfer_lines": {"sd15": {}, "flux1": {}}}

    def unfitted(arch: str, tiled: bool = False, variant: str = "") -> dict:
        key = {**platform, "architecture": arch, "tiled": tiled}
        return {**key, "group": co.group_id(key) + variant, "reason": "fewer than 2 distinct pixel counts"}

    groups = [unfitted("sd15"), unfitted("sd15", variant="/math"), unfitted("flux1"), unfitted("wan21"),
              unfitted("flux1", tiled=True), unfitted("flux1", variant="/decomposed")]  # the last: priced by nothing
    lined, calibrated = co.calibrated_groups({"calibrations": [cal], "unfitted": groups})
    assert lined == {"sd15/decode/onednn/glibc-fixed/fp32/linux/untiled",
                     "sd15/decode/onednn/glibc-fixed/fp32/linux/untiled/math"}
    assert calibrated == groups[:3]
