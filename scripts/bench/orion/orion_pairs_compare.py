"""Simulates the kernel pairs measured by orion_kernel_pairs.py and prints
measured against simulated (used by orion_pairs.sh).

  orion_pairs_compare.py ORION_RUN DIR [DEVICE]

DIR holds measured.jsonl and the captured profiles conv.csv and bn.csv. The
class of each captured kernel is set from what it is (the convolution's
kernels compute-bound, the batch norm's memory-bound): a capture without an
Nsight Compute export has none. The simulator runs with its built-in
contention constants; orion_contention_fit.py fits them to these pairs.
"""
import json
import pathlib
import sys
import tempfile

# The contention fit is a tool of its own in scripts/.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from orion_contention_fit import pairs_folder_points, simulate_pair  # noqa: E402

orion_run, folder = sys.argv[1], pathlib.Path(sys.argv[2])
device = sys.argv[3] if len(sys.argv) > 3 else "h200"

measured = [json.loads(line) for line in open(folder / "measured.jsonl") if line.strip()]
alone = {m["kernel"]: m["alone_ms"] for m in measured if "kernel" in m}
print(f"alone (measured): " + ", ".join(f"{k} {v:.3f} ms" for k, v in alone.items()))
print(f"{'pair':10s} {'measured seq':>12s} {'together':>9s} {'ratio':>6s} | {'simulated seq':>13s} {'together':>9s} "
      f"{'ratio':>6s} | ratio error")
with tempfile.TemporaryDirectory() as work:
    for p in pairs_folder_points(folder, device, pathlib.Path(work)):
        m = p.measured
        sim_seq, sim_both = simulate_pair(orion_run, p, None, pathlib.Path(work))
        sim_ratio = sim_both / sim_seq
        print(f"{m['pair']:10s} {m['sequential_ms']:12.3f} {m['together_ms']:9.3f} {p.measured_ratio:6.2f} | "
              f"{sim_seq:13.3f} {sim_both:9.3f} {sim_ratio:6.2f} | {100 * (sim_ratio / p.measured_ratio - 1):+.1f} %")
