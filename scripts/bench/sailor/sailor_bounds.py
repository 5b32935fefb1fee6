#!/usr/bin/env python3
"""Objectives and bounds of `sailor-plan search` against its unbounded
throughput search on the same cluster: search time as a ratio, and the plan
each returns. With --compare OTHER_SAILOR_PLAN, the same searches by another
build (an earlier version) side by side.

  python3 scripts/bench/sailor/sailor_bounds.py [BUILD_DIR] [--compare BIN] [--repeat N]

Clusters are built from the shipped inputs by changing the quotas; the
bounds are set from the unbounded throughput plan (a budget of 80 % of its
cost, a speed floor of half its speed, an energy cap of 95 % of its energy)
and the issue's fixed figures on OPT-350's two-zone cluster.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def make_inputs(tmp, name, model, quotas):
    d = tmp / name
    d.mkdir()
    for f in ("model.json", "profile.json", "job.json"):
        (d / f).write_text((ROOT / "examples/sailor" / model / f).read_text())
    cluster = json.loads((ROOT / "examples/sailor/opt-350/cluster.json").read_text())
    for zone in cluster["zones"].values():
        zone["quotas"] = {}
    for (gpu, zone), n in quotas.items():
        cluster["zones"][zone]["quotas"][gpu] = n
    cluster["zones"] = {z: v for z, v in cluster["zones"].items() if v["quotas"]}
    (d / "cluster.json").write_text(json.dumps(cluster))
    # The same without power figures, for builds that predate them.
    old = tmp / (name + "-no-power")
    old.mkdir()
    for f in ("model.json", "profile.json", "job.json"):
        (old / f).write_text((d / f).read_text())
    for t in cluster["gpu_types"].values():
        t.pop("idle_watts", None)
        t.pop("busy_watts", None)
    (old / "cluster.json").write_text(json.dumps(cluster))
    return d


def search(binary, inputs, args, repeat):
    best = None
    for _ in range(repeat):
        r = subprocess.run(["taskset", "-c", "0", str(binary), "-q", "search", "-i", str(inputs), "--json", *args],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
        out = json.loads(r.stdout)
        if best is None or out["search_s"] < best["search_s"]:
            best = out
    p = best["plans"][0]
    pred = p["predictions"]
    return {"search_s": best["search_s"], "plans": best["searched"], "stages": len(p["stages"]), "gpus": pred["gpus"],
            "it_s": pred["iterations_per_s"], "usd": pred["usd_per_iteration"],
            "kj": (pred.get("energy_j_per_iteration") or 0) / 1e3}


def describe(r):
    if "error" in r:
        return r["error"][:60]
    return f"{r['stages']} st, {r['gpus']} GPUs, {r['it_s']:.3f} it/s, ${r['usd']:.3f}, {r['kj']:.1f} kJ"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=str(ROOT / "build"))
    ap.add_argument("--compare", help="another sailor-plan binary to run the same searches")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    binary = Path(a.build) / "bin/sailor-plan"
    c = "us-central1-a"
    clusters = [
        ("OPT-350, 2 zones x (128 A100-40 + 128 V100-16)", "opt-350",
         {("A100-40", c): 128, ("V100-16", c): 128, ("A100-40", "us-central1-b"): 128,
          ("V100-16", "us-central1-b"): 128}),
        ("OPT-350, 64 A100-40", "opt-350", {("A100-40", c): 64}),
        ("OPT-350, 80 A100-40 + 240 V100-16", "opt-350", {("A100-40", c): 80, ("V100-16", c): 240}),
        ("OPT-350, 128 A100-40 + 384 V100-16", "opt-350", {("A100-40", c): 128, ("V100-16", c): 384}),
        ("GPT-Neo-2.7, 128 A100-40 + 384 V100-16", "gpt-neo-2.7", {("A100-40", c): 128, ("V100-16", c): 384}),
    ]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print(f"{'cluster':44s} {'search':40s} {'s':>7s} {'x base':>6s} {'plans':>7s}  answer")
        for i, (label, model, quotas) in enumerate(clusters):
            inputs = make_inputs(tmp, f"c{i}", model, quotas)
            base = search(binary, inputs, [], a.repeat)
            runs = [("throughput (baseline)", [])]
            runs += [(f"--max-cost-per-iter {0.8 * base['usd']:.4g}", ["--max-cost-per-iter", f"{0.8 * base['usd']:.4g}"]),
                     (f"cost, --min-throughput {0.5 * base['it_s']:.4g}",
                      ["--objective", "cost", "--min-throughput", f"{0.5 * base['it_s']:.4g}"]),
                     ("cost", ["--objective", "cost"]),
                     ("energy", ["--objective", "energy"]),
                     (f"--max-energy-per-iter {0.95 * base['kj'] * 1e3:.4g}",
                      ["--max-energy-per-iter", f"{0.95 * base['kj'] * 1e3:.4g}"])]
            if i == 0:
                runs += [("--max-cost-per-iter 1.2", ["--max-cost-per-iter", "1.2"]),
                         ("--max-cost-per-iter 0.3", ["--max-cost-per-iter", "0.3"]),
                         ("cost, --min-throughput 0.2", ["--objective", "cost", "--min-throughput", "0.2"]),
                         ("--max-gpus 2", ["--max-gpus", "2"])]
            if i == 1:
                runs += [("cost, --min-throughput 0.2", ["--objective", "cost", "--min-throughput", "0.2"])]
            for name, args in runs:
                r = base if not args else search(binary, inputs, args, a.repeat)
                ratio = f"{r['search_s'] / base['search_s']:6.2f}" if "search_s" in r else "     -"
                line = (f"{label:44s} {name:40s} {r.get('search_s', float('nan')):7.3f} {ratio} "
                        f"{r.get('plans', 0):7d}  {describe(r)}")
                if a.compare:
                    o = search(Path(a.compare), Path(str(inputs) + "-no-power"), args, 1)
                    line += f"  | before: {describe(o)}"
                print(line, flush=True)
                label = ""


if __name__ == "__main__":
    sys.exit(main())
