"""sailor-run launch --elastic (recovery "inplace"): survivors keep their
process and state, the controller re-plans, and the state moves to the new
layout point to point; only a layer that no survivor holds comes from the
checkpoint.

Usage: check_sailor_run_inplace.py BIN_DIR

Real worker processes on loopback, one CPU thread each. The link is a fixed
50 GB/s in cluster.json, so the planner's choices depend on the measured
compute only. Every run's per-step losses must equal an uninterrupted run's
within 1e-5 relative:
- kill -9 one of 4 workers (DP=2 x PP=2) after step 3 of 10, with no
  checkpoint written during the run: the job finishes every step, the state
  comes from memory, at most the step in flight is redone;
- tensor parallelism: kill -9 one of 4 workers of DP=2 x TP=2: the new
  layout's tensors are put together from the survivors' slices;
- a spare: 3 workers for a 2-worker plan, one of the two killed: the
  spare takes its place and receives the state;
- kill -9 both replicas of the second stage: that stage has no holder, so
  every rank reloads the last checkpoint and the steps since it are redone;
- SIGTERM to one worker: it hands its state over at the step boundary and
  leaves; nothing is redone;
- a worker stopped (SIGSTOP) past --heartbeat-timeout is taken for lost;
- `sailor-run join` adds a worker to a 1-worker job: the next plan uses it,
  and `sailor-run status` (JSON and text) shows each generation;
- a flapping newcomer (joins, is killed before it trains, twice) does not
  wedge the job;
- the last worker lost: exit 3 naming the checkpoint, which resumes;
- workers left but no plan within --min-throughput: they write the state
  they hold as a checkpoint, exit 3, and the job resumes from that step;
- the controller killed (SIGKILL) or stopped (SIGTERM): the workers stop
  with it, the last checkpoint stays and resumes;
- `sailor-run controller` with workers started on their own (as srun
  starts them): two register and train, a third registers later and
  joins, one is killed and the others notice without a parent's help;
- bad join/status invocations: one clear error.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from elastic_jobs import COMMON, Checks, elastic, finishes_on_new_plan, plan_workers, prepare, records, reference, \
    run, same_losses, stop_between_requests, wait_until, worker_pids

BIN = Path(sys.argv[1])
RUN = str(BIN / "sailor-run")
check = Checks()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_event(name, metrics):
    """The reconfiguration the scenario caused (the first of the run)."""
    _, events = records(metrics)
    check(len(events) == 1, f"{name}: one reconfiguration record in the metrics "
                            f"({[e.get('cause') for e in events]})")
    return events[0] if events else {}


def plan_file(tmp, name, stages, dp, tp=1):
    """A plan of `stages` (layer ranges), each with `dp` replicas of TP degree `tp`."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 2, "global_batch": 8,
                                "stages": [{"layers": list(r), "tp": tp,
                                            "replicas": [{"gpu": "cpu", "zone": "local"}] * dp} for r in stages]}))
    return path


