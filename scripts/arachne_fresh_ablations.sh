#!/usr/bin/env bash
# What each template source gives with and without the climb (README "What the policy adds"): on the
# configurations of the committed fresh seeds 12-20, arachne and its ablations (policy, heuristic, random)
# with the default search (`climbs`), the same with `--refine 0` (`no-climb`), and at `--beam 16`
# (`beam-16`: arachne with the policy's 16 and the generator's 16, and the generator's 16 alone - as many
# starts as arachne's default 8 + 8), and arachne and the policy's 8 alone with an untrained policy (the
# weights `train` starts from, seed 1, everything else as shipped), with the default search
# (`untrained-policy`) and with `--refine 0` (`untrained-no-climb`), one configuration at a time
# (--threads 1); then
# scripts/ablation_table.py compares every plan with the committed baseline cells and arachne's committed
# cells and writes summary.md, ablations.csv and ablations.png to OUT_DIR. The runs go under RUNS_DIR (not
# committed); evaluate keeps a shard per finished configuration, so the same command after a kill computes
# only what is missing. ~55 minutes on one core.
#   usage: scripts/arachne_fresh_ablations.sh [OUT_DIR] [RUNS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/arachne-ablations-fresh}
runs=${2:-build/ablation-runs}
[ -x build/arachne ] || { echo "error: build/arachne: not built (scripts/setup.sh build)" >&2; exit 2; }
mkdir -p "$out" "$runs"
# The untrained policy: `train` with no epoch writes the weights it starts from (seeded; the two-configuration
# dataset only satisfies its options).
untrained=$runs/untrained-policy-weights
if [ ! -f "$untrained/policy.weights" ]; then
  mkdir -p "$untrained"
  build/arachne gen-data --out "$untrained/data.h5" --configs 2 --seed 99 --max-gpus 16 --max-templates 20 \
    --sampled-templates 10 > /dev/null
  build/arachne train --data "$untrained/data.h5" --validation "$untrained/data.h5" --out "$untrained" \
    --imitation-epochs 0 --pg-epochs 0 --seed 1 --threads 1 > /dev/null
fi
variants=("climbs|--ablations policy,heuristic,random"
          "no-climb|--ablations policy,heuristic,random --refine 0"
          "beam-16|--ablations heuristic --beam 16"
          "untrained-policy|--ablations policy --policy $untrained/policy.weights"
          "untrained-no-climb|--ablations policy --refine 0 --policy $untrained/policy.weights")
for entry in "${variants[@]}"; do
  variant=${entry%%|*}
  read -r -a args <<< "${entry#*|}"
  mkdir -p "$runs/$variant"
  for s in 12 13 14 15 16 17 18 19 20; do
    echo "ablations $variant: fresh seed $s" >&2
    # The committed fresh runs' options (results/arachne-evaluation-fresh), arachne alone.
    build/arachne evaluate --out "$runs/$variant/seed-$s" --configs 24 --seed "$s" --max-gpus 512 --budget-wall 30 \
      --planners arachne --threads 1 "${args[@]}" > /dev/null
  done
done
/usr/bin/python3 scripts/ablation_table.py "$out" "$runs"
