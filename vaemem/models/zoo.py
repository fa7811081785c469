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
    "tiny-cogvideox": {
        "_class_name": "AutoencoderKLCogVideoX", "block_out_channels": [8, 16, 16],
        "down_block_types": ["CogVideoXDownBlock3D"] * 3, "up_block_types": ["CogVideoXUpBlock3D"] * 3,
        "latent_channels": 4, "layers_per_block": 1, "norm_num_groups": 4, "temporal_compression_ratio": 4,
        "use_quant_conv": False, "use_post_quant_conv": False,
    },
    "tiny-dcae": {
        "_class_name": "AutoencoderDC", "attention_head_dim": 8, "latent_channels": 4,
        "encoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock"],
        "decoder_block_types": ["ResBlock", "ResBlock", "EfficientViTBlock"],
        "encoder_block_out_channels": [8, 16, 32], "decoder_block_out_channels": [8, 16, 32],
        "encoder_layers_per_block": [1, 1, 1], "decoder_layers_per_block": [1, 1, 1],
        "encoder_qkv_multiscales": [[], [], [5]], "decoder_qkv_multiscales": [[], [], [5]],
        "downsample_block_type": "Conv", "upsample_block_type": "interpolate", "decoder_norm_types": "rms_norm",
        "decoder_act_fns": "silu",
    },
    "tiny-hunyuanimage": {  # the class's GroupNorms have 32 groups: channels are multiples of 32
        "_class_name": "AutoencoderKLHunyuanImage", "in_channels": 3, "out_channels": 3,
        "block_out_channels": [32, 32, 64], "latent_channels": 4, "layers_per_block": 1,
        "spatial_compression_ratio": 4, "sample_size": 64, "downsample_match_channel": True,
        "upsample_match_channel": True,
    },
    "tiny-hunyuanvideo": {
        "_class_name": "AutoencoderKLHunyuanVideo", "block_out_channels": [8, 16, 16],
        "down_block_types": ["HunyuanVideoDownBlock3D"] * 3, "up_block_types": ["HunyuanVideoUpBlock3D"] * 3,
        "latent_channels": 4, "layers_per_block": 1, "norm_num_groups": 4, "spatial_compression_ratio": 4,
        "temporal_compression_ratio": 4, "mid_block_add_attention": True,
    },
    "tiny-hunyuanvideo-1.5": {
        "_class_name": "AutoencoderKLHunyuanVideo15", "block_out_channels": [8, 16, 16], "latent_channels": 4,
        "layers_per_block": 1, "spatial_compression_ratio": 4, "temporal_compression_ratio": 4,
        "downsample_match_channel": True, "upsample_match_channel": True,
    },
    "tiny-ltx-video": {  # the 0.9.5 layout: LTXVideo095 down blocks, timestep-conditioned decoder
        "_class_name": "AutoencoderKLLTXVideo", "block_out_channels": [8, 16, 16, 32, 32],
        "down_block_types": ["LTXVideo095DownBlock3D"] * 4,
        "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
        "decoder_block_out_channels": [8, 16, 32], "layers_per_block": [1, 1, 1, 1, 1],
        "decoder_layers_per_block": [1, 1, 1, 1], "spatio_temporal_scaling": [True, True, True, True],
        "decoder_spatio_temporal_scaling": [True, True, True], "decoder_inject_noise": [False] * 4,
        "upsample_residual": [True] * 3, "upsample_factor": [2] * 3, "latent_channels": 4, "patch_size": 1,
        "patch_size_t": 1, "timestep_conditioning": True, "spatial_compression_ratio": 8,
        "temporal_compression_ratio": 8, "encoder_causal": True, "decoder_causal": False,
    },
    "tiny-ltx-2": {
        "_class_name": "AutoencoderKLLTX2Video", "block_out_channels": [8, 16, 16, 16],
        "decoder_block_out_channels": [8, 16, 32], "layers_per_block": [1, 1, 1, 1, 1],
        "decoder_layers_per_block": [1, 1, 1, 1], "spatio_temporal_scaling": [True, True, True, True],
        "decoder_spatio_temporal_scaling": [True, True, True], "decoder_inject_noise": [False] * 4,
        "down_block_types": ["LTX2VideoDownBlock3D"] * 4,
        "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
        "upsample_residual": [True] * 3, "upsample_factor": [2] * 3, "latent_channels": 4, "patch_size": 1,
        "patch_size_t": 1, "spatial_compression_ratio": 8, "temporal_compression_ratio": 8,
        "encoder_causal": True, "decoder_causal": False,
    },
    "tiny-mochi": {  # the class's GroupNorms have 32 groups
        "_class_name": "AutoencoderKLMochi", "encoder_block_out_channels": [32, 32, 32, 32],
        "decoder_block_out_channels": [32, 32, 32, 32], "layers_per_block": [1, 1, 1, 1, 1], "latent_channels": 4,
        "add_attention_block": [False, False, False, False, True], "temporal_expansions": [1, 2, 3],
        "spatial_expansions": [2, 2, 2],
    },
    "tiny-qwen-image": {
        "_class_name": "AutoencoderKLQwenImage", "base_dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2],
        "num_res_blocks": 1, "attn_scales": [], "temperal_downsample": [False, True, True], "dropout": 0.0,
        "latents_mean": [0.0] * 4, "latents_std": [1.0] * 4,
    },
}

