"""``make run``: the main job on an embedded default, in a few minutes on a CPU.

Measures a small real grid (SD1.5's VAE, decode and encode at three sizes, plus the tiny test VAE) in fresh
processes, fits the coefficients, prints them and the accuracy report, and writes one plot, all under one
scratch directory (default ``scratch/``). The committed data in ``measurements/`` is not touched.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vaemem.cli import app

GRID = [
    ["-m", "sd15", "--op", "decode", "--op", "encode", "--dtype", "fp32", "--res", "128", "--res", "192x128",
     "--res", "256", "--allocator", "glibc-fixed"],
    ["-m", "tiny-kl", "--op", "decode", "--op", "encode", "--dtype", "fp32", "--res", "128", "--res", "256",
     "--res", "384x256", "--allocator", "glibc-fixed"],
]


def _run(args: list[str]) -> None:
    app(args, standalone_mode=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("scratch"))
    out = ap.parse_args().out
    meas, coef, plots = out / "measurements", out / "coefficients.json", out / "plots"
    for grid in GRID:
        _run(["measure", *grid, "--runs", "2", "--rig", "demo", "--out", str(meas / "demo.jsonl")])
    _run(["fit", "--measurements", str(meas), "--out", str(coef), "--exceptions", "none"])
    _run(["report", "--measurements", str(meas), "--coefficients", str(coef)])
    _run(["plot", "--measurements", str(meas), "--coefficients", str(coef), "--out", str(plots),
          "--group", "sd15/decode/onednn/glibc-fixed/fp32/linux/untiled"])
    _run(["estimate", "-m", "sdxl", "--op", "decode", "--res", "1024", "--dtype", "fp32", "--backend", "onednn",
          "--allocator", "glibc-fixed", "--os", "linux", "--coefficients", str(coef)])
    print(f"\nmeasurements: {meas}/demo.jsonl\ncoefficients: {coef}\nplot:         {plots}/\n"
          "re-running resumes (finished runs are skipped); `make clean` removes the scratch directory")


if __name__ == "__main__":
    main()
