#!/usr/bin/env bash
# How the learned planner's plans improve with the beam width K (templates proposed by the policy) and the
# simulation budget N (best-priced plans simulated): `arachne plan --planner arachne --beam K
# --simulate-top N --json` over a fixed set of heterogeneous clusters and models, every K x N.
#
# Per case (cluster, model) the plan's simulated tokens/s is divided by the best tokens/s any (K, N) of the
# sweep reached for that case. The Markdown table gives per (K, N) the geometric mean and the minimum of that
# ratio over the cases (a case where the planner found no plan counts as 0 in the minimum and is left out of
# the geometric mean; the failures column counts them) and the mean planning time (the planner's own
# planning_time_s, one core, as the CLI reports it). With --detail it also prints the ratio per case.
#
# Usage: scripts/arachne_k_sweep.sh [--arachne build/arachne] [--policy FILE] [--out DIR] [--detail]
#   --policy   weights to evaluate (default: the shipped configs/policy/arachne.weights)
#   --out      where the per-run JSON goes (default: a temporary directory, removed at the end)
# Environment: ARACHNE_SWEEP_KS ("1 2 4 8 16 32 64"), ARACHNE_SWEEP_NS ("1 3 8") override the grids.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
arachne="$root/build/arachne"
policy=""
out=""
detail=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arachne) arachne="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --detail) detail=1; shift ;;
    *) echo "usage: $0 [--arachne PATH] [--policy FILE] [--out DIR] [--detail]" >&2; exit 2 ;;
  esac
done
[ -x "$arachne" ] || { echo "error: $arachne: not built (ninja -C build arachne)" >&2; exit 2; }
if [ -z "$out" ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# The bundled clusters with more than one GPU type, and mixed specs of 3-4 types up to 384 GPUs.
clusters=()
for f in "$root"/configs/clusters/*.yaml; do
  types=$(grep -E '^\s*-?\s*gpu:' "$f" | sed 's/.*gpu: *//' | sort -u | wc -l)
  [ "$types" -gt 1 ] && clusters+=("$f")
done
clusters+=("A100-80:16x8,V100-32:16x4,T4:32x4,L4:16x8" "H100:8x8,A100-40:6x8,V100-16:10x4" "A100-40:8x8,A10:16x4,T4:16x4")
models=(gpt3-1.3b gpt3-13b gpt-moe-1.3b-64e)
read -r -a ks <<< "${ARACHNE_SWEEP_KS:-1 2 4 8 16 32 64}"
read -r -a ns <<< "${ARACHNE_SWEEP_NS:-1 3 8}"
policy_args=()
[ -n "$policy" ] && policy_args=(--policy "$policy")

start=$(date +%s)
runs=0
for c in "${clusters[@]}"; do
  for m in "${models[@]}"; do
    for k in "${ks[@]}"; do
      for n in "${ns[@]}"; do
        f="$out/$(basename "$c" .yaml | tr ':,' '__')__${m}__k${k}__n${n}.json"
        # Exit 3 (no feasible plan) still writes the JSON; anything else is an error of the sweep.
        rc=0
        "$arachne" plan --cluster "$c" --model "$m" --planner arachne --beam "$k" --simulate-top "$n" \
          "${policy_args[@]}" --json > "$f" 2> "$f.log" || rc=$?
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
          echo "error: arachne plan failed ($rc) on $c $m K=$k N=$n:" >&2
          cat "$f.log" >&2
          exit 1
        fi
        runs=$((runs + 1))
      done
    done
    echo "sweep: $(basename "$c") $m done ($runs runs, $(( $(date +%s) - start )) s)" >&2
  done
done

python3 - "$out" "$detail" "$((  $(date +%s) - start ))" "$runs" "${ks[*]}" "${ns[*]}" <<'EOF'
import glob, json, math, os, sys
out, detail, wall, runs = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
ks = [int(x) for x in sys.argv[5].split()]
ns = [int(x) for x in sys.argv[6].split()]
cases = {}  # case -> {(k, n): (tokens/s or 0, planning time s)}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    case, k, n = os.path.basename(f)[:-5].rsplit("__", 2)
    r = json.load(open(f))["results"][0]
    ok = r.get("plan") is not None and not r.get("oom", False)
    cases.setdefault(case, {})[(int(k[1:]), int(n[1:]))] = (r["tokens_per_s"] if ok else 0.0, r["planning_time_s"])
rel = {}
for case, runs_ in cases.items():
    best = max(t for t, _ in runs_.values())
    for kn, (t, _) in runs_.items():
        rel.setdefault(kn, {})[case] = t / best if best > 0 else 0.0
print(f"{len(cases)} cases (clusters x models), {runs} runs, {wall} s wall.\n")
print("| K | N simulated | tokens/s / best of sweep: geomean | min | failures | mean planning time (ms) |")
print("|---|---|---|---|---|---|")
for k in ks:
    for n in ns:
        vals = [v for v in rel[(k, n)].values()]
        pos = [v for v in vals if v > 0]
        gm = math.exp(sum(math.log(v) for v in pos) / len(pos)) if pos else 0.0
        ms = 1e3 * sum(cases[c][(k, n)][1] for c in cases) / len(cases)
        print(f"| {k} | {n} | {gm:.3f} | {min(vals):.3f} | {len(vals) - len(pos)} | {ms:.0f} |")
if detail:
    print("\n| case | " + " | ".join(f"K{k} N{n}" for k in ks for n in ns) + " |")
    print("|---|" + "---|" * (len(ks) * len(ns)))
    for case in sorted(cases):
        print(f"| {case} | " + " | ".join(f"{rel[(k, n)][case]:.3f}" for k in ks for n in ns) + " |")
EOF
