"""The simulator on the workload that orion_gpu.sh ran on the GPU: the same
captured profiles, the HP client in a closed loop with its think time as
host gap, the BE training in a closed loop; printed beside the measured
ratios to the dedicated runs (a check of the simulator on a run it was not
fitted to).

  orion_gpu_compare.py ORION_RUN DIR DEVICE REQUESTS THINK_MS

DIR holds hp.csv and be.csv (orion-profile capture) and measured.json:
{"alone": {"hp_p99_ms": ..., "be_it_s": ...}, "orion": {...}, "mps": {...}}.
Writes DIR/workload.json and DIR/simulated.json.
"""
import json
import pathlib
import subprocess
import sys

orion_run, folder, device = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
requests, think_ms = int(sys.argv[4]), float(sys.argv[5])
measured = json.loads((folder / "measured.json").read_text())

workload = {
    "format": "gpufleet-orion-workload", "version": 1, "device": device, "seed": 1,
    "clients": [
        {"name": "be", "profile": str(folder / "be.csv"), "priority": "best-effort", "kind": "training",
         "arrivals": {"type": "closed"}},
        {"name": "hp", "profile": str(folder / "hp.csv"), "priority": "high", "kind": "inference",
         "arrivals": {"type": "closed"}, "gap_ms": think_ms, "requests": requests, "warmup": 10},
    ],
}
(folder / "workload.json").write_text(json.dumps(workload, indent=1))
out = subprocess.run([orion_run, "-q", "simulate", "-w", str(folder / "workload.json"), "-p", "all", "--json"],
                     check=True, capture_output=True, text=True).stdout
(folder / "simulated.json").write_text(out)
rows = {(r["policy"], r["client"]): r for r in json.loads(out)["rows"]}

alone = measured["alone"]
print(f"{'policy':8s} {'HP p99 / alone':>15s} {'simulated':>10s} | {'BE / alone':>11s} {'simulated':>10s}")
for policy in ("orion", "mps"):
    if policy not in measured:
        continue
    m = measured[policy]
    hp, be = rows[(policy, "hp")], rows[(policy, "be")]
    sim_hp = hp["p99_vs_dedicated"]
    sim_be = be["throughput_vs_dedicated"]
    fmt = lambda v: f"{v:10.2f}" if isinstance(v, (int, float)) else f"{'-':>10s}"
    print(f"{policy:8s} {m['hp_p99_ms'] / alone['hp_p99_ms']:15.2f} {fmt(sim_hp)} | "
          f"{m['be_it_s'] / alone['be_it_s']:11.2f} {fmt(sim_be)}")
print(f"(simulated on {device} from the captured profiles: HP closed loop with {think_ms} ms between requests, "
      "BE closed loop; ratios to each client's dedicated run)")
