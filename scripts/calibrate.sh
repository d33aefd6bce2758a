#!/usr/bin/env bash
# Fits the A100-80 compute-model constants in configs/gpus.yaml to vTrain's single-node measurements
# (shared/data/measured/), reports the out-of-sample error on the multi-node runs, and propagates the
# constants to every GPU extrapolated from A100-80. Then fits every other GPU type with `fitted_on:`
# relative to the new A100-80 constants (published within-source speed ratios, published_gpu_types.csv),
# re-derives every GPU extrapolated from those, and prints the per-type tables (README, "GPU
# generations"). Constants are never tuned by hand: rerun this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARACHNE_BUILD_DIR:-$root/build}"
data="${ARACHNE_DATA:-$(cd "$root/.." && pwd)/shared/data}"
"$root/scripts/setup.sh" "$build"
"$build/arachne" calibrate --gpu A100-80 --evaluations "${EVALUATIONS:-600}" \
  --data "$data/measured/vtrain_a100_single_node.csv" \
  --validate "$data/measured/vtrain_a100_multi_node.csv" \
  --write "$root/configs/gpus.yaml"
"$build/arachne" calibrate --published "$data/measured/published_gpu_types.csv" \
  --write "$root/configs/gpus.yaml"