# Defaults of the diffusers constructors for the keys where the published configs differ in spelling only
# (flux1 states mid_block_add_attention=True, sd3 leaves it out), and for the geometry keys some published configs
# leave to the class (LTX-Video 0.9.0 states no compression ratios). A test checks them against diffusers itself.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "AutoencoderKL": {"mid_block_add_attention": True, "use_quant_conv": True, "use_post_quant_conv": True},
    "AutoencoderKLLTXVideo": {"spatial_compression_ratio": None, "temporal_compression_ratio": None, "patch_size": 4,
                              "patch_size_t": 1, "spatio_temporal_scaling": (True, True, True, False)},
    "AutoencoderKLLTX2Video": {"spatial_compression_ratio": None, "temporal_compression_ratio": None, "patch_size": 4,
                               "patch_size_t": 1, "spatio_temporal_scaling": (True, True, True, True)},
    "AutoencoderKLHunyuanVideo": {"spatial_compression_ratio": 8, "temporal_compression_ratio": 4},
    "AutoencoderKLHunyuanVideo15": {"spatial_compression_ratio": 16, "temporal_compression_ratio": 4},
    "AutoencoderKLCogVideoX": {"temporal_compression_ratio": 4},
}

# Parameter counts of the whole model (both halves), so the fit and the estimator need no torch. A test rebuilds
# every model on the meta device and checks these numbers; the first nine match prior-art.md.
PARAMETERS: dict[str, int] = {
    "cogview4": 406_100_643, "flux1": 83_819_683, "flux2": 84_046_115, "minimax-h3": 2_603_868_984,
    "sd15": 83_653_863, "sd3": 83_819_683, "sdxl": 83_653_863, "wan21": 126_892_531, "wan22": 704_688_668,
    "cogvideox": 215_583_907, "hunyuanimage-2.1": 405_575_491, "hunyuanvideo": 246_478_803,
    "hunyuanvideo-1.5": 1_260_634_115, "ltx-2": 1_222_479_601, "ltx-2.3": 726_105_969, "ltx-video": 419_193_649,
    "ltx-video-0.9.5": 1_246_913_522, "mochi": 459_748_611, "qwen-image": 126_892_531, "sana-dc-ae": 312_250_275,
    "tiny-kl": 242_327, "tiny-wan": 203_295, "tiny-minimax-h3": 62_604, "tiny-cogvideox": 164_771,
    "tiny-dcae": 73_095, "tiny-hunyuanimage": 790_787, "tiny-hunyuanvideo": 179_679,
    "tiny-hunyuanvideo-1.5": 242_527, "tiny-ltx-2": 274_842, "tiny-ltx-video": 465_217, "tiny-mochi": 610_179,
    "tiny-qwen-image": 203_295,
}

