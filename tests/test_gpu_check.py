"""scripts/gpu_check.sh runs end to end on the CPU (its GPU run uses the same steps)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_gpu_check_script_on_cpu(tmp_path):
    out = tmp_path / "gc"
    env = {"PATH": "/usr/bin:/bin", "VAEMEM": str(Path(sys.executable).parent / "vaemem")}
    r = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), "--device", "cpu", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    probes = json.loads((out / "probes.json").read_text())
    assert 250 <= probes["read_mib"]["rss"] <= 270  # the 256 MiB known answer
    assert (out / "coefficients.json").exists() and (out / "REPORT.md").read_text().startswith("## Pixel lines")
    records = [json.loads(l) for l in (out / "conv3d.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"] and "versus_native" in records[1]
    assert "fork: demand MiB" in r.stdout and "spawn: demand MiB" in r.stdout
    plan = [json.loads(l) for l in (out / "plan" / "gpu-check-cpu-plan.jsonl").read_text().splitlines()]
    assert plan and all(p["status"] in ("ok", "dropped-late") for p in plan) and "== calibration plan" in r.stdout
    # the CPU's half-minute plan measures too few sizes for a line: fit refuses to write a file that prices nothing
    # (a GPU's two-minute plan fits), and the script goes on
    fitted = (out / "plan-coefficients.json").exists()
    assert fitted or ("plan fit refused" in r.stdout and "nothing to fit in" in r.stderr), r.stderr[-2000:]
    variants = [json.loads(l) for l in (out / "variants" / "gpu-check-cpu.jsonl").read_text().splitlines()]
    assert [(v["status"], v["attention"], v["slicing"], v["batch"]) for v in variants] == \
        [("ok", "math", False, 1), ("ok", "fused", False, 2), ("ok", "fused", True, 2)]
    assert "/b2/f1/t0/glibc-fixed/cpu/sliced: dry run" in r.stdout and "/math: dry run" in r.stdout
