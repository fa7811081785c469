"""Campaign 15: architectures never measured on this CPU, priced by transfer before they were measured, against
what they needed, beside the transfer of the committed fit (the highest of the class line of the others and each
one's line, with the convolution transients: `vaemem.estimate.transfer_bytes`, `vaemem.estimate.conv_transient_bytes`).

    python benchmarks/transfer_check.py            # reads fits/campaign15-prices-before.json and the campaign

Per architecture, op and dtype: points, demand / dry run (min-max), the transfer priced before the campaign
(commit cfc132e; LTX-2.3's by the fit of the campaign's other points, with the weight copy) / demand and the committed fit's leave-one-architecture-out / demand (min / median / max; the
points of the calibration domain for the latter, as `vaemem report` judges it).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN = ROOT / "measurements" / "epyc-avx2-2core-campaign15.jsonl"
BEFORE = ROOT / "fits" / "campaign15-prices-before.json"


def _stats(rs: list[float]) -> str:
    under = sum(r < 1 for r in rs)
    text = f"{min(rs):.2f} / {statistics.median(rs):.2f} / {max(rs):.2f}"
    return f"**{under}/{len(rs)} under**: {text}" if under else text


def main() -> None:
    doc = json.loads(BEFORE.read_text())  # LTX-2.3's ("part3"): by the fit of the other points, with the copy
    before = {(p["model"], p["op"], p["dtype"], p["width"], p["height"], p["frames"]): p
              for p in doc["prices"] + doc["part3"]["prices"]}
    rows: dict[tuple, list] = {}
    for line in CAMPAIGN.read_text().splitlines():
        r = json.loads(line)
        if r["status"] != "ok":
            continue
        p = before[(r["model"], r["op"], r["dtype"], r["width"], r["height"], r["frames"])]
        rows.setdefault((r["model"], r["op"], r["dtype"]), []).append(
            (r["demand_bytes"] / p["dry_peak_bytes"], p["reserved_bytes"] / r["demand_bytes"]))
    vaemem = Path(sys.executable).with_name("vaemem")  # the CLI of the interpreter's environment
    report = json.loads(subprocess.run([str(vaemem), "report", "--format", "json"],
                                       capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    loao = {(r["architecture"], r["calibration"].split("/")[5], r["calibration"].split("/")[3]): r
            for r in report["structural"]["leave_one_architecture_out"]
            if r["calibration"].endswith("/untiled")}
    print("| architecture | op | dtype | points | demand / dry | transfer before measuring | transfer now (held out) |")
    print("|---|---|---|---|---|---|---|")
    for (model, op, dtype), rs in sorted(rows.items()):
        now = loao.get((model, op, dtype))
        now_text = "-" if now is None else (f"**{now['under']}/{now['n']} under**: " if now["under"] else "") + \
            f"{now['min']:.2f} / {now['median']:.2f} / {now['max']:.2f}"
        print(f"| {model} | {op} | {dtype} | {len(rs)} | {min(r[0] for r in rs):.2f}-{max(r[0] for r in rs):.2f} "
              f"| {_stats([r[1] for r in rs])} | {now_text} |")


if __name__ == "__main__":
    main()
