#!/usr/bin/python3
"""Shards of a finished `arachne evaluate` run, rebuilt from its evaluation.h5.

With them, the run's own command (the h5's `command_line` attribute) pointed at OUT_DIR writes the run's
tables and plots again and runs nothing: every configuration has its shard. With --cells-from, the cells of
another run of the same configurations (matched by configuration, planner and template source) take the
place of this run's; the usual use is arachne's cells from an arachne-only run of a new build merged into a
committed run's baseline cells:

  build/arachne evaluate --out /tmp/new <the committed command> --planners arachne
  /usr/bin/python3 scripts/evaluation_shards.py results/SET /tmp/merged --cells-from /tmp/new
  build/arachne evaluate --out /tmp/merged <the committed command>

Usage: /usr/bin/python3 scripts/evaluation_shards.py RUN_DIR OUT_DIR [--cells-from OTHER_DIR]
Reads RUN_DIR/evaluation.h5 (and OTHER_DIR/evaluation.h5); writes OUT_DIR/evaluation.h5.shards/<config>.json,
the shard format of planner/arachne/evaluate.cpp (config_result_to_json). OUT_DIR must hold no shards yet.
Exit status 0, or 2 with one line 'error: <where>: <what>' and nothing written. Needs Debian's python3-h5py.
"""
import os

import h5py

from shard_files import BadInput, run, value, write_shards

CONFIG_FIELDS = ("config", "family", "gpus", "model", "moe", "global_batch", "cluster_yaml")
# A cell's own fields, as config_result_to_json writes them (the configuration's fields are the shard's).
CELL_FIELDS = ("planner", "template_source", "has_plan", "oom", "tokens_per_s", "simulated_s", "predicted_s",
               "peak_memory_gib", "planning_s", "evaluations", "own_evaluations", "search_complete", "reason",
               "template", "plan", "plan_yaml")
NULLABLE = {"tokens_per_s", "simulated_s", "predicted_s", "peak_memory_gib"}  # NaN is written as null


def read_run(run_dir):
    """{config: shard dict} of RUN_DIR/evaluation.h5, configurations and cells in the file's order."""
    path = os.path.join(run_dir, "evaluation.h5")
    if not os.path.isfile(path):
        raise BadInput(f"{path}: no such file")
    try:
        with h5py.File(path, "r") as f:
            configs, cells = f["configs"][:], f["cells"][:]
    except (OSError, KeyError) as e:
        raise BadInput(f"{path}: not an evaluation file ({e})")
    shards = {}
    for row in configs:
        shard = {name: value(name, row[name], NULLABLE) for name in CONFIG_FIELDS}
        shard["cells"] = []
        if shard["config"] in shards:
            raise BadInput(f"{path}: configuration {shard['config']} twice")
        shards[shard["config"]] = shard
    for row in cells:
        config = int(row["config"])
        if config not in shards:
            raise BadInput(f"{path}: a cell of configuration {config}, which /configs does not hold")
        shards[config]["cells"].append({name: value(name, row[name], NULLABLE) for name in CELL_FIELDS})
    return path, shards


def cell_key(cell):
    return cell["planner"], cell["template_source"]


def take_cells(shards, path, other_path, other):
    """Puts every cell of `other` in place of the cell of `shards` with the same configuration and key."""
    for config, theirs in other.items():
        ours = shards.get(config)
        if ours is None:
            raise BadInput(f"{other_path}: configuration {config} is not in {path}")
        for name in CONFIG_FIELDS:
            if ours[name] != theirs[name]:
                raise BadInput(f"{other_path}: configuration {config}: {name} differs from {path}'s")
        index = {cell_key(c): i for i, c in enumerate(ours["cells"])}
        for cell in theirs["cells"]:
            if cell_key(cell) not in index:
                raise BadInput(f"{other_path}: configuration {config}: {cell['planner']} ({cell['template_source']}) "
                               f"has no cell in {path} to replace")
            ours["cells"][index[cell_key(cell)]] = cell


def main(argv):
    args = argv[1:]
    other_dir = None
    if "--cells-from" in args:
        i = args.index("--cells-from")
        if i + 1 >= len(args):
            raise BadInput("--cells-from: needs a directory")
        other_dir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        raise BadInput("usage: evaluation_shards.py RUN_DIR OUT_DIR [--cells-from OTHER_DIR]")
    run_dir, out_dir = args
    path, shards = read_run(run_dir)
    if other_dir is not None:
        other_path, other = read_run(other_dir)
        take_cells(shards, path, other_path, other)
    write_shards(os.path.join(out_dir, "evaluation.h5.shards"), shards)


if __name__ == "__main__":
    run(main)
