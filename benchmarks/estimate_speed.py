"""Estimator cost: first import (in a fresh interpreter) and one call after warm-up.

    python benchmarks/estimate_speed.py

Goal: a few milliseconds per import and a few microseconds per call here. Prints figures; asserts nothing.
"""

from __future__ import annotations

import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).parent.parent


def main() -> None:
    code = "import time; t=time.perf_counter(); import vaemem.estimate; print(time.perf_counter()-t)"
    imports = sorted(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                          check=True).stdout) for _ in range(7))
    print(f"first import of vaemem.estimate: median {imports[3] * 1e3:.2f} ms over 7 fresh interpreters")
    from vaemem import estimate

    coef = ROOT / "fits" / "coefficients.json"
    kw = dict(dtype="fp32", backend="onednn", allocator="glibc-fixed", os="linux", coefficients=coef)
    first = timeit.timeit(lambda: estimate.working_memory_bytes("sdxl", "decode", 1024, 1024, **kw), number=1)
    n = 20000
    per = min(timeit.repeat(lambda: estimate.working_memory_bytes("sdxl", "decode", 1024, 1024, **kw),
                            number=n, repeat=5)) / n
    fb = min(timeit.repeat(lambda: estimate.working_memory_bytes("sdxl", "decode", 1024, 1024, dtype="fp16",
                                                                 backend="cudnn", allocator="native", os="linux",
                                                                 coefficients=coef), number=n, repeat=5)) / n
    print(f"first call (reads the file): {first * 1e3:.2f} ms; then exact group {per * 1e6:.2f} us/call, "
          f"fallback {fb * 1e6:.2f} us/call")


if __name__ == "__main__":
    main()
