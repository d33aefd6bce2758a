#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp: one per input parser, each calling the loader the CLI
# calls, with ASan and UBSan) in build-fuzz/ with clang-14, and fuzzes each for SECONDS (default 60) or
# --runs N executions under nice. Prints, per target, the executions, the slowest input's time and the
# findings (input files) with their kinds: a crash or sanitizer report, an exception that the CLI would
# report as `error: internal` or an empty `where` (FINDING), an input taking over 10 s (timeout: the
# instrumented build runs 10-50 times slower than the Release CLI, so this is ~1 s there; time a timeout's
# input with build/arachne) or over 2 GiB (out-of-memory).
# Findings are saved in <tree>/findings/<target>/; reproduce one with <tree>/fuzz/<target> FILE.
# Usage: scripts/fuzz.sh [--runs N] [--fast] [--jobs J] [SECONDS] [TARGET...]
#   --runs N  each target runs N executions (SECONDS, when given, still caps its wall time)
#   --fast    fuzz in build-fuzz-fast/ (UBSan and libFuzzer without ASan, whose allocator and shadow
#             memory cost most of an execution: several times the executions per second), then replay every
#             input of the corpus grown there and the seeds once through the ASan+UBSan targets of
#             build-fuzz/; a finding of either tree counts (the replay's go to build-fuzz/findings/)
#   --jobs J  fuzz J targets at once (default 1)
# Seeds come from configs/, traces/ and the tests' fixtures, copied at each run into <tree>/seeds/; the
# corpus grown by earlier runs (<tree>/corpus/) is kept. Exit status 1 when anything was found.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: scripts/fuzz.sh [--runs N] [--fast] [--jobs J] [SECONDS] [TARGET...]" >&2; exit 2; }
runs=0 fast=0 jobs=1 seconds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage; runs="$2"; shift 2 ;;
    --fast) fast=1; shift ;;
    --jobs) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage; jobs="$2"; shift 2 ;;
    -*) usage ;;
    *) break ;;
  esac
