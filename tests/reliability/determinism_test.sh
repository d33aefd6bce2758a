#!/usr/bin/env bash
# Same command, same seed, run twice => the same results (DESIGN.md: identical apart from the fields that
# measure wall time). Every command that produces results runs twice, from two directories with the same
# words, and every output is compared by tests/tools/same_results.py: JSON on stdout and written files byte
# for byte but for the values of wall-time keys; HDF5 files dataset by dataset and attribute by attribute
# (and byte for byte outside the wall-time columns); Markdown summaries but for their planning-time
# columns; CSV, YAML, Chrome-trace JSON, policy weights and PNG figures byte for byte.
# Covered: simulate (dense plan file; MoE with routing skew), plan (every planner of `arachne list
# planners`), replay (native, Alibaba and SkyPilot traces, with a fixed --planning-time: the measured one
# is wall time), trace generate and convert, gen-data, train (when the learned module is built),
# evaluate and experiment on tiny inputs.
# Usage: tests/reliability/determinism_test.sh ARACHNE_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/../tools/script_setup.sh" determinism "$1"

# Inputs shared by both runs: the 8-layer test model, a 4-layer MoE model with Zipf routing skew 1.2
# (gpt-moe-1.3b-64e's shape), a tiny experiment file.
mkdir -p "$work/in" "$work/a" "$work/b"
cp "$repo/tests/data/small-gpt.yaml" "$work/in/small-gpt.yaml"
sed 's/^layers: 24/layers: 4/; s/routing_skew: 0.0/routing_skew: 1.2/' "$repo/configs/models/gpt-moe-1.3b-64e.yaml" >"$work/in/moe-skew.yaml"
grep -q "routing_skew: 1.2" "$work/in/moe-skew.yaml" || fail "no routing skew in the MoE model"
cat >"$work/in/tiny.yaml" <<'YAML'
version: 1
name: tiny
budget: {evaluations: 100}
comparisons:
  - clusters: ["A100-80:1x4"]
    models: [small-gpt.yaml]
    planners: [megatron, sailor]
replays:
  - trace: traces/native_small.csv
    model: small-gpt.yaml
    planners: [megatron]
    planning_time: "5 s"
YAML

planners=$("$arachne" list planners | awk 'NR > 1 && NF > 1 && $1 !~ /^\(/ {print $1}' | paste -sd, -)
[ -n "$planners" ] || fail "no planners listed"
learned=1
[ -f "$(dirname "$arachne")/libarachne_learned_module.so" ] || learned=0

# Each step: NAME, then the arachne words. Its stdout is kept as NAME.json when it is JSON.
steps=()
step() { steps+=("$*"); }
R="$repo"
step simulate-dense simulate --cluster "$R/configs/clusters/hetero-a100-v100.yaml" --model gpt3-1.3b \
  --plan "$R/configs/plans/gpt3-1.3b-hetero-two-pipelines.yaml" --seed 3 --json --out dense.h5 --timeline dense.timeline.json
step simulate-moe simulate --cluster A100-80:1x8 --model ../in/moe-skew.yaml --tp 1 --pp 2 --dp 4 --ep 4 --micro-batch 1 \
  --global-batch 16 --seed 5 --json --out moe.h5 --timeline moe.timeline.json
step plan plan --cluster A100-80:1x2,V100-32:1x2 --model gpt3-1.3b --global-batch 32 --planner "$planners" --budget 30 \
  --seed 1 --json --out best.yaml
step replay-native replay --trace "$R/traces/native_small.csv" --model ../in/small-gpt.yaml --planner megatron,sailor \
  --planning-time 5 --seed 2 --json --out native.h5
step replay-alibaba replay --trace "$R/traces/alibaba-fixture/openb_pod_list_default.csv" --model ../in/small-gpt.yaml \
  --planner megatron --planning-time 5 --seed 2 --json --out alibaba.h5
