"""Runtime estimator: how many bytes to reserve for one VAE decode or encode, from a vaemem coefficient file.

Standard library only, and no import of the rest of vaemem: an app may import it on its hot path, copy this one
file (with ``coefficients.json`` beside it), or vendor the module ``vaemem export --python`` writes (the same code,
the coefficients embedded). Usage::

    import torch
    from vaemem import estimate
    platform = estimate.detect_platform(torch, "bf16")  # this process's keys for bf16: once per dtype
    keys = {k: platform[k] for k in ("dtype", "backend", "allocator", "os", "attention")}
    need = estimate.working_memory_bytes("sdxl", "decode", 1024, 1024, **keys)
    tile = estimate.largest_tile("sdxl", "decode", 2048, 2048, budget_bytes, **keys)["tile"]

The coefficients default to the file packaged with vaemem; ``coefficients=`` takes a path, a dict or a list of
them (layered: the first that has a group wins, e.g. ``[my_fit, None]`` over the packaged one).

The file (schema :data:`SCHEMA_VERSION`) holds, per architecture, the **structure** of its dry-run peak (the exact
peak of live tensor bytes on fake tensors, ``vaemem trace``) as a function of width, height, batch, frames and
tile, and per platform (conv backend, allocator, dtype, OS, op, tiling) and kernel class (conv2d, conv3d) a
**calibration**: upper envelopes ``demand <= factor x dry + per_sample_factor x dry_of_one_sample + base
(+ single_frame_factor x dry + single_frame_bytes for a one-frame clip of a video model)`` over the measured points,
one per measured architecture and one pooled over the class. Each is fitted on the summed reservation / demand; a
line whose envelope fitted on the summed reservation differs carries its terms in ``flat``, and a request beyond a
one-frame clip takes the lower of the two (both cover every point). A line is fitted on frames of at least
``domain_min_frame_pixels``; the points measured below that (where a CPU's resident overhead is not affine in the
dry-run peak) get a line of their own, ``small``, which prices the requests below it. A line whose dry runs
over-stated a point's demand carries ``dry_bytes_min`` (from schema 20), its points' smallest dry-run peak, below
which, where it grows slower than the dry run, it never reserves more beyond the dry run than it does there
(:func:`_terms_at`). Pricing, in this declared order:

(a) **measured**: the architecture was measured on this platform: its own calibration line at its dry-run peak
    (or, where no structure covers the request, e.g. a tiny test model's, its measured pixel line
    ``slope x pixels [+ tile_slope x tile^2] + base``);
(b) **transfer**: the platform was measured with other architectures of the same kernel class: at this
    architecture's dry-run peak, the highest of the class's pooled line and each measured architecture's line
    (:func:`transfer_bytes`; a tiled request also its own untiled line there, at its tiles' dry-run peak, where
    it has one); the estimate says whether the class's architectures agreed
    (factors within 15 %, and each, held out, covered by a transfer from the others) or the transfer is unverified. On a
    backend that holds convolution transients no dry run sees (``WEIGHT_COPY_BACKENDS``: oneDNN's copy of a
    weight, or torch's im2col buffer where oneDNN does not run the convolution, :func:`conv_transient_bytes`)
    these lines are fitted on demand less each point's transient, and price ``weight_copy_factor`` x this
    request's transient on top: a transient is what one architecture's points cannot tell about another's (an
    architecture's own line there is fitted the same way, unless the line on its whole demand reserves less at
    its worst point: that line adds only what a request's transient holds beyond ``transient_seen_bytes``, the
    largest its points held; ``weight_copy_factor`` 0 in a file of schema 6: nothing); from schema 12 the lines of
    an untiled fp32 request of one sample whose structure carries the bytes live at its convolutions' calls are
    in the larger of its dry run and the most a call holds, those bytes plus its copy or buffer, and add nothing
    (:func:`call_peak`: a transient adds to what is live at its own call, not to the peak); from schema 19 those
    of a half-precision one without AMX as well (every call copies its weight);
(c) **fallback**: the platform was never measured: ``max(legacy rule, legacy rule x dry(architecture) /
    dry(SD family), FALLBACK_MIN_DRY_FACTOR x dry(architecture))`` (+ the convolution transient on such a
    backend), both dry runs at the same width, height and batch; a tiled request's legacy rule is of one tile,
    scaled by the dry runs of an image of one tile, plus FALLBACK_MIN_DRY_FACTOR x what its tiles' assembly adds to
    its dry run beyond one tile (``_Plan.tile_rule``); for a video VAE the legacy rule is
    taken for one frame and the architecture's dry run is of the whole clip. Never below the legacy rule, and a CPU
    measurement never sets a GPU platform's price.

A **tiled request one of whose tiles is the whole image** (diffusers' loop runs it first, crops of it after: Wan
2.2's encode, whose tiles cover twice their px) is the untiled request: its estimate x the two dry runs' ratio
(``_Plan._as_untiled``), and the fit takes such a measured point as an untiled one.

A **size-triggered split** (CogVideoX's and Mochi's 3D convolutions chunk an input of more than
``SPLIT_INPUT_ELEMENTS`` along time) is evaluated exactly from the convolutions the structure lists, on top of the
smooth part the structure's pieces give (:func:`split_peak_bytes`).

The **attention path** (``attention="math"`` where no fused SDPA kernel runs, as ``detect_platform`` reports): the
dry-run peak becomes ``max(fused structure, attention structure)``, the latter the live bytes while an attention
module runs with its (tokens x tokens) score matrices, quadratic in area (tiled: one tile's attention peak on top,
an upper bound). The calibration lines price that peak as they find it: they are fitted over a platform's
measured points, fused-path ones everywhere and math-path ones where a rig measured them.

On **oneDNN** (``WEIGHT_COPY_BACKENDS``) the lines are in the dry run with the buffers oneDNN's ops hold while
they run (a convolution in fp32 a reorder of the larger of its input and output; in half precision twice its
output with AMX, a copy of its input, two for a 1x1 kernel, without; none on a channels-last input but with AMX;
a half-precision mean an fp32 copy of its input), ``onednn_hidden_factor``
(half precision on ``onednn``: ``onednn_hidden_factor_no_amx``; a video architecture's the one of the request's
clip length, :func:`hidden_factor_at`) x the dry-run peak (its untiled structure's, for a
tiled request as well: :func:`onednn_hidden_factor`; on the math path x its fused part only, the attention peak
taken as it is, :func:`_dry_peak`), and never below :data:`LIVE_FLOOR_FACTOR` x the plain dry-run
peak, the live tensors. A file of schema 8 or older has no such factor (its lines are in the plain dry run), one
of 9 has it for untiled requests only, one of 10 the AMX rule's alone, one of 14 or older puts the larger of the
fused and math structures' factors on a math-path request's whole peak, one of 16 or older the largest factor
of any clip length on every clip.

Then, in every case, the **cast term**: when the run dtype is wider than the dtype the weights were loaded in
(an fp16-loaded SDXL decoded in fp32), add parameters x (run element size - loaded element size), the parameters
of the whole VAE (``cast="model"``, the default: what ``.to(dtype)`` casts) or of the half the op runs
(``cast="op"``).

A platform that was measured for this architecture, but not in the requested dtype, is an error (ValueError naming
the dtypes measured) rather than a guess. The margin is already in the file.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
import math
import numbers
import os as _os
import threading
from collections.abc import Callable, Iterator

# Kept light on purpose (no dataclasses, typing or pathlib): apps import this on their start-up path.

# 3: structures may list split convolutions and lines may carry a floor, which a reader of 2 would ignore.
# 4: a tiled structure may carry temporal windows and a fifth, squared-area term per knot, which a reader of 3
# would refuse as damaged; a file of 3 is one of 4 without them, so it stays readable.
# 5: a class line on a weight-copying backend carries weight_copy_factor and the models their largest convolution,
# which a reader of 4 would ignore (under-pricing a transfer); a file of 4 is one of 5 without them.
# 6: an own line on a weight-copying backend carries weight_copy_factor too (0: fitted on the whole demand), and an
# untiled fp32 structure conv_transients, which a reader of 5 would ignore on own lines (under-pricing where a
# convolution's path switches); a file of 5 is one of 6 whose own lines are all fitted on the whole demand.
# 7: an own line fitted on the whole demand carries weight_copy_factor >= 1 and transient_seen_bytes, the largest
# transient its points held, and adds what a request's transient holds beyond it, which a reader of 6 would price as
# the whole transient on top; a file of 6 is one of 7 whose whole-demand lines (weight_copy_factor 0) add nothing.
# 8: CPU half precision on oneDNN splits by AMX: ``onednn-amx`` where the CPU has AMX tiles (:func:`conv_backend`),
# a key a reader of 7 does not know; a file of 7 is one of 8 whose half-precision oneDNN lines were all measured
# on one CPU, labelled ``onednn`` whatever it had (its committed one's: the Xeon's, with AMX).
# 9: an untiled structure carries onednn_hidden_factor and the oneDNN lines are in the dry run times it, which a
# reader of 8 would price on the plain dry run (0.52-1.0x at 512 px); a file of 8 is one of 9 whose factors are all 1.
# 10: the tiled oneDNN lines are in the dry run times the untiled structure's onednn_hidden_factor as well, which a
# reader of 9 would price on the plain dry run (0.63-0.96x); a file of 9 is one of 10 whose tiled lines take 1.
# 11: a half-precision untiled structure carries onednn_hidden_factor_no_amx, the factor on a CPU without AMX tiles
# (its convolutions hold other buffers: vaemem.tracing.counter.onednn_hidden_bytes), and the half-precision
# ``onednn`` lines are in the dry run times it, which a reader of 10 would price with onednn_hidden_factor (the AMX
# rule's: 1.19x larger for SD1.5's decoder, 0.80x for LTX-Video 0.9.5's encoder, whose one-frame clips hold more
# without AMX); a file of 10 is one of 11 whose structures lack it (onednn_hidden_factor serves).
# Also from 11 an own line on a weight-copying backend may carry copy_line, its copy branch (the price the larger of
# the two), which a reader of 10 would ignore, under-pricing the requests whose weight copy outweighs the dry run.
# 12: an untiled fp32 structure's conv_transients carry the bytes live at each convolution's calls, and the untiled
# fp32 oneDNN lines of one sample are in the larger of the dry run with oneDNN's buffers and the largest live bytes
# plus transient at a call (conv_call_peak_bytes), with no transient added: a reader of 11 would add the copy to
# that (up to 2x); a file of 11 is one of 12 whose structures lack the live bytes (the transient is added).
# 14: a calibration's own and transfer lines of an architecture are fitted on its plain points (the fused attention
# path, unsliced), and a variant a request names (slicing, the math attention path) measured at two dry-run peaks or
# more has lines of its own (``variants``, ``variant_transfer_lines``), which a reader of 13 would ignore, pricing
# the variant by the plain line alone (SD1.5's fp32 math-path encode at 1280 px: 0.94x).
# 15: on the math attention path the oneDNN lines are in the larger of the fused peak x the fused structure's
# onednn_hidden_factor and the attention peak as it is (no op of an attention module holds oneDNN's buffers: every
# math-path dry run in fits/traces.json has that oneDNN peak to the byte), where 14 took the larger factor of the
# two structures x the larger peak (SD1.5's fp32 decode at 1536 px: 1.25 x its score matrices' peak); and the dry
# runs count the boolean mask SDPA's math-path softmax holds (vaemem.tracing.counter.safe_softmax_hidden_bytes). A
# reader of 14 would price the math path by schema 14's rule on lines fitted under this one (over, up to 1.25x); a
# file of 14 is priced by its own rule.
# 16: a line may carry ``flat``, the envelope of its points fitted on the summed reservation beside the one fitted on
# the summed reservation / demand, and prices the lower of the two (but for a one-frame clip of a video model),
# which a reader of 15 would ignore (over-pricing the large requests of a line its small points made steep, up to
# 1.2x); a file of 15 is one of 16 without it, so it stays readable and layers with it.
# 17: an untiled video structure's onednn_hidden_factor and onednn_hidden_factor_no_amx may be lists, one per knot
# and never rising (:func:`hidden_factor_at`), where 16 held the largest over its grid, and the oneDNN lines are in
# the dry run with the factor of the request's clip length: a reader of 16 would refuse the lists, and lines of 16
# priced with them would be under (HunyuanVideo 1.5's bf16 encode without AMX: 1.4438 for every clip in 16, 1.0 at
# 5-33 frames);
# a file of 16 is one of 17 whose factors are one number each, so it stays readable, but its oneDNN lines do not
# layer with those of 17.
# 18: an untiled calibration may carry ``first_call_bytes``, the most of its architectures' one-time cost beyond
# their dry runs (a fresh process's; the fit's derivation: vaemem.fit.coefficients.first_call_bytes), which an
# untiled transfer's floor adds
# (:func:`transfer_bytes`): a reader of 17 would ignore it (Wan 2.1's smallest bf16 clips on the AMX Xeon, left
# out: 0.97); a file of 17 is one of 18 without it, so it stays readable and layers with it.
# 19: the untiled half-precision oneDNN lines of one sample without AMX are in the call peak too (the larger of the
# dry run with oneDNN's buffers and the largest live bytes plus weight copy at a convolution's call,
# :func:`call_peak`), with no transient added, where 18 added the largest weight copy to the dry run (LTX-2's bf16
# decode at 320x192 x 9: its call peak 220 MiB, the dry run plus the copy 279): a reader of 18 would add the copy
# to them (over); a file of 18 is priced by its own rule, and its oneDNN lines do not layer with those of 19.
# 20: a line one of whose points needed less than its dry run carries ``dry_bytes_min``, its smallest point's dry-run
# peak, below which, growing slower than the dry run, it never reserves more beyond the dry run than it does there
# (:func:`_terms_at`), where 19 extrapolated it
# (LTX-2's bf16 encode line, 0.751 x its dry run + 86 MiB from 220 to 436 MiB, priced LTX-Video's 16 MiB dry run
# at 98 MiB, 3.1x its demand): a reader of 19 would ignore it (over); a file of 19 is one of 20 without it, so it
# stays readable and layers with it.
# 21: the untiled half-precision oneDNN lines without AMX of an unsliced batch are in its call peak too
# (:func:`call_peak`), where 20 added the largest weight copy to its dry run (LTX-2's bf16 encode at batch 2 and
# 128x128 needs 232.5 MiB: its call peak and a little; its dry run is 8 MiB): a reader of 20 would add the copy to
# them (over); a file of 20 is priced by its own rule, and its oneDNN lines do not layer with those of 21.
# 22: the structures' oneDNN factors count an fp32 convolution's reorder of the larger of its input and output
# (none on a channels-last input, nor on torch's own path) and no copy of a channels-last input in half precision
# without AMX (vaemem.tracing.counter.onednn_hidden_bytes), where 21 counted an fp32 one's output, and a video
# structure's factor per knot is over its sizes in the calibration domain: the same fields and pricing, other
# numbers (HunyuanVideo's fp32 one-frame decode 1.22 -> 1.53, Mochi's fp32 encode clips 1.20 -> 1.0). A file of
# 21 stays readable and is priced by its own structures, but its oneDNN lines do not layer with those of 22 (a
# structure of one priced with the lines of the other: 0.8-1.25x).
# 23: a line with a one-frame term carries ``single_frame_dry_max``, its one-frame points' largest dry-run peak,
# beyond which its one-frame term stops growing (:func:`_terms_at`), where 22 extrapolated it (LTX-Video's fp32
# decode line, its one-frame term fitted on one-frame dry runs of 17-96 MiB, priced HunyuanVideo 1.5's one-frame
# decode, an 870-900 MiB call peak, at 1.31x left out): a reader of 22 would ignore it (over); a file of 22 is one
# of 23 without it, so it stays readable and layers with it.
# 24: the structures' live bytes at a convolution's call (``conv_transients``, :func:`conv_call_peak_bytes`) hold its
# output alone where oneDNN runs it on a channels-last input, where 23 held the output's reorder too
# (vaemem.tracing.counter.conv_live_bytes: oneDNN reorders no channels-last input; Mochi's encodes needed 0.89-0.95x
# their call peak), and their half-precision oneDNN factors count a mean's fp32 copies in place of its output, where
# 23 counted the output beside them (vaemem.tracing.counter.onednn_hidden_bytes; HunyuanImage-2.1's bf16 encode
# needed 0.95x its dry run): the same fields and pricing, other numbers (Mochi's, HunyuanVideo 1.5's, HunyuanImage
# 2.1's, SANA DC-AE's and the LTX-2 family's structures). A file of 23 stays readable and is priced by its own
# structures, but its oneDNN lines do not layer with those of 24.
# 25: an untiled image structure may carry ``onednn_hidden_factor_batch`` (and, in half precision,
# ``onednn_hidden_factor_no_amx_batch``), its oneDNN factor of a batch from dry runs of two samples, which prices an
# unsliced batch (:func:`onednn_hidden_factor`), where 24 took one sample's: a 2-D batch runs channels-last and
# oneDNN holds no copy of such an input (SD1.5's and FLUX.1's bf16 decodes at 512 px in two and three needed their
# plain dry run plus 26 MiB, priced 1.39x by one sample's factor, campaign 39). A reader of 24 would price a batch
# with one sample's factor (over); a file of 24 stays readable, but its oneDNN lines (their batch rows fitted in
# one sample's factor) do not layer with those of 25, nor, of two files of 25, lines fitted without the batch factor
# with a winning structure that has it (under).
# 26: an untiled fp32 image structure's ``conv_transients`` may carry a tenth field per convolution, the bytes live
# at its calls in the dry runs of two samples ([pixels, bytes] per knot), which a half-precision batch's call peak
# takes (``batch`` / 2 x them: :func:`_conv_calls`) where 25 took ``batch`` x one sample's: a 2-D batch's calls hold no
# output reorder (SD1.5's bf16 decode at 512 px in two: its call peak 961 MiB, its live tensors' peak 768, its
# demand 794). A reader of 25 would refuse the field; a file of 25 stays readable, but its oneDNN lines do not layer
# with those of 26, nor, of two files of 26, lines fitted without the field with a winning structure that has it.
SCHEMA_VERSION = 26
INPUT_REORDER_SCHEMA = 22  # the first whose oneDNN factors count an fp32 convolution's input reorder
ONE_FRAME_MAX_SCHEMA = 23  # the first whose lines may carry single_frame_dry_max
CHANNELS_LAST_CALL_SCHEMA = 24  # the first whose call peaks hold a channels-last convolution's output alone (and
# whose half-precision factors a mean's fp32 copies in place of its output)
BATCH_FACTOR_SCHEMA = 25  # the first whose image structures may carry a oneDNN factor of a batch
BATCH_CALL_SCHEMA = 26  # the first whose image structures may carry the live bytes at a batch's convolution calls
BATCH_LIVE_SAMPLES = 2  # the samples of those calls and of the batch dry runs (structure.batch_grid)
LEAST_DRY_SCHEMA = 20  # the first schema whose lines may carry dry_bytes_min
BATCH_CALL_PEAK_SCHEMA = 21  # the first whose half-precision lines without AMX price a batch in its call peak
HALF_CALL_PEAK_SCHEMA = 19  # the first whose untiled half-precision lines without AMX are in the call peak
FIRST_CALL_SCHEMA = 18  # the first schema whose untiled calibrations may carry first_call_bytes
PER_KNOT_SCHEMA = 17  # the first schema whose oneDNN factors may be one per knot
FLAT_SCHEMA = 16  # the first schema whose lines may carry a flat branch
FLAT_TERMS = ("dry_factor", "per_sample_factor", "base_bytes")  # a flat branch's terms: it never prices one frame
AMX_SCHEMA = 8  # the first schema whose half-precision oneDNN lines tell AMX CPUs apart
HIDDEN_FACTOR_SCHEMA = 9  # the first schema whose oneDNN lines are in the dry run with oneDNN's buffers
TILED_FACTOR_SCHEMA = 10  # the first whose tiled ones are as well
NO_AMX_SCHEMA = 11  # the first whose half-precision onednn lines are in the dry run of a CPU without AMX
CALL_PEAK_SCHEMA = 12  # the first whose untiled fp32 oneDNN lines are in the call peak (conv_call_peak_bytes)
RESIDENT_SCHEMA = 13  # the first whose own oneDNN lines may carry a resident branch (resident_bytes)
VARIANT_SCHEMA = 14  # the first whose calibrations keep a variant's points apart (variants)
ATTENTION_APART_SCHEMA = 15  # the first whose math-path oneDNN lines take oneDNN's buffers on the fused part only
READABLE_SCHEMAS = (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26)
# The calibration lines' domain: frames of at least this many pixels. Below it (64x64 and 96x64 video on this
# CPU) demand carries a resident overhead of 30-100 MiB that changes with the shape and not with the dry-run peak
# (Wan 2.1 one-frame encode: 66 MiB at 64x64, 95 at 96x64, 96 at 160x96 with a 2.5x larger dry run): such points
# bend the line for every size, so the fit gives them a line of their own (``small``), which prices the requests
# below the domain (apps decode at 256 px and more), and a line's bound below its smallest dry run
# (:func:`_terms_at`) holds in the domain only.
DOMAIN_MIN_FRAME_PIXELS = 128 * 96
# the variants a request names, as variant_key spells them, in the words an estimate's reason uses
VARIANT_WORDS = {"/sliced": "sliced", "/math": "math-attention", "/sliced/math": "sliced math-attention"}
# Dry runs in fp16 and bf16 are identical for every zoo architecture (checked by vaemem's tests), so half precision
# shares one structure.
STRUCTURE_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16"}
PLATFORM_KEYS = ("conv_backend", "allocator", "dtype", "os", "op", "tiled")
OWN_UNTILED = "its own untiled line"  # the name transfer_bytes gives a tiled request's own untiled line: no architecture's
AGREE_SPREAD = 1.15  # a kernel class's architectures agree when their factors differ by at most this ratio (and
# each, held out, is covered by the line of the others: ``vaemem.fit.coefficients.held_out_uncovered``)
# Conv backends that hold a reordered copy of a convolution's weight for the length of the call (oneDNN's blocked
# formats: ``benchmarks/cpu_conv_transients.py``), or torch's im2col buffer where they do not run it, bytes no dry
# run sees. Their lines are fitted on demand less each point's transient and price a request with its own added
# (:func:`conv_transient_bytes`).
WEIGHT_COPY_BACKENDS = ("onednn", "onednn-amx")
# A structure's factors to the dry run with oneDNN's buffers: the first on every oneDNN CPU, the second on one
# without AMX tiles in half precision (:func:`onednn_hidden_factor`)
HIDDEN_FACTORS = ("onednn_hidden_factor", "onednn_hidden_factor_no_amx")
BATCH_SUFFIX = "_batch"  # a factor's name of an unsliced batch (schema 25): ``onednn_hidden_factor_batch``
# On the same backends an op holds buffers beyond its output while it runs (a convolution a reorder of its input
# or output, a half-precision mean an fp32 copy: vaemem.tracing.counter.onednn_hidden_bytes); an untiled dry run
# with them is a multiple of the plain one (constant in size for an image architecture, for a video one nearly,
# not in clip length; of one sample: an fp32 batch runs channels-last and holds less, which the lines' per-sample
# term carries), its structure's ``onednn_hidden_factor`` (from schema 17 one per knot where the knots differ, each
# the largest over the sizes of its knot in the calibration domain and the later ones: :func:`hidden_factor_at`),
# and the lines there are in that dry run,
# a tiled request's too (:func:`onednn_hidden_factor`). Why: in the plain dry run the image architectures' demand /
# dry run was 1.02-1.37x in fp32 and 1.04-1.91x in bf16 (HunyuanImage-2.1's encode above
# every other, under a transfer), HunyuanVideo's 1.27-1.47x against the Wans' 1.15-1.36x (0.92-1.07x, 0.99-1.29x
# in the dry run with them).
# torch's use_mkldnn: an fp32 convolution of batch 1, groups 1 and a kernel of at most 3 in an inner dim runs on
# oneDNN only where N x C x its input's next two dims exceed this (else im2col): :func:`conv_transient_elements`
ONEDNN_MIN_ELEMENTS = 20480
# The fallback never reserves less than this x the dry-run peak: the lowest demand / dry run of the seeds' GPU
# platforms (structure.md: 1.55 for SDXL fp16 on MIOpen). Why: the legacy rule prices a tiled op by one tile and
# misses the assembly of the output, which grows with the image (SDXL bf16 decode at 4096 px with 256 px tiles:
# 344 MiB by the rule, 361 MiB of live tensors).
FALLBACK_MIN_DRY_FACTOR = 1.5
# A calibration line never reserves less than this x the dry-run peak: a measured demand is never below the live
# tensors the dry run counts (1.005-82x them at the 830 points of the CPU rigs with a dry run; on a GPU the
# allocator's peak holds them), and 1.05 is the fit's margin. Why: a line fitted where one convolution's transient
# sets the demand learns next to nothing per dry-run byte (HunyuanVideo 1.5's fp32 decode: 0.023 x dry run + its
# 1728 MiB weight copies, over 8 points of at most 1.6 GiB of live tensors), and priced a 1024x1024 x 17-frame
# decode, whose live tensors are 52224 MiB, at 3036 MiB.
LIVE_FLOOR_FACTOR = 1.05
REFERENCE_MODEL = "sd15"  # the SD family, the legacy rule's reference in the fallback
MIB = 1024 * 1024
ELEMENT_SIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}  # names in the torch module
OPS = ("decode", "encode")
BACKENDS = ("cudnn", "miopen", "onednn", "onednn-amx", "aten", "mps", "xpu")
ALLOCATORS = ("native", "cudaMallocAsync", "expandable", "expandable-off", "glibc", "glibc-fixed", "system")
OSES = ("linux", "windows", "darwin")
CPU_BACKENDS = ("onednn", "onednn-amx", "aten")
# oneDNN's half-precision kernels on a CPU with AMX tiles hold more than on one without: SD1.5, FLUX.1 and CogView4
# bf16 need 1.14-1.26x on the AMX Xeon what they need on an AVX512-BF16 EPYC (fp32 agrees within 1.5 %:
# benchmarks/cross_rig_check.py), so half precision there is a platform of its own (:func:`conv_backend`)
AMX_BACKEND = "onednn-amx"
CPUINFO = "/proc/cpuinfo"  # Linux's CPU flags, where torch has no AMX probe (:func:`_cpu_has_amx`)
CPU_ALLOCATORS = ("glibc", "glibc-fixed", "system")  # glibc on Linux, the system's elsewhere (detect_allocator)
ATTENTION = ("fused", "math")  # the attention path: a fused SDPA kernel, or the math path's score matrices
GROUP_KEYS = ("architecture", "op", "conv_backend", "allocator", "dtype", "os", "tiled")
# diffusers' CogVideoXSafeConv3d splits an input of more than 2^30 elements (it counts 2 bytes each: "2 GB") into
# int(elements / 2^30) + 1 chunks along time
SPLIT_INPUT_ELEMENTS = 2 ** 30

# The legacy rule (prior-art.md), reproduced exactly: bytes = H * W * element_size * k (+ 250 MiB for an fp32
# SD/SDXL decode); tiled: the same over one tile, times 1.25.
LEGACY_K = {"miopen": {"decode": 3600, "encode": 2750}, "default": {"decode": 2200, "encode": 1100}}
LEGACY_FP32_SD_DECODE_EXTRA = 250 * MIB
LEGACY_TILED_FACTOR = 1.25
# ComfyUI's image rule, for side-by-side reports only (its per-model video rules are in comfy_bytes).
COMFY_K = {"decode": 2178, "encode": 1767}
COMFY_AMD_FACTOR = 2.73
# The models whose diffusers pipelines read the config's force_upcast and run an fp16 VAE in fp32 (diffusers 0.42:
# the SDXL family's; FLUX.1's, FLUX.2's, SD3's, CogView4's and CogVideoX's configs set it too, and their pipelines
# ignore it)
UPCAST_PIPELINES = {"sdxl": "diffusers' SDXL pipelines"}

_CACHE: dict = {}
_LOCK = threading.RLock()  # guards _CACHE's changes in load()
_VALID = object()  # marks a document this module validated and indexed (a caller's "_plans" key proves nothing)
PACKAGED_NAME = "coefficients.json"
# An exported module (``vaemem export --python``) sets this to its coefficient document, as literals.
_EMBEDDED: dict | None = None


class Estimate:
    """A reservation and how it was reached. All sizes in bytes.

    ``source`` is the rule that priced it, in the declared order: "measured" (the architecture's own calibration
    line, or a measured pixel line), "transfer" (the class line of other architectures on this platform) or
    "fallback" (the platform was never measured); ``group`` the calibration or pixel-line group that priced it
    (None for the fallback); ``reason`` what applied and how far from measured points it went; ``envelope_bytes``
    the line's (or the fallback's scaled rule's) bytes before the cast term; ``cast_bytes`` the weight-cast growth;
    ``floor_bytes`` the legacy rule where the fallback weighed it, or where it raised a pixel line far past its
    measured sizes (0 otherwise); ``pixels`` width x height x batch
    x frames; ``extrapolation`` how far past its measured points the line that priced it went: the request's
    dry-run peak over the line's largest measured one (a pixel line: its pixels over its largest; a tiled price
    capped by the untiled one: the untiled request's), above 1 beyond every measured point by that factor (below
    1 says nothing of the smallest); None where no measured line set the price (the fallback, and a pixel line
    that records no largest size); ``verified`` whether measurements on this platform vouch for the line that set
    the price: True for the architecture's own measured line (its untiled one pricing a tiled transfer too), and
    for a transfer within a kernel class whose measured architectures agree; False for a transfer the reason calls UNVERIFIED (one architecture measured in
    its class, or they disagree) and for the fallback. A price capped by the untiled request's takes that one's.
    """

    __slots__ = ("bytes", "source", "group", "reason", "envelope_bytes", "cast_bytes", "floor_bytes", "pixels",
                 "extrapolation", "verified")

    def __init__(self, bytes: int, source: str, group: str | None, reason: str, envelope_bytes: int,
                 cast_bytes: int, floor_bytes: int, pixels: int, extrapolation: float | None = None,
                 verified: bool = False) -> None:
        self.bytes, self.source, self.group, self.reason = bytes, source, group, reason
        self.envelope_bytes, self.cast_bytes, self.floor_bytes, self.pixels = envelope_bytes, cast_bytes, floor_bytes, pixels
        self.extrapolation, self.verified = extrapolation, verified

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return "Estimate(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


def default_coefficients_path() -> str:
    """``$VAEMEM_COEFFICIENTS``, else the fitted file packaged with vaemem (``vaemem/coefficients.json``, found
    through ``importlib.resources`` in a wheel or a checkout; beside this file when it is vendored alone). An
    exported module (``vaemem export --python``) prices from its embedded document: ``"<embedded>"``."""
    if _EMBEDDED is not None:
        return "<embedded>"
    env = _os.environ.get("VAEMEM_COEFFICIENTS")
    if env:
        return env
    try:
        from importlib.resources import files

        return str(files(__package__).joinpath(PACKAGED_NAME)) if __package__ else _beside()
    except (ImportError, TypeError, ModuleNotFoundError):
        return _beside()


def _beside() -> str:
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), PACKAGED_NAME)


def _read(p: str) -> dict:
    try:
        with open(p) as f:
            data = json.load(f)
    except OSError as e:
        hint = " (in Python the packaged file is None: coefficients=[mine, None])" if str(p) == "packaged" else ""
        raise ValueError(f"cannot read coefficient file {p}: {e.strerror}{hint}") from None
    except ValueError as e:
        raise ValueError(f"coefficient file {p} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"coefficient file {p} is nested too deeply to be a coefficient file") from None
    return _validated(data, f"coefficient file {p}")


# The largest tile overlap a point or a structure may have: at 0.97 diffusers' decode stepped by zero and its encode
# cut a 1 px tile, and the tiles a price loops over grow as (1 - overlap)^-2 (0.999: 6 s at 16384 px)
MAX_OVERLAP = 0.5
DICTS_KEPT = 8  # validated dicts load() keeps, and layered lists holding a dict (the cache holds each, so an id is
# not reused while kept)


def load(path: object = None) -> dict:
    """The coefficient document to price from, read and validated once, then cached: ``path`` a file (str or
    path-like), a dict (validated once, when first priced, on a copy: edit a copy and pass that; the last
    :data:`DICTS_KEPT` are kept), a list of them (layered: the first that has a group, calibration,
    structure or model wins, so ``[mine, None]`` puts a rig owner's own fit of this vaemem over the packaged one;
    a fit of another vaemem's schema goes after it, ``[None, mine]``: see :func:`_layer`), or None (the
    embedded document of an exported module, else :func:`default_coefficients_path`). Refuses an unknown or newer
    schema and any malformed field (ValueError). Thread-safe."""
    # an app prices from several threads: the cache's lookups, moves and evictions go one caller at a time (two
    # evicting at once raised "dictionary changed size during iteration" or a KeyError)
    with _LOCK:
        return _load(path)


def _load(path: object) -> dict:
    if isinstance(path, dict):
        if path.get("_valid") is _VALID:
            return path
        # validated once, on a deep copy (the caller's dict stays as it was, JSON-serialisable): later edits of it
        # are not seen, so change a copy and pass that; the last few dicts are kept (an app building one per call
        # must not grow the cache)
        key = ("dict", id(path))
        hit = _CACHE.pop(key, None)
        if hit is None or hit[0] is not path:
            hit = (path, validate(path, "coefficients="))
            _make_room("dict")
        _CACHE[key] = hit  # last used, last in order
        return hit[1]
    if isinstance(path, (list, tuple)):
        if not path:
            raise ValueError("coefficients=[]: name at least one coefficient file")
        # a list holding a dict is kept as a dict is, the last few (an app building a list of fresh dicts per call
        # must not grow the cache); one of files only, as a file is
        kind = "layers" if any(isinstance(p, dict) for p in path) else "files"
        key = (kind, *(("dict", id(p)) if isinstance(p, dict) else (None if p is None else str(p)) for p in path))
        hit = _CACHE.pop(key, None)
        # a dict is keyed by its id: the cache keeps the dicts themselves, so an id cannot be reused while cached
        if hit is None or any(a is not b for a, b in zip(hit[0], path) if isinstance(b, dict)):
            hit = (tuple(path), _layer([_load(p) for p in path]))
            if kind == "layers":
                _make_room(kind)
        _CACHE[key] = hit  # last used, last in order
        return hit[1]
    if path is None:
        if _EMBEDDED is not None:
            data = _CACHE.get("<embedded>")
            if data is None:
                data = _CACHE["<embedded>"] = _validated(_EMBEDDED, "the embedded coefficients")
            return data
        path = default_coefficients_path()
    _check_source(path)
    key = str(path)
    data = _CACHE.get(key)
    if data is None:
        data = _CACHE[key] = _read(key)
    return data


def coefficients_sha256(coefficients: object = None) -> str:
    """The sha256 (hex) of the coefficient document that prices ``coefficients=`` (the argument :func:`explain`
    takes; a layered list: the merged document), over its canonical JSON (keys sorted, no spaces). An app logs it
    beside a price to say which fit set it; an exported module returns the digest its header names. Computed once
    per document."""
    doc = _doc(coefficients)
    digest = doc.get("_sha256")
    if digest is None:  # two threads may both compute it: the same value
        public = {k: v for k, v in doc.items() if not k.startswith("_")}
        text = json.dumps(public, sort_keys=True, separators=(",", ":"), allow_nan=False)
        digest = doc["_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return digest


def _make_room(kind: str) -> None:
    """Drop the least recently used cache entries keyed ``(kind, ...)`` down to :data:`DICTS_KEPT` less one, for the
    entry about to be added."""
    # a snapshot: _doc() adds entries without the lock
    keys = [k for k in list(_CACHE) if isinstance(k, tuple) and k[0] == kind]
    for old in keys[:max(0, len(keys) - DICTS_KEPT + 1)]:
        _CACHE.pop(old, None)


def _check_source(path: object) -> None:
    """Refuse a coefficient source that is no path (``load(123)`` would read a file named 123)."""
    if not isinstance(path, (str, _os.PathLike)):
        raise ValueError(f"coefficients must be a path, a dict or a list of them, got {type(path).__name__}")


def _layer(docs: list) -> dict:
    """One document from several, the first winning per model, pixel group, structure and architecture line of a
    calibration (a rig owner's fit of flux1 replaces the shipped flux1 line, and keeps the shipped lines of the
    architectures it did not measure). A calibration's pooled class line is the one of the layer whose calibration
    holds the most architectures (the first on a tie), and its ``transfer_lines`` with it: they price transfer,
    so the widest pool sets them. The oneDNN lines are priced by one schema's rules: layers holding them share
    them, and a structure that serves them comes from a layer of those rules (a GPU rig owner's file of an older
    or newer vaemem layers after the packaged one, not before it)."""
    # the oneDNN lines changed meaning at schemas 8 (AMX apart), 9 (in the dry run with oneDNN's buffers, untiled)
    # 10 (tiled as well) and 11 (half precision without AMX by its own rule), and the document prices them by one
    # schema's contract: the layers holding them must share it (only those lines read the schema). The first layer's
    # structure of a key serves every layer's lines: one without onednn_hidden_factor would price another layer's
    # oneDNN lines, fitted with it, at 1 (under); one without onednn_hidden_factor_no_amx by the AMX rule.
    # (14 kept a variant's points apart and priced the lines as 13 did: those two layer; 15 prices the math path's
    # oneDNN lines otherwise, on dry runs that count its softmax's mask)
    onednn = [i for i, d in enumerate(docs) if _has_onednn(d)]
    # (16 adds a flat branch, which prices no other line otherwise: it layers with 15; 17's lines are in the dry
    # run with each clip length's factor; 18 adds a transfer's first-call cost, absent meaning 0: it layers with 17;
    # 19's untiled half-precision lines without AMX are in the call peak, 20 adds a line's smallest dry run, absent
    # meaning none: it layers with 19; 21's half-precision batches are in their call peak too; 22's factors count
    # an fp32 convolution's input reorder; 23 adds a one-frame bound, absent meaning none: it layers with 22; 24's
    # call peaks hold a channels-last convolution's output alone; 25's batches are priced with a factor of their own,
    # 26's half-precision image batches in their own calls' live bytes)
    rule = lambda v: BATCH_CALL_SCHEMA if v >= BATCH_CALL_SCHEMA else BATCH_FACTOR_SCHEMA \
        if v >= BATCH_FACTOR_SCHEMA else CHANNELS_LAST_CALL_SCHEMA \
        if v >= CHANNELS_LAST_CALL_SCHEMA else INPUT_REORDER_SCHEMA \
        if v >= INPUT_REORDER_SCHEMA else BATCH_CALL_PEAK_SCHEMA \
        if v >= BATCH_CALL_PEAK_SCHEMA else HALF_CALL_PEAK_SCHEMA \
        if v >= HALF_CALL_PEAK_SCHEMA else PER_KNOT_SCHEMA \
        if v >= PER_KNOT_SCHEMA else ATTENTION_APART_SCHEMA if v >= ATTENTION_APART_SCHEMA \
        else min(v, RESIDENT_SCHEMA)  # noqa: E731
    for i in onednn[1:]:
        first, this = docs[onednn[0]]["schema_version"], docs[i]["schema_version"]
        if rule(this) != rule(first):
            raise ValueError(f"coefficients layers {onednn[0] + 1} and {i + 1} hold oneDNN lines of schemas {first} "
                             f"and {this}, which are priced differently and cannot be layered; refit layer "
                             f"{onednn[0] + 1 if first < this else i + 1} with `vaemem fit`")
    out = {k: v for k, v in docs[0].items() if not k.startswith("_")}  # the first layer's margin, as its lines
    # checked as the oldest layer's fields allow (each layer was checked against its own schema on reading)
    out["schema_version"] = min(d["schema_version"] for d in docs)
    # per factor, the oneDNN layers whose schema prices their lines with it, and whether their structures carry it
    # (what their lines were fitted with): a winning structure must carry it exactly where they do. Without it
    # their lines would be priced at 1 (the AMX rule's, for the factor without AMX); with it where they were fitted
    # without, at more (at less for the factor without AMX: 0.79-0.84x for the image architectures' bf16)
    since = dict(zip(HIDDEN_FACTORS, (HIDDEN_FACTOR_SCHEMA, NO_AMX_SCHEMA)))
    # the layers whose oneDNN lines a structure prices: calibrations (a pixel line of a group no structure covers,
    # a tiny model's, reads none)
    priced = [j for j in onednn if any(c["conv_backend"] in WEIGHT_COPY_BACKENDS for c in docs[j]["_calib"].values())]
    fitted = {f: {j: any(f in st for st in docs[j].get("structures", {}).values()) for j in priced
                  if docs[j]["schema_version"] >= since[f]} for f in HIDDEN_FACTORS}
    winner: dict = {}  # per structure key, (the first layer that has it, its structure): the one that serves
    for i, d in enumerate(docs):
        for key, st in d.get("structures", {}).items():
            winner.setdefault(key, (i, st))
    # a structure serves every layer's lines, a oneDNN layer's by the rules of that layer's schema: one of a layer of
    # other rules (a GPU rig owner's file of aten or cuDNN lines as well) would price them by numbers they were not
    # fitted with (22 and 24 changed the factors and the calls' live bytes in the same fields: a newer aten layer's
    # structure priced Mochi's fp32 encode of an older oneDNN layer at 0.51x that layer's own price)
    for key, (i, st) in sorted(winner.items()):
        for j in priced:
            if j != i and rule(docs[i]["schema_version"]) != rule(docs[j]["schema_version"]):
                stale = min(i, j, key=lambda x: docs[x]["schema_version"])
                raise ValueError(f"coefficients layer {i + 1}'s structure {key} (schema {docs[i]['schema_version']}) "
                                 f"would price layer {j + 1}'s oneDNN lines (schema {docs[j]['schema_version']}), "
                                 f"which were fitted by other rules; refit layer {stale + 1} with `vaemem fit`, or "
                                 f"put layer {i + 1} after layer {j + 1}")
    # from schema 15 the math path's dry runs count the mask its softmax holds: lines of 15 priced with an older
    # layer's math-path structure, which does not, would be priced under (SD1.5's 1536 px encode: 0.94x)
    newer = [j for j, d in enumerate(docs) if d["schema_version"] >= ATTENTION_APART_SCHEMA and d["_calib"]]
    for key, (i, st) in sorted(winner.items()):
        if key.endswith("/math") and newer and docs[i]["schema_version"] < ATTENTION_APART_SCHEMA:
            raise ValueError(f"coefficients layer {i + 1}'s structure {key} is of schema "
                             f"{docs[i]['schema_version']}, whose math-path dry runs leave out the mask the softmax "
                             f"holds, and layer {newer[0] + 1}'s lines (schema {docs[newer[0]]['schema_version']}) "
                             f"are priced with it; refit layer {i + 1} with `vaemem fit`")
        if "/untiled" not in key:
            continue
        for f, cached in zip(HIDDEN_FACTORS, ("onednn_peak_bytes", "onednn_peak_bytes_no_amx")):
            if f == HIDDEN_FACTORS[1] and "/fp32/" in key:
                continue
            for j, has in sorted(fitted[f].items()):
                if j == i or has == (f in st):
                    continue
                if has:
                    raise ValueError(f"coefficients layer {i + 1}'s structure {key} has no {f}, which layer "
                                     f"{j + 1}'s oneDNN lines are priced with; refit layer {i + 1} with "
                                     f"`vaemem fit` (from a dry-run cache with {cached})")
                raise ValueError(f"coefficients layer {j + 1}'s oneDNN lines were fitted without {f}, which layer "
                                 f"{i + 1}'s structure {key} would price them with; refit layer {j + 1} with "
                                 f"`vaemem fit` (from a dry-run cache with {cached})")
        # a batch's factor (from schema 25; a winning structure is of the oneDNN lines' rules, above): a layer
        # whose own structure of this key lacks it fitted its batch rows in one sample's factor, and the winner's
        # would price its lines under (the other way round, one sample's factor prices lines fitted with a
        # batch's: over); the same for a batch's calls' live bytes (26)
        for j in priced:
            own = docs[j].get("structures", {}).get(key)
            if j != i and own is not None and (any(
                    f + BATCH_SUFFIX in st and f + BATCH_SUFFIX not in own for f in HIDDEN_FACTORS)
                    or (_batch_calls(st) and not _batch_calls(own))):
                raise ValueError(f"coefficients layer {j + 1}'s oneDNN lines were fitted without a batch's oneDNN "
                                 f"factor or its calls' live bytes, which layer {i + 1}'s structure {key} would price "
                                 f"them with; refit layer {j + 1} with `vaemem fit` (from a dry-run cache with the "
                                 f"batch dry runs)")
        # the same for the live bytes at the convolutions' calls, which the untiled fp32 lines of schema 12 are in
        # (where the oneDNN lines are older, the document's schema is theirs and the live bytes are never read)
        for j in priced:
            own = docs[j].get("structures", {}).get(key)
            if j == i or own is None or docs[j]["schema_version"] < CALL_PEAK_SCHEMA \
                    or _call_peaks(own) == _call_peaks(st):
                continue
            lacks = i if _call_peaks(own) else j
            raise ValueError(f"coefficients layer {i + 1}'s structure {key} "
                             f"{'lacks' if lacks == i else 'carries'} the live bytes at its convolutions' calls, "
                             f"which layer {j + 1}'s oneDNN lines were fitted {'with' if lacks == i else 'without'}; "
                             f"refit layer {lacks + 1} with `vaemem fit`")
    models: dict = {}
    groups: dict = {}
    calibrations: dict = {}
    structures = {key: st for key, (_, st) in winner.items()}
    for d in reversed(docs):
        for name, m in d["models"].items():  # field by field: an older layer's entry keeps the fields it lacks
            models[name] = {**models.get(name, {}), **m}
        groups.update(d["_index"])
        for cid, c in d["_calib"].items():
            old = calibrations.get(cid)
            merged = dict(c if old is None or len(c["architectures"]) >= len(old["architectures"]) else old)
            merged["architectures"] = {**(old["architectures"] if old else {}), **c["architectures"]}
            if "variants" in c or (old and "variants" in old):  # from 14, kept beside their architectures' lines
                # each one architecture's measurement, not a compromise of the pool: every layer's, the first winning
                for f in ("variants", "variant_transfer_lines"):
                    merged[f] = {**(old or {}).get(f, {}), **c.get(f, {})}
            calibrations[cid] = merged
    out.update(models=models, structures=structures, groups=list(groups.values()),
               calibrations=list(calibrations.values()))
    merged = _validated(out, "layered coefficients", layered=True)
    if onednn:  # priced by the oneDNN lines' schema, the only lines whose pricing reads it
        merged["schema_version"] = docs[onednn[0]]["schema_version"]
    return merged


def _call_peaks(st: dict) -> bool:
    """Whether a structure's ``conv_transients`` carry the bytes live at the calls (from schema 12)."""
    convs = st.get("conv_transients")
    return isinstance(convs, list) and bool(convs) and isinstance(convs[0], list) and len(convs[0]) in (9, 10)