done
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  seconds="$1"
  shift
  [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage
fi
# Without --runs a target fuzzes for SECONDS (60); with it, until N executions (a week at most).
[ -z "$seconds" ] && { [ "$runs" -gt 0 ] && seconds=604800 || seconds=60; }
asan_build="${ARACHNE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
build="$asan_build"
[ "$fast" -eq 1 ] && build="${ARACHNE_FUZZ_FAST_BUILD_DIR:-$root/build-fuzz-fast}"
configure() {  # tree, sanitizers
  "$root/scripts/setup.sh" "$1" -DARACHNE_FUZZ=ON -DARACHNE_FUZZ_SANITIZERS="$2" -DARACHNE_WITH_TORCH=OFF \
    -DARACHNE_BUILD_TESTS=OFF -DARACHNE_BUILD_BENCH=OFF -DARACHNE_WITH_MPI=OFF
}
configure "$asan_build" address,undefined
[ "$fast" -eq 1 ] && configure "$build" undefined

# Each target's seeds and dictionary.
declare -A dict=([cluster_yaml_fuzz]=cluster [cluster_spec_fuzz]=cluster_spec [model_yaml_fuzz]=model
                 [plan_yaml_fuzz]=plan [native_trace_fuzz]=trace_csv [alibaba_pods_fuzz]=trace_csv
                 [alibaba_nodes_fuzz]=trace_csv [sailor_csv_fuzz]=trace_csv [skypilot_trace_fuzz]=trace_json
                 [sailor_json_fuzz]=trace_json [experiment_fuzz]=experiment)
seed_files() {
  case "$1" in
    cluster_yaml_fuzz) ls "$root"/configs/clusters/*.yaml ;;
    model_yaml_fuzz) ls "$root"/configs/models/*.yaml "$root"/tests/data/*.yaml ;;
    plan_yaml_fuzz) ls "$root"/configs/plans/*.yaml ;;
    native_trace_fuzz) ls "$root"/traces/*.csv ;;
    alibaba_pods_fuzz) ls "$root"/traces/alibaba-fixture/openb_pod_list_default.csv ;;
    alibaba_nodes_fuzz) ls "$root"/traces/alibaba-fixture/openb_node_list_gpu_node.csv ;;
    sailor_csv_fuzz) ls "$root"/traces/sailor_fixture.csv ;;
    skypilot_trace_fuzz) ls "$root"/traces/skypilot_fixture_*.json ;;
    sailor_json_fuzz) ls "$root"/traces/sailor_fixture.json ;;
    # paper.yaml is left out: it loads the public Alibaba and SkyPilot traces (seconds per input).
    experiment_fuzz) ls "$root"/configs/experiments/*.yaml | grep -v '/paper\.yaml$' ;;
  esac
}
make_seeds() {
  local t="$1" dir="$build/seeds/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$t" = cluster_spec_fuzz ]; then
    # Every spec string the configs, the tests and the README use, one seed each, up to 4,096 GPUs (larger
    # ones take seconds in the instrumented build, at every start of the fuzzer).
    grep -rhoE '[A-Z][A-Za-z0-9-]*:[0-9]+x[0-9]+(,[A-Z][A-Za-z0-9-]*:[0-9]+x[0-9]+)*' \
      "$root/configs" "$root/tests" "$root/README.md" | sort -u |
      awk '{ n = 0; k = split($0, g, ","); for (i = 1; i <= k; ++i) { split(g[i], a, /[:x]/); n += a[2] * a[3] } }
           n <= 4096' | head -200 |
      while IFS= read -r s; do printf '%s' "$s" >"$dir/$(printf '%s' "$s" | md5sum | cut -c1-16)"; done
  else
    seed_files "$t" | while IFS= read -r f; do cp "$f" "$dir/"; done
  fi
  if [ "$t" = experiment_fuzz ]; then
    # The experiment file that tests/mpi/mpi_test.sh writes.
    sed -n "/^cat >\"\$work\/tiny.yaml\" <<'YAML'$/,/^YAML$/p" "$root/tests/mpi/mpi_test.sh" | sed '1d;$d' >"$dir/mpi_tiny.yaml"
  fi
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
for t in "${targets[@]}"; do
  [ -f "$root/fuzz/$t.cpp" ] || { echo "fuzz: no target $t" >&2; exit 2; }
done
cmake --build "$build" -j "${ARACHNE_JOBS:-2}" --target "${targets[@]}" >&2
[ "$fast" -eq 1 ] && cmake --build "$asan_build" -j "${ARACHNE_JOBS:-2}" --target "${targets[@]}" >&2
# Inputs are written to a file per execution: on tmpfs where there is one.
[ -w /dev/shm ] && export TMPDIR=/dev/shm

# One libFuzzer statistic of a log (0 when absent), summed over the starts the log holds.
stat_sum() { sed -nE "s/^stat::$1: *([0-9]+)\$/\1/p" "$2" | awk '{ s += $1 } END { print s + 0 }'; }
stat_max() { sed -nE "s/^stat::$1: *([0-9]+)\$/\1/p" "$2" | awk '$1 > m { m = $1 } END { print m + 0 }'; }
# Kinds: the harness's FINDING lines and the sanitizers' and libFuzzer's SUMMARY lines, without addresses.
kinds_of() {
  grep -ahE '^(FINDING: |SUMMARY: )' "$@" | sed -E 's/0x[0-9a-f]+//g; s/ \(pc .*//' | cut -c1-90 |
    sort | uniq -c | sort -rn | awk '{$1 = $1 "x"; print}' | paste -sd';' - || true
}

