"""The command line through Typer's CliRunner: good paths, and bad input as one line and a non-zero exit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import scale_slope, unmeasured

from vaemem import estimate as est
from vaemem.cli import app
from vaemem.errors import VaememError
from vaemem.fit import coefficients as co

ROOT = Path(__file__).parent.parent
TINY = ROOT / "measurements" / "epyc-avx2-2core-tiny.jsonl"
MIB = 1024 * 1024
runner = CliRunner()


def _err_line(result) -> str:
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.portable
@pytest.mark.parametrize("args,message", [
    (["measure", "-m", "nope", "--op", "decode", "--dtype", "fp32", "--res", "64"], "unknown model 'nope'"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64y"], "bad resolution"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "66"], "multiples of 4"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--frames", "5"],
     "image model"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--allocator", "native"],
     "glibc, glibc-fixed"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--shard", "3/2"], "bad shard"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--devices", "0,0"],
     "bad --devices"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--devices", "0"],
     "cuda points only"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--launcher", "thread"],
     "unknown launcher"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--runs", "0"],
     "--runs must be an integer from 1 to 1000, got 0"),
    (["measure", "-m", "tiny-kl"], "a sweep needs at least one"),
    (["measure", "--sweep", "missing.toml"], "cannot read sweep file"),
    (["estimate", "-m", "sdxl", "--op", "decode", "--res", "1024", "--dtype", "fp9", "--backend", "cudnn",
      "--allocator", "native", "--os", "linux"], "unknown dtype 'fp9'"),
    (["estimate", "-m", "sdxl", "--op", "decode", "--res", "-5", "--dtype", "fp16", "--backend", "cudnn",
      "--allocator", "native", "--os", "linux"], "bad resolution"),
    (["estimate", "-m", "sdxl", "--op", "decode", "--res", "1024", "--dtype", "fp16", "--backend", "cudnn",
      "--allocator", "native", "--os", "linux", "--cast", "op"], "cast='op' says which weights were cast from "
     "loaded_dtype: give loaded_dtype"),
    (["estimate", "-m", "nope", "--op", "decode", "--res", "512", "--dtype", "fp16", "--backend", "cudnn",
      "--allocator", "native", "--os", "linux"], "sdxl, wan21, wan22 (and the tiny test models tiny-kl, "),
    (["trace", "-m", "nope", "--op", "decode", "--res", "64"], "wan21, wan22 (or a tiny test model: tiny-cogvideox, "),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--runs", "100000000000"],
     "--runs must be an integer from 1 to 1000, got 100000000000"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--timeout", "1e30"],
     "--timeout must be a positive number of seconds up to 604800 (a week), got 1e+30"),  # overflowed the OS's clock
    (["bench-conv3d", "-m", "tiny-wan", "--runs", "100000000000"], "--runs must be an integer from 1 to 1000"),
    (["report", "--format", "html"], "unknown --format"),
    (["fit", "--measurements", "no/such/dir"], "no such measurement file"),
    (["diff", "no1.json", "no2.json"], "cannot read coefficient file"),
    # a size no model runs: every cell n/a, exit 0 before
    (["diff", str(ROOT / "vaemem" / "coefficients.json"), str(ROOT / "vaemem" / "coefficients.json"), "--res", "513"],
     "neither file prices any group at 513: every cell is n/a"),
    (["trace", "--zoo", "-m", "sd15", "--res", "512"], "give it without --model, --res"),
    (["trace", "--zoo"], "give --record FILE"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--timeout", "nan"],
     "--timeout must be a positive number of seconds"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "0x64"], "must be positive"),
    (["measure", "--sweep", "s.toml", "--batch", "2"], "give either --sweep or grid options"),
    (["estimate", "-m", "sdxl", "--op", "decode", "--res", "131072", "--dtype", "fp16", "--backend", "cudnn",
      "--allocator", "native", "--os", "linux"], "at most 65536 px"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--overlap", "0.5"],
     "an overlap applies to tiled points, and the grid has none"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--force", "--retry-failed"],
     "--retry-failed adds nothing"),
    (["trace", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--slicing"],
     "a sliced point needs batch > 1"),  # as measure says: batch 1 sliced is the unsliced dry run
    # a batch diffusers' HunyuanVideo 1.5 cannot run (campaign 36): the dry run crashed on it with a traceback
    (["trace", "-m", "tiny-hunyuanvideo-1.5", "--op", "decode", "--dtype", "fp32", "--res", "64", "--frames", "5",
      "--batch", "2"], "tiny-hunyuanvideo-1.5 cannot decode a batch of 2 unsliced: diffusers 0.42's"),
    (["measure", "-m", "hunyuanvideo-1.5", "--op", "encode", "--dtype", "bf16", "--res", "256x160", "--frames", "9",
      "--batch", "2"], "hunyuanvideo-1.5 cannot encode a batch of 2 unsliced"),
    (["estimate", "-m", "hunyuanvideo-1.5", "--op", "decode", "--res", "256x160", "--frames", "9", "--batch", "2",
      "--dtype", "bf16", "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux"],
     "hunyuanvideo-1.5 cannot decode a batch of 2 unsliced"),
    # a rig name names a file beside the measurements: a path is refused before anything is written
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--rig", "../../etc"],
     "bad --rig '../../etc': a rig name is a file name"),
    (["plan", "--rig", "a/b", "--budget-min", "1"], "bad --rig 'a/b'"),
    # a plan is TOML, and measure --sweep reads a file by its suffix: plan.jsonl could not be run
    (["plan", "--budget-min", "1", "--out", "plan.jsonl"], "--out plan.jsonl: a plan is a TOML sweep file"),
    # a forgotten value: click took the next option as it (`fit --out --check` wrote a file named --check)
    (["fit", "--measurements", "m.jsonl", "--out", "--check"], "--out: needs a value, and the next word is the "
                                                              "option --check"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--out", "--dry-run"],
     "the next word is the option --dry-run"),
    # an overlap past half: diffusers' tiled decode got a stride of zero (a traceback from range())
    (["trace", "-m", "sd15", "--op", "decode", "--dtype", "fp32", "--res", "512", "--tile", "256", "--overlap",
      "0.97"], "tile overlap is a fraction from 0 to 0.5"),
    (["trace", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--batch", "5000"],
     "batch must be at most 4096 samples"),  # as estimate says
    # click's own usage errors: one line too, not a usage block and a box
    (["estimate", "-m", "sd15"], "error: Missing option '--op'. (`"),
    (["nope"], "error: No such command 'nope'."),
    (["estimate", "-m", "sd15", "--op", "decode", "--res", "512", "--dtype", "fp32", "--batch", "x"],
     "Invalid value for '--batch'"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in _err_line(result)


@pytest.mark.portable
@pytest.mark.parametrize("args,option", [
    (["estimate", "-m", "sd15", "-m", "sdxl", "--op", "decode", "--res", "512", "--dtype", "fp32"], "-m"),
    (["estimate", "-msd15", "--model=sdxl", "--op", "decode", "--res", "512", "--dtype", "fp32"], "--model"),
    (["estimate", "-m", "sd15", "--op", "decode", "--op=encode", "--res", "512", "--dtype", "fp32"], "--op"),
    (["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--rig", "a", "--rig", "b"],
     "--rig"),
])
def test_an_option_of_one_value_given_twice_is_refused(args, option):
    """Click keeps the last of a repeated option: `-m sd15 -m sdxl` priced sdxl alone, silently."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {option}: given twice" in result.output
    assert runner.invoke(app, [*args, "--help"]).exit_code == 0  # help is help, whatever else the line holds


