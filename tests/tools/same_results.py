#!/usr/bin/python3
"""Exits 0 when two result files hold the same results, else prints every difference and exits 1.

  same_results.py A.h5 B.h5      every group, dataset and attribute equal (NaN equal to NaN), except the
                                 wall-time columns and attributes (WALL_TIME_NAMES); and the two files
                                 byte for byte the same but inside the values of those columns
  same_results.py A.md B.md      the same summary.md, except the planning-time columns of the comparison
                                 tables (wall times); the replay tables' planning is charged and compared
  same_results.py A.json B.json  byte for byte the same but inside the values of wall-time keys
  same_results.py A B            any other file: byte for byte the same
  same_results.py A B A2 B2 ...  several pairs in one run
The wall times are the fields DESIGN.md exempts from "same inputs + seed => identical results".
"""
import re
import sys

import h5py
import numpy as np

# Fields that measure the machine's wall time: planning (plan, replay, experiment; evaluate's planning_s), the
# simulator's own run time (simulate) and the training epochs' time (train).
WALL_TIME_NAMES = {"planning_time_s", "planning_s", "sim_wall_s", "wall_s"}


def same_values(a, b):
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a.shape == b.shape and np.array_equal(a, b)


def h5_differences(path_a, path_b):
    out = []
    with h5py.File(path_a, "r") as fa, h5py.File(path_b, "r") as fb:
        def compare_attrs(name, a, b):
            if set(a.attrs) != set(b.attrs):
                out.append(f"{name}: attributes {sorted(a.attrs)} vs {sorted(b.attrs)}")
                return
            for k in a.attrs:
                if k in WALL_TIME_NAMES:
                    continue
                if not same_values(np.asarray(a.attrs[k]), np.asarray(b.attrs[k])):
                    out.append(f"{name}: attribute {k}: {a.attrs[k]!r} vs {b.attrs[k]!r}")

        def walk(name, a, b):
            compare_attrs(name, a, b)
            if isinstance(a, h5py.Group):
                if not isinstance(b, h5py.Group) or set(a) != set(b):
                    out.append(f"{name}: members {sorted(a)} vs {sorted(b) if isinstance(b, h5py.Group) else b}")
                    return
                for k in a:
                    walk(f"{name.rstrip('/')}/{k}", a[k], b[k])
                return
            x, y = a[()], b[()]
            if x.dtype.names is None:
                if not same_values(np.asarray(x), np.asarray(y)):
                    out.append(f"{name}: values differ")
                return
            if x.dtype.names != y.dtype.names or x.shape != y.shape:
                out.append(f"{name}: columns {x.dtype.names} {x.shape} vs {y.dtype.names} {y.shape}")
                return
            for col in x.dtype.names:
                if col not in WALL_TIME_NAMES and not same_values(x[col], y[col]):
                    out.append(f"{name}: column {col} differs")

        walk("/", fa, fb)
    return out


def stored_offsets(ctype):
    """The offsets of the wall-time members in a stored row of a compound type, and the row's size. In
    the file a member follows the previous one without padding, and a variable-length string is stored
    as a 16-byte global heap reference (HDF5 File Format Specification, "Variable-length" datatype
    class: 4-byte length, 8-byte collection address, 4-byte object index) where memory holds a pointer."""
    offsets, at = [], 0
    for i in range(ctype.get_nmembers()):
        member = ctype.get_member_type(i)
        if ctype.get_member_name(i).decode() in WALL_TIME_NAMES:
            offsets.append(at)
        variable = isinstance(member, h5py.h5t.TypeStringID) and member.is_variable_str()
        at += 16 if variable else member.get_size()
    return offsets, at


