"""When to decompose: one declared row per model family, decided from the HIP version, overridable by env.

Measured on a W7900 (prior-art.md): MiniMax-H3's encoder convs have no fast MIOpen solver on any HIP version, so
they are always decomposed on ROCm. Native conv3d became fast for the Wan VAE at HIP 7.2, where the decomposition
also corrupted some non-square Wan decodes, so Wan is decomposed only below 7.2. Off HIP (CUDA, CPU) native is
always right. ``VAEMEM_CONV3D=native|decomposed|auto`` forces a path for diagnosis.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from vaemem.errors import VaememError

ENV_VAR = "VAEMEM_CONV3D"
CHOICES = ("native", "decomposed", "auto")

# family -> decompose when hip_version < this (None: on every HIP version)
GATE: dict[str, tuple[int, int] | None] = {
    "minimax": None,
    "wan": (7, 2),
}


def parse_hip(version: str | None) -> tuple[int, int] | None:
    """'7.1.52802-26aae437f6' -> (7, 1); None or '' -> None (not a HIP build)."""
    if not version:
        return None
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise VaememError(f"cannot read HIP version {version!r}")
    return int(m.group(1)), int(m.group(2))


def env_override(env: Mapping[str, str] | None = None) -> str:
    """The path :data:`ENV_VAR` forces (native, decomposed) or auto, or a VaememError naming the choices."""
    override = (os.environ if env is None else env).get(ENV_VAR, "auto")
    if override not in CHOICES:
        raise VaememError(f"{ENV_VAR}={override!r}; choose one of: {', '.join(CHOICES)}")
    return override


def decide(family: str, hip_version: str | None, env: Mapping[str, str] | None = None) -> str:
    """'native' or 'decomposed' for a model ``family`` (minimax, wan, ...) on a torch with ``hip_version``."""
    override = env_override(env)
    if override != "auto":
        return override
    hip = parse_hip(hip_version)
    if hip is None or family not in GATE:
        return "native"
    below = GATE[family]
    return "decomposed" if below is None or hip < below else "native"
