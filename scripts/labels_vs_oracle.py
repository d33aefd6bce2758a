#!/usr/bin/python3
"""Compare gen-data's labels with the oracle, per configuration, on datasets made with --oracle-max-gpus.

Usage: /usr/bin/python3 scripts/labels_vs_oracle.py NAME=DATASET.h5 [NAME=DATASET.h5 ...]

Reads only the files (h5py, no project code; layout in planner/arachne/dataset.h): /configs (best_simulated_s:
the best label's simulated time; oracle_s: the oracle's, NaN where it was not run or its search did not
complete; search_complete: the label search's template enumeration covered its restricted space) and
/labels (the rank-0 template). Prints, per file, one row per configuration where the oracle completed:
ratio = best label's time / oracle's (1 = the labels match the oracle, > 1 = they lose), then a summary:
geometric mean and worst ratio, how many labels are within 1 % of the oracle. Needs Debian's python3-h5py.
"""
import math
import sys

import h5py

WITHIN = 1.01  # "matches the oracle": the best label's simulated time at most 1 % longer


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read(path):
    with h5py.File(path, "r") as f:
        configs = f["configs"][()]
        labels = f["labels"][()]
    best_template = {int(r["config"]): text(r["template"]) for r in labels if int(r["rank"]) == 0}
    rows = []
    for c in configs:
        cid = int(c["config"])
        rows.append({"config": cid, "family": text(c["family"]), "model": text(c["model"]),
                     "batch": int(c["global_batch"]), "gpus": int(c["gpus"]),
                     "enumerated": bool(c["search_complete"]), "label_s": float(c["best_simulated_s"]),
                     "oracle_s": float(c["oracle_s"]), "template": best_template.get(cid, "-")})
    return rows


def report(name, rows):
    done = [r for r in rows if not math.isnan(r["oracle_s"])]
    print(f"\n{name}: {len(rows)} configurations, oracle complete on {len(done)}")
    print("| config | GPU types | model | batch | GPUs | enumeration complete | best label (s) | oracle (s) | ratio | best label's template |")
    print("|---:|---|---|---:|---:|---|---:|---:|---:|---|")
    ratios = []
    for r in done:
        ratio = r["label_s"] / r["oracle_s"] if not math.isnan(r["label_s"]) else math.inf
        ratios.append(ratio)
        print(f"| {r['config']} | {r['family']} | {r['model']} | {r['batch']} | {r['gpus']} | "
              f"{'yes' if r['enumerated'] else 'no'} | {r['label_s']:.4f} | {r['oracle_s']:.4f} | {ratio:.4f} | "
              f"{r['template'].replace('|', chr(92) + '|')} |")
    if not ratios:
        return
    finite = [x for x in ratios if math.isfinite(x)]
    geo = math.exp(sum(math.log(x) for x in finite) / len(finite)) if finite else math.nan
    within = sum(1 for x in ratios if x <= WITHIN)
    print(f"{name}: ratio best label / oracle over {len(ratios)} configurations: geometric mean {geo:.4f}, "
          f"worst {max(ratios):.4f}, best {min(ratios):.4f}; within 1 %: {within}/{len(ratios)}; "
          f"labels faster than the oracle: {sum(1 for x in ratios if x < 1)}; no label: {len(ratios) - len(finite)}")


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        sys.stderr.write(__doc__)
        return 2
    for arg in argv[1:]:
        name, path = arg.split("=", 1)
        report(name, read(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