def wall_time_bytes(path):
    """The byte ranges of the files' wall-time values (uncompressed chunked or contiguous tables)."""
    ranges = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset) or obj.dtype.names is None:
                return
            cols, size = stored_offsets(obj.id.get_type())
            if not cols:
                return
            if obj.chunks is None:
                starts = [(0, obj.id.get_offset())]
            else:
                infos = [obj.id.get_chunk_info(i) for i in range(obj.id.get_num_chunks())]
                starts = [(info.chunk_offset[0], info.byte_offset) for info in infos]
            for first_row, offset in starts:
                rows = obj.shape[0] - first_row if obj.chunks is None else min(obj.chunks[0], obj.shape[0] - first_row)
                for r in range(rows):
                    ranges.extend((offset + r * size + c, offset + r * size + c + 8) for c in cols)
        f.visititems(visit)
    return ranges


def byte_differences(path_a, path_b):
    a = np.fromfile(path_a, dtype=np.uint8)
    b = np.fromfile(path_b, dtype=np.uint8)
    if a.size != b.size:
        return [f"{a.size} vs {b.size} bytes"]
    allowed = np.zeros(a.size, dtype=bool)
    for lo, hi in wall_time_bytes(path_a):
        allowed[lo:hi] = True
    stray = np.flatnonzero((a != b) & ~allowed)
    return [f"{stray.size} bytes differ outside the wall times, first at {stray[0]}"] if stray.size else []


def summary_without_wall_times(path):
    """The lines of a summary.md, the cells of the planning-time columns blanked: "planning s" and
    "planning s: median / max" (experiment), except in the replay tables (with a "replans" column), whose
    planning is charged; and the per-cluster-size columns ("<= 64 GPUs") of a table under a heading that
    says "wall seconds" (evaluate)."""
    lines, drop, wall_section = [], [], False
    for line in open(path, encoding="utf-8").read().splitlines():
        cells = line.split("|")
        heads = [c.strip() for c in cells]
        if line.startswith("#"):
            wall_section = "wall seconds" in line
        if not line.startswith("|"):
            drop = []
        elif not drop and any(h.startswith("planning s") for h in heads) and "replans" not in heads:
            drop = [i for i, h in enumerate(heads) if h.startswith("planning s")]
        elif not drop and wall_section:
            drop = [i for i, h in enumerate(heads) if h.endswith("GPUs")]
        elif drop:
            for i in drop:
                if i < len(cells) and not set(cells[i].strip()) <= set("-:"):
                    cells[i] = " wall "
        lines.append("|".join(cells))
    return lines


def json_without_wall_times(path):
    """The JSON text with the value of every wall-time key (a number or null) replaced by "wall"."""
    keys = "|".join(sorted(WALL_TIME_NAMES))
    text = open(path, "rb").read().decode("utf-8")
    return re.sub(r'("(?:%s)"\s*:\s*)(-?[0-9.eE+-]+|null)' % keys, r'\1"wall"', text)


def text_differences(la, lb):
    diffs = [f"line {i + 1}: {x!r} vs {y!r}" for i, (x, y) in enumerate(zip(la, lb)) if x != y]
    if len(la) != len(lb):
        diffs.append(f"{len(la)} vs {len(lb)} lines")
    return diffs


def differences(a, b):
    if a.endswith(".md"):
        return text_differences(summary_without_wall_times(a), summary_without_wall_times(b))
    if a.endswith(".json"):
        ja, jb = json_without_wall_times(a), json_without_wall_times(b)
        return [] if ja == jb else text_differences(ja.splitlines(), jb.splitlines()) or ["bytes differ"]
    if a.endswith(".h5"):
        try:
            return h5_differences(a, b) or byte_differences(a, b)
        except OSError as e:  # not an HDF5 file, or a truncated one
            return [f"unreadable: {e}"]
    return [] if open(a, "rb").read() == open(b, "rb").read() else ["bytes differ"]


def main():
    args = sys.argv[1:]
    if len(args) < 2 or len(args) % 2:
        sys.exit("usage: same_results.py A B [A2 B2 ...]")
    failed = False
    for a, b in zip(args[0::2], args[1::2]):
        for d in differences(a, b):
            print(f"{a} vs {b}: {d}", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
