#!/usr/bin/env bash
# Where the oracle's complete search finishes, and how long it takes: one row per (cluster, model) of a
# representative list (homogeneous A100 and V100 shapes, mixes of two to four GPU types with 1-4 GPUs per node, the 4-GPU case
# of the oracle's tests, the 8-layer test model on 16 GPUs). Runs tests' DISABLED_Completeness (no seeds).
# Usage: scripts/oracle_completeness.sh [build dir]   env: ORACLE_WALL (s, default 600), ORACLE_THREADS (default 2)
set -euo pipefail
build="${1:-build}"
export ORACLE_WALL="${ORACLE_WALL:-600}" ORACLE_THREADS="${ORACLE_THREADS:-2}"
echo "| cluster | model | complete | wall | simulations | pruned by bound | structures | complete search: structures reached of the space | iteration | why incomplete |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
while read -r spec model; do
  [[ -z "$spec" || "$spec" == \#* ]] && continue
  ORACLE_SPEC="$spec" ORACLE_MODEL="$model" "$build/arachne_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='OraclePlanner.DISABLED_Completeness' 2>&1 | grep '^| ' || echo "| $spec | $model | failed |"
done <<'LIST'
A100-80:1x2,V100-32:1x2 small-gpt
A100-80:1x8 small-gpt
A100-80:1x4,V100-32:1x4 small-gpt
A100-80:2x8 small-gpt
A100-80:1x2,V100-32:1x2 gpt3-1.3b
H100:1x2,A100-80:1x2 gpt3-1.3b
A100-80:8x1 gpt3-1.3b
A100-80:4x2 gpt3-1.3b
A100-80:2x4 gpt3-1.3b
A100-80:1x8 gpt3-1.3b
H100:1x4,A100-80:1x2,V100-32:1x2 gpt3-1.3b
A100-80:1x4,V100-32:1x4 gpt3-1.3b
H100:1x4,A100-80:1x4 gpt3-1.3b
H100:2x2,A100-80:2x2 gpt3-1.3b
A100-80:2x2,V100-32:2x2 gpt3-1.3b
V100-32:1x8 gpt3-1.3b
H100:1x2,A100-80:1x2,V100-32:1x2,T4:1x2 gpt3-1.3b
H100:4x1,A100-80:2x1,V100-32:2x1 gpt3-1.3b
A100-80:4x1,V100-32:4x1 gpt3-1.3b
H100:2x1,A100-80:2x1,V100-32:2x1,T4:2x1 gpt3-1.3b
A100-40:1x4,L4:1x4 gpt3-1.3b
LIST
