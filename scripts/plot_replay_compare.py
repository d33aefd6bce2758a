#!/usr/bin/python3
"""Tokens trained per planner in replays of the shared traces, from scripts/arachne_replay_compare.sh.

Usage: /usr/bin/python3 scripts/plot_replay_compare.py DIR [CAP_S]

Reads DIR/TRACE/PLANNER.h5 (`arachne replay --out` of one planner: its group, with the tables `intervals`
and `totals`) and writes
  DIR/replay.csv         one row per trace and planner: tokens trained, ratio to the best baseline's, replans
                         (every change of the trace), plans computed (distinct snapshots planned), plan
                         changes (reconfigurations), downtime by cause, work lost
  DIR/summary.md         the same as tables, per trace
  DIR/TRACE.png          cumulative tokens over the trace's time, one line per planner
CAP_S (the replays' --budget-wall) counts the replans whose planning reached the cap ("at cap": the cap cut
the search; 0 when not given).
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Files are written atomically.
"""
import glob
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import csv_text, save_png_or_report, write_atomically

# arachne-cold: arachne replayed with --no-warm-start (its file holds the group /arachne).
PLANNERS = ["arachne", "arachne-cold", "megatron", "amp", "metis", "flashflex", "sailor"]
BASELINES = PLANNERS[2:]


def finite(v):
    v = float(v)
    return 0.0 if math.isnan(v) or math.isinf(v) else v


def read_planner(path, planner, cap):
    """Totals and intervals (sorted by start) of one replay file."""
    with h5py.File(path, "r") as f:
        groups = [k for k in f if isinstance(f[k], h5py.Group)]
        g = f[planner if planner in f else groups[0]]
        tot = g["totals"][()][0]
        iv = sorted(g["intervals"][()], key=lambda r: float(r["start_s"]))
    plans = [r["plan"].decode() if isinstance(r["plan"], bytes) else str(r["plan"]) for r in iv]
    return {
        "tokens": finite(tot["tokens_trained"]),
        "replans": int(tot["replans"]),
        "planning_s": finite(tot["planning_s"]),
        "reconfig_s": finite(tot["reconfig_s"]),
        "checkpoint_s": finite(tot["checkpoint_s"]),
        "idle_s": finite(tot["idle_s"]),
        "work_lost_s": finite(tot["work_lost_s"]),
        "plan_changes": sum(1 for r in iv if finite(r["reconfig_s"]) > 0),
        "max_planning_s": max((finite(r["planning_s"]) for r in iv), default=0.0),
        # Distinct snapshots only: a cached snapshot charges the same planning time again.
        "at_cap": len({float(r["planning_s"]) for r in iv if cap > 0 and finite(r["planning_s"]) >= 0.99 * cap}),
        "distinct_plans": len({p for p in plans if p}),
        "curve": [(float(r["end_s"]), finite(r["tokens"])) for r in iv],
        "start": float(iv[0]["start_s"]) if iv else 0.0,
    }


def read_all(directory, cap):
    """{trace: {planner: data}} for every DIR/TRACE/PLANNER.h5 of a known planner."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*", "*.h5"))):
        trace = os.path.basename(os.path.dirname(path))
        planner = os.path.splitext(os.path.basename(path))[0]
        if planner in PLANNERS:
            out.setdefault(trace, {})[planner] = read_planner(path, planner, cap)
    if not out:
        raise FileNotFoundError(f"{directory}: no TRACE/PLANNER.h5")
    return out


def with_ratios(data):
    rows = []
    for trace, by in data.items():
        best = max((d["tokens"] for p, d in by.items() if p in BASELINES), default=0.0)
        best_name = next((p for p in BASELINES if p in by and by[p]["tokens"] == best and best > 0), "-")
        for p in PLANNERS:
            if p not in by:
                continue
            d = by[p]
            rows.append({"trace": trace, "planner": p, "tokens": d["tokens"],
                         "ratio_to_best_baseline": d["tokens"] / best if best > 0 else float("nan"),
                         "best_baseline": best_name, "replans": d["replans"], "plan_changes": d["plan_changes"],
                         "planning_s": d["planning_s"], "max_planning_s": d["max_planning_s"], "at_cap": d["at_cap"],
                         "reconfig_s": d["reconfig_s"], "checkpoint_s": d["checkpoint_s"], "idle_s": d["idle_s"],
                         "work_lost_s": d["work_lost_s"]})
    return rows


def summary_text(rows):
    lines = ["# Replay on the shared traces: tokens trained per planner", "",
             "Ratio = tokens trained over the best baseline's on the same trace. Replans: every change of the "
             "trace (a snapshot seen before reuses its plan, but its planning time is charged again); plan "
             "changes: reconfigurations (checkpoint load + restart); at cap: distinct snapshots whose search the "
             "wall cap cut. Downtime in seconds. Data: replay.csv; cumulative tokens: TRACE.png.", ""]
    for trace in dict.fromkeys(r["trace"] for r in rows):
        rs = [r for r in rows if r["trace"] == trace]
        lines += [f"## {trace} (best baseline: {rs[0]['best_baseline']})", "",
                  "| planner | tokens | / best baseline | replans | plan changes | planning s (max per replan) | at cap "
                  "| reconfig s | checkpoint s | idle s | work lost s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            ratio = r["ratio_to_best_baseline"]
            lines.append(f"| {r['planner']} | {r['tokens']:.4g} | {ratio:.3f} | {r['replans']} | {r['plan_changes']} "
                         f"| {r['planning_s']:.1f} ({r['max_planning_s']:.2f}) | {r['at_cap']} | {r['reconfig_s']:.0f} "
                         f"| {r['checkpoint_s']:.0f} | {r['idle_s']:.0f} | {r['work_lost_s']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def plot_trace(trace, by, out):
    fig, ax = plt.subplots(figsize=(8, 4))
    for p in PLANNERS:
        if p not in by:
            continue
        d = by[p]
        xs, ys, total = [d["start"] / 3600], [0.0], 0.0
        for end, tok in d["curve"]:
            total += tok
            xs.append(end / 3600)
            ys.append(total)
        ax.plot(xs, ys, label=p, lw=2.2 if p == "arachne" else 1.2)
    ax.set_xlabel("trace time (h)")
    ax.set_ylabel("cumulative tokens trained")
    ax.set_title(f"Replay of {trace}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png_or_report(fig, out)


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    directory = argv[1]
    cap = float(argv[2]) if len(argv) == 3 else 0.0
    try:
        data = read_all(directory, cap)
    except (OSError, KeyError) as e:
        print(f"error: {directory}: {e}", file=sys.stderr)
        return 1
    rows = with_ratios(data)
    write_atomically(os.path.join(directory, "replay.csv"), csv_text(rows))
    write_atomically(os.path.join(directory, "summary.md"), summary_text(rows))
    rc = 0
    for trace, by in data.items():
        rc |= plot_trace(trace, by, os.path.join(directory, trace + ".png"))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
