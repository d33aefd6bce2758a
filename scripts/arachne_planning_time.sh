#!/usr/bin/env bash
# Planning wall time of arachne and the five baselines at ~64, ~256 and ~1,024 GPUs
# (README "Planning time"). One `arachne evaluate` per size: CONFIGS held-out configurations drawn with
# --min-gpus = --max-gpus = size (GPU-type mixes, node sizes, partial nodes, dense and MoE models from the
# gen-data sampler), every planner on each, one configuration at a time (--threads 1, so the run does
# not contend with itself), every search capped at BUDGET_WALL seconds. Resumable: evaluate keeps a shard
# per finished configuration, so the same command after a kill computes only what is missing.
# Then scripts/plot_planning_time.py reads the three evaluation.h5 files and writes summary.md, CSV and PNG.
#   usage: scripts/arachne_planning_time.sh [OUT_DIR] [CONFIGS] [BUDGET_WALL]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/arachne-planning-time}
configs=${2:-4}
wall=${3:-60}
mkdir -p "$out"
for g in 64 256 1024; do
  start=$(date +%s)
  build/arachne evaluate --out "$out/gpus-$g" --configs "$configs" --seed 2 --min-gpus "$g" --max-gpus "$g" \
    --threads 1 --ablations none --budget-wall "$wall"
  echo "gpus $g: $(( $(date +%s) - start )) s wall" | tee -a "$out/wall.txt"
done
uptime | tee -a "$out/wall.txt"
/usr/bin/python3 scripts/plot_planning_time.py "$out" "$wall"
