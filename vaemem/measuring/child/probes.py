"""Memory probes, one per backend. Each reads a baseline before the op and the peak during it, in bytes.

Readings are named ``{baseline,peak,after}_{source}_bytes`` where source is one of

* ``driver``    device memory in use as the driver sees it (``mem_get_info``: total - free), sampled by a thread,
* ``reserved``  memory the torch caching allocator holds (``memory_reserved`` / ``max_memory_reserved``),
* ``allocated`` memory in live tensors (``memory_allocated`` / ``max_memory_allocated``),
* ``rss``       resident memory of the process on the CPU (``/proc/self/status`` VmRSS, peak VmHWM).

On the CPU the probe also keeps ``{baseline,after}_rss_{file,anon}_bytes`` (RssFile, RssAnon) where the kernel
reports them: the first call of an op faults in the code pages of the kernels it runs (file-backed, clean) and
builds one-time state (anonymous), 10-25 MiB that a warm second call does not add again
(``benchmarks/first_call_cost.py``). They have no peak, so they never enter the demand; they are the evidence of
how much of a fresh process's demand is code.

demand_bytes = max over sources of (peak - baseline). Every raw reading is kept in the record.
The torch module (``torch.cuda``, ``torch.xpu``) is passed in, so tests drive the GPU path with a fake.
"""

from __future__ import annotations

import re
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from vaemem.errors import VaememError


def demand_from(readings: dict[str, int]) -> tuple[int, dict[str, int]]:
    """(max delta, delta per source) from a readings dict: delta = peak - baseline for every source present."""
    deltas = {}
    for key, peak in readings.items():
        m = re.fullmatch(r"peak_(\w+)_bytes", key)
        if m and f"baseline_{m.group(1)}_bytes" in readings:
            deltas[m.group(1)] = peak - readings[f"baseline_{m.group(1)}_bytes"]
    if not deltas:
        raise ValueError("readings hold no peak/baseline pair")
    return max(deltas.values()), deltas


class Probe(ABC):
    """Start before the op (sync, reset peaks, read baseline), stop after it (sync, read peaks)."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> dict[str, int]: ...


class CpuProbe(Probe):
    """Linux resident memory. Writing 5 to clear_refs resets VmHWM to the current RSS, so the peak is the op's."""

    def __init__(self, proc: str | Path = "/proc/self") -> None:
        self.status = Path(proc) / "status"
        self.clear_refs = Path(proc) / "clear_refs"
        self.base: dict[str, int] = {}

    def _read(self) -> dict[str, int]:
        try:
            text = self.status.read_text()
        except OSError as e:
            raise VaememError(f"the CPU probe needs Linux /proc ({e})") from None
        return {k: int(v) * 1024 for k, v in re.findall(r"^(VmRSS|VmHWM|RssFile|RssAnon):\s+(\d+)\s+kB", text, re.M)}

    def start(self) -> None:
        try:
            self.clear_refs.write_text("5")
        except OSError as e:
            raise VaememError(f"cannot reset the peak resident memory through {self.clear_refs} ({e})") from None
        self.base = self._read()

    def stop(self) -> dict[str, int]:
        now = self._read()
        out = {"baseline_rss_bytes": self.base["VmRSS"], "peak_rss_bytes": max(now["VmHWM"], now["VmRSS"]),
               "after_rss_bytes": now["VmRSS"]}
        for field, name in (("RssFile", "rss_file"), ("RssAnon", "rss_anon")):  # Linux 4.5+; absent before
            if field in self.base and field in now:
                out[f"baseline_{name}_bytes"], out[f"after_{name}_bytes"] = self.base[field], now[field]
        return out


class _Sampler:
    """A background thread keeping the maximum of ``read()`` while the op runs (the driver has no peak counter)."""

    def __init__(self, read: Any, interval_s: float = 0.0005) -> None:
        self.read, self.interval_s = read, interval_s
        self.peak = read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            time.sleep(self.interval_s)

    def finish(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())
        return self.peak


class CudaProbe(Probe):
    """CUDA, ROCm (HIP reuses torch.cuda) and XPU: driver, reserved and allocated memory of one device."""

    def __init__(self, api: Any, index: int) -> None:
        self.api, self.index = api, index
        self.base: dict[str, int] = {}
        self.sampler: _Sampler | None = None

    def _driver_used(self) -> int:
        free, total = self.api.mem_get_info(self.index)
        return int(total - free)

    def start(self) -> None:
        self.api.synchronize(self.index)
        self.api.reset_peak_memory_stats(self.index)
        self.base = {
            "baseline_driver_bytes": self._driver_used(),
            "baseline_reserved_bytes": int(self.api.memory_reserved(self.index)),
            "baseline_allocated_bytes": int(self.api.memory_allocated(self.index)),
        }
        self.sampler = _Sampler(self._driver_used)

    def stop(self) -> dict[str, int]:
        self.api.synchronize(self.index)
        assert self.sampler is not None, "stop() before start()"
        peak_driver = self.sampler.finish()
        return {
            **self.base,
            "peak_driver_bytes": peak_driver,
            "after_driver_bytes": self._driver_used(),
            # With cudaMallocAsync torch reports max_memory_reserved as 0: the driver reading still covers it.
            "peak_reserved_bytes": max(int(self.api.max_memory_reserved(self.index)), self.base["baseline_reserved_bytes"]),
            "after_reserved_bytes": int(self.api.memory_reserved(self.index)),
            "peak_allocated_bytes": int(self.api.max_memory_allocated(self.index)),
            "after_allocated_bytes": int(self.api.memory_allocated(self.index)),
        }


class MpsProbe(Probe):
    """Apple MPS: torch exposes current allocated and driver-allocated memory but no peak, so both are sampled."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.base: dict[str, int] = {}
        self.samplers: dict[str, _Sampler] = {}

    def start(self) -> None:
        self.api.synchronize()
        reads = {"driver": self.api.driver_allocated_memory, "allocated": self.api.current_allocated_memory}
        self.base = {f"baseline_{k}_bytes": int(r()) for k, r in reads.items()}
        self.samplers = {k: _Sampler(lambda r=r: int(r())) for k, r in reads.items()}

    def stop(self) -> dict[str, int]:
        self.api.synchronize()
        out = dict(self.base)
        for k, s in self.samplers.items():
            out[f"peak_{k}_bytes"] = s.finish()
        return out


def make_probe(device: str) -> Probe:
    """The probe for ``device`` (cpu, cuda[:N], mps, xpu[:N]); a clear error where torch exposes no numbers."""
    import torch

    kind, _, idx = device.partition(":")
    index = int(idx or 0)
    if kind == "cpu":
        return CpuProbe()
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise VaememError("device cuda requested but torch.cuda is not available on this machine")
        return CudaProbe(torch.cuda, index)
    if kind == "xpu":
        api = getattr(torch, "xpu", None)
        needed = ("mem_get_info", "max_memory_reserved", "max_memory_allocated", "reset_peak_memory_stats")
        if api is None or not api.is_available() or not all(hasattr(api, n) for n in needed):
            raise VaememError("xpu memory probing is not supported by this torch build")
        return CudaProbe(api, index)
    if kind == "mps":
        api = getattr(torch, "mps", None)
        if api is None or not torch.backends.mps.is_available() or not hasattr(api, "driver_allocated_memory"):
            raise VaememError("mps memory probing is not supported by this torch build")
        return MpsProbe(api)
    raise VaememError(f"no memory probe for device {device!r}; supported: cpu, cuda, mps, xpu")
