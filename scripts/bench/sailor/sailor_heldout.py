#!/usr/bin/env python3
"""The simulator on runs it was not calibrated on, beside SAILOR's own
simulator: constants fitted to the eight OPT-350 runs of
examples/sailor/opt-350 (`sailor-plan calibrate --hold-out`), then used on

  * GPT-Neo-2.7's GH200 runs (a model never fitted to), and
  * OPT-350's other GH200 runs in SAILOR's repository (the same model,
    measured separately; some repeat a fitted plan, which shows how much two
    measurements of one plan differ).

  python3 scripts/bench/sailor/sailor_heldout.py SAILOR_CHECKOUT [BUILD_DIR]

SAILOR_CHECKOUT is a clone of github.com/eth-easl/sailor (commit cf2c8e3);
its sailor/Planner/simulations/validation/clariden/{GPT-NEO,OPT-350}/N*/
plan_config_*.json hold each run's plan, measured seconds per iteration
("real") and peak memory ("max_mem", bytes). The runs are read from the
checkout, never copied into this repository and never fitted to. Two
repairs, both printed: a stage list with a typo (layer 29 for 19) is made
consecutive, and a plan whose layer count is not its model's (an OPT-350
plan filed with GPT-Neo's) is left out.

When the checkout's simulator can be imported (a Python with torch and
pandas; the checkout in a folder named `sailor`), its prediction of each
run is printed beside ours, from the same profiles (examples/sailor/
sailor-data) with the run's own global batch.
"""
import contextlib
import glob
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "examples/sailor"
# Model folder here, SAILOR's model name, its validation folder, its training config.
MODELS = {
    "gpt-neo-2.7": ("GPT-Neo-2.7", "GPT-NEO", "training_config_gpt_neo27.json"),
    "opt-350": ("OPT-350", "OPT-350", "training_config_opt_350.json"),
}


def read_runs(sailor, model_dir, fitted_plans):
    """The validation runs of one model, as sailor-plan's runs format."""
    _, folder, _ = MODELS[model_dir]
    layers = len(json.loads((EX / model_dir / "model.json").read_text())["layers"])
    runs = []
    for f in sorted((sailor / "sailor/Planner/simulations/validation/clariden" / folder).glob("N*/plan_config_*.json")):
        d = json.loads(f.read_text())
        name = f"{f.stem.replace('plan_config_', '')} mbs {d['mbs']} gbs {d['gbs']}"
        stages = d["pipeline_list"][0]["layers_per_stage"]
        if sum(len(s) for s in stages) != layers:
            print(f"left out {folder}/{name}: {sum(len(s) for s in stages)} layers, not {layers}")
            continue
        for s in stages:
            if s != list(range(s[0], s[0] + len(s))):
                print(f"repaired {folder}/{name}: stage {s} -> {s[0]}..{s[0] + len(s) - 1}")
                s[:] = list(range(s[0], s[0] + len(s)))
        plan = {k: d[k] for k in ("zone", "pipeline_list", "mbs", "gbs") if k in d}
        if model_dir == "opt-350" and plan_key(plan) in fitted_plans:
            name += " (fitted plan, new run)"
        runs.append({"name": name, "plan": plan, "iteration_s": d["real"], "peak_memory_gib": d["max_mem"] / 2**30,
                     "source": f"SAILOR {f.relative_to(sailor)} (held out)"})
    return runs


def plan_key(plan):
    """Stages, replicas per stage, micro-batch and global batch, in SAILOR's plan layout or ours."""
    if "pipeline_list" in plan:
        p = plan["pipeline_list"][0]
        return (p["num_stages"], tuple(p["dp"]), plan["mbs"], plan["gbs"])
    return (len(plan["stages"]), tuple(len(s["replicas"]) for s in plan["stages"]), plan["mbs"], plan["global_batch"])


