"""Shared by the scripts that rebuild a finished run's shards from its HDF5 file (evaluation_shards.py,
experiment_shards.py): bad input, HDF5 cells as the shards' JSON values, and shards written under temporary
names, each renamed when complete."""
import json
import math
import os
import sys

from plot_common import text


class BadInput(Exception):
    """Reported as one line 'error: <where>: <what>', exit status 2, nothing written."""


def value(name, v, nullable):
    """A field of an h5 row as the shard's JSON holds it (NaN as null where `name` is in `nullable`)."""
    if isinstance(v, (bytes, str)):
        return text(v)
    if isinstance(v, bool) or (hasattr(v, "dtype") and v.dtype.kind == "b"):
        return bool(v)
    if hasattr(v, "dtype") and v.dtype.kind in "iu":
        return int(v)
    x = float(v)
    if math.isnan(x):
        if name not in nullable:
            raise BadInput(f"{name}: NaN where the shard format needs a number")
        return None
    return x


def write_shards(shard_dir, shards):
    """Each shard of {index: dict} as <index>.json in shard_dir, which must hold no shards yet."""
    if os.path.isdir(shard_dir) and any(n.endswith(".json") for n in os.listdir(shard_dir)):
        raise BadInput(f"{shard_dir}: holds shards already")
    os.makedirs(shard_dir, exist_ok=True)
    for index, shard in shards.items():
        final = os.path.join(shard_dir, f"{index}.json")
        tmp = os.path.join(shard_dir, f".{index}.json.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(shard, f)
        os.replace(tmp, final)


def run(main):
    """main(sys.argv), with BadInput reported as one error line and exit status 2."""
    try:
        main(sys.argv)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
