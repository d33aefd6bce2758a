#!/usr/bin/python3
"""Markdown table of the `simulate --json` reports in a results folder (one *.json per plan)."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("*.json")):
    if f.name.endswith(".timeline.json"):
        continue
    r = json.loads(f.read_text())
    b = r.get("breakdown_s") or {}
    it = r.get("iteration_time_s")
    rows.append(
        f"| {f.stem} | {'OOM' if r['oom'] else f'{it:.3f}'} | "
        f"{(r.get('tokens_per_s') or 0):,.0f} | {100 * (r.get('mfu') or 0):.1f} | {r['peak_memory_gib']:.1f} | "
        + " | ".join(f"{(b.get(k) or 0):.3f}" for k in ("compute", "tp_comm", "pp_comm", "dp_comm", "ep_comm", "bubble", "wait", "optimizer"))
        + f" | {r['events']} | {1000 * r['sim_wall_s']:.1f} |"
    )
print("| plan | iteration s | tokens/s | MFU % | peak GiB | compute | tp | pp | dp | ep | bubble | wait | optimizer | events | sim ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