def _batch_calls(st: dict) -> bool:
    """Whether a structure's ``conv_transients`` carry the live bytes at a batch's calls (schema 26)."""
    return _call_peaks(st) and len(st["conv_transients"][0]) == 10


def _has_onednn(doc: dict) -> bool:
    """Whether a coefficient document holds a group or calibration line on a oneDNN backend."""
    return any(c["conv_backend"] in WEIGHT_COPY_BACKENDS for c in [*doc["_calib"].values(), *doc["_index"].values()])


def clear_cache() -> None:
    _CACHE.clear()


# ---- validation: the one owner of what a coefficient file must hold -------------------------------------------

LIMIT = 1e15  # no coefficient is this large (bytes: a petabyte; factors and slopes: absurd): a damaged file


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) <= LIMIT


def _need(ok: bool, where: str, what: str, v: object) -> None:
    if not ok:
        raise ValueError(f"{where} must be {what}, got {v!r}")


def _field(d: dict, name: str, where: str, kind: str) -> object:
    """``d[name]`` checked to be of ``kind``: num, num>=0, num>0, int>0, int>=0, str, bool, int>0|None, list, dict
    (numbers and integers at most :data:`LIMIT` in magnitude)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object, got {d!r}")
    if name not in d:
        raise ValueError(f"{where}.{name} is missing")
    v = d[name]
    w = f"{where}.{name}"
    if kind == "num":
        _need(_num(v), w, f"a number of magnitude at most {LIMIT:g}", v)
    elif kind == "num>=0":
        _need(_num(v) and v >= 0, w, f"a non-negative number at most {LIMIT:g}", v)
    elif kind == "num>0":
        _need(_num(v) and v > 0, w, f"a positive number at most {LIMIT:g}", v)
    elif kind in ("int>0", "int>=0", "int>0|None"):
        if v is None and kind == "int>0|None":
            return v
        _need(isinstance(v, int) and not isinstance(v, bool) and (0 if kind == "int>=0" else 1) <= v <= LIMIT, w,
              f"a {'non-negative' if kind == 'int>=0' else 'positive'} integer at most {LIMIT:g}", v)
    elif kind == "str":
        _need(isinstance(v, str) and v != "", w, "a non-empty string", v)
    elif kind == "bool":
        _need(isinstance(v, bool), w, "true or false", v)
    else:
        _need(isinstance(v, {"list": list, "dict": dict}[kind]), w, f"a JSON {'array' if kind == 'list' else 'object'}", v)
    return v


def _check_line(line: dict, where: str, small: bool = False, strict: bool = False, branch: bool = False,
                flat: bool = True, least: bool = True, frames: bool = True, transfer: bool = False) -> None:
    """A calibration line; ``strict`` (schema 6, whose fit writes them on every line): the terms that change a
    price are required, and ``small`` is there exactly where points below the domain were (a line that lost
    either would price silently otherwise). ``branch``: an own line's ``copy_line``, which may be flat (the
    transient it adds grows; its live line prices the larger requests). ``flat``: whether the line may carry a
    flat branch (:data:`FLAT_SCHEMA`), which is held to what its line is; ``least``: ``dry_bytes_min``
    (:data:`LEAST_DRY_SCHEMA`); ``frames``: ``single_frame_dry_max`` (:data:`ONE_FRAME_MAX_SCHEMA`), which only a
    ``transfer`` line (the class line, a transfer line) may carry: on an own line it would cut the one-frame slope
    its own kernels need past its points."""
    for name in ("dry_factor", "per_sample_factor", "base_bytes"):
        _field(line, name, where, "num>=0")
    top = _field(line, "dry_bytes_max", where, "num>0")  # a reason divides by it: a line has points
    if "dry_bytes_min" in line:  # from 20: below it the line keeps its bytes beyond the dry run there
        _need(least, f"{where}.dry_bytes_min", f"absent in a file of schema below {LEAST_DRY_SCHEMA} (new in schema "
              f"{LEAST_DRY_SCHEMA})", line["dry_bytes_min"])
        low = _field(line, "dry_bytes_min", where, "num>0")
        _need(low <= top, f"{where}.dry_bytes_min", f"at most dry_bytes_max ({top})", low)
    if "single_frame_dry_max" in line:  # from 23: beyond it a transfer's one-frame term stops growing
        _need(frames, f"{where}.single_frame_dry_max", f"absent in a file of schema below {ONE_FRAME_MAX_SCHEMA} (new "
              f"in schema {ONE_FRAME_MAX_SCHEMA})", line["single_frame_dry_max"])
        _need(transfer, f"{where}.single_frame_dry_max", "absent on an architecture's own line (a transfer's)",
              line["single_frame_dry_max"])
        one = _field(line, "single_frame_dry_max", where, "num>0")
        _need(one <= top, f"{where}.single_frame_dry_max", f"at most dry_bytes_max ({top})", one)
        _need(one >= line.get("dry_bytes_min", 0), f"{where}.single_frame_dry_max",
              f"at least dry_bytes_min ({line.get('dry_bytes_min', 0)})", one)
        _need(line.get("single_frame_factor", 0) > 0, f"{where}.single_frame_dry_max",
              "absent where single_frame_factor is 0 (nothing to stop)", one)
    if strict and not small:
        for name in ("single_frame_factor", "single_frame_bytes"):
            _field(line, name, where, "num>=0")
        below = _field(line, "n_points_below_domain", where, "int>=0")
        _need(("small" in line) == (below > 0), f"{where}.small",
              f"present exactly where n_points_below_domain ({below}) is above 0", "present" if "small" in line
              else "absent")
    for name in ("single_frame_factor", "single_frame_bytes", "floor_bytes", "weight_copy_factor", "resident_factor",
                 "resident_bytes", "single_frame_resident_bytes"):
        if name in line:
            _field(line, name, where, "num>=0")
    if "flat" in line:  # from schema 16: the envelope on bytes, the lower of the two prices
        _need(flat, f"{where}.flat", f"absent in a file of schema below {FLAT_SCHEMA} (flat branches are new in "
              f"schema {FLAT_SCHEMA})", "present")
        branch_terms = _field(line, "flat", where, "dict")
        for name in FLAT_TERMS:
            _field(branch_terms, name, f"{where}.flat", "num>=0")
        extra = sorted(set(branch_terms) - set(FLAT_TERMS))
        _need(not extra, f"{where}.flat", f"only the terms {', '.join(FLAT_TERMS)}", ", ".join(extra))
        grows = branch_terms["dry_factor"] + branch_terms["per_sample_factor"]
        _need(grows > 0 or small or branch, f"{where}.flat", "a branch that grows with the dry-run peak "
              "(dry_factor + per_sample_factor above 0)", grows)
    branches = [n for n in ("resident_bytes", "single_frame_resident_bytes") if n in line]
    _need(("resident_factor" in line) == bool(branches), f"{where}.resident_factor",
          "present exactly where resident_bytes or single_frame_resident_bytes is",
          "present" if "resident_factor" in line else "absent")
    _need(not small or not branches, f"{where}.resident_factor", "absent (a branch of the domain's line)",
          "present")
    _field(line, "n_points", where, "int>0")
    if small or branch:  # the pricing reads a copy branch on an own line's top level only
        _need("copy_line" not in line, f"{where}.copy_line", "absent (a copy branch is an own line's)", "present")
    if "small" in line:  # the line of the points below the domain
        _field(line, "domain_min_frame_pixels", where, "int>0")
        _check_line(_field(line, "small", where, "dict"), f"{where}.small", small=True, flat=flat, least=least,
                    frames=frames, transfer=transfer)
    if line["dry_factor"] + line["per_sample_factor"] <= 0 and not small and not branch:  # the small line may be
        # flat: past its points the main line prices
        raise ValueError(f"{where}: dry_factor + per_sample_factor is {line['dry_factor'] + line['per_sample_factor']}"
                         f": the line would not grow with the dry-run peak")


STRIDE_RULES = ("latent", "pixel", "sample", "spread")  # how a tiled loop steps through the image (tile_sides)


def _check_clips(s: dict, knots: list, where: str, last: bool) -> None:
    """An encode run in whole clips one after another (MiniMax-H3): a clip of more than one frame, priced at a
    knot (``last``: the last, a tiled structure's; an untiled one may be traced past it)."""
    _need("windows" not in s, f"{where}.clips", "absent beside windows", s["clips"])
    cl = _field(s, "clips", where, "dict")
    cf = _field(cl, "frames", f"{where}.clips", "int>0")
    _need(cf > 1 and (cf == knots[-1] if last else cf in knots), f"{where}.clips.frames",
          (f"the last knot ({knots[-1]})" if last else "a knot") + ", more than one", cf)
    for name in ("output_bytes_per_pixel", "pad_bytes_per_pixel_frame"):
        _field(cl, name, f"{where}.clips", "num>=0")


def _check_structure(s: dict, where: str) -> None:
    kind = _field(s, "kind", where, "str")
    if kind == "tiled":
        _need("split" not in s, f"{where}.split", "absent on a tiled structure", "present")
        knots = _field(s, "knots", where, "list")
        _need(bool(knots) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in knots)
              and knots == sorted(set(knots)), f"{where}.knots", "increasing positive integers", knots)
        coef = _field(s, "coef", where, "list")
        width = len(coef[0]) if coef and isinstance(coef[0], list) else 0
        _need(len(coef) == len(knots) and width in (4, 5)
              and all(isinstance(k, list) and len(k) == width and all(_num(c) for c in k)
                      and min(k[:3]) >= 0 and min(k[4:], default=0) >= 0 for k in coef), f"{where}.coef",
              f"{len(knots)} lists (one per knot) of [bytes per tile pixel >= 0, per stored pixel >= 0, per output "
              f"pixel in the assembly >= 0, base bytes], each with the same optional fifth, per squared tile pixel "
              f">= 0", coef)
        if "windows" in s:
            w = _field(s, "windows", where, "dict")
            _need(w.get("op") in ("decode", "encode"), f"{where}.windows.op", '"decode" or "encode"', w.get("op"))
            for name in ("frames", "stride_frames", "temporal_factor"):
                _field(w, name, f"{where}.windows", "int>0")
            tf = w["temporal_factor"]
            for name in ("frames", "stride_frames"):  # in latent frames too, a window has a length and a stride
                _need(w[name] % tf == 0, f"{where}.windows.{name}", f"a multiple of temporal_factor {tf}", w[name])
            _need(w["stride_frames"] <= w["frames"], f"{where}.windows.stride_frames", "at most frames",
                  w["stride_frames"])
            _need(knots[-1] >= w["frames"] + 1, f"{where}.knots", f"up to a whole window ({w['frames'] + 1} "
                  f"frames) at least", knots)
            _field(w, "bytes_per_pixel_frame", f"{where}.windows", "num>=0")
        if "clips" in s:
            _check_clips(s, knots, where, True)
        f = _field(s, "spatial_factor", where, "int>0")
        ov = _field(s, "overlap", where, "num>=0")
        _need(ov <= MAX_OVERLAP, f"{where}.overlap", f"at most {MAX_OVERLAP:g}", ov)
        rule = _field(s, "stride_rule", where, "str")
        _need(rule in STRIDE_RULES, f"{where}.stride_rule", "one of " + ", ".join(f'"{r}"' for r in STRIDE_RULES), rule)
        # whole tiles and whole clips come together (MiniMax-H3): either alone misprices the clip 5-8x
        _need((rule == "spread") == ("clips" in s), f"{where}.stride_rule",
              '"spread" exactly where the structure has clips', rule)
        scale = s.get("tile_scale", 1)
        _need(type(scale) is int and scale > 0 and f % scale == 0, f"{where}.tile_scale",
              f"an int > 0 that divides spatial_factor {f}", scale)
        # a loop that patchifies first holds the patchified clip throughout: the two come together
        _need(("held_bytes_per_pixel_frame" in s) == (scale > 1), f"{where}.held_bytes_per_pixel_frame",
              "present exactly where tile_scale is above 1", s.get("held_bytes_per_pixel_frame"))
        if "held_bytes_per_pixel_frame" in s:
            _field(s, "held_bytes_per_pixel_frame", where, "num>=0")
        if "tile_working_set" in s:  # each tile runs the untiled op at its own size: that op's structure
            ws = _field(s, "tile_working_set", where, "dict")
            _need(ws.get("kind") == "frames", f"{where}.tile_working_set.kind", '"frames"', ws.get("kind"))
            _check_structure(ws, f"{where}.tile_working_set")
        tile_min = s.get("tile_min")  # every fit writes it: without it a tile too small for the basis prices
        _need(type(tile_min) is int and tile_min > 0, f"{where}.tile_min", "an int > 0", tile_min)
        tile_max = s.get("tile_max", tile_min)
        _need("tile_max" not in s or (type(tile_max) is int and tile_max >= tile_min), f"{where}.tile_max",
              "an int >= tile_min", tile_max)
        probes = [(t, k * t) for t in ([t for t in (16 * f, 32 * f, 64 * f) if t >= tile_min] or [tile_min])
                  for k in (2, 4)]
        low = [(t, w, k) for k in knots for t, w in probes if structure_bytes(s, w, w, 1, k, t) <= 0]
        if low:
            t, w, k = low[0]
            raise ValueError(f"{where} prices a {w}x{w} request" + (f" x {k} frames" if k > 1 else "")
                             + f" with {t} px tiles at zero or less")
        return
    _need(kind == "frames", f"{where}.kind", '"frames" or "tiled"', kind)
    knots = _field(s, "knots", where, "list")
    _need(bool(knots) and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in knots)
          and knots == sorted(set(knots)), f"{where}.knots", "increasing positive integers", knots)
    for name in ("bytes_per_pixel", "bytes_per_pixel_squared", "base_bytes"):
        v = _field(s, name, where, "list")
        _need(len(v) == len(knots) and all(_num(x) for x in v), f"{where}.{name}", f"{len(knots)} numbers", v)
    if "clips" in s:
        _check_clips(s, knots, where, False)
    for name in ("bytes_per_pixel", "bytes_per_pixel_squared"):  # as derived: a concave piece is its chord
        _need(min(s[name]) >= 0, f"{where}.{name}", "non-negative", s[name])
    if "output_bytes_per_pixel" in s:
        o = _field(s, "output_bytes_per_pixel", where, "list")
        _need(len(o) == len(knots) and all(_num(x) and x >= 0 for x in o), f"{where}.output_bytes_per_pixel",
              f"{len(knots)} non-negative numbers", o)
    if "area_min" in s:
        _field(s, "area_min", where, "int>=0")
    for name in HIDDEN_FACTORS:  # at most 2.0 seen (HunyuanImage-2.1's bf16 encode: its means' fp32 copies)
        if name in s:  # one number, or one per knot (schema 17: the file's check)
            h = s[name]
            _need(all(_num(x) and 1 <= x <= 3 for x in (h if isinstance(h, list) else [h]))
                  and (not isinstance(h, list) or (len(h) == len(knots) and h == sorted(h, reverse=True))),
                  f"{where}.{name}", f"a number from 1 to 3, or {len(knots)} of them (one per knot, never rising)", h)
        if name + BATCH_SUFFIX in s:  # a batch's (schema 25: the file's check): one number, beside one sample's
            h = s[name + BATCH_SUFFIX]
            _need(_num(h) and 1 <= h <= 3 and name in s, f"{where}.{name}{BATCH_SUFFIX}",
                  f"a number from 1 to 3 beside {name}", h)
    if "conv_transients" in s:
        convs = _field(s, "conv_transients", where, "list")
        # a law grows with the size (its constant may be below zero: the slopes are rounded up)
        law = lambda k: isinstance(k, list) and len(k) == 3 and all(_num(x) for x in k) \
            and k[0] >= 0 and k[1] >= 0  # noqa: E731
        per_knot = lambda v, ok: isinstance(v, list) and len(v) == len(knots) and all(ok(k) for k in v)  # noqa: E731
        rules = lambda v: per_knot(v, lambda k: k is None or law(k))  # noqa: E731
        buffers = lambda v: per_knot(v, law)  # noqa: E731
        # live bytes at the calls: [pixels, bytes] pairs, pixels increasing (none where it does not run at a knot)
        polylines = lambda v: per_knot(v, lambda k: isinstance(k, list) and all(  # noqa: E731
            isinstance(p, list) and len(p) == 2 and all(type(x) is int and x >= 0 for x in p) for p in k)
            and all(a[0] < b[0] for a, b in zip(k, k[1:])))
        size = len(convs[0]) if convs and isinstance(convs[0], list) and len(convs[0]) in (9, 10) else 7  # 9 from 12
        _need(size < 10 or len(knots) == 1, f"{where}.conv_transients", "9 fields per convolution where the "
              "structure has more than one knot (a batch's calls are an image structure's)", len(knots))
        _need(bool(convs) and all(isinstance(c, list) and len(c) == size and type(c[0]) is int and c[0] > 0
                                  and type(c[1]) is int and c[1] in (3, 4, 5) and rules(c[2]) and buffers(c[3])
                                  and isinstance(c[4], list) and len(c[4]) == len(knots)
                                  and all(t is None or (_num(t) and t >= -1) for t in c[4])
                                  and rules(c[5]) and buffers(c[6]) and all(polylines(v) for v in c[7:])
                                  # no live bytes exactly at the knots where it does not run (its rule law 0)
                                  and all((not p) == (r == [0, 0, 0]) for v in c[7:] for p, r in zip(v, c[2]))
                                  for c in convs)
              and [c[0] for c in convs] == sorted((c[0] for c in convs), reverse=True),
              f"{where}.conv_transients", f"lists of [weight elements > 0, input rank 3-5, {len(knots)} rule laws "
              f"(null: always on oneDNN, or [a >= 0, b >= 0, c]), {len(knots)} im2col laws [a >= 0, b >= 0, c], "
              f"{len(knots)} "
              f"channels-last thresholds (null: never, or elements >= -1), the smallest call's rule and im2col "
              f"laws" + (f", {len(knots)} lists of [pixels, live bytes] at its calls and {len(knots)} at its "
                         f"smallest" if size >= 9 else "")
              + (f", {len(knots)} at a batch's calls" if size == 10 else "")
              + "], the heaviest weight first", convs)
    if "upper" in s:
        up = _field(s, "upper", where, "dict")
        _field(up, "area_from", f"{where}.upper", "int>0")
        for name in ("bytes_per_pixel", "bytes_per_pixel_squared", "base_bytes"):
            v = _field(up, name, f"{where}.upper", "list")
            _need(len(v) == len(knots) and all(_num(x) for x in v) and (name == "base_bytes" or min(v) >= 0),
                  f"{where}.upper.{name}", f"{len(knots)} numbers" + ("" if name == "base_bytes" else ", non-negative"),
                  v)
    if "split" in s:
        sp = _field(s, "split", where, "dict")
        _field(sp, "bytes_per_element", f"{where}.split", "int>0")
        layers = _field(sp, "layers", f"{where}.split", "list")
        _need(len(layers) == len(knots) and all(isinstance(k, list) for k in layers), f"{where}.split.layers",
              f"{len(knots)} lists (one per knot)", layers)
        for i, knot in enumerate(layers):
            for j, layer in enumerate(knot):
                _need(isinstance(layer, list) and len(layer) == 8 and all(_num(x) for x in layer)
                      and layer[0] > 0 and layer[1] > 0 and layer[3] >= 1 and min(layer[2], layer[5], layer[6]) >= 0
                      and float(layer[2]).is_integer() and float(layer[4]).is_integer() and layer[4] >= 1,
                      f"{where}.split.layers[{i}][{j}]", "[elements per padded pixel > 0, scale > 0, pad >= 0, "
                      "frames >= 1, whole temporal kernel >= 1, output elements per pixel >= 0, live bytes per pixel >= 0, "
                      "live bytes], padding whole", layer)
        _need(len(layers) < 2 or split_compatible(layers[-2], layers[-1]), f"{where}.split.layers",
              "the same layers at its last two knots (it is extrapolated along them)", "different layers")
    if "extrapolate" in s:
        _need(s["extrapolate"] in ("linear", "quadratic"), f"{where}.extrapolate", '"linear" or "quadratic"',
              s["extrapolate"])
    area_min = s.get("area_min") or 64 * 64
    for k in knots:
        for side in (int(area_min ** 0.5), 1024):
            if structure_bytes(s, side, side, 1, k, None) <= 0:
                raise ValueError(f"{where} prices {side}x{side} x {k} frames at zero or less")


