#!/usr/bin/env python3
"""Budget and cost answers of `sailor-plan search` beside SAILOR's own
planner on the same inputs: the fastest plan below a price per iteration
(SAILOR's objective "throughput" with a budget) and the cheapest plan above
a speed (SAILOR's "iters_dollar" with a minimum throughput). Both answers
are judged by our simulator (`sailor-plan simulate`), and SAILOR's own
figures for its plan are printed beside them.

  python3 scripts/bench/sailor/sailor_budgets.py SAILOR_CHECKOUT [BUILD_DIR]

SAILOR_CHECKOUT is a clone of github.com/eth-easl/sailor (commit cf2c8e3)
with its C++ planner built (`make` in
sailor/Planner/sailor_planner/cpp_src, which leaves libplanner*.so there).
Its planner reads the same data as ours (examples/sailor/sailor-data:
profiles, network fits, llm_info, training configs, prices). Bounds: the
issue-style fixed figures on OPT-350 with 64 A100-40, otherwise 80 % of our
unbounded plan's price and half its speed. Each SAILOR search runs in its
own process (its planner prints to stdout from C++ and can crash).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sailor_bounds import ROOT, make_inputs, search  # noqa: E402

DATA = ROOT / "examples/sailor/sailor-data"

# Runs SAILOR's planner once; prints one JSON line last.
SAILOR_RUNNER = r"""
import json, sys, tempfile
sys.path.insert(0, sys.argv[1])
import libplanner
data, model, objective, max_cost, min_tput, out = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
quotas = json.loads(sys.argv[8])
cfg = data + "/configs/" + ("training_config_opt_350.json" if model == "OPT-350" else "training_config_gpt_neo27.json")
qf = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
json.dump(quotas, qf)
qf.close()
gpus = sorted(quotas)
planner = libplanner.SailorPlanner(data + "/profiles/" + model + "/", data + "/providers/multizone_bandwidths_het.json",
                                   cfg, data + "/llm_info.json", data + "/providers/communication_cost.json",
                                   True, True, qf.name, objective)
per_zone = {}
for g, zones in quotas.items():
    for z, n in zones.items():
        per_zone.setdefault(z, {})[g] = n
configs = planner.get_sorted_plans(per_zone, max_cost, min_tput)
if not configs:
    print("\n" + json.dumps({"none": True}))
    sys.exit(0)
c = configs[0]
zones = c.get_zones()
stages = [[([(gpus[t[0]], t[1], zones[t[2]])], t[1]) for t in st] for st in c.get_config_per_stage()]
layers = [list(s) for s in c.get_stages()]
plan = {"pipeline_list": [{"num_stages": len(layers), "layers_per_stage": layers, "tmp_per_stage": stages,
                           "dp": [len(s) for s in stages]}], "mbs": c.get_mbs()}
