#!/usr/bin/env python3
"""Peak memory per GPU: our model against SAILOR's two memory rules.

SAILOR (eth-easl/sailor) estimates a GPU's memory in two places, with the
same shape and different fixed overheads:
  bytes = params x 24 + act_mem_bytes x mbs x (stages - i) + fixed
where params and act_mem_bytes are its per-layer llm_info.json figures for the
stage's layers at the replica's TP degree, 24 bytes per parameter is
full-precision Adam with DeepSpeed's buffers (2 moments 8, weights 4,
gradients 4, communication 4, DeepSpeed's copies 4), (stages - i) the
micro-batches 1F1B keeps in flight on stage i, and fixed is 5.06 GB in its
simulator's footprint (fused kernels and the framework) and 3 GB (2 GB at
TP 1) in the check its planner uses to discard plans that do not fit.

For the eight measured OPT-350 runs the table gives each estimate's error;
for SAILOR's best plans (examples/sailor/sailor-data/best_plans) the peak
each estimate predicts against the GPU's memory. Ours comes from
`sailor-plan simulate --json`.

usage: sailor_memory_rules.py BIN_DIR [REPO_ROOT]
"""
import json
import os
import subprocess
import sys
import tempfile

GIB = 1024.0 ** 3
BYTES_PER_PARAM = 24
SIMULATOR_FIXED = 4.76e9 + 300e6
BEST_PLANS = ["opt_a32", "opt_a128", "opt_a32_v96", "opt_a80_v240", "opt_a128_v384",
              "neo_a32", "neo_a128", "neo_a32_v96", "neo_a80_v240", "neo_a128_v384"]


def planner_fixed(tp):
    return 2e9 if tp == 1 else 3e9


def stages_of(plan):
    """[(layers, [(gpu, tp) per replica])] and mbs, from either plan layout."""
    if "pipeline_list" in plan:
        pipe = plan["pipeline_list"][0]
        stages = [(layers, [(replica[0][0][0], replica[1]) for replica in replicas])
                  for layers, replicas in zip(pipe["layers_per_stage"], pipe["tmp_per_stage"])]
        return stages, plan["mbs"]
    stages = []
    for s in plan["stages"]:
        first, last = s["layers"]
        replicas = [(r["gpu"], r.get("tp", s.get("tp"))) for r in s["replicas"]]
        stages.append((list(range(first, last)), replicas))
    return stages, plan["mbs"]


def sailor_peaks(info, plan, memory):
    """For SAILOR's simulator rule and its planner rule: (peak bytes per GPU,
    largest share of a GPU's memory) over every replica."""
    stages, mbs = stages_of(plan)
    peaks = {"sim": (0.0, 0.0), "planner": (0.0, 0.0)}
    for i, (layers, replicas) in enumerate(stages):
        for gpu, tp in replicas:
            per_tp = info[str(tp)]
            params = sum(per_tp[str(l)]["params_floats"] for l in layers)
            act = sum(per_tp[str(l)]["act_mem_bytes"] for l in layers)
            variable = params * BYTES_PER_PARAM + act * mbs * (len(stages) - i)
            for rule, fixed in (("sim", SIMULATOR_FIXED), ("planner", planner_fixed(tp))):
                peak, share = peaks[rule]
                total = variable + fixed
                peaks[rule] = (max(peak, total), max(share, total / memory[gpu]))
    return peaks["sim"], peaks["planner"]


def ours(sailor_plan, inputs, plan):
    """Our peak bytes per GPU and largest share of a GPU's memory, on the
    inputs' cluster with every GPU type available in the plans' zone (the
    scenarios are sized by their GPU counts, not by the example's quotas)."""
    with open(os.path.join(inputs, "cluster.json")) as f:
        cluster = json.load(f)
    for zone in cluster["zones"].values():
        zone["quotas"] = {gpu: 4096 for gpu in cluster["gpu_types"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, value in (("plan.json", plan), ("cluster.json", cluster)):
            with open(os.path.join(tmp, name), "w") as f:
                json.dump(value, f)
        out = subprocess.run([sailor_plan, "simulate", "-i", inputs, "--cluster", os.path.join(tmp, "cluster.json"),
                              "-p", os.path.join(tmp, "plan.json"), "--json"],
                             check=True, capture_output=True, text=True).stdout
    est = json.loads(out)
    share = max(m["total_bytes"] / m["capacity_bytes"] for s in est["stages"] for m in s["memory"])
    return est["peak_memory_bytes"], share


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    sailor_plan = os.path.join(sys.argv[1], "sailor-plan")
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "..")
    examples = os.path.join(root, "examples", "sailor")
    data = os.path.join(examples, "sailor-data")
    with open(os.path.join(data, "llm_info.json")) as f:
        llm_info = json.load(f)
    inputs = {"OPT-350": os.path.join(examples, "opt-350"), "GPT-Neo-2.7": os.path.join(examples, "gpt-neo-2.7")}
    memory = {}
    for model, folder in inputs.items():
        with open(os.path.join(folder, "cluster.json")) as f:
            memory[model] = {gpu: spec["memory_bytes"] for gpu, spec in json.load(f)["gpu_types"].items()}

    with open(os.path.join(examples, "opt-350", "measured_runs.json")) as f:
        runs = json.load(f)["runs"]
    print("Measured OPT-350 runs (GH200, TP 4), peak GiB per GPU and error:\n")
    print("| run | measured | ours | SAILOR simulator rule | SAILOR planner rule |")
    print("|---|---|---|---|---|")
    errors = {"ours": [], "sim": [], "planner": []}
    for run in runs:
        measured = run["peak_memory_gib"] * GIB
        our, _ = ours(sailor_plan, inputs["OPT-350"], run["plan"])
        (sim, _), (planner, _) = sailor_peaks(llm_info["OPT-350"], run["plan"], memory["OPT-350"])
        cells = []
        for key, value in (("ours", our), ("sim", sim), ("planner", planner)):
            errors[key].append(value / measured - 1)
            cells.append(f"{value / GIB:.2f} ({100 * (value / measured - 1):+.1f} %)")
        print(f"| {run['name']} | {run['peak_memory_gib']:.2f} | " + " | ".join(cells) + " |")
    mae = {k: 100 * sum(abs(e) for e in v) / len(v) for k, v in errors.items()}
    print(f"| mean absolute error | | {mae['ours']:.1f} % | {mae['sim']:.1f} % | {mae['planner']:.1f} % |")

    sizes = ", ".join(f"{gpu} {b / GIB:.2f} GiB" for gpu, b in sorted(memory["GPT-Neo-2.7"].items()))
    print("\nSAILOR's best plans: peak GiB per GPU, and the largest share of a GPU's memory"
          f" any replica needs (over 100 %: does not fit; GPU memory as in the examples' cluster.json: {sizes};"
          " SAILOR's planner takes 40 GiB for an A100-40):\n")
    print("| plan | ours | SAILOR simulator rule | SAILOR planner rule |")
    print("|---|---|---|---|")
    for name in BEST_PLANS:
        with open(os.path.join(data, "best_plans", name + ".json")) as f:
            plan = json.load(f)
        model = "OPT-350" if name.startswith("opt") else "GPT-Neo-2.7"
        cells = [ours(sailor_plan, inputs[model], plan)]
        cells += sailor_peaks(llm_info[model], plan, memory[model])
        print(f"| {name} | " + " | ".join(f"{peak / GIB:.2f} ({100 * share:.0f} %)" for peak, share in cells) + " |")


if __name__ == "__main__":
    main()
