#!/usr/bin/env bash
# `arachne experiment` and `arachne gen-data` under `mpirun -np 2`: the file rank 0 writes equals a single
# process's (every dataset and attribute, wall times aside: tests/tools/same_results.py); a run killed with
# kill -9 (mpirun and both ranks at once; and a single process) resumes from its shards and ends with the
# same file; bad input exits 2 on every rank with one error line.
# Usage: tests/mpi/mpi_test.sh ARACHNE_BINARY MPIRUN
set -euo pipefail
arachne="$1"
mpirun="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
same="$here/../tools/same_results.py"
work="$(mktemp -d "${TMPDIR:-/tmp}/arachne_mpi_test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Open MPI refuses to start as root unless told (mpirun(1), --allow-run-as-root; the environment variables
# are its equivalent); CI runs as root. --oversubscribe: 2 ranks even on a machine with fewer cores.
# Under AddressSanitizer (scripts/test.sh --sanitize), leaks are not checked in the ranks: Open MPI's
# components, dlclose()d at MPI_Finalize, leave allocations LeakSanitizer cannot attribute. The single
# process runs below are checked.
launch=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$mpirun" -np 2 --oversubscribe)
if [ "$(id -u)" -eq 0 ]; then
  launch+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

fail() { echo "FAIL: $*" >&2; exit 1; }

# The inputs: the 8-layer test model, four comparison cells under evaluation budgets and a replay with a
# fixed planning charge, so that every field but the planning wall times is deterministic.
cp "$(dirname "$0")/../data/small-gpt.yaml" "$work/small-gpt.yaml"
cat >"$work/tiny.yaml" <<'YAML'
version: 1
name: tiny
budget: {evaluations: 400}
comparisons:
  - clusters: ["A100-80:1x4"]
    models: [small-gpt.yaml]
    planners: [megatron, sailor]
  - clusters: ["A100-80:16x8,V100-32:32x4"]
    models: [gpt3-13b]
    global_batches: [default, 2048]
    planners: [megatron]
replays:
  - trace: traces/native_small.csv
    model: small-gpt.yaml
    planners: [megatron]
    planning_time: "5 s"
YAML
# Two fast cells (milliseconds), two of 0.5-1 s (one on each of 2 ranks: long enough that the kill below
# lands while they run), a replay.
cells=5
for d in single mpi killed killed1; do mkdir -p "$work/$d"; done

# Each run from its own directory with the same words, so that the command line recorded in the file
# (root attribute command_line) is the same.
run_single() { (cd "$work/$1" && "$arachne" "${@:2}"); }
run_mpi() { (cd "$work/$1" && "${launch[@]}" "$arachne" "${@:2}"); }

echo "== experiment: 2 ranks vs 1 process"
run_single single experiment ../tiny.yaml --out out 2>"$work/single.err" || fail "single process: $(cat "$work/single.err")"
run_mpi mpi experiment ../tiny.yaml --out out 2>"$work/mpi.err" || fail "2 ranks: $(cat "$work/mpi.err")"
"$same" "$work/single/out/experiment.h5" "$work/mpi/out/experiment.h5" || fail "experiment.h5 differs"
"$same" "$work/single/out/summary.md" "$work/mpi/out/summary.md" || fail "summary.md differs"
[ -f "$work/mpi/out/throughput.png" ] || fail "no throughput.png"
# Rank 0 reports every cell, whichever rank ran it, once.
[ "$(grep -c "^experiment: cell " "$work/mpi.err")" -eq "$cells" ] || fail "not one line per cell: $(cat "$work/mpi.err")"
grep -q "^experiment: $cells/$cells cells done (0 resumed)" "$work/mpi.err" || fail "no final count: $(cat "$work/mpi.err")"
[ "$(grep -c "experiment: wrote" "$work/mpi.err")" -eq 1 ] || fail "not one 'wrote' line: $(cat "$work/mpi.err")"

# Starts the run in its own process group, kills the group with SIGKILL as soon as the first cell's shard
# exists, and checks that the run had not ended.
kill_after_first_cell() {
  local dir="$1"; shift
  local shards="$work/$dir/out/experiment.h5.shards"
  (cd "$work/$dir" && exec setsid "$@" experiment ../tiny.yaml --out out) 2>"$work/$dir.err" &
  local leader=$!
  for _ in $(seq 600); do
    compgen -G "$shards/*.json" >/dev/null && break
    sleep 0.05
  done
  # setsid: the launcher leads a process group of its own; Open MPI puts each rank in a group of its
  # own, so the ranks (the launcher's children) are killed by their ids, all in one kill.
  local victims
  victims=$(ps -o pid= --ppid "$leader" 2>/dev/null || true)
  # shellcheck disable=SC2086
  kill -9 -- "-$leader" $victims 2>/dev/null || true
  wait "$leader" 2>/dev/null || true
  made=$(find "$shards" -name '*.json' 2>/dev/null | wc -l)
  [ "$made" -ge 1 ] || fail "$dir: no cell finished before the kill: $(cat "$work/$dir.err")"
  [ "$made" -lt "$cells" ] && [ ! -f "$work/$dir/out/experiment.h5" ] || fail "$dir: the run ended before the kill"
}

echo "== experiment: kill -9 of mpirun and both ranks after the first cell, then resume on 2 ranks"
kill_after_first_cell killed "${launch[@]}" "$arachne"
run_mpi killed experiment ../tiny.yaml --out out 2>"$work/resumed.err" || fail "resume: $(cat "$work/resumed.err")"
grep -q "($made resumed)" "$work/resumed.err" || fail "did not resume $made cells: $(cat "$work/resumed.err")"
"$same" "$work/single/out/experiment.h5" "$work/killed/out/experiment.h5" || fail "resumed experiment.h5 differs"

echo "== experiment: kill -9 of a single process after the first cell, then resume on 1 process"
kill_after_first_cell killed1 "$arachne"
run_single killed1 experiment ../tiny.yaml --out out 2>"$work/resumed1.err" || fail "resume: $(cat "$work/resumed1.err")"
grep -q "$cells/$cells cells done ($made resumed)" "$work/resumed1.err" || fail "did not resume $made cells: $(cat "$work/resumed1.err")"
"$same" "$work/single/out/experiment.h5" "$work/killed1/out/experiment.h5" || fail "resumed experiment.h5 differs"

echo "== experiment: bad input exits 2 on every rank, one error line"
sed 's/megatron, sailor/megatron, magic/' "$work/tiny.yaml" >"$work/bad.yaml"
set +e
run_mpi mpi experiment ../bad.yaml --out bad 2>"$work/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad planner: exit $rc, not 2: $(cat "$work/bad.err")"
[ "$(grep -c "^error: " "$work/bad.err")" -eq 1 ] || fail "not one error line: $(cat "$work/bad.err")"
grep -q "^error: ../bad.yaml:7: comparisons\[0\].planners: " "$work/bad.err" || fail "bad planner: $(cat "$work/bad.err")"
[ ! -e "$work/mpi/bad" ] || fail "bad input wrote $work/mpi/bad"

echo "== gen-data: 2 ranks vs 1 process"
gen=(gen-data --out data.h5 --configs 6 --seed 3 --threads 1 --min-gpus 4 --max-gpus 16 --max-templates 40
     --sampled-templates 8 --simulate-top 2 --labels 2 --oracle-max-gpus 0)
run_single single "${gen[@]}" 2>"$work/gen_single.err" || fail "gen-data, 1 process: $(cat "$work/gen_single.err")"
run_mpi mpi "${gen[@]}" 2>"$work/gen_mpi.err" || fail "gen-data, 2 ranks: $(cat "$work/gen_mpi.err")"
"$same" "$work/single/data.h5" "$work/mpi/data.h5" || fail "gen-data file differs"
[ ! -e "$work/mpi/data.h5.shards" ] || fail "gen-data left its shards"
echo "PASS"
