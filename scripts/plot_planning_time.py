#!/usr/bin/python3
"""Planning wall time per planner at ~64, ~256 and ~1,024 GPUs, from `arachne evaluate` runs.

Usage: /usr/bin/python3 scripts/plot_planning_time.py DIR [CAP_S]

Reads DIR/gpus-*/evaluation.h5 (written by scripts/arachne_planning_time.sh; the `/cells` table: one row
per configuration and planner with planning_s, search_complete, has_plan, tokens_per_s) and writes
  DIR/planning_time.csv  one row per configuration and planner (size, config, GPUs, GPU types, model, MoE,
                         planner, planning_s, cut = a cap or budget stopped the search, has_plan,
                         tokens_per_s, ratio = tokens/s over the best baseline's on that configuration)
  DIR/summary.md         median / max planning time per planner and size, searches cut, plans found
  DIR/planning_time.png  every configuration's planning time per planner and size (log scale; faint where
                         the planner returned no plan), the cap drawn as a dashed line
CAP_S (the --budget-wall of the runs) is only written into the summary and the figure.
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Files are written atomically.
"""
import glob
import math
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import csv_text, save_png_or_report, text, write_atomically

PLANNERS = ["arachne", "megatron", "amp", "metis", "flashflex", "sailor"]
BASELINES = PLANNERS[1:]


def read_rows(directory):
    """Returns the rows of every DIR/gpus-N/evaluation.h5, with the requested size N and the ratio."""
    rows = []
    for path in sorted(glob.glob(os.path.join(directory, "gpus-*", "evaluation.h5"))):
        size = int(re.search(r"gpus-(\d+)", path).group(1))
        with h5py.File(path, "r") as f:
            cells = f["cells"][()]
        best = {}
        for c in cells:
            if text(c["planner"]) in BASELINES and c["has_plan"] and not c["oom"]:
                k = int(c["config"])
                best[k] = max(best.get(k, 0.0), float(c["tokens_per_s"]))
        for c in cells:
            name = text(c["planner"])
            if name not in PLANNERS or text(c["template_source"]) not in ("-", "policy+heuristic"):
                continue
            k = int(c["config"])
            ok = bool(c["has_plan"]) and not bool(c["oom"])
            tps = float(c["tokens_per_s"]) if ok else 0.0
            rows.append({
                "size": size, "config": k, "gpus": int(c["gpus"]), "gpu_types": text(c["family"]),
                "model": text(c["model"]), "moe": int(bool(c["moe"])), "planner": name,
                "planning_s": float(c["planning_s"]), "cut": int(not bool(c["search_complete"])),
                "has_plan": int(ok), "tokens_per_s": tps,
                "ratio": tps / best[k] if best.get(k, 0) > 0 else float("nan"),
            })
    if not rows:
        raise FileNotFoundError(f"{directory}: no gpus-*/evaluation.h5")
    return rows


def fmt_s(v):
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def summary_text(rows, cap):
    sizes = sorted({r["size"] for r in rows})
    lines = ["# Planning time: arachne and the five baselines at ~64, ~256 and ~1,024 GPUs", ""]
    lines.append("Wall seconds per plan, median / max over the configurations of each size (one planner at a "
                 f"time, `--threads 1`); every search capped at {cap} s (`--budget-wall`). \"cut\": searches "
                 "the cap (or the 2,000-simulation budget) stopped; \"plans\": configurations where the planner "
                 "returned a plan that fits in memory. Data: planning_time.csv; figure: planning_time.png.")
    lines.append("")
    head = "| planner | " + " | ".join(f"~{s} GPUs: median / max" for s in sizes) + " | cut | plans |"
    lines += [head, "|---|" + "---:|" * (len(sizes) + 2)]
    for p in PLANNERS:
        cells, cut, plans, n = [], 0, 0, 0
        for s in sizes:
            t = [r["planning_s"] for r in rows if r["planner"] == p and r["size"] == s]
            cells.append(f"{fmt_s(statistics.median(t))} / {fmt_s(max(t))}" if t else "-")
        for r in rows:
            if r["planner"] == p:
                n += 1
                cut += r["cut"]
                plans += r["has_plan"]
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {cut} / {n} | {plans} / {n} |")
    lines += ["", "## Per configuration (planning seconds; tokens/s over the best baseline in brackets)", ""]
    lines.append("| size | config | GPUs | GPU types | model | " + " | ".join(PLANNERS) + " |")
    lines.append("|---:|---:|---:|---|---|" + "---:|" * len(PLANNERS))
    keys = sorted({(r["size"], r["config"]) for r in rows})
    for s, k in keys:
        rs = {r["planner"]: r for r in rows if r["size"] == s and r["config"] == k}
        first = next(iter(rs.values()))
        cells = []
        for p in PLANNERS:
            r = rs.get(p)
            if r is None:
                cells.append("-")
                continue
            ratio = "no plan" if not r["has_plan"] else (f"{r['ratio']:.3f}" if not math.isnan(r["ratio"]) else "-")
            cells.append(f"{fmt_s(r['planning_s'])}{' (cut)' if r['cut'] else ''} [{ratio}]")
        model = first["model"] + (" (MoE)" if first["moe"] else "")
        lines.append(f"| {s} | {k} | {first['gpus']} | {first['gpu_types']} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows, cap, out):
    sizes = sorted({r["size"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(PLANNERS)
    for j, p in enumerate(PLANNERS):
        points = {True: ([], []), False: ([], [])}  # has a plan -> (xs, ys)
        for i, s in enumerate(sizes):
            for r in rows:
                if r["planner"] == p and r["size"] == s:
                    xs, ys = points[bool(r["has_plan"])]
                    xs.append(i + (j - (len(PLANNERS) - 1) / 2) * width)
                    ys.append(max(r["planning_s"], 1e-5))
        marker = "o" if p == "arachne" else "x"
        dots = ax.scatter(*points[True], s=18, label=p, marker=marker)
        ax.scatter(*points[False], s=18, marker=marker, color=dots.get_facecolor()[0], alpha=0.3)
    if cap:
        ax.axhline(float(cap), ls="--", color="grey", lw=1)
        ax.text(-0.45, float(cap) * 1.15, f"cap {cap} s", color="grey", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(sizes)), [f"~{s} GPUs" for s in sizes])
    ax.set_ylabel("planning wall time per plan (s)")
    ax.set_title("Planning time per configuration (held-out clusters; faint: no plan returned)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    return save_png_or_report(fig, out)


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    directory, cap = argv[1], (argv[2] if len(argv) == 3 else "")
    try:
        rows = read_rows(directory)
    except (OSError, KeyError) as e:
        print(f"error: {directory}: {e}", file=sys.stderr)
        return 1
    write_atomically(os.path.join(directory, "planning_time.csv"), csv_text(rows))
    write_atomically(os.path.join(directory, "summary.md"), summary_text(rows, cap))
    return plot(rows, cap, os.path.join(directory, "planning_time.png"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
