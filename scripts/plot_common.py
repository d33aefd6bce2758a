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


def save_png_atomically(fig, out, dpi=120):
    """Writes `fig` to `out`; raises OSError on failure (no file is left behind)."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(out)), "." + os.path.basename(out) + ".tmp.png")
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
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def csv_text(rows):
    """The list of dicts `rows` (same keys) as CSV text, floats with 6 significant digits."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0].keys()), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return out.getvalue()
