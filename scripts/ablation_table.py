#!/usr/bin/python3
"""What each template source gives on the fresh held-out configurations, with and without the climb.

Usage: /usr/bin/python3 scripts/ablation_table.py OUT_DIR RUNS_DIR

Reads RUNS_DIR/VARIANT/seed-S/evaluation.h5 for S = 12..20 (written by scripts/arachne_fresh_ablations.sh;
VARIANT is climbs, no-climb, beam-16, untrained-policy or untrained-no-climb: those of them that RUNS_DIR holds, at least one; each
needs the rows the table reports for it) and the committed evaluation of the same configurations
(results/arachne-evaluation-fresh/seed-S: the five baselines' cells and arachne's own), and writes
  OUT_DIR/ablations.csv  one row per variant, row (arachne or an ablation) and configuration: tokens/s, the
                         best baseline's, their ratio, the ratio to arachne's committed plan, planning_s
  OUT_DIR/summary.md     per variant and row, dense and MoE: geometric mean and least of tokens/s over the
                         best baseline, configurations below 0.995 of it, geometric mean over arachne's
                         committed plan; planning time (median / sum)
  OUT_DIR/ablations.png  the geometric means over the best baseline per row, with and without the climb
Configurations where no baseline found a plan are left out. A row that found no plan counts as 0 in the least
ratio and is left out of the geometric means.
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

SEEDS = range(12, 21)
# Each variant's directory, its title, and the rows of its runs that the table reports.
VARIANTS = (
    ("climbs", "default search (climbs)", ("arachne", "arachne[policy]", "arachne[heuristic]", "arachne[random]")),
    ("no-climb", "--refine 0 (no climb)", ("arachne", "arachne[policy]", "arachne[heuristic]", "arachne[random]")),
    ("beam-16", "--beam 16 (default search)", ("arachne", "arachne[heuristic]")),
    ("untrained-policy", "untrained policy (default search)", ("arachne", "arachne[policy]")),
    ("untrained-no-climb", "untrained policy, --refine 0", ("arachne", "arachne[policy]")),
)


def rows_of(runs, variant, planners):
    rows = []
    for seed in SEEDS:
        ref = cells(f"results/arachne-evaluation-fresh/seed-{seed}/evaluation.h5")
        run = cells(os.path.join(runs, variant, f"seed-{seed}", "evaluation.h5"))
        for config, found in sorted(run.items()):
            best = best_baseline(ref[config])
            if best <= 0:
                continue
            committed = tokens(ref[config]["arachne"])
            for planner in planners:
                if planner not in found:
                    raise LookupError(f"{variant}/seed-{seed}: configuration {config} has no {planner} row")
                rows.append({"variant": variant, "row": planner, "seed": seed, "config": config,
                             **ratio_row(found[planner], best, committed)})
    return rows


def main(argv):
    if len(argv) != 3:
        print("usage: ablation_table.py OUT_DIR RUNS_DIR", file=sys.stderr)
        return 2
    out, runs = argv[1], argv[2]
    table = []  # (variant, title, planner, rows)
    for variant, title, planners in VARIANTS:
        if not os.path.isdir(os.path.join(runs, variant)):
            continue
        try:
            rows = rows_of(runs, variant, planners)
        except (LookupError, OSError) as e:
            print(f"error: {runs}: {e}", file=sys.stderr)
            return 2
        for planner in planners:
            table.append((variant, title, planner, [x for x in rows if x["row"] == planner]))
    if not table:
        print(f"error: {runs}: none of the variants {', '.join(v for v, *_ in VARIANTS)}", file=sys.stderr)
        return 2
    lines = ["# What each template source gives, with and without the climb", "",
             "`scripts/arachne_fresh_ablations.sh`: on the 216 configurations of the committed fresh seeds 12-20 "
             "(held-out GPU-type families), arachne and its ablations, which replace only the template source (the "
             "policy's K alone, the generator's K alone, K random walks over the grammar; K = 8 unless the variant "
             "says): with the default search; with `--refine 0` (no climb; the passes after it - folds, "
             "repartitions, recompute levels, a descent of at most 4 moves - still run); and with `--beam 16` "
             "(arachne with the policy's 16 and the generator's 16, and the generator's 16 alone); and arachne and "
             "the policy's K alone with an untrained policy (the weights `train` starts from, seed 1), with and "
             "without the climb. Tokens/s over "
             "the best of the five baselines' committed plans (configurations where one has a plan) and over "
             "arachne's committed plan; one configuration at a time. Data: ablations.csv.", "",
             "| variant | row | dense: n | geo. mean | least | below 0.995 | over arachne | MoE: n | geo. mean "
             "| least | below 0.995 | over arachne | planning s: median / sum |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, title, planner, rows in table:
        d, m = summary_row(rows, 0), summary_row(rows, 1)
        times = [x["planning_s"] for x in rows]
        lines.append(f"| {title} | {planner} | {d[0]} | {d[1]:.3f} | {d[2]:.3f} | {d[3]} | {d[4]:.3f} | {m[0]} | "
                     f"{m[1]:.3f} | {m[2]:.3f} | {m[3]} | {m[4]:.3f} | {statistics.median(times):.3g} / "
                     f"{sum(times):.0f} |")
    os.makedirs(out, exist_ok=True)
    write_atomically(os.path.join(out, "summary.md"), "\n".join(lines) + "\n")
    write_atomically(os.path.join(out, "ablations.csv"), csv_text([x for *_, rows in table for x in rows]))

    fig, ax = plt.subplots(figsize=(8.4, 4.0))
    labels = [f"{planner}\n{variant}" for variant, _, planner, _ in table]
    xs = range(len(table))
    for offset, moe, name, colour in ((-0.2, 0, "dense", "tab:blue"), (0.2, 1, "MoE", "tab:orange")):
        ax.bar([x + offset for x in xs], [summary_row(rows, moe)[1] for *_, rows in table], width=0.4,
               color=colour, label=name)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("tokens/s over the best baseline (geo. mean)")
    ax.set_title("Template sources on 216 held-out configurations")
    ax.set_ylim(0.5, 1.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return save_png_or_report(fig, os.path.join(out, "ablations.png"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