def _check_keys(d: dict, where: str, amx: bool) -> None:
    """The platform key fields of a group or calibration name valid choices (``amx``: :data:`AMX_BACKEND` among
    them, from schema 8; a layered document's layers were checked each)."""
    for name, valid in (("op", OPS), ("dtype", tuple(ELEMENT_SIZE)), ("conv_backend", BACKENDS),
                        ("allocator", ALLOCATORS), ("os", OSES)):
        _need(d[name] in valid, f"{where}.{name}", "one of " + ", ".join(valid), d[name])
    if d["conv_backend"] == AMX_BACKEND:
        _need(amx, f"{where}.conv_backend", "another backend in a file of schema 7 or older "
              "(onednn-amx is a key from schema 8)", d["conv_backend"])
        _need(d["dtype"] != "fp32", f"{where}.conv_backend", "half precision only (fp32 on a CPU with AMX runs as "
              "onednn)", d["conv_backend"])


def check_key(key: dict, where: str) -> None:
    """Raise ValueError where a group key (a measurement's: :data:`GROUP_KEYS`) names a choice no coefficient file
    may hold (``where`` names it in the message): what ``vaemem fit`` refuses before it writes a file."""
    _check_keys(key, where, amx=True)


def validate(data: object, source: str = "coefficients", layered: bool = False) -> dict:
    """Check a coefficient document (schema 3 to SCHEMA_VERSION) field by field; return a validated copy indexed
    for pricing (``data`` is left as it was: an edit of it after is checked again when it is priced). Raises
    ValueError naming ``source`` and the field (``groups[3].slope_bytes_per_pixel``): a missing field, a wrong
    type, a negative slope or factor, or a line that prices a valid request at zero or less. ``layered``: a document
    :func:`_layer` merged, whose calibrations may hold architectures of another layer than their transfer lines'."""
    try:
        own = copy.deepcopy(data)
    except RecursionError:
        raise ValueError(f"{source} is nested too deeply to be a coefficient file") from None
    return _validated(own, source, layered)


def _validated(data: object, source: str, layered: bool = False) -> dict:
    """:func:`validate` in place, of a document this module owns (read from a file, the embedded one, a merge)."""
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a JSON object: not a vaemem coefficient file")
    version = data.get("schema_version")
    if type(version) is not int:
        raise ValueError(f"{source} has no integer schema_version (got {version!r}): not a vaemem coefficient "
                         f"file, or damaged")
    if version not in READABLE_SCHEMAS:
        newer = version > SCHEMA_VERSION
        if not newer and not isinstance(data.get("groups"), list):  # every coefficient file has held its groups:
            # another file of ours (a dry-run cache, a measurement line) is not an old one to refit
            raise ValueError(f"{source} is not a vaemem coefficient file (it has no list of groups): `vaemem fit` "
                             f"writes one")
        hint = ("; upgrade vaemem" if newer else
                "; refit it from the measurements with `vaemem fit` (measurement lines of schema 1 stay "
                "readable)" if version < SCHEMA_VERSION else "")
        readable = f"{READABLE_SCHEMAS[0]}-{READABLE_SCHEMAS[-1]}"
        raise ValueError(f"{source} has schema_version {version!r}, "
                         + (f"newer than this estimator reads ({readable})" if newer
                            else f"which this estimator does not read (it reads {readable})") + hint)
    # since schema 6 every file fit writes holds its calibrations and structures (empty where none): one without
    # them is damaged, and read as it stood would drop every measured platform to the fallback unsaid
    for name in ("models", "groups") + (("calibrations", "structures") if version >= 6 else ()):
        if not isinstance(data.get(name), {"models": dict, "groups": list, "calibrations": list,
                                           "structures": dict}[name]):
            raise ValueError(f"{source} lacks {name}: not a vaemem coefficient file, or damaged; regenerate it with "
                             f"`vaemem fit`")
    # in every line already, and the fallback's weight copy takes it: a file without it would price that copy
    # bare, unsaid (every file fit writes holds it)
    _field(data, "margin", source, "num>=0")
    for name, m in data["models"].items():
        w = f"{source}: models.{name}"
        for f, kind in (("architecture", "str"), ("family", "str"), ("parameters", "int>=0"),
                        ("spatial_factor", "int>0"), ("temporal_factor", "int>0|None")):
            _field(m, f, w, kind)
        if m.get("frame_step") is not None:
            _field(m, "frame_step", w, "int>0")
        if "op_parameters" in m:
            for op in OPS:
                n = _field(_field(m, "op_parameters", w, "dict"), op, f"{w}.op_parameters", "int>=0")
                _need(n <= m["parameters"], f"{w}.op_parameters.{op}", f"at most parameters ({m['parameters']})", n)
        if version >= 5:  # what refuses a request or changes its price is required from schema 5 (an older file
            for f in ("ops", "refused", "refused_tiled", "attention_ops", "op_parameters"):  # lacks some of them)
                _field(m, f, w, "list" if f in ("ops", "attention_ops") else "dict")
            # a transfer on a weight-copying backend adds the copy of the op's largest convolution
            for op in OPS:
                n = _field(_field(m, "largest_conv_parameters", w, "dict"), op, f"{w}.largest_conv_parameters",
                           "int>0")
                _need(n <= m["op_parameters"][op], f"{w}.largest_conv_parameters.{op}",
                      f"at most op_parameters.{op} ({m['op_parameters'][op]})", n)
        for name in ("refused", "refused_tiled", "refused_batch"):
            if name in m:  # op -> why it cannot run (the reason a refusal says)
                for op, why in _field(m, name, w, "dict").items():
                    _need(op in OPS and isinstance(why, str) and why != "", f"{w}.{name}",
                          f"a reason (a non-empty string) per op of {', '.join(OPS)}", {op: why})
        if "attention_ops" in m:
            _need(isinstance(m["attention_ops"], list) and all(isinstance(o, str) and o in OPS
                                                               for o in m["attention_ops"]),
                  f"{w}.attention_ops", f"a list of {', '.join(OPS)}", m["attention_ops"])
        if "ops" in m:
            _need(isinstance(m["ops"], list) and all(isinstance(o, str) and o in OPS for o in m["ops"]), f"{w}.ops",
                  f"a list of {', '.join(OPS)}", m["ops"])
        if m["architecture"] not in data["models"]:
            raise ValueError(f"{w}.architecture {m['architecture']!r} is not a model of the file")
        if m.get("kernel", "conv2d") not in ("conv2d", "conv3d"):
            raise ValueError(f"{w}.kernel must be conv2d or conv3d, got {m['kernel']!r}")
    # what a line or structure is keyed by names an architecture of the file: one that names none prices nothing,
    # and a typo in a rig owner's fit would drop that platform to the fallback unsaid
    archs = {m["architecture"] for m in data["models"].values()}
    for i, g in enumerate(data["groups"]):
        w = f"{source}: groups[{i}]"
        for f in GROUP_KEYS:
            _field(g, f, w, "bool" if f == "tiled" else "str")
        _need(g["architecture"] in archs, f"{w}.architecture", "an architecture of the file's models",
              g["architecture"])
        _check_keys(g, w, version >= 8 or layered)
        if _field(g, "group", w, "str") != group_id(g):
            raise ValueError(f"{w}.group {g['group']!r} is not its key's id {group_id(g)!r}")
        _field(g, "slope_bytes_per_pixel", w, "num>=0")
        _field(g, "base_bytes", w, "num>=0")  # as the fit bounds it: below its points a line must not fall to 0
        if "tile_slope_bytes_per_tile_pixel" in g:
            _field(g, "tile_slope_bytes_per_tile_pixel", w, "num>=0")
        for f in ("pixels_min", "pixels_max"):  # the measured range: optional (reasons and the far-out floor)
            if f in g:
                _field(g, f, w, "int>0")
        lo = g.get("pixels_min", 64 * 64)
        if g["slope_bytes_per_pixel"] * lo + g["base_bytes"] <= 0:
            raise ValueError(f"{w} prices its smallest measured size ({lo} px) at zero or less")
    gids = [group_id(g) for g in data["groups"]]
    _need(len(set(gids)) == len(gids), f"{source}: groups", "one entry per group",
          sorted({i for i in gids if gids.count(i) > 1}))
    cals = data.get("calibrations", [])
    _need(isinstance(cals, list), f"{source}: calibrations", "a JSON array", cals)
    ids = [c.get("calibration") for c in cals if isinstance(c, dict)]
    _need(len(set(ids)) == len(ids), f"{source}: calibrations", "one entry per calibration id",
          sorted({i for i in ids if ids.count(i) > 1}))
    flat = version >= FLAT_SCHEMA or layered  # a layered document of 15 and 16 keeps the flat branches of 16
    least = version >= LEAST_DRY_SCHEMA or layered  # and one of 19 and 20 the dry_bytes_min of 20
    frames = version >= ONE_FRAME_MAX_SCHEMA or layered  # and one of 22 and 23 the single_frame_dry_max of 23
    for i, c in enumerate(cals):
        w = f"{source}: calibrations[{i}]"
        _field(c, "calibration", w, "str")
        for f in PLATFORM_KEYS:
            _field(c, f, w, "bool" if f == "tiled" else "str")
        _check_keys(c, w, version >= 8 or layered)
        _need(c.get("kernel") in ("conv2d", "conv3d"), f"{w}.kernel", "conv2d or conv3d", c.get("kernel"))
        if c["calibration"] != calibration_id(c, c["kernel"]):
            raise ValueError(f"{w}.calibration {c['calibration']!r} is not its key's id "
                             f"{calibration_id(c, c['kernel'])!r}")
        _field(c, "agree", w, "bool")
        _field(c, "spread", w, "num>=0")
        if "first_call_bytes" in c:  # from 18, an untiled transfer's floor adds it
            _need(version >= FIRST_CALL_SCHEMA or layered, f"{w}.first_call_bytes",
                  f"absent in a file of schema {version} (from {FIRST_CALL_SCHEMA})", c["first_call_bytes"])
            _need(not c["tiled"], f"{w}.first_call_bytes", "absent on a tiled calibration (an untiled transfer's)",
                  c["first_call_bytes"])
            _field(c, "first_call_bytes", w, "num>=0")
        for arch, line in _field(c, "architectures", w, "dict").items():
            _need(arch in archs, f"{w}.architectures", "keyed by architectures of the file's models", arch)
            _check_line(line, f"{w}.architectures.{arch}", strict=version >= 6, flat=flat, least=least,
                        frames=frames)
        _check_line(_field(c, "class", w, "dict"), f"{w}.class", strict=version >= 6, flat=flat, least=least,
                    frames=frames, transfer=True)
        lines = {"class": c["class"], **{f"architectures.{a}": ln for a, ln in c["architectures"].items()}}
        if version >= 7 or "transfer_lines" in c:  # from 7: each architecture's line as a transfer takes it
            moved = _field(c, "transfer_lines", w, "dict")
            # a layered document keeps the class's lines of its widest pool beside every layer's own lines
            _need(set(moved) <= set(c["architectures"]) if layered else
                  set(moved) == set(c["architectures"]), f"{w}.transfer_lines", "one line per architecture of "
                  "architectures", sorted(moved))
            for arch, line in sorted(moved.items()):
                _check_line(line, f"{w}.transfer_lines.{arch}", strict=True, flat=flat, least=least, frames=frames,
                            transfer=True)
                _need("floor_bytes" not in line, f"{w}.transfer_lines.{arch}.floor_bytes", "absent (a transfer "
                      "takes no architecture's resident floor)", line.get("floor_bytes"))
                lines[f"transfer_lines.{arch}"] = line
        if version >= VARIANT_SCHEMA or c.get("variants"):  # from 14: a variant's own and transfer lines
            _need(version >= VARIANT_SCHEMA or layered, f"{w}.variants", f"absent in a file of schema {version} "
                  f"(variant lines are new in schema {VARIANT_SCHEMA})", "a variant line")
            variants = _field(c, "variants", w, "dict")
            for name, line in sorted(variants.items()):
                arch, variant = variant_parts(name)
                _need(arch in c["architectures"] and variant in VARIANT_WORDS, f"{w}.variants.{name}",
                      f"a key of architectures and one of {', '.join(VARIANT_WORDS)} (sd15/math)", name)
                _check_line(line, f"{w}.variants.{name}", strict=True, flat=flat, least=least, frames=frames)
                lines[f"variants.{name}"] = line
            moved = _field(c, "variant_transfer_lines", w, "dict")
            _need(set(moved) <= set(variants) if layered else set(moved) == set(variants),
                  f"{w}.variant_transfer_lines", "one line per entry of variants", sorted(moved))
            for name, line in sorted(moved.items()):
                _check_line(line, f"{w}.variant_transfer_lines.{name}", strict=True, flat=flat, least=least,
                            frames=frames, transfer=True)
                _need("floor_bytes" not in line, f"{w}.variant_transfer_lines.{name}.floor_bytes", "absent (a "
                      "transfer takes no architecture's resident floor)", line.get("floor_bytes"))
                lines[f"variant_transfer_lines.{name}"] = line
        copies = c["conv_backend"] in WEIGHT_COPY_BACKENDS
        for name, line in lines.items():  # each line's transient: one pass, the rule by the line's role
            own = name.startswith(("architectures.", "variants."))
            if "weight_copy_factor" in line:
                _need(copies, f"{w}.{name}.weight_copy_factor", f"absent off {', '.join(WEIGHT_COPY_BACKENDS)}",
                      line["weight_copy_factor"])
            if copies and version >= (6 if own else 5):
                f = _field(line, "weight_copy_factor", f"{w}.{name}", "num>=0")
                if own:  # from 6 an own line says whether it was fitted on what the transients leave (>= 1) or not
                    _need(f == 0 or f >= 1, f"{w}.{name}.weight_copy_factor", "0 (fitted on the whole demand) or at "
                          "least 1 (on what the convolutions' transients leave, which it adds)", f)
                else:  # the lines a transfer takes are fitted less the transients: the copy is never less than itself
                    _need(f >= 1, f"{w}.{name}.weight_copy_factor", "at least 1 (the copy itself, the margin on "
                          "top)", f)
            if "copy_line" in line:  # from 11 an own line's copy branch, fitted on what the transient leaves
                _need(own and copies and (version >= NO_AMX_SCHEMA or layered), f"{w}.{name}.copy_line",
                      f"only on an own line on {', '.join(WEIGHT_COPY_BACKENDS)} (from schema {NO_AMX_SCHEMA})",
                      "present")
                branch = _field(line, "copy_line", f"{w}.{name}", "dict")
                _check_line(branch, f"{w}.{name}.copy_line", strict=True, branch=True, flat=flat, least=least,
                            frames=frames)
                _need(_field(branch, "weight_copy_factor", f"{w}.{name}.copy_line", "num>=0") >= 1,
                      f"{w}.{name}.copy_line.weight_copy_factor", "at least 1 (it adds the transient)",
                      branch["weight_copy_factor"])
                _need("resident_factor" not in branch, f"{w}.{name}.copy_line.resident_factor",
                      "absent (the resident branch is the whole own line's)", "present")
                _need("copy_line" not in branch and "transient_seen_bytes" not in branch,
                      f"{w}.{name}.copy_line", "a line without copy_line or transient_seen_bytes", "one with them")
            if "resident_factor" in line:  # from 13 an own line on oneDNN may carry its resident branch
                _need(own and copies and (version >= RESIDENT_SCHEMA or layered), f"{w}.{name}.resident_factor",
                      f"only on an own line on {', '.join(WEIGHT_COPY_BACKENDS)} (from schema {RESIDENT_SCHEMA})",
                      "present")
            if "transient_seen_bytes" in line:  # from 7 a whole-demand own line says which transients it priced
                # (read at any version: layered over an older file, it keeps it)
                _need(own and line.get("weight_copy_factor", 0) >= 1, f"{w}.{name}.transient_seen_bytes",
                      "only on an own line with weight_copy_factor of at least 1", line["transient_seen_bytes"])
                _field(line, "transient_seen_bytes", f"{w}.{name}", "int>=0")
    structures = data.get("structures", {})
    _need(isinstance(structures, dict), f"{source}: structures", "a JSON object", structures)
    keys = {structure_key(a, op, dt, tiled, att) for a in archs for op in OPS for dt in set(STRUCTURE_DTYPE.values())
            for tiled in (False, True) for att in ATTENTION}
    for name, st in structures.items():
        _need(name in keys, f"{source}: structures", "keyed ARCHITECTURE/OP/DTYPE/TILING[/math], of an architecture "
              "of the file's models (sd15/decode/fp32/untiled)", name)
        _check_structure(st, f"{source}: structures.{name}")
        for where, part in ((name, st), (f"{name}.tile_working_set", st.get("tile_working_set") or {})):
            for f in HIDDEN_FACTORS:  # one per knot: an older file's lines were fitted with the largest
                _need(not isinstance(part.get(f), list) or layered or version >= PER_KNOT_SCHEMA,
                      f"{source}: structures.{where}.{f}", f"one number (one per knot from schema {PER_KNOT_SCHEMA})",
                      part.get(f))
        for f in HIDDEN_FACTORS:  # an older file's lines were fitted with one sample's factor for a batch
            _need(f + BATCH_SUFFIX not in st or layered or version >= BATCH_FACTOR_SCHEMA,
                  f"{source}: structures.{name}.{f}{BATCH_SUFFIX}",
                  f"absent in a file of schema below {BATCH_FACTOR_SCHEMA} (new in schema {BATCH_FACTOR_SCHEMA})",
                  st.get(f + BATCH_SUFFIX))
        if "onednn_hidden_factor_no_amx" in st:  # an older file's lines were fitted without it: never read there
            _need((layered or version >= NO_AMX_SCHEMA) and name.split("/")[2:3] != ["fp32"]
                  and "/untiled" in name, f"{source}: structures.{name}.onednn_hidden_factor_no_amx",
                  f"absent (a field of untiled half-precision structures from schema {NO_AMX_SCHEMA})",
                  st["onednn_hidden_factor_no_amx"])
        if _batch_calls(st):  # an older file's lines price a batch's calls as its samples': never read there
            _need(layered or version >= BATCH_CALL_SCHEMA, f"{source}: structures.{name}.conv_transients",
                  f"9 fields per convolution (the live bytes at a batch's calls are a tenth from schema "
                  f"{BATCH_CALL_SCHEMA})", "10")
        if _call_peaks(st):  # an older file's lines add the transient to the peak: never read there
            _need(layered or version >= CALL_PEAK_SCHEMA, f"{source}: structures.{name}.conv_transients",
                  f"7 fields per convolution (the live bytes at its calls are fields from schema {CALL_PEAK_SCHEMA})",
                  "9")
        op = name.split("/")[1] if name.count("/") >= 3 else None
        if isinstance(st.get("windows"), dict):  # a window loop is the op's own (decode and encode step differently)
            _need(st["windows"]["op"] == op, f"{source}: structures.{name}.windows.op", f"{op!r}, its key's op",
                  st["windows"]["op"])
        want = "tiled" if name.endswith("/tiled") else "frames"  # the key says which basis pricing evaluates
        _need(st["kind"] == want, f"{source}: structures.{name}.kind", f'"{want}" for this key', st["kind"])
        if "split" in st:
            size = ELEMENT_SIZE.get(name.split("/")[2]) if name.count("/") >= 3 else None
            _need(st["split"]["bytes_per_element"] == size, f"{source}: structures.{name}.split.bytes_per_element",
                  f"{size}, its dtype's element size", st["split"]["bytes_per_element"])
    _index(data)
    return data


def _tiling(tiled: bool) -> str:
    return "tiled" if tiled else "untiled"


def group_id(key: dict) -> str:
    """``sd15/decode/onednn/glibc-fixed/fp32/linux/untiled``: the name of a measured pixel-line group."""
    return "/".join(str(key[k]) if k != "tiled" else _tiling(key[k]) for k in GROUP_KEYS)


def platform_id(key: dict) -> str:
    """``onednn/glibc-fixed/fp32/linux/decode/untiled``: the platform part of a key (no architecture)."""
    return "/".join(str(key[k]) if k != "tiled" else _tiling(key[k]) for k in PLATFORM_KEYS)


def calibration_id(key: dict, kernel: str) -> str:
    return f"{kernel}/{platform_id(key)}"


def untiled_twin(cid: str) -> str | None:
    """The id of a tiled calibration's untiled one on the same platform (whose own lines a tiled transfer also
    takes: :func:`transfer_bytes`), None for an untiled calibration."""
    return cid[:-len("tiled")] + "untiled" if cid.endswith("/tiled") else None


def variant_key(attention: str, slicing: bool) -> str:
    """The suffix a request's variant adds to its architecture in a calibration's ``variants`` (and to its group's
    id): ``/sliced``, ``/math``, ``/sliced/math``, or "" for the plain request (the fused path, unsliced)."""
    return ("/sliced" if slicing else "") + ("/math" if attention == "math" else "")


def variant_parts(name: str) -> tuple[str, str]:
    """(architecture, variant) of a calibration's variant line name: ``sd15/math`` -> (``sd15``, ``/math``); a plain
    architecture's name -> (it, "")."""
    arch, slash, rest = name.partition("/")
    return arch, slash + rest


def variant_applies(key: str, variant: str) -> bool:
    """Whether a calibration's variant line ``key`` (``sd15/math``) prices a request of ``variant``
    (:func:`variant_key`): each of its parts is one the request names (``/math`` prices a sliced math request
    too, whose work holds the math path's score matrices; nothing prices a plain request)."""
    parts = variant_parts(key)[1][1:].split("/")
    return bool(variant) and set(parts) <= set(variant[1:].split("/"))


def structure_key(architecture: str, op: str, dtype: str, tiled: bool, attention: str = "fused") -> str:
    """``sd15/decode/fp32/untiled``; the math path's attention structure adds ``/math``."""
    return f"{architecture}/{op}/{STRUCTURE_DTYPE[dtype]}/{_tiling(tiled)}" + ("/math" if attention == "math" else "")


def _index(data: dict) -> None:
    data["_index"] = {group_id(g): g for g in data["groups"]}
    data["_calib"] = {c["calibration"]: c for c in data.get("calibrations", [])}
    data["_plans"] = {}  # per request key without sizes: what pricing resolved once (see _plan)
    data["_valid"] = _VALID