def sailor_simulator(sailor):
    """SAILOR's simulator as a function of (model dir, plan), or None."""
    sys.path.insert(0, str(sailor))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            from sailor.Planner.simulations.runtime_simulator import Simulator  # noqa: E402  (SAILOR's own code)
    except Exception as e:  # noqa: BLE001  (any import failure: report it, go on without)
        print(f"SAILOR's simulator not imported ({type(e).__name__}: {e}); its column is left out")
        return None
    data = EX / "sailor-data"
    llm_info = json.loads((data / "llm_info.json").read_text())

    def simulate(model_dir, plan):
        model, _, config = MODELS[model_dir]
        cfg = json.loads((data / "configs" / config).read_text())
        cfg["global_batch_size"] = plan["gbs"]
        profiles = {model: {Path(f).parent.name: json.loads(Path(f).read_text())
                            for f in glob.glob(str(data / "profiles" / model / "*/profile.json"))}}
        with contextlib.redirect_stdout(io.StringIO()):
            sim = Simulator(str(sailor.parent), cfg, llm_info, True, profiles, "us-central1-a")
            return sim.simulate_iteration_time(json.loads(json.dumps(plan)))[0]
    return simulate


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    sailor = Path(sys.argv[1]).resolve()
    build = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    opt = EX / "opt-350"
    fitted = json.loads((opt / "measured_runs.json").read_text())["runs"]
    fitted_plans = set()
    for r in fitted:
        fitted_plans.add(plan_key(r["plan"]))
    theirs = sailor_simulator(sailor)
    status = 0
    with tempfile.TemporaryDirectory() as t:
        for model_dir in MODELS:
            runs = read_runs(sailor, model_dir, fitted_plans)
            if not runs:
                print(f"no {model_dir} runs under {sailor}", file=sys.stderr)
                return 2
            inputs = Path(t) / model_dir
            inputs.mkdir()
            for f in ("model.json", "profile.json", "job.json"):
                (inputs / f).write_text((EX / model_dir / f).read_text())
            # The runs used up to 64 nodes of 4 GH200 in one zone.
            cluster = json.loads((EX / model_dir / "cluster.json").read_text())
            cluster["zones"]["us-central1-a"]["quotas"]["GH-96"] = 1024
            (inputs / "cluster.json").write_text(json.dumps(cluster))
            (inputs / "runs.json").write_text(json.dumps({"format": "gpufleet-sailor-runs", "version": 1, "runs": runs}))
            r = subprocess.run([str(build / "bin/sailor-plan"), "calibrate", "--json", "-i", str(opt), "--runs",
                                str(opt / "measured_runs.json"), "--hold-out", str(inputs), "--hold-out-runs",
                                str(inputs / "runs.json")], capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                return r.returncode
            out = json.loads(r.stdout)
            if model_dir == "gpt-neo-2.7":
                c = out["fitted"]
                print(f"fitted to the 8 shipped OPT-350 runs: {c['microbatch_overhead_s'] * 1e3:.2f} ms per micro-batch "
                      f"per stage, {c['activation_bytes_per_float']:.3f} B per activation float, runtime overhead "
                      f"{c['runtime_overhead_bytes'] / 1e9:.2f} GB")
            status |= report(model_dir, runs, out["hold_out"]["runs"], theirs)
    return status


def report(model_dir, runs, predicted, theirs):
    print(f"\n{MODELS[model_dir][0]}: {len(runs)} held-out runs")
    head = f"{'run':52} {'meas s':>7} {'ours s':>7} {'err':>7}"
    if theirs:
        head += f" {'SAILOR s':>8} {'err':>7}"
    print(head + f" {'meas GiB':>8} {'ours':>6} {'err':>6}")
    errs = {"time": [], "memory": [], "sailor": []}
    for run, p in zip(runs, predicted):
        te = p["predicted_s"] / p["measured_s"] - 1
        me = p["predicted_bytes"] / p["measured_bytes"] - 1
        errs["time"].append(abs(te))
        errs["memory"].append(abs(me))
        line = f"{run['name']:52} {p['measured_s']:7.3f} {p['predicted_s']:7.3f} {te:+7.1%}"
        if theirs:
            s = theirs(model_dir, run["plan"])
            errs["sailor"].append(abs(s / p["measured_s"] - 1))
            line += f" {s:8.3f} {s / p['measured_s'] - 1:+7.1%}"
        print(line + f" {p['measured_bytes'] / 2**30:8.2f} {p['predicted_bytes'] / 2**30:6.2f} {me:+6.1%}")

    def mean(v):
        return sum(v) / len(v) if v else float("nan")
    line = f"mean absolute error: ours time {mean(errs['time']):.1%}, memory {mean(errs['memory']):.1%}"
    if theirs:
        line += f"; SAILOR's simulator time {mean(errs['sailor']):.1%}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
