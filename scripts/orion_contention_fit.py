"""Fits the simulator's contention constants to measured kernel pairs and
reports how well each point is predicted when it is left out of the fit.

  orion_contention_fit.py ORION_RUN [DIR[:DEVICE] ...] [--free NAME,...]
                          [--no-reference] [--write FILE]

Points: Orion's three V100 pairs (Conv2d and BatchNorm2d, built in; left
out with --no-reference) and the three pairs of each DIR that
scripts/bench/orion/orion_pairs.sh kept (KEEP=DIR, or orion-data/pairs of
scripts/gpu-check.sh): measured.jsonl and the captured conv.csv and bn.csv,
simulated on DEVICE (default h200). A point is the ratio of the pair's
time together (two streams) to its time one after the other; the fit
minimises the squared log error of the simulated ratios over all points.

--free names the constants fitted (default: memory_use.memory,
compute_use.memory, memory_use.compute, same_class_penalty; any key of
docs/formats.md's contention JSON as SECTION.CLASS, or same_class_penalty);
the others keep examples/orion/contention-v100.json's values. compute_use.compute
stays 1 by definition (a compute-bound kernel on every SM uses all the
compute). With more points than free constants, every point is also
predicted by a fit made without it (leave-one-out), the figure that says
whether the model predicts pairs it was not fitted to.

--write FILE writes the fitted constants as a contention model for
`orion-run simulate --contention FILE`.
"""
import argparse
import csv
import json
import math
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
DEFAULTS = json.loads((HERE.parent / "examples" / "orion" / "contention-v100.json").read_text())
CLASSES = ("unknown", "memory", "compute")
SECTIONS = ("compute_use", "memory_use", "unit_share")
DEFAULT_FREE = ("memory_use.memory", "compute_use.memory", "memory_use.compute", "same_class_penalty")