def sample_stride(tile: int, factor: int, overlap: float) -> int:
    """The stride in sample px vaemem gives a class that takes one: ``tile`` minus the overlap rounded down to the
    spatial factor, at least one factor (:func:`vaemem.models.build.configure_tiling` sets it)."""
    return tile - max(factor, int(tile * overlap) // factor * factor)


def tile_sides(width: int, height: int, tile: int, factor: int, overlap: float,
               stride_rule: str = "latent", scale: int = 1) -> tuple[list[int], list[int]]:
    """(heights of the tile rows, widths of the tile columns) in sample pixels, as diffusers' loops cut the image,
    each tile ``tile`` px or what is left at the edge. The step (``stride_rule``): "latent", int(tile / factor x
    (1 - overlap)) latent px (a decode of the classes that take an overlap factor); "pixel", int(tile x (1 -
    overlap)) sample px (their encode); "sample", tile minus the overlap rounded down to the factor, at least one
    factor (the classes given a stride, :func:`sample_stride`). They differ where the overlap is no whole latent
    pixel (320 px tiles at factor 32: a step of 7 latent px against 8). ``scale``: sample px per px the loop
    counts (Wan 2.2's encode tiles its patchified input, 2 px a side per px: the tile, the stride and the image
    are all in its pixels, so a 256 px tile covers 512 sample px). "spread": MiniMax-H3's ``_split_tiles``, whole
    tiles, as few as cover the side with overlaps of at least the tile minus :func:`sample_stride`, the slack
    spread over the overlaps in steps of the factor (so no tile is cut at the edge)."""
    if stride_rule == "spread":
        return _spread(height, tile, factor, overlap), _spread(width, tile, factor, overlap)
    if scale > 1:
        rows, cols = tile_sides(width // scale, height // scale, tile, factor, overlap, stride_rule)
        return [r * scale for r in rows], [c * scale for c in cols]
    if stride_rule == "latent":
        tile = tile // factor * factor
        stride = (int(tile // factor * (1 - overlap)) or 1) * factor
    elif stride_rule == "pixel":
        stride = int(tile * (1 - overlap)) or 1
    else:
        stride = (sample_stride(tile, factor, overlap) // factor or 1) * factor
    return ([min(tile, height - i) for i in range(0, height, stride)],
            [min(tile, width - j) for j in range(0, width, stride)])


def _spread(length: int, tile: int, factor: int, overlap: float) -> list[int]:
    """The tile sides of one axis under MiniMax-H3's ``_split_tiles`` (see :func:`tile_sides`)."""
    if tile >= length:
        return [length]
    least = tile - sample_stride(tile, factor, overlap)  # the overlap vaemem gives it (configure_tiling)
    if least >= tile:  # no tile count covers the side (diffusers' loop would not end)
        raise ValueError(f"a {tile} px tile with a {least} px overlap cannot cover {length} px")
    n = -(-length // tile)
    while tile * n - least * (n - 1) < length:
        n += 1
    overlaps = [least] * (n - 1)
    for i in range((tile * n - least * (n - 1) - length) // factor):
        overlaps[i % (n - 1)] += factor
    starts = [0]
    for v in overlaps:
        starts.append(starts[-1] + tile - v)
    return [min(tile, length - s) for s in starts]


def tiled_peak_terms(width: int, height: int, tile: int, factor: int, overlap: float, a: float,
                     b: float, stride_rule: str = "latent", q: float = 0.0, scale: int = 1,
                     working: Callable[[int, int], float] | None = None) -> tuple[float, float, float, float]:
    """(its area, the area stored before it, the area of all tiles, its working set) in sample pixels (bytes for
    the last), for the tile where ``a x area + q x area^2 + working(width, height) + b x stored`` is largest,
    over the tiles in diffusers' order (rows, then columns): a tile's working set grows with its own area (``q``:
    HunyuanVideo's causal mask over the tile's tokens; ``working``, 0 where None: what the untiled op needs at the
    tile's size, for a class whose tiles each run the untiled op), and every finished tile is kept until the
    blend. Ties go to the first such tile."""
    rows, cols = tile_sides(width, height, tile, factor, overlap, stride_rule, scale)
    best, best_v, stored = (0.0, 0.0, 0.0), float("-inf"), 0.0
    for r in rows:
        for c in cols:
            u = 0.0 if working is None else working(c, r)
            v = a * r * c + q * (r * c) ** 2 + u + b * stored
            if v > best_v:
                best, best_v = (float(r * c), stored, u), v
            stored += r * c
    return best[0], best[1], stored, best[2]


def _clips(s: dict) -> tuple | None:
    """A structure's ``clips`` compiled: (frames per clip, output bytes per pixel, input bytes per pixel and frame)."""
    cl = s.get("clips")
    return None if cl is None else (cl["frames"], cl["output_bytes_per_pixel"], cl["pad_bytes_per_pixel_frame"])


def compile_structure(s: dict) -> tuple:
    """A structure as a tuple for :func:`structure_eval` (no dict lookups on the hot path)."""
    if s["kind"] == "tiled":
        w = s.get("windows")
        windows = None if w is None else (w["op"] == "decode", w["frames"], w["stride_frames"], w["temporal_factor"],
                                          w["bytes_per_pixel_frame"])
        return (True, tuple(s["knots"]), tuple(tuple(k) for k in s["coef"]), s["spatial_factor"], s["overlap"],
                s["stride_rule"], windows, s.get("tile_scale", 1), s.get("held_bytes_per_pixel_frame", 0.0),
                None if "tile_working_set" not in s else compile_structure(s["tile_working_set"]), _clips(s))
    up = s.get("upper")
    outputs = tuple(s.get("output_bytes_per_pixel", ()))
    upper = None if up is None else (up["area_from"], (False, tuple(s["knots"]), tuple(up["bytes_per_pixel"]),
                                                       tuple(up["bytes_per_pixel_squared"]), tuple(up["base_bytes"]),
                                                       0, outputs))
    sp = s.get("split")
    split = None
    if sp is not None:
        layers = tuple(tuple(tuple(layer) for layer in k) for k in sp["layers"])
        split = (sp["bytes_per_element"], layers, tuple(_split_groups(k, k) for k in layers),
                 (None, *(_split_groups(a, b) if split_compatible(a, b) else None for a, b in zip(layers, layers[1:]))))
    return (False, tuple(s["knots"]), tuple(s["bytes_per_pixel"]), tuple(s["bytes_per_pixel_squared"]),
            tuple(s["base_bytes"]), s.get("area_min", 0), outputs,
            s.get("extrapolate", "linear") == "quadratic", upper, split, _clips(s))


def split_peak_bytes(layers: tuple, element_bytes: int, width: int, height: int, batch: int) -> float:
    """The highest live bytes while a size-triggered split convolution (diffusers' CogVideoXSafeConv3d) joins its
    outputs, over ``layers`` (0 where none splits). Each layer is (input elements per padded layer pixel, scale:
    frame pixels per layer pixel along a side, spatial padding per side, input frames, temporal kernel, output
    elements per frame pixel, live bytes per pixel and live bytes after the call run whole, of one sample). An
    input of n > 2^30 elements is cut by ``torch.chunk`` into ``int(n / 2^30) + 1`` parts along time; every part
    after the first is copied with the ``kernel - 1`` frames before it, and while the outputs are concatenated the
    copies, the output parts and the whole output are alive: the live bytes of the whole run plus the copies and
    one output more (exact on the dry runs' own accounting where the temporal stride is 1; a strided split
    convolution, Mochi's 2-frame down-sampling, gives its parts more output frames than the whole, which no layer
    here counts: in the zoo such a layer never leads). Raises ValueError where the first part is shorter than the
    kernel: diffusers itself fails there."""
    layers = tuple(map(tuple, layers))
    return _split_peak(layers, layers, _split_groups(layers, layers), 0.0, element_bytes, width, height, batch)


def _split_groups(a: tuple, b: tuple) -> tuple:
    """The layers of a knot pair grouped by (scale, padding), each group with the largest input elements per
    padded pixel at ``a`` and at ``b`` and the largest growth from one to the other: a bound that skips a whole
    group whose inputs cannot reach 2^30 elements (most groups at most sizes)."""
    groups: dict = {}
    for j, (x, y) in enumerate(zip(a, b)):
        groups.setdefault((x[1], x[2]), []).append(j)
    return tuple((scale, pad, max(a[j][0] for j in idx), max(b[j][0] for j in idx),
                  max(0.0, *(b[j][0] - a[j][0] for j in idx)), tuple(idx)) for (scale, pad), idx in groups.items())


def _split_peak(a: tuple, b: tuple, groups: tuple, u: float, element_bytes: int, width: int, height: int,
                batch: int) -> float:
    """:func:`split_peak_bytes` of the layers ``u`` of the way from ``a`` to ``b`` (matched layer by layer; scale,
    padding and kernel equal; ``groups`` from :func:`_split_groups`), interpolating a layer only once its input
    could reach 2^30 elements."""
    best = 0.0
    area = width * height
    grow = u - 1.0 if u > 1.0 else 0.0
    for scale, pad, ca, cb, slope, idx in groups:
        padded = batch * (width / scale + 2 * pad) * (height / scale + 2 * pad)
        if padded * ((ca if ca > cb else cb) + slope * grow) < SPLIT_INPUT_ELEMENTS * (1 - 1e-9):
            continue  # no input of this group reaches 2^30 elements (linear in u: the ends bound it on [0, 1];
            # the slack keeps a rounding of the bound from skipping a layer the exact test below would split)
        for j in idx:
            x, y = a[j], b[j]
            n = padded * (x[0] + (y[0] - x[0]) * u)
            if n <= SPLIT_INPUT_ELEMENTS:
                continue
            peak = _split_layer_peak(x, y, u, n, element_bytes, area, batch)
            if peak > best:
                best = peak
    return best


def _split_layer_peak(x: tuple, y: tuple, u: float, n: float, element_bytes: int, area: int, batch: int) -> float:
    """One split layer's peak (see :func:`split_peak_bytes`), ``u`` of the way from ``x`` to ``y``, for an input of
    ``n`` elements."""
    kt = x[4]
    parts = int(n / SPLIT_INPUT_ELEMENTS) + 1
    frames = int(x[3] + (y[3] - x[3]) * u + 0.999999)  # between knots: whole frames, rounded up
    size = -(-frames // parts)  # torch.chunk: parts of ceil(frames / parts), as many as that fills
    if size < kt:
        raise Unrunnable(f"diffusers cannot run this: a {kt}-frame convolution's input of {n:,.0f} elements "
                         f"is split into parts of {size} frame(s), shorter than its kernel")
    pieces = -(-frames // size)
    copies = (frames - size + (pieces - 1) * (kt - 1)) / frames * n if kt > 1 else 0.0
    o, live_px, live_base = (p + (q - p) * u for p, q in zip(x[5:8], y[5:8]))
    return batch * (live_px * area + live_base) + (copies + batch * o * area) * element_bytes


def split_compatible(a: list | tuple, b: list | tuple) -> bool:
    """Whether two knots' split layers can be interpolated: as many, each of the same scale, padding and kernel."""
    return len(a) == len(b) and all(x[1] == y[1] and x[2] == y[2] and x[4] == y[4] for x, y in zip(a, b))


def _split_at(split: tuple, knots: tuple, width: int, height: int, batch: int, frames: int) -> float:
    """:func:`split_peak_bytes` at ``frames``: each layer's elements, frames, output and live bytes linear between
    knots and extrapolated along the last segment past the last knot (a clip's frames flow through the same
    layers; a file whose last two knots list different layers is refused). Between two knots that list different
    layers, the larger of the two knots' peaks (CogVideoX's 9 and 17 frames: no clip lies between them)."""
    eb, per_knot, knot_groups, segment_groups = split
    i, u = _segment(knots, frames)
    if i == 0 or u == 1.0:
        return _split_peak(per_knot[i], per_knot[i], knot_groups[i], 0.0, eb, width, height, batch)
    a, b = per_knot[i - 1], per_knot[i]
    if segment_groups[i] is None:  # the two knots list different layers
        return max(_split_peak(a, a, knot_groups[i - 1], 0.0, eb, width, height, batch),
                   _split_peak(b, b, knot_groups[i], 0.0, eb, width, height, batch))
    return _split_peak(a, b, segment_groups[i], u, eb, width, height, batch)


def _segment(knots: tuple, frames: int) -> tuple[int, float]:
    """(i, u): ``frames`` lies u of the way from knot i - 1 to knot i (u > 1 past the last knot); (0, 0.0) at or
    before the first knot, or with one knot."""
    n = len(knots)
    if n == 1 or frames <= knots[0]:
        return 0, 0.0
    i = 1
    while i < n - 1 and knots[i] < frames:
        i += 1
    return i, (frames - knots[i - 1]) / (knots[i] - knots[i - 1])


def output_per_pixel(c: tuple, frames: int) -> float | None:
    """Bytes per pixel of one sample's output at ``frames`` (interpolated between knots as :func:`frame_terms`),
    from an untiled compiled structure; None where the structure does not carry it."""
    o = c[6]
    if not o:
        return None
    i, u = _segment(c[1], frames)
    return o[0] if i == 0 else o[i - 1] + (o[i] - o[i - 1]) * u


def frame_terms(c: tuple, frames: int) -> tuple[float, float, float]:
    """(a, q, base) of an untiled compiled structure at ``frames``: the knots' values, linear between knots and
    extrapolated along the last segment past the last knot (by then the growth is the output clip's). Past the
    last knot the bytes per pixel also grow at least as the output does and reach at least twice the output (a
    clip decoded in chunks keeps each chunk's output, then concatenates them): CogVideoX's decode is flat from 17 to
    65 frames, where the first chunk's working set leads, and at 64x64 x 2001 frames dry-runs 233 MB, which the
    flat segment priced 188 MB (the outputs before the last chunk are 47 MB). A structure
    marked ``extrapolate: quadratic`` (the math path's attention peak, whose scores can span frames: Mochi's
    temporal attention) takes, past its last knot, the larger of that and the parabola through its last three
    knots, term by term."""
    knots, a_, q_, b_ = c[1], c[2], c[3], c[4]
    n = len(knots)
    i, u = _segment(knots, frames)
    if i == 0:
        return a_[0], q_[0], b_[0]
    lin = (a_[i - 1] + (a_[i] - a_[i - 1]) * u, q_[i - 1] + (q_[i] - q_[i - 1]) * u,
           b_[i - 1] + (b_[i] - b_[i - 1]) * u)
    out = c[6]  # the output's bytes per pixel per knot (empty where the structure lacks them)
    if frames > knots[-1] and len(out) == n >= 2:
        grown = out[-2] + (out[-1] - out[-2]) * u  # the output clip's bytes per pixel, extrapolated
        a = max(lin[0], a_[-1] + grown - out[-1], 2 * grown)
        lin = (a, lin[1], lin[2])
    if not (len(c) > 7 and c[7] and n >= 3 and frames > knots[-1]):
        return lin
    x0, x1, x2 = knots[-3], knots[-2], knots[-1]  # Lagrange weights of the last three knots at ``frames``
    w0 = (frames - x1) * (frames - x2) / ((x0 - x1) * (x0 - x2))
    w1 = (frames - x0) * (frames - x2) / ((x1 - x0) * (x1 - x2))
    w2 = (frames - x0) * (frames - x1) / ((x2 - x0) * (x2 - x1))
    quad = tuple(w0 * v[-3] + w1 * v[-2] + w2 * v[-1] for v in (a_, q_, b_))
    return tuple(p if p > q else q for p, q in zip(lin, quad))  # type: ignore[return-value]


def structure_eval(c: tuple, width: int, height: int, batch: int, frames: int, tile: int | None,
                   terms: tuple[float, float, float] | None = None,
                   uterms: tuple[float, float, float] | None = None) -> float:
    """The dry-run peak of a compiled structure (see :func:`structure_bytes`); ``terms`` and ``uterms``: the
    :func:`frame_terms` at ``frames`` of its piece and of its second area piece, when the caller has them."""
    if c[0]:
        wn, cl = c[6], c[10]
        if cl is not None and frames > 1:
            v = batch * clips_peak(cl, frames, width * height, _tiled_clip(c, width, height, cl[0], tile))
        elif wn is not None and len(temporal_windows(*wn[:4], frames)) > 1:
            v = batch * window_peak(wn, frames, width * height, lambda n: _tiled_clip(c, width, height, n, tile))
        else:
            v = batch * _tiled_clip(c, width, height, frames, tile)
        return v if v > 0 else 0.0
    cl = c[10]
    if cl is not None and frames > 1:  # whole clips one after another, each the op at the clip's frames
        v = batch * clips_peak(cl, frames, width * height, _untiled_eval(c, width, height, 1, cl[0], None, None))
        return v if v > 0 else 0.0
    return _untiled_eval(c, width, height, batch, frames, terms, uterms)


def _untiled_eval(c: tuple, width: int, height: int, batch: int, frames: int,
                  terms: tuple[float, float, float] | None, uterms: tuple[float, float, float] | None) -> float:
    """:func:`structure_eval` of an untiled compiled structure for a clip run whole."""
    area = width * height
    up = c[8]
    if up is not None and area > up[0]:  # the second area piece (a video model's large frames)
        a, q, b = uterms or frame_terms(up[1], frames)
    else:
        a, q, b = terms or frame_terms(c, frames)
    if area < c[5]:
        area = c[5]
    v = batch * (a * area + q * area * area + b)
    if c[9] is not None:  # the peak while a split convolution joins its parts, where higher
        sp = _split_at(c[9], c[1], width, height, batch, frames)
        if sp > v:
            v = sp
    return v if v > 0 else 0.0


def tile_working_set(ws: tuple, frames: int) -> Callable[[int, int], float]:
    """What the tile at work needs (bytes) at (width, height), for a class whose tiles each run the untiled op
    (``tile_working_set``, compiled): that op's structure at the tile's size, memoised (a loop has at most four
    tile shapes, its edges cut)."""
    seen: dict[tuple[int, int], float] = {}

    def working(w: int, h: int) -> float:
        v = seen.get((w, h))
        if v is None:
            v = seen[(w, h)] = structure_eval(ws, w, h, 1, frames, None)
        return v
    return working


def _tiled_clip(c: tuple, width: int, height: int, frames: int, tile: int | None) -> float:
    """One sample's dry-run peak of a compiled tiled structure for a clip run whole (see :func:`structure_bytes`)."""
    i, u = _segment(c[1], frames)  # a clip's coefficients: linear between knots, past the last along the last
    k = c[2][i]
    if i:
        p = c[2][i - 1]
        k = tuple(x + (y - x) * u for x, y in zip(p, k))
    a, s, o = (x if x > 0 else 0.0 for x in k[:3])  # extrapolated past the last knot: never negative
    q = k[4] if len(k) > 4 and k[4] > 0 else 0.0
    working = None if c[9] is None else tile_working_set(c[9], frames)
    area, stored, total, u = tiled_peak_terms(width, height, tile, c[3], c[4], a, s, c[5], q, c[7],  # type: ignore[arg-type]
                                              working)
    loop = a * area + q * area * area + u + s * stored
    assembly = s * total + o * width * height  # the tiles, then the blend and cat
    return (loop if loop > assembly else assembly) + k[3] + c[8] * width * height * frames  # + what it holds


def temporal_windows(decode: bool, min_frames: int, stride: int, factor: int, frames: int) -> list[tuple[int, int, int]]:
    """diffusers' temporal tiling of a clip of ``frames`` sample frames (HunyuanVideo's ``_temporal_tiled_decode``
    and ``_temporal_tiled_encode``, windows of ``min_frames`` + 1 frames ``stride`` apart; in latent frames,
    divided by the temporal ``factor``, for decode): per window (the sample frames it runs, the output frames it
    keeps until the end, the output frames it adds to the result). Each window's output is kept whole (its first
    frame dropped by a view) until the kept parts are concatenated. A clip of at most ``min_frames`` frames (latent
    frames for decode) is one window: diffusers runs it whole."""
    out = []
    if decode:
        latent, l_min, l_stride = (frames - 1) // factor + 1, min_frames // factor, stride // factor
        if latent <= l_min:
            return [(frames, frames, frames)]
        for i in range(0, latent, l_stride):
            n = (min(latent, i + l_min + 1) - i - 1) * factor + 1
            out.append((n, n, min(n - (1 if i else 0), stride + (0 if i else 1))))
    else:
        l_stride = stride // factor
        if frames <= min_frames:
            kept = (frames - 1) // factor + 1
            return [(frames, kept, kept)]
        for i in range(0, frames, stride):
            n = min(frames, i + min_frames + 1) - i
            kept = (n - 1) // factor + 1
            out.append((n, kept, min(kept - (1 if i else 0), l_stride + (0 if i else 1))))
    return out


def clips_peak(clips: tuple, frames: int, area: int, clip_peak: float) -> float:
    """One sample's peak of an encode run in whole clips one after another (MiniMax-H3's ``_encode``; ``clips``:
    frames per clip, a clip's output bytes per pixel, the input's bytes per pixel and frame): the clip is padded up
    to n clips by repeating its last frame, the repeat and the padded copy held to the end, and each clip's output
    is kept until all are concatenated, so ``held + max(a clip's peak (``clip_peak``) + the n - 1 outputs before
    the last, the n outputs + their concatenation)``."""
    cf, out, pad = clips
    n = -(-frames // cf)
    extra = n * cf - frames
    held = pad * area * (n * cf + extra) if extra else 0.0
    loop = clip_peak + (n - 1) * out * area
    assembly = 2 * n * out * area
    return held + (loop if loop > assembly else assembly)


def window_peak(windows: tuple, frames: int, area: int, clip_peak: Callable[[int], float]) -> float:
    """One sample's peak of a clip run in temporal windows (``windows``: decode?, min frames, stride, temporal
    factor, output bytes per pixel and output frame): ``max(max over windows (its clip's peak + the outputs of the
    windows before it), all the outputs + the concatenated result)``, ``clip_peak(n)`` the peak of a clip of n
    frames run whole."""
    decode, min_frames, stride, factor, per = windows
    best, kept = 0.0, 0.0
    added = 0
    peaks: dict[int, float] = {}  # the windows run clips of two or three lengths: each priced once (a long clip
    for n, keep, add in temporal_windows(decode, min_frames, stride, factor, frames):  # has thousands of windows)
        peak = peaks.get(n)
        if peak is None:
            peak = peaks[n] = clip_peak(n)
        v = peak + kept
        best = v if v > best else best
        kept += per * area * keep
        added += add
    assembly = kept + per * area * added
    return best if best > assembly else assembly


LINEAR_ATTENTION_BASE = 0.01  # the base, as a share of the peak at area_min, under which an attention is linear


def attention_eval(ac: tuple, w: int, h: int, b: int, f: int, terms: tuple | None = None) -> float:
    """The math path's attention peak (bytes) of a compiled attention structure ``ac`` at ``w`` x ``h`` px, ``b``
    samples, ``f`` frames. Below the smallest size it was derived on (``area_min``, 48 latent px a side): where its
    bytes per pixel grow from there to 4x that area (the score matrices lead: FLUX.2's encode 368, 512 and 736 B/px
    at 32, 48 and 64 latent px), its peak there scaled by the area, which bounds them below; else (Mochi's encode
    at 13 frames, whose attention over frames runs in chunks: 1.48x the bytes per pixel at 48 latent px as at 64)
    that peak whole. The whole peak had priced Qwen-Image's 256 px bf16 encode on the math path at 371 MiB against
    183 fused, where its dry run is the fused one's (``benchmarks/math_small_check.py`` checks both rules on fresh
    dry runs of every architecture with attention at 4-40 latent px). An attention whose bytes are the pixels' x a
    constant (no squared term, a base under :data:`LINEAR_ATTENTION_BASE` of that peak: DC-AE's linear attention,
    640 B/px in bf16 from 4 to 96 latent px) takes its line there, base and all: its bytes per pixel shrink by the
    base alone, and taken whole its 48 latent px peak (1536 px) had priced DC-AE's 256 px math path at 36x its
    attention's dry run, and a 768 px tiled decode above a 1024 px one."""
    v = structure_eval(ac, w, h, b, f, None, terms)
    area, least = w * h, ac[5]
    if area >= least:
        return v
    side = math.isqrt(least)
    if structure_eval(ac, 2 * side, 2 * side, b, f, None, terms) >= 4 * v:  # per pixel, grows with the area
        return v * area / least
    if ac[8] is None and ac[9] is None and ac[10] is None:  # a plain line: no second area piece, split, clips
        a, q, base = terms or frame_terms(ac, f)
        if q == 0 and 0 <= b * base <= LINEAR_ATTENTION_BASE * v:  # linear in the pixels: the line, base and all
            return b * (a * area + base)
    return v


def _dry_peak(cs: tuple, ac: tuple | None, out: tuple | None, w: int, h: int, b: int, f: int, t: int | None,
              terms: tuple | None = None, aterms: tuple | None = None, uterms: tuple | None = None,
              hidden: float = 1.0, apart: bool = True,
              hidden_batch: float | None = None) -> tuple[float, float, float, float]:
    """(dry-run peak, of one sample, and the two with the buffers oneDNN's ops hold) of a request from its compiled
    structures: ``cs`` the fused one for its tiling, ``ac`` the math path's attention structure or None (the larger
    of the two untiled, a tile's attention peak on top of the fused peak tiled: an upper bound), ``out`` the untiled
    structure whose output bytes a sliced batch keeps (None: unsliced). ``terms``/``aterms``/``uterms``: the
    :func:`frame_terms` at ``f`` of ``cs``, ``ac`` and ``cs``'s second area piece, where cached. With oneDNN's buffers
    (``hidden``, :func:`onednn_hidden_factor`): the fused part x ``hidden`` and the attention part as it is (``apart``,
    schema 15: no op of an attention module holds any), else (a file of schema 14 or older) the whole x ``hidden``;
    a sliced batch's kept outputs x ``hidden`` either way (as on the fused path: an upper bound). An unsliced batch
    takes ``hidden_batch`` where given (schema 25, :func:`onednn_hidden_factor` of the batch), its one sample
    ``hidden``.
    The one evaluation of the variants: pricing, the fit and :func:`dry_run_bytes` all call it."""
    sliced = out is not None and b > 1
    bs = 1 if sliced else b  # the samples in flight at once
    fused = structure_eval(cs, w, h, bs, f, t, terms, uterms)

    def peaks(k: float) -> tuple[float, float]:  # (the dry run, with oneDNN's buffers at factor k)
        dry, kdry = fused, k * fused
        if ac is not None:
            if t is None:
                a = attention_eval(ac, w, h, bs, f, aterms)
                dry = a if a > dry else dry
                kdry = (a if a > kdry else kdry) if apart else k * dry
            else:
                side = tile_cover(cs, t)
                a = attention_eval(ac, side, side, bs, f, aterms)
                dry += a
                kdry = kdry + a if apart else k * dry
        return dry, kdry

    dry, kdry = peaks(hidden)
    one, kone = dry / bs, kdry / bs
    if bs > 1 and hidden_batch is not None and hidden_batch != hidden:  # the batch's own factor, one sample's apart
        kdry = peaks(hidden_batch)[1]
    if sliced:
        per = output_per_pixel(out, f)
        if cs[10] is not None and f > 1:  # each sample keeps every clip's output whole (the token_drop slice is
            per = -(-f // cs[10][0]) * cs[10][1]  # a view), where the knots interpolate
        dry = one + (b - 1) * per * w * h  # type: ignore[operator]
        kdry = kone + hidden * (b - 1) * per * w * h  # type: ignore[operator]
    return dry, one, kdry, kone


def _scores_lead(cs: tuple, ac: tuple, out: tuple | None, w: int, h: int, b: int, f: int, t: int | None,
                 hidden: float, terms: tuple | None = None, aterms: tuple | None = None,
                 uterms: tuple | None = None, hidden_batch: float | None = None) -> bool:
    """Whether a math-path request's score matrices lead: its dry run with oneDNN's buffers (``hidden``, schema
    15's rule) above the fused path's; tiled, always (a tile's attention peak is added on top). Where they do not,
    the request is the fused one: the estimator prices it by the plain lines and the fit keeps its point with the
    plain ones (:func:`math_path_leads`)."""
    if t is not None:
        return True
    return _dry_peak(cs, ac, out, w, h, b, f, t, terms, aterms, uterms, hidden, hidden_batch=hidden_batch)[2] > \
        _dry_peak(cs, None, out, w, h, b, f, t, terms, None, uterms, hidden, hidden_batch=hidden_batch)[2]


def math_path_leads(structures: dict, arch: str, op: str, width: int, height: int, *, dtype: str, backend: str,
                    batch: int = 1, frames: int = 1, tile: int | None = None, slicing: bool = False) -> bool:
    """:func:`_scores_lead` of a request from the structures of architecture ``arch`` (False where it has no
    math-path structure: its op holds no attention module, or nothing covers it): what the fit asks of a measured
    math-path point, as the estimator asks of a request."""
    s = structures.get(structure_key(arch, op, dtype, tile is not None))
    u = structures.get(structure_key(arch, op, dtype, False))
    a = structures.get(structure_key(arch, op, dtype, False, "math"))
    if s is None or a is None or (slicing and batch > 1 and not (u and u.get("output_bytes_per_pixel"))):
        return False
    return _scores_lead(compile_structure(s), compile_structure(a),
                        compile_structure(u) if slicing and batch > 1 else None,  # type: ignore[arg-type]
                        width, height, batch, frames, tile, onednn_hidden_factor(backend, u, frames=frames),
                        hidden_batch=onednn_hidden_factor(backend, u, frames=frames, batch=batch))


def tile_cover(cs: tuple | None, t: int) -> int:
    """The px a side one ``t`` px tile of a compiled structure's loop covers: ``t`` x its tile scale (Wan 2.2's
    encode cuts its patchified input: 2), ``t`` where the structure is untiled or absent."""
    return t * cs[7] if cs is not None and cs[0] else t


def _whole_tile(cs: tuple, w: int, h: int, t: int) -> bool:
    """:func:`tile_is_whole` of a compiled structure (False where it is untiled)."""
    if not cs[0]:
        return False
    rows, cols = tile_sides(w, h, t, cs[3], cs[4], cs[5], cs[7])
    return rows[0] >= h and cols[0] >= w


def tile_is_whole(structures: dict, arch: str, op: str, width: int, height: int, tile: int, *, dtype: str) -> bool:
    """Whether diffusers' loop over ``width`` x ``height`` px in ``tile`` px tiles runs a tile that is the whole
    image, its first (:func:`tile_sides` under architecture ``arch``'s tiled structure: its stride rule and scale;
    False where it has none): such a request is the untiled one (``_Plan._as_untiled``), what the fit asks of a
    measured tiled point as the estimator asks of a request. Wan 2.2's encode cuts its patchified input, so a
    256 px tile covers 512 px."""
    s = structures.get(structure_key(arch, op, dtype, True))
    return s is not None and _whole_tile(compile_structure(s), width, height, tile)


def structure_bytes(s: dict, width: int, height: int, batch: int, frames: int, tile: int | None) -> float:
    """The dry-run peak a structure gives (bytes). Untiled: ``batch x (a x area + q x area^2 + base)`` with a, q,
    base given at frame knots, linear between them and extrapolated along the last segment past the last
    knot (by then the growth is the output clip's). Tiled: diffusers' loop, ``max over tiles (a x its area +
    s x the area of the tiles finished before it, s x the area of all tiles + o x width x height) + base``, the
    tile loop, then the assembly (:func:`tiled_peak_terms`), with (a, s, o, base) per frame
    knot (an image: one knot), linear in frames between knots and extrapolated along the last segment; a fifth
    number per knot, where given, is ``q`` of a ``q x its area^2`` term of the tile at work (HunyuanVideo's causal
    mask). A tiled structure with ``windows`` runs a clip longer than one window window by window
    (:func:`window_peak`), each window's clip priced as above; one with ``tile_scale`` cuts its tiles in scaled
    pixels (:func:`tile_sides`) and adds ``held_bytes_per_pixel_frame x width x height x frames``, what it holds
    for the whole op (Wan 2.2's encode: its patchified copy of the clip); a structure, tiled or not, with ``clips``
    runs a clip of more than one frame in whole clips of ``clips.frames`` frames one after another
    (:func:`clips_peak`), each priced as above at that knot (MiniMax-H3's encode). Batch multiplies the whole
    (dry runs scale exactly with batch)."""
    return structure_eval(compile_structure(s), width, height, batch, frames, tile)


def legacy_constants(op: str, dtype: str, backend: str, sd_family: bool) -> tuple[int, int]:
    """(bytes per pixel, extra bytes) of the legacy rule for one key: ``element_size x k[op]`` and the 250 MiB of
    an fp32 SD/SDXL decode."""
    k = LEGACY_K["miopen" if backend == "miopen" else "default"][op]
    return ELEMENT_SIZE[dtype] * k, (LEGACY_FP32_SD_DECODE_EXTRA if (dtype == "fp32" and op == "decode"
                                                                     and sd_family) else 0)


def legacy_bytes(op: str, width: int, height: int, *, dtype: str, backend: str, sd_family: bool, batch: int = 1,
                 frames: int = 1, tile: int | None = None) -> int:
    """The legacy reservation rule. Batch and frames multiply the pixels (the rule predates both)."""
    _check_rule(op, dtype, width, height, batch, frames, tile, backend, {"sd_family": sd_family})
    per_pixel, extra = legacy_constants(op, dtype, backend, sd_family)
    return _legacy(per_pixel, extra, width, height, batch, frames, tile)


def _check_rule(op: str, dtype: str, width: int, height: int, batch: int, frames: int, tile: int | None,
                backend: str | None = None, flags: dict[str, object] | None = None, model: object = None) -> None:
    """The arguments of an app's rule (the legacy one, ComfyUI's, InvokeAI's): ValueError as pricing gives.
    ``backend``: a conv backend (where the rule takes one); ``flags``: arguments that must be bool; ``model``: a
    coefficient document's model entry or None."""
    _check_op(op, dtype, "fused")
    for name, v in (("width", width), ("height", height), ("batch", batch), ("frames", frames),
                    *((("tile", tile),) if tile is not None else ())):
        _positive_int(name, v)
    if backend is not None:
        _check_backend(backend)
    for name, v in (flags or {}).items():
        if not isinstance(v, bool):
            raise ValueError(f"{name} is True or False, got {v!r}")
    if model is not None and not isinstance(model, dict):
        raise ValueError(f"model is a coefficient document's entry of a model (load()['models']['wan21']) or None, "
                         f"got {type(model).__name__}")


def _check_backend(backend: object) -> None:
    """ValueError unless ``backend`` is a conv backend key (pricing, the apps' rules, :func:`detect_allocator`)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")


def _legacy(per_pixel: int, extra: int, width: int, height: int, batch: int, frames: int, tile: int | None) -> int:
    if tile is not None:  # one tile of every sample and frame
        return int((tile * tile * batch * frames * per_pixel + extra) * LEGACY_TILED_FACTOR)
    return width * height * batch * frames * per_pixel + extra


def comfy_bytes(op: str, width: int, height: int, *, dtype: str, amd: bool, batch: int = 1, frames: int = 1,
                model: dict | None = None) -> int:
    """ComfyUI's rules (structure.md), for side-by-side reports. Images: k[op] x H x W x element size x (2.73 on
    AMD GPUs). Video decode, per model (h, w latent, T latent frames): Wan 2.1 ``(2200 if T <= 4 else 7000) x h x
    w x 64 x es``; Wan 2.2 ``8000 x h x w x 256 x es``; HunyuanVideo ``2800 x min(8, (T-1) x 4 + 1) x h x w x 64 x
    es``; LTX-Video ``1200 x T x h x w x 512 x es``. Other video: the image rule over every frame."""
    _check_rule(op, dtype, width, height, batch, frames, None, flags={"amd": amd}, model=model)
    es = ELEMENT_SIZE[dtype]
    m = model or {}
    family, f, tf = m.get("family"), m.get("spatial_factor", 8), m.get("temporal_factor")
    if op == "decode" and tf:
        h, w, t = height // f, width // f, (frames - 1) // tf + 1
        if family == "wan":
            k = 8000 * 256 if f == 16 else (2200 if t <= 4 else 7000) * 64
            return int(k * h * w * es * batch)
        if family == "hunyuanvideo":
            return int(2800 * min(8, (t - 1) * 4 + 1) * h * w * 64 * es * batch)
        if family in ("ltx", "ltx2"):
            return int(1200 * t * h * w * 512 * es * batch)
    return int(COMFY_K[op] * width * height * batch * frames * es * (COMFY_AMD_FACTOR if amd else 1.0))


def invokeai_bytes(op: str, width: int, height: int, *, dtype: str, backend: str, batch: int = 1, frames: int = 1,
                   tile: int | None = None, model: dict | None = None) -> int:
    """InvokeAI's rules (structure.md), for side-by-side reports. Wan: a per-frame term ``H x W x es x K`` (K 2900
    for one frame, 6750 multi-frame decode, 1450 encode) plus the clip ``copies x 3 x frames x H x W x es`` (2
    copies decode, 1 encode); MiniMax-H3 encode ``(17 x H x W x es x 14 + clip) x 1.6``; everything else the
    legacy rule (InvokeAI's own image rule)."""
    _check_rule(op, dtype, width, height, batch, frames, tile, backend, model=model)
    es = ELEMENT_SIZE[dtype]
    m = model or {}
    px = width * height
    if m.get("family") == "wan" and tile is None:
        k = (2900 if frames == 1 else 6750) if op == "decode" else 1450
        copies = 2 if op == "decode" else 1
        return int((px * es * k + copies * 3 * frames * px * es) * batch)
    if m.get("family") == "minimax" and op == "encode" and tile is None:
        return int((17 * px * es * 14 + 3 * frames * px * es) * 1.6 * batch)
    return legacy_bytes(op, width, height, dtype=dtype, backend=backend, sd_family=m.get("family") == "sd",
                        batch=batch, frames=frames, tile=tile)


# ---- pricing ---------------------------------------------------------------------------------------------------

CAST = ("model", "op")  # the weights an app cast to the run dtype: the whole VAE (default), or the half the op runs
# The largest side priced or measured: a 4.3-gigapixel frame. Past it a tiled price's loop over the tiles would
# take seconds a call (sizes from an app's untrusted input must not stall it), and no VAE runs there.
MAX_SIDE = 65536
MAX_FRAMES = 65537  # 45 minutes at 24 fps: 1 + 2^16, the longest clip of a 1 + 4k or 1 + 8k class (Mochi's: 65533)
MAX_BATCH = 4096  # samples of one call, far past any app's batch. Prices are Python ints: at every limit at once
# they pass 2^63 bytes (Wan 2.1's and HunyuanVideo's fp32 decode 7.9e19, HunyuanVideo's math path 1.7e22), so an
# app that stores one in a fixed-width integer compares it to its budget first
TILE_CANDIDATES = (1024, 768, 512, 384, 256)  # largest_tile's default choices, largest first


def _model_list(names: object) -> str:
    """``names`` sorted for a message, the test suite's tiny models (``tiny-*``) apart after the real ones."""
    tiny = sorted(n for n in names if n.startswith("tiny-"))  # type: ignore[attr-defined]
    real = ", ".join(sorted(n for n in names if not n.startswith("tiny-")))  # type: ignore[attr-defined]
    return f"{real} (and the tiny test models {', '.join(tiny)})" if tiny else real


def _positive_int(name: str, v: object) -> int:
    """``v`` as an int (numpy integers too, through ``__index__``), or ValueError."""
    try:
        if isinstance(v, bool):
            raise TypeError
        n = v.__index__()  # type: ignore[attr-defined]
    except Exception:  # an __index__ of its own may raise anything: still the caller's bad value
        raise ValueError(f"{name} must be a positive integer, got {v!r}") from None
    if type(n) is not int or n <= 0:  # an __index__ that returns no int
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return n


def geometry_error(model: str, factor: int, width: int, height: int, tile: int | None) -> str | None:
    """What is wrong with a ``width`` x ``height`` px request (tiles of ``tile`` px, None: untiled) of a model
    whose sizes step by ``factor`` px, or None. The one owner of these rules: pricing and measurement points
    (:func:`vaemem.measuring.point.check_geometry`) both call it. (Wan 2.2's encode, whose loop counts
    patchified pixels, still decides to tile on the sample size: a tile smaller than the image tiles.)"""
    if width % factor or height % factor:
        return f"{model} needs width and height in multiples of {factor} px, got {width}x{height}"
    if max(width, height) > MAX_SIDE:
        return f"width and height must be at most {MAX_SIDE} px, got {width}x{height}"
    if tile is None:
        return None
    if tile <= 0 or tile % factor:
        return f"tile must be a positive multiple of {factor} px for {model}, got {tile!r}"
    if tile >= max(width, height):
        return f"tile {tile} is not smaller than {width}x{height}: no tiling would happen"
    if tile == factor:  # the tiles overlap by at least one latent pixel: a tile of ``factor`` px would not advance
        return (f"tile must be larger than {factor} px for {model} (tiles overlap by at least one latent pixel), "
                f"got {tile}")
    return None


def frame_step(m: dict) -> int | None:
    """The frame step of a model entry of the file (its clips are ``1 + step x k`` frames), None for an image
    model."""
    return None if m["temporal_factor"] is None else (m.get("frame_step") or m["temporal_factor"])


def batch_error(batch: int) -> str | None:
    """What is wrong with ``batch`` (a positive int) past :data:`MAX_BATCH`, or None."""
    return f"batch must be at most {MAX_BATCH} samples, got {batch}" if batch > MAX_BATCH else None


def frames_error(model: str, step: int | None, frames: int) -> str | None:
    """What is wrong with ``frames`` for a model whose clips are ``1 + step x k`` frames (``step`` None: an image
    model), or None."""
    if step is None:
        return None if frames == 1 else f"{model} is an image model: frames must be 1"
    if (frames - 1) % step:
        return (f"{model} takes clips of 1 + {step}k frames ({', '.join(str(1 + step * k) for k in range(4))}, "
                f"...), got {frames}")
    if frames > MAX_FRAMES:
        return f"frames must be at most {MAX_FRAMES}, got {frames}"
    return None


def _check_request(op: str, dtype: str, loaded_dtype: str | None, backend: str, allocator: str, os: str,
                   cast: str, attention: str) -> None:
    """Checks that need no coefficient file: every key names one of its valid choices (a typo is refused, never
    priced by the fallback)."""
    _check_op(op, dtype, attention)
    for name, v in (("backend", backend), ("allocator", allocator), ("os", os), ("cast", cast)):
        if not isinstance(v, str):
            raise ValueError(f"{name} must be a string, got {v!r}")
    if loaded_dtype is not None and not isinstance(loaded_dtype, str):
        raise ValueError(f"loaded_dtype must be a string or None, got {loaded_dtype!r}")
    if loaded_dtype is not None and loaded_dtype not in ELEMENT_SIZE:
        raise ValueError(f"unknown loaded_dtype {loaded_dtype!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    _check_backend(backend)
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of: {', '.join(ALLOCATORS)}")
    if os not in OSES:
        raise ValueError(f"unknown os {os!r}; choose one of: {', '.join(OSES)}")
    if cast not in CAST:
        raise ValueError(f"unknown cast {cast!r}; choose one of: {', '.join(CAST)}")
    if cast != "model" and loaded_dtype is None:  # "model" is the default: any other was given, and meant nothing
        raise ValueError(f"cast={cast!r} says which weights were cast from loaded_dtype: give loaded_dtype")
    if backend == AMX_BACKEND and dtype == "fp32":
        raise ValueError(f"backend {AMX_BACKEND} is oneDNN's half precision on a CPU with AMX tiles; fp32 runs there "
                         f"as onednn")
    cpu = backend in CPU_BACKENDS
    if (allocator in CPU_ALLOCATORS) != cpu:  # what detect_allocator can answer for this backend
        raise ValueError(f"allocator {allocator} does not run with backend {backend}; "
                         f"{'a CPU' if cpu else 'a GPU'} backend takes one of: "
                         f"{', '.join(a for a in ALLOCATORS if (a in CPU_ALLOCATORS) == cpu)}")
    if backend == "mps" and allocator != "native":  # as a measured point's (no CUDA allocator setting reaches Metal)
        raise ValueError(f"allocator {allocator} does not run with backend mps: mps takes native only")
    if not cpu and (backend == "mps") != (os == "darwin"):  # Metal is macOS's GPU backend, and its only one
        raise ValueError(f"backend {backend} does not run on os {os}: "
                         f"{'mps runs on darwin only' if backend == 'mps' else 'the GPU backend of darwin is mps'}")
    problem = cpu_allocator_error(allocator, os) if cpu else None
    if problem:
        raise ValueError(problem)


def cpu_allocator_error(allocator: str, os: str) -> str | None:
    """Why a CPU ``allocator`` is not the one of ``os`` (glibc's on Linux, the system's elsewhere), or None. The
    measuring side refuses the same points before a sweep."""
    if (allocator == "system") == (os == "linux"):
        return (f"allocator {allocator} is not the CPU allocator of os {os}: "
                f"{'glibc or glibc-fixed' if os == 'linux' else 'system'} is")
    return None


def _model(coef: dict, model: object) -> dict:
    """The file's entry of ``model``, or ValueError naming the models it knows."""
    if not isinstance(model, str):
        raise ValueError(f"model must be a string, got {model!r}")
    m = coef["models"].get(model)
    if m is None:
        import difflib  # only on this error: the hot path imports nothing

        names = {n.lower(): n for n in coef["models"]}
        near = difflib.get_close_matches(model.lower(), list(names), n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(names[n] for n in near)}?)" if near else ""
        raise ValueError(f"no model {model!r} in the coefficient file{hint} (it prices the models it was fitted "
                         f"with: measure and fit this one, or layer a file that has it); it has: "
                         f"{_model_list(coef['models'])}")
    return m


class Unrunnable(ValueError):
    """A request the model cannot run as diffusers runs it (an op or tiling it refuses, a split convolution's part
    shorter than its kernel), as against a bad argument or a platform vaemem will not price: where tiling may be
    the remedy (:func:`largest_tile`)."""


def _check_runs(model: str, m: dict, op: str, tiled: bool, batch: int = 1) -> None:
    """:class:`Unrunnable` where ``model`` (its file entry ``m``) refuses ``op``, refuses it tiled, or refuses an
    unsliced ``batch`` of more than one (``refused_batch``: a file without it refuses none; a sliced batch passes
    1) (pricing and :func:`dry_run_bytes`)."""
    if op not in m.get("ops", OPS):
        raise Unrunnable(f"{model} cannot {op}: {m.get('refused', {}).get(op, 'not supported')}")
    if tiled and op in m.get("refused_tiled", {}):
        raise Unrunnable(f"{model} cannot {op} tiled: {m['refused_tiled'][op]}")
    if batch > 1 and op in m.get("refused_batch", {}):
        raise Unrunnable(f"{model} cannot {op} a batch of {batch} unsliced: {m['refused_batch'][op]}")


def _check_op(op: str, dtype: str, attention: str) -> None:
    """The op, dtype and attention path of a request name valid choices (pricing and :func:`dry_run_bytes`)."""
    for name, v in (("op", op), ("dtype", dtype), ("attention", attention)):
        if not isinstance(v, str):
            raise ValueError(f"{name} must be a string, got {v!r}")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of: {', '.join(OPS)}")
    if dtype not in ELEMENT_SIZE:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    if attention not in ATTENTION:
        raise ValueError(f"unknown attention path {attention!r}; choose one of: {', '.join(ATTENTION)}")


class _Plan:
    """What pricing resolves once per request key (model, op, dtype, loaded dtype, platform, tiled, cast,
    attention path): the model's rules, the path (calib, pixel or fallback) and its constants. ``price`` adds only
    the sizes."""

    __slots__ = ("kind", "model", "m", "factor", "step", "image", "cast_bytes", "cast_params", "cs", "line", "own",
                 "variant_own", "variant", "calib", "group", "cref", "arch_video", "legacy", "pixel_line",
                 "clip_bytes", "terms", "ref_terms",
                 "attn", "attn_terms", "out", "up", "uterms", "tile_min", "tile_max", "untiled", "copy", "whole",
                 "amx_bound", "hidden", "hidden_f", "apart", "calls", "batched", "dtype", "backend", "batch_refused")
    # copy: None, or (the untiled fp32 structure or None, its multiplier, op, dtype, backend) of the weight copy

    def __init__(self, coef: dict, model: str, op: str, dtype: str, loaded_dtype: str | None, backend: str,
                 allocator: str, os: str, tiled: bool, cast: str, attention: str, slicing: bool) -> None:
        _check_request(op, dtype, loaded_dtype, backend, allocator, os, cast, attention)
        if type(slicing) is not bool:
            raise ValueError(f"slicing must be True or False, got {slicing!r}")
        models = coef["models"]
        m = _model(coef, model)
        _check_runs(model, m, op, tiled)
        self.model, self.m = model, m
        # the op whose unsliced batch the model cannot run (refused_batch), checked per request, or None
        self.batch_refused = None if slicing or op not in m.get("refused_batch", {}) else op
        self.factor = m["spatial_factor"]
        self.image = m["temporal_factor"] is None
        self.step = frame_step(m)
        self.legacy = legacy_constants(op, dtype, backend, m["family"] == "sd")
        # the decoded clip a video decode must hold (the far-extrapolation floor of a pixel line): 3 x es per pixel
        self.clip_bytes = 0 if self.image or op != "decode" else 3 * ELEMENT_SIZE[dtype]
        self.cast_params, self.cast_bytes = 0, 0
        if loaded_dtype is not None and ELEMENT_SIZE[dtype] > ELEMENT_SIZE[loaded_dtype]:
            if cast == "op" and op not in m.get("op_parameters", {}):
                raise ValueError(f"this coefficient file has no per-op parameter counts for {model}; refit it with "
                                 f"`vaemem fit`, or cast='model'")
            self.cast_params = m["parameters"] if cast == "model" else m["op_parameters"][op]
            self.cast_bytes = self.cast_params * (ELEMENT_SIZE[dtype] - ELEMENT_SIZE[loaded_dtype])
        arch = m["architecture"]
        key = {"architecture": arch, "op": op, "conv_backend": backend, "allocator": allocator, "dtype": dtype,
               "os": os, "tiled": tiled}
        structures = coef.get("structures", {})
        s = structures.get(structure_key(arch, op, dtype, tiled))
        self.cs = None if s is None else compile_structure(s)
        # the smallest tile the tiled structure's dry runs had: below it the basis misses (64 px tiles: 0.73x)
        self.tile_min = s.get("tile_min", 0) if s is not None and s["kind"] == "tiled" else 0
        # the largest, where the basis stops there (HunyuanVideo: past its grid's tiles a causal mask leads)
        self.tile_max = s.get("tile_max") if s is not None and s["kind"] == "tiled" else None
        self.terms: dict = {}  # frames -> frame_terms of cs: a clip length is priced often
        self.up = None if s is None or s["kind"] == "tiled" or "upper" not in s else self.cs[8][1]  # type: ignore
        self.uterms: dict = {}  # frames -> frame_terms of its second area piece
        # the math attention path: the dry-run peak is max(fused structure, attention structure); None where the
        # op has no attention module (the math path changes nothing) or the path is fused
        self.attn, self.attn_terms, a = None, {}, None
        if attention == "math":
            if "attention_ops" not in m:
                raise ValueError(f"this coefficient file does not say which ops of {model} hold attention; refit "
                                 f"it with `vaemem fit` to price the math attention path")
            if op in m["attention_ops"]:
                a = structures.get(structure_key(arch, op, dtype, False, "math"))
                if a is None:
                    raise ValueError(f"no math-attention dry-run structure of {model} {op} {dtype} in this "
                                     f"coefficient file: the math attention path's score matrices cannot be priced")
                self.attn = compile_structure(a)
        # slicing (diffusers' enable_slicing, one sample at a time): the peak of one sample plus the outputs of the
        # samples before it, exact in dry runs; the output's bytes per pixel come from the untiled structure
        self.out = None
        if slicing:
            u = s if not tiled else structures.get(structure_key(arch, op, dtype, False))
            self.out = None if u is None else compile_structure(u)
            if s is not None and (self.out is None or not self.out[6]):
                raise ValueError(f"this coefficient file's structure of {model} {op} {dtype} carries no output "
                                 f"bytes; refit it with `vaemem fit` to price slicing")
        kernel = m.get("kernel", "conv2d")
        self.calib, self.group = _lines(coef, key, kernel)
        # half precision on oneDNN without AMX, the architecture not measured there but on a CPU with AMX tiles (or
        # nothing of its class measured there, but on such a CPU): the lines there, an upper bound (in bf16 the AMX
        # Xeon needs 0.995-1.26x what an AVX512-BF16 EPYC needs at the same points, the 0.995 at HunyuanImage-2.1's
        # resident floor: benchmarks/cross_rig_check.py), before a transfer on this CPU or the fallback
        self.amx_bound = False
        if backend == "onednn" and dtype != "fp32" and self.group is None and \
                (self.calib is None or arch not in self.calib["architectures"]):
            amx = {**key, "conv_backend": AMX_BACKEND}
            calib, group = _lines(coef, amx, kernel)
            if group is not None or (calib is not None and (arch in calib["architectures"] or self.calib is None)):
                self.calib, self.group, key, self.amx_bound = calib, group, amx, True
        # a file of schema 7 or older keys half precision on oneDNN as onednn whatever the CPU had: on a CPU with
        # AMX its lines price as they did, where none says onednn-amx
        if (backend == AMX_BACKEND and coef["schema_version"] < AMX_SCHEMA and self.calib is None
                and self.group is None):
            key = {**key, "conv_backend": "onednn"}
            self.calib, self.group = _lines(coef, key, kernel)
        # a calibration's lines on oneDNN are in the dry run with the buffers its ops hold (onednn_hidden_factor):
        # the untiled structure's on its fused part, the attention peak as it is (from schema 15; before, the math
        # structure's factor as well, on the whole); a tiled request's lines there from schema 10; the factor of the
        # lines' platform (an AMX CPU's lines pricing one without AMX: the AMX rule's)
        self.apart = coef["schema_version"] >= ATTENTION_APART_SCHEMA
        self.hidden = None if tiled and coef["schema_version"] < TILED_FACTOR_SCHEMA else (
            key["conv_backend"], structures.get(structure_key(arch, op, dtype, False)), None if self.apart else a,
            coef["schema_version"] >= NO_AMX_SCHEMA, coef["schema_version"] >= BATCH_FACTOR_SCHEMA)
        self.hidden_f: dict = {}  # (frames, a batch in flight) -> the factor (hidden_at)
        self.own = self.line = self.cref = self.pixel_line = self.ref_terms = self.untiled = self.whole = None
        # the lines of the request's variant beside its own plain line: its own (``sd15/math``), else the other
        # architectures' measured in it; None where it names none or none was measured
        self.variant_own: dict | None = None
        # an op with no attention module runs the math path as the fused one: its plain lines price it
        self.variant = variant_key("math" if a is not None else "fused", slicing)
        self.arch_video = False
        self.copy = None  # the weight copy, priced per request (copy_at): a transfer's line scales it by
        # weight_copy_factor, the fallback adds it with the margin
        copy_s = structures.get(structure_key(arch, op, "fp32", False))
        # the structure whose live bytes at the convolutions' calls the lines are in (call_peak), fp32's from schema
        # 12, half precision's without AMX from 19
        since = CALL_PEAK_SCHEMA if dtype == "fp32" else HALF_CALL_PEAK_SCHEMA
        self.calls = copy_s if coef["schema_version"] >= since and _call_peaks(copy_s or {}) else None
        self.batched = coef["schema_version"] >= BATCH_CALL_PEAK_SCHEMA  # a half-precision batch's too (call_peak)
        self.dtype = dtype
        self.backend = backend
        if s is not None and self.calib is not None:
            self.kind = "calib"
            self.own = self.calib["architectures"].get(arch)
            if self.own is not None and self.variant:
                # its own points of the variant; else the others' (the variant's excess over its dry run is the
                # path's: SD1.5's fp32 encode on the math path needs 1.12x its dry run at 1280 px, where the
                # plain line of FLUX.1, measured fused only, would price 1.05x)
                # per part of the variant measured here (a sliced math request: /math, /sliced, /sliced/math)
                own = {k: ln for k, ln in sorted(self.calib.get("variants", {}).items())
                       if variant_parts(k)[0] == arch and variant_applies(k, self.variant)}
                mine = {variant_parts(k)[1] for k in own}
                others = {k: ln for k, ln in sorted(self.calib.get("variant_transfer_lines", {}).items())
                          if variant_parts(k)[0] != arch and variant_applies(k, self.variant)
                          and variant_parts(k)[1] not in mine}
                self.variant_own = {**own, **others} or None
            self.line = self.own if self.own is not None else self.calib["class"]
            if any(ln.get("weight_copy_factor") or "copy_line" in ln  # the latter: its copy branch's
                   for ln in (self.line, *(self.variant_own or {}).values())):
                if "largest_conv_parameters" not in m:
                    raise ValueError(f"this coefficient file's {model} has no largest_conv_parameters, which its "
                                     f"{backend} line adds; refit it with `vaemem fit`")
                self.copy = (copy_s, 1.0, op, dtype, backend)
            self.arch_video = models.get(arch, m)["temporal_factor"] is not None
            if tiled:
                self.whole = _untiled_bound(coef, model, op, dtype, loaded_dtype, backend, allocator, os, cast,
                                            attention, slicing)
            return
        if self.group is not None:
            self.kind = "pixel"
            self.tile_min, self.tile_max = 0, None  # a measured pixel line prices its own tiles, not the structure's
            g = self.group
            self.pixel_line = (g["slope_bytes_per_pixel"], g.get("tile_slope_bytes_per_tile_pixel", 0.0),
                               g["base_bytes"], g.get("pixels_max"))
            return
        lines = [g for g in coef["groups"] if g["architecture"] == arch] + \
            [c for c in coef.get("calibrations", []) if arch in c["architectures"]]  # this architecture's lines

        def measured(field: str) -> list:  # the values of ``field`` among its lines equal to key in all else
            return sorted({g[field] for g in lines if all(g[k] == key[k] for k in PLATFORM_KEYS if k != field)})

        have = measured("dtype")
        if dtype in have:  # its calibration is here, its structure is not (a file fitted without the dry runs)
            raise ValueError(f"{model} {op} {dtype} is calibrated on {backend}/{allocator}/{os}, but this coefficient "
                             f"file has no dry-run structure to price it; refit it with the dry-run cache "
                             f"(`vaemem fit --traces fits/traces.json`)")
        if have:
            elsewhere = measured("allocator")
            raise ValueError(f"no coefficient line for dtype {dtype} of {model} {op} on {backend}/{allocator}/{os}; "
                             f"measured dtypes there: {', '.join(have)}"
                             + (f"; {dtype} is measured with allocator {', '.join(elsewhere)}" if elsewhere else ""))
        self.kind = "fallback"
        # tiled video without a dry-run structure (a file fitted before its class had one): its untiled price is
        # an upper bound (tiling splits the work: Wan 2.1 bf16 decode at 832x480 dry-runs 684 MiB with 256 px tiles
        # and 2413 with 512 px ones at 17 and 33 frames, against 3894 and 3932 untiled), where the legacy rule would
        # price the frames as pixels (9.6x untiled at 81 frames with 512 px tiles)
        if tiled and s is None and not self.image and structures.get(structure_key(arch, op, dtype, False)):
            self.untiled = _plan(coef, model, op, dtype, loaded_dtype, backend, allocator, os, False, cast, attention,
                                 slicing)
        # a tiled request: its tiles hold fewer live bytes than the whole image where their dry run says so, and
        # the same weights, so the untiled price bounds the fallback's (in the 34 tiled / untiled pairs measured
        # here whose tiles hold less, tiled demand 0.08-0.46x untiled, each within 0.04 of the dry runs' ratio;
        # benchmarks/tiled_untiled_check.py); without it a 1024 px tile of LTX-2 in bf16 on aten was priced 2.1x its
        # measured untiled request, and on an unmeasured cuDNN a 512 px tile of Wan 2.2's 1024 px encode (one tile:
        # its tiles cover 2x their px) 1.25x the untiled fallback
        if tiled and s is not None:
            self.whole = _untiled_bound(coef, model, op, dtype, loaded_dtype, backend, allocator, os, cast,
                                        attention, slicing)
        # a weight-copying backend's copy, which neither the legacy rule nor a dry run sees, with the file's margin
        if backend in WEIGHT_COPY_BACKENDS and "largest_conv_parameters" in m:
            self.copy = (copy_s, 1 + coef.get("margin", 0.0), op, dtype, backend)
        ref = models.get(REFERENCE_MODEL)
        if ref is not None:
            rs = structures.get(structure_key(ref["architecture"], op, dtype, tiled))
            self.cref = None if rs is None else compile_structure(rs)
            self.ref_terms = None if self.cref is None or self.cref[0] else frame_terms(self.cref, 1)

    def price(self, width: object, height: object, batch: object, frames: object, tile: object) -> tuple:
        """(bytes, envelope bytes, dry-run peak or None, legacy floor, note (a pixel line's extrapolation, "capped"
        where the untiled price caps a tiled one, "whole" where a tile is the whole image and the untiled request
        prices it, "floored" where the live floor sets an own line's, "one sample" where a batch takes one
        sample's price), the SD
        family's dry-run peak or 0, the dry-run peak of one sample or None) of one request; ValueError for sizes
        ``vaemem measure`` refuses. explain and working_memory_bytes both call it, so the reasoning and the number
        never part. One method on purpose: it is the hot path."""
        if not (type(width) is int and type(height) is int and type(batch) is int and type(frames) is int
                and width > 0 and height > 0 and batch > 0 and frames > 0):
            width, height, batch, frames = (_positive_int(n, v) for n, v in
                                            (("width", width), ("height", height), ("batch", batch),
                                             ("frames", frames)))
        w, h, b, f, t = width, height, batch, frames, tile
        sliced = self.out is not None and b > 1  # type: ignore[operator]
        sf = self.factor
        if t is not None and type(t) is not int:
            t = _positive_int("tile", t)
        if w % sf or h % sf or t is not None or w > MAX_SIDE or h > MAX_SIDE:  # type: ignore[operator]
            problem = geometry_error(self.model, sf, w, h, t)  # type: ignore[arg-type]
            if problem:
                raise ValueError(problem)
            if t is not None and t < self.tile_min:  # type: ignore[operator]
                raise ValueError(f"{self.model} is priced tiled from {self.tile_min} px tiles up (the smallest tile "
                                 f"its dry-run structure was derived on), got {t}")
            if t is not None and self.tile_max is not None and t > self.tile_max:
                raise ValueError(f"{self.model} is priced tiled up to {self.tile_max} px tiles (the largest its "
                                 f"dry-run structure was derived on: past it another term leads), got {t}")
        if (f != 1 if self.image else (f - 1) % self.step or f > MAX_FRAMES):  # type: ignore[operator]
            raise ValueError(frames_error(self.model, self.step, f))
        if b > MAX_BATCH:  # type: ignore[operator]
            raise ValueError(batch_error(b))  # type: ignore[arg-type]
        if b > 1 and self.batch_refused is not None:  # type: ignore[operator]
            _check_runs(self.model, self.m, self.batch_refused, False, b)  # type: ignore[arg-type]
        kind = self.kind
        if kind == "pixel":
            slope, tile_slope, base, top = self.pixel_line  # type: ignore[misc]
            pixels = w * h * b * f  # type: ignore[operator]
            attn = self._attention_on_top(w, h, b, f, t)
            env = int(slope * pixels + tile_slope * (t * t if t else 0) + base) + attn
            note, raised = "", 0
            if top is not None and pixels > top:  # honest about extrapolation: the line is only measured so far
                note = f", extrapolated to {pixels / top:.1f}x its largest measured size"
                if pixels > 2 * top:  # far outside: never below the legacy rule (a clip: of one frame, plus the clip)
                    floor = (_legacy(*self.legacy, w, h, b, f if self.image else 1, t) + self.clip_bytes * pixels
                             + attn)  # the legacy rule holds no score matrices either
                    if floor > env:
                        env = raised = floor
                        note += ", raised to the legacy rule" + ("" if self.image else
                                                                 " of one frame plus the decoded clip")
            return env + self.cast_bytes, env, None, raised, note, 0.0, None
        cs = self.cs
        if cs is None and self.untiled is not None:  # unstructured tiled video: priced untiled, an upper bound
            total, env, dry, floor, _, ref, one = self.untiled.price(w, h, b, f, None)
            return total, env, dry, floor, "", ref, one
        if cs is None:  # the fallback without a structure: the legacy rule, frames as pixels, + the weight copy
            floor = _legacy(*self.legacy, w, h, b, f, t) + self._attention_on_top(w, h, b, f, t)
            env = floor + self.copy_at(w, h, b, f, t)
            return env + self.cast_bytes, env, None, floor, "", 0.0, None
        dry, one, kdry, kone = self.dry_runs(w, h, b, f, t)
        if t is not None and self.whole is not None and self.tile_is_whole(w, h, t):
            whole = self._as_untiled(w, h, b, f, dry, one)
            if whole is not None:
                return whole
        copy = 0 if self.copy is None else self.copy_at(w, h, 1 if sliced else b, f, t)
        if kind == "calib":
            kd, k1, cp = call_dry_runs(self.calls, self.dtype, self.backend, t is not None, b, w, h, f, kdry, kone,
                                       self.batch_in_call_peak(b))
            if cp is not None:  # the transient is in them (schema 12, half precision 19)
                copy = 0
            # a batch holds at least one sample's call peak: where one sample is priced by it and the batch by its
            # line plus the transient, never below one sample (LTX-2's fp32 encode at 128x128: 487 MiB for two, 490
            # for one)
            single = self.price(w, h, 1, f, t)[1] if b > 1 and self.calls is not None else 0
            if self.own is not None:
                line = self.own if self.variant_own is None else self.own_line(kd, k1, f, w * h, copy, dry,
                                                                               self.variant_at(w, h, b, f, t))[0]
                v, floored = _floored(line, kd, k1, self.arch_video and f == 1, w * h, copy, dry)
                env = int(v)
                if single > env:
                    return single + self.cast_bytes, single, dry, 0, "one sample", 0.0, one
                # its own tiled line, of few points, can price above its own untiled one where the tiles hold no
                # less (in schema 15 Wan 2.2's fp32 encode, whose two tiled points then were tiles that are the
                # whole image, priced 640 px x 17 frames in 320 px tiles 1.09x untiled)
                whole = None if floored else self._whole(w, h, b, f, t, dry, env, measured=True)
                if whole is not None:
                    return whole[:6] + (one,)
                return env + self.cast_bytes, env, dry, 0, "floored" if floored else "", 0.0, one
            v, _, floored = _transfer(self.calib, kd, k1, self.arch_video and f == 1, w * h, copy, dry,
                                      self.variant_at(w, h, b, f, t), self.own_untiled(f), t is None)
            env = int(v)
            if single > env:
                return single + self.cast_bytes, single, dry, 0, "one sample", 0.0, one
            # "floored": a floor set it, which caps no tiled request (_whole)
            whole = self._whole(w, h, b, f, t, dry, env, measured=True)
            return (env + self.cast_bytes, env, dry, 0, "floored" if floored else "", 0.0, one) if whole is None \
                else whole[:6] + (one,)
        # the fallback: a clip's legacy rule is of one frame; a sliced batch is one sample's price x dry / dry of one
        bs = 1 if sliced else b
        floor = _legacy(*self.legacy, w, h, bs, 1, t)
        ref = 0.0 if self.cref is None else structure_eval(self.cref, w, h, bs, 1, t, self.ref_terms)
        tiles = t is not None and ref
        if tiles:  # of one sample where a batch is sliced
            rule = self.tile_rule(t, bs, f, one if sliced else dry, floor)[0] * (dry / one if sliced else 1.0)
        if sliced:
            floor = int(floor * dry / one)
            ref = ref * dry / one
        if not tiles:
            rule = floor * dry / ref if ref else 0.0
        env = max(int(rule), int(FALLBACK_MIN_DRY_FACTOR * dry))
        if env < floor:
            env = floor
        whole = self._whole(w, h, b, f, t, dry, env + copy, measured=False)
        if whole is not None:
            return whole[:5] + (ref, one)
        return env + copy + self.cast_bytes, env + copy, dry, floor, "", ref, one

    def tile_rule(self, t: int, b: int, f: int, d: float, floor: int) -> tuple[float, float, float]:
        """(the fallback's rule for a tiled request, one tile's dry-run peak, the SD family's) in bytes, where the
        request's dry-run peak is ``d`` and the legacy rule of its ``t`` px tile ``floor``: that rule scaled by the
        dry runs of an image of one tile (the working set the legacy rule prices), plus what assembling the tiles
        adds to the request's dry run beyond one tile x FALLBACK_MIN_DRY_FACTOR (plain tensors, no convolution's
        workspace: the seeds' lowest demand / dry run, which no tiled GPU point has tested). Why not the request's
        own dry runs' ratio: the assembly, the same bytes for every architecture, takes it towards 1 as the image
        grows, and CogView4's fp16 decode in 256 px tiles on an unmeasured cuDNN was priced 683 MiB at 512 px and
        479 at 3072. A tile of a
        scaled loop covers k x its px a side (Wan 2.2's encode: 2), and so does the rule: of k^2 tiles, against an
        SD tile of that side, so that the first image past the one tile that is the whole image prices no less."""
        side = tile_cover(self.cs, t)
        d_t = self.dry_runs(side, side, b, f, t)[0]
        ref_t = structure_eval(self.cref, side, side, b, 1, side, self.ref_terms)  # type: ignore[arg-type]
        scaled = floor * (side // t) ** 2 * (d_t / ref_t if ref_t and d_t > ref_t else 1.0)
        return scaled + FALLBACK_MIN_DRY_FACTOR * (d - d_t if d > d_t else 0.0), d_t, ref_t

    def _frame_terms(self, f: int) -> tuple:
        """The :func:`frame_terms` at ``f`` frames of the fused structure, the attention one and the second area
        piece (None where a structure is tiled or absent), cached: a clip length is priced often."""
        cs, ac, up = self.cs, self.attn, self.up
        return (None if cs[0] else self.terms.get(f) or self.terms.setdefault(f, frame_terms(cs, f)),  # type: ignore
                None if ac is None else self.attn_terms.get(f) or self.attn_terms.setdefault(f, frame_terms(ac, f)),
                None if up is None else self.uterms.get(f) or self.uterms.setdefault(f, frame_terms(up, f)))

    def hidden_at(self, f: int, b: int = 1) -> float:
        """The factor from the dry-run peak of a clip of ``f`` frames (``b``: samples in flight at once) to the one
        this plan's lines are in (:func:`onednn_hidden_factor`; 1 where they are in the plain one), cached."""
        k = self.hidden_f.get((f, b > 1))
        if k is None:
            if self.hidden is None:
                k = 1.0
            else:
                backend, untiled, math_path, no_amx, batches = self.hidden
                # a batch's own factor where the lines are of schema 25 (a layered document's structure may be newer)
                k = onednn_hidden_factor(backend, untiled, math_path, no_amx=no_amx, frames=f,
                                         batch=b if batches else 1)
            self.hidden_f[f, b > 1] = k
        return k

    def dry_runs(self, w: int, h: int, b: int, f: int, t: int | None) -> tuple[float, float, float, float]:
        """(dry-run peak, of one sample, the two with oneDNN's buffers) of a request this plan has a structure for
        (:func:`_dry_peak`; an unsliced batch with its factor of a batch)."""
        return _dry_peak(self.cs, self.attn, self.out, w, h, b, f, t,  # type: ignore[arg-type]
                         *self._frame_terms(f), self.hidden_at(f), self.apart, self.hidden_at(f, self._flight(b)))

    def _flight(self, b: int) -> int:
        """The samples a request of batch ``b`` runs at once: 1 where this plan's batch is sliced."""
        return 1 if self.out is not None else b

    def batch_in_call_peak(self, b: int) -> bool:
        """Whether a batch of ``b`` may be priced in its call peak (:func:`call_peak`'s ``batched``): from schema
        21, unsliced (a sliced batch runs one sample a call)."""
        return self.batched and not (self.out is not None and b > 1)

    def variant_at(self, w: int, h: int, b: int, f: int, t: int | None) -> str:
        """The request's variant: a sliced batch of one is the plain request, and (from schema 15) a math-path one
        whose score matrices do not lead, its dry run with oneDNN's buffers the fused path's, the fused request: a
        variant's lines were fitted where they may lead, and a line of few points, carried below them, prices what
        the convolutions hold by another law (Wan 2.1's two fp32 math-path encodes, 768 px led by its convolutions
        and 1024 px by its score matrices: 0.895 x dry run + 850 MiB, Wan 2.2's 256 px x 9 frames at 2.2x its
        fused price)."""
        variant = self.variant.replace("/sliced", "") if b == 1 else self.variant
        if "/math" in variant and self.apart and self.cs is not None and self.attn is not None and not _scores_lead(
                self.cs, self.attn, self.out, w, h, b, f, t, self.hidden_at(f), *self._frame_terms(f),
                hidden_batch=self.hidden_at(f, self._flight(b))):
            variant = variant.replace("/math", "")
        return variant

    def own_line(self, dry: float, dry1: float, frames: int, frame_pixels: int, copy: float,
                 live: float, variant: str) -> tuple[dict, str]:
        """(the line that prices a measured architecture's request, its name: "" for its own plain line, else a
        variant's key such as ``sd15/math``) at the arguments of :func:`_floored`: the highest of its plain line and
        its lines of the request's ``variant`` (:meth:`variant_at`; ``variant_own``). Why the highest: a variant
        measured at few sizes never prices below the plain points' line, and one never measured on the architecture
        never below the path's measured excess."""
        best: tuple[float, dict, str] = (-1.0, self.own, "")  # type: ignore[assignment]
        args = (dry, dry1, self.arch_video and frames == 1, frame_pixels, copy, live)
        for name, line in [("", self.own), *[(k, ln) for k, ln in (self.variant_own or {}).items()
                                             if variant_applies(k, variant)]]:
            v = _floored(line, *args)[0]  # type: ignore[arg-type]
            if v > best[0]:
                best = (v, line, name)  # type: ignore[assignment]
        return best[1], best[2]

    def _whole(self, w: int, h: int, b: int, f: int, t: int, dry: float, env: int, measured: bool) -> tuple | None:
        """The untiled request's price where it caps a tiled one whose envelope is ``env`` bytes (``price``'s
        tuple, noted "capped"): its tiles' dry-run peak ``dry`` is at most the whole image's, and that prices less.
        ``measured``: only an untiled price from the architecture's own line caps (a transfer's tiles: the untiled
        fallback is no better evidence than the transfer). Never a price the live floor set: a lower bound, not a
        measurement's line (HunyuanVideo 1.5's fp32 decode at 832x480 x 33 frames)."""
        u = self.whole
        if u is None or (measured and u.own is None):
            return None
        try:
            whole = u.price(w, h, b, f, None)
        except ValueError:  # diffusers cannot run it untiled: nothing bounds the tiles
            return None
        if whole[4] == "floored" or whole[1] >= env or dry > whole[2]:
            return None
        return whole[0], whole[1], dry, whole[3], "capped", 0.0, None  # the untiled request's legacy floor

    def _as_untiled(self, w: int, h: int, b: int, f: int, dry: float, one: float) -> tuple | None:
        """A tiled request a tile of which is the whole image (:meth:`tile_is_whole`), priced as the untiled request
        (``price``'s tuple, noted "whole"): its price x its tiles' dry-run peak ``dry`` over the whole image's. Why:
        diffusers' loop runs the untiled op on its first tile and crops of it after, and the outputs the blend
        keeps are in the tiled dry run (Wan 2.2's fp32 encode at 288 and 512 px in 256 px tiles, which cover 512
        px: 220.5 and 636.5 MiB tiled and untiled alike, campaign 24); the fit takes such a point as an untiled one
        (:func:`vaemem.fit.coefficients.priced_as`). None where diffusers cannot run it untiled, or the untiled
        request is the fallback where the tiled one is measured (a transfer is better evidence)."""
        u = self.whole
        if u is None or (u.kind == "fallback" and self.kind == "calib"):
            return None
        try:
            total, env, whole_dry, floor, _, ref, _ = u.price(w, h, b, f, None)
        except ValueError:
            return None
        scaled = int(env * max(1.0, dry / whole_dry))  # never below the untiled request: campaign 24 measured both
        return scaled + total - env, scaled, dry, floor, "whole", ref, one

    def own_untiled(self, f: int) -> dict | None:
        """A tiled request's (of ``f`` frames) architecture's own untiled line on its platform
        (:func:`transfer_bytes`), else None; None also where the two plans' lines are in different dry runs (the
        tiled one an AMX CPU's upper bound, the untiled one measured without AMX: other oneDNN buffers; or the tiled
        lines of a file of schema 9, in the plain dry run, where the untiled structure has a factor above 1)."""
        u = self.whole
        if u is None or u.amx_bound != self.amx_bound or u.hidden_at(f) != self.hidden_at(f):
            return None
        return u.own

    def tile_is_whole(self, w: int, h: int, t: int) -> bool:
        """:func:`tile_is_whole` of a request under this plan's tiled structure."""
        return self.cs is not None and _whole_tile(self.cs, w, h, t)

    def copy_at(self, w: int, h: int, b: int, f: int, t: object) -> int:
        """The weight copy of a request (batch ``b`` per call), the fallback's with the margin: 0 where none is
        priced (:func:`conv_transient_bytes`)."""
        if self.copy is None:
            return 0
        s, mult, op, dtype, backend = self.copy
        return int(conv_transient_bytes(self.m, s, op, dtype, backend, w, h, b, f, t is not None) * mult)

    def _attention_on_top(self, w: int, h: int, b: int, f: int, t: object) -> int:
        """Where no fused structure covers a math-path request (a pixel line, the legacy rule), the attention
        structure's peak of the tile or image, added on top: an upper bound."""
        ac = self.attn
        if ac is None:
            return 0
        if t is None:
            side_w, side_h = w, h
        else:  # a tile of a scaled loop covers k x its px a side (Wan 2.2's encode), as in _dry_peak
            cs = self.cs
            side_w = side_h = tile_cover(cs, t)  # type: ignore[arg-type]
        terms = self.attn_terms.get(f) or self.attn_terms.setdefault(f, frame_terms(ac, f))
        return int(attention_eval(ac, side_w, side_h, b, f, terms))  # type: ignore[arg-type]


def _lines(coef: dict, key: dict, kernel: str) -> tuple[dict | None, dict | None]:
    """(the calibration of ``key``'s platform and ``kernel`` class, the pixel-line group of ``key``), None where the
    file has none."""
    return coef["_calib"].get(calibration_id(key, kernel)), coef["_index"].get(group_id(key))


def _untiled_bound(coef: dict, model: str, op: str, dtype: str, loaded_dtype: str | None, backend: str,
                   allocator: str, os: str, cast: str, attention: str, slicing: bool) -> _Plan | None:
    """A tiled request's untiled plan where a dry run prices it (``_Plan.whole``), else None."""
    try:
        u = _plan(coef, model, op, dtype, loaded_dtype, backend, allocator, os, False, cast, attention, slicing)
    except ValueError:
        return None
    return u if u.cs is not None and u.kind in ("calib", "fallback") else None


def _plan(coef: dict, model: str, op: str, dtype: str, loaded_dtype: str | None, backend: str, allocator: str,
          os: str, tiled: bool, cast: str, attention: str = "fused", slicing: bool = False) -> _Plan:
    key = (model, op, dtype, loaded_dtype, backend, allocator, os, tiled, cast, attention, slicing)
    plans = coef["_plans"]
    if slicing is not True and slicing is not False:  # 0 and 1.0 hash as False and True: a hit would skip the check
        return _Plan(coef, *key)
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable argument: _Plan says which, as a ValueError
        return _Plan(coef, *key)
    if plan is None:
        plan = plans[key] = _Plan(coef, *key)
    return plan


def _doc(coefficients: object) -> dict:
    """The validated document for a ``coefficients=`` argument (the hot path: a cache hit)."""
    if coefficients is None:
        data = _CACHE.get(None)
        if data is None:
            data = _CACHE[None] = load(None)
        return data
    if isinstance(coefficients, dict):
        return coefficients if coefficients.get("_valid") is _VALID else load(coefficients)
    if isinstance(coefficients, (list, tuple)):
        return load(coefficients)
    _check_source(coefficients)
    data = _CACHE.get(coefficients)
    if data is None:
        data = _CACHE[coefficients] = load(coefficients)
    return data


def dry_run_bytes(coef: object, model: str, op: str, width: int, height: int, *, dtype: str, batch: int = 1,
                  frames: int = 1, tile: int | None = None, attention: str = "fused",
                  slicing: bool = False) -> int | None:
    """The dry-run peak (bytes of live tensors the op creates) from the file's structures, or None where no
    structure covers the request (an architecture never dry-run, a tile
    outside the structure's ``tile_min``-``tile_max``), rounded up to whole bytes. ``coef``: what
    ``coefficients=`` takes elsewhere (None: the packaged file). On the math attention path: ``max(fused peak, attention peak)``
    untiled, a tile's attention peak on top of the fused peak tiled. Sliced: one sample's peak plus ``batch - 1``
    outputs. A request no model could run, or this model cannot (an op or tiling it refuses), raises ValueError,
    as pricing does."""
    if type(slicing) is not bool:
        raise ValueError(f"slicing must be True or False, got {slicing!r}")
    _check_op(op, dtype, attention)
    coef = _doc(coef)
    m = _model(coef, model)
    _check_runs(model, m, op, tile is not None)
    width, height, batch, frames = (_positive_int(n, v) for n, v in
                                    (("width", width), ("height", height), ("batch", batch), ("frames", frames)))
    problem = geometry_error(model, m["spatial_factor"], width, height,
                             None if tile is None else _positive_int("tile", tile)) or \
        frames_error(model, frame_step(m), frames) or batch_error(batch)
    if problem:
        raise ValueError(problem)
    if not slicing:  # after the geometry, as pricing checks it
        _check_runs(model, m, op, tile is not None, batch)
    peak = structure_peak_bytes(coef, model, op, width, height, dtype=dtype, batch=batch, frames=frames, tile=tile,
                                attention=attention, slicing=slicing)
    return None if peak is None else math.ceil(peak)


def structure_peak_bytes(coef: dict, model: str, op: str, width: int, height: int, *, dtype: str, batch: int = 1,
                         frames: int = 1, tile: int | None = None, attention: str = "fused",
                         slicing: bool = False, hidden: float = 1.0,
                         hidden_batch: float | None = None) -> float | None:
    """:func:`dry_run_bytes` without its checks, on any dict with ``models`` (each with ``architecture`` and
    ``attention_ops``) and ``structures``: what the fit evaluates at its measured points; with ``hidden``, the dry
    run with oneDNN's buffers (:func:`_dry_peak`, the current schema's rule; ``hidden_batch``, an unsliced batch's
    factor)."""
    m = coef["models"][model]
    structures = coef.get("structures", {})
    arch = m["architecture"]
    s = structures.get(structure_key(arch, op, dtype, tile is not None))
    u = structures.get(structure_key(arch, op, dtype, False))
    a = structures.get(structure_key(arch, op, dtype, False, "math")) if attention == "math" else None
    if s is None or (slicing and batch > 1 and not (u and u.get("output_bytes_per_pixel"))) or \
            (attention == "math" and a is None and op in m.get("attention_ops", OPS)) or \
            (tile is not None and not s.get("tile_min", 0) <= tile <= s.get("tile_max", tile)):
        return None  # as the estimator: no structure covers this request (nor a tile outside its tiled basis)
    return _dry_peak(compile_structure(s), None if a is None else compile_structure(a),
                     compile_structure(u) if slicing and batch > 1 else None,  # type: ignore[arg-type]
                     width, height, batch, frames, tile, hidden=hidden, hidden_batch=hidden_batch)[2]


def hidden_factor_at(value: float | list, knots: list, frames: int) -> float:
    """A structure's oneDNN factor (:data:`HIDDEN_FACTORS`) at a clip of ``frames``: a number is the same at every
    clip length; a list (schema 17), one per knot of the structure and never rising, bounds every clip from its knot
    on: the last knot's at or below ``frames`` (past the last knot its own: the factor settles as clips grow,
    HunyuanVideo's bf16 decode without AMX 1.2592 at 17 frames and 1.2586 at 33)."""
    if not isinstance(value, list):
        return value
    return value[max(bisect.bisect_right(knots, frames) - 1, 0)]


def onednn_hidden_factor(backend: str, *structures: dict | None, no_amx: bool = True, frames: int,
                         batch: int = 1) -> float:
    """The factor from a dry-run peak to the peak with the buffers oneDNN's ops hold while they run, on ``backend``:
    the largest ``onednn_hidden_factor`` of the request's untiled ``structures`` (in a file of schema 14 or older
    the math path's as well; from 15 the fused one's, on the fused part alone: :func:`_dry_peak`) on a
    oneDNN backend, else 1 (other backends; a file of schema 8 or older: none); on ``onednn`` (a CPU without AMX
    tiles) a half-precision structure's ``onednn_hidden_factor_no_amx`` where it has one and ``no_amx`` (the lines
    are of schema 11 or newer: a layered document's structure may be newer than its oneDNN lines): its
    convolutions hold a copy of their input, where the AMX rule counts twice their output; each at a clip of
    ``frames`` (:func:`hidden_factor_at`). A ``batch`` in flight above 1 (unsliced: the caller's) takes a
    structure's factor of a batch where it has one (schema 25, ``onednn_hidden_factor_batch``, an image
    architecture's: its batch runs channels-last, and oneDNN holds no copy of such an input). A tiled request takes
    its untiled structure's in a file of schema 10 or newer (1 in one of 9: ``_Plan``): a tile's share was never
    traced, and the tiled demand / dry run follows the untiled factor (HunyuanVideo's bf16 decode 1.442 at 1.443,
    Wan 2.1's 1.125 at 1.111, SD1.5's 1.71 at 1.58)."""
    if backend not in WEIGHT_COPY_BACKENDS:
        return 1.0
    one = lambda s: HIDDEN_FACTORS[1] if no_amx and backend == "onednn" and HIDDEN_FACTORS[1] in s \
        else HIDDEN_FACTORS[0]  # noqa: E731
    # a batch in flight (``batch`` above 1, unsliced) takes the structure's factor of a batch where it has one
    field = lambda s: one(s) + BATCH_SUFFIX if batch > 1 and one(s) + BATCH_SUFFIX in s else one(s)  # noqa: E731
    return max([1.0] + [hidden_factor_at(s[field(s)], s.get("knots", [1]), frames)
                        for s in structures if s and field(s) in s])


def calibration_bytes(c: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int,
                      copy_bytes: float = 0, live_floor: bool = True, live: float | None = None) -> float:
    """A calibration line at a dry-run peak ``dry`` (``dry1``: of one sample; ``single_frame``: a one-frame clip of
    a video architecture; ``frame_pixels``: width x height; ``copy_bytes``: the request's convolution transient
    (:func:`conv_transient_bytes`), which a line with ``weight_copy_factor`` adds, beyond its
    ``transient_seen_bytes`` where it has them: a line fitted on the whole demand has priced the transients its
    points held). Below the line's domain (``domain_min_frame_pixels``)
    the line of the points measured there (``small``) prices instead, up to their largest dry-run peak, and past it
    the larger of the two lines. Never below :data:`LIVE_FLOOR_FACTOR` x ``live``, the live tensors' dry-run
    peak where ``dry`` is the oneDNN one (:func:`onednn_hidden_factor`), else ``dry`` (``live_floor=False``: the
    line itself, as the fit compares lines). The one evaluation of the line: the fit, the reports and the pricing
    all call it."""
    if not live_floor:
        return _line_bytes(c, dry, dry1, single_frame, frame_pixels, copy_bytes)
    return _floored(c, dry, dry1, single_frame, frame_pixels, copy_bytes, live)[0]


def _floored(c: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int,
             copy_bytes: float, live: float | None = None) -> tuple[float, bool]:
    """(:func:`calibration_bytes`, whether :data:`LIVE_FLOOR_FACTOR` x the live tensors set it rather than the
    line)."""
    line = _line_bytes(c, dry, dry1, single_frame, frame_pixels, copy_bytes)
    floor = LIVE_FLOOR_FACTOR * (dry if live is None else live)
    return (floor, True) if line < floor else (line, False)


def _line_bytes(c: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int,
                copy_bytes: float) -> float:
    """:func:`calibration_bytes` before the floor of the live tensors; a line with ``copy_line`` the larger of itself
    and that line with the transient (its copy branch: :func:`vaemem.fit.coefficients.copy_branch_line`)."""
    v = _line_at(c, dry, dry1, single_frame, frame_pixels)[1] + \
        c.get("weight_copy_factor", 0.0) * max(0.0, copy_bytes - c.get("transient_seen_bytes", 0))
    if "copy_line" in c:
        v = max(v, _line_bytes(c["copy_line"], dry, dry1, single_frame, frame_pixels, copy_bytes))
    return v


def _live_branch(c: dict) -> dict:
    """An own line without its copy branch (:func:`_line_bytes` prices the larger of the two)."""
    return {name: v for name, v in c.items() if name != "copy_line"}


def transfer_bytes(calib: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int,
                   copy_bytes: float = 0, live: float | None = None, variant: str = "",
                   own_untiled: dict | None = None, untiled: bool = False) -> tuple[float, str]:
    """A transfer's price (the arguments of :func:`calibration_bytes`) to an architecture calibration ``calib``
    never measured, and which line set it (``"class"`` or an architecture): the highest of the class line, pooled
    over its architectures' points, and each architecture's ``transfer_lines`` entry (its points' envelope, less
    the transients on a weight-copying backend, without a floor). Why both: the pooled line is one compromise
    over architectures whose demand / dry run differ, and left out, HunyuanVideo's fp32 decode was under it at 8 of
    20 points (0.88); each architecture's line is the class's measured factor at this dry-run peak, the pooled one
    covers what lies between them. A file of schema 6 has no ``transfer_lines``: its class line alone. A request of a
    ``variant`` (:func:`variant_key`) also takes the lines of the architectures measured in it or in a part of it
    (``variant_transfer_lines``, named ``sd15/math``: :func:`variant_applies`); the plain lines are of plain points
    (from schema 14). A tiled request of an architecture measured untiled on the platform also takes that
    architecture's own untiled line at its tiles' dry runs (``own_untiled``, named :data:`OWN_UNTILED`): its tiles
    run its kernels. Why: Wan 2.2's fp32 encode in 256 px tiles needs 1.30x its tiles' dry run at 768 px (640 MiB),
    MiniMax-H3's, the class's only other tiled architecture, 1.16x; the transfer reserved 0.93x, its own untiled line
    1.05x. Of the 15 architectures and platforms measured both ways, that line at the tiles' dry run is within
    1.02-1.08x of the tiled demand for 10, below it for 4 (LTX-Video's bf16 decode 0.79-0.89x: its tiles hold more),
    above it for MiniMax-H3's fp32 encode (1.08-1.35x). Its cost, out of sample (campaign 28): LTX-Video's, Wan
    2.1's and HunyuanVideo's fp32 encodes in tiles, which the class's lines alone covered at 1.05-1.09x, it prices
    at 1.08-1.20x. An ``untiled`` request is never priced below :data:`LIVE_FLOOR_FACTOR` x ``dry``, the dry run
    the lines are in (with oneDNN's buffers, or the most a convolution's call holds), where a measured
    architecture's floor is of its live tensors alone: the lines may price less than that dry run, and an
    architecture never measured may need all of it. Why: CogVideoX's bf16 encode without AMX (campaign 30) needed
    1.01x it at 320x192 x 9 frames, where the five architectures the class had need 0.85-0.94x at that size (their
    lines priced it 0.90x); left out by architecture it was the one row under of 98 (0.92), 1.04 with this floor
    (Mochi's decode, under at 0.99 out of sample in campaign 29, 1.05-1.06), which raised
    four other medians by 0.01-0.03 (the bf16 decoders without AMX: Wan 2.1 1.10 -> 1.12, HunyuanVideo 1.21 ->
    1.24) and took none past 1.15. A tiled request keeps the live floor: its tiles' dry run with the untiled
    structure's factor over-states what they hold (the bf16 tiled encoders left out, 1.05-1.08 -> 1.23-1.27).
    From schema 18 the untiled floor is of ``dry`` plus the calibration's ``first_call_bytes``, the most of its
    architectures' one-time cost: the part of what each needed beyond its dry run that no frame size sets
    (:func:`vaemem.fit.coefficients.first_call_bytes`). Why: a measurement is a fresh process's first call, and a
    first call costs 10-25 MiB beyond a warm one, which is its dry run (with oneDNN's buffers) within 0.4 %: the
    code pages and one-time state of the kernels it runs, independent of size and threads and an architecture's
    own (``benchmarks/first_call_cost.py``: the image encoders 10 MiB, Wan 2.1's and 2.2's encodes 18). Left out,
    Wan 2.1's bf16 clips on the AMX Xeon, which need their dry run plus 17-25 MiB where the lines of the other
    video architectures hold less, came out 0.97-0.98; with it 1.03-1.06."""
    return _transfer(calib, dry, dry1, single_frame, frame_pixels, copy_bytes, live, variant, own_untiled,
                     untiled)[:2]


def _transfer(calib: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int, copy_bytes: float,
              live: float | None, variant: str, own_untiled: dict | None,
              untiled: bool) -> tuple[float, str, bool]:
    """:func:`transfer_bytes` and whether its floor set the price (each line evaluated once: the hot path)."""
    moved = calib.get("transfer_lines", {})
    variants = calib.get("variant_transfer_lines", {})
    lines = {"class": calib["class"], **{a: moved[a] for a in sorted(moved)},
             **{k: variants[k] for k in sorted(variants) if variant_applies(k, variant)},
             **({OWN_UNTILED: own_untiled} if own_untiled is not None else {})}
    values = {a: _line_bytes(ln, dry, dry1, single_frame, frame_pixels, copy_bytes) for a, ln in lines.items()}
    # the name: the highest line by its own value (where the floor prices, every line ties at it)
    top = max(values, key=values.__getitem__)
    floor = transfer_floor(calib, dry, live, untiled)
    return (floor, top, True) if values[top] < floor else (values[top], top, False)


def transfer_floor(calib: dict, dry: float, live: float | None, untiled: bool) -> float:
    """The least a transfer prices (:func:`transfer_bytes`): :data:`LIVE_FLOOR_FACTOR` x, for an ``untiled``
    request, its dry run ``dry`` plus the calibration's ``first_call_bytes`` (0 before schema 18), else the live
    tensors' dry run ``live`` (``dry`` where there is none), as :func:`calibration_bytes`' floor."""
    if untiled:
        return LIVE_FLOOR_FACTOR * (dry + calib.get("first_call_bytes", 0))
    return LIVE_FLOOR_FACTOR * (dry if live is None else live)


def transfer_line_words(name: str) -> str:
    """An architecture's transfer line, :func:`transfer_bytes` naming it ``name`` (``wan21``, ``sd15/math``), as a
    reason says it; the class line and :data:`OWN_UNTILED` are said where they are named."""
    arch, variant = variant_parts(name)
    return f"the line of {arch}'s {VARIANT_WORDS[variant]} points" if variant else f"{name}'s line"


def _times(ratio: float) -> str:
    """How far beyond a line's largest dry-run peak (a ratio above 1) for a reason: "just" within 1 %, two
    decimals below 1.1 (1.04x, where one would read 1.0x), else one."""
    return "just" if ratio < 1.01 else f"{ratio:.2f}x" if ratio < 1.1 else f"{ratio:.1f}x"


def transfer_line(calib: dict, name: str, own_untiled: dict | None = None) -> dict:
    """The line :func:`transfer_bytes` named ``name``: ``class``, an architecture's, a variant's or
    ``own_untiled``."""
    if name == "class":
        return calib["class"]
    if name == OWN_UNTILED:
        return own_untiled  # type: ignore[return-value]
    return calib["variant_transfer_lines" if variant_parts(name)[1] else "transfer_lines"][name]


def weight_copy_bytes(largest_conv_parameters: int, dtype: str, backend: str) -> int:
    """Bytes of the copy of an op's largest convolution weight (``largest_conv_parameters`` elements) that
    ``backend`` holds while the convolution runs in ``dtype``: 0 off ``WEIGHT_COPY_BACKENDS``."""
    return largest_conv_parameters * ELEMENT_SIZE[dtype] if backend in WEIGHT_COPY_BACKENDS else 0


def conv_transient_elements(s: dict, width: int, height: int, batch: int, frames: int) -> tuple[int, float]:
    """(weight elements copied, im2col elements held): the largest of either that one convolution of an untiled
    fp32 request holds beyond the live tensors, by torch 2.13's ``use_mkldnn`` rule on its input. oneDNN runs it
    where N > 1, groups > 1 or a kernel larger than 3 in both inner dims (None at a knot), or where N x C x the
    next two dims pass ``ONEDNN_MIN_ELEMENTS``, and holds a reordered copy of the weight; else torch's own path
    runs it and holds an im2col buffer (input channels x kernel x output positions). The transient is the larger
    of the two bytes, so the caller compares them; this returns the heaviest copied weight and the largest
    buffer. ``s["conv_transients"]`` lists, heaviest weight first, each convolution's input rank, its rule's
    elements per knot as ``a x U + b x (width + height) / 2 + c`` (U: the frame's pixels for a 2-D input, its
    height for a 3-D one, whose width the rule does not read) and its buffer's elements in the same form in
    pixels, per knot the rule's elements above which its input is channels-last (None: never), where torch
    copies the weight to channels-last before oneDNN reorders it: two copies, and the two laws of its smallest
    call (torch decides call by call: where the largest runs on oneDNN, the smallest may hold a buffer); from
    schema 12 also the bytes live at its calls (:func:`conv_call_peak_bytes`). Between
    knots linear in frames, past the last along its last segment (exact where a clip runs whole, as LTX's, and in
    equal chunks, as Wan's); a
    knot that always copies makes its segments copy, and either knot's channels-last threshold applies to its
    segments. ``batch``: samples per call (1 for a sliced batch): above 1 every convolution runs on oneDNN, and
    the rule reads ``batch`` x one sample's elements (the channels-last threshold; where any knot saw one it was
    doubled at any size before: no measured point's transient changed)."""
    if batch > 1:  # every convolution on oneDNN, as in half precision: its copy, doubled where the batch's input
        # elements pass the channels-last threshold
        return max(c for c, _, _ in _conv_calls(s, width, height, frames, half=True, batch=batch)), 0.0
    copied, columns = 0, 0.0
    for copy, buffer, _ in _conv_calls(s, width, height, frames):
        copied, columns = max(copied, copy), max(columns, buffer)
    return copied, columns


def conv_call_peak_bytes(s: dict, width: int, height: int, frames: int, dtype: str = "fp32",
                         batch: int = 1) -> float | None:
    """The largest of the bytes live at a convolution's call plus the transient it holds there (its weight's copy
    or its im2col buffer, by :func:`conv_transient_elements`' rule), of an untiled request of one sample (in half
    precision, from schema 21, of a ``batch``: its live bytes ``batch`` x one sample's, from schema 26 ``batch`` / 2
    x a batch of two's where the structure carries them, the copy once: :func:`_conv_calls`; never of an fp32 batch,
    :func:`call_peak`), or None
    where the untiled fp32 structure ``s`` does not carry the live bytes at the calls (before schema 12). In half
    precision (from schema 19) every convolution runs on oneDNN and copies its weight (two copies where its input
    is channels-last, as in fp32), and the bytes live at its call are the fp32 dry run's at the element size's
    ratio: every tensor of the op is in the request's dtype, and the call's own output and its reorder are the
    fp32 rule's two outputs (:func:`vaemem.tracing.counter.conv_live_bytes`; from schema 24 one on a channels-last
    input, which oneDNN reorders in neither precision), which the half-precision dry run counts alike (tests check
    it against half-precision dry runs of tiny and real architectures). Why not two there: Mochi's encodes needed
    0.89-0.95x their call peak with the output's reorder, their convolutions' inputs channels-last; left out by
    architecture, the class priced them at a median of 1.26 (bf16) and 1.28 (fp32), 1.07 and 1.14 without it.
    Why: a transient adds to what is live at its own call, not to the peak. LTX-2's decoder copies its 432 MiB
    weight where 2-40 MiB are live, and its demand is 1.04-1.06x the larger of this and the dry run with oneDNN's
    buffers at every size from 128x128 x 9 frames to 1024x576 x 9, where the peak plus the copy read 1.46x at
    512x320 x 9 and a line over the two, which cannot tell a copy at the peak from one beside few tensors,
    under-reserved a held-out 1024x576 x 9 (0.86x)."""
    if not _call_peaks(s):
        return None
    size = ELEMENT_SIZE[dtype]
    return max(live * size / ELEMENT_SIZE["fp32"] + size * max(copy, buffer) for copy, buffer, live in
               _conv_calls(s, width, height, frames, half=dtype != "fp32", batch=batch))


def _conv_calls(s: dict, width: int, height: int, frames: int, half: bool = False,
                batch: int = 1) -> Iterator[tuple[int, float, float]]:
    """Per convolution of ``s["conv_transients"]`` at one sample of a request, (weight elements it copies, im2col
    elements it holds) at a call where it holds one, with the bytes live at that call in fp32 (0 without them): its
    largest call's, and its smallest call's where that one alone stays on im2col (:func:`conv_transient_elements`);
    ``half``: in half precision, where every call runs on oneDNN and copies its weight; of a ``batch``, whose input
    the rule reads ``batch`` x one sample's elements of (N x C x the next two dims), where those pass the
    channels-last threshold, and whose live bytes are ``batch`` x one sample's, or, where the structure carries the
    live bytes at a batch's calls (schema 26, an image architecture's tenth field), ``batch`` / 2 x those from their
    smallest size on: a 2-D batch's calls hold no output reorder."""
    i, u = _segment(s["knots"], frames)
    j = i - 1 if i and u != 1 else i  # the segment's first knot, or the knot itself at one
    pixels, half_perimeter = width * height, (width + height) / 2

    def law(laws: list, area: float) -> float:  # a law between the segment's knots (inf: always on oneDNN)
        lo, hi = laws[j], laws[i]
        if lo is None or hi is None:
            return math.inf
        a, b, c = (x + (y - x) * u for x, y in zip(lo, hi))
        return a * area + b * half_perimeter + c

    def polyline(at: list) -> float:  # the live bytes between the segment's knots (see :func:`_polyline`)
        # a knot where the convolution does not run (Wan's 2-D ones past one frame) takes the other's
        lo, hi = _polyline(at[j] or at[i], pixels), _polyline(at[i] or at[j], pixels)
        return max(0.0, lo + (hi - lo) * u)

    for w, rank, rule, cols, last, rule_min, cols_min, *lives in s["conv_transients"]:
        # a batch's own record from its smallest size on; below it (the batch dry runs start in the calibration
        # domain) its samples' (over: SD1.5's bf16 decode at 64 px in two, the batch record's end segment
        # extended down priced 0.87x its dry run's call peak, its samples' 1.15x)
        own = batch > 1 and len(lives) > 2 and bool(at := lives[2][i] or lives[2][j]) and pixels >= at[0][0]
        live = 0.0 if not lives else polyline(lives[2]) * batch / BATCH_LIVE_SAMPLES if own \
            else batch * polyline(lives[0])
        read = height if rank == 5 else pixels  # what the rule's law is in: a 3-D input's width is not read
        elements = law(rule, read)
        if half or elements > ONEDNN_MIN_ELEMENTS:
            # a channels-last input: torch copies the weight to channels-last before oneDNN reorders it
            doubled = any(t is not None and batch * elements > t for t in (last[j], last[i]))
            yield 2 * w if doubled else w, 0.0, live
            if not half and law(rule_min, read) <= ONEDNN_MIN_ELEMENTS:  # its smallest call does not
                yield 0, law(cols_min, pixels), batch * polyline(lives[1]) if lives else 0.0
        else:
            yield 0, law(cols, pixels), live


def call_peak(s: dict | None, dtype: str, backend: str, tiled: bool, batch: int, width: int, height: int,
              frames: int, batched: bool = True) -> float | None:
    """:func:`conv_call_peak_bytes` where a request's lines are in the larger of it and the dry run with oneDNN's
    buffers (fp32 from schema 12, half precision without AMX from 19): an untiled request of one sample on a
    weight-copying backend whose untiled fp32 structure ``s`` carries the live bytes at its convolutions' calls,
    and then no transient is added; in half precision without AMX an unsliced batch as well where ``batched`` (from
    schema 21); else None (the line adds the transient, :func:`conv_transient_bytes`; a batch is never priced below
    one sample: ``_Plan.price``). Why a batch: every half-precision convolution runs on oneDNN and copies its
    weight at any batch, and the copy adds to what is live at its call; campaign 34 measured LTX-2's bf16 encode at
    batch 2 (232-237 MiB from 128x128 x 1 to 256x256 x 1 and 128x128 x 9, where batch 1 needed 236 at 320x192 x 9:
    the copy of its 216 MiB weight and a little), whose rows, in the dry run with the copy added, bent its own line
    to 1.90x in sample (LTX-Video 0.9.5's 1.99x); in the call peak 1.07x. Not in fp32, where a batch moves every
    convolution to oneDNN (``sliced``: one sample per call, never). Why half precision without AMX too: LTX-2's bf16
    decode at 768x512 x 9 needs 407 MiB, 4 beyond its dry run, where the dry run plus its 216 MiB weight copy read
    623, and at 320x192 x 9 236 MiB, 15 beyond its call peak (220); with the copy added, the demand / dry run of the
    conv3d bf16 decoders spread 4.05x over ten architectures, in the call peak 1.06x. Not with AMX
    (``onednn-amx``), whose convolutions' buffers were never measured call by call
    (:func:`vaemem.tracing.counter.onednn_hidden_bytes`):
    there the copy stays added to the dry run, a bound above the call peak. LTX-Video's bf16 decode on the AMX
    Xeon needs 13.7-22.2 MiB beyond the call peak at its 21 points, but Wan 2.2's 21-68, growing with size (the
    AMX rule's buffers under-count there): in the call peak, left out, Wan 2.2's decode was under at 10 of 12 points
    (0.97) and Sana's DC-AE decode at one (1.00), both covered with the copy added."""
    if backend not in WEIGHT_COPY_BACKENDS or not _lists_convs(s, tiled) \
            or (dtype != "fp32" and backend == AMX_BACKEND) or (batch != 1 and (dtype == "fp32" or not batched)):
        return None
    return conv_call_peak_bytes(s, width, height, frames, dtype, batch)


def call_dry_runs(s: dict | None, dtype: str, backend: str, tiled: bool, batch: int, width: int, height: int,
                  frames: int, dry: float, one: float, batched: bool = True) -> tuple[float, float, float | None]:
    """(dry run, dry run of one sample, the call peak or None) a request's lines take, from its dry run ``dry`` and
    one sample's ``one`` as its platform's lines are in them (:func:`onednn_hidden_factor`): where
    :func:`call_peak` applies (``batched``: to an unsliced batch in half precision, schema 21), the larger of the
    dry run and it, and of one sample's dry run and its call peak, and the transient is in them (not added); else
    the dry runs, a batch's per-sample term one sample's as one sample is priced (its call peak where that leads).
    The fit's rows (``vaemem.fit.coefficients.row_of``), the price and the reason all take them here."""
    cp = call_peak(s, dtype, backend, tiled, batch, width, height, frames, batched)
    single = cp if batch == 1 else call_peak(s, dtype, backend, tiled, 1, width, height, frames)
    one = one if single is None else max(one, single)
    return (max(dry, cp), one, cp) if cp is not None else (dry, one, None)


def _polyline(points: list, pixels: float) -> float:
    """Bytes at ``pixels`` on ``[[pixels, bytes], ...]`` (increasing pixels): linear between two points, along the
    nearer end segment beyond them, never below 0; 0 for no points (a knot where the convolution does not run)."""
    if not points:
        return 0.0
    if len(points) == 1:
        return float(points[0][1])
    k = 1
    while k < len(points) - 1 and points[k][0] < pixels:
        k += 1
    (x0, y0), (x1, y1) = points[k - 1], points[k]
    return max(0.0, y0 + (y1 - y0) * (pixels - x0) / (x1 - x0))


def _lists_convs(s: dict | None, tiled: bool) -> bool:
    """Whether an untiled request's untiled fp32 structure ``s`` lists its convolutions (``conv_transients``)."""
    return not tiled and s is not None and "conv_transients" in s


def _priced_by_rule(s: dict | None, dtype: str, tiled: bool) -> bool:
    """Whether a request's convolution transient follows torch's rule (:func:`conv_transient_elements`): untiled
    fp32 with an untiled structure ``s`` that lists its convolutions; else the largest copy prices it."""
    return dtype == "fp32" and _lists_convs(s, tiled)


def conv_transient_bytes(m: dict, s: dict | None, op: str, dtype: str, backend: str, width: int, height: int,
                         batch: int, frames: int, tiled: bool) -> int:
    """Bytes a convolution holds beyond the live tensors at a request of model ``m`` (a coefficient file's entry)
    on ``backend``, ``s`` its untiled fp32 structure: where the request is untiled fp32 and ``s`` lists its
    convolutions, the larger of the heaviest weight oneDNN copies and the largest im2col buffer
    (:func:`conv_transient_elements`); else the copy of the op's largest convolution weight (a half-precision
    convolution runs on oneDNN at any size; a tiled request is priced with the largest). 0 off
    ``WEIGHT_COPY_BACKENDS``."""
    if backend not in WEIGHT_COPY_BACKENDS:
        return 0
    if _priced_by_rule(s, dtype, tiled):
        copied, columns = conv_transient_elements(s, width, height, batch, frames)
        return int(max(copied, columns) * ELEMENT_SIZE[dtype])
    return weight_copy_bytes(m["largest_conv_parameters"][op], dtype, backend)


def _line_at(c: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int) -> tuple[dict, float]:
    """(the line that prices, its bytes): :func:`calibration_bytes`, saying which line it took."""
    v = max(_affine_at(c, dry, dry1, single_frame, frame_pixels), _resident_at(c, dry, single_frame))
    if v < c.get("floor_bytes", 0):  # a resident floor its smallest points measured, whatever their dry runs
        v = c["floor_bytes"]
    small = c.get("small")
    if small is not None and frame_pixels < c["domain_min_frame_pixels"]:
        u = _line_at(small, dry, dry1, single_frame, frame_pixels)[1]
        if dry <= small["dry_bytes_max"] or u > v:  # past the small points' dry-run peaks, never below the line
            return small, u
    return c, v


def _affine_at(c: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int) -> float:
    """A line's fitted terms at a request, before its resident branch, floor and small line: the lower of the line
    and its ``flat`` branch where it has one (from schema 16; not for a one-frame clip of a video model:
    :func:`vaemem.fit.coefficients._line_through`), each below the line's ``dry_bytes_min`` as :func:`_terms_at`
    says for a frame of ``frame_pixels`` in the domain (:data:`DOMAIN_MIN_FRAME_PIXELS`)."""
    flat, least = c.get("flat"), _least(c, frame_pixels)
    if flat is not None and not single_frame:
        return min(_terms_at(c, dry, dry1, False, least), _terms_at(flat, dry, dry1, False, least))
    return _terms_at(c, dry, dry1, single_frame, least)


def _least(c: dict, frame_pixels: int) -> float:
    """A line's ``dry_bytes_min`` where it bounds a request of frames of ``frame_pixels`` (in the calibration domain,
    :func:`_terms_at`), else 0 (no bound)."""
    return c.get("dry_bytes_min", 0) if frame_pixels >= DOMAIN_MIN_FRAME_PIXELS else 0


def _terms_at(c: dict, dry: float, dry1: float, single_frame: bool, least: float = 0) -> float:
    """One envelope's terms at a request (:func:`_affine_at`): ``fixed + grows``, ``grows`` the terms that grow with
    the dry run. Below ``least``, its points' smallest dry-run peak (from schema 20), a line whose slope (per byte of
    one sample's dry run, ``dry_factor + per_sample_factor``, with the one-frame factor for a one-frame clip) is
    below 1 never reserves more beyond the dry run than at this request scaled up to ``least``,
    ``fixed + grows x least / dry - least`` where that is above 0 (else the line prices). Why: its points' dry runs
    over-state at its largest points (the fit writes ``dry_bytes_min`` there alone), and a slope below 1 is theirs,
    which extrapolated down would price more beyond the dry run the smaller the request: LTX-2's bf16 encode line
    without AMX (0.751 x its dry run + 86 MiB, fitted from 220 to 436 MiB, where its call peak over-states 393 MiB
    of demand by 42) priced LTX-Video's 16 MiB dry run at 98 MiB, left out 3.1x its demand; with the bound 1.5x (a
    line of the others then the highest). Not where the points are a resident floor, demand that stays as the dry
    run shrinks (FLUX.1's bf16 encode with AMX, 27-28.6 MiB from 64x64 to 96x96, none below its dry run), which
    the bound would cut (held out at 64x64, 0.98x), and so not below the calibration domain, where that floor is
    (:func:`_affine_at`); nor a batch of a line growing at least as fast as the dry run, whose per-sample term
    makes it grow slower per byte of the batch's dry run."""
    fixed = c["base_bytes"] + (c.get("single_frame_bytes", 0) if single_frame else 0)
    sf = c.get("single_frame_factor", 0.0) if single_frame else 0.0
    one = c.get("single_frame_dry_max", math.inf)
    if dry > one:  # from 23: the one-frame term stops at its points' largest dry run (a constant beyond it)
        fixed, sf = fixed + sf * one, 0.0
    grows = c["dry_factor"] * dry + c["per_sample_factor"] * dry1 + sf * dry
    if 0 < dry < least and c["dry_factor"] + c["per_sample_factor"] + sf < 1:
        beyond = fixed + grows * least / dry - least  # what it reserves beyond the dry run, scaled up to least
        if 0 < beyond < fixed + grows - dry:
            return dry + beyond
    return fixed + grows


def _resident_at(c: dict, dry: float, single_frame: bool) -> float:
    """A line's resident branch at a dry-run peak ``dry``: ``resident_factor x dry`` plus the least bytes every
    one of its points needed beyond its dry run (a one-frame clip's own where the line has them), 0 for a line or
    regime without one (:func:`vaemem.fit.coefficients.resident_fields`)."""
    extra = c.get("single_frame_resident_bytes" if single_frame and "single_frame_resident_bytes" in c
                  else "resident_bytes")
    return 0.0 if extra is None else c["resident_factor"] * dry + extra


def _line_terms(line: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int) -> str:
    """A calibration line's terms at a request, as the reason says them (the margin is in the coefficients): its
    ``flat`` branch's where that is the lower (:func:`_affine_at`), and its resident branch where that is above
    them."""
    flat, least = line.get("flat"), _least(line, frame_pixels)
    by_bytes = (flat is not None and not single_frame
                and _terms_at(flat, dry, dry1, False, least) < _terms_at(line, dry, dry1, False, least))
    terms = flat if by_bytes else line
    text = f"{terms['dry_factor']:.3f} x dry-run peak {dry / MIB:.0f} MiB"
    if terms.get("per_sample_factor"):
        text += f" + {terms['per_sample_factor']:.3f} x one sample's {dry1 / MIB:.0f} MiB"
    if single_frame and (line.get("single_frame_factor") or line.get("single_frame_bytes")):
        one = line.get("single_frame_dry_max", math.inf)
        text += (f" + one-frame clip {line.get('single_frame_factor', 0.0):.3f} x "
                 + (f"its one-frame points' largest dry-run peak {one / MIB:.0f} MiB (no further)" if dry > one
                    else "dry-run peak")
                 + f" + {line.get('single_frame_bytes', 0) / MIB:.0f} MiB")
    text += f" + {terms['base_bytes'] / MIB:.0f} MiB"
    if by_bytes:
        text = ("its envelope fitted on bytes, below the one fitted on ratios here (both cover its points): "
                + text)
    bounded = _terms_at(terms, dry, dry1, single_frame and not by_bytes, least)
    if bounded < _terms_at(terms, dry, dry1, single_frame and not by_bytes):
        text = (f"dry-run peak {dry / MIB:.0f} MiB + {(bounded - dry) / MIB:.0f} MiB, what it reserves beyond the "
                f"dry run scaled up to its smallest measured dry-run peak, {least / MIB:.0f} MiB (never more below "
                f"it), below its terms {text}")
    resident = _resident_at(line, dry, single_frame)
    if resident > _affine_at(line, dry, dry1, single_frame, frame_pixels):
        text = (f"{line['resident_factor']:.2f} x dry-run peak {dry / MIB:.0f} MiB + "
                f"{(resident - line['resident_factor'] * dry) / MIB:.0f} MiB (the least any of its points needed "
                f"beyond its dry run, with the margin), above {text}")
    return text


def explain(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None = None,
            backend: str, allocator: str, os: str, batch: int = 1, frames: int = 1, tile: int | None = None,
            cast: str = "model", attention: str = "fused", slicing: bool = False,
            coefficients: object = None) -> Estimate:
    """The reservation in bytes for one decode/encode, with its reasoning (see the module docstring).

    ``cast``: which weights the app cast from ``loaded_dtype`` to ``dtype``: ``"model"`` (the whole VAE, what
    loading and ``.to(dtype)`` do) or ``"op"`` (only the half the op runs). ``attention``: ``"fused"`` (an SDPA
    kernel) or ``"math"`` (no fused kernel: the score matrices are materialised; ``detect_platform`` says which);
    the math path's dry-run peak is priced by the platform's line (fitted over its fused and, where measured, its
    math-path points).
    ``slicing``: diffusers' ``enable_slicing`` (a batch decoded one sample at a time)."""
    e = _explain(model, op, width, height, dtype=dtype, loaded_dtype=loaded_dtype, backend=backend,
                 allocator=allocator, os=os, batch=batch, frames=frames, tile=tile, cast=cast, attention=attention,
                 slicing=slicing, coefficients=coefficients)
    m = _doc(coefficients)["models"][model]
    if m["architecture"] != model:  # the lines and structures the reason names are its architecture's
        e.reason = f"{model}, {m['architecture']}'s architecture: {e.reason}"
    if dtype == "fp16" and model in UPCAST_PIPELINES and m.get("force_upcast"):
        e.reason += (f"; {model}'s config sets force_upcast, which {UPCAST_PIPELINES[model]} honour: they run this "
                     f"fp16 VAE in fp32: for them, price dtype fp32 with loaded dtype fp16")
    return e


def _math_leads(doc: dict, model: str, op: str, width: int, height: int, dtype: str, batch: int, frames: int,
                tile: int | None, slicing: bool) -> bool:
    """Whether the math attention path's score matrices raise the request's dry-run peak above the fused path's."""
    args = (doc, model, op, width, height)
    kw = dict(dtype=dtype, batch=batch, frames=frames, tile=tile, slicing=slicing)
    return (dry_run_bytes(*args, attention="math", **kw) or 0) > (dry_run_bytes(*args, attention="fused", **kw) or 0)


def _explain(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None,
             backend: str, allocator: str, os: str, batch: int, frames: int, tile: int | None, cast: str,
             attention: str, slicing: bool, coefficients: object) -> Estimate:
    """:func:`explain`'s estimate, its reason in the architecture's terms."""
    doc = _doc(coefficients)
    plan = _plan(doc, model, op, dtype, loaded_dtype, backend, allocator, os, tile is not None, cast, attention,
                 slicing)
    total, env, dry, floor, note, ref, one = plan.price(width, height, batch, frames, tile)  # also checks the tile

    def untiled() -> Estimate:  # the same request untiled: what a tiled one is priced by, or capped at
        return _explain(model, op, width, height, dtype=dtype, loaded_dtype=loaded_dtype, backend=backend,
                        allocator=allocator, os=os, batch=batch, frames=frames, tile=None, cast=cast,
                        attention=attention, slicing=slicing, coefficients=coefficients)

    def capped() -> tuple[float | None, bool]:  # a price capped by the untiled one: its extrapolation, verified
        u = untiled()
        return u.extrapolation, u.verified

    if plan.untiled is not None and plan.cs is None:  # unstructured tiled video: the untiled estimate, said so
        e = untiled()
        return Estimate(e.bytes, e.source, e.group, e.reason + "; tiled video has no dry-run structure: priced as "
                        "the untiled request, an upper bound", e.envelope_bytes, e.cast_bytes, e.floor_bytes,
                        e.pixels, e.extrapolation, e.verified)
    if note == "whole":  # a tile is the whole image: the untiled request's estimate, scaled and said so
        e = untiled()
        ratio = env / e.envelope_bytes if e.envelope_bytes else 1.0
        math_tile = ", a tile's score matrices on top on the math path" if attention == "math" else ""
        return Estimate(total, e.source, e.group, f"a tile is the whole image (diffusers' loop runs it first, then "
                        f"crops of it): the untiled request's price x {ratio:.4f}, its tiles' dry-run peak over the "
                        f"whole image's (the outputs the blend keeps{math_tile}); the untiled request: {e.reason}", env,
                        e.cast_bytes, e.floor_bytes, e.pixels, e.extrapolation, e.verified)
    pixels = int(width) * int(height) * int(batch) * int(frames)
    copy = plan.copy_at(int(width), int(height), 1 if plan.out is not None else int(batch), int(frames), tile)
    cast_note = ""
    if attention == "math":
        cast_note = ("; math attention path: no attention module in this op, so the same as fused"
                     if plan.attn is None else
                     "; math attention path: its score matrices do not lead (its dry run"
                     + (" with oneDNN's buffers" if plan.hidden_at(int(frames), plan._flight(int(batch))) != 1
                        else "")
                     + " is the fused path's), so priced by the fused request's lines"
                     if plan.kind == "calib" and "/math" not in plan.variant_at(
                         int(width), int(height), int(batch), int(frames), tile) else
                     ("; math attention path: dry-run peak with its score matrices"
                      if _math_leads(doc, model, op, width, height, dtype, batch, frames, tile, slicing) else
                      "; math attention path: its score matrices do not lead here (its dry run is the fused path's)")
                     if plan.cs is not None and plan.kind != "pixel" else
                     "; math attention path: the attention peak of the tile or image added on top (an upper bound)")
    if slicing and int(batch) > 1:
        cast_note += ("; sliced: one sample's peak plus the outputs of the samples before it"
                      if plan.out is not None and plan.cs is not None and plan.kind != "pixel"
                      else "; sliced, priced as unsliced (an upper bound: no dry-run structure)")
    if plan.amx_bound:
        cast_note += (f"; not measured in half precision on oneDNN without AMX, whose kernels hold less: an upper "
                      f"bound here")
    if plan.cast_bytes:
        cast_note += (f"; cast {plan.cast_params:,} parameters ("
                     f"{'the whole model' if cast == 'model' else 'its ' + ('decoder' if op == 'decode' else 'encoder')}"
                     f") from {loaded_dtype} to {dtype}")
    if plan.kind == "calib":
        own, calib, m = plan.own, plan.calib, plan.m
        k1 = plan.hidden_at(int(frames))  # one sample's factor; k the request's (a batch's own, schema 25)
        k = plan.hidden_at(int(frames), plan._flight(int(batch)))
        live = dry
        # the lines are in oneDNN's dry run (hidden); what its buffers make of the live tensors' peak: x k, on the
        # math path x k on the fused part only (told by one sample's: a sliced batch adds its kept outputs x k)
        _, live1, dry, one = plan.dry_runs(int(width), int(height), int(batch), int(frames), tile)
        scores = attention == "math" and plan.attn is not None and abs(one - k1 * live1) > MIB
        outputs = (f", and the outputs of the samples before it x {k:.4g}"
                   if scores and plan.out is not None and int(batch) > 1 else "")
        if scores and tile is not None:
            above = (f"{live / MIB:.0f} MiB, with the tiles' fused part x {k:.4g} for oneDNN's buffers and a tile's "
                     f"attention peak on top as it is{outputs}")
            hidden = (f"; that dry-run peak is the tiles' fused part x {k:.4g} for the buffers oneDNN's ops hold "
                      f"while they run and a tile's attention peak on top as it is{outputs} ({live / MIB:.0f} MiB "
                      f"without the buffers)")
        elif not scores:
            hidden = (f"; that dry-run peak is its live tensors', {live / MIB:.0f} MiB, x {k:.4g} for the buffers "
                      f"oneDNN's ops hold while they run" if k != 1 else "")
            if k != k1:  # schema 25: a 2-D batch runs channels-last, and oneDNN holds no copy of such an input
                hidden = (f"; that dry-run peak is its live tensors', {live / MIB:.0f} MiB, x {k:.4g}, a batch's "
                          f"factor for the buffers oneDNN's ops hold while they run (one sample's x {k1:.4g})")
            above = f"{live / MIB:.0f} MiB x {k:.4g} for oneDNN's buffers"
        elif one <= live1:
            above = (f"at its score matrices, {live / MIB:.0f} MiB, which no op holding oneDNN's buffers joins (its "
                     f"fused part x {k:.4g} for them stays below){outputs}")
            hidden = f"; that dry-run peak is its live tensors' peak {above}"
        else:
            above = (f"at its score matrices, {live / MIB:.0f} MiB, below its fused part's x {k:.4g} for the buffers "
                     f"oneDNN's ops hold while they run{outputs}")
            hidden = (f"; that dry-run peak is its fused part's x {k:.4g} for the buffers oneDNN's ops hold while they "
                      f"run{outputs}, above its live tensors' peak at its score matrices, {live / MIB:.0f} MiB")
        top, one, cp = call_dry_runs(plan.calls, plan.dtype, plan.backend, tile is not None, int(batch), int(width),
                                     int(height), int(frames), dry, one, plan.batch_in_call_peak(int(batch)))
        if cp is not None:  # the transient is in them (schema 12, half precision 19, its batches 21)
            copy = 0
            if cp > dry:
                hidden = (f"; that dry-run peak is the most a convolution's call holds, {cp / MIB:.0f} MiB: the "
                          f"bytes live there and its weight copy or im2col buffer, above its live tensors' peak "
                          f"{above}")
            else:
                hidden += ("; each convolution's weight copy or im2col buffer, with the bytes live at its call, "
                           "stays below that")
        dry = top
        if note == "one sample":  # a batch whose line prices it below one sample: one sample's price
            e1 = _explain(model, op, width, height, dtype=dtype, loaded_dtype=loaded_dtype, backend=backend,
                          allocator=allocator, os=os, batch=1, frames=frames, tile=tile, cast=cast,
                          attention=attention, slicing=False, coefficients=coefficients)  # one sample, tiled as asked
            return Estimate(total, e1.source, e1.group, f"a batch of {int(batch)} at one sample's price, which it "
                            f"never needs less than (its line prices one sample by the most a convolution's call "
                            f"holds, a batch by its dry run and transient, here less): {e1.reason}", env,
                            plan.cast_bytes, 0, pixels, e1.extrapolation, e1.verified)
        if note == "capped" and own is not None:  # its own untiled line bounds its own tiled one
            return Estimate(total, "measured", calib["calibration"], f"its own tiled line on this platform "
                            f"({own['n_points']} points) prices more: " + _capped_says(plan, live)
                            + cast_note, env, plan.cast_bytes, 0, pixels, *capped())
        if own is not None:
            branch = ""
            m = plan.m
            variant = plan.variant_at(int(width), int(height), int(batch), int(frames), tile)
            own, name = plan.own_line(dry, one, int(frames), int(width) * int(height), copy, live, variant)
            owner, suffix = variant_parts(name)
            words = VARIANT_WORDS.get(suffix, "")
            applied = [k for k in plan.variant_own or {} if variant_applies(k, variant)]
            kept = ("" if not applied else f" of its plain points, above the lines of the {VARIANT_WORDS[variant]} "
                    f"request's measured variants ({', '.join(applied)})" if not name else
                    f" of its {words} points")
            other = owner if name and owner != m["architecture"] else ""
            if "copy_line" in own:  # the larger of its live line and its copy branch prices: say which
                args = (dry, one, plan.arch_video and int(frames) == 1, int(width) * int(height), copy)
                if _line_bytes(own["copy_line"], *args) > _line_bytes(_live_branch(own), *args):
                    own, branch = own["copy_line"], "the copy branch (the weight copy outweighs the live tensors) of "
            line = _line_at(own, dry, one, plan.arch_video and int(frames) == 1,
                            int(width) * int(height))[0]
            where = (f"; frames below {own['domain_min_frame_pixels']} px: the line of the points measured there"
                     if line is not own else "")
            resident = line.get("floor_bytes", 0)  # the floor its smallest points measured
            at_floor = resident and resident >= calibration_bytes(
                {**_live_branch(line), "floor_bytes": 0, "small": None}, dry, one,
                plan.arch_video and int(frames) == 1, int(width) * int(height), live=live)
            single = plan.arch_video and int(frames) == 1
            on = f"{AMX_BACKEND}, a CPU with AMX tiles" if plan.amx_bound else "this platform"
            head = (f"{branch}the line of {other}'s {words} points on {on} ({own['n_points']} points{where}; "
                    f"{m['architecture']} has no {words} points, and that line is above its own plain one): "
                    if other else f"{branch}its own line{kept} on {on} ({own['n_points']} points{where}): ")
            reason = (head + _live_floor_says(own, dry, one, single, int(width) * int(height), copy, live)
                      + (f"the floor its smallest points measured, {resident / MIB:.0f} MiB, above "
                         if at_floor else "") + _line_terms(line, dry, one, single, int(width) * int(height)))
            seen = own.get("transient_seen_bytes")
            if copy and "copy_line" in own:  # its live line, the copy branch below it here
                reason += (f"; {_copy_says(plan, tile)}, {copy / MIB:.0f} MiB, is held while few tensors are live, "
                           f"so it is not added: with it and those tensors (its copy branch) the line reserves less")
            elif copy and seen is not None:  # fitted on the whole demand: its points' transients are in the line
                reason += (f" + {own['weight_copy_factor']:.2f} x ({_copy_says(plan, tile)}, {copy / MIB:.1f} MiB,"
                           f" less the {seen / MIB:.1f} MiB its points held)" if copy > seen else
                           f"; {_copy_says(plan, tile)}, {copy / MIB:.0f} MiB, is within the {seen / MIB:.0f} MiB "
                           f"its points held, which the line prices")
            elif copy:
                reason += f" + {own['weight_copy_factor']:.2f} x {_copy_says(plan, tile)}, {copy / MIB:.0f} MiB"
            if dry > line["dry_bytes_max"]:
                reason += f", {_times(dry / line['dry_bytes_max'])} beyond its largest measured dry-run peak"
            return Estimate(total, "measured", calib["calibration"], reason + hidden + cast_note, env,
                            plan.cast_bytes, 0, pixels, dry / line["dry_bytes_max"], True)
        if note == "capped":  # its own untiled line bounds a transfer's tiles
            return Estimate(total, "transfer", calib["calibration"], f"{m['architecture']} not measured tiled here: "
                            + _capped_says(plan, live)
                            + cast_note, env, plan.cast_bytes, 0, pixels, *capped())
        agree = ("architectures agree" if calib["agree"] else "UNVERIFIED: one architecture measured"
                 if len(calib["architectures"]) < 2 else "UNVERIFIED: its architectures disagree")
        single, px = plan.arch_video and int(frames) == 1, int(width) * int(height)
        # the line that set the price: the class line, or one architecture's where it reserves more; or the floor
        own_untiled = plan.own_untiled(int(frames))
        _, top, floored = _transfer(calib, dry, one, single, px, copy, live,
                                    plan.variant_at(int(width), int(height), int(batch), int(frames), tile),
                                    own_untiled, tile is None)
        chosen = transfer_line(calib, top, own_untiled)
        branch = ""
        if "copy_line" in chosen:  # an own untiled line: the larger of its live line and its copy branch prices
            args = (dry, one, single, px, copy)
            if _line_bytes(chosen["copy_line"], *args) > _line_bytes(_live_branch(chosen), *args):
                branch = "the copy branch (the weight copy outweighs the live tensors) of "
        priced = chosen["copy_line"] if branch else chosen
        line = _line_at(priced, dry, one, single, px)[0]
        below = (f"; frames below {priced['domain_min_frame_pixels']} px: the line of the points measured "
                 f"there" if line is not priced else "")
        which = (f"{calib['kernel']} class line of {', '.join(sorted(calib['architectures']))}" if top == "class"
                 else (f"{branch}{top} on this platform ({chosen['n_points']} points) at its tiles' dry run"
                       if top == OWN_UNTILED else transfer_line_words(top))
                 + f", the highest here of the {calib['kernel']} class line of "
                   f"{', '.join(sorted(calib['architectures']))}, their own"
                 + (f" and {OWN_UNTILED}" if own_untiled is not None and top != OWN_UNTILED else ""))
        if plan.amx_bound:
            which += f" on {AMX_BACKEND}"
        where = "tiled here" if own_untiled is not None else "here"
        reason = (f"{m['architecture']} not measured {where}; {which} ({agree}, spread {calib['spread']:.2f}{below}): "
                  + (_transfer_floor_says(calib, dry, live, tile is None) if floored else "")
                  + _line_terms(line, dry, one, single, px))
        chosen = priced
        seen = chosen.get("transient_seen_bytes")
        if copy and seen is not None and copy <= seen:  # an own line fitted on the whole demand
            reason += f"; {_copy_says(plan, tile)}, {copy / MIB:.0f} MiB, is within the {seen / MIB:.0f} MiB its " \
                      f"points held, which the line prices"
        elif copy:
            reason += (f" + {chosen['weight_copy_factor']:.2f} x {_copy_says(plan, tile)}, "
                       + (f"{copy / MIB:.1f} MiB, less the {seen / MIB:.1f} MiB its points held" if seen else
                          f"{copy / MIB:.0f} MiB"))
        if dry > chosen["dry_bytes_max"]:
            reason += f", {_times(dry / chosen['dry_bytes_max'])} beyond that line's largest measured dry-run peak"
        return Estimate(total, "transfer", calib["calibration"], reason + hidden + cast_note, env, plan.cast_bytes, 0,
                        pixels, dry / chosen["dry_bytes_max"], calib["agree"] or top == OWN_UNTILED)
    if plan.kind == "pixel":
        reason = ("measured pixel line (no dry-run structure covers this request)" if plan.cs is None else
                  "measured pixel line (its points calibrate no dry-run structure: e.g. tiles below its smallest)")
        reason += note
        most = plan.pixel_line[3]  # type: ignore[index]
        return Estimate(total, "measured", plan.group["group"], reason + cast_note, env, plan.cast_bytes, floor,
                        pixels, pixels / most if most else None, True)
    if note == "capped":  # the untiled price bounds the tiles' fallback
        return Estimate(total, "fallback", None, "platform not measured tiled: "
                        + _capped_says(plan, dry)
                        + cast_note, env, plan.cast_bytes, floor, pixels, *capped())
    scaled = env - copy  # the rule before the weight copy
    measured_untiled = tile is not None and plan.whole is not None and plan.whole.kind != "fallback"
    unmeasured = "platform not measured tiled" if measured_untiled else "platform not measured"
    tiles = None
    if ref and tile is not None:  # the legacy rule of one tile (_Plan.tile_rule), of one sample where sliced
        sliced = plan.out is not None and int(batch) > 1
        bs = 1 if sliced else int(batch)
        legacy = _legacy(*plan.legacy, int(width), int(height), bs, 1, tile)  # as _Plan.price takes it
        rule, d_t, ref_t = plan.tile_rule(tile, bs, int(frames), one if sliced else dry, legacy)
        tiles = (rule * dry / one if sliced else rule, d_t, ref_t, one if sliced else dry, sliced, legacy)
    if dry is not None and scaled == int(FALLBACK_MIN_DRY_FACTOR * dry) and scaled > floor and \
            (not ref or scaled > (tiles[0] if tiles else floor * dry / ref)):
        reason = (f"{unmeasured}: {FALLBACK_MIN_DRY_FACTOR} x its dry-run peak {dry / MIB:.0f} MiB (the seeds' "
                  f"lowest demand / dry run), above the legacy rule"
                  + (f" of one {tile} px tile, scaled" if tiles else f" x {dry / ref:.2f}" if ref else ""))
    elif tiles:
        _, d_t, ref_t, d, sliced, legacy = tiles
        side = tile_cover(plan.cs, tile)
        reason = (f"{unmeasured}: legacy rule of one {tile} px tile, {legacy / MIB:.0f} MiB,"
                  + (f" x {(side // tile) ** 2} (a tile of its loop covers {side} px a side)" if side > tile else "")
                  + (f" x {d_t / ref_t:.2f} (an image of one tile dry-runs {d_t / MIB:.0f} MiB against "
                     f"{ref_t / MIB:.0f} MiB of the SD family)" if d_t > ref_t else "")
                  + (f" + {FALLBACK_MIN_DRY_FACTOR} x {(d - d_t) / MIB:.0f} MiB its tiles' assembly adds (the seeds' "
                     f"lowest demand / dry run)" if d > d_t else "")
                  + f" (its dry-run peak {d / MIB:.0f} MiB)"
                  + (f", per sample, x {dry / one:.3f} for the sliced batch (its dry run over one sample's)" if sliced
                     else ""))
    elif ref:  # the fallback scaled by the dry runs
        ratio = dry / ref
        if ratio > 1:
            reason = (f"{unmeasured}: legacy rule x {ratio:.2f} (dry-run peak {dry / MIB:.0f} MiB against "
                      f"{ref / MIB:.0f} MiB of the SD family)")
        else:
            reason = f"{unmeasured}: legacy rule (dry-run peak {ratio:.2f}x the SD family's)"
    else:
        reason = f"{unmeasured}: legacy rule (no dry-run structure" + \
                 (", frames priced as pixels)" if int(frames) > 1 and dry is None else ")")
    if copy:
        reason += f" + {_copy_says(plan, tile)} on {backend}, {copy / MIB:.0f} MiB with the margin"
    if measured_untiled:  # whose price caps no tiled one where the live floor set it
        try:
            whole = plan.whole.price(width, height, batch, frames, None)
        except ValueError:  # diffusers cannot run it untiled
            whole = None
        if whole is not None and whole[4] == "floored" and whole[1] < env:
            reason += (f"; the untiled request's {-(-whole[0] // MIB)} MiB caps nothing: the live floor set it, a "
                       f"lower bound on its demand, not a line over measured points")
    # measured under another allocator only (a CPU rig measures glibc-fixed, a process runs glibc): said, as the
    # allocator is the one key a process may change
    seen = {g["allocator"] for g in [*doc["groups"], *doc.get("calibrations", [])]  # (none before schema 6)
            if (g["conv_backend"], g["dtype"], g["os"], g["op"]) == (backend, dtype, os, op)}
    others = sorted(seen - {allocator})
    if others and allocator not in seen:
        reason += (f"; {backend} {dtype} {op} on {os} was measured under allocator {' and '.join(others)}, not "
                   f"{allocator}")
    return Estimate(total, "fallback", None, reason + cast_note, env, plan.cast_bytes, floor, pixels)


def _capped_says(plan: _Plan, dry: float) -> str:
    """What a reason says where the untiled request's price caps a tiled one (``_Plan._whole``) whose dry-run peak
    is ``dry`` bytes (live tensors)."""
    u = plan.whole
    how = (f"measured: its own line, {u.own['n_points']} points" if u.own is not None  # type: ignore[union-attr]
           else "a transfer" if u.kind == "calib" else "the fallback")  # type: ignore[union-attr]
    return (f"capped at this request's untiled price ({how}), as its tiles' dry-run peak, {dry / MIB:.0f} MiB, is "
            f"below the whole image's")


def _live_floor_says(line: dict, dry: float, dry1: float, single_frame: bool, frame_pixels: int,
                     copy_bytes: float, live: float) -> str:
    """What a reason says where :data:`LIVE_FLOOR_FACTOR` x the live tensors' dry-run peak ``live`` sets an own
    line's price ('' where the line does)."""
    return _live_floor_words(live) if _floored(line, dry, dry1, single_frame, frame_pixels, copy_bytes, live)[1] \
        else ""


def _live_floor_words(live: float) -> str:
    """The reason's words for :data:`LIVE_FLOOR_FACTOR` x the live tensors' dry-run peak ``live``."""
    return (f"{LIVE_FLOOR_FACTOR:.2f} x its dry-run peak {live / MIB:.0f} MiB (never less than the live tensors, "
            f"with the margin), above ")


def _transfer_floor_says(calib: dict, dry: float, live: float, untiled: bool) -> str:
    """What a reason says where a transfer's floor (:func:`transfer_floor`) set its price: for an ``untiled``
    request the dry run ``dry`` and the calibration's ``first_call_bytes``, else the live tensors ``live``."""
    if not untiled:
        return _live_floor_words(live)
    first = calib.get("first_call_bytes", 0)
    return (f"{LIVE_FLOOR_FACTOR:.2f} x (its dry-run peak {dry / MIB:.0f} MiB"
            + (f" + {first / MIB:.0f} MiB, the most a measured architecture here needed beyond its dry run at "
               f"every point: a first call's one-time cost" if first else "")
            + ") (an untiled transfer never prices less: the lines here price less than it, and an architecture "
              "never measured may need all of it), above ")


def _copy_says(plan: _Plan, tile: object) -> str:
    """Which weight copy a reason names: by torch's rule, or the largest (half precision, tiles, no rule data)."""
    s, _, _, dtype, _ = plan.copy  # type: ignore[misc]
    if _priced_by_rule(s, dtype, tile is not None):
        return "what a convolution holds at this size (a weight copy or an im2col buffer, by torch's oneDNN rule)"
    return "the copy of its largest convolution's weight"


def working_memory_bytes(model: str, op: str, width: int, height: int, *, dtype: str, loaded_dtype: str | None = None,
                         backend: str, allocator: str, os: str, batch: int = 1, frames: int = 1,
                         tile: int | None = None, cast: str = "model", attention: str = "fused",
                         slicing: bool = False, coefficients: object = None) -> int:
    """Bytes to reserve for one VAE ``op`` of ``width`` x ``height`` pixels; see :func:`explain` for the reasoning.
    The hot path: after the first call of a key it only checks and prices the sizes."""
    coef = _CACHE.get(None) if coefficients is None else None
    if coef is None:
        coef = _doc(coefficients)
    try:
        plan = coef["_plans"].get((model, op, dtype, loaded_dtype, backend, allocator, os, tile is not None, cast,
                                   attention, slicing))
    except TypeError:
        plan = None
    if plan is None or (slicing is not False and slicing is not True):  # 0 and 1.0 hit the plans of False and True
        plan = _plan(coef, model, op, dtype, loaded_dtype, backend, allocator, os, tile is not None, cast, attention,
                     slicing)
    return plan.price(width, height, batch, frames, tile)[0]


def largest_tile(model: str, op: str, width: int, height: int, budget_bytes: int, *, dtype: str,
                 loaded_dtype: str | None = None, backend: str, allocator: str, os: str, batch: int = 1,
                 frames: int = 1, candidates: object = None, cast: str = "model", attention: str = "fused",
                 slicing: bool = False, coefficients: object = None) -> dict:
    """The largest spatial tile whose reservation fits ``budget_bytes``, among ``candidates`` (default
    :data:`TILE_CANDIDATES`; those that :func:`geometry_error` accepts: smaller than the image, multiples of the
    model's spatial factor and larger than it; and within the tiled structure's ``tile_min``-``tile_max``).

    ``budget_bytes``: an int or a float (``free * 0.9``), 0 or more.

    Returns ``{"untiled_bytes", "untiled_fits", "untiled_refused", "tiled_refused", "tile" (None: none fits),
    "tile_bytes", "priced": {tile: bytes}}``: where the request cannot run untiled (diffusers refuses it, as
    CogVideoX's decode of a 1920x1088 x 49-frame clip) ``untiled_bytes`` is None and ``untiled_refused`` says why,
    and the tiles are still priced; where the model cannot run tiled, ``priced`` is empty and ``tiled_refused``
    says why. ``priced`` holds the candidates that
    could be priced, so an empty one with ``tile`` None says that no candidate applies, not that none fits.
    A request neither way can run raises :class:`Unrunnable` (a ValueError) with the untiled refusal; a bad
    argument or a platform vaemem will not price raises ValueError, as pricing does.
    Only the spatial tile is chosen: a clip runs in time as its class runs it by default (every frame at once, in
    chunks for Wan and CogVideoX, in 17-frame windows for HunyuanVideo, in 17-frame clips for MiniMax-H3), and the
    prices say so."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real) \
            or not 0 <= budget_bytes < math.inf:  # numpy's numbers too
        raise ValueError(f"budget_bytes must be a number of bytes, 0 or more, got {budget_bytes!r}")
    budget = int(budget_bytes) if isinstance(budget_bytes, numbers.Integral) else float(budget_bytes)
    kw = dict(dtype=dtype, loaded_dtype=loaded_dtype, backend=backend, allocator=allocator, os=os, batch=batch,
              frames=frames, cast=cast, attention=attention, slicing=slicing, coefficients=coefficients)
    untiled: int | None = None
    refused: ValueError | None = None
    try:
        untiled = working_memory_bytes(model, op, width, height, **kw)  # also checks every argument
    except Unrunnable as e:  # diffusers cannot run it untiled: its tiles may run (a bad argument or an unpriced
        refused = e  # platform raises here)
    if candidates is not None and not isinstance(candidates, (list, tuple, set, frozenset, range)):
        raise ValueError(f"candidates must be a list of tile sides in px, got {candidates!r}")
    tiles = sorted({_positive_int("tile", t) for t in (TILE_CANDIDATES if candidates is None else candidates)},
                   reverse=True)
    priced: dict = {}
    try:
        plan = _plan(_doc(coefficients), model, op, dtype, loaded_dtype, backend, allocator, os, True, cast,
                     attention, slicing)  # refuses a model that cannot run tiled
    except Unrunnable as e:  # diffusers cannot run this model's op tiled: no tile is priced, and it says why
        if refused is not None:
            raise refused from None
        tiles, tiled_refused = [], str(e)
    else:
        tiled_refused = None
    f = _doc(coefficients)["models"][model]["spatial_factor"] if tiles else 0
    best = None
    for t in tiles:
        if t < plan.tile_min or (plan.tile_max is not None and t > plan.tile_max) \
                or geometry_error(model, f, width, height, t):
            continue  # one that could not be priced is skipped
        try:
            priced[t] = working_memory_bytes(model, op, width, height, tile=t, **kw)
        except Unrunnable:  # diffusers refuses this tile too: skipped
            continue
        if best is None and priced[t] <= budget:
            best = t
    if refused is not None and not priced:
        raise refused
    return {"untiled_bytes": untiled, "untiled_fits": untiled is not None and untiled <= budget,
            "untiled_refused": None if refused is None else str(refused), "tiled_refused": tiled_refused,
            "tile": best, "tile_bytes": priced.get(best) if best is not None else None, "priced": priced}


# ---- the platform an app runs on (it hands in the torch it imported: the estimator never imports torch) ----------

def conv_backend(torch: object, device: str = "cpu", dtype: str = "fp32") -> str:
    """The conv backend key of ``device`` (cuda, cpu, mps, xpu) in ``dtype``: ``miopen`` on ROCm (recognised by
    ``torch.version.hip``), ``cudnn`` on CUDA; on the CPU ``onednn`` where torch's mkldnn is available and, for
    bf16/fp16, where the CPU has the instructions (torch's own ``_is_mkldnn_bf16_supported`` /
    ``_is_mkldnn_fp16_supported``), else ``aten`` (torch's reference convolution); bf16/fp16 on oneDNN is
    ``onednn-amx`` where the CPU has AMX tiles (``torch.cpu._is_amx_tile_supported``; :data:`AMX_BACKEND`). The
    measuring rig uses this rule too."""
    if not isinstance(device, str):
        raise ValueError(f"device must be a string such as 'cuda:0' or 'cpu', got {device!r}")
    if not isinstance(dtype, str) or dtype not in ELEMENT_SIZE:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    kind = device.split(":")[0]
    if kind == "cuda":
        return "miopen" if getattr(torch.version, "hip", None) else "cudnn"  # type: ignore[attr-defined]
    if kind == "cpu":
        if not torch.backends.mkldnn.is_available():  # type: ignore[attr-defined]
            return "aten"
        probe = {"bf16": "_is_mkldnn_bf16_supported", "fp16": "_is_mkldnn_fp16_supported"}.get(dtype)
        if probe and not getattr(torch.ops.mkldnn, probe)():  # type: ignore[attr-defined]
            return "aten"
        return AMX_BACKEND if probe and _cpu_has_amx(torch) else "onednn"
    if kind in ("mps", "xpu"):
        return kind
    raise ValueError(f"unknown device {device!r}; choose one of: cuda, cpu, mps, xpu")


def _cpu_has_amx(torch: object) -> bool:
    """Whether this CPU has AMX tiles: torch's own probe (``torch.cpu._is_amx_tile_supported``), else Linux's CPU
    flags (``amx_tile`` in /proc/cpuinfo), else True: where neither can tell, the platform that holds more (a CPU
    without AMX is then over-reserved, up to 1.26x, never under)."""
    probe = getattr(getattr(torch, "cpu", None), "_is_amx_tile_supported", None)
    if callable(probe):
        try:
            return bool(probe())
        except Exception:  # noqa: BLE001  (a torch build's probe may raise what it likes; the flags still tell)
            pass
    try:
        with open(CPUINFO, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return True


def os_key(platform: str | None = None) -> str:
    """linux, windows or darwin, from ``sys.platform`` (or the one given)."""
    import sys

    p = sys.platform if platform is None else platform
    if not isinstance(p, str):
        raise ValueError(f"platform must be a string such as sys.platform, got {p!r}")
    if p.startswith("linux"):
        return "linux"
    if p in ("win32", "cygwin"):
        return "windows"
    if p == "darwin":
        return "darwin"
    raise ValueError(f"unsupported platform {p!r}: the estimator knows {', '.join(OSES)}")


def _alloc_conf(env: dict) -> str:
    return env.get("PYTORCH_ALLOC_CONF") or env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_HIP_ALLOC_CONF") \
        or ""


def detect_allocator(backend: str, env: dict | None = None, os: str | None = None) -> str:
    """The allocator key a process with environment ``env`` would run ``backend`` with (no torch needed). GPUs:
    ``PYTORCH_ALLOC_CONF`` (or its deprecated aliases) parsed: ``backend:cudaMallocAsync``,
    ``expandable_segments:True`` / ``:False``, else ``native``. CPU on Linux: ``glibc-fixed`` when glibc's
    ``MALLOC_MMAP_THRESHOLD_`` is set, else ``glibc``; CPU elsewhere: ``system`` (not glibc; never measured)."""
    env = dict(_os.environ if env is None else env)
    odd = sorted(str(k) for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str))
    if odd:
        raise ValueError(f"env must map names to strings, as os.environ does; not: {', '.join(odd)}")
    _check_backend(backend)
    if backend in ("mps", "xpu"):  # their allocators take no settings vaemem keys
        return "native"
    if backend in CPU_BACKENDS:
        if (os or os_key()) != "linux":
            return "system"
        return "glibc-fixed" if "MALLOC_MMAP_THRESHOLD_" in env else "glibc"
    conf = _alloc_conf(env).replace(" ", "")
    if "cudaMallocAsync" in conf:
        return "cudaMallocAsync"
    if "expandable_segments:True" in conf:
        return "expandable"
    if "expandable_segments:False" in conf:
        return "expandable-off"
    return "native"


def detect_platform(torch: object, dtype: str = "fp32", device: str | None = None, env: dict | None = None) -> dict:
    """The platform keys of this process for pricing ``dtype``: ``{"device", "dtype", "backend", "allocator", "os",
    "attention"}``, from the ``torch`` module the app already imported. They hold for ``dtype`` only (the backend
    and the attention path depend on it: a CPU may run bf16 on torch's reference path and fp32 on oneDNN, priced 3x
    apart), so the dtype travels with them: pass all but ``device`` to the pricing, and detect once per dtype.
    ``device`` defaults to CUDA/ROCm, then MPS, then XPU where available, else the CPU. The allocator comes from
    ``torch.cuda.memory.get_allocator_backend()`` (cudaMallocAsync) and the parsed allocator variables (expandable
    or not); the attention path is ``fused`` where a fused scaled-dot-product kernel takes a VAE's attention head on the device
    in ``dtype``, else ``math`` (the score matrix is materialised): a probe that runs one small attention there
    (:func:`_fused_attention`). A device this torch does not see raises ValueError."""
    if not isinstance(dtype, str) or dtype not in ELEMENT_SIZE:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(ELEMENT_SIZE)}")
    if device is not None and not isinstance(device, str):
        raise ValueError(f"device must be a string such as 'cuda:0' or 'cpu', got {device!r}")
    if not all(hasattr(torch, a) for a in ("backends", "version", "nn")):  # what the probes read
        raise ValueError(f"detect_platform needs the torch module (import torch; detect_platform(torch)), got "
                         f"{type(torch).__name__}")
    if device is None:
        device = next(k for k in ("cuda", "mps", "xpu", "cpu") if _available(torch, k))
    backend = conv_backend(torch, device, dtype)
    if not _available(torch, device.split(":")[0]):
        raise ValueError(f"device {device!r} is not available to this torch: detect_platform reads the platform "
                         "this process runs on")
    os = os_key()
    allocator = detect_allocator(backend, env, os)
    if backend in ("cudnn", "miopen"):
        memory = getattr(torch.cuda, "memory", None)  # type: ignore[attr-defined]
        getter = getattr(memory, "get_allocator_backend", None)
        try:
            if getter is not None and getter() == "cudaMallocAsync":
                allocator = "cudaMallocAsync"
        except (AttributeError, RuntimeError):  # a torch built without this device: the environment decides
            pass
    return {"device": device.split(":")[0], "dtype": dtype, "backend": backend, "allocator": allocator, "os": os,
            "attention": "fused" if _fused_attention(torch, device, dtype) else "math"}


def _available(torch: object, kind: str) -> bool:
    """Whether this torch runs on a device of ``kind`` (cuda: CUDA or ROCm; the CPU always)."""
    if kind == "cpu":
        return True
    module = getattr(getattr(torch, "backends", None), "mps", None) if kind == "mps" else getattr(torch, kind, None)
    return bool(getattr(module, "is_available", lambda: False)())


# torch's fused SDPA kernels and the switches that enable them (torch.backends.cuda, for every device)
FUSED_SDPA = (("FLASH_ATTENTION", "flash_sdp_enabled"), ("EFFICIENT_ATTENTION", "mem_efficient_sdp_enabled"),
              ("CUDNN_ATTENTION", "cudnn_sdp_enabled"))
PROBE_HEAD = (64, 512)  # tokens, channels: one head of the KL VAEs' mid-block attention (diffusers runs it whole)


def _fused_attention(torch: object, device: str, dtype: str) -> bool:
    """Whether torch's scaled-dot-product attention runs a fused kernel (no score matrix) for a VAE's attention on
    ``device`` in ``dtype``: a probe of one head of :data:`PROBE_HEAD` (128 KiB in fp32 on the device) restricted to
    the fused kernels the switches enable (and the device-specific one torch has no switch for,
    ``OVERRIDEABLE``: XPU's); a refusal (no kernel takes that head, as on ROCm builds whose kernels stop at 256
    channels, or a device with none) says ``math``, and so does any error of the probe (the dearer path). Why a probe: the switches are on by default
    whether or not a kernel exists for the device, the dtype and a 512-channel head. A torch without
    ``torch.nn.attention`` (before 2.3) is judged by the switches."""
    nn = getattr(torch, "nn", None)
    if not hasattr(getattr(nn, "functional", None), "scaled_dot_product_attention"):
        return False
    switches = getattr(getattr(torch, "backends", None), "cuda", None)
    enabled = [k for k, switch in FUSED_SDPA if getattr(switches, switch, lambda: False)()]
    attention = getattr(nn, "attention", None)
    kernel, kinds = getattr(attention, "sdpa_kernel", None), getattr(attention, "SDPBackend", None)
    if kernel is None or kinds is None:
        return bool(enabled)
    kernels = [getattr(kinds, k) for k in (*enabled, "OVERRIDEABLE") if hasattr(kinds, k)]
    if not kernels:
        return False
    try:
        q = torch.zeros((1, 1, *PROBE_HEAD), dtype=getattr(torch, TORCH_DTYPE[dtype]),  # type: ignore[attr-defined]
                        device=device)
        with kernel(kernels):
            nn.functional.scaled_dot_product_attention(q, q, q)  # type: ignore[union-attr]
    except Exception:  # "No available kernel": torch would materialise the score matrix (any other error of the
        return False  # probe, e.g. a device out of memory, takes the dearer path too)
    return True
