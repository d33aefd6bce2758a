#!/usr/bin/python3
"""Plot `arachne evaluate` results: tokens/s relative to the best baseline per configuration (dense and
MoE apart), and planning time against cluster size.

Usage: /usr/bin/python3 scripts/plot_evaluation.py RATIO.png PLANNING_TIME.png EVALUATION.h5

Reads only the file (h5py, no project code): the compound table `/cells` (one row per configuration and
planner; layout in planner/arachne/evaluate.h). The best baseline of a configuration is the highest
simulated tokens/s among megatron, amp, metis, flashflex and sailor; an arachne row (the policy or an
ablation, `arachne[random]` ...) is plotted as its ratio to it, 0 when it found no feasible plan.
Planning time: every planner's wall time per configuration against the cluster's GPUs, both axes log.
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Written atomically.
"""
import math
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import BASELINES, save_png_or_report, text


def read_cells(path):
    with h5py.File(path, "r") as f:
        t = f["cells"][()]
    cells = []
    for r in t:
        feasible = bool(r["has_plan"]) and not bool(r["oom"]) and not math.isnan(float(r["tokens_per_s"]))
        cells.append({"config": int(r["config"]), "gpus": int(r["gpus"]), "moe": bool(r["moe"]),
                      "planner": text(r["planner"]), "tokens_per_s": float(r["tokens_per_s"]) if feasible else None,
                      "planning_s": float(r["planning_s"])})
    return cells


def ratios(cells):
    """{row label: [(config, gpus, moe, ratio)]} for the arachne rows, where some baseline found a plan."""
    best = {}
    for c in cells:
        if c["planner"] in BASELINES and c["tokens_per_s"] is not None:
            best[c["config"]] = max(best.get(c["config"], 0.0), c["tokens_per_s"])
    out = {}
    for c in cells:
        if c["planner"].startswith("arachne") and c["config"] in best:
            r = (c["tokens_per_s"] or 0.0) / best[c["config"]]
            out.setdefault(c["planner"], []).append((c["config"], c["gpus"], c["moe"], r))
    return out


def plot_ratios(cells, out, title):
    rows = ratios(cells)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, moe in zip(axes, (False, True)):
        configs = sorted({c for pts in rows.values() for (c, _, m, _) in pts if m == moe})
        pos = {c: i for i, c in enumerate(configs)}
        for k, (label, pts) in enumerate(rows.items()):
            sel = [(pos[c], r) for (c, _, m, r) in pts if m == moe]
            if sel:
                ax.scatter([x + 0.12 * (k - (len(rows) - 1) / 2) for x, _ in sel], [r for _, r in sel], s=18,
                           marker="o" if label == "arachne" else "x", label=label, zorder=3 if label == "arachne" else 2)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels([str(c) for c in configs], fontsize=7, rotation=90 if len(configs) > 30 else 0)
        ax.set_xlabel("configuration")
        ax.set_title("MoE models" if moe else "dense models")
        ax.grid(alpha=0.3)
        if not configs:
            ax.text(0.5, 0.5, "no configuration", ha="center", va="center", transform=ax.transAxes)
    axes[0].set_ylabel("tokens/s / best baseline's")
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1].get_legend_handles_labels()
    if handles:
        axes[1].legend(handles, labels, fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    return save_png_or_report(fig, out)


def plot_planning_time(cells, out, title):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    planners = []
    for c in cells:
        if c["planner"] not in planners:
            planners.append(c["planner"])
    for p in planners:
        pts = [(c["gpus"], max(c["planning_s"], 1e-4)) for c in cells if c["planner"] == p]
        ax.scatter([g for g, _ in pts], [t for _, t in pts], s=16, label=p,
                   marker="o" if p.startswith("arachne") else "^")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs in the cluster")
    ax.set_ylabel("planning wall time (s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title)
    fig.tight_layout()
    return save_png_or_report(fig, out)


def main(argv):
    if len(argv) != 4:
        print("usage: plot_evaluation.py RATIO.png PLANNING_TIME.png EVALUATION.h5", file=sys.stderr)
        return 2
    ratio_out, time_out, path = argv[1], argv[2], argv[3]
    try:
        cells = read_cells(path)
    except (OSError, KeyError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    configs = len({c["config"] for c in cells})
    rc = plot_ratios(cells, ratio_out, f"Throughput relative to the best baseline ({configs} configurations)")
    return rc or plot_planning_time(cells, time_out, f"Planning time ({configs} configurations)")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