@pytest.mark.portable
def test_the_list_of_commands_gives_each_its_summary_on_one_line():
    """Typer's rich help kept a docstring's line breaks in `vaemem --help`: trace's summary broke after "(its input"."""
    import typer.main

    group = typer.main.get_command(app)
    ctx = group.make_context("vaemem", ["--help"], resilient_parsing=True)
    for name in group.list_commands(ctx):
        summary = group.get_command(ctx, name).short_help
        assert summary and "\n" not in summary, name
    assert "the op creates (its input and the weights" in runner.invoke(app, ["--help"]).output


def test_packaged_names_the_packaged_file_in_every_command(tmp_path, monkeypatch):
    """`--coefficients packaged` worked in estimate alone: export and diff read a file named packaged."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "vendored.py"
    assert runner.invoke(app, ["export", "--python", str(out), "--coefficients", "packaged"]).exit_code == 0
    assert out.read_bytes() == _exported(tmp_path, str(ROOT / "vaemem" / "coefficients.json"))
    same = runner.invoke(app, ["diff", "packaged", str(ROOT / "vaemem" / "coefficients.json"), "--res", "512"])
    assert same.exit_code == 0 and "sd15/decode/onednn/glibc-fixed/fp32/linux/untiled" in same.output


def test_packaged_on_estimate_is_the_shipped_file_whatever_the_environment_says(monkeypatch):
    """`--coefficients packaged` became the API's None, which $VAEMEM_COEFFICIENTS redirects: estimate priced the
    plan's fit where export, diff and report read the shipped file."""
    args = ["estimate", "-m", "sd15", "--op", "decode", "--res", "512", "--dtype", "fp32", "--backend", "onednn",
            "--allocator", "glibc-fixed", "--os", "linux", "--json"]
    shipped = json.loads(runner.invoke(app, args).stdout)["bytes"]
    monkeypatch.setenv("VAEMEM_COEFFICIENTS", str(ROOT / "fits" / "plan" / "coefficients.json"))
    est.clear_cache()
    try:
        plan = json.loads(runner.invoke(app, args).stdout)["bytes"]
        for named in ("packaged", str(ROOT / "vaemem" / "coefficients.json")):
            assert json.loads(runner.invoke(app, [*args, "--coefficients", named]).stdout)["bytes"] == shipped
    finally:
        est.clear_cache()
    assert plan != shipped  # the environment's file sets the default


def _exported(tmp_path: Path, coefficients: str) -> bytes:
    path = tmp_path / "again.py"
    assert runner.invoke(app, ["export", "--python", str(path), "--coefficients", coefficients]).exit_code == 0
    return path.read_bytes()


