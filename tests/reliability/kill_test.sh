#!/usr/bin/env bash
# kill -9 in the middle of every command that writes a file leaves, at each output path, either no file or
# the previous complete one (DESIGN.md: files are written under a temporary name and renamed when complete;
# a file the killed run had already completed may stand there instead, and must then be whole).
# For each command: a reference run to completion (its duration D; its outputs must be whole files); then
# the same command in an empty directory, its process group killed with SIGKILL at 0.4 D (each output must
# be absent or equal to the reference's), and run again to the end there (its outputs must equal the
# reference's, with no temporary file .NAME.tmp-PID left); and over copies of the reference outputs (the
# previous files), killed at 0.85 D (each output must be byte-identical to the previous file or equal to
# the reference's). "Equal" is tests/tools/same_results.py (wall-time fields aside; a plot of planning wall
# times need only be whole). A run that ends before its kill is run again with half the delay (up to 5
# times: the load of a shared machine makes run times vary); a command never killed mid-run fails the test.
# Usage: tests/reliability/kill_test.sh ARACHNE_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/../tools/script_setup.sh" kill "$1"
now() { date +%s.%N; }

mkdir -p "$work/in"
cp "$repo/tests/data/small-gpt.yaml" "$work/in/small-gpt.yaml"
cat >"$work/in/tiny.yaml" <<'YAML'
version: 1
name: tiny
budget: {evaluations: 100}
comparisons:
  - clusters: ["A100-80:1x4", "A100-80:1x2,V100-32:1x2"]
    models: [small-gpt.yaml]
    planners: [megatron, sailor, metis]
replays:
  - trace: traces/native_small.csv
    model: small-gpt.yaml
    planners: [megatron]
    planning_time: "5 s"
YAML
"$arachne" trace generate --out "$work/in/month.csv" --seed 1 --duration 2592000 --nodes A100-80:64,T4:64 2>/dev/null ||
  fail "cannot generate the input trace"
cp "$repo/configs/gpus.yaml" "$work/in/gpus.yaml"

# Whole files: HDF5 that h5py reads through, JSON that parses, PNG up to its IEND chunk, non-empty text.
whole_files() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
import h5py
for path in sys.argv[1:]:
    try:
        if path.endswith(".h5"):
            with h5py.File(path, "r") as f:
                f.visititems(lambda name, obj: obj[()] if isinstance(obj, h5py.Dataset) else None)
        elif path.endswith(".json"):
            json.load(open(path))
        elif path.endswith(".png"):
            data = open(path, "rb").read()
            assert data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82"), "not a whole PNG"
        else:
            assert open(path, "rb").read(), "empty"
    except Exception as e:
        sys.exit(f"{path}: not a whole file: {e}")
PY
}

# Starts `arachne WORDS` in DIR as the leader of a new process group (its plot scripts belong to it), kills
# the group with SIGKILL after DELAY seconds, and returns 0 if it was killed mid-run, 1 if it ended first.
run_and_kill() {
  local dir="$1" delay="$2"; shift 2
  (cd "$dir" && exec setsid "$arachne" "$@") >/dev/null 2>"$dir.stderr" &
  local pid=$!
  sleep "$delay"
  kill -9 -- "-$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  for _ in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
  [ "$rc" -eq 137 ]
}

