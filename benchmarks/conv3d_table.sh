#!/usr/bin/env bash
# The bench-conv3d table of the closing note: MiniMax-H3 and Wan 2.1 encoders, native vs taps vs stacked,
# fp32 and bf16-autocast, on this machine's CPU. Appends to measurements/conv3d/<rig>.jsonl.
#   benchmarks/conv3d_table.sh [rig]
set -euo pipefail
cd "$(dirname "$0")/.."
rig=${1:-epyc-avx2-2core}
v=.venv/bin/vaemem
for model in minimax-h3 wan21; do
  # fp32: oneDNN conv2d and conv3d on this CPU
  $v bench-conv3d -m $model --conv3d both --method taps --frames 9 --res 128 --runs 3 --rig $rig
  $v bench-conv3d -m $model --conv3d decomposed --method stacked --frames 9 --res 128 --runs 3 --rig $rig
  # bf16-autocast: the reference (slow) conv path on an AVX2-only CPU, so a smaller chunk
  $v bench-conv3d -m $model --conv3d both --method taps --frames 5 --res 32 --dtype bf16-autocast --runs 2 --rig $rig
done
