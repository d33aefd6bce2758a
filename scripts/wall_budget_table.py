#!/usr/bin/python3
"""Arachne's plans under a wall-clock budget against the committed evaluations' cells.

Usage: /usr/bin/python3 scripts/wall_budget_table.py OUT_DIR RUNS_DIR CAP [CAP ...]

Reads RUNS_DIR/cap-CAP/SET/evaluation.h5 (arachne alone under `--budget-wall CAP`, written by
scripts/arachne_wall_budget.sh; SET is fresh-S, heldout-12 or gpus-G, the sets of the first cap's directory) and the committed evaluation of the
same configurations (results/arachne-evaluation-fresh/seed-S, results/arachne-evaluation,
results/arachne-planning-time/gpus-G: the five baselines' cells and arachne's own without a tight cap), and
writes
  OUT_DIR/wall_budget.csv  one row per cap and configuration: tokens/s, the best baseline's, their ratio,
                           the ratio to arachne's committed plan, planning_s
  OUT_DIR/summary.md       per cap, dense and MoE: geometric mean and least of tokens/s over the best
                           baseline, configurations below 0.995 of it, geometric mean over arachne's
                           committed plan; arachne's planning time (median / max); and the committed row
  OUT_DIR/wall_budget.png  the geometric means against the cap (log scale), the committed ones as lines
Configurations where no baseline found a plan are left out of the ratios. A configuration where arachne
found no plan under the cap counts as 0 in the least ratio and is left out of the geometric means.
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Files are written atomically.
"""
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evaluation_cells import best_baseline, cells, ratio_row, summary_row, tokens  # noqa: E402
from plot_common import csv_text, save_png_or_report, write_atomically  # noqa: E402

def committed_path(name):
    """The committed evaluation of the set's configurations."""
    kind, _, arg = name.partition("-")
    if kind == "fresh":
        return f"results/arachne-evaluation-fresh/seed-{arg}/evaluation.h5"
    if kind == "heldout":
        return "results/arachne-evaluation/evaluation.h5"
    return f"results/arachne-planning-time/gpus-{arg}/evaluation.h5"






def rows_of(cap, runs, sets):
    """The cap's rows: one per configuration of every set that has a baseline plan (cap None: the committed
    arachne cells)."""
    rows = []
    for name in sets:
        ref = cells(committed_path(name))
        run = ref if cap is None else cells(os.path.join(runs, f"cap-{cap}", name, "evaluation.h5"))
        for config, planners in sorted(run.items()):
            best = best_baseline(ref[config])
            if best <= 0 or "arachne" not in planners:
                continue
            rows.append({"cap_s": "none" if cap is None else cap, "set": name, "config": config,
                         **ratio_row(planners["arachne"], best, tokens(ref[config]["arachne"]))})
    return rows


def main(argv):
    if len(argv) < 4:
        print("usage: wall_budget_table.py OUT_DIR RUNS_DIR CAP [CAP ...]", file=sys.stderr)
        return 2
    out, runs, caps = argv[1], argv[2], argv[3:]
    # The sets the script ran, in its order: fresh seeds, the held-out set, then the sizes ascending.
    order = {"fresh": 0, "heldout": 1, "gpus": 2}
    sets = sorted(os.listdir(os.path.join(runs, f"cap-{caps[0]}")),
                  key=lambda n: (order.get(n.partition("-")[0], 3), int(n.partition("-")[2] or 0)))
    per_cap = [(cap, rows_of(cap, runs, sets)) for cap in caps] + [(None, rows_of(None, runs, sets))]
    lines = ["# Arachne under a wall-clock budget", "",
             "`scripts/arachne_wall_budget.sh`: arachne alone under `--budget-wall CAP` (one configuration at a "
             "time) on the configurations of the committed fresh seeds 12-20, the 12 held-out and the planning-time "
             "sets; tokens/s over the best of the five baselines' committed plans (configurations where one has a "
             "plan), and over arachne's committed plan (no cap but the evaluations' 30-60 s). Data: wall_budget.csv.",
             "",
             "| wall budget | dense: n | geo. mean | least | below 0.995 | over uncapped | MoE: n | geo. mean | least "
             "| below 0.995 | over uncapped | planning s: median / max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cap, rows in per_cap:
        d, m = summary_row(rows, 0), summary_row(rows, 1)
        times = [x["planning_s"] for x in rows]
        label = "none (committed)" if cap is None else f"{cap} s"
        lines.append(f"| {label} | {d[0]} | {d[1]:.3f} | {d[2]:.3f} | {d[3]} | {d[4]:.3f} | {m[0]} | {m[1]:.3f} | "
                     f"{m[2]:.3f} | {m[3]} | {m[4]:.3f} | {statistics.median(times):.3g} / {max(times):.3g} |")
    os.makedirs(out, exist_ok=True)
    write_atomically(os.path.join(out, "summary.md"), "\n".join(lines) + "\n")
    write_atomically(os.path.join(out, "wall_budget.csv"), csv_text([r for _, rows in per_cap for r in rows]))

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [float(cap) for cap, _ in per_cap if cap is not None]
    for moe, label, colour in ((0, "dense", "tab:blue"), (1, "MoE", "tab:orange")):
        ax.plot(xs, [summary_row(rows, moe)[1] for cap, rows in per_cap if cap is not None], "o-", color=colour,
                label=f"{label}, under the cap")
        ax.axhline(summary_row(per_cap[-1][1], moe)[1], color=colour, linestyle="--", label=f"{label}, committed")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("arachne's --budget-wall (s)")
    ax.set_ylabel("tokens/s over the best baseline (geo. mean)")
    ax.set_title("Arachne's plans under a wall-clock budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png_or_report(fig, os.path.join(out, "wall_budget.png"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
