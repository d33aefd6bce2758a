#!/usr/bin/python3
"""Plot `arachne simulate --out` results: one stacked bar per HDF5 file, splitting the iteration time by
cause (compute, TP/PP/DP/EP communication, pipeline bubble, waiting for peers, optimizer), annotated with tokens/s.

Usage: /usr/bin/python3 scripts/plot_simulate.py OUT.png A.h5 [B.h5 ...]

Reads only the files (h5py, no project code): /breakdown (cause, seconds) and /summary (tokens_per_s,
oom). An out-of-memory result (not simulated; NaN timing) is drawn as an empty bar labelled "OOM".
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3).
"""
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import save_png_atomically, text

CAUSES = ["compute", "tp_comm", "pp_comm", "dp_comm", "ep_comm", "bubble", "wait", "optimizer"]
LABELS = {
    "compute": "compute",
    "tp_comm": "TP comm",
    "pp_comm": "PP comm",
    "dp_comm": "DP comm",
    "ep_comm": "EP comm",
    "bubble": "pipeline bubble",
    "wait": "waiting for peers",
    "optimizer": "optimizer",
}


def read_result(path):
    with h5py.File(path, "r") as f:
        rows = f["breakdown"][()]
        seconds = {text(r["cause"]): float(r["seconds"]) for r in rows}
        summary = f["summary"][0]
        return {
            "label": os.path.splitext(os.path.basename(path))[0],
            "seconds": [seconds.get(c, 0.0) for c in CAUSES],
            "tokens_per_s": float(summary["tokens_per_s"]),
            "oom": bool(summary["oom"]),
        }


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    out, files = argv[1], argv[2:]
    try:
        results = [read_result(p) for p in files]
    except (OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(results) + 2.5), 4.5))
    x = list(range(len(results)))
    bottoms = [0.0] * len(results)
    colors = plt.get_cmap("tab10").colors
    for k, cause in enumerate(CAUSES):
        heights = [0.0 if math.isnan(r["seconds"][k]) else r["seconds"][k] for r in results]
        if not any(h > 0 for h in heights):
            continue
        ax.bar(x, heights, bottom=bottoms, color=colors[k % len(colors)], label=LABELS[cause], width=0.6)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    top = max(bottoms) if bottoms and max(bottoms) > 0 else 1.0
    for i, r in enumerate(results):
        note = "OOM" if math.isnan(r["tokens_per_s"]) else f"{r['tokens_per_s']:,.0f} tok/s"
        ax.text(i, bottoms[i] + 0.02 * top, note, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels([r["label"] for r in results], rotation=20, ha="right")
    ax.set_ylabel("iteration time on the critical path (s)")
    ax.set_ylim(0, top * 1.15)
    ax.set_title("Where the iteration time goes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save_png_atomically(fig, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