def test_a_fit_that_fits_nothing_is_refused_and_writes_nothing(tmp_path):
    """One run gives no line (a line needs two sizes): the file of 0 groups was written, exit 0, and layered over the
    packaged one changed nothing, silently."""
    one = tmp_path / "one.jsonl"
    one.write_text((ROOT / "measurements" / "epyc-avx2-2core-tiny.jsonl").read_text().splitlines()[0] + "\n")
    out = tmp_path / "mine.json"
    result = runner.invoke(app, ["fit", "--measurements", str(one), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "nothing to fit in 1 run (tiny-kl/" in _err_line(result) and not out.exists()


def test_a_trace_is_refused_before_torch_is_imported():
    """An unknown model or a clip length a model cannot take was refused after seconds of importing torch."""
    code = ("import sys; from typer.testing import CliRunner; from vaemem.cli import app; "
            "r = CliRunner().invoke(app, ['trace', '-m', 'wan21', '--op', 'decode', '--res', '512', '--frames', '10']);"
            " assert r.exit_code == 2 and '1 + 4k frames' in r.output, r.output; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_repeatable_options_and_a_value_that_looks_like_an_option_pass_the_check():
    """`measure -m a -m b` is a grid of two models; the value after `--out` is never read as an option."""
    result = runner.invoke(app, ["measure", "-m", "tiny-kl", "-m", "tiny-wan", "--op", "decode", "--dtype", "fp32",
                                 "--res", "64", "--out", "-m.jsonl", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "plan: 2 points x 2 runs" in result.output


def test_report_skips_a_malformed_line_only_when_asked(tmp_path):
    """As fit does: one garbage line stops report with its place, and --skip-bad lists it and reports the rest."""
    m = tmp_path / "m.jsonl"
    m.write_text(TINY.read_text() + "{not json\n")
    bad = runner.invoke(app, ["report", "--measurements", str(m), "--format", "json"])
    assert bad.exit_code == 2 and "m.jsonl:" in _err_line(bad) and "malformed JSON" in bad.output
    ok = runner.invoke(app, ["report", "--measurements", str(m), "--format", "json", "--skip-bad"])
    assert ok.exit_code == 0 and "skipped " in ok.output and "malformed JSON" in ok.output


def test_a_binary_file_among_measurements_or_as_a_sweep_is_one_line(tmp_path):
    """Bytes that are not UTF-8 (a PNG saved as .jsonl, or given as a sweep) are a bad line / a bad sweep file, said
    in one line; a crashed with AttributeError (a UnicodeDecodeError has no .msg) and a raw UnicodeDecodeError."""
    binary = b"\x89PNG\r\n\x1a\n\xff\xfe\n"
    m = tmp_path / "m.jsonl"
    m.write_bytes(TINY.read_bytes() + binary)
    bad = runner.invoke(app, ["report", "--measurements", str(m), "--format", "json"])
    assert bad.exit_code == 2 and "m.jsonl:" in _err_line(bad) and "not UTF-8 text" in _err_line(bad), bad.output
    ok = runner.invoke(app, ["report", "--measurements", str(m), "--format", "json", "--skip-bad"])
    assert ok.exit_code == 0 and "not UTF-8 text" in ok.output
    (tmp_path / "s.toml").write_bytes(binary)
    sweep = runner.invoke(app, ["measure", "--sweep", str(tmp_path / "s.toml"), "--dry-run"])
    assert sweep.exit_code == 2 and "not UTF-8 text, not a sweep file" in _err_line(sweep), sweep.output


def test_a_file_of_another_kind_is_named_as_not_this_kind(tmp_path):
    """Each of vaemem's files given where another is expected says what it is not, never "newer: upgrade vaemem",
    "old: refit" or "delete that line" (a coefficient file of schema 26 as a sweep or a dry-run cache read as newer;
    the dry-run cache as coefficients as an old file to refit; either as measurements as a malformed line)."""
    coefficients, traces = str(est.default_coefficients_path()), str(ROOT / "fits" / "traces.json")
    for args, message in [
        (["measure", "--sweep", coefficients, "--dry-run"],
         "not a sweep file (no [[grid]], [[point]] or runs; its keys: calibrations, cast_term"),
        (["fit", "--measurements", str(TINY), "--traces", coefficients, "--out", str(tmp_path / "c.json")],
         "not a vaemem dry-run cache (it has no entries)"),
        (["estimate", "-m", "sd15", "--op", "decode", "--res", "512", "--dtype", "fp16", "--coefficients", traces,
          "--backend", "cudnn", "--allocator", "native", "--os", "linux", "--attention", "fused"],
         "is not a vaemem coefficient file (it has no list of groups)"),
        (["fit", "--measurements", traces, "--out", str(tmp_path / "c.json")], "traces.json: not a measurement file"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in _err_line(result), (args, result.output)
        assert "upgrade" not in result.output and "refit" not in result.output


def test_bench_conv3d_results_beside_measurements_do_not_stop_a_sweep(tmp_path):
    """bench-conv3d's lines (a ``kind`` of their own, no point key) in the folder a sweep resumes from are not
    measurements: the sweep plans as without them (it crashed with KeyError: 'point_key')."""
    (tmp_path / "bench.jsonl").write_text(json.dumps({"schema_version": 1, "kind": "conv3d", "model": "tiny-wan",
                                                      "rig": {"name": "r"}}) + "\n")
    result = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                 "--out", str(tmp_path / "m.jsonl"), "--rig", "r", "--dry-run"])  # the lines' rig
    assert result.exit_code == 0 and "plan: 1 point x 2 runs, 2 due" in result.output, result.output


def test_report_and_plot_refuse_measurements_of_a_model_the_file_does_not_price(tmp_path):
    """A coefficient file fitted from some of the measurements, judged on all of them: one line naming the models
    it lacks and how to fit one that holds them (it crashed with a KeyError)."""
    kl = tmp_path / "kl.jsonl"
    kl.write_text("".join(line + "\n" for line in TINY.read_text().splitlines() if '"model":"tiny-kl"' in line))
    fitted = runner.invoke(app, ["fit", "--measurements", str(kl), "--out", str(tmp_path / "kl.json")])
    assert fitted.exit_code == 0, fitted.output
    for args in (["report"], ["plot", "--out", str(tmp_path / "plots")]):
        result = runner.invoke(app, [*args, "--measurements", str(TINY), "--coefficients", str(tmp_path / "kl.json")])
        assert result.exit_code == 2, result.output
        assert "kl.json holds no model tiny-minimax-h3, tiny-wan of the measurements" in _err_line(result)


def test_files_of_the_wrong_shape_and_unwritable_outputs_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("list.json").write_text("[1, 2]")
    Path("nogroups.json").write_text('{"schema_version": 1}')
    Path("newer.json").write_text('{"schema_version": 2, "groups": {}}')
    Path("newer2.json").write_text('{"schema_version": 2, "reasons": {}}')
    Path("afile").write_text("")
    shutil.copy(TINY, "m.jsonl")
    for args, message in [
        (["measure", "--sweep", "list.json", "--dry-run"], "not a sweep file"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "list.json"],
         "not an exceptions file"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "nogroups.json"],
         "not an exceptions file"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "newer.json"],
         "schema_version 2 is newer than this vaemem reads (1); upgrade vaemem"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "newer2.json"],
         "schema_version 2 is newer than this vaemem reads (1); upgrade vaemem"),  # its groups held otherwise
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "."],
         "cannot read exceptions file .: Is a directory"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--exceptions", "exceptons.json"],
         "--exceptions exceptons.json: no such file (give --exceptions none for no exceptions)"),
        (["fit", "--measurements", "m.jsonl", "--out", "c.json", "--traces", "no-such.json"],
         "--traces no-such.json: no such file"),
        (["plot", "--measurements", "m.jsonl", "--out", "afile"], "cannot make that directory"),
        # the file to write is checked first: before the measurements (missing here) and the minute of fitting
        (["fit", "--measurements", "missing.jsonl", "--out", "."], "cannot write .: it is a directory"),
        (["fit", "--measurements", "missing.jsonl", "--out", "afile/c.json"], "afile is not a directory"),
        (["fit", "--measurements", "missing.jsonl", "--check", "--out", "."],
         "cannot read coefficient file .: it is a directory"),
        (["bench-conv3d", "-m", "tiny-wan", "--res", "64x64", "--frames", "5", "--runs", "1", "--out", "afile/x.jsonl"],
         "is not a directory"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in _err_line(result), args


def test_a_rig_owners_fit_keeps_only_the_projects_exceptions_for_its_own_groups(tmp_path):
    """The default exceptions file is the project's: fitting other measurements (a rig owner's, from a checkout)
    takes the reasons of the groups they hold and ignores the rest, where a file given by --exceptions must name
    only groups with data."""
    shutil.copy(TINY, tmp_path / "m.jsonl")
    ok = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "c.json")])
    assert ok.exit_code == 0, ok.output
    (tmp_path / "e.json").write_text(json.dumps({"schema_version": 1, "groups": {"sd15/decode/x": "why"}}))
    bad = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "d.json"),
                              "--exceptions", str(tmp_path / "e.json")])
    assert bad.exit_code == 2 and "exceptions name groups with no data" in _err_line(bad)