# Parameters of the half each op runs (decoder + post_quant_conv; encoder + quant_conv), from meta builds: what an
# app casts when it casts only the half it runs (the cast term's cast='op').
OP_PARAMETERS: dict[str, dict[str, int]] = {
    "cogvideox": {"decode": 123_368_451, "encode": 92_215_456}, "cogview4": {"decode": 233_656_835, "encode": 172_443_808},
    "flux1": {"decode": 49_545_475, "encode": 34_274_208}, "flux2": {"decode": 49_620_259, "encode": 34_425_856},
    "hunyuanimage-2.1": {"decode": 260_567_939, "encode": 145_007_552}, "hunyuanvideo": {"decode": 146_136_339, "encode": 100_342_464},
    "hunyuanvideo-1.5": {"decode": 871_309_571, "encode": 389_324_544}, "ltx-2": {"decode": 528_380_720, "encode": 694_098_881},
    "ltx-2.3": {"decode": 407_169_072, "encode": 318_936_897}, "ltx-video": {"decode": 238_789_296, "encode": 180_404_353},
    "ltx-video-0.9.5": {"decode": 552_814_641, "encode": 694_098_881}, "minimax-h3": {"decode": 2_423_531_096, "encode": 180_337_888},
    "mochi": {"decode": 362_526_595, "encode": 97_222_016}, "qwen-image": {"decode": 73_295_603, "encode": 53_596_928},
    "sana-dc-ae": {"decode": 159_223_171, "encode": 153_027_104}, "sd15": {"decode": 49_490_199, "encode": 34_163_664},
    "sd3": {"decode": 49_545_475, "encode": 34_274_208}, "sdxl": {"decode": 49_490_199, "encode": 34_163_664},
    "wan21": {"decode": 73_295_603, "encode": 53_596_928}, "wan22": {"decode": 555_051_580, "encode": 149_637_088},
    "tiny-cogvideox": {"decode": 101_859, "encode": 62_912}, "tiny-dcae": {"decode": 36_555, "encode": 36_540},
    "tiny-hunyuanimage": {"decode": 501_859, "encode": 288_928}, "tiny-hunyuanvideo": {"decode": 109_815, "encode": 69_864},
    "tiny-hunyuanvideo-1.5": {"decode": 176_947, "encode": 65_580}, "tiny-kl": {"decode": 148_471, "encode": 93_856},
    "tiny-ltx-2": {"decode": 222_751, "encode": 52_091}, "tiny-ltx-video": {"decode": 308_808, "encode": 156_409},
    "tiny-minimax-h3": {"decode": 7_780, "encode": 54_824}, "tiny-mochi": {"decode": 303_043, "encode": 307_136},
    "tiny-qwen-image": {"decode": 121_583, "encode": 81_712}, "tiny-wan": {"decode": 121_583, "encode": 81_712},
}


