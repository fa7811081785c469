"""Which torch ops hold memory no dry run sees, op by op, in a real decode or encode on this CPU.

    python benchmarks/cpu_hidden_ops.py [MODEL OP DTYPE SIDE ...]   # Linux; re-runs itself under glibc-fixed
    python benchmarks/cpu_hidden_ops.py hunyuanimage-2.1 encode bf16 512
    python benchmarks/cpu_hidden_ops.py --convs MODEL OP DTYPE WIDTH HEIGHT FRAMES   # call by call
    python benchmarks/cpu_hidden_ops.py --math sd15 encode fp32 1024     # SDPA on its math path (score matrices)
    python benchmarks/cpu_hidden_ops.py --rules MODEL OP DTYPE WIDTH HEIGHT FRAMES   # the dry run's rules, call by call

A dry run counts the tensors each op returns; an op's own buffers (a convolution's reorders, a reduction's
upcast) are invisible to it. This runs the op once on real CPU tensors (a zoo model built from its config,
seeded, warmed by a first call) under a dispatch mode that, around every aten op, resets the resident peak
(``/proc/self/clear_refs``) and reads it after: the op's peak above the resident size before it, less the bytes
of what it returned, is what it held beyond its output. Prints, per aten op, its calls, the most it held so and
its largest output, in MiB. ``--convs`` prints each convolution call instead (its input and weight shapes, what it
held beyond its output, its output and input), the 12 that held the most.

Found on 2026-12-03 (AMD EPYC, AVX512-BF16, no AMX, torch 2.13.0; 1 min for the three defaults):
HunyuanImage-2.1's bf16 encode at 512 px, whose demand is 1.85-2.12x its dry run where the other image encoders'
medians are 1.04-1.27x (the same on the AMX Xeon, 0.996-0.998x, ``benchmarks/cross_rig_check.py``), holds 160 MiB in
``aten.mean.dim`` beyond a 32 MiB output: the channel-group mean of its downsampling shortcuts reduces a bf16 input
through an fp32 copy. In fp32 the mean holds nothing and the most is a convolution's, 128 MiB (its output's
reorder), as in every architecture. SD1.5's bf16 encode, which has no such mean, holds at most its convolutions'
80 MiB. SANA DC-AE's bf16 encode (``sana-dc-ae encode bf16 512``) holds the same 160 MiB in its means, yet its
demand is 1.01-1.13x its dry run: its means run when few tensors are live. And a bf16 convolution holds twice its
output (``sd15 decode bf16 512``: 256 MiB beyond a 128 MiB output; fp32, once: 258 beyond 256). The dry run counts
none of these, so left out by architecture HunyuanImage-2.1's bf16 encode is priced from the others' factors at
0.70.

Call by call (``--convs``, 2026-12-04, the same EPYC): the per-op maxima above mix calls. A bf16 convolution holds
a copy of its input, two for a 1x1 kernel: SD1.5's decoder at 512 px (``--convs sd15 decode bf16 512 512 1``)
holds 129 MiB beyond the 256->256 3x3 convolution's 128 MiB output (its input 128), 128 beyond the 256->128 one's
64 (input 128) and 256 beyond the 1x1 256->128 shortcut's 64 (input 128, twice): the "256 beyond 128" above is the
shortcut's hold beside another call's output. Wan 2.1's causal 3x3x3 convolutions (``--convs wan21 decode bf16 256
160 9``) hold their padded input, 46 MiB beyond a 30 MiB output (1.54x). That is the rule of a CPU without AMX
(``vaemem.tracing.counter.onednn_hidden_bytes(amx=False)``); the AMX Xeon's lines keep twice the output.

On the math attention path (``--math``, 2026-12-06, the AVX2 EPYC): ``aten._safe_softmax``, SDPA's softmax there,
holds a boolean mask of its input beyond its output, one byte per score (``--math sd15 encode fp32 1024``: 256 MiB
beyond a 1024 MiB score matrix; in bf16 too, whose scores the CPU's math path computes in fp32), which no dispatch
mode sees: the math-path encodes of SD1.5 and FLUX.1 at 1280 and 1536 px needed 1.12x their dry run until it was
counted (``vaemem.tracing.counter.safe_softmax_hidden_bytes``).

The dry run's rules against each call (``--rules``, 2026-12-07, the AVX512-BF16 EPYC): per convolution and mean
call, the resident peak while it ran above the op's start, beside what the dry run's counter puts there, the live
tensors before the call plus its output (an fp32 convolution's reorder with it where the counter keeps it,
``conv_live_bytes``) plus what the op holds by ``onednn_hidden_bytes`` (the rule of a CPU without AMX) and, for a
convolution, the larger of that and its call peak (the live bytes at its call and its weight's copy, two on a
channels-last input), as the dry run takes them. At the calls that lead, the dry run is 0.5-1.8 MiB below the
measured peak (2 minutes for these three): ``--rules hunyuanimage-2.1 encode bf16 512 512 1``, its largest
channel-group mean 352.8 MiB for 352.0; ``--rules ltx-2.3 encode bf16 512 320 9``, a mean 158.5 for 157.5 and a
convolution 151.8 for 150.0; ``--rules mochi encode bf16 256 160 7``, its 64->64 convolution on a channels-last
input 187.2 for 186.3. Two rules over-stated there and were corrected (schema 24): a half-precision mean's fp32
copies are held in place of its output, not beside it (with it the dry run put 384.0 and 168.8), and oneDNN keeps
no output reorder at a call on a channels-last input (with it, 221.3). Below the peak, LTX-2.3's bf16 convolutions
on inputs not channels-last hold their input's copy and their weight's at once (a 512->512 one 104.7 for 98.5,
its weight 13.5 MiB), where the dry run takes the larger of the two: never at a leading call here.
"""

