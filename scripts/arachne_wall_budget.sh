#!/usr/bin/env bash
# How arachne's plans depend on its wall-clock budget (README "Quality against the wall-clock budget"):
# arachne alone under `--budget-wall CAP` on the configurations of the committed evaluations (fresh seeds
# 12-20, the 12 held-out, the planning-time sets of ~64, ~256 and ~1,024 GPUs), one configuration at a
# time (--threads 1), each CAP in turn; then scripts/wall_budget_table.py compares every plan with the
# committed baseline cells and arachne's own uncapped cells of the same configuration and writes
# summary.md, wall_budget.csv and wall_budget.png to OUT_DIR. The runs go under RUNS_DIR (not committed);
# evaluate keeps a shard per finished configuration, so the same command after a kill computes only what is
# missing. Wall caps make the plans depend on the machine's speed and load.
#   usage: scripts/arachne_wall_budget.sh [OUT_DIR] [RUNS_DIR] [CAP ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/arachne-wall-budget}
runs=${2:-build/wall-budget-runs}
shift $(( $# < 2 ? $# : 2 ))
caps=("$@")
[ ${#caps[@]} -gt 0 ] || caps=(0.1 0.2 0.5 1)
[ -x build/arachne ] || { echo "error: build/arachne: not built (scripts/setup.sh build)" >&2; exit 2; }
mkdir -p "$out" "$runs"
for cap in "${caps[@]}"; do
  mkdir -p "$runs/cap-$cap"
  # The sets and their options: the committed runs' (results/arachne-evaluation-fresh/seed-S,
  # results/arachne-evaluation, results/arachne-planning-time/gpus-G), with the cap as the only budget.
  sets=()
  for s in 12 13 14 15 16 17 18 19 20; do sets+=("fresh-$s|--configs 24 --seed $s --max-gpus 512"); done
  sets+=("heldout-12|--configs 12 --seed 1 --max-gpus 256")
  for g in 64 256 1024; do sets+=("gpus-$g|--configs 4 --seed 2 --min-gpus $g --max-gpus $g"); done
  for entry in "${sets[@]}"; do
    name=${entry%%|*}
    read -r -a args <<< "${entry#*|}"
    echo "wall budget $cap s: $name" >&2
    build/arachne evaluate --out "$runs/cap-$cap/$name" "${args[@]}" --planners arachne --ablations none \
      --threads 1 --budget-wall "$cap" > /dev/null
  done
done
/usr/bin/python3 scripts/wall_budget_table.py "$out" "$runs" "${caps[@]}"
