#!/usr/bin/env bash
# gen-data's labels (planner/arachne/labeler.h) against the oracle on small clusters, where the oracle runs
# beside the label search (--oracle-max-gpus) and its search can complete: generates the train and held-out
# datasets of 2-4 GPUs into a temporary directory and prints, per configuration where the oracle completed,
# the best label's simulated time over the oracle's, then the geometric mean, worst and matches within 1 %
# (scripts/labels_vs_oracle.py); then, for the configurations where the best label is more than 0.1 % slower,
# why (build/label_gaps, bench/label_gaps.cpp: the oracle's template, whether the label search had it, its
# completion against the oracle's plan).
# Usage: scripts/labels_vs_oracle.sh [configurations per split (default 40)] [build dir (default build)]
#        [more gen-data options, e.g. --refine-rounds 2]
# env: ARACHNE_JOBS (gen-data threads, default 2); LABELS_VS_ORACLE_KEEP=DIR keeps the datasets in DIR.
# Takes ~2-4 s of CPU per configuration.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
configs="${1:-40}"
build="${2:-$root/build}"
shift $(( $# < 2 ? $# : 2 ))
threads="${ARACHNE_JOBS:-2}"
if [ -n "${LABELS_VS_ORACLE_KEEP:-}" ]; then
  tmp="$LABELS_VS_ORACLE_KEEP"
  mkdir -p "$tmp"
  rm -f "$tmp/train.h5" "$tmp/held-out.h5"
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
fi
seed=1
for split in train held-out; do
  "$build/arachne" gen-data --out "$tmp/$split.h5" --configs "$configs" --seed "$seed" --split "$split" \
    --min-gpus 2 --max-gpus 4 --oracle-max-gpus 4 --threads "$threads" "$@" 2>"$tmp/$split.log" ||
    { cat "$tmp/$split.log" >&2; exit 1; }
  seed=$((seed + 1))
done
/usr/bin/python3 "$root/scripts/labels_vs_oracle.py" "train=$tmp/train.h5" "held-out=$tmp/held-out.h5"
for split in train held-out; do
  echo
  echo "$split: where the best label is more than 0.1 % slower than the oracle"
  "$build/label_gaps" "$tmp/$split.h5"
done
