"""Estimator cost: first import (in fresh interpreters) and one call per pricing path, for distinct requests.

    python benchmarks/estimate_speed.py

Goal (issue 12): at most 2 us per call on every path once the file is loaded, import at most 5 ms (CogVideoX and
Mochi add their split convolutions, up to 32 layers a knot, evaluated layer by layer). Beside them,
in the same run, the legacy rule as an app writes it (one Python expression), for scale. Prints figures; asserts
nothing (timings of this shared machine are noisy: compare the rows of one run).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

N_REQUESTS = 2000  # distinct sizes per path
REPEAT = 7


def _import_ms(env: dict[str, str]) -> float:
    code = "import time; t=time.perf_counter(); import vaemem.estimate; print(time.perf_counter()-t)"
    runs = sorted(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                       check=True).stdout) for _ in range(REPEAT))
    return runs[REPEAT // 2] * 1e3


def _per_call_us(fn, requests) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        t = time.perf_counter()
        for w, h, f in requests:
            fn(w, h, f)
        best = min(best, time.perf_counter() - t)
    return best / len(requests) * 1e6


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    _import_ms(env)  # writes the bytecode, as pip does when it installs a wheel
    print(f"import vaemem.estimate: median {_import_ms(env):.2f} ms over {REPEAT} fresh interpreters "
          f"(bytecode compiled; {_import_ms({**env, 'PYTHONDONTWRITEBYTECODE': '1', 'PYTHONPYCACHEPREFIX': '/nonexistent'}):.2f} ms when it must compile)")
    from vaemem import estimate as est

    t = time.perf_counter()
    est.load(None)
    print(f"load and validate the packaged coefficient file: {(time.perf_counter() - t) * 1e3:.2f} ms (once)")
    img = [(64 * (4 + i % 29), 64 * (4 + i // 29 % 29), 1) for i in range(N_REQUESTS)]
    big = [(64 * (5 + i % 29), 64 * (5 + i // 29 % 29), 1) for i in range(N_REQUESTS)]  # larger than a 256 px tile
    vid = [(64 * (2 + i % 13), 64 * (2 + i // 13 % 13), 1 + 4 * (i % 21)) for i in range(N_REQUESTS)]
    vid8 = [(64 * (2 + i % 14), 64 * (2 + i // 14 % 11), 1 + 8 * (1 + i % 10)) for i in range(N_REQUESTS)]  # 1 + 8k
    paths = [
        ("measured (calibration)", img, lambda w, h, f: est.working_memory_bytes(
            "sd15", "decode", w, h, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")),
        ("transfer (class line)", vid, lambda w, h, f: est.working_memory_bytes(
            "hunyuanvideo-1.5", "decode", w, h, frames=f, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")),
        ("measured, tiled (SD1.5, 256 px tiles)", big, lambda w, h, f: est.working_memory_bytes(
            "sd15", "decode", w, h, tile=256, dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux")),
        ("measured, tiled clip (Wan 2.1, 5 frames)", big, lambda w, h, f: est.working_memory_bytes(
            "wan21", "decode", w, h, frames=5, tile=256, dtype="fp32", backend="onednn", allocator="glibc-fixed",
            os="linux")),
        ("fallback (legacy x dry runs)", img, lambda w, h, f: est.working_memory_bytes(
            "cogview4", "decode", w, h, dtype="bf16", backend="cudnn", allocator="native", os="linux")),
        ("fallback, video clip", vid, lambda w, h, f: est.working_memory_bytes(
            "wan21", "decode", w, h, frames=f, dtype="bf16", backend="cudnn", allocator="native", os="linux")),
        ("split convolutions (CogVideoX clip)", vid8, lambda w, h, f: est.working_memory_bytes(
            "cogvideox", "decode", w, h, frames=f, dtype="bf16", backend="cudnn", allocator="native", os="linux")),
        ("legacy rule as an app writes it", img, lambda w, h, f: w * h * 2 * 2200 + (0 if f else 262144000)),
    ]
    for name, requests, fn in paths:
        fn(*requests[0])  # the first call of a key resolves its plan
        print(f"  {name:40s} {_per_call_us(fn, requests):6.2f} us/call over {len(requests)} distinct requests")


if __name__ == "__main__":
    main()
