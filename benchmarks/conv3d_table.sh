#!/usr/bin/env bash
# The bench-conv3d table of the closing note: MiniMax-H3 and Wan 2.1 encoders, native vs taps vs stacked,
# fp32 and bf16-autocast, on this machine's CPU. Appends to measurements/conv3d/<rig>.jsonl.
#   benchmarks/conv3d_table.sh [rig]
# MiniMax-H3 encodes in 17-frame clips (shorter input is padded to 17), so its chunk is 17 frames.
# Conv work per chunk (meta-device count): MiniMax-H3 128x128x17 2.24 TFLOP, Wan 2.1 128x128x9 0.76 TFLOP.
set -euo pipefail
cd "$(dirname "$0")/.."
rig=${1:-epyc-avx2-2core}
v=.venv/bin/vaemem
run() { $v bench-conv3d --rig "$rig" "$@"; }
# fp32: oneDNN runs conv2d and conv3d on this CPU
run -m minimax-h3 --conv3d both --method taps --frames 17 --res 128 --runs 3
run -m minimax-h3 --conv3d decomposed --method stacked --frames 17 --res 128 --runs 3
run -m wan21 --conv3d both --method taps --frames 9 --res 128 --runs 3
run -m wan21 --conv3d decomposed --method stacked --frames 9 --res 128 --runs 3
# bf16-autocast: torch's reference conv path on an AVX2-only CPU (native bf16 conv3d ran at 0.2 GFLOP/s in a
# probe, against ~40 in fp32), so small chunks: MiniMax-H3 one frame (its single-image path), Wan 2.1 five frames
run -m minimax-h3 --conv3d both --method taps --frames 1 --res 32 --dtype bf16-autocast --runs 2
run -m wan21 --conv3d both --method taps --frames 5 --res 32 --dtype bf16-autocast --runs 2