# The largest convolution weight (elements) of the half each op runs, from meta builds: where oneDNN runs a
# convolution it holds a reordered copy of the weight for the length of the call, which no dry run sees (on this
# CPU LTX-2's 2048 -> 2048 x 3x3x3 convolution, 432 MiB in fp32, sets a 452-460 MiB demand at clips whose dry
# runs are 6-102 MiB: campaign 15).
# The transfer of a class line on such a backend adds the architecture's own copy (``vaemem.estimate``).
LARGEST_CONV_PARAMETERS: dict[str, dict[str, int]] = {
    "cogvideox": {"decode": 7_077_888, "encode": 7_077_888}, "cogview4": {"decode": 9_437_184, "encode": 9_437_184},
    "flux1": {"decode": 2_359_296, "encode": 2_359_296}, "flux2": {"decode": 2_359_296, "encode": 2_359_296},
    "hunyuanimage-2.1": {"decode": 37_748_736, "encode": 9_437_184},
    "hunyuanvideo": {"decode": 7_077_888, "encode": 7_077_888},
    "hunyuanvideo-1.5": {"decode": 226_492_416, "encode": 28_311_552},
    "ltx-2": {"decode": 113_246_208, "encode": 113_246_208}, "ltx-2.3": {"decode": 113_246_208, "encode": 28_311_552},
    "ltx-video": {"decode": 56_623_104, "encode": 7_077_888},
    "ltx-video-0.9.5": {"decode": 113_246_208, "encode": 113_246_208},
    "minimax-h3": {"decode": 576, "encode": 28_311_552}, "mochi": {"decode": 15_925_248, "encode": 3_981_312},
    "qwen-image": {"decode": 3_981_312, "encode": 3_981_312}, "sana-dc-ae": {"decode": 9_437_184, "encode": 9_437_184},
    "sd15": {"decode": 2_359_296, "encode": 2_359_296}, "sd3": {"decode": 2_359_296, "encode": 2_359_296},
    "sdxl": {"decode": 2_359_296, "encode": 2_359_296}, "wan21": {"decode": 3_981_312, "encode": 3_981_312},
    "wan22": {"decode": 28_311_552, "encode": 11_059_200},
    "tiny-cogvideox": {"decode": 6_912, "encode": 6_912}, "tiny-dcae": {"decode": 8_192, "encode": 8_192},
    "tiny-hunyuanimage": {"decode": 73_728, "encode": 36_864}, "tiny-hunyuanvideo": {"decode": 6_912, "encode": 6_912},
    "tiny-hunyuanvideo-1.5": {"decode": 55_296, "encode": 6_912}, "tiny-kl": {"decode": 9_216, "encode": 9_216},
    "tiny-ltx-2": {"decode": 110_592, "encode": 6_912}, "tiny-ltx-video": {"decode": 110_592, "encode": 27_648},
    "tiny-minimax-h3": {"decode": 16, "encode": 6_912}, "tiny-mochi": {"decode": 27_648, "encode": 27_648},
    "tiny-qwen-image": {"decode": 6_912, "encode": 6_912}, "tiny-wan": {"decode": 6_912, "encode": 6_912},
}


# Ops whose half holds an attention module (``vaemem.tracing.counter.is_attention``), from meta builds: where the
# math attention path (no fused SDPA kernel) can change the peak, so the dry runs trace it. A test checks the
# table against the builds. DC-AE's attention is linear (no score matrix): listed, and its math structure is flat.
_BOTH = ("decode", "encode")
ATTENTION_OPS: dict[str, tuple[str, ...]] = {
    "cogvideox": (), "cogview4": (), "flux1": _BOTH, "flux2": _BOTH, "hunyuanimage-2.1": _BOTH,
    "hunyuanvideo": _BOTH, "hunyuanvideo-1.5": _BOTH, "ltx-2": (), "ltx-2.3": (), "ltx-video": (),
    "ltx-video-0.9.5": (), "minimax-h3": (), "mochi": ("encode",), "qwen-image": _BOTH, "sana-dc-ae": _BOTH,
    "sd15": _BOTH, "sd3": _BOTH, "sdxl": _BOTH, "wan21": _BOTH, "wan22": _BOTH,
    "tiny-cogvideox": (), "tiny-dcae": _BOTH, "tiny-hunyuanimage": _BOTH, "tiny-hunyuanvideo": _BOTH,
    "tiny-hunyuanvideo-1.5": _BOTH, "tiny-kl": _BOTH, "tiny-ltx-2": (), "tiny-ltx-video": (),
    "tiny-minimax-h3": (), "tiny-mochi": ("encode",), "tiny-qwen-image": _BOTH, "tiny-wan": _BOTH,
}

