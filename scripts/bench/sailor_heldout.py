#!/usr/bin/env python3
"""The simulator on a model it was not calibrated on: GPT-Neo-2.7 runs on
GH200 nodes measured by SAILOR's authors, predicted with the constants
fitted to the eight OPT-350 runs of examples/sailor/opt-350 (`sailor-plan
calibrate --hold-out`). The runs are read from a SAILOR checkout and never
copied into this repository or fitted to.

  python3 scripts/bench/sailor_heldout.py SAILOR_CHECKOUT [BUILD_DIR]

SAILOR_CHECKOUT is a clone of github.com/eth-easl/sailor (commit cf2c8e3);
its sailor/Planner/simulations/validation/clariden/GPT-NEO/*/plan_config_*.json
hold each run's plan, measured seconds per iteration ("real") and peak
memory ("max_mem", bytes). Two repairs, both printed: a stage list with a
typo (layer 29 for 19) is made consecutive, and a plan of 26 layers (an
OPT-350 plan filed with them) is left out.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    sailor = Path(sys.argv[1])
    build = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    folder = sailor / "sailor/Planner/simulations/validation/clariden/GPT-NEO"
    files = sorted(folder.glob("N*/plan_config_*.json"))
    if not files:
        print(f"no plan_config files under {folder}", file=sys.stderr)
        return 2
    layers = len(json.loads((ROOT / "examples/sailor/gpt-neo-2.7/model.json").read_text())["layers"])
    runs = []
    for f in files:
        d = json.loads(f.read_text())
        name = f"{f.stem.replace('plan_config_', '')} mbs {d['mbs']} gbs {d['gbs']}"
        stages = d["pipeline_list"][0]["layers_per_stage"]
        if sum(len(s) for s in stages) != layers:
            print(f"left out {name}: {sum(len(s) for s in stages)} layers, not GPT-Neo-2.7's {layers}")
            continue
        for s in stages:
            if s != list(range(s[0], s[0] + len(s))):
                print(f"repaired {name}: stage {s} -> {s[0]}..{s[0] + len(s) - 1}")
                s[:] = list(range(s[0], s[0] + len(s)))
        plan = {k: d[k] for k in ("zone", "pipeline_list", "mbs", "gbs") if k in d}
        runs.append({"name": name, "plan": plan, "iteration_s": d["real"], "peak_memory_gib": d["max_mem"] / 2**30,
                     "source": f"SAILOR {f.relative_to(sailor)} (held out)"})
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        inputs = tmp / "gpt-neo-2.7"
        inputs.mkdir()
        for f in ("model.json", "profile.json", "job.json"):
            (inputs / f).write_text((ROOT / "examples/sailor/gpt-neo-2.7" / f).read_text())
        # The runs used up to 64 nodes of 4 GH200 in one zone.
        cluster = json.loads((ROOT / "examples/sailor/gpt-neo-2.7/cluster.json").read_text())
        cluster["zones"]["us-central1-a"]["quotas"]["GH-96"] = 1024
        (inputs / "cluster.json").write_text(json.dumps(cluster))
        (tmp / "runs.json").write_text(json.dumps({"format": "gpufleet-sailor-runs", "version": 1, "runs": runs}))
        opt = ROOT / "examples/sailor/opt-350"
        r = subprocess.run([str(build / "bin/sailor-plan"), "calibrate", "-i", str(opt), "--runs",
                            str(opt / "measured_runs.json"), "--hold-out", str(inputs), "--hold-out-runs",
                            str(tmp / "runs.json")], capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
