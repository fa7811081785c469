"""Plans (issue 13): the cost model, the choice of points, the plan file, and a plan that runs late."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import FakeLauncher
from vaemem.cli import app
from vaemem.errors import VaememError
from vaemem.measuring.parent.runner import measure
from vaemem.measuring.parent.sweepfile import dumps_plan, load_sweep
from vaemem.measuring.point import Point, validate
from vaemem.planning.cost import DEFAULTS, CostModel, from_history, work_bytes
from vaemem.planning.plan import make_plan

runner = CliRunner()
CPU = DEFAULTS["cpu"]


def test_the_cost_model_adds_start_build_and_work():
    cost = CostModel(1.0, 0.01, {"conv2d": 10.0, "conv3d": 20.0}, "test")
    p = validate(Point("sd15", "decode", "fp32", 256, 256, allocator="glibc-fixed"))
    work = work_bytes(p)
    assert cost.seconds(p, work) == pytest.approx(1.0 + 0.01 * 49.490199 + 10.0 * work / 2**30)
    tiled = validate(Point("sd15", "decode", "fp32", 1024, 1024, tile=256, allocator="glibc-fixed"))
    assert work_bytes(tiled) == work_bytes(validate(Point("sd15", "decode", "fp32", 1024, 1024,
                                                          allocator="glibc-fixed")))  # tiling does not cut work


def test_rates_come_from_the_rigs_own_runs():
    p = validate(Point("sd15", "decode", "fp32", 256, 256, allocator="glibc-fixed"))
    work = work_bytes(p)
    rec = {**p.to_dict(), "rig": {"name": "r"}, "status": "ok", "op_wall_s": 2.0 * work / 2**30, "build_s": 0.5,
           "run_wall_s": 2.0 * work / 2**30 + 0.5 + 0.25}
    cost = from_history([rec, {**rec, "rig": {"name": "other"}, "op_wall_s": 99.0}], "r", "cpu")
    assert cost.op_s_per_gib["conv2d"] == pytest.approx(2.0, rel=1e-3) and cost.start_s == pytest.approx(0.25)
    assert cost.op_s_per_gib["conv3d"] == CPU.op_s_per_gib["conv3d"] and cost.source == "history:r (1 runs)"
    assert from_history([], "r", "cpu") == CPU


def test_a_plan_fixes_every_key_first_and_stays_within_its_budget():
    plan = make_plan(15, "cpu", CPU, ["decode", "encode"], ["fp32"], ["glibc-fixed"])
    assert plan.predicted_s <= 15 * 60 and plan.points[0].priority == 1
    first = [p.point for p in plan.points if p.why.startswith("tier 1")]
    assert {(p.model, p.op) for p in first} == {("sd15", "decode"), ("sd15", "encode"), ("wan21", "decode"),
                                                ("wan21", "encode")}
    assert any(p.point.frames == 1 and p.point.model == "wan21" for p in plan.points)  # the one-frame regime
    assert any(p.point.tile for p in plan.points) and any(p.point.batch == 2 for p in plan.points)
    archs = {p.point.model for p in plan.points}
    assert {"sd15", "flux1", "sana-dc-ae", "hunyuanimage-2.1", "wan21", "hunyuanvideo", "ltx-video"} <= archs
    again = make_plan(15, "cpu", CPU, ["decode", "encode"], ["fp32"], ["glibc-fixed"])
    assert again == plan  # the same inputs give the same plan
    small = make_plan(1, "cpu", CPU, ["decode"], ["fp32"], ["glibc-fixed"], video=False)
    assert small.predicted_s <= 60 and len(small.points) < len(plan.points)
    with pytest.raises(VaememError, match="no point fits"):
        make_plan(0.01, "cpu", CPU, ["decode"], ["fp32"], ["glibc-fixed"])


def test_the_plan_file_round_trips_in_priority_order(tmp_path):
    plan = make_plan(3, "cpu", CPU, ["decode"], ["fp32"], ["glibc-fixed"])
    rows = [(p.priority, p.point, p.predicted_s, p.why) for p in plan.points]
    from vaemem.measuring.point import Point

    variant = Point("sd15", "decode", "fp32", 512, 512, 2, 1, 256, "glibc-fixed", "cpu", 0.5, True, "math")
    rows.append((max(r[0] for r in rows) + 1, variant, 1.0, "a variant point"))
    path = tmp_path / "p.toml"
    path.write_text(dumps_plan("cpu", 3, CPU.to_dict(), list(reversed(rows)), "a header"))
    sw = load_sweep(path, "cuda")  # a plan carries its own device
    assert sw.points == [p.point for p in plan.points] + [variant] and sw.runs == 1 and sw.budget_s == 180.0
    assert sw.predicted_s == {p.point.key: p.predicted_s for p in plan.points} | {variant.key: 1.0}


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("budget_min = 3.0", "budget_min = 0"), "budget_min must be a positive number"),
    (lambda t: t.replace("priority = 2\n", "priority = 1\n"), "priorities must be unique"),
    (lambda t: t.replace('res = "256"', 'res = 256.5'), "res must be str or int"),
    (lambda t: t.replace('model = "sd15"', 'model = "sd16"', 1), "point 1: unknown model 'sd16'"),
    (lambda t: t.replace("predicted_s = ", "predicted = ", 1), "unknown keys ['predicted']"),
    (lambda t: t.replace("[cost_model]", "[costs]"), "unknown top-level keys ['costs']"),
    (lambda t: t.replace("budget_min = 3.0", "budget_min = nan"), "budget_min must be a positive number"),
    (lambda t: t.replace("budget_min = 3.0", "budget_min = inf"), "budget_min must be a positive number"),
    (lambda t: t.replace("predicted_s = ", "predicted_s = nan #", 1), "predicted_s must be a finite"),
    (lambda t: t.replace("priority = 1\n", "priority = 0\n", 1), "priority must be 1 or more"),
    (lambda t: t.replace("start_s = 0.6", 'start_s = "x"'), "cost_model needs start_s"),
])
def test_a_bad_plan_file_names_the_field(tmp_path, change, message):
    plan = make_plan(3, "cpu", CPU, ["decode"], ["fp32"], ["glibc-fixed"], video=False)
    text = dumps_plan("cpu", 3, CPU.to_dict(), [(p.priority, p.point, p.predicted_s, p.why) for p in plan.points])
    path = tmp_path / "p.toml"
    path.write_text(change(text))
    with pytest.raises(VaememError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_sweep(path, "cpu")


class Clock:
    """A fake clock: each run takes ``per_run`` seconds."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_plan_that_runs_late_drops_its_lowest_priority_points_and_records_them(tmp_path):
    from vaemem.measuring.plumbing.launcher import RunOutcome

    pts = [validate(Point("tiny-kl", "decode", "fp32", s, s, allocator="glibc-fixed"))
           for s in (64, 96, 128, 160, 192, 224)]
    clock = Clock()

    class Slow(FakeLauncher):
        def run(self, task, allocator, timeout_s):
            clock.t += 20.0  # every run takes twice the predicted 10 s
            out = super().run(task, allocator, timeout_s)
            return RunOutcome(out.result, out.returncode, False, "", 20.0, out.pid)

    fake = Slow()
    recs = measure(pts, tmp_path / "p.jsonl", rig="r", runs=1, launcher_factory=lambda n: fake, budget_s=95.0,
                   predicted_s={p.key: 10.0 for p in pts}, clock=clock)
    # runs 1-3 are trusted to the cost model (60 s spent); then the pace is 2.0x: run 4 (80 s) fits, run 5 would
    # end at 100 s > 95 (at the cost model's 10 s it would have fitted), run 6 neither
    assert [(r["width"], r["status"]) for r in recs] == [(64, "ok"), (96, "ok"), (128, "ok"), (160, "ok"),
                                                         (192, "dropped-late"), (224, "dropped-late")]
    assert "80 s spent, this run predicted 20 s at 2.00x the cost model" in recs[4]["status_evidence"]
    assert [p.width for p in fake.ran] == [64, 96, 128, 160]
    assert "a higher-priority point was dropped" in recs[5]["status_evidence"]
    again = measure(pts, tmp_path / "p.jsonl", rig="r", runs=1, launcher_factory=lambda n: FakeLauncher(),
                    retry_failed=True)
    assert sorted(r["width"] for r in again) == [192, 224]  # --retry-failed runs what was dropped


