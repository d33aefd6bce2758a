"""Shared by the plot scripts: write a matplotlib figure as PNG (or a text file) under a temporary name,
renamed when complete, so a failed or interrupted run never leaves a partial file; tables as CSV text."""
import csv
import io
import os
import sys


# The five baselines, in the order every table lists them.
BASELINES = ("megatron", "amp", "metis", "flashflex", "sailor")


def text(v):
    """An HDF5 string cell (bytes) or any other value as str."""
    return v.decode() if isinstance(v, bytes) else str(v)


def temporary_path(path, suffix=""):
    """The temporary name of `path` while it is written: ".<name>.tmp-<pid><suffix>" beside it, the naming of
    temporary_path_for (sim/io/atomic_file.h), whose stale-temporary cleanup removes what a killed run left."""
    return os.path.join(os.path.dirname(os.path.abspath(path)),
                        "." + os.path.basename(path) + ".tmp-" + str(os.getpid()) + suffix)


def save_png_atomically(fig, out, dpi=120):
    """Writes `fig` to `out`; raises OSError on failure (no file is left behind)."""
    tmp = temporary_path(out, ".png")  # matplotlib takes the format from the extension
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_png_or_report(fig, out, dpi=120):
    """save_png_atomically, reporting a failure as one `error: OUT: reason` line on stderr: the script's
    exit status, 0 or 1."""
    try:
        save_png_atomically(fig, out, dpi)
    except OSError as e:
        print(f"error: {out}: {e}", file=sys.stderr)
        return 1
    return 0


def write_atomically(path, content):
    """Writes the text `content` to `path` under a temporary name, renamed when complete."""
    tmp = temporary_path(path)
    try:
        with open(tmp, "w") as f:
            f.write(content)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def csv_text(rows):
    """The list of dicts `rows` (same keys) as CSV text, floats with 6 significant digits."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0].keys()), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return out.getvalue()