# Orion's measurements on a V100-16GB (EuroSys 2024): each pair together in
# two streams against one after the other; solo times from the sequential
# same-kernel pairs (Conv2d 2.59 / 2, BatchNorm2d 1.78 / 2).
V100_PAIRS = [("conv+bn", 1.52, 2.15), ("conv+conv", 2.63, 2.59), ("bn+bn", 1.65, 1.78)]
V100_SOLO_NS = {"conv": (1, 1_295_000), "bn": (0, 890_000)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("orion_run")
    p.add_argument("dirs", nargs="*", help="orion_pairs.sh KEEP folders, optionally :DEVICE")
    p.add_argument("--free", default=",".join(DEFAULT_FREE))
    p.add_argument("--no-reference", action="store_true", help="leave Orion's V100 pairs out")
    p.add_argument("--write", type=pathlib.Path)
    a = p.parse_args()
    a.free = [f for f in a.free.split(",") if f]
    for name in a.free:
        if name != "same_class_penalty":
            section, _, cls = name.partition(".")
            if section not in SECTIONS or cls not in CLASSES:
                p.error(f"--free: unknown constant '{name}' (SECTION.CLASS with SECTION one of {', '.join(SECTIONS)}"
                        f" and CLASS one of {', '.join(CLASSES)}, or same_class_penalty)")
        if name == "compute_use.compute":
            p.error("--free: compute_use.compute is 1 by definition")
    if not a.free:
        p.error("--free: name at least one constant")
    return a


class Point:
    def __init__(self, name, device, profiles, a, b, chain, measured_ratio):
        self.name, self.device, self.profiles = name, device, profiles
        self.a, self.b, self.chain, self.measured_ratio = a, b, chain, measured_ratio


def write_profile(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def load_points(args, work):
    points = []
    if not args.no_reference:
        profiles = {}
        for kind, (cls, ns) in V100_SOLO_NS.items():
            profiles[kind] = work / f"v100-{kind}.csv"
            # 80 SM units on 80 SMs, no launch data: Orion's kernels fill the V100.
            write_profile(profiles[kind], [{"Name": kind, "Profile": cls, "Memory_footprint": 0, "SM_usage": 80,
                                            "Duration": ns}])
        for pair, together, sequential in V100_PAIRS:
            a, b = pair.split("+")
            points.append(Point(f"v100 {pair}", "v100-16", profiles, a, b, 1, together / sequential))
    for spec in args.dirs:
        folder, _, device = spec.partition(":")
        points += pairs_folder_points(pathlib.Path(folder), device or "h200", work, f"{len(points)}-")
    return points


def pairs_folder_points(folder, device, work, tag=""):
    """The pairs of a folder orion_pairs.sh kept (measured.jsonl, conv.csv,
    bn.csv), their profiles classed and written to `work`."""
    profiles = {}
    for kind, cls in (("conv", "1"), ("bn", "0")):
        try:
            rows = list(csv.DictReader(open(folder / f"{kind}.csv")))
        except OSError as e:
            sys.exit(f"{folder}: {e.strerror}: {kind}.csv (a folder orion_pairs.sh kept)")
        if not rows:
            sys.exit(f"{folder / (kind + '.csv')}: no kernels captured")
        # A capture has no class: the convolution's kernels compute-bound, the batch norm's memory-bound.
        for r in rows:
            r["Profile"] = cls
        profiles[kind] = work / f"{folder.name}-{tag}{kind}.csv"
        write_profile(profiles[kind], rows)
    try:
        measured = [json.loads(line) for line in open(folder / "measured.jsonl") if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{folder / 'measured.jsonl'}: {e}")
    points = []
    for m in measured:
        if "pair" not in m:
            continue
        a, b = m["pair"].split("+")
        point = Point(f"{folder.name} {m['pair']}", device, profiles, a, b, m.get("chain", 1),
                      m["together_ms"] / m["sequential_ms"])
        point.measured = m
        points.append(point)
    return points


def model_json(values, source, device=None):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
    out["source"] = source
    if device:
        out["device"] = device
    for name, value in values.items():
        value = round(value, 4)
        if name == "same_class_penalty":
            out[name] = value
        else:
            section, _, cls = name.partition(".")
            out[section][cls] = value
    return out


def simulate(orion_run, point, model_path, work):
    """Simulated together / one-after-the-other ratio of a pair."""
    sequential, together = simulate_pair(orion_run, point, model_path, work)
    return together / sequential


def simulate_pair(orion_run, point, model_path, work):
    """Simulated time in ms of a pair one after the other and together (two
    streams, no priority); `model_path` None: the built-in constants."""
    workload = {
        "format": "gpufleet-orion-workload", "version": 1, "device": point.device, "seed": 1,
        "launch_overhead_us": 0,
        "clients": [{"name": f"{k}-{i}", "profile": str(point.profiles[k]), "priority": "best-effort",
                     "kind": "inference", "arrivals": {"type": "closed"}, "requests": point.chain}
                    for i, k in enumerate((point.a, point.b))],
    }
    path = work / "pair.json"
    path.write_text(json.dumps(workload))
    model = ["--contention", str(model_path)] if model_path else []
    latencies = work / "pair-latencies.csv"
    latencies.unlink(missing_ok=True)
    run = subprocess.run([orion_run, "-q", "simulate", "-w", str(path), "-p", "mps", "--latencies", str(latencies),
                          *model], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"the simulator failed on {point.name}: {run.stderr.strip()}")
    # Closed loop without think time: each client's runs follow each other
    # from time 0, so it finishes after the sum of all its latencies (every
    # request: the table's figures cover only the window both clients ran in).
    finish = {}
    with open(latencies, newline="") as f:
        for r in csv.DictReader(f):
            key = (r["policy"], r["client"])
            finish[key] = finish.get(key, 0.0) + float(r["latency_ms"])
    sequential = sum(ms for (policy, _), ms in finish.items() if policy == "dedicated")
    together = max(ms for (policy, _), ms in finish.items() if policy == "mps")
    return sequential, together


def errors(args, points, values, work):
    model = work / "model.json"
    model.write_text(json.dumps(model_json(values, "fit in progress")))
    return [math.log(simulate(args.orion_run, p, model, work) / p.measured_ratio) for p in points]


def fit(args, points, work):
    """Pattern search over the free constants in [0, 1] (penalty in [0, 0.5])."""
    start = model_json({}, "")
    values = {}
    for name in args.free:
        section, _, cls = name.partition(".")
        values[name] = start[name] if name == "same_class_penalty" else start[section][cls]

    def cost(v):
        return sum(e * e for e in errors(args, points, v, work))

    best = cost(values)
    step = 0.1
    while step > 5e-4:
        improved = False
        for name in args.free:
            high = 0.5 if name == "same_class_penalty" else 1.0
            low = 0.01 if name.startswith("unit_share") else 0.0
            for delta in (step, -step):
                trial = dict(values)
                trial[name] = min(high, max(low, values[name] + delta))
                if trial[name] == values[name]:
                    continue
                c = cost(trial)
                if c < best - 1e-12:
                    best, values, improved = c, trial, True
                    break
        if not improved:
            step /= 2
    return values


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        points = load_points(args, work)
        if not points:
            sys.exit("no points (give a pairs folder, or keep Orion's V100 pairs)")
        default_errors = errors(args, points, {}, work)
        fitted = fit(args, points, work)
        fitted_errors = errors(args, points, fitted, work)
        loo = [None] * len(points)
        if len(points) - 1 >= len(args.free):
            for i in range(len(points)):
                rest = points[:i] + points[i + 1:]
                values = fit(args, rest, work)
                loo[i] = errors(args, [points[i]], values, work)[0]
    pct = lambda e: f"{100 * (math.exp(e) - 1):+.1f} %" if e is not None else "-"
    print(f"{len(points)} points, {len(args.free)} constants fitted: "
          + ", ".join(f"{k} = {v:.3f}" for k, v in fitted.items()))
    print(f"{'pair':24s} {'measured':>8s} | {'error: defaults':>15s} {'fitted':>8s} {'left out':>9s}")
    for p, d, f, l in zip(points, default_errors, fitted_errors, loo):
        print(f"{p.name:24s} {p.measured_ratio:8.3f} | {pct(d):>15s} {pct(f):>8s} {pct(l):>9s}")
    mean = lambda es: sum(abs(math.exp(e) - 1) for e in es) / len(es) * 100
    line = f"mean absolute error: defaults {mean(default_errors):.1f} %, fitted {mean(fitted_errors):.1f} %"
    if loo[0] is not None:
        line += f", left out {mean(loo):.1f} %"
    else:
        line += (f"; leave-one-out needs at least {len(args.free) + 1} points for {len(args.free)} "
                 "constants (fewer --free, or more pairs folders)")
    print(line)
    if args.write:
        names = ", ".join(p.name for p in points)
        devices = " + ".join(sorted({p.device for p in points}))
        source = f"fitted by scripts/orion_contention_fit.py to: {names}"
        args.write.write_text(json.dumps(model_json(fitted, source, devices), indent=2) + "\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