def test_a_late_plan_drops_its_tail_in_priority_order_not_whatever_fits(tmp_path):
    pts = [validate(Point("tiny-kl", "decode", "fp32", s, s, allocator="glibc-fixed")) for s in (64, 96, 128, 160, 192)]
    clock = Clock()
    predicted = dict(zip((p.key for p in pts), (10.0, 10.0, 30.0, 5.0, 5.0)))

    class OnTime(FakeLauncher):
        def run(self, task, allocator, timeout_s):
            clock.t += predicted[Point.from_dict(task["point"]).key]
            return super().run(task, allocator, timeout_s)

    recs = measure(pts, tmp_path / "p.jsonl", rig="r", runs=1, launcher_factory=lambda n: OnTime(), budget_s=30.0,
                   predicted_s=predicted, clock=clock)
    # the 30 s point would overrun at 20 s: it and the two cheaper points after it are dropped
    assert [r["status"] for r in recs] == ["ok", "ok", "dropped-late", "dropped-late", "dropped-late"]
    with pytest.raises(VaememError, match="budget must be a positive number of seconds"):
        measure(pts, tmp_path / "q.jsonl", rig="r", runs=1, launcher_factory=lambda n: OnTime(),
                budget_s=float("nan"), predicted_s=predicted)


def test_plan_on_the_cli_writes_a_plan_measure_reads(tmp_path):
    out = tmp_path / "plan.toml"
    res = runner.invoke(app, ["plan", "--budget-min", "2", "--op", "decode", "--no-video", "--rig", "none-such",
                              "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["predicted_min"] <= 2 and doc["cost_model"]["source"] == "defaults:cpu"
    assert doc["schema_version"] == 2
    dry = runner.invoke(app, ["measure", "--sweep", str(out), "--rig", "none-such", "--out",
                              str(tmp_path / "m.jsonl"), "--dry-run"])
    assert dry.exit_code == 0 and f"{len(doc['points'])} points x 1 run," in dry.output
    bad = runner.invoke(app, ["plan", "--budget-min", "0"])
    assert bad.exit_code == 2 and "--budget-min must be a positive number of minutes" in bad.output
    for args, message in ((["--allocator", "nativ", "--device", "cuda"], "choose one of: native, cudaMallocAsync"),
                          (["--allocator", "native"], "glibc, glibc-fixed"), (["--dtype", "fp8"], "unknown --dtype"),
                          (["--device", "tpu"], "bad device 'tpu'")):
        res = runner.invoke(app, ["plan", *args])
        lines = [l for l in res.output.splitlines() if l.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and message in lines[0], res.output


def test_a_plan_keeps_its_device_and_a_contradicting_one_is_refused_even_cpu(tmp_path):
    """`--device cpu` was taken for the default and ignored on a GPU plan (`--device mps` was refused)."""
    out = tmp_path / "gpu.toml"
    assert runner.invoke(app, ["plan", "--budget-min", "2", "--device", "cuda:0", "--dtype", "bf16", "--no-video",
                               "--out", str(out)]).exit_code == 0
    args = ["measure", "--sweep", str(out), "--rig", "r", "--out", str(tmp_path / "m.jsonl"), "--dry-run"]
    assert runner.invoke(app, args).exit_code == 0
    for device in ("cpu", "mps", "cuda:1"):
        res = runner.invoke(app, [*args, "--device", device])
        assert res.exit_code == 2 and f"is a plan for cuda:0: --device {device} contradicts it" in res.output
    assert runner.invoke(app, [*args, "--device", "cuda:0"]).exit_code == 0


def test_report_prices_the_campaigns_with_the_committed_plan_fit():
    from pathlib import Path

    root = Path(__file__).parent.parent
    res = runner.invoke(app, ["report", "--format", "markdown", "--plan-fit", str(root / "fits/plan/coefficients.json"),
                              "--plan-measurements", str(root / "measurements/plans")])
    assert res.exit_code == 0, res.output[-2000:]
    section = res.output[res.output.index("## A plan's fit"):]
    assert "| cogview4/decode/onednn/glibc-fixed/fp32/linux/untiled | 5 |" in section  # never in the plan: held out
    assert "Groups the full fit lists as exceptions" in section and "pooled over these groups" in section
    assert "tiny-kl" not in section
    body = section.split("\n", 1)[1]  # its title names the path as given
    assert body in (root / "fits/plan/REPORT.md").read_text()  # the committed page is what the data give
    # and the full report before it, the committed fits/REPORT.md below its title (its tables: held out by size,
    # left out by architecture with the reasons, the apps' rules), so a change to what they compute shows in CI
    full = res.output[:res.output.index("## A plan's fit")].rstrip()
    committed = (root / "fits/REPORT.md").read_text()
    assert full == committed[committed.index("## Pixel lines"):].rstrip()
    bad = runner.invoke(app, ["report", "--plan-fit", "x.json"])
    assert bad.exit_code == 2 and "--plan-fit and --plan-measurements go together" in bad.output


def test_a_plan_of_the_declared_defaults_names_this_machines_rig_to_measure(tmp_path):
    """`--rig none` takes the cost model's declared defaults; the measure command it suggests names this machine's
    rig (it suggested a rig named none and a file none.jsonl)."""
    from vaemem.measuring.child.rig import default_rig_name

    res = runner.invoke(app, ["plan", "--budget-min", "1", "--op", "decode", "--no-video", "--rig", "none",
                              "--out", str(tmp_path / "p.toml")])
    assert res.exit_code == 0, res.output
    text = res.output.replace("\n", "") + (tmp_path / "p.toml").read_text()
    assert "--rig none" not in text and f"--rig {default_rig_name('cpu')} --out" in text
