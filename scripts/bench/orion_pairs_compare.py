"""Simulates the kernel pairs measured by orion_kernel_pairs.py and prints
measured against simulated (used by orion_pairs.sh).

  orion_pairs_compare.py ORION_RUN DIR [DEVICE]

DIR holds measured.jsonl and the captured profiles conv.csv and bn.csv. The
class of each captured kernel is set from what it is (the convolution's
kernels compute-bound, the batch norm's memory-bound): a capture without an
Nsight Compute export has none.
"""
import csv
import json
import pathlib
import subprocess
import sys

orion_run, folder = sys.argv[1], pathlib.Path(sys.argv[2])
device = sys.argv[3] if len(sys.argv) > 3 else "h200"
classes = {"conv": "1", "bn": "0"}

for kind, cls in classes.items():
    rows = list(csv.DictReader(open(folder / f"{kind}.csv")))
    if not rows:
        sys.exit(f"{kind}.csv: no kernels captured")
    for r in rows:
        r["Profile"] = cls
    with open(folder / f"{kind}-classed.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def simulate(a, b, chain):
    """Makespan in ms of `chain` runs of a and `chain` of b in two streams, no priority."""
    workload = {
        "format": "gpufleet-orion-workload", "version": 1, "device": device, "seed": 1, "launch_overhead_us": 0,
        "clients": [
            {"name": f"{k}-{i}", "profile": str(folder / f"{k}-classed.csv"), "priority": "best-effort",
             "kind": "inference", "arrivals": {"type": "closed"}, "requests": chain}
            for i, k in enumerate((a, b))
        ],
    }
    path = folder / f"pair-{a}-{b}.json"
    path.write_text(json.dumps(workload))
    out = subprocess.run([orion_run, "-q", "simulate", "-w", str(path), "-p", "mps", "--json"], check=True,
                         capture_output=True, text=True).stdout
    rows = json.loads(out)["rows"]
    # Closed loop without think time: a client's runs follow each other from
    # time 0, so it finishes after chain x its mean latency.
    alone = {r["client"]: r["mean_ms"] * chain for r in rows if r["policy"] == "dedicated"}
    together = max(r["mean_ms"] * chain for r in rows if r["policy"] == "mps")
    return sum(alone.values()), together


measured = [json.loads(line) for line in open(folder / "measured.jsonl")]
alone = {m["kernel"]: m["alone_ms"] for m in measured if "kernel" in m}
print(f"alone (measured): " + ", ".join(f"{k} {v:.3f} ms" for k, v in alone.items()))
print(f"{'pair':10s} {'measured seq':>12s} {'together':>9s} {'ratio':>6s} | {'simulated seq':>13s} {'together':>9s} "
      f"{'ratio':>6s} | ratio error")
for m in measured:
    if "pair" not in m:
        continue
    a, b = m["pair"].split("+")
    sim_seq, sim_both = simulate(a, b, m.get("chain", 1))
    ratio, sim_ratio = m["together_ms"] / m["sequential_ms"], sim_both / sim_seq
    print(f"{m['pair']:10s} {m['sequential_ms']:12.3f} {m['together_ms']:9.3f} {ratio:6.2f} | {sim_seq:13.3f} "
          f"{sim_both:9.3f} {sim_ratio:6.2f} | {100 * (sim_ratio / ratio - 1):+.1f} %")
