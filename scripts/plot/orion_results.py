#!/usr/bin/python3
"""Plot orion-run simulate results: HP latency CDFs per policy and throughput bars.

Usage:
  orion-run simulate -w W.json -p all --csv table.csv --latencies lat.csv
  scripts/plot/orion_results.py --table table.csv --latencies lat.csv -o orion.png
"""
import argparse
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", required=True, help="comparison CSV from orion-run simulate --csv")
    parser.add_argument("--latencies", required=True, help="latency CSV from orion-run simulate --latencies")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    args = parser.parse_args()

    try:
        table = read_csv(args.table)
        latencies = read_csv(args.latencies)
    except (OSError, csv.Error) as e:
        sys.exit(f"orion_results.py: error: {e}")
    needed = {"policy", "client", "role", "throughput_vs_dedicated"}
    if not table or not needed <= set(table[0]):
        sys.exit(f"orion_results.py: error: {args.table}: not a comparison table (columns {sorted(needed)})")
    hp_clients = {r["client"] for r in table if r["role"] == "high"}

    per_policy = defaultdict(list)
    for row in latencies:
        if row["client"] in hp_clients:
            per_policy[row["policy"]].append(float(row["latency_ms"]))

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy, values in per_policy.items():
        values.sort()
        n = len(values)
        cdf.plot(values, [(i + 1) / n for i in range(n)], label=policy, linewidth=1.6 if policy in ("orion", "dedicated") else 1)
    cdf.set_xscale("log")
    # Plain milliseconds on the log axis (matplotlib's default is "3x10^0").
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    cdf.xaxis.set_major_formatter(plain)
    cdf.xaxis.set_minor_formatter(plain)
    cdf.set_xlabel("high-priority request latency (ms, log scale)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("HP latency CDF")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend()

    policies = list(dict.fromkeys(r["policy"] for r in table))
    clients = list(dict.fromkeys(r["client"] for r in table))
    width = 0.8 / max(1, len(clients))
    for j, client in enumerate(clients):
        values = [next((float(r["throughput_vs_dedicated"] or 0) for r in table
                        if r["policy"] == p and r["client"] == client), 0.0) for p in policies]
        bars.bar([i + j * width for i in range(len(policies))], values, width, label=client)
    bars.set_xticks([i + width * (len(clients) - 1) / 2 for i in range(len(policies))])
    bars.set_xticklabels(policies, rotation=20)
    bars.set_ylabel("throughput / dedicated GPU")
    bars.set_title("Throughput relative to a dedicated GPU")
    bars.axhline(1.0, color="grey", linewidth=0.8)
    bars.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
