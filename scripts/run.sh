#!/usr/bin/env bash
# The main job: installs what is missing, builds (Release), simulates the bundled example plans into
# results/demo/ — one HDF5 file and one Chrome-trace timeline per plan, a Markdown table and a PNG — and
# runs the demo experiment (configs/experiments/demo.yaml) into results/demo/experiment/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARACHNE_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh" "$build"
out="$root/results/demo"
mkdir -p "$out"
bin="$build/arachne"
cd "$root"

# name | cluster | model | plan (file or shorthand flags)
examples=(
  "gpt3-1.3b-tp2-pp2-dp2|configs/clusters/tiny-a100-2x4.yaml|gpt3-1.3b|--plan configs/plans/gpt3-1.3b-tp2-pp2-dp2.yaml"
  "gpt3-1.3b-split-stage|configs/clusters/tiny-hetero.yaml|gpt3-1.3b|--plan configs/plans/gpt3-1.3b-split-stage.yaml"
  "gpt3-1.3b-hetero-two-pipelines|configs/clusters/hetero-a100-v100.yaml|gpt3-1.3b|--plan configs/plans/gpt3-1.3b-hetero-two-pipelines.yaml"
  "gpt3-13b-selene-tp8-pp4-dp8|configs/clusters/selene-like.yaml|gpt3-13b|--tp 8 --pp 4 --dp 8 --micro-batch 1 --global-batch 1024 --recompute selective --sequence-parallel"
  "gpt3-13b-selene-interleaved|configs/clusters/selene-like.yaml|gpt3-13b|--tp 8 --pp 4 --dp 8 --micro-batch 1 --global-batch 1024 --recompute selective --sequence-parallel --schedule interleaved --interleave 2"
  "llama2-7b-a100-tp2-pp2-dp8-zero1|configs/clusters/selene-like.yaml|llama2-7b|--tp 2 --pp 2 --dp 8 --micro-batch 2 --global-batch 512 --recompute full --zero1"
  "mixtral-8x7b-h100-pp4-ep8-dp16|H100:8x8|mixtral-8x7b|--tp 1 --pp 4 --dp 16 --ep 8 --micro-batch 1 --global-batch 256 --recompute full"
)
h5s=()
for ex in "${examples[@]}"; do
  IFS='|' read -r name cluster model plan <<<"$ex"
  echo "run: simulating $name" >&2
  # shellcheck disable=SC2086
  "$bin" simulate --cluster "$cluster" --model "$model" $plan --json \
      --out "$out/$name.h5" --timeline "$out/$name.timeline.json" > "$out/$name.json" || {
    rc=$?; [ $rc -eq 3 ] && echo "run: $name does not fit in memory (reported in $out/$name.json)" >&2 || exit $rc; }
  h5s+=("$out/$name.h5")
done
# One replay of a bundled availability trace (planner megatron; PNG of throughput and cumulative tokens).
echo "run: replaying traces/native_small.csv with megatron" >&2
"$bin" replay --trace traces/native_small.csv --model gpt3-1.3b --planner megatron --planning-time 5 \
    --out "$out/replay.h5" --json > "$out/replay.json.txt"
"$bin" trace plot --trace traces/native_small.csv --out "$out/trace.png" >&2
# The demo experiment (configs/experiments/demo.yaml): every planner on four bundled heterogeneous clusters
# and two models, each plan measured in the simulator, and a replay of the bundled small trace: one HDF5
# file, summary.md and figures in results/demo/experiment/. A completed earlier run is started afresh; an
# interrupted one resumes from its shards.
if [ -f "$out/experiment/experiment.h5" ]; then rm -rf "$out/experiment"; fi
echo "run: the demo experiment (configs/experiments/demo.yaml)" >&2
"$bin" experiment configs/experiments/demo.yaml --out "$out/experiment"
/usr/bin/python3 "$root/scripts/demo_table.py" "$out" > "$out/summary.md"
{
  echo
  sed 's/^#/##/' "$out/experiment/summary.md"
} >> "$out/summary.md"
{
  echo
  echo "Replay of traces/native_small.csv (planner megatron, 5 s planning charge):"
  echo
  echo '```'
  cat "$out/replay.json.txt"
  echo '```'
} >> "$out/summary.md"
/usr/bin/python3 "$root/scripts/plot_simulate.py" "$out/breakdown.png" "${h5s[@]}"
cat "$out/summary.md"
echo "run: results in $out (summary.md, breakdown.png, replay.png, trace.png, *.h5, *.timeline.json for Perfetto; experiment/: experiment.h5, summary.md, throughput.png, planning_time.png, replay_tokens.png)" >&2
