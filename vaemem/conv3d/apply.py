"""The conv3d gate for apps: one call, or one context manager, that applies the declared gate to a model.

    from vaemem.conv3d.apply import apply_conv3d_gate, conv3d_gate
    done = apply_conv3d_gate(vae, torch)       # decomposes or not; done["path"], done["reason"], done["undo"]()
    with conv3d_gate(vae, torch) as done:       # the same, undone on exit
        frames = vae.decode(latents).sample

The family comes from the model's own causal conv3d modules (Wan's ``WanCausalConv3d``, MiniMax-H3's
``MiniMaxH3VideoCausalConv3d``), the HIP version from the ``torch`` given (``torch.version.hip``), and
``VAEMEM_CONV3D=native|decomposed|auto`` in the environment overrides, as :func:`vaemem.conv3d.gate.decide` says.
A model with no causal conv3d is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from vaemem.conv3d.gate import GATE, ENV_VAR, decide

# The class of a causal conv3d module -> the family of the gate's table.
FAMILY_OF_CLASS = {"WanCausalConv3d": "wan", "MiniMaxH3VideoCausalConv3d": "minimax"}


def family_of(model: Any) -> str | None:
    """The gate family of ``model`` (from its causal conv3d modules), or None if it has none."""
    for module in model.modules():
        family = FAMILY_OF_CLASS.get(type(module).__name__)
        if family is not None:
            return family
    return None


def apply_conv3d_gate(model: Any, torch: Any, env: Mapping[str, str] | None = None,
                      method: str = "taps") -> dict[str, Any]:
    """Decompose ``model``'s causal conv3d where the gate says so, for the ``torch`` it runs on. Returns ``{"path":
    native|decomposed, "family", "hip_version", "reason", "patched": modules changed, "undo": callable}``."""
    family = family_of(model)
    hip = getattr(torch.version, "hip", None)
    if family is None:
        return {"path": "native", "family": None, "hip_version": hip, "patched": 0, "undo": lambda: None,
                "reason": "no causal conv3d in this model"}
    path = decide(family, hip, env)
    import os

    forced = (os.environ if env is None else env).get(ENV_VAR, "auto") != "auto"
    if forced:
        reason = f"{ENV_VAR} forces {path}"
    elif hip is None:
        reason = "not a HIP build: native conv3d is right off ROCm"
    elif GATE.get(family) is None and family in GATE:
        reason = f"{family}: decomposed on every HIP version (no fast MIOpen solver)"
    else:
        below = GATE.get(family)
        reason = (f"{family} on HIP {hip}: " + (f"decomposed below HIP {below[0]}.{below[1]}" if below else
                                                  "no gate row"))
    if path == "native":
        return {"path": path, "family": family, "hip_version": hip, "patched": 0, "undo": lambda: None,
                "reason": reason}
    from vaemem.conv3d.patch import patch, unpatch

    patched = patch(model, method)  # type: ignore[arg-type]
    return {"path": path, "family": family, "hip_version": hip, "patched": len(patched),
            "undo": lambda: unpatch(patched), "reason": reason}


@contextmanager
def conv3d_gate(model: Any, torch: Any, env: Mapping[str, str] | None = None,
                method: str = "taps") -> Iterator[dict[str, Any]]:
    """:func:`apply_conv3d_gate` for the block, undone on exit; yields what it did."""
    done = apply_conv3d_gate(model, torch, env, method)
    try:
        yield done
    finally:
        done["undo"]()
