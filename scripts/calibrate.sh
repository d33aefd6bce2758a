#!/usr/bin/env bash
# Fits the A100-80 compute-model constants in configs/gpus.yaml to vTrain's single-node measurements
# (shared/data/measured/), reports the out-of-sample error on the multi-node runs, and propagates the
# constants to every GPU extrapolated from A100-80. Constants are never tuned by hand: rerun this.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARACHNE_BUILD_DIR:-$root/build}"
data="${ARACHNE_DATA:-$(cd "$root/.." && pwd)/shared/data}"
"$root/scripts/setup.sh" "$build"
"$build/arachne" calibrate --gpu A100-80 --evaluations "${EVALUATIONS:-600}" \
  --data "$data/measured/vtrain_a100_single_node.csv" \
  --validate "$data/measured/vtrain_a100_multi_node.csv" \
  --write "$root/configs/gpus.yaml"