json.dump(plan, open(out, "w"))
print("\n" + json.dumps({"iteration_s": c.get_Tpp(), "usd": c.get_cost()}))
"""


def sailor_plan(checkout, model, objective, max_cost, min_tput, quotas, out):
    cpp = checkout / "sailor/Planner/sailor_planner/cpp_src"
    q = {}
    for (gpu, zone), n in quotas.items():
        q.setdefault(gpu, {})[zone] = n
    r = subprocess.run([sys.executable, "-c", SAILOR_RUNNER, str(cpp), str(DATA), model, objective, str(max_cost),
                        str(min_tput), str(out), json.dumps(q)], capture_output=True, text=True, cwd=cpp)
    if r.returncode != 0:
        return {"error": f"SAILOR's planner exited {r.returncode}"}
    last = json.loads(r.stdout.strip().splitlines()[-1])
    return {"error": "no plan"} if last.get("none") else last


def simulate(binary, inputs, plan):
    r = subprocess.run([str(binary), "-q", "simulate", "-i", str(inputs), "-p", str(plan), "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:70]}
    p = json.loads(r.stdout)
    p = p.get("predictions", p)
    return {"gpus": p["gpus"], "stages": len(p["stages"]), "it_s": p["iterations_per_s"],
            "usd": p["usd_per_iteration"], "fits": p["fits"]}


def show(r):
    if "error" in r:
        return r["error"]
    fits = "" if r.get("fits", True) else " (does not fit)"
    return f"{r['stages']} st, {r['gpus']} GPUs, {r['it_s']:.3f} it/s, ${r['usd']:.3f}{fits}"


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    checkout = Path(sys.argv[1]).resolve()
    build = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    binary = build / "bin/sailor-plan"
    c = "us-central1-a"
    clusters = [
        ("OPT-350, 64 A100-40", "opt-350", "OPT-350", {("A100-40", c): 64}, (0.3, 0.2)),
        ("OPT-350, 32 A100-40 + 96 V100-16", "opt-350", "OPT-350", {("A100-40", c): 32, ("V100-16", c): 96}, None),
        ("OPT-350, 80 A100-40 + 240 V100-16", "opt-350", "OPT-350", {("A100-40", c): 80, ("V100-16", c): 240}, None),
        ("OPT-350, 128 A100-40 + 384 V100-16", "opt-350", "OPT-350", {("A100-40", c): 128, ("V100-16", c): 384}, None),
        ("GPT-Neo-2.7, 32 A100-40 + 96 V100-16", "gpt-neo-2.7", "GPT-Neo-2.7",
         {("A100-40", c): 32, ("V100-16", c): 96}, None),
        ("GPT-Neo-2.7, 128 A100-40 + 384 V100-16", "gpt-neo-2.7", "GPT-Neo-2.7",
         {("A100-40", c): 128, ("V100-16", c): 384}, None),
        ("OPT-350, 2 zones x (32 A100-40 + 32 V100-16)", "opt-350", "OPT-350",
         {("A100-40", c): 32, ("V100-16", c): 32, ("A100-40", "us-central1-b"): 32, ("V100-16", "us-central1-b"): 32},
         None),
    ]
    print("| cluster | bound | ours (our simulator) | SAILOR's plan (our simulator) | SAILOR's plan (its own figures) "
          "| ours at least as good |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for i, (label, folder, model, quotas, fixed) in enumerate(clusters):
            inputs = make_inputs(tmp, f"c{i}", folder, quotas)
            if fixed is None:
                base = search(binary, inputs, [], 1)
                fixed = (round(0.8 * base["usd"], 3), round(0.5 * base["it_s"], 3))
            budget, floor = fixed
            for name, ours_args, objective, max_cost, min_tput in (
                    (f"throughput, --max-cost-per-iter {budget}", ["--max-cost-per-iter", str(budget)],
                     "throughput", budget, 0.0),
                    (f"cost, --min-throughput {floor}", ["--objective", "cost", "--min-throughput", str(floor)],
                     "iters_dollar", 0.0, floor)):
                ours = search(binary, inputs, ours_args, 1)
                plan_file = tmp / f"sailor_{i}_{objective}.json"
                theirs_own = sailor_plan(checkout, model, objective, max_cost, min_tput, quotas, plan_file)
                theirs = simulate(binary, inputs, plan_file) if "error" not in theirs_own else theirs_own
                own = theirs_own.get("error") or (f"{1 / theirs_own['iteration_s']:.3f} it/s, "
                                                  f"${theirs_own['usd']:.3f}")
                verdict = ""
                if "error" not in ours:
                    meets = ("error" not in theirs and theirs["fits"] and
                             (theirs["usd"] <= budget if objective == "throughput" else theirs["it_s"] >= floor))
                    if not meets:
                        verdict = "yes (SAILOR's plan misses the bound or does not fit)"
                    elif objective == "throughput":
                        verdict = "yes" if ours["it_s"] >= theirs["it_s"] * (1 - 1e-9) else "**no**"
                    else:
                        verdict = "yes" if ours["usd"] <= theirs["usd"] * (1 + 1e-9) else "**no**"
                else:
                    verdict = "**no**" if "error" not in theirs else "neither finds one"
                print(f"| {label} | {name} | {show(ours)} | {show(theirs)} | {own} | {verdict} |", flush=True)
                label = ""


if __name__ == "__main__":
    sys.exit(main())
