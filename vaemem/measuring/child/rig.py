"""What the rig is: device, backend, conv backend, versions, OS. Read inside the worker (it has torch)."""

from __future__ import annotations

import os
import platform
import re
import socket
from typing import Any


def os_name() -> str:
    """linux, windows or darwin: the OS key of a measurement group."""
    return platform.system().lower()


def default_rig_name(device: str) -> str:
    """``<hostname>-<device type>``, lower-case and file-name safe, e.g. ``build7-cuda``."""
    host = re.sub(r"[^a-z0-9]+", "-", socket.gethostname().lower()).strip("-") or "rig"
    return f"{host}-{device.split(':')[0]}"


def rig_name(given: str | None, device: str) -> str:
    """The rig name of a sweep or plan: ``given``, else :func:`default_rig_name`. It names a file beside the
    measurements (``<rig>.jsonl``), so it is a file name: letters, digits, ``.``, ``_`` and ``-``, not starting
    with a dot. Raises VaememError otherwise."""
    from vaemem.errors import VaememError

    if given is None:
        return default_rig_name(device)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", given):
        raise VaememError(f"bad --rig {given!r}: a rig name is a file name of letters, digits, '.', '_' and '-' "
                          f"(e.g. build7-cuda), at most 100 characters")
    return given


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"MemTotal:\s+(\d+) kB", f.read())
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None


def backend_of(torch: Any, device: str, dtype: str = "fp32") -> tuple[str, str]:
    """(backend, conv backend): cuda/cudnn, rocm/miopen, cpu/onednn or cpu/aten, mps/mps, xpu/xpu. The conv
    backend is the estimator's rule (:func:`vaemem.estimate.conv_backend`), so that what a rig records is what an
    app's ``detect_platform`` finds. On the CPU it depends on the dtype: oneDNN runs bf16/fp16 only where the CPU
    has the instructions (AVX512-BF16, AMX, AVX2-VNNI-2), as ``onednn-amx`` where the CPU has AMX tiles (its
    kernels hold more); elsewhere torch falls back to its reference
    ``slow_conv2d`` (im2col + GEMM), with other memory and ~100x the time: a different key."""
    from vaemem.estimate import conv_backend

    conv = conv_backend(torch, device, dtype)
    kind = device.split(":")[0]
    return ("rocm" if conv == "miopen" else kind), conv


def rig_info(torch: Any, device: str, dtype: str = "fp32") -> dict[str, Any]:
    """Everything about the machine a measurement (in ``dtype``) depends on, for the record."""
    backend, conv = backend_of(torch, device, dtype)
    kind, _, idx = device.partition(":")
    info: dict[str, Any] = {
        "backend": backend,
        "conv_backend": conv,
        "os": os_name(),
        "os_release": platform.release(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "driver_version": None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if kind == "cuda":
        props = torch.cuda.get_device_properties(int(idx or 0))
        info["device_name"] = props.name
        info["total_memory_bytes"] = int(props.total_memory)
        try:  # the driver version is not in torch's public API; pynvml has it where installed
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            info["driver_version"] = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        if hasattr(torch.cuda, "memory") and hasattr(torch.cuda.memory, "get_allocator_backend"):
            info["allocator_backend_seen"] = torch.cuda.memory.get_allocator_backend()
        getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)  # the settings as torch parsed them
        if getter is not None:
            info["allocator_settings_seen"] = getter()
    elif kind == "cpu":
        info["device_name"] = _cpu_name()
        info["total_memory_bytes"] = _mem_total_bytes()
    else:
        info["device_name"] = kind
        info["total_memory_bytes"] = None
    return info