def scenario(tmp, ref, name, nprocs, plan, act, extra=("--checkpoint-every", "100"), allowed_redone=1, **kwargs):
    """Runs an elastic job through `act`, checks it finishes on its last plan
    with every step's loss equal to the reference; returns (stderr, metrics,
    the one reconfiguration it caused, the steps redone)."""
    code, out, err, folder, metrics = elastic(RUN, tmp, name.replace(" ", "_"), nprocs, plan, extra=list(extra),
                                              act=act, **kwargs)
    steps, events = records(metrics)
    if len(events) > 1:  # more reconfigurations than the scenario caused: show the workers' errors
        print("\n".join(line for line in err.splitlines() if "error" in line or "exited" in line)[-3000:])
    check(code == 0 and finishes_on_new_plan(out, events),
          f"{name}: the job finishes on the new plan's workers (rc {code}): {out.strip()[-200:]} {err[-600:]}")
    redone = same_losses(check, ref, steps, name, allowed_redone=allowed_redone)
    return err, metrics, first_event(name, metrics), redone


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # Every process of these jobs gets its own temporary folder, which must
        # be empty at the end: a worker that becomes a spare, leaves or fails
        # leaves nothing behind on the machine.
        worker_tmp = tmp / "worker-tmp"
        worker_tmp.mkdir()
        os.environ["TMPDIR"] = str(worker_tmp)
        plan = prepare(RUN, tmp, check, measured_network=False)
        ref = reference(RUN, tmp, plan, check)

        # kill -9 one of four workers; no checkpoint before the end, so the state can only come from memory.
        _, _, e, _ = scenario(tmp, ref, "kill -9", 4, plan, lambda pids, _: os.kill(pids[3], signal.SIGKILL))
        check(e.get("state_from") == "memory" and "killed by signal 9" in e.get("cause", "")
              and e.get("workers_after") == 3 and e.get("recovery") == "inplace",
              f"kill -9: state handed over from memory: {({k: e.get(k) for k in ('cause', 'state_from', 'workers_after')})}")
        check(all(e.get(k, -1) >= 0 for k in ("stop_s", "plan_s", "state_transfer_s", "regroup_s", "recovery_s")),
              f"kill -9: phase times recorded: "
              f"{({k: e.get(k) for k in ('stop_s', 'plan_s', 'state_transfer_s', 'regroup_s', 'recovery_s')})}")

        # DP=2 x TP=2: the survivors hold slices; the new layout's whole tensors are put together from them
        # (tensor parallelism trains within float rounding of the other layouts).
        dp2tp2 = plan_file(tmp, "dp2tp2", [(0, 6)], 2, tp=2)
        _, _, e, _ = scenario(tmp, ref, "TP", 4, dp2tp2, lambda pids, _: os.kill(pids[3], signal.SIGKILL))
        check(e.get("state_from") == "memory", f"TP: state put together from the slices in memory ({e.get('state_from')})")

        # Three workers for a plan of two: worker 2 waits as a spare and takes over from the one killed.
        dp2 = plan_file(tmp, "dp2", [(0, 6)], 2)
        err, _, e, _ = scenario(tmp, ref, "spare", 3, dp2, lambda pids, _: os.kill(pids[1], signal.SIGKILL))
        check(e.get("state_from") == "memory" and e.get("workers_after") == 2 and "a spare in generation 0" in err,
              f"spare: it takes the lost worker's place with state from memory ({e.get('state_from')})")

        # Both replicas of stage 1 (workers 2 and 3): its layers come from the checkpoint.
        _, _, e, redone = scenario(tmp, ref, "stage lost", 4, plan,
                                   lambda pids, _: [os.kill(pids[w], signal.SIGKILL) for w in (2, 3)],
                                   extra=("--checkpoint-every", "3"), allowed_redone=10, after_step=5)
        resumed, before = e.get("resumed_from_step", -1), e.get("last_step_before", -1)
        check(e.get("state_from") == "checkpoint" and resumed % 3 == 0 and 0 <= resumed <= before
              and redone == before - resumed == e.get("steps_redone"),
              f"stage lost: every rank reloads the checkpoint of step {resumed} and redoes the {redone} step(s) "
              f"since it, nothing else (last step before {before}, from {e.get('state_from')})")

        # SIGTERM: the worker hands over at the boundary and leaves.
        _, _, e, _ = scenario(tmp, ref, "SIGTERM", 4, plan, lambda pids, _: os.kill(pids[1], signal.SIGTERM),
                              allowed_redone=0)
        check("preempted" in e.get("cause", "") and e.get("steps_redone") == 0 and e.get("state_from") == "memory",
              f"SIGTERM: recorded as a preemption handed over from memory: {e.get('cause')}, {e.get('state_from')}")

        # A worker that stops answering: missed heartbeats make it lost.
        port0 = free_port()
        _, _, e, _ = scenario(tmp, ref, "SIGSTOP", 4, plan,
                              lambda pids, _: stop_between_requests(RUN, pids[2], f"127.0.0.1:{port0}"),
                              launcher=["--heartbeat-timeout", "2", "--master-port", str(port0)])
        check("heartbeat" in e.get("cause", ""), f"SIGSTOP: the cause names the heartbeat: {e.get('cause')}")
        # The outage is detection (the missed beats) plus recovery, recorded apart.
        check(1.5 <= e.get("detection_s", -1) <= 30 and e.get("recovery_s", -1) >= 0,
              f"SIGSTOP: detection_s {e.get('detection_s')} (the 2 s heartbeat timeout) and recovery_s "
              f"{e.get('recovery_s')} recorded apart")

        # join: one worker, then a second one asked for while it trains.
        port = free_port()
        controller = f"127.0.0.1:{port}"
        one = tmp / "one.json"
        one.write_text(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 2, "global_batch": 8,
                                   "stages": [{"layers": [0, 6], "tp": 1, "replicas": [{"gpu": "cpu", "zone": "local"}]}]}))
        seen = {}

        def join(pids, _):
            # The worker waits (stopped) while the two commands start: a 1-worker step is shorter than their start-up.
            seen["before"] = stop_between_requests(RUN, pids[0], controller)
            seen["text"] = run(RUN, "status", "--controller", controller)
            seen["join"] = run(RUN, "join", "--controller", controller, "--workers", "1")
            os.kill(pids[0], signal.SIGCONT)

        code, out, err, folder, metrics = elastic(RUN, tmp, "joined", 1, one, launcher=["--master-port", str(port)],
                                                  extra=["--checkpoint-every", "100"], act=join)
        steps, events = records(metrics)
        before = seen["before"]
        status = json.loads(before.stdout) if before.returncode == 0 else {}
        check(status.get("generation") == 0 and len(status.get("training", [])) == 1,
              f"status: generation 0 with one training worker ({before.stdout.strip()[:200]} {before.stderr[-200:]})")
        text = seen["text"]
        check(text.returncode == 0 and "generation 0 (running): 1 training worker(s) [0]" in text.stdout
              and "plan: [0,6) x1" in text.stdout,
              f"status: the same in words ({text.stdout.strip()[:300]} {text.stderr[-200:]})")
        check(seen["join"].returncode == 0 and "1 more worker" in seen["join"].stdout,
              f"join: accepted ({seen['join'].stdout.strip()} {seen['join'].stderr.strip()[-200:]})")
        check(code == 0, f"join: the job finishes (rc {code}) {err[-600:]}")
        same_losses(check, ref, steps, "join", allowed_redone=0)
        e = first_event("join", metrics)
        check("joined" in e.get("cause", "") and e.get("workers_after") == 2 and plan_workers(e.get("new_plan", {"stages": []})) == 2
              and e.get("state_from") == "memory" and f"on 2 rank(s)" in out,
              f"join: the next plan uses the new worker ({e.get('cause')}, {e.get('workers_after')} workers, "
              f"state from {e.get('state_from')}): {out.strip()[-150:]}")

        # A newcomer that dies as soon as it starts, twice, while the others train.
        def flap(pids, _):
            stop_between_requests(RUN, pids[0], controller2)  # the job cannot finish meanwhile
            for newcomer in (2, 3):
                run(RUN, "join", "--controller", controller2)
                pid = wait_until(lambda: worker_pids(tmp / "flapping").get(newcomer))
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    # The next one joins once this one is gone.
                    wait_until(lambda: worker_pids(tmp / "flapping").get(newcomer) != pid)
            os.kill(pids[0], signal.SIGCONT)

        port2 = free_port()
        controller2 = f"127.0.0.1:{port2}"
        code, out, err, folder, metrics = elastic(RUN, tmp, "flapping", 2, dp2, launcher=["--master-port", str(port2)],
                                                  extra=["--checkpoint-every", "100"], act=flap)
        steps, events = records(metrics)
        check(code == 0, f"flapping: the job finishes (rc {code}) {err[-600:]}")
        same_losses(check, ref, steps, "flapping", allowed_redone=1)
        causes = " / ".join(e.get("cause", "") for e in events)
        check("worker 2 killed by signal 9" in causes and "worker 3 killed by signal 9" in causes,
              f"flapping: both lost newcomers recorded: {causes}")

        # The last worker lost: no plan; exit 3 naming the checkpoint, which resumes.
        code, out, err, folder, metrics = elastic(RUN, tmp, "alone", 1, one, extra=["--checkpoint-every", "1"],
                                                  act=lambda pids, _: os.kill(pids[0], signal.SIGKILL))
        check(code == 3 and "admit no plan" in err and "the last checkpoint" in err,
              f"last worker lost: exit 3 naming the checkpoint (rc {code}): {err.strip()[-300:]}")
        r = run(RUN, "train", "--resume", "-o", folder, "--threads", "1", "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["last_step"] == 10, f"and it resumes: {r.stderr[-300:]}")

        # Workers left, but no plan for them within the job's bounds (--min-throughput above what 3 workers
        # reach): before stopping with exit 3 they write the state they hold as a checkpoint, newer than any
        # background one (none is written here), and the job resumes from it with the same losses.
        r = run(BIN / "sailor-plan", "search", "-i", tmp / "inputs", "--max-gpus", "3", "--json")
        best3 = json.loads(r.stdout)["plans"][0]["predictions"]["iterations_per_s"] if r.returncode == 0 else 0
        check(best3 > 0, f"no plan: the planner's best for 3 workers ({r.stderr[-200:]})")
        code, out, err, folder, metrics = elastic(RUN, tmp, "bounded", 4, plan,
                                                  launcher=["--min-throughput", str(1.5 * best3)],
                                                  extra=["--checkpoint-every", "100"],
                                                  act=lambda pids, _: os.kill(pids[3], signal.SIGKILL))
        steps, events = records(metrics)
        saved = re.search(r"the workers left wrote the checkpoint of step (\d+)", err)
        state = json.loads((folder / "trainer_state.json").read_text()) if (folder / "trainer_state.json").exists() else {}
        check(code == 3 and saved and state.get("step") == int(saved.group(1)) >= 3
              and len(events) == 1 and events[0].get("saved_step") == state.get("step")
              and state.get("step") == max(s["step"] for s in steps),
              f"no plan: exit 3 after the 3 workers left wrote their newest step (rc {code}, checkpoint "
              f"{state.get('step')}, layout {state.get('layout')}, record {events[:1]}): {err.strip()[-400:]}")
        r = run(RUN, "train", "--resume", "-o", folder, "--threads", "1", "--json")
        resumed = json.loads(r.stdout) if r.returncode == 0 else {"losses": []}
        same_losses(check, ref, steps + [{"step": state.get("step", 0) + 1 + i, "loss": l}
                                         for i, l in enumerate(resumed["losses"])], "no plan, then resumed",
                    allowed_redone=0)

        # The controller killed (SIGKILL) or stopped (SIGTERM, as scancel does): its workers stop with it;
        # the checkpoint stays and resumes.
        def kill_controller(sig):
            def act(pids, launcher):
                seen["workers"] = list(pids.values())
                os.kill(launcher, sig)
            return act

        for sig, name in [(signal.SIGKILL, "killed"), (signal.SIGTERM, "stopped")]:
            code, out, err, folder, metrics = elastic(RUN, tmp, f"orphaned-{name}", 4, plan,
                                                      extra=["--checkpoint-every", "1"], act=kill_controller(sig))
            deadline = time.time() + 20
            while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in seen["workers"]):
                time.sleep(0.1)
            check(code == -sig if sig == signal.SIGKILL else code == 128 + sig,
                  f"controller {name}: exit {code}")
            check(not any(Path(f"/proc/{p}").exists() for p in seen["workers"]),
                  f"controller {name}: its {len(seen['workers'])} workers stopped too")
            r = run(RUN, "train", "--resume", "-o", folder, "--threads", "1", "--json")
            check(r.returncode == 0 and json.loads(r.stdout)["last_step"] == 10,
                  f"controller {name}: the checkpoint resumes to the end ({r.stderr.strip()[-300:]})")

        # A controller whose workers start on their own and register (as srun tasks do).
        port = free_port()
        out, metrics = tmp / "external", tmp / "external.jsonl"
        ctl = subprocess.Popen([RUN, "controller", "--elastic", tmp / "inputs", "--workers", "2", "--port", str(port),
                                "--output", out, "--metrics", metrics, "--heartbeat-timeout", "20"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        env = dict(os.environ, SAILOR_CONTROL=f"127.0.0.1:{port}")
        train = [RUN, "train", "--model", tmp / "init", "--data", tmp / "base.txt", "-o", out, "--metrics", metrics,
                 *COMMON, "--checkpoint-every", "100"]
        logs = []

        def start():
            logs.append(tmp / f"external-{len(logs)}.err")
            return subprocess.Popen([str(a) for a in train], env=env, stdout=subprocess.PIPE,
                                    stderr=open(logs[-1], "w"), text=True)

        def worker_id(i):
            found = re.search(r"as worker (\d+)", logs[i].read_text())
            return int(found.group(1)) if found else None

        # Before its workers register, `status` says how many it waits for.
        deadline = time.time() + 60
        waiting = run(RUN, "status", "--controller", f"127.0.0.1:{port}", timeout=60)
        while time.time() < deadline and waiting.returncode != 0 and ctl.poll() is None:
            time.sleep(0.1)
            waiting = run(RUN, "status", "--controller", f"127.0.0.1:{port}", timeout=60)
        check(waiting.returncode == 0 and "waiting for workers: 0 of 2 registered" in waiting.stdout,
              f"controller: status before any worker registered ({waiting.stdout.strip()} {waiting.stderr.strip()[-200:]})")
        workers = [start(), start()]
        deadline = time.time() + 120
        while time.time() < deadline and len(records(metrics)[0]) < 2 and ctl.poll() is None:
            time.sleep(0.02)
        # Worker 0 holds the step (stopped, between two store requests) while the newcomer starts.
        stop_between_requests(RUN, workers[0].pid, f"127.0.0.1:{port}")
        workers.append(start())
        while time.time() < deadline and worker_id(2) is None:
            time.sleep(0.1)
        workers[0].send_signal(signal.SIGCONT)
        while time.time() < deadline and len(records(metrics)[1]) < 1 and ctl.poll() is None:
            time.sleep(0.02)
        # Training ranks are the survivors in order, then the newcomer: worker 1 trains whatever the plan.
        ids = [worker_id(i) for i in range(3)]
        victim = ids.index(1) if 1 in ids else 1
        training = "ids 0 and 1 at least"
        # The others wait (stopped) while it dies, so the job cannot finish first.
        others = [w for i, w in enumerate(workers) if i != victim]
        for w in others:
            w.send_signal(signal.SIGSTOP)
        workers[victim].kill()
        workers[victim].wait()
        for w in others:
            w.send_signal(signal.SIGCONT)
        try:
            ctl_out, ctl_err = ctl.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl_out, ctl_err = ctl.communicate()
        for w in workers:
            try:
                w.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
        codes = [w.returncode for i, w in enumerate(workers) if i != victim]
        steps, events = records(metrics)
        check(ctl.returncode == 0 and codes == [0, 0],
              f"controller: it and the surviving workers finish (rc {ctl.returncode}, workers {codes}, "
              f"worker ids {ids}, training {training}): {ctl_err[-600:]}")
        same_losses(check, ref, steps, "controller", allowed_redone=1)
        causes = [e.get("cause", "") for e in events]
        check(len(events) == 2 and "joined" in causes[0] and "heartbeat" in causes[1]
              and events[0].get("workers_after") == 3 and events[1].get("workers_after") == 2
              and all(e.get("state_from") == "memory" for e in events),
              f"controller: a join, then a lost worker, both handed over from memory: {causes} (worker ids {ids}, "
              f"training after the join {training}, killed {victim}; steps {[x['step'] for x in steps]})")

        # Bad invocations.
        for args, expect in [(["status", "--controller", f"127.0.0.1:{free_port()}"], "cannot reach"),
                             (["join", "--controller", "nowhere"], "HOST:PORT"),
                             (["join", "--controller", "127.0.0.1:99999"], "port")]:
            r = run(RUN, *args, timeout=60)
            check(r.returncode != 0 and expect in r.stderr and r.stderr.count("\n") <= 2,
                  f"{' '.join(args)}: one error naming '{expect}' (rc {r.returncode}: {r.stderr.strip()[-200:]})")

        left = sorted(p.name for p in worker_tmp.iterdir())
        check(not left, f"the jobs' processes left nothing in their temporary folder ({left[:5]})")

    if check.failures:
        print(f"{len(check.failures)} check(s) failed")
        sys.exit(1)
    print("all in-place elastic checks passed")


main()
