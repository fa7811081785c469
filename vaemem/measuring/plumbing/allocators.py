"""Allocator settings: a key of every point, set only in the child's environment before torch is imported.

Two kinds of variable, because they are read at different moments:

* ``startup`` (glibc's ``MALLOC_*``) is read when the process starts, so a forked child cannot change it: the fork
  launcher keeps one helper process per distinct startup environment.
* ``late`` (``PYTORCH_ALLOC_CONF`` and its deprecated aliases) is read when the device is first used, so it may be
  set in a forked child before it touches the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# PYTORCH_ALLOC_CONF is current; PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF are what older releases read.
TORCH_ALLOC_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
GLIBC_FIXED = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}

_TORCH_CONF = {
    "native": None,
    "cudaMallocAsync": "backend:cudaMallocAsync",
    "expandable": "expandable_segments:True",
    "expandable-off": "expandable_segments:False",
}
# What torch.cuda.memory.get_allocator_backend() must report for the setting to have taken.
EXPECTED_BACKEND = {"native": "native", "cudaMallocAsync": "cudaMallocAsync", "expandable": "native",
                    "expandable-off": "native"}
# ... and what the allocator's own settings (torch._C._accelerator_getAllocatorSettings()) must hold, which is the
# only place expandable and expandable-off differ.
EXPECTED_SETTING = {"expandable": "expandable_segments:True", "expandable-off": "expandable_segments:False"}


def allocator_mismatch(allocator: str, backend_seen: str | None, settings_seen: str | None) -> str | None:
    """Why the allocator torch reports is not the one ``allocator`` asked for, or None when it is (or when torch
    reports nothing to compare)."""
    expected = EXPECTED_BACKEND.get(allocator)
    if expected and backend_seen and backend_seen != expected:
        return f"allocator {allocator} asked, torch reports backend {backend_seen}"
    want = EXPECTED_SETTING.get(allocator)
    if want and settings_seen is not None and want not in settings_seen.replace(" ", ""):
        return f"allocator {allocator} asked, torch's allocator settings are {settings_seen!r}"
    return None


# The child's environment is built from this allow-list, never by removing known names: what a process needs to
# run and find its devices, caches and thread counts passes; nothing else does.
PASS_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
    "TMPDIR", "TMP", "TEMP", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "ROCM_PATH",
    "HIP_PATH", "HSA_OVERRIDE_GFX_VERSION", "XDG_CACHE_HOME", "TORCH_HOME", "HF_HOME",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG", "CUDA_MODULE_LOADING", "CUDA_DEVICE_ORDER", "ZE_AFFINITY_MASK",
    # Windows: a process does not start without these
    "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "APPDATA", "LOCALAPPDATA", "USERPROFILE",
    "PROGRAMDATA", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE",
})
PASS_PREFIXES = ("MIOPEN_", "LC_")
PASS_SUFFIXES = ("_VISIBLE_DEVICES",)
# Variables that pass and change memory: recorded in every run's rig.
RECORDED_NAMES = frozenset({"CUBLAS_WORKSPACE_CONFIG", "CUDA_MODULE_LOADING", "HSA_OVERRIDE_GFX_VERSION",
                            "OMP_NUM_THREADS", "MKL_NUM_THREADS"})
RECORDED_PREFIXES = ("MIOPEN_",)


def _is_allocator_var(name: str) -> bool:
    """Allocator settings of a host, which must never reach a point (recorded when seen in a child)."""
    return name in TORCH_ALLOC_VARS or name.startswith("MALLOC_") or name in ("GLIBC_TUNABLES", "LD_PRELOAD") \
        or (name.startswith("PYTORCH_") and name.endswith("ALLOC_CONF"))


def passes(name: str) -> bool:
    """Whether a host variable reaches a measuring child."""
    if _is_allocator_var(name):
        return False
    return name in PASS_NAMES or name.startswith(PASS_PREFIXES) or name.endswith(PASS_SUFFIXES)


def memory_env_seen(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that passed and change memory, as this process has them (recorded with every run)."""
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k in RECORDED_NAMES or k.startswith(RECORDED_PREFIXES)}


def startup_env(allocator: str) -> dict[str, str]:
    """Variables that must be in the environment when the interpreter starts."""
    return dict(GLIBC_FIXED) if allocator == "glibc-fixed" else {}


def late_env(allocator: str) -> dict[str, str]:
    """Variables that may be set after start, before the device is first used."""
    conf = _TORCH_CONF.get(allocator)
    return {var: conf for var in TORCH_ALLOC_VARS} if conf else {}


def clean_env(base: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``base``: a host's allocator settings (or anything undeclared) never reach a point."""
    return {k: v for k, v in base.items() if passes(k)}


def child_env(allocator: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of a spawned child for ``allocator``."""
    env = clean_env(os.environ if base is None else base)
    env.update(startup_env(allocator))
    env.update(late_env(allocator))
    return env


def seen_allocator_settings() -> dict[str, str]:
    """Allocator variables this process actually has, recorded with every run as 'allocator as seen'."""
    return {k: v for k, v in sorted(os.environ.items()) if _is_allocator_var(k)}
