#!/usr/bin/python3
"""Plot `arachne train` curves: training and validation loss, and validation quality, per epoch.

Usage: /usr/bin/python3 scripts/plot_training.py OUT.png TRAINING.h5

Reads only the file (h5py, no project code): the compound table `/epochs` (epoch, phase, train_loss,
val_loss, val_quality, train_reward, wall_s); epoch 0 is the untrained policy. Left: training and validation loss (nats per token; in the
policy-gradient phase the training loss is REINFORCE's, so only the validation loss continues the
imitation curve). Right: validation quality (geometric mean of the best label's estimated time over the
beam's best, 1 = as good as the labels) and, in the policy-gradient phase, the mean sample reward.
Needs Debian's python3-matplotlib and python3-h5py (use /usr/bin/python3). Written atomically.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import h5py  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from plot_common import save_png_or_report


def read_epochs(path):
    with h5py.File(path, "r") as f:
        t = f["epochs"][()]
    rows = []
    for r in t:
        phase = r["phase"].decode() if isinstance(r["phase"], bytes) else str(r["phase"])
        rows.append({k: float(r[k]) for k in ("epoch", "train_loss", "val_loss", "val_quality", "train_reward")} | {"phase": phase})
    return rows


def main(argv):
    if len(argv) != 3:
        print("usage: plot_training.py OUT.png TRAINING.h5", file=sys.stderr)
        return 2
    out, path = argv[1], argv[2]
    try:
        rows = read_epochs(path)
    except (OSError, KeyError) as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    fig, (loss, quality) = plt.subplots(1, 2, figsize=(11, 4))
    imit = [r for r in rows if r["phase"] in ("untrained", "imitation")]  # epoch 0: the untrained policy
    pg = [r for r in rows if r["phase"] == "policy-gradient"]
    loss.plot([r["epoch"] for r in imit], [r["train_loss"] for r in imit], marker="o", markersize=3, label="training (imitation)")
    loss.plot([r["epoch"] for r in rows], [r["val_loss"] for r in rows], marker="s", markersize=3, label="validation")
    loss.set_xlabel("epoch")
    loss.set_ylabel("cross-entropy (nats/token)")
    loss.grid(alpha=0.3)
    loss.legend(fontsize=8)
    quality.plot([r["epoch"] for r in rows], [r["val_quality"] for r in rows], marker="o", markersize=3,
                 label="validation quality (label time / beam time)")
    if pg:
        quality.plot([r["epoch"] for r in pg], [r["train_reward"] for r in pg], marker="^", markersize=3,
                     label="mean sample reward (policy gradient)")
    if imit and pg:
        for ax in (loss, quality):
            ax.axvline(imit[-1]["epoch"] + 0.5, color="gray", linestyle=":", linewidth=1)
    quality.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    quality.set_xlabel("epoch")
    quality.set_ylabel("ratio")
    quality.set_ylim(bottom=0)
    quality.grid(alpha=0.3)
    quality.legend(fontsize=8)
    fig.suptitle(f"Training: {path}")
    fig.tight_layout()
    return save_png_or_report(fig, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