@pytest.mark.portable
def test_measure_refuses_to_append_to_a_file_of_a_newer_schema(tmp_path):
    out = tmp_path / "m.jsonl"
    out.write_text('{"schema_version": 2, "rig": {"name": "t"}}\n')
    result = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                 "--rig", "t", "--out", str(out)])
    assert result.exit_code == 2 and "newer than this vaemem reads" in _err_line(result)
    assert out.read_text() == '{"schema_version": 2, "rig": {"name": "t"}}\n'  # untouched
    # a neighbour of a newer schema is refused too: its runs, unread, would be measured again
    mine = tmp_path / "mine.jsonl"
    result = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                 "--rig", "t", "--out", str(mine), "--dry-run"])
    assert result.exit_code == 2 and f"{out}:1: schema_version 2 is newer than this vaemem reads" in \
        _err_line(result) and "upgrade vaemem, or move that file out of the folder" in _err_line(result)
    out.write_text('{"schema_version": 1, "rig": {"na')  # a damaged neighbour still does not stop a sweep
    result = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                 "--rig", "t", "--out", str(mine), "--dry-run"])
    assert result.exit_code == 0 and not mine.exists(), result.output


GOOD_GRID = 'models = ["tiny-kl"]\nops = ["decode"]\ndtypes = ["fp32"]\nres = ["64"]\n'


@pytest.mark.portable
@pytest.mark.parametrize("text,message", [
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'colour = ["red"]\n', "grid 1 has unknown keys ['colour']"),
    ('schema_version = 3\n', "schema_version 3 is newer than this vaemem reads"),
    ('runs = 2\n', "no integer schema_version"),
    ('schema_version = 1\nruns = "two"\n[[grid]]\n' + GOOD_GRID, "runs must be an integer from 1 to 1000, got 'two'"),
    ('schema_version = 1\nruns = 0\n[[grid]]\n' + GOOD_GRID, "runs must be an integer from 1 to 1000, got 0"),
    # a typo's hundred billion runs: their planning alone ran for hours
    ('schema_version = 1\nruns = 100000000000\n[[grid]]\n' + GOOD_GRID, "runs must be an integer from 1 to 1000"),
    ('schema_version = 1\n', "needs at least one [[grid]] table"),
    ('schema_version = 1\ngird = 1\n[[grid]]\n' + GOOD_GRID, "unknown top-level keys ['gird']"),
    ('schema_version = 1\n[[grid]]\nmodels = ["tiny-kl"]\nops = ["decode"]\ndtypes = ["fp32"]\n', "grid 1 has no res"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID.replace('["tiny-kl"]', '"tiny-kl"'),
     "grid 1: models must be a non-empty list of strings, not 'tiny-kl'"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'batches = ["2"]\n',
     "grid 1: batches must be a non-empty list of integers"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'tiles = [true]\n', "grid 1: tiles must be a non-empty list"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID.replace('"64"', '"64q"'), "grid 1: bad resolution"),
    ('schema_version = 1\n[[grid]\n', "not valid TOML (a sweep file is TOML, named *.toml, or JSON)"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'slicing = ["yes"]\n', "grid 1: slicing must be a non-empty "
     "list of true/false"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'attention = ["flash"]\n', "choose one of: fused, math"),
    ('schema_version = 1\n[[grid]]\n' + GOOD_GRID + 'slicing = [true]\n', "slicing needs a batch of more than"),
])
def test_measure_sweep_file_errors_name_the_file_and_the_field(tmp_path, text, message):
    sweep = tmp_path / "s.toml"
    sweep.write_text(text)
    line = _err_line(runner.invoke(app, ["measure", "--sweep", str(sweep), "--dry-run"]))
    assert "s.toml" in line and message in line, line


