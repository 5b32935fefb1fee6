#!/usr/bin/python3
"""Plot each policy's HP tail against its BE throughput, one point per workload.

Usage:
  scripts/bench/orion/orion_tradeoff.py build/bin/orion-run --csv tradeoff.csv
  scripts/plot/orion_tradeoff.py tradeoff.csv -o tradeoff.png

x: BE throughput / dedicated; y: HP p99 / dedicated (log scale). The
dashed line is the HP bound (1.2x); Orion earns its keep where its points
sit below the line and to the right of temporal sharing's.
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = {"temporal": "s", "streams": "^", "mps": "v", "reef": "D", "orion": "o"}
NEEDED = {"workload", "policy", "hp_p99_vs_dedicated", "be_throughput_vs_dedicated"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table", help="CSV from scripts/bench/orion/orion_tradeoff.py --csv")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--bound", type=float, default=1.2, help="HP p99 bound drawn (default 1.2)")
    args = parser.parse_args()
    try:
        with open(args.table, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error) as e:
        sys.exit(f"orion_tradeoff.py: error: {e}")
    if not rows or not NEEDED <= set(rows[0]):
        sys.exit(f"orion_tradeoff.py: error: {args.table}: not a trade-off table (columns {sorted(NEEDED)})")

    fig, ax = plt.subplots(figsize=(7, 5))
    for policy, marker in MARKERS.items():
        points = [(float(r["be_throughput_vs_dedicated"]), float(r["hp_p99_vs_dedicated"])) for r in rows
                  if r["policy"] == policy and r["be_throughput_vs_dedicated"] and r["hp_p99_vs_dedicated"]]
        if points:
            ax.scatter(*zip(*points), marker=marker, label=policy, alpha=0.8)
    ax.axhline(args.bound, linestyle="--", color="grey", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("BE throughput / dedicated")
    ax.set_ylabel("HP p99 latency / dedicated")
    ax.set_title(f"HP tail vs BE throughput ({len({r['workload'] for r in rows})} workloads)")
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(args.output, dpi=120)
    except OSError as e:
        sys.exit(f"orion_tradeoff.py: error: {e}")


if __name__ == "__main__":
    main()
