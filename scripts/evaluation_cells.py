"""Reading arachne evaluate's cells and summarising ratios (scripts/wall_budget_table.py,
scripts/ablation_table.py). Needs Debian's python3-h5py (use /usr/bin/python3)."""
import math

import h5py

from plot_common import BASELINES, text


def cells(path):
    """{config: {planner: cell}} of an evaluation.h5."""
    out = {}
    with h5py.File(path, "r") as f:
        for c in f["cells"][:]:
            out.setdefault(int(c["config"]), {})[text(c["planner"])] = c
    return out


def tokens(cell):
    """The cell's tokens/s, 0 where it found no plan."""
    t = float(cell["tokens_per_s"])
    return 0.0 if math.isnan(t) else t


def geomean(values):
    """Geometric mean of the positive values (NaN when there are none)."""
    values = [v for v in values if v > 0 and not math.isnan(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def summary_row(rows, moe):
    """Of the rows of one kind (moe 0 or 1): count, geometric mean and least of `ratio`, how many are below
    0.995, geometric mean of `over_committed`."""
    r = [x for x in rows if x["moe"] == moe]
    ratios = [x["ratio"] for x in r]
    return (len(r), geomean(ratios), min(ratios) if ratios else float("nan"), sum(x < 0.995 for x in ratios),
            geomean([x["over_committed"] for x in r]))


def best_baseline(planners):
    """The best tokens/s of the five baselines among a configuration's cells (0 when none has a plan)."""
    return max((tokens(planners[b]) for b in BASELINES if b in planners), default=0.0)


def ratio_row(cell, best, committed):
    """A cell's table row: its configuration, tokens/s, ratio to the best baseline's `best` and to arachne's
    committed `committed` tokens/s (NaN when that found no plan), planning time."""
    t = tokens(cell)
    return {"gpus": int(cell["gpus"]), "model": text(cell["model"]), "moe": int(bool(cell["moe"])),
            "tokens_per_s": t, "best_baseline_tokens_per_s": best, "ratio": t / best,
            "over_committed": t / committed if committed > 0 else float("nan"), "planning_s": float(cell["planning_s"])}
