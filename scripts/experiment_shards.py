#!/usr/bin/python3
"""Shards of a finished `arachne experiment` run of comparison cells, rebuilt from its experiment.h5.

With them, the same experiment file run with `--out OUT_DIR` writes the run's tables and plots again and runs
nothing: every cell has its shard. With --drop PLANNER (repeatable; a registry name, its rows of either cost
model), that planner's cells get no shard, so the run makes only them, with the build at hand; the usual use is
arachne's cells rerun beside a committed run's baselines:

  /usr/bin/python3 scripts/experiment_shards.py results/planners /tmp/merged --drop arachne
  build/arachne experiment configs/experiments/planners.yaml --out /tmp/merged

The shard directory's options file is not rebuilt: the run writes its own (the experiment file, its inputs and
the policy weights by content), so shards of a file since changed are not caught by the resume check - run the
file the shards came from.

Usage: /usr/bin/python3 scripts/experiment_shards.py RUN_DIR OUT_DIR [--drop PLANNER]...
Reads RUN_DIR/experiment.h5; writes OUT_DIR/experiment.h5.shards/<cell>.json, the shard format of
planner/experiment/run_experiment.cpp (cell_result_to_json). Replay cells are not handled: a file with replays
is refused. OUT_DIR must hold no shards yet.
Exit status 0, or 2 with one line 'error: <where>: <what>' and nothing written. Needs Debian's python3-h5py.
"""
import os

import h5py

from plot_common import text
from shard_files import BadInput, run, value, write_shards

SIMULATOR_SUFFIX = "[simulator]"  # the label of a baseline's row with the simulator as its cost model
# The comparison's fields, as comparison_to_json writes them ("label" is the h5's "planner" column).
COMPARISON_FIELDS = ("gpus", "gpu_types", "moe", "has_plan", "oom", "tokens_per_s", "iteration_time_s",
                     "predicted_iteration_time_s", "peak_memory_gib", "planning_time_s", "evaluations",
                     "own_evaluations", "search_complete", "reason", "plan", "plan_yaml")
NULLABLE = {"tokens_per_s", "iteration_time_s", "predicted_iteration_time_s", "peak_memory_gib"}  # NaN: null


def shard_of(row):
    """{"cell": ..., "comparison": ...} of one /comparisons row."""
    label = text(row["planner"])
    simulator = label.endswith(SIMULATOR_SUFFIX)
    cell = {"index": int(row["cell"]), "kind": "comparison", "block": int(row["block"]),
            "cluster": text(row["cluster"]), "model": text(row["model"]), "global_batch": int(row["global_batch"]),
            "seed": int(row["seed"]), "planner": label[:-len(SIMULATOR_SUFFIX)] if simulator else label}
    if simulator:
        cell["cost_model"] = "simulator"  # absent: own
    comparison = {name: value(name, row[name], NULLABLE) for name in COMPARISON_FIELDS}
    comparison["label"] = label
    return {"cell": cell, "comparison": comparison}


def read_run(run_dir):
    """{cell index: shard} of RUN_DIR/experiment.h5."""
    path = os.path.join(run_dir, "experiment.h5")
    if not os.path.isfile(path):
        raise BadInput(f"{path}: no such file")
    try:
        with h5py.File(path, "r") as f:
            rows, replays = f["comparisons"][:], f["replays"].shape[0]
    except (OSError, KeyError) as e:
        raise BadInput(f"{path}: not an experiment file ({e})")
    if replays:
        raise BadInput(f"{path}: /replays: {replays} replay cells, which this script does not rebuild")
    shards = {}
    for row in rows:
        shard = shard_of(row)
        index = shard["cell"]["index"]
        if index in shards:
            raise BadInput(f"{path}: cell {index} twice")
        shards[index] = shard
    return path, shards


def main(argv):
    args = argv[1:]
    dropped = set()
    while "--drop" in args:
        i = args.index("--drop")
        if i + 1 >= len(args):
            raise BadInput("--drop: needs a planner name")
        dropped.add(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        raise BadInput("usage: experiment_shards.py RUN_DIR OUT_DIR [--drop PLANNER]...")
    run_dir, out_dir = args
    path, shards = read_run(run_dir)
    planners = {s["cell"]["planner"] for s in shards.values()}
    for name in sorted(dropped - planners):
        raise BadInput(f"--drop: {name}: no cell of {path} has this planner")
    kept = {i: s for i, s in shards.items() if s["cell"]["planner"] not in dropped}
    write_shards(os.path.join(out_dir, "experiment.h5.shards"), kept)


if __name__ == "__main__":
    run(main)