from __future__ import annotations

import os
import sys

from cpu_conv_transients import ENV, _reset_peak, _status  # the same /proc readings (MiB), beside this file

DEFAULT = (("hunyuanimage-2.1", "encode", "bf16", 512), ("hunyuanimage-2.1", "encode", "fp32", 512),
           ("sd15", "encode", "bf16", 512))
MIB = 2**20


def run(model: str, op: str, dtype: str, side: int, math: bool = False) -> dict[str, list[int]]:
    """Per aten op: [calls, the most bytes it held beyond its output, its largest output in bytes]; ``math``: SDPA
    on its math path."""
    from contextlib import nullcontext

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from vaemem.models.build import DTYPES, build_model, input_shape, run_op
    from vaemem.models.zoo import get_spec

    rows: dict[str, list[int]] = {}

    class Held(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            _reset_peak()
            before = _status("VmRSS") * MIB
            out = func(*args, **(kwargs or {}))
            peak = _status("VmHWM") * MIB
            returned = sum(t.untyped_storage().nbytes() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            r = rows.setdefault(str(func), [0, 0, 0])
            r[0] += 1
            r[1] = max(r[1], peak - before - returned)
            r[2] = max(r[2], returned)
            return out

    spec = get_spec(model)
    m = build_model(spec, op, "cpu", dtype, seed=0)
    x = torch.randn(input_shape(spec, op, side, side, 1, 1)).to(DTYPES[dtype])
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]) if math else nullcontext():
        run_op(m, op, x)  # warm: oneDNN builds its primitives on the first call
        with Held():
            run_op(m, op, x)
    return rows