@dataclass(frozen=True)
class ClassInfo:
    """What vaemem must know of one diffusers VAE class to run it and to judge a point.

    ``kernel`` is the declared kernel class (``conv2d`` image convolutions, ``conv3d`` causal or full 3D video
    convolutions): calibrations pool only architectures of one kernel class. ``five_d`` classes take
    (batch, channels, frames, height, width) even when they are image models (Qwen-Image: one frame).
    """

    family: str
    kernel: str
    five_d: bool
    video: bool
    refused_ops: tuple[tuple[str, str], ...] = ()  # (op, reason the class cannot run it in vaemem)
    refused_tiled_ops: tuple[tuple[str, str], ...] = ()  # (op, reason its tiled path cannot run)
    refused_batch_ops: tuple[tuple[str, str], ...] = ()  # (op, reason it cannot run a batch of more than one)
    frame_step: int | None = None  # clip lengths are 1 + frame_step*k where that differs from the temporal factor
    # copies of the output its tiled decode holds while it concatenates the rows and the output (the dry runs show
    # two for the image classes; Wan's tiled_decode also clamps the result: three)
    tiled_output_copies: int = 2
    # its 3D convolutions split an input of more than 2^30 elements into chunks along time (diffusers'
    # CogVideoXSafeConv3d): a step in the peak that the dry runs record (vaemem.tracing.trace.SPLIT_CONVS)
    split_convs: bool = False
    # (frames, stride) of its temporal windows, diffusers' defaults (tile_sample_min_num_frames and
    # tile_sample_stride_num_frames, on by default: use_framewise_*): a clip of more than ``frames`` frames runs in
    # windows of frames + 1, ``stride`` apart, each tiled in space when tiling is on; None: the clip runs whole
    temporal_windows: tuple[int, int] | None = None
    # its attention builds a (tokens x tokens) causal mask whatever the kernel, so a tile's working set has a term
    # quadratic in the tile's area (HunyuanVideo: a 512 px tile of a 17-frame window is 20480 tokens; the mask
    # leads past about 1100 px tiles). HunyuanVideo 1.5's mask too, but at its 16x latent it never leads at sizes
    # apps run (512 px tiles, 241 frames: about 7 of 107 GiB), and its tiled structure is exact without the term.
    causal_mask: bool = False
    # each tile of its tiled op runs the untiled op on the tile's whole clip, so its tiled structure prices the
    # tile at work by the untiled structure at the tile's size (``tile_working_set``): Mochi, whose split
    # convolutions make that a step in the tile's size and frames the per-area basis cannot follow (0.45-1.29x)
    tiles_run_untiled_op: bool = False
    # its encode runs whole clips of the config's ``clip_length`` frames one after another (a clip of more than one
    # frame padded up to whole clips by repeating its last frame), each tiled in space with whole tiles, the
    # overlaps widened to fit (MiniMax-H3's ``_encode`` and ``_split_tiles``; tile_stride_rule "spread")
    encodes_in_clips: bool = False


_HV15_BATCH = ("diffusers 0.42's AutoencoderKLHunyuanVideo15 builds its attention mask for one sample: a batch of "
               "two fails (output with shape [2, 1, N, N] doesn't match the broadcast shape [2, 2, N, N])")
