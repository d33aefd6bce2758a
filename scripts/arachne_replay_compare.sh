#!/usr/bin/env bash
# Tokens trained by arachne and the five baselines in replays of the shared availability traces
# (README "Replay on the shared traces"). One `arachne replay` per trace and planner, each writing
# DIR/TRACE/PLANNER.h5 and PLANNER.json; a pair already written is skipped, so the script resumes after a
# kill. Then scripts/plot_replay_compare.py writes DIR/summary.md, DIR/replay.csv and one cumulative-tokens
# PNG per trace. Planning time is measured (charged as downtime on every replan) and every replan's search
# is capped at BUDGET_WALL seconds.
#   usage: scripts/arachne_replay_compare.sh [OUT_DIR] [BUDGET_WALL] [POOL]
# POOL: the replay's --pool rule for every planner (all, the default, or stable).
# ARACHNE_DATA: the shared data directory (default ../shared/data). Run it under `nice -n 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/arachne-replay}
wall=${2:-10}
pool=${3:-all}
data=${ARACHNE_DATA:-../shared/data}
# arachne-cold: arachne with --no-warm-start (the plan the job runs is not given to the planner)
planners="arachne arachne-cold megatron amp metis flashflex sailor"
common=(--budget-wall "$wall" --checkpoint-interval 1800 --restart 60 --pool "$pool")

# name | model | trace arguments. On Alibaba, changes closer than 300 s are merged (--coalesce 300: a
# merged change's snapshot is the first one's); SkyPilot's changes are 300 s apart anyway.
# Alibaba: 25 nodes (130 GPUs of six types: A10G, T4, L4, V100-32, V100-16, P100), the other tenants' load
# x2, windows in the trace's busy weeks (days 115-149; earlier windows have almost no changes).
# SkyPilot: 16 one-GPU V100-16 spot nodes, the first 24 h. Sailor: its heterogeneous, imbalanced trace
# (A100-40 and V100-16, 128 to 512 GPUs, two changes in 4 minutes, not merged), held for one hour.
ali="--trace $data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv --nodes 25 --load-scale 2 --seed 1 --coalesce 300"
traces=(
  "alibaba-25n-day138-6h|gpt3-1.3b|$ali --window-start 11923200 --window-end 11944800"
  "alibaba-25n-day129-12h|gpt3-1.3b|$ali --window-start 11145600 --window-end 11188800"
  "alibaba-25n-day138-6h-llama2-7b|llama2-7b|$ali --window-start 11923200 --window-end 11944800"
  "skypilot-16n-us-east-2b-24h|gpt3-1.3b|--trace $data/traces/skypilot-spot/16-node_aws-08-27-2023_us-east-2b_v100_1.json --until 86400"
  "skypilot-16n-us-west-2a-24h|gpt3-1.3b|--trace $data/traces/skypilot-spot/16-node_aws-08-27-2023_us-west-2a_v100_1.json --until 86400"
  "sailor-imbalanced-1h|gpt3-6.7b|--trace $data/traces/sailor/gpu_trace_heterogeneous_imbalanced.csv --until 3600"
)
for entry in "${traces[@]}"; do
  IFS='|' read -r name model rest <<< "$entry"
  read -r -a args <<< "$rest"
  mkdir -p "$out/$name"
  for p in $planners; do
    [ -s "$out/$name/$p.json" ] && continue
    start=$(date +%s)
    if [ "$p" = arachne-cold ]; then planner=(--planner arachne --no-warm-start); else planner=(--planner "$p"); fi
    build/arachne replay "${args[@]}" --model "$model" "${common[@]}" "${planner[@]}" --out "$out/$name/$p.h5" --json > "$out/$name/$p.json.tmp"
    mv "$out/$name/$p.json.tmp" "$out/$name/$p.json"
    echo "$name $p: $(( $(date +%s) - start )) s wall" | tee -a "$out/wall.txt"
  done
done
uptime | tee -a "$out/wall.txt"
/usr/bin/python3 scripts/plot_replay_compare.py "$out" "$wall"