# Fuzzes one target in $build; writes its summary line to $build/findings/<target>.summary.
fuzz_target() {
  local t="$1" log="$build/findings/$1.log" start execs=0 last_files=0 left n now_files limit
  make_seeds "$t"
  rm -rf "$build/findings/$t" "$log"
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  echo "fuzz: $t ($([ "$runs" -gt 0 ] && echo "$runs executions, at most ")${seconds} s)" >&2
  # libFuzzer stops at a finding (saved under findings/): the run starts again, with the corpus grown so
  # far, until SECONDS are used or RUNS executed (at most 50 starts, and none after a start that found
  # only an input found before, e.g. the empty input that libFuzzer runs first), so that one bug does not
  # hide the next.
  start=$(date +%s)
  for _ in $(seq 50); do
    left=$(( seconds - ($(date +%s) - start) ))
    [ "$left" -gt 0 ] || break
    limit=-1
    if [ "$runs" -gt 0 ]; then
      limit=$(( runs - execs ))
      [ "$limit" -gt 0 ] || break
    fi
    (cd "$build" && nice -n 10 "$build/fuzz/$t" -max_total_time="$left" -runs="$limit" -timeout=10 \
       -rss_limit_mb=2048 -dict="$root/fuzz/${dict[$t]}.dict" -artifact_prefix="$build/findings/$t/" \
       -print_final_stats=1 "$build/corpus/$t" "$build/seeds/$t") >"$log.run" 2>&1 || true
    cat "$log.run" >>"$log"
    n=$(stat_sum number_of_executed_units "$log.run")
    execs=$(( execs + n ))
    # A start that found only an input already saved (the same bytes): libFuzzer would find it again.
    now_files=$(find "$build/findings/$t" -type f | wc -l)
    [ "$now_files" -gt "$last_files" ] || [ "$(( $(date +%s) - start ))" -ge "$seconds" ] || break
    last_files=$now_files
  done
  rm -f "$log.run"
  printf '%-36s %12s %8s %9s  %s\n' "$t" "$execs" "$(stat_max slowest_unit_time_sec "$log")" \
    "$(find "$build/findings/$t" -type f | wc -l)" "$(kinds_of "$log")" >"$build/findings/$t.summary"
}

# Runs every input of the fast tree's corpus and seeds of one target once through the ASan+UBSan target.
replay_in_asan() {
  local t="$1" log="$asan_build/findings/$1.replay.log"
  rm -rf "$asan_build/findings/$t" "$log"
  mkdir -p "$asan_build/findings/$t"
  (cd "$asan_build" && nice -n 10 "$asan_build/fuzz/$t" -runs=0 -timeout=10 -rss_limit_mb=2048 \
     -artifact_prefix="$asan_build/findings/$t/" -print_final_stats=1 "$build/corpus/$t" "$build/seeds/$t") \
    >"$log" 2>&1 || true
  printf '%-36s %12s %8s %9s  %s\n' "$t (asan replay)" "$(stat_sum number_of_executed_units "$log")" \
    "$(stat_max slowest_unit_time_sec "$log")" "$(find "$asan_build/findings/$t" -type f | wc -l)" \
    "$(kinds_of "$log")" >"$asan_build/findings/$t.replay.summary"
}

mkdir -p "$build/findings"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_target "$t" &
done
wait
summary="$build/fuzz-summary.txt"
printf '%-36s %12s %8s %9s  %s\n' target executions slowest findings kinds >"$summary"
for t in "${targets[@]}"; do cat "$build/findings/$t.summary" >>"$summary"; done
if [ "$fast" -eq 1 ]; then
  for t in "${targets[@]}"; do
    echo "fuzz: $t: the corpus through ASan+UBSan" >&2
    replay_in_asan "$t"
    cat "$asan_build/findings/$t.replay.summary" >>"$summary"
  done
fi
cat "$summary"
found=0
for t in "${targets[@]}"; do
  for d in "$build/findings/$t" "$asan_build/findings/$t"; do
    [ -n "$(find "$d" -type f 2>/dev/null)" ] && found=1
  done
done
if [ "$found" -eq 1 ]; then
  echo "fuzz: findings saved in <tree>/findings/<target>/ (logs: <tree>/findings/<target>.log)" >&2
  exit 1
fi