CLASSES: dict[str, ClassInfo] = {
    "AutoencoderKL": ClassInfo("kl", "conv2d", False, False),
    "AutoencoderKLFlux2": ClassInfo("kl", "conv2d", False, False),
    "AutoencoderKLHunyuanImage": ClassInfo("hunyuanimage", "conv2d", False, False, refused_tiled_ops=(
        ("encode", "diffusers 0.42's AutoencoderKLHunyuanImage.tiled_encode unpacks a 5-D shape from its 4-D input"),
    )),
    "AutoencoderDC": ClassInfo("dcae", "conv2d", False, False),
    "AutoencoderKLQwenImage": ClassInfo("qwen", "conv3d", True, False),
    "AutoencoderKLWan": ClassInfo("wan", "conv3d", True, True, tiled_output_copies=3),
    "AutoencoderKLMiniMaxH3": ClassInfo("minimax", "conv3d", True, True, (
        ("decode", "MiniMax-H3's decoder is a ViT (2.4B parameters in the published model), not a convolutional "
                   "VAE: vaemem measures its encoder only"),
    ), encodes_in_clips=True),
    # CogVideoX decodes latents two frames at a time: an even latent-frame count decodes to 4T frames, not
    # 1 + 4(T-1), so only clips of 1 + 8k frames (the pipelines' 49 and 81) round-trip.
    "AutoencoderKLCogVideoX": ClassInfo("cogvideox", "conv3d", True, True, frame_step=8,
                                             split_convs=True),
    "AutoencoderKLHunyuanVideo": ClassInfo("hunyuanvideo", "conv3d", True, True, temporal_windows=(16, 12),
                                           causal_mask=True),
    # campaign 36 measured its batches of two: both ops failed, as they do on a tiny model in plain diffusers
    "AutoencoderKLHunyuanVideo15": ClassInfo("hunyuanvideo15", "conv3d", True, True, refused_batch_ops=(
        ("decode", _HV15_BATCH), ("encode", _HV15_BATCH))),
    "AutoencoderKLLTXVideo": ClassInfo("ltx", "conv3d", True, True),
    "AutoencoderKLLTX2Video": ClassInfo("ltx2", "conv3d", True, True),
    "AutoencoderKLMochi": ClassInfo("mochi", "conv3d", True, True, split_convs=True,  # CogVideoX's convolutions
                                    tiles_run_untiled_op=True),
}
FAMILIES = {cls: info.family for cls, info in CLASSES.items()}

# Architectures whose layers are identical to another's under a different class name (a digest of the configs
# cannot see it): Qwen-Image's VAE is Wan 2.1's, image-only. A test compares every parameter shape of the two.
SAME_LAYERS: dict[str, str] = {"qwen-image": "wan21", "tiny-qwen-image": "tiny-wan"}


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
    def info(self) -> ClassInfo:
        return CLASSES[self.class_name]

    @property
    def family(self) -> str:
        return self.info.family

    @property
    def kernel(self) -> str:
        return self.info.kernel

    @property
    def is_video(self) -> bool:
        return self.temporal_factor is not None

    def refusal(self, op: str) -> str | None:
        """Why this model cannot run ``op`` in vaemem, or None if it can."""
        return dict(self.info.refused_ops).get(op)

    def tile_stride_rule(self, op: str) -> str:
        """How its diffusers class steps through the image when ``op`` runs tiled
        (:func:`vaemem.estimate.tile_sides`): the classes that take an overlap factor step by int(tile / factor x
        (1 - overlap)) latent px in decode ("latent") and int(tile x (1 - overlap)) sample px in encode ("pixel");
        the others are given a stride in sample px, the overlap rounded down to the factor
        (:func:`vaemem.models.build.configure_tiling`; "sample"), and a class that encodes in clips lays whole
        tiles, the overlaps widened to fit ("spread")."""
        if self.class_name in LATENT_STRIDE_CLASSES:
            return "latent" if op == "decode" else "pixel"
        return "spread" if self.info.encodes_in_clips else "sample"

    def tile_scale(self, op: str) -> int:
        """Sample px a side per px its tiled ``op`` counts: Wan 2.2's encode (a Wan with ``patch_size``)
        patchifies first and tiles the patchified input, its tile, stride and size test all in those pixels, so a
        256 px tile covers 512 sample px (its decode converts them: 1); 1 for every other class."""
        if self.class_name == "AutoencoderKLWan" and op == "encode":
            return self.config.get("patch_size") or 1
        return 1

    def tiled_refusal(self, op: str) -> str | None:
        """Why this model's tiled ``op`` cannot run, or None if it can."""
        return dict(self.info.refused_tiled_ops).get(op)

    def batch_refusal(self, op: str) -> str | None:
        """Why this model's ``op`` cannot run a batch of more than one sample, or None if it can."""
        return dict(self.info.refused_batch_ops).get(op)

    def frames_error(self, frames: int) -> str | None:
        """Why ``frames`` (a positive integer) cannot be a clip of this model, or None if it can: the estimator's
        rule (:func:`vaemem.estimate.frames_error`) with this class's frame step."""
        from vaemem.estimate import frames_error

        return frames_error(self.name, (self.info.frame_step or self.temporal_factor) if self.is_video else None,
                            frames)

    def latent_frames(self, frames: int) -> int:
        """Latent frames of a clip of ``frames`` sample frames (1 for an image model)."""
        return (frames - 1) // self.temporal_factor + 1 if self.temporal_factor else 1