def test_runs_given_on_the_command_line_win_over_a_sweep_files_even_the_default(tmp_path):
    """--runs 2 was read as not given (2 is the default) and the sweep file's runs = 3 ran instead."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('schema_version = 1\nruns = 3\n[[grid]]\n' + GOOD_GRID)
    args = ["measure", "--sweep", str(sweep), "--dry-run", "--out", str(tmp_path / "m.jsonl")]
    for given, said in (([], "1 point x 3 runs"), (["--runs", "2"], "1 point x 2 runs"),
                        (["--runs", "1"], "1 point x 1 run,")):
        res = runner.invoke(app, [*args, *given])
        assert res.exit_code == 0 and f"plan: {said}" in res.output, res.output
    res = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                              "--dry-run", "--out", str(tmp_path / "m.jsonl")])
    assert res.exit_code == 0 and "plan: 1 point x 2 runs" in res.output, res.output


def test_a_sweep_file_and_the_cli_take_the_variant_fields(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('schema_version = 1\n[[grid]]\n' + GOOD_GRID.replace('"64"', '"128"') +
                     'batches = [2]\ntiles = [64]\noverlaps = [0.5]\nslicing = [true]\nattention = ["math"]\n')
    res = runner.invoke(app, ["measure", "--sweep", str(sweep), "--dry-run", "--out", str(tmp_path / "m.jsonl")])
    assert res.exit_code == 0 and "plan: 1 point x" in res.output, res.output
    from vaemem.measuring.parent.sweepfile import load_sweep

    (p,) = load_sweep(sweep, "cpu").points
    assert p.key.endswith("/o0.5/sliced/math")
    res = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                              "--attention", "flash", "--out", str(tmp_path / "m.jsonl")])
    assert res.exit_code == 2 and "choose one of: fused, math" in _err_line(res)


@pytest.mark.portable
def test_measure_then_resume_through_the_cli(tmp_path):
    out = tmp_path / "m.jsonl"
    args = ["measure", "-m", "tiny-kl", "--op", "encode", "--dtype", "fp32", "--res", "64", "--res", "96x64",
            "--runs", "1", "--rig", "t", "--out", str(out), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["status"] for r in records] == ["ok", "ok"] and len(out.read_text().splitlines()) == 2
    again = runner.invoke(app, args[:-1])
    assert again.exit_code == 0 and "nothing to do" in again.output
    again = runner.invoke(app, args)  # JSON on stdout, the message on stderr
    assert again.exit_code == 0 and json.loads(again.stdout) == [] and "nothing to do" in again.stderr
    # a resume reads the whole folder: another output file there says where the runs are, not that they are in it
    other = runner.invoke(app, [*args[:-3], "--out", str(tmp_path / "other.jsonl")])
    assert other.exit_code == 0 and f"recorded for rig t in {tmp_path}/*.jsonl" in other.output.replace("\n", "")
    assert not (tmp_path / "other.jsonl").exists()


def test_a_resumed_zoo_with_nothing_to_trace_prints_an_empty_json_list(tmp_path):
    """The committed cache holds the whole zoo grid: a resumed --zoo traces nothing, prints an empty, versioned
    list (its message on stderr, where a script does not parse it) and leaves the cache byte for byte."""
    cache = tmp_path / "traces.json"
    shutil.copy(ROOT / "fits" / "traces.json", cache)
    res = runner.invoke(app, ["trace", "--zoo", "--record", str(cache), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"schema_version": 1, "traces": []}
    assert "nothing to do" in res.stderr
    assert cache.read_bytes() == (ROOT / "fits" / "traces.json").read_bytes()


def test_ctrl_c_in_trace_and_fit_says_what_was_kept(tmp_path, monkeypatch):
    """As an interrupted sweep says it: one line and exit 130 (they exited 130 with nothing said). A --record
    cache keeps the dry runs that ended; an interrupted fit leaves no file."""
    from vaemem.tracing import trace as tr

    real = tr.trace_many

    def one_then_ctrl_c(specs, cfg, jobs):
        yield from real(specs[:1], cfg, jobs)
        raise KeyboardInterrupt

    monkeypatch.setattr(tr, "trace_many", one_then_ctrl_c)
    cache = tmp_path / "traces.json"
    res = runner.invoke(app, ["trace", "-m", "tiny-kl", "--op", "decode", "--res", "64", "--res", "96",
                              "--record", str(cache)])
    assert res.exit_code == 130 and res.stderr == f"interrupted: {cache} holds 1 of the 2 dry runs asked\n"
    assert len(json.loads(cache.read_text())["entries"]) == 1

    def ctrl_c(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(co, "fit_dataset", ctrl_c)
    shutil.copy(TINY, tmp_path / "m.jsonl")
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(out),
                              "--exceptions", "none"])
    assert res.exit_code == 130 and res.stderr == f"interrupted: {out} not written\n" and not out.exists()


def test_fit_check_passes_and_fails_through_the_cli(tmp_path):
    shutil.copy(TINY, tmp_path / "m.jsonl")
    coef = tmp_path / "c.json"
    base = ["--measurements", str(tmp_path / "m.jsonl"), "--out", str(coef), "--exceptions", "none"]
    assert runner.invoke(app, ["fit", *base]).exit_code == 0
    ok = runner.invoke(app, ["fit", *base, "--check"])
    assert ok.exit_code == 0 and "is reproducible" in ok.output
    doc = json.loads(coef.read_text())
    doc["groups"][1]["base_bytes"] += MIB
    coef.write_text(co.dumps(doc))
    bad = runner.invoke(app, ["fit", *base, "--check"])
    assert bad.exit_code == 1 and "differs: group" in bad.output and "base_bytes" in bad.output
    # the fit that writes the file checked: a plain `vaemem fit` would write the packaged file from the default folder
    # (and "commit the result" is said of the packaged file only, not of a user's own)
    assert bad.output.replace("\n", "").endswith(f"run `vaemem fit --measurements {tmp_path / 'm.jsonl'} --out {coef} "
                                                 f"--exceptions none`") and "(1 difference)" in bad.output
    doc["schema_version"] = 999  # a newer vaemem's file: upgrade, not "differs" and a refit that would downgrade it
    coef.write_text(co.dumps(doc))
    newer = runner.invoke(app, ["fit", *base, "--check"])
    assert newer.exit_code == 2 and _err_line(newer) == (f"error: {coef}: schema_version 999 is newer than this "
                                                         f"vaemem writes ({est.SCHEMA_VERSION}); upgrade vaemem to "
                                                         f"fit or check it")
    before = coef.read_bytes()  # nor does a fit overwrite it with an older one
    assert runner.invoke(app, ["fit", *base]).exit_code == 2 and coef.read_bytes() == before
    coef.write_text("{not json")  # a damaged file: said so, not "formatting only"
    broken = runner.invoke(app, ["fit", *base, "--check"])
    assert broken.exit_code == 1 and "is not valid JSON" in broken.output and "formatting only" not in broken.output
    coef.unlink()  # a missing file is bad input (exit 2), not a difference
    gone = runner.invoke(app, ["fit", *base, "--check"])
    assert gone.exit_code == 2 and "cannot read coefficient file" in _err_line(gone)


@pytest.mark.parametrize("where,message", [
    (lambda t: Path("/proc/vaemem-c.json"), "cannot write /proc/vaemem-c.json"),
    (lambda t: (t / "f").write_text("x") and t / "f" / "c.json", "is not a directory"),
    (lambda t: t, "it is a directory"),
])
def test_fit_out_that_cannot_be_written_is_one_line_and_writes_nothing(tmp_path, where, message):
    shutil.copy(TINY, tmp_path / "m.jsonl")
    out = where(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(out),
                                 "--exceptions", "none"])
    assert result.exit_code == 2 and message in _err_line(result), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no temporary file left


def test_fit_refuses_a_group_over_the_bound_without_writing(tmp_path):
    lines = [json.loads(l) for l in TINY.read_text().splitlines()]
    for r in lines:
        if r["point_key"] == lines[0]["point_key"]:
            r["demand_bytes"] //= 3  # one tiny-kl decode point now far under the envelope
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(out),
                                 "--exceptions", "none"])
    assert result.exit_code == 1 and "over bound: tiny-kl/decode" in result.output and not out.exists()
    # the remedy names a file of the user's own, not "none" nor the project's file (which serves its data only)
    own = ('list the group with a reason in a file of your own, {"schema_version": 1, "groups": {"GROUP ID": '
           '"reason"}}, given as --exceptions FILE')
    assert own in result.output
    result = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(out)])
    assert result.exit_code == 1 and own in result.output
    mine = tmp_path / "exc.json"
    mine.write_text(json.dumps({"schema_version": 1, "groups": {"unrelated/group": "x"}}))
    result = runner.invoke(app, ["fit", "--measurements", str(tmp_path / "m.jsonl"), "--out", str(out),
                                 "--exceptions", str(mine)])
    assert result.exit_code == 2 and "exceptions name groups with no data: unrelated/group" in _err_line(result)


def test_diff_estimate_report_and_plot(tmp_path):
    shutil.copy(TINY, tmp_path / "m.jsonl")
    meas = ["--measurements", str(tmp_path / "m.jsonl")]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    runner.invoke(app, ["fit", *meas, "--out", str(a), "--exceptions", "none"])
    runner.invoke(app, ["fit", *meas, "--out", str(b), "--margin", "0.10", "--exceptions", "none"])
    d = runner.invoke(app, ["diff", str(a), str(b), "--res", "512"])
    assert d.exit_code == 0 and "tiny-kl/decode" in d.output and "->" in d.output
    e = runner.invoke(app, ["estimate", "-m", "tiny-kl", "--op", "decode", "--res", "512", "--dtype", "fp32",
                            "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux",
                            "--coefficients", str(a), "--json"])
    assert e.exit_code == 0, e.output
    est = json.loads(e.stdout)
    g = next(g for g in json.loads(a.read_text())["groups"] if g["group"].startswith("tiny-kl/decode"))
    assert est["source"] == "measured"
    assert est["bytes"] == int(g["slope_bytes_per_pixel"] * 512 * 512 + g["base_bytes"])
    r = runner.invoke(app, ["report", *meas, "--coefficients", str(a), "--format", "json"])
    summary = json.loads(r.stdout)
    assert summary["overall"]["fitted"]["under"] == 0 and summary["overall"]["fitted"]["max"] <= 1.3
    md = runner.invoke(app, ["report", *meas, "--coefficients", str(a), "--format", "markdown"]).stdout
    assert md.startswith("## Pixel lines per group") and "| **all** |" in md and "## Leave one architecture" in md
    # the tiny models have no dry-run structure: each structural section says so, not a table of headers alone
    assert "None: no platform and kernel class has two architectures measured" in md
    assert "| calibration | left out |" not in md and "| group | points | min / median / max |" not in md
    p = runner.invoke(app, ["plot", *meas, "--coefficients", str(a), "--out", str(tmp_path / "plots")])
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert p.exit_code == 0 and len(pngs) == len(json.loads(a.read_text())["groups"])
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert runner.invoke(app, ["plot", *meas, "--coefficients", str(a), "--group", "x/y"]).exit_code == 2


def test_diff_prices_the_calibrated_architectures_and_says_why_a_cell_is_na(tmp_path):
    """A refit that changes one architecture's calibration line shows on that architecture's rows and no others,
    one that changes a class's lines on the rows of the architectures it prices by transfer (CogVideoX's fp32
    decode, as before campaign 37 measured it); a tile no model can take gives n/a cells, with the estimator's reason
    under the table."""
    packaged = unmeasured(json.loads((ROOT / "vaemem" / "coefficients.json").read_text()))
    changed = json.loads(json.dumps(packaged))
    for c in changed["calibrations"]:
        if "sd15" in c["architectures"]:
            scale_slope(c["architectures"]["sd15"], 1.25)
        if c["calibration"] == "conv2d/onednn/glibc-fixed/fp32/linux/decode/untiled":
            del c["architectures"]["flux2"]  # measured before only: the after file prices it by transfer
            del c["transfer_lines"]["flux2"]
        if c["calibration"] == "conv3d/onednn/glibc-fixed/fp32/linux/decode/untiled":  # cogvideox unmeasured
            for line in (c["class"], *c["transfer_lines"].values()):
                scale_slope(line, 1.25)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(packaged))
    b.write_text(json.dumps(changed))
    d = runner.invoke(app, ["diff", str(a), str(b), "--res", "512"], terminal_width=200)
    assert d.exit_code == 0, d.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in d.output.splitlines()
            if line.startswith("│")}
    moved = {g for g, cell in rows.items() if cell.split(" -> ")[0] != cell.split(" -> ")[1]}
    transfer = "cogvideox/decode/onednn/glibc-fixed/fp32/linux/untiled"
    assert transfer in moved and all(g.startswith("sd15/") or g.startswith("flux2/decode/onednn/glibc-fixed/fp32")
                                     or g == transfer for g in moved), moved
    flux2 = rows["flux2/decode/onednn/glibc-fixed/fp32/linux/untiled"].split(" -> ")
    assert all(v.isdigit() for v in flux2)  # priced by both files, not "-" where one has no line of its own
    assert "sd15/decode/onednn/glibc-fixed/fp32/linux/untiled" in moved and "n/a:" not in d.output
    bad = runner.invoke(app, ["diff", str(a), str(b), "--res", "512", "--tile", "100"], terminal_width=200)
    assert bad.exit_code == 0 and "n/a: tile must be a positive multiple of 8 px for sd15, got 100" in bad.output
    assert runner.invoke(app, ["diff", str(a), str(b), "--tile", "0"]).exit_code == 2


def test_diff_names_its_arguments_and_a_wrong_cpu_allocator_is_told_this_oses_choices(monkeypatch):
    assert "OLD" in runner.invoke(app, ["diff", "--help"]).output
    from vaemem.measuring.child import rig

    for os_, choices in (("linux", "choose one of: glibc, glibc-fixed"), ("windows", "choose one of: system")):
        monkeypatch.setattr(rig, "os_name", lambda os_=os_: os_)
        result = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                                     "--allocator", "nativ", "--dry-run"])
        assert result.exit_code == 2 and _err_line(result).endswith(choices), result.output


def test_flags_are_shown_without_a_type():
    """A flag takes no value (`--slicing true` is refused): the help never shows it "<bool>", as typer would."""
    for args in ([], ["trace"], ["fit"], ["measure"], ["estimate"]):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0 and "--help" in result.output and "<bool>" not in result.output, args
    assert "<path>" in runner.invoke(app, ["fit", "--help"]).output  # an option with a value keeps its type


def test_help_and_estimate_do_not_import_torch():
    code = ("import sys; from typer.testing import CliRunner; from vaemem.cli import app; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
            "print('torch' in sys.modules, 'pandas' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


def test_ctrl_c_keeps_every_finished_run_and_no_partial_line(tmp_path):
    import os
    import signal
    import time

    out = tmp_path / "m.jsonl"
    vaemem_bin = Path(sys.executable).parent / "vaemem"
    proc = subprocess.Popen([str(vaemem_bin), "measure", "-m", "tiny-kl", "--op", "decode", "--op", "encode",
                             "--dtype", "fp32", "--res", "64", "--res", "96x64", "--res", "128", "--runs", "3",
                             "--rig", "t", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            # a suite run in the background (nohup ... &) ignores SIGINT, and a child inherits that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 2):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, err = proc.communicate(timeout=60)
    text = out.read_text()
    kept = len(text.splitlines())
    # the message counts what the file kept (it counted the runs reported to the progress bar: an interrupt
    # between a record's append and that report said "1 run kept" of 2)
    assert proc.returncode == 130 and f"interrupted: {kept} runs kept in" in err
    assert text.endswith("\n") and all(json.loads(l)["status"] for l in text.splitlines())
    assert 2 <= kept < 18


def test_a_failed_append_stops_the_sweep_saying_how_many_runs_are_kept(tmp_path, monkeypatch):
    from vaemem.measuring.parent import runner as rn

    def measure(points, out, *, on_record, on_plan, **kw):
        on_plan([], [])
        on_record({"point_key": "k", "run": 0, "status": "ok"})
        raise VaememError(f"cannot append to {out}: No space left on device; the line was not written")

    monkeypatch.setattr(rn, "measure", measure)
    res = runner.invoke(app, ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64",
                              "--rig", "t", "--out", str(tmp_path / "m.jsonl")])
    line = [l for l in res.output.splitlines() if l.strip()][-1]  # after the plan line: one error line
    assert "Traceback" not in res.output and line.startswith("error: ")
    assert res.exit_code == 2 and "No space left on device" in line and "the sweep stopped, 1 run kept in" in line


def test_a_rig_name_recorded_on_another_cpu_is_refused(tmp_path):
    """Campaigns 14 and 15 ran on AMD EPYCs under the name of the Intel Xeon of the campaigns before: a rig name
    labels one machine, so measure refuses a name the folder recorded on another CPU, before anything runs."""
    line = json.loads(TINY.read_text().splitlines()[0])
    line["rig"] = {**line["rig"], "name": "the-rig", "device_name": "Some Other CPU 9000"}
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    args = ["measure", "-m", "tiny-kl", "--op", "decode", "--dtype", "fp32", "--res", "64", "--runs", "1",
            "--out", str(tmp_path / "new.jsonl"), "--dry-run"]
    bad = runner.invoke(app, [*args, "--rig", "the-rig"])
    assert bad.exit_code == 2 and "give this machine a --rig of its own" in _err_line(bad)
    assert runner.invoke(app, [*args, "--rig", "another-rig"]).exit_code == 0


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_output_that_cannot_be_written_is_one_line_not_a_traceback():
    """stdout on a full device: the command says so in one line and exits 1 (a traceback once)."""
    vaemem_bin = Path(sys.executable).with_name("vaemem")
    with open("/dev/full", "w") as full:
        res = subprocess.run([str(vaemem_bin), "estimate", "-m", "sd15", "--op", "decode", "--res", "512",
                              "--dtype", "fp32", "--backend", "onednn", "--allocator", "glibc-fixed", "--os",
                              "linux"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert res.returncode == 1 and res.stderr == "error: No space left on device\n", res.stderr


def test_the_estimate_line_names_the_request_and_rounds_the_reservation_up():
    """The first line says frames, batch and tile where given, and the MiB an app reads are never below the bytes
    priced (rounded up, not to the nearest)."""
    import math

    from vaemem import estimate as est

    args = ["-m", "wan21", "--op", "decode", "--res", "832x480", "--frames", "81", "--batch", "2", "--tile", "256",
            "--dtype", "bf16", "--backend", "onednn", "--allocator", "glibc-fixed", "--os", "linux"]
    res = CliRunner().invoke(app, ["estimate", *args])
    e = est.explain("wan21", "decode", 832, 480, frames=81, batch=2, tile=256, dtype="bf16", backend="onednn",
                    allocator="glibc-fixed", os="linux")
    first = res.stdout.splitlines()[0]
    assert res.exit_code == 0 and first.startswith(
        f"{math.ceil(e.bytes / 2**20)} MiB for wan21 decode 832x480 x 81 frames, batch 2, 256 px tiles bf16 (")


def test_report_as_tables_renders_every_section_as_rich_tables():
    """The default format printed the structural sections as raw Markdown after its one rich table; each Markdown
    table is now a rich table, headings and notes plain text, long cells wrapped rather than cut."""
    result = runner.invoke(app, ["report", "--measurements", str(TINY)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "|---" not in out and "## " not in out and "**" not in out
    assert "\nLeave one architecture out: its points priced" in out
    # the apps' table and the math path's, as tables with their cells
    assert out.count("┃ group") >= 2 and "┃ architecture" in out
    assert "tiny-minimax-h3/encode/onednn/glibc-fixed/fp32" in out


def test_markdown_tables_become_rich_tables_cell_for_cell():
    """Known answer: the separator row dropped (a row of dashes kept), an escaped pipe kept in its cell, a trailing
    empty cell kept, markup-like text shown as is, bold and code marks removed."""
    from rich.console import Console

    from vaemem.report.tables import markdown_renderables

    parts = markdown_renderables("# Title\n| a | b \\| c | [bold]x |\n|---|:-:|---|\n| - | - | - |\n"
                                 "| **1** | `2` ||\ntext `code`")
    assert [type(p).__name__ for p in parts] == ["Text", "Table", "Text"]
    table = parts[1]
    assert [str(c.header) for c in table.columns] == ["a", "b | c", "[bold]x"]
    assert [[str(cell) for cell in c._cells] for c in table.columns] == [["-", "1"], ["-", "2"], ["-", ""]]
    console = Console(width=80, record=True)
    for p in parts:
        console.print(p)
    text = console.export_text()
    assert "Title" in text and "text code" in text and "**" not in text
