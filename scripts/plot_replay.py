#!/usr/bin/python3
"""Plot `arachne replay --out` results: throughput and cumulative tokens over time, one line per planner.

Usage: /usr/bin/python3 scripts/plot_replay.py OUT.png REPLAY.h5

Reads only the file (h5py, no project code): one group per planner, each with the compound table
`intervals` (start_s, end_s, gpus_available, gpus_used, plan, tokens_per_s, tokens, planning_s, reconfig_s,
checkpoint_s, idle_s, work_lost_s). Top panel: the training throughput of each interval's plan (tokens/s
while training; 0 where no plan runs), step plot, with the GPUs available on a twin axis. Bottom panel:
cumulative tokens trained at each interval's end (work lost to a failure is never counted).
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Written atomically.
"""
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import save_png_or_report


def finite(v):
    v = float(v)
    return 0.0 if math.isnan(v) or math.isinf(v) else v


def read_replay(path):
    """Returns [(planner, rows)] in file order, rows = list of dicts, sorted by start_s."""
    planners = []
    with h5py.File(path, "r") as f:
        for name in f:
            g = f[name]
            if not isinstance(g, h5py.Group) or "intervals" not in g:
                continue
            table = g["intervals"][()]
            rows = []
            for r in table:
                used = int(r["gpus_used"])
                rows.append({
                    "start": finite(r["start_s"]),
                    "end": finite(r["end_s"]),
                    "available": int(r["gpus_available"]),
                    "rate": finite(r["tokens_per_s"]) if used > 0 else 0.0,
                    "tokens": finite(r["tokens"]),
                })
            rows.sort(key=lambda r: r["start"])
            planners.append((name, rows))
    if not planners:
        raise KeyError(f"{path}: no planner group with an 'intervals' table")
    return planners


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    out, path = argv[1], argv[2]
    try:
        planners = read_replay(path)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    colors = plt.get_cmap("tab10").colors
    avail_drawn = False
    gpu_axis = top.twinx()
    for k, (name, rows) in enumerate(planners):
        color = colors[k % len(colors)]
        if not rows:
            continue
        xs, ys = [], []
        for r in rows:  # a step per interval; the value holds from start to end
            xs += [r["start"] / 3600.0, r["end"] / 3600.0]
            ys += [r["rate"], r["rate"]]
        top.plot(xs, ys, color=color, linewidth=1.5, label=name)
        if not avail_drawn:  # the trace is the same for every planner
            ax_x = [r["start"] / 3600.0 for r in rows] + [rows[-1]["end"] / 3600.0]
            ax_y = [r["available"] for r in rows] + [rows[-1]["available"]]
            gpu_axis.step(ax_x, ax_y, where="post", color="gray", linestyle="--", linewidth=1.0,
                          label="GPUs available")
            gpu_axis.set_ylim(0, max(1, max(ax_y)) * 1.15)
            avail_drawn = True
        cx, cy, total = [rows[0]["start"] / 3600.0], [0.0], 0.0
        for r in rows:
            total += r["tokens"]
            cx.append(r["end"] / 3600.0)
            cy.append(total)
        bottom.plot(cx, cy, color=color, marker="o", markersize=3, linewidth=1.5, label=name)

    top.set_ylabel("training throughput (tokens/s)")
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    gpu_axis.set_ylabel("GPUs available")
    handles, labels = top.get_legend_handles_labels()
    h2, l2 = gpu_axis.get_legend_handles_labels()
    top.legend(handles + h2, labels + l2, fontsize=8, loc="upper right")
    top.set_title(f"Replay: {os.path.basename(path)}")
    bottom.set_xlabel("time (hours)")
    bottom.set_ylabel("cumulative tokens trained")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return save_png_or_report(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
