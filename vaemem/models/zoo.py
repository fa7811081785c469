"""The model zoo: real VAE architectures from their published configs, plus tiny ones for tests.

Pure metadata: nothing here imports torch, so the CLI and the point validator stay light.
Building a model is in :mod:`vaemem.models.build`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from vaemem.errors import VaememError

# Config keys that change how latents are scaled or how a pipeline tiles by default, not the layers
# that run: two configs equal apart from these are the same architecture and use the same memory.
NON_ARCHITECTURAL_KEYS = frozenset(
    {"scaling_factor", "shift_factor", "latents_mean", "latents_std", "force_upcast", "sample_size", "_class_name"}
)

# Tiny configs of the same classes: same code paths, a few thousand parameters, well under a second a point.
TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny-kl": {
        "_class_name": "AutoencoderKL",
        "act_fn": "silu",
        "block_out_channels": [16, 32, 32],
        "down_block_types": ["DownEncoderBlock2D"] * 3,
        "up_block_types": ["UpDecoderBlock2D"] * 3,
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 4,
        "layers_per_block": 1,
        "norm_num_groups": 8,
        "sample_size": 64,
    },
    "tiny-wan": {
        "_class_name": "AutoencoderKLWan",
        "base_dim": 8,
        "z_dim": 4,
        "dim_mult": [1, 2, 2, 2],
        "num_res_blocks": 1,
        "attn_scales": [],
        "temperal_downsample": [False, True, True],
        "dropout": 0.0,
        "latents_mean": [0.0] * 4,
        "latents_std": [1.0] * 4,
    },
    "tiny-minimax-h3": {
        "_class_name": "AutoencoderKLMiniMaxH3",
        "block_out_channels": [8, 16, 16, 16],
        "spatial_downsample_factors": [2, 2, 1, 1],
        "temporal_downsample_factors": [2, 2, 1, 1],
        "layers_per_block": 1,
        "norm_num_groups": 8,
        "latent_channels": 4,
        "decoder_num_layers": 1,
        "decoder_num_attention_heads": 2,
        "decoder_attention_head_dim": 8,
        "decoder_num_register_tokens": 1,
        "clip_length": 5,
        "token_drop": 1,
        "latents_mean": [0.0] * 4,
        "latents_std": [1.0] * 4,
    },
}

# Defaults of the diffusers constructors for the keys where the published configs differ in spelling only
# (flux1 states mid_block_add_attention=True, sd3 leaves it out). A test checks them against diffusers itself.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "AutoencoderKL": {"mid_block_add_attention": True, "use_quant_conv": True, "use_post_quant_conv": True},
}

# Parameter counts of the whole model (both halves), so the fit and the estimator need no torch. A test rebuilds
# every model on the meta device and checks these numbers; the real ones match prior-art.md.
PARAMETERS: dict[str, int] = {
    "cogview4": 406_100_643, "flux1": 83_819_683, "flux2": 84_046_115, "minimax-h3": 2_603_868_984,
    "sd15": 83_653_863, "sd3": 83_819_683, "sdxl": 83_653_863, "wan21": 126_892_531, "wan22": 704_688_668,
    "tiny-kl": 242_327, "tiny-wan": 203_295, "tiny-minimax-h3": 62_604,
}

FAMILIES = {"AutoencoderKL": "kl", "AutoencoderKLFlux2": "kl", "AutoencoderKLWan": "wan", "AutoencoderKLMiniMaxH3": "minimax"}


@dataclass(frozen=True)
class ModelSpec:
    """One named architecture: its diffusers class, config and the geometry a point must respect."""

    name: str
    class_name: str
    config: dict[str, Any]
    latent_channels: int
    spatial_factor: int  # pixels per latent pixel along each side
    temporal_factor: int | None  # frames per latent frame (causal: 1 + factor*k frames), None for images
    ops: tuple[str, ...]  # which of decode / encode vaemem can run
    architecture: str  # name of the first zoo entry with identical layers (sd15 for sdxl)
    tiny: bool

    @property
    def family(self) -> str:
        return FAMILIES[self.class_name]

    @property
    def is_video(self) -> bool:
        return self.temporal_factor is not None


def _geometry(cfg: dict[str, Any]) -> tuple[int, int, int | None, tuple[str, ...]]:
    """(latent channels, spatial factor, temporal factor, ops) of a config, as the diffusers class computes them."""
    cls = cfg["_class_name"]
    if cls in ("AutoencoderKL", "AutoencoderKLFlux2"):
        return cfg["latent_channels"], 2 ** (len(cfg["block_out_channels"]) - 1), None, ("decode", "encode")
    if cls == "AutoencoderKLWan":
        patch = cfg.get("patch_size") or 1
        spatial = 2 ** len(cfg.get("temperal_downsample", [False, True, True])) * patch
        temporal = 2 ** sum(bool(t) for t in cfg.get("temperal_downsample", [False, True, True]))
        return cfg.get("z_dim", 16), spatial, temporal, ("decode", "encode")
    if cls == "AutoencoderKLMiniMaxH3":
        # The decoder is a 2.4B-parameter ViT, not a convolutional VAE: vaemem measures the causal conv encoder.
        spatial = math.prod(cfg["spatial_downsample_factors"])
        temporal = math.prod(cfg["temporal_downsample_factors"])
        return cfg["latent_channels"], spatial, temporal, ("encode",)
    raise VaememError(f"unsupported diffusers class {cls!r}; supported: {', '.join(sorted(FAMILIES))}")


def _arch_digest(cfg: dict[str, Any]) -> str:
    full = {**CLASS_DEFAULTS.get(cfg["_class_name"], {}), **cfg}
    kept = {k: v for k, v in full.items() if k not in NON_ARCHITECTURAL_KEYS}
    kept["_class"] = cfg["_class_name"]
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


@lru_cache(maxsize=1)
def registry() -> dict[str, ModelSpec]:
    """Every known model by CLI name: real configs sorted by name, then the tiny ones.

    A model's ``architecture`` is the first name in that order with identical layers (sdxl -> sd15, sd3 -> flux1).
    """
    text = resources.files("vaemem.models").joinpath("vae_configs.json").read_text()
    real = json.loads(text)
    out: dict[str, ModelSpec] = {}
    first_by_digest: dict[str, str] = {}
    for tiny, configs in ((False, real), (True, TINY_CONFIGS)):
        for name in sorted(configs):
            cfg = configs[name]
            latent, spatial, temporal, ops = _geometry(cfg)
            arch = first_by_digest.setdefault(_arch_digest(cfg), name)
            out[name] = ModelSpec(name, cfg["_class_name"], cfg, latent, spatial, temporal, ops, arch, tiny)
    return out


def get_spec(name: str) -> ModelSpec:
    """The spec of ``name``, or a VaememError naming the valid choices."""
    reg = registry()
    if name not in reg:
        raise VaememError(f"unknown model {name!r}; choose one of: {', '.join(reg)}")
    return reg[name]
