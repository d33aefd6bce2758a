#!/usr/bin/python3
"""Plot a native availability trace: GPUs available per GPU type over time (stacked step plot).

Usage: /usr/bin/python3 scripts/plot_trace.py OUT.png TRACE.csv [TITLE]

Reads only the native CSV (header `time_s,node,gpu_type,gpus`; `#` lines and blank lines ignored; see
traces/README.md): from `time_s` on, node `node` offers `gpus` GPUs. The trace ends at its last row's time.
`arachne trace plot` converts any trace format to native CSV and calls this script.
Needs Debian's python3-matplotlib (use /usr/bin/python3). The PNG is written atomically (temp + rename).
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import save_png_or_report


def read_trace(path):
    """Returns (times, {gpu_type: [available GPUs from times[i] on]})."""
    events = []  # (time_s, node, gpu_type, gpus) in file order
    with open(path, newline="") as f:
        rows = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.reader(rows)
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != ["time_s", "node", "gpu_type", "gpus"]:
        raise ValueError(f"{path}: header must be time_s,node,gpu_type,gpus")
    for cells in reader:
        if len(cells) != 4:
            raise ValueError(f"{path}: row {cells} has {len(cells)} cells, want 4")
        events.append((float(cells[0]), cells[1].strip(), cells[2].strip(), int(cells[3])))
    if not events:
        raise ValueError(f"{path}: no rows")
    types = sorted({e[2] for e in events})
    offered = {}  # node -> GPUs offered now
    current = {t: 0 for t in types}  # GPUs offered now, per type (kept incrementally)
    times, series = [], {t: [] for t in types}
    i = 0
    while i < len(events):
        t = events[i][0]
        while i < len(events) and events[i][0] == t:  # equal times applied in file order
            _, node, gtype, gpus = events[i]
            current[gtype] += gpus - offered.get(node, 0)
            offered[node] = gpus
            i += 1
        times.append(t)
        for gt in types:
            series[gt].append(current[gt])
    return times, series


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    out, path = argv[1], argv[2]
    title = argv[3] if len(argv) > 3 else f"GPUs available: {os.path.basename(path)}"
    try:
        times, series = read_trace(path)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    hours = [t / 3600.0 for t in times]
    # Repeat the last value at the end so the final step is visible (the trace ends at its last row).
    if len(hours) == 1:
        hours.append(hours[0] + 1.0 / 60)
        series = {k: v + v[-1:] for k, v in series.items()}
    fig, ax = plt.subplots(figsize=(8, 4.2))
    types = list(series)
    colors = plt.get_cmap("tab10").colors
    ax.stackplot(hours, [series[t] for t in types], labels=types, step="post",
                 colors=[colors[k % len(colors)] for k in range(len(types))], alpha=0.85)
    total = [sum(v) for v in zip(*series.values())]
    ax.step(hours, total, where="post", color="black", linewidth=0.7, label="total")
    ax.set_xlim(hours[0], hours[-1] if hours[-1] > hours[0] else hours[0] + 1.0 / 60)
    ax.set_ylim(0, max(1, max(total)) * 1.1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs available")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return save_png_or_report(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