# The classes whose tiling takes an overlap factor and steps by it in latent pixels (the others take a stride)
LATENT_STRIDE_CLASSES = ("AutoencoderKL", "AutoencoderKLFlux2", "AutoencoderKLHunyuanImage",
                         "AutoencoderKLCogVideoX", "AutoencoderKLHunyuanVideo15")


def _geometry(cfg: dict[str, Any]) -> tuple[int, int, int | None]:
    """(latent channels, spatial factor, temporal factor) of a config, as the diffusers class computes them."""
    cls = cfg.get("_class_name")
    if cls not in CLASSES:
        raise VaememError(f"unsupported diffusers class {cls!r}; supported: {', '.join(sorted(CLASSES))}")
    c = {**CLASS_DEFAULTS.get(cls, {}), **cfg}
    if cls in ("AutoencoderKL", "AutoencoderKLFlux2"):
        return c["latent_channels"], 2 ** (len(c["block_out_channels"]) - 1), None
    if cls in ("AutoencoderKLWan", "AutoencoderKLQwenImage"):
        downs = c.get("temperal_downsample", [False, True, True])
        spatial = 2 ** len(downs) * (c.get("patch_size") or 1)
        temporal = 2 ** sum(bool(t) for t in downs) if cls == "AutoencoderKLWan" else None
        return c.get("z_dim", 16), spatial, temporal
    if cls == "AutoencoderKLMiniMaxH3":
        return (c["latent_channels"], math.prod(c["spatial_downsample_factors"]),
                math.prod(c["temporal_downsample_factors"]))
    if cls == "AutoencoderKLCogVideoX":
        return c["latent_channels"], 2 ** (len(c["block_out_channels"]) - 1), c["temporal_compression_ratio"]
    if cls == "AutoencoderKLMochi":
        return c["latent_channels"], math.prod(c["spatial_expansions"]), math.prod(c["temporal_expansions"])
    if cls == "AutoencoderDC":
        return c["latent_channels"], 2 ** (len(c["encoder_block_out_channels"]) - 1), None
    if cls == "AutoencoderKLHunyuanImage":
        return c["latent_channels"], c["spatial_compression_ratio"], None
    if cls in ("AutoencoderKLLTXVideo", "AutoencoderKLLTX2Video"):  # stated ratios win, else as the class derives
        scalings = 2 ** sum(bool(s) for s in c["spatio_temporal_scaling"])
        return (c["latent_channels"], c["spatial_compression_ratio"] or c["patch_size"] * scalings,
                c["temporal_compression_ratio"] or c["patch_size_t"] * scalings)
    # HunyuanVideo, HunyuanVideo 1.5: the class states its ratios.
    return c["latent_channels"], c["spatial_compression_ratio"], c["temporal_compression_ratio"]


def _arch_digest(cfg: dict[str, Any]) -> str:
    full = {**CLASS_DEFAULTS.get(cfg["_class_name"], {}), **cfg}
    kept = {k: v for k, v in full.items() if k not in NON_ARCHITECTURAL_KEYS}
    kept["_class"] = cfg["_class_name"]
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


# The fields most configs share, checked where present before diffusers sees them (it fails on them with its own
# TypeError, IndexError or a bare AssertionError, which name no field)
POSITIVE_FIELDS = ("latent_channels", "z_dim", "in_channels", "out_channels", "base_dim", "norm_num_groups")
CHANNEL_LISTS = ("block_out_channels", "encoder_block_out_channels", "decoder_block_out_channels")


