#!/usr/bin/python3
"""Every planner on a set of clusters and models: each plan measured in the simulator (`arachne plan --json`).

Writes a Markdown report to stdout: per case the throughput of every planner relative to the reference - the
oracle where its search is complete (nothing in its declared space is faster), else the best plan found by any
planner - and per planner the mean absolute error of its own cost model against the simulator, the geometric
mean of its throughput relative to the reference, and its planning time. A `*` marks a search that a budget or
a cap cut short (`search_complete: false`). Used for README's planner figures:

    scripts/compare_planners.py [--binary build/arachne] [--budget 2000] [--budget-wall S] [--cost-model own]
"""
import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# cluster, model, global batch: homogeneous and heterogeneous, node sizes 1/2/4/8, dense and MoE.
CASES = [
    ("configs/clusters/tiny-hetero.yaml", "gpt3-1.3b", 128),
    ("configs/clusters/hetero-a100-v100.yaml", "gpt3-2.7b", 256),
    ("configs/clusters/mix-a100-v100-t4.yaml", "gpt3-1.3b", 512),
    ("configs/clusters/mix-h100-a100-l4.yaml", "llama2-7b", 512),
    ("configs/clusters/mix-a100-40-a10-4gpu.yaml", "gpt3-2.7b", 256),
    ("A100-80:4x8", "gpt3-6.7b", 512),
    ("H100:2x8,A100-80:2x8,V100-32:4x4", "gpt3-6.7b", 512),
    ("configs/clusters/mix-h100-a100-l4.yaml", "gpt-moe-1.3b-64e", 512),
    ("H100:2x8,A100-80:2x8", "mixtral-8x7b", 256),
]


def run_case(binary, cluster, model, batch, budget, budget_wall, cost_model, planners):
    cmd = [binary, "plan", "--cluster", cluster, "--model", model, "--global-batch", str(batch),
           "--planner", planners, "--budget", str(budget), "--cost-model", cost_model, "--json"]
    if budget_wall > 0:
        cmd += ["--budget-wall", str(budget_wall)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "arachne"))
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--budget-wall", type=float, default=0, help="wall-clock cap per planner and case, seconds")
    ap.add_argument("--cost-model", default="own", choices=["own", "simulator"])
    ap.add_argument("--planners", default="all")
    args = ap.parse_args()

    per_planner = {}
    out = []
    wall = f", at most {args.budget_wall:g} s each" if args.budget_wall > 0 else ""
    out.append(f"Planners, budget {args.budget} simulator evaluations{wall}, cost model `{args.cost_model}`; "
               "tokens/s of each plan simulated on the full cluster, relative to the reference of the case: "
               "the oracle where its search is complete, else the best plan found (\"best found\"). "
               "`*`: the planner's search was cut short (budget or cap).\n")
    header = None
    for cluster, model, batch in CASES:
        print(f"compare: {model} on {cluster} ...", file=sys.stderr)
        results = run_case(args.binary, cluster, model, batch, args.budget, args.budget_wall, args.cost_model,
                           args.planners)
        names = [r["planner"] for r in results]
        if header is None:
            header = names
            out.append("| cluster | model | batch | reference | " + " | ".join(names) + " |")
            out.append("|---|---|---:|---|" + "---:|" * len(names))
        oracle = next((r for r in results if r["planner"] == "oracle"), None)
        complete = oracle is not None and oracle["search_complete"] and oracle["tokens_per_s"]
        best = oracle["tokens_per_s"] if complete else max((r["tokens_per_s"] or 0) for r in results)
        reference = "oracle (complete)" if complete else "best found"
        cells = []
        for r in results:
            s = per_planner.setdefault(r["planner"], {"err": [], "ratio": [], "time": [], "none": 0, "oom": 0})
            s["time"].append(r["planning_time_s"])
            if r["plan"] is None:
                s["none"] += 1
                cells.append("none")
            elif r["tokens_per_s"] is None:
                s["oom"] += 1
                cells.append("OOM")
            else:
                ratio = r["tokens_per_s"] / best if best > 0 else 0
                s["ratio"].append(ratio)
                sim, pred = r["simulated_iteration_time_s"], r["predicted_iteration_time_s"]
                s["err"].append(abs(pred - sim) / sim)
                cut = "" if r["search_complete"] else "*"
                cells.append(f"{ratio:.2f}{cut}")
        out.append(f"| {cluster.replace('configs/clusters/', '')} | {model} | {batch} | {reference} | "
                   + " | ".join(cells) + " |")

    out.append("\n| planner | geo-mean x reference | mean abs. prediction error | median planning s | max planning s | no plan | OOM |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for name in header or []:
        s = per_planner[name]
        geo = math.exp(sum(math.log(max(r, 1e-9)) for r in s["ratio"]) / len(s["ratio"])) if s["ratio"] else 0
        err = 100 * sum(s["err"]) / len(s["err"]) if s["err"] else float("nan")
        times = sorted(s["time"])
        med = times[len(times) // 2]
        out.append(f"| {name} | {geo:.3f} | {err:.1f} % | {med:.3f} | {times[-1]:.3f} | {s['none']} | {s['oom']} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
