#!/usr/bin/python3
"""Figures of an `arachne experiment` file, from the HDF5 file alone (h5py, no project code).

Usage: /usr/bin/python3 scripts/plot_experiment.py OUT_DIR EXPERIMENT.h5

Writes into OUT_DIR (each atomically):
  throughput.png     per model (one panel each), per cluster (groups of bars), each planner's simulated
                     tokens/s divided by the best baseline's (megatron, amp, metis, flashflex, sailor) on
                     the same cluster, global batch and seed (cells of every comparison block together);
                     a missing bar is no feasible plan; a hatched bar, a search cut by a budget or cap
  planning_time.png  planning wall time (log scale) against cluster size (GPUs), one series per planner
  replay_tokens.png  per replay (one panel each), cumulative tokens trained over time, one line per planner
A figure without data (no comparison cells, or no replays) is drawn with a note saying so.
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3).
"""
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import BASELINES, save_png_or_report, text


def read(path):
    with h5py.File(path, "r") as f:
        comparisons = [{k: (text(r[k]) if r.dtype[k].kind in "OSU" else r[k].item()) for k in r.dtype.names}
                       for r in f["comparisons"][()]]
        replays = []
        for r in f["replays"][()]:
            group = text(r["group"])
            rows = sorted(f[group]["intervals"][()], key=lambda x: float(x["start_s"]))
            replays.append({"block": int(r["block"]), "trace": text(r["trace"]), "model": text(r["model"]),
                            "planner": text(r["planner"]),
                            "intervals": [(float(x["start_s"]), float(x["end_s"]), float(x["tokens"])) for x in rows]})
    return comparisons, replays


def ordered(values):
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def empty(ax, what):
    ax.text(0.5, 0.5, f"no {what} in this experiment", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def throughput(comparisons, out):
    models = ordered(c["model"] for c in comparisons)
    everyone = ordered(c["planner"] for c in comparisons)  # one colour per planner in every panel
    fig, axes = plt.subplots(max(1, len(models)), 1, figsize=(11, 4.2 * max(1, len(models))), squeeze=False)
    if not models:
        empty(axes[0][0], "comparisons")
    colors = plt.get_cmap("tab10").colors
    for ax, model in zip((a[0] for a in axes), models):
        mine = [c for c in comparisons if c["model"] == model]
        keys = ordered((c["cluster"], c["global_batch"], c["seed"]) for c in mine)
        planners = ordered(c["planner"] for c in mine)
        width = 0.8 / max(1, len(planners))
        labelled = set()
        for k, key in enumerate(keys):
            cells = [c for c in mine if (c["cluster"], c["global_batch"], c["seed"]) == key]
            feasible = [c for c in cells if c["has_plan"] and not c["oom"] and not math.isnan(c["tokens_per_s"])]
            best = max((c["tokens_per_s"] for c in feasible if c["planner"] in BASELINES), default=0.0)
            for j, p in enumerate(planners):
                cell = next((c for c in feasible if c["planner"] == p), None)
                if cell is None or best <= 0:
                    continue
                ax.bar(k + (j - (len(planners) - 1) / 2) * width, cell["tokens_per_s"] / best, width,
                       color=colors[everyone.index(p) % len(colors)], label=None if p in labelled else p,
                       hatch=None if cell["search_complete"] else "//", edgecolor="white")
                labelled.add(p)
        labels = []
        for key in keys:
            gpus = next(c["gpus"] for c in mine if (c["cluster"], c["global_batch"], c["seed"]) == key)
            # A cluster spec of several GPU types, one type per line, so that neighbouring labels do not overlap.
            labels.append(key[0].replace(",", ",\n") + f"\n{gpus} GPUs")
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels(labels, fontsize=6)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_ylabel("tokens/s / best baseline")
        ax.set_title(f"{model} (hatched: a budget or wall cap cut the search)")
        ax.grid(axis="y", alpha=0.3)
        if labelled:
            handles, names = ax.get_legend_handles_labels()
            order = sorted(range(len(names)), key=lambda i: everyone.index(names[i]))
            ax.legend([handles[i] for i in order], [names[i] for i in order], fontsize=7, loc="upper left",
                      bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return save_png_or_report(fig, out)


def planning_time(comparisons, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    planners = ordered(c["planner"] for c in comparisons)
    if not planners:
        empty(ax, "comparisons")
    markers = "osD^v<>ph*"
    for j, p in enumerate(planners):
        pts = [(c["gpus"], c["planning_time_s"]) for c in comparisons if c["planner"] == p and c["planning_time_s"] > 0]
        if pts:
            ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=markers[j % len(markers)], label=p, alpha=0.8)
    if planners:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cluster size (GPUs)")
        ax.set_ylabel("planning wall time (s)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        ax.set_title("Planning time against cluster size")
    fig.tight_layout()
    return save_png_or_report(fig, out)


def replay_tokens(replays, out):
    blocks = ordered(r["block"] for r in replays)
    fig, axes = plt.subplots(max(1, len(blocks)), 1, figsize=(8, 3.6 * max(1, len(blocks))), squeeze=False)
    if not blocks:
        empty(axes[0][0], "replays")
    for ax, b in zip((a[0] for a in axes), blocks):
        mine = [r for r in replays if r["block"] == b]
        for r in mine:
            if not r["intervals"]:
                continue
            xs, ys, total = [r["intervals"][0][0] / 3600], [0.0], 0.0
            for start, end, tokens in r["intervals"]:
                total += tokens
                xs.append(end / 3600)
                ys.append(total)
            ax.plot(xs, ys, marker="o", markersize=2, linewidth=1.5, label=r["planner"])
        ax.set_title(f"replay {b}: {os.path.basename(mine[0]['trace'])}, {mine[0]['model']}")
        ax.set_xlabel("time (hours)")
        ax.set_ylabel("cumulative tokens trained")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return save_png_or_report(fig, out)


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    out_dir, path = argv[1], argv[2]
    try:
        comparisons, replays = read(path)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    rc = throughput(comparisons, os.path.join(out_dir, "throughput.png"))
    rc = rc or planning_time(comparisons, os.path.join(out_dir, "planning_time.png"))
    return rc or replay_tokens(replays, os.path.join(out_dir, "replay_tokens.png"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
