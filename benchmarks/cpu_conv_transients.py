"""What one CPU convolution holds beyond its output while it runs: the part of demand a dry run cannot see.

    python benchmarks/cpu_conv_transients.py      # Linux; re-runs itself under glibc-fixed

A dry run counts tensors. On this CPU a convolution that oneDNN runs also reorders its weight (and its input or
output) into blocked formats for the duration of the call: buffers that are no tensor, so no dry run sees them,
and that the calibration factor must carry. This prints, per convolution, the resident peak of one warm call
above the resident size before it (``/proc/self/status`` VmHWM after a reset through ``clear_refs``), the
output's bytes, and what is left: the transient, beside the weight's bytes plus max(input, output) bytes
(oneDNN's reorders) and the im2col buffer (torch's own path).

A small 3-D input takes torch's own path instead, whose transient is the im2col buffer (input channels x
kernel volume x output positions: 27x the output per channel for a 3x3x3 kernel), growing with size until
oneDNN takes over and holds the weight instead (the rows of one frame of a 512-channel latent). The rows marked
cl run on a channels-last input: where oneDNN runs them, torch first copies the weight to channels-last, so two
copies are held (HunyuanVideo 1.5's 864 MiB convolution, after its attention).

Read with the structure's facts: the transient of a large weight is size-independent, so a pure ratio to the
dry run cannot carry it at small sizes (HunyuanImage-2.1's decoder has a 144 MiB 1024->4096 convolution at its
latent resolution); the output-sized part scales with the dry run, which is why a calibration factor carries it.
"""

from __future__ import annotations

import os
import sys

ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}  # glibc-fixed: freed blocks unmapped

CASES = (  # (dims, in channels, out channels, kernel, frames (3-D), side in px, dtype)
    (2, 2048, 2048, 3, 0, 8, "fp32"), (2, 1024, 4096, 3, 0, 8, "fp32"), (2, 2048, 2048, 3, 0, 8, "bf16"),
    (2, 2048, 2048, 1, 0, 8, "fp32"), (2, 1024, 1024, 3, 0, 64, "fp32"), (2, 512, 512, 3, 0, 128, "fp32"),
    (2, 128, 128, 3, 0, 256, "fp32"), (2, 16, 128, 3, 0, 256, "fp32"), (2, 128, 3, 3, 0, 256, "fp32"),
    (2, 3, 128, 3, 0, 64, "fp32"),
    (3, 1024, 1024, 3, 3, 8, "fp32"), (3, 512, 512, 3, 3, 32, "fp32"), (3, 128, 128, 3, 9, 64, "fp32"),
    (3, 128, 128, 3, 9, 128, "fp32"), (3, 128, 3, 3, 9, 128, "fp32"), (3, 512, 512, 3, 3, 4, "fp32"),
    (3, 512, 512, 3, 1, 16, "fp32"), (3, 512, 512, 3, 1, 32, "fp32"), (3, 512, 512, 3, 1, 48, "fp32"),
    (3, 512, 4096, 3, 1, 8, "fp32"), (3, 512, 4096, 3, 1, 8, "bf16"),  # LTX-Video's decoder: bf16 always on oneDNN
    (3, 1024, 8192, 3, 3, 8, "fp32"),  # HunyuanVideo 1.5's decoder, 9 frames at 128x128
)
# The same convolutions on a channels-last input (HunyuanVideo 1.5's after its attention): torch copies the weight
# to channels-last before oneDNN reorders it, two copies for the call
CHANNELS_LAST = ((3, 1024, 8192, 3, 3, 8, "fp32"), (3, 512, 4096, 3, 3, 8, "fp32"), (2, 2048, 2048, 3, 0, 8, "fp32"))
MIB = 2**20


def _status(field: str) -> float:
    """A /proc/self/status field in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_peak() -> None:
    """Reset VmHWM to the current resident size (``clear_refs`` 5), or exit with one line saying why not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as e:
        sys.exit(f"error: cannot reset the resident peak through /proc/self/clear_refs: {e.strerror or e}")


def main() -> None:
    _reset_peak()  # fails before any convolution is built where the kernel does not allow it
    import torch

    torch.set_grad_enabled(False)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    print(f"torch {torch.__version__}, oneDNN {torch.backends.mkldnn.is_available()}, {os.cpu_count()} cores, "
          f"glibc-fixed; MiB")
    print(f"{'convolution':34s} {'weight':>7s} {'in':>7s} {'out':>7s} {'peak':>7s} {'transient':>9s} "
          f"{'w+max(in,out)':>13s} {'im2col':>7s}")
    for (dims, cin, cout, k, frames, side, dtype), last in [(c, False) for c in CASES] + [(c, True)
                                                                                      for c in CHANNELS_LAST]:
        cls = torch.nn.Conv2d if dims == 2 else torch.nn.Conv3d
        conv = cls(cin, cout, k, padding=k // 2).to(dtypes[dtype])
        shape = (1, cin, side, side) if dims == 2 else (1, cin, frames, side, side)
        x = torch.randn(shape).to(dtypes[dtype])
        if last:
            x = x.contiguous(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
        conv(x)  # warm: the first call also builds oneDNN's primitive
        _reset_peak()
        before = _status("VmRSS")
        y = conv(x)
        peak = _status("VmHWM") - before
        w, i, o = (t.numel() * t.element_size() / MIB for t in (conv.weight, x, y))
        name = f"conv{dims}d {cin}->{cout} k{k} {f'{frames}x' if dims == 3 else ''}{side}px {dtype}" + (
            " cl" if last else "")
        im2col = cin * k**dims * y[0, 0].numel() * y.element_size() / MIB  # torch's own path: its column buffer
        print(f"{name:34s} {w:7.1f} {i:7.1f} {o:7.1f} {peak:7.1f} {peak - o:9.1f} {w + max(i, o):13.1f} "
              f"{im2col:7.1f}")
        del y


if __name__ == "__main__":
    if not sys.platform.startswith("linux"):
        sys.exit("error: reads /proc/self/status and clear_refs: Linux only")
    if any(os.environ.get(k) != v for k, v in ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ENV})
    main()