step replay-skypilot replay --trace "$R/traces/skypilot_fixture_v100_4.json" --model ../in/small-gpt.yaml \
  --planner megatron --planning-time 5 --seed 2 --json --out skypilot.h5
step trace-generate trace generate --out generated.csv --seed 7 --duration 86400 --nodes A100-80:4,T4:4
step trace-convert trace convert --trace "$R/traces/alibaba-fixture/openb_pod_list_default.csv" --seed 3 --out converted.csv
step gen-data gen-data --out data.h5 --configs 3 --seed 3 --threads 2 --min-gpus 4 --max-gpus 16 --max-templates 40 \
  --sampled-templates 8 --simulate-top 2 --labels 2 --oracle-max-gpus 0
[ "$learned" -eq 1 ] && step train train --data data.h5 --validation data.h5 --out policy --imitation-epochs 1 --pg-epochs 1 \
  --batch 8 --threads 1 --seed 4
step evaluate evaluate --out evaluation --configs 1 --seed 2 --min-gpus 4 --max-gpus 8 --planners megatron,sailor \
  --ablations none --threads 2 --budget 50
step experiment experiment ../in/tiny.yaml --out experiment

for d in a b; do
  for s in "${steps[@]}"; do
    read -r -a w <<<"$s"
    name="${w[0]}"
    (cd "$work/$d" && "$arachne" "${w[@]:1}" >"$name.stdout" 2>"$name.stderr") ||
      fail "$d: arachne ${w[*]:1}: exit $?: $(tail -3 "$work/$d/$name.stderr")"
  done
done
[ "$learned" -eq 1 ] || echo "determinism: train not covered (built without the learned module)"

# Every file of run a has its twin in run b, and the same files were written.
(cd "$work/a" && find . -type f | sort) >"$work/files.a"
(cd "$work/b" && find . -type f | sort) >"$work/files.b"
diff "$work/files.a" "$work/files.b" >&2 || fail "the two runs wrote different files"
pairs=()
while IFS= read -r f; do
  case "$f" in
    *.stderr) continue ;;                    # progress and timing lines
    */planning_time.png) continue ;;         # a plot of planning wall times
    *.shards/*) continue ;;                  # per-cell records, merged into the compared file
    */checkpoint-*.pt) continue ;;           # torch::save archives; the weights they lead to are compared
    *.stdout) head -c1 "$work/a/$f" | grep -q '[{[]' || continue
              mv "$work/a/$f" "$work/a/${f%.stdout}.stdout.json"; mv "$work/b/$f" "$work/b/${f%.stdout}.stdout.json"
              f="${f%.stdout}.stdout.json" ;;
  esac
  pairs+=("$work/a/$f" "$work/b/$f")
done <"$work/files.a"
[ ${#pairs[@]} -ge 40 ] || fail "only $(( ${#pairs[@]} / 2 )) outputs to compare"
/usr/bin/python3 "$same" "${pairs[@]}" || fail "the two runs differ (above)"

# The comparison can tell: another seed changes the MoE routing and the generated trace.
(cd "$work/b" && "$arachne" simulate --cluster A100-80:1x8 --model ../in/moe-skew.yaml --tp 1 --pp 2 --dp 4 --ep 4 \
  --micro-batch 1 --global-batch 16 --seed 6 --out moe.h5 >/dev/null 2>&1 &&
  "$arachne" trace generate --out generated.csv --seed 8 --duration 86400 --nodes A100-80:4,T4:4 2>/dev/null) ||
  fail "the runs with other seeds failed"
! /usr/bin/python3 "$same" "$work/a/moe.h5" "$work/b/moe.h5" 2>/dev/null || fail "moe.h5 does not depend on --seed"
! /usr/bin/python3 "$same" "$work/a/generated.csv" "$work/b/generated.csv" 2>/dev/null ||
  fail "trace generate does not depend on --seed"
echo "PASS: ${#steps[@]} commands, $(( ${#pairs[@]} / 2 )) outputs identical"
