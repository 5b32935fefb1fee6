"""Summarises scripts/bench/deltazip/dz_serve.sh results and draws the curves.

Usage: dz_serve_curves.py RESULTS_DIR   (reads serve.jsonl, sbmm.jsonl,
merged.jsonl, streamed.jsonl, decode.jsonl, memory.txt; writes curves.png there and prints Markdown tables)
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def lines(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def table(header, rows, blank_line_before=True):
    """Prints a Markdown table: the header cells, then each row's cells."""
    if blank_line_before:
        print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


results = Path(sys.argv[1])
serve = lines(results / "serve.jsonl")

table(["variants", "mode", "rate (req/s)", "completed", "failed", "req/s", "tokens/s", "TTFT p50", "latency p50",
       "latency p99"],
      [[f"{r['variants_count']}", r["mode"], f"{r['rate']:g}", f"{r['completed']}/{r['requests']}", f"{r['failed']}",
        f"{r['throughput_requests_per_s']:.3f}", f"{r['throughput_tokens_per_s']:.1f}", f"{r['ttft_s']['p50']:.2f} s",
        f"{r['latency_s']['p50']:.2f} s", f"{r['latency_s']['p99']:.2f} s"] for r in serve],
      blank_line_before=False)
by = {(r["variants_count"], r["mode"], r["rate"]): r for r in serve}
print()
for (n, mode, rate), r in sorted(by.items()):
    if mode != "delta" or (n, "swap", rate) not in by:
        continue
    s = by[(n, "swap", rate)]
    ratio = r["throughput_tokens_per_s"] / max(s["throughput_tokens_per_s"], 1e-9)
    print(f"{n} variants at {rate:g} req/s: delta/swap throughput {ratio:.2f}x, "
          f"p99 latency delta {r['latency_s']['p99']:.2f} s vs swap {s['latency_s']['p99']:.2f} s")

decode = lines(results / "decode.jsonl")
if decode:
    table(["batch", "variants", "delta step", "full step", "base step", "delta / full", "resident delta mode",
           "full mode"],
          [[f"{d['batch']}", f"{d['variants']}", f"{d['delta_step_ms']:.1f} ms", f"{d['full_step_ms']:.1f} ms",
            f"{d['base_step_ms']:.1f} ms", f"{d['delta_over_full']:.2f}",
            f"{d['resident_delta_mode_bytes'] / 2**20:.0f} MiB", f"{d['resident_full_mode_bytes'] / 2**20:.0f} MiB"]
           for d in decode])

sbmm = lines(results / "sbmm.jsonl")
if sbmm:
    table(["bits", "shape (out x in)", "batch rows", "variants", "SBMM", "one dense GEMM", "SBMM / GEMM",
           "one GEMM per variant", "SBMM / that"],
          [[f"{s['bits']}", f"{s['rows']}x{s['cols']}", f"{s['batch']}", f"{s['variants']}", f"{s['sbmm_us']:.0f} us",
            f"{s['dense_gemm_us']:.0f} us", f"{s['sbmm_over_dense']:.2f}", f"{s['per_variant_gemm_us']:.0f} us",
            f"{s['sbmm_over_per_variant']:.2f}"] for s in sbmm])

merged = lines(results / "merged.jsonl")
if merged:
    table(["shape (out x in)", "prompt rows", "x (W + delta) from the packed delta", "one dense GEMM", "ratio",
           "base product alone"],
          [[f"{m['rows']}x{m['cols']}", f"{m['batch']}", f"{m['merged_us']:.0f} us", f"{m['dense_gemm_us']:.0f} us",
            f"{m['merged_over_dense']:.2f}", f"{m['base_product_us']:.0f} us"] for m in merged])

streamed = lines(results / "streamed.jsonl")
if streamed:
    table(["what", "rows of x", "prefetching off", "on", "speedup"],
          [[t["what"], f"{t.get('rows', '')}", f"{t['no_prefetch_ms']:.1f} ms", f"{t['prefetch_ms']:.1f} ms",
            f"{t['speedup']:.2f}"] for t in streamed])

if (results / "memory.txt").exists():
    print("\nresident bytes at the end of each server run (variants, mode, metric):")
    print((results / "memory.txt").read_text())

if serve:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    curves = defaultdict(list)
    for r in serve:
        curves[(r["variants_count"], r["mode"])].append(r)
    for (n, mode), rows in sorted(curves.items()):
        rows.sort(key=lambda r: r["rate"])
        rates = [r["rate"] for r in rows]
        style = "-o" if n == 8 else "--s"
        label = f"{mode}, {n} variants"
        axes[0].plot(rates, [r["throughput_tokens_per_s"] for r in rows], style, label=label)
        axes[1].plot(rates, [r["latency_s"]["p50"] for r in rows], style, label=label)
        axes[2].plot(rates, [r["latency_s"]["p99"] for r in rows], style, label=label)
    for ax, title in zip(axes, ("throughput (generated tokens/s)", "latency p50 (s)", "latency p99 (s)")):
        ax.set_xlabel("offered load (requests/s, Poisson, Zipf 1.0 popularity)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("dz-serve: delta mode against swap and full, same arrivals")
    fig.tight_layout()
    fig.savefig(results / "curves.png", dpi=110)
    print(f"\nwrote {results / 'curves.png'}")
