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


def _is_allocator_var(name: str) -> bool:
    return name in TORCH_ALLOC_VARS or name.startswith("MALLOC_")


def startup_env(allocator: str) -> dict[str, str]:
    """Variables that must be in the environment when the interpreter starts."""
    return dict(GLIBC_FIXED) if allocator == "glibc-fixed" else {}


def late_env(allocator: str) -> dict[str, str]:
    """Variables that may be set after start, before the device is first used."""
    conf = _TORCH_CONF.get(allocator)
    return {var: conf for var in TORCH_ALLOC_VARS} if conf else {}


def clean_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without any allocator variable: a host setting must never leak into a point."""
    return {k: v for k, v in base.items() if not _is_allocator_var(k)}


def child_env(allocator: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of a spawned child for ``allocator``."""
    env = clean_env(os.environ if base is None else base)
    env.update(startup_env(allocator))
    env.update(late_env(allocator))
    return env


def seen_allocator_settings() -> dict[str, str]:
    """Allocator variables this process actually has, recorded with every run as 'allocator as seen'."""
    return {k: v for k, v in sorted(os.environ.items()) if _is_allocator_var(k)}