# Reduced sizes (ARACHNE_TEST_REDUCED, the sanitized build): only the kill over the previous files.
scenarios="fresh prev"
[ -z "${ARACHNE_TEST_REDUCED:-}" ] || [ "${ARACHNE_TEST_REDUCED}" = 0 ] || scenarios="prev"
pairs=()       # (reference output, output after a kill) pairs that must be equal
commands=0
# killing NAME "OUTPUTS" WORDS...: the three runs above of `arachne WORDS` (outputs relative to the run's
# directory; inputs in ../../in/). With PREVIOUS=DIR, the outputs exist before every run (the command
# rewrites a file, as calibrate --write does): copies of DIR's files, the previous files of both kills.
killing() {
  local name="$1" outputs="$2"; shift 2
  local ref="$work/ref/$name" o
  mkdir -p "$ref" "$work/fresh/$name" "$work/prev/$name"
  for o in $outputs; do
    [ -z "${PREVIOUS:-}" ] || { mkdir -p "$(dirname "$ref/$o")"; cp "$PREVIOUS/$o" "$ref/$o"; }
  done
  local t0 t1 d
  t0=$(now)
  (cd "$ref" && "$arachne" "$@") >/dev/null 2>"$ref.stderr" || fail "$name: the reference run failed: $(tail -3 "$ref.stderr")"
  t1=$(now)
  d=$(echo "$t1 - $t0" | bc)
  local files=()
  for o in $outputs; do files+=("$ref/$o"); done
  whole_files "${files[@]}" || fail "$name: the reference run's outputs are not whole"
  local killed=0 scenario dir fraction delay tries previous
  for scenario in $scenarios; do
    dir="$work/$scenario/$name"
    previous=$([ "$scenario" = prev ] || [ -n "${PREVIOUS:-}" ] && echo 1 || echo 0)
    if [ "$previous" -eq 1 ]; then
      for o in $outputs; do
        mkdir -p "$(dirname "$dir/$o")"
        cp "${PREVIOUS:-$ref}/$o" "$dir/$o"
        cp "$dir/$o" "$dir/$o.previous"
      done
    fi
    fraction=$([ "$scenario" = fresh ] && echo 0.4 || echo 0.85)
    delay=$(echo "$d * $fraction" | bc -l)
    for tries in 1 2 3 4 5 6; do
      if run_and_kill "$dir" "$delay" "$@"; then
        killed=$((killed + 1))
        break
      fi
      delay=$(echo "$delay / 2" | bc -l)
    done
    for o in $outputs; do
      if [ ! -e "$dir/$o" ]; then
        [ "$previous" -eq 0 ] || fail "$name: $o: the previous file is gone after the kill"
      elif [ "$previous" -eq 1 ] && cmp -s "$dir/$o" "$dir/$o.previous"; then
        :
      elif [[ "$o" == */planning_time.png ]]; then
        whole_files "$dir/$o" || fail "$name: $o is not whole after the kill"  # a plot of wall times
      else
        pairs+=("$ref/$o" "$dir/$o")
      fi
    done
  done
  [ "$killed" -ge 1 ] || fail "$name: ended before every kill (D = $d s)"
  # Then the same command to the end where the first kill struck: the outputs of an uninterrupted run, and
  # no temporary file of an output left (each write removes those of dead writers).
  if [[ " $scenarios " == *" fresh "* ]]; then
    dir="$work/fresh/$name"
    (cd "$dir" && "$arachne" "$@") >/dev/null 2>"$dir.rerun.stderr" || fail "$name: the run after the kill failed: $(tail -3 "$dir.rerun.stderr")"
    for o in $outputs; do
      [[ "$o" == */planning_time.png ]] || pairs+=("$ref/$o" "$dir/$o")
      leftovers=$(find "$(dirname "$dir/$o")" -maxdepth 1 -name ".$(basename "$o").tmp*")
      [ -z "$leftovers" ] || fail "$name: temporary files left after a complete run: $leftovers"
    done
  fi
  commands=$((commands + 1))
  echo "kill: $name (D = $(printf '%.2f' "$d") s, killed mid-run $killed of $(wc -w <<<"$scenarios"))"
}

I=../../in
R="$repo"
killing simulate "sim.h5 sim.timeline.json" simulate --cluster A100-80:8x8 --model llama2-13b --tp 4 --pp 4 --dp 4 \
  --micro-batch 1 --out sim.h5 --timeline sim.timeline.json
killing plan "best.yaml" plan --cluster A100-80:2x4,V100-32:2x4 --model gpt3-1.3b --global-batch 64 --planner oracle \
  --budget 150 --out best.yaml
killing replay "replay.h5 replay.png" replay --trace "$R/traces/native_small.csv" --model "$I/small-gpt.yaml" \
  --planner megatron,sailor --planning-time 5 --out replay.h5
killing trace-generate "generated.csv" trace generate --out generated.csv --seed 2 --duration 2592000 --nodes A100-80:64,T4:64
killing trace-convert "converted.csv" trace convert --trace "$I/month.csv" --out converted.csv
killing trace-plot "trace.png" trace plot --trace "$R/traces/synthetic_mixed_6h.csv" --out trace.png
killing gen-data "data.h5" gen-data --out data.h5 --configs 8 --seed 3 --threads 1 --min-gpus 4 --max-gpus 16 \
  --max-templates 40 --sampled-templates 8 --simulate-top 2 --labels 2 --oracle-max-gpus 0
if [ -f "$(dirname "$arachne")/libarachne_learned_module.so" ]; then
  killing train "policy/policy.weights policy/training.h5 policy/training.png" train --data ../gen-data/data.h5 \
    --validation ../gen-data/data.h5 --out policy --imitation-epochs 1 --pg-epochs 0 --batch 8 --threads 1
else
  echo "kill: train not covered (built without the learned module)"
fi
killing evaluate "evaluation/evaluation.h5 evaluation/summary.md evaluation/ratio.png evaluation/planning_time.png" \
  evaluate --out evaluation --configs 2 --seed 2 --min-gpus 4 --max-gpus 8 --planners megatron,sailor --ablations none \
  --threads 1 --budget 50
killing experiment "experiment/experiment.h5 experiment/summary.md experiment/throughput.png experiment/replay_tokens.png" \
  experiment "$I/tiny.yaml" --out experiment
data="${ARACHNE_DATA:-$repo/../shared/data}"
if [ -f "$data/measured/vtrain_a100_single_node.csv" ]; then
  PREVIOUS="$work/in" killing calibrate "gpus.yaml" calibrate --data "$data/measured/vtrain_a100_single_node.csv" --evaluations 8 --write gpus.yaml
else
  echo "kill: calibrate not covered (no shared data)"
fi

[ ${#pairs[@]} -eq 0 ] || /usr/bin/python3 "$same" "${pairs[@]}" || fail "an output after a kill is neither absent, the previous file nor whole (above)"
echo "PASS: $commands commands killed with SIGKILL; $(( ${#pairs[@]} / 2 )) outputs completed by the killed runs were whole"