def _check_fields(name: str, cfg: dict[str, Any]) -> None:
    """Refuse a config field of a wrong type or value that diffusers would fail on without naming it."""
    def positive(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    for f in POSITIVE_FIELDS:
        if f in cfg and not positive(cfg[f]):
            raise VaememError(f"{name}: {f} must be a positive integer, got {cfg[f]!r}")
    for f in CHANNEL_LISTS:
        if f in cfg and not (isinstance(cfg[f], list) and cfg[f] and all(positive(v) for v in cfg[f])):
            raise VaememError(f"{name}: {f} must be a non-empty list of positive integers, got {cfg[f]!r}")
    if "layers_per_block" in cfg:
        v = cfg["layers_per_block"]
        count = lambda x: positive(x) or x == 0 and not isinstance(x, bool)  # noqa: E731
        if not (count(v) or isinstance(v, list) and v and all(count(x) for x in v)):
            raise VaememError(f"{name}: layers_per_block must be a non-negative integer or a list of them, got {v!r}")
    if cfg.get("_class_name") in ("AutoencoderKL", "AutoencoderKLFlux2"):  # one block type per channel width
        for f in ("down_block_types", "up_block_types"):
            if f in cfg and "block_out_channels" in cfg and (not isinstance(cfg[f], list)
                                                               or len(cfg[f]) != len(cfg["block_out_channels"])):
                raise VaememError(f"{name}: {f} must list one block per block_out_channels entry "
                                  f"({len(cfg['block_out_channels'])}), got {cfg[f]!r}")


def spec_from_config(name: str, cfg: dict[str, Any], *, tiny: bool = False, architecture: str | None = None
                     ) -> ModelSpec:
    """A ModelSpec for any config of a supported class (a zoo entry, or a user's diffusers ``config.json``)."""
    if not isinstance(cfg, dict):
        raise VaememError(f"{name}: a VAE config must be a JSON object")
    if cfg.get("_class_name") in CLASSES:  # else _geometry says the class is not supported
        _check_fields(name, cfg)
    try:
        latent, spatial, temporal = _geometry(cfg)
    except (KeyError, TypeError) as e:
        raise VaememError(f"{name}: config of {cfg.get('_class_name')} lacks or mistypes {e}") from None
    info = CLASSES[cfg["_class_name"]]
    ops = tuple(op for op in ("decode", "encode") if op not in dict(info.refused_ops))
    return ModelSpec(name, cfg["_class_name"], cfg, latent, spatial, temporal, ops, architecture or name, tiny)


@lru_cache(maxsize=1)
def registry() -> dict[str, ModelSpec]:
    """Every known model by CLI name: real configs sorted by name, then the tiny ones.

    A model's ``architecture`` is the first name in that order with identical layers (sdxl -> sd15, sd3 -> flux1),
    or the one :data:`SAME_LAYERS` declares (qwen-image -> wan21).
    """
    real: dict[str, Any] = {}
    for file in ("vae_configs.json", "more_vae_configs.json"):
        real.update(json.loads(resources.files("vaemem.models").joinpath(file).read_text()))
    out: dict[str, ModelSpec] = {}
    first_by_digest: dict[str, str] = {}
    for tiny, configs in ((False, real), (True, TINY_CONFIGS)):
        for name in sorted(configs):
            cfg = configs[name]
            arch = SAME_LAYERS.get(name) or first_by_digest.setdefault(_arch_digest(cfg), name)
            out[name] = spec_from_config(name, cfg, tiny=tiny, architecture=arch)
    return out


def get_spec(name: str) -> ModelSpec:
    """The spec of ``name``, or a VaememError naming the valid choices."""
    reg = registry()
    if name not in reg:
        real = [n for n, spec in reg.items() if not spec.tiny]
        raise VaememError(f"unknown model {name!r}; choose one of: {', '.join(real)} (or a tiny test model: "
                          f"{', '.join(n for n in reg if n not in real)})")
    return reg[name]
