#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cpp: one per input parser, each calling the loader the CLI
# calls, with ASan and UBSan) in build-fuzz/ with clang-14, and runs each for SECONDS (default 60) under
# nice. Prints, per target, the executions and the findings (input files) with their kinds: a crash or
# sanitizer report, an exception that the CLI would report as `error: internal` or an empty `where`
# (FINDING), an input taking over 10 s (timeout: the instrumented build runs 10-50 times slower than the
# Release CLI, so this is ~1 s there; time a timeout's input with build/arachne) or over 2 GiB (out-of-memory).
# Findings are saved in build-fuzz/findings/<target>/; reproduce one with build-fuzz/fuzz/<target> FILE.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# Seeds come from configs/, traces/ and the tests' fixtures, copied at each run into build-fuzz/seeds/; the
# corpus grown by earlier runs (build-fuzz/corpus/) is kept. Exit status 1 when anything was found.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARACHNE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
shift || true
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2; }

"$root/scripts/setup.sh" "$build" -DARACHNE_FUZZ=ON -DARACHNE_WITH_TORCH=OFF -DARACHNE_BUILD_TESTS=OFF \
  -DARACHNE_BUILD_BENCH=OFF -DARACHNE_WITH_MPI=OFF

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
cmake --build "$build" -j "${ARACHNE_JOBS:-2}" --target "${targets[@]}" >&2
# Inputs are written to a file per execution: on tmpfs where there is one.
[ -w /dev/shm ] && export TMPDIR=/dev/shm
found=0
printf '%-22s %12s %9s  %s\n' target executions findings kinds >"$build/fuzz-summary.txt"
for t in "${targets[@]}"; do
  [ -x "$build/fuzz/$t" ] || { echo "fuzz: no target $t" >&2; exit 2; }
  make_seeds "$t"
  rm -rf "$build/findings/$t" "$build/findings/$t.log"
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  log="$build/findings/$t.log"
  echo "fuzz: $t for ${seconds} s" >&2
  # libFuzzer stops at a finding (saved under findings/): the run starts again, with the corpus grown so
  # far, until SECONDS are used (at most 50 starts, and none after a start that found only an input found
# before, e.g. the empty input that libFuzzer runs first), so that one bug does not hide the next.
  start=$(date +%s)
  execs=0
  for _ in $(seq 50); do
    left=$(( seconds - ($(date +%s) - start) ))
    [ "$left" -gt 0 ] || break
    (cd "$build" && nice -n 10 "$build/fuzz/$t" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 \
       -dict="$root/fuzz/${dict[$t]}.dict" -artifact_prefix="$build/findings/$t/" -print_final_stats=1 \
       "$build/corpus/$t" "$build/seeds/$t") >"$log.run" 2>&1 || true
    cat "$log.run" >>"$log"
    n=$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)$/\1/p' "$log.run" | tail -1)
    execs=$(( execs + ${n:-0} ))
    # A start that found only an input already saved (the same bytes): libFuzzer would find it again.
    now_files=$(find "$build/findings/$t" -type f | wc -l)
    [ "$now_files" -gt "${last_files:-0}" ] || [ "$(( $(date +%s) - start ))" -ge "$seconds" ] || break
    last_files=$now_files
  done
  last_files=0
  rm -f "$log.run"
  files=$(find "$build/findings/$t" -type f | wc -l)
  [ "$files" -gt 0 ] && found=1
  # Kinds: the harness's FINDING lines and the sanitizers' and libFuzzer's SUMMARY lines, without addresses.
  kinds=$(grep -hE '^(FINDING: |SUMMARY: )' "$log" | sed -E 's/0x[0-9a-f]+//g; s/ \(pc .*//' | cut -c1-90 |
          sort | uniq -c | sort -rn | awk '{$1 = $1 "x"; print}' | paste -sd';' - || true)
  printf '%-22s %12s %9s  %s\n' "$t" "$execs" "$files" "${kinds:--}" >>"$build/fuzz-summary.txt"
done
cat "$build/fuzz-summary.txt"
if [ "$found" -eq 1 ]; then
  echo "fuzz: findings saved in $build/findings/<target>/ (logs: $build/findings/<target>.log)" >&2
  exit 1
fi
