"""Shared by the plot scripts: write a matplotlib figure as PNG under a temporary name, renamed when
complete, so a failed or interrupted run never leaves a partial file."""
import os


def save_png_atomically(fig, out, dpi=120):
    """Writes `fig` to `out`; raises OSError on failure (no file is left behind)."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(out)), "." + os.path.basename(out) + ".tmp.png")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
