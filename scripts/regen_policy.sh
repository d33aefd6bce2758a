#!/usr/bin/env bash
# Regenerates the shipped policy (configs/policy/arachne.weights) from scratch: the four gen-data datasets
# and the imitation training documented in configs/policy/README.md, then compares the new weights with the
# shipped file byte for byte. Same build, same commands: the same bytes (gen-data's file does not depend on
# --threads or interruptions; train's weights depend on its --threads, fixed here at 2). The shipped file
# comes from the label search of the commit that ships it (configs/policy/README.md); a build whose label
# search differs trains another file and exits 1.
#
# Usage: scripts/regen_policy.sh [--arachne build/arachne] [--out DIR]
#   --arachne  the CLI to run (train loads the Torch module beside it, or ARACHNE_LEARNED_MODULE)
#   --out  where the datasets and the training run go (default: a temporary directory, removed at
#          the end); an interrupted run started again with the same --out resumes (gen-data's shards,
#          train --resume).
# Exit status: 0 when the weights equal the shipped file, 1 when they differ, 2 on bad usage.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
arachne="$root/build/arachne"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --arachne) arachne="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--arachne PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done
if [ -z "$out" ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# name | gen-data options (the label search's width per configuration size)
datasets=(
  "held|--configs 68 --seed 14 --split held-out --max-gpus 512 --max-templates 400 --sampled-templates 300 --refine-rounds 2"
  "train_a|--configs 480 --seed 1 --max-gpus 256 --max-templates 200 --sampled-templates 200"
  "train_b|--configs 280 --seed 11 --max-gpus 1024 --max-templates 400 --sampled-templates 300"
  "train_c|--configs 156 --seed 13 --max-gpus 512 --max-templates 400 --sampled-templates 300 --refine-rounds 2"
)

for entry in "${datasets[@]}"; do
  name="${entry%%|*}"
  if [ ! -f "$out/$name.h5" ]; then
    echo "gen-data $name" >&2
    # shellcheck disable=SC2086
    "$arachne" gen-data --out "$out/$name.h5" --threads 2 ${entry#*|}
  fi
done

resume=()
[ -f "$out/policy/journal.json" ] && resume=(--resume)
echo "train" >&2
"$arachne" train --data "$out/train_c.h5,$out/train_b.h5,$out/train_a.h5" --validation "$out/held.h5" \
  --out "$out/policy" --imitation-epochs 20 --pg-epochs 0 --seed 1 --threads 2 "${resume[@]}"

if cmp -s "$out/policy/policy.weights" "$root/configs/policy/arachne.weights"; then
  echo "the regenerated weights equal configs/policy/arachne.weights"
else
  echo "the regenerated weights differ from configs/policy/arachne.weights ($out/policy/policy.weights)"
  exit 1
fi