def convs(model: str, op: str, dtype: str, width: int, height: int, frames: int) -> list[tuple]:
    """Per convolution call: (input shape, weight shape, bytes held beyond its output, output bytes, input bytes)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from vaemem.models.build import DTYPES, build_model, input_shape, run_op
    from vaemem.models.zoo import get_spec

    calls: list[tuple] = []

    class Held(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            _reset_peak()
            before = _status("VmRSS") * MIB
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.convolution.default:
                returned = out.untyped_storage().nbytes()
                calls.append((tuple(args[0].shape), tuple(args[1].shape),
                              _status("VmHWM") * MIB - before - returned, returned, args[0].untyped_storage().nbytes()))
            return out

    spec = get_spec(model)
    m = build_model(spec, op, "cpu", dtype, seed=0)
    x = torch.randn(input_shape(spec, op, width, height, 1, frames)).to(DTYPES[dtype])
    with torch.no_grad():
        run_op(m, op, x)  # warm
        with Held():
            run_op(m, op, x)
    return calls


def rules(model: str, op: str, dtype: str, width: int, height: int, frames: int) -> list[tuple]:
    """Per convolution and half-precision mean call: (op, input shape, weight shape or reduced dims, the resident
    peak while it ran above the op's start, what the dry run's counter puts there: the live tensors before it, its
    output and the no-AMX rule's buffers (``vaemem.tracing.counter.onednn_hidden_bytes``), for a convolution the
    larger of that and its call peak, the live bytes at its call by ``conv_live_bytes`` and its weight's copy), in
    bytes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from vaemem.estimate import ONEDNN_MIN_ELEMENTS
    from vaemem.models.build import DTYPES, build_model, input_shape, run_op
    from vaemem.models.zoo import get_spec
    from vaemem.tracing.counter import (_CONVOLUTION, _MEAN, LiveBytes, _is_channels_last, conv_call,
                                        conv_live_bytes, onednn_hidden_bytes)

    calls: list[tuple] = []
    spec = get_spec(model)
    m = build_model(spec, op, "cpu", dtype, seed=0)
    x = torch.randn(input_shape(spec, op, width, height, 1, frames)).to(DTYPES[dtype])
    counter = LiveBytes()
    counter.exclude([*m.parameters(), *m.buffers(), x])
    start = 0.0

    class Rise(TorchDispatchMode):  # entered inside the counter: the counter has tracked ``out`` when it returns
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            live = counter.current
            _reset_peak()
            out = func(*args, **(kwargs or {}))
            peak = _status("VmHWM") * MIB - start
            if func is _MEAN and args[0].dtype != torch.float32:
                calls.append(("mean", tuple(args[0].shape), tuple(args[1]), peak,
                              counter.current + onednn_hidden_bytes(func, args, out, amx=False)))
            elif func is _CONVOLUTION:
                # the larger of the dry run's two views of the call: its oneDNN peak (the output and the op's
                # buffers) and its call peak (the live bytes at the call, conv_live_bytes, and the weight's copy
                # where oneDNN runs it in fp32 or at any size in half precision, two on a channels-last input)
                n, always, _, last = conv_call(args, out)
                rule = always or n > ONEDNN_MIN_ELEMENTS
                copy = args[1].numel() * args[1].element_size() * (1 + last) \
                    if rule or out.dtype != torch.float32 else 0
                call = live + conv_live_bytes(out, not (_is_channels_last(args[0]) and rule)) + copy
                calls.append(("convolution", tuple(args[0].shape), tuple(args[1].shape), peak,
                              max(counter.current + onednn_hidden_bytes(func, args, out, amx=False), call)))
            return out

    with torch.no_grad():
        run_op(m, op, x)  # warm: oneDNN builds its primitives on the first call
        start = _status("VmRSS") * MIB
        with counter, Rise():
            run_op(m, op, x)
    return calls


def main(argv: list[str]) -> None:
    _reset_peak()
    if argv[:1] == ["--rules"]:
        from vaemem.errors import VaememError

        from vaemem.models.build import DTYPES

        try:
            if len(argv) != 7:
                raise ValueError(f"six words, got {len(argv) - 1}")
            model, op, dtype, w, h, f = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6])
            if op not in ("decode", "encode"):
                raise ValueError(f"unknown op {op!r}; choose decode or encode")
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
            calls = rules(model, op, dtype, w, h, f)
        except (ValueError, RuntimeError, VaememError) as e:
            sys.exit(f"error: --rules MODEL OP DTYPE WIDTH HEIGHT FRAMES: {e}")
        print(f"{model} {op} {dtype} {w}x{h} x {f}, glibc-fixed; per call, MiB above the op's start: the resident "
              f"peak while it ran, the dry run's there; the calls the dry run puts highest, then those it "
              f"under-states most (one row per input and weight)")
        print(f"{'op':12s} {'input':28s} {'weight / dims':24s} {'measured':>9s} {'dry run':>9s} {'ratio':>7s}")
        rows = {}
        for name, shape, kind, peak, rule in calls:  # per input and weight, the call the dry run falls shortest at
            if (name, shape, kind) not in rows or peak - rule > rows[name, shape, kind][0] - rows[name, shape, kind][1]:
                rows[name, shape, kind] = (peak, rule)
        top = sorted(rows.items(), key=lambda kv: -kv[1][1])[:8]
        short = [kv for kv in sorted(rows.items(), key=lambda kv: kv[1][1] - kv[1][0]) if kv not in top][:4]
        for (name, shape, kind), (peak, rule) in top + short:
            print(f"{name:12s} {str(shape):28s} {str(kind):24s} {peak / MIB:9.1f} {rule / MIB:9.1f} "
                  f"{rule / peak:7.3f}")
        return
    if argv[:1] == ["--convs"]:
        if len(argv) != 7:
            sys.exit("error: --convs MODEL OP DTYPE WIDTH HEIGHT FRAMES")
        model, op, dtype, w, h, f = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6])
        print(f"{model} {op} {dtype} {w}x{h} x {f}, glibc-fixed; each convolution call, MiB")
        print(f"{'input':28s} {'weight':22s} {'held':>8s} {'output':>8s} {'input':>8s} {'held/input':>10s}")
        for x, wt, held, out, inp in sorted(convs(model, op, dtype, w, h, f), key=lambda c: -c[2])[:12]:
            print(f"{str(x):28s} {str(wt):22s} {held / MIB:8.1f} {out / MIB:8.1f} {inp / MIB:8.1f} "
                  f"{held / inp:10.2f}")
        return
    math = argv[:1] == ["--math"]
    argv = argv[1:] if math else argv
    if argv and len(argv) % 4:
        sys.exit("error: give points as MODEL OP DTYPE SIDE, four words each")
    points = [(argv[i], argv[i + 1], argv[i + 2], int(argv[i + 3])) for i in range(0, len(argv), 4)] or DEFAULT
    for model, op, dtype, side in points:
        rows = run(model, op, dtype, side, math)
        print(f"\n{model} {op} {dtype} {side}x{side} px{', math attention path' if math else ''}, glibc-fixed; MiB")
        print(f"{'aten op':40s} {'calls':>6s} {'held beyond output':>19s} {'largest output':>15s}")
        for name, (calls, held, out) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:6]:
            print(f"{name:40s} {calls:6d} {held / MIB:19.1f} {out / MIB:15.1f}")


if __name__ == "__main__":
    if not sys.platform.startswith("linux"):
        sys.exit("error: reads /proc/self/status and clear_refs: Linux only")
    if any(os.environ.get(k) != v for k, v in ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENV})
    main(sys.argv[1:])
