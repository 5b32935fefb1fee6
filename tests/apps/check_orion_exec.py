"""orion-run exec end to end: real client processes, the interposer, the
scheduler, and the stand-in driver (tests/orion/fake_cuda).

Usage: check_orion_exec.py BIN_DIR FAKE_CUDA_DIR

- Every policy: an HP and a BE client, each run to completion, give the
  same device-buffer checksums as alone (order of launches per stream kept,
  copies and synchronisation pass through).
- HP launches are never held; under orion a best-effort kernel that needs
  more SMs than the threshold is never released inside an HP request, and
  some are held; under mps they are released inside HP requests.
- Launches reach the scheduler through every route: linked symbols,
  cuLaunchKernelEx, and dlopen + cuGetProcAddress (as the CUDA runtime,
  static or shared, reaches the driver).
- Faults: a BE client killed with SIGKILL mid-run (the HP client finishes,
  also on a device shared with it, the scheduler frees its slot), the scheduler killed (clients finish
  ungated, say so once), a program that never uses CUDA, missing or
  malformed profiles and bad options (one error line, exit 2, nothing run).
- The stand-in's block dispatch (FAKE_CUDA_DISPATCH=blocks): a kernel starts
  on the free SMs where whole placement waits, and a kernel waiting behind
  one of a killed process starts.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.argv[1])
FAKE = Path(sys.argv[2])
ORION = str(BIN / "orion-run")
APP = str(FAKE / "fake_cuda_app")
APP_DLOPEN = str(FAKE / "fake_cuda_app_dlopen")
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def run(args, timeout=120, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)


def checksum_lines(text):
    return sorted(line for line in text.splitlines() if line.startswith("requests "))


def read_log(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def finish(process, seconds=60):
    """Its exit code; killed (-9) if it has not ended within `seconds`."""
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def kernel_starts(fake_log, name):
    """How many kernels whose names begin with `name` the stand-in started (its FAKE_CUDA_LOG)."""
    lines = fake_log.read_text().splitlines() if fake_log.exists() else []
    return sum(1 for line in lines if line.startswith(name))


def wait_for(predicate, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


tmp = Path(tempfile.mkdtemp(prefix="orion-exec-"))
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
HP_CSV = tmp / "hp.csv"
BE_CSV = tmp / "be.csv"
HP_CSV.write_text("Name,Profile,Memory_footprint,SM_usage,Duration\n"
                  "hpk_0,1,0,132,3000000\nhpk_1,0,0,132,3000000\n")
BE_CSV.write_text("Name,Profile,Memory_footprint,SM_usage,Duration\n"
                  "bek_0,1,0,100,200000\nbek_1,1,0,100,200000\n")
PROFILES = f"{HP_CSV},{BE_CSV}"
env = dict(os.environ, ORION_QUIET="0")

# ---------------------------------------------------------------- results as alone
hp_cmd = f"{APP} --name hpk --markers --requests 4 --kernels 4 --duration-us 3000 --think-us 2000"
be_cmd = f"{APP} --name bek --requests 6 --kernels 6 --duration-us 200"
alone = checksum_lines(run(["sh", "-c", hp_cmd]).stdout + run(["sh", "-c", be_cmd]).stdout)
check(len(alone) == 2, f"both programs run alone on the stand-in driver: {alone}")
for policy in ["orion", "temporal", "streams", "mps", "reef", "tick-tock"]:
    r = run([ORION, "exec", "--policy", policy, "--hp", hp_cmd, "--be", be_cmd, "--wait-be",
             "--profiles", PROFILES, "--device", "h200", "--report", "--json"])
    together = checksum_lines(r.stdout)
    check(r.returncode == 0 and together == alone,
          f"{policy}: same checksums as alone (rc {r.returncode}: {together} {r.stderr[-300:]})")
    try:
        report = json.loads(r.stdout[r.stdout.index("{"):])["rows"]
        hp_row = report[0]
        check(hp_row["requests"] == 4 and hp_row["kernels"] == 16 and report[1]["kernels"] == 36,
              f"{policy}: the report counts every request and launch ({hp_row['requests']} requests, "
              f"{hp_row['kernels']} + {report[1]['kernels']} kernels)")
        check(hp_row["outcome"] == "too few" and hp_row["completed_in_window"] <= 4
              and report[1]["outcome"] == "no requests" and report[1]["p99_ms"] is None
              and report[1]["throughput_per_s"] is None,
              f"{policy}: four HP requests are 'too few', a BE without markers has no latency figures "
              f"({hp_row['outcome']}, {report[1]['outcome']}, {report[1]['p99_ms']})")
        check(report[1]["kernels_released_ahead"] == 0,
              f"{policy}: nothing released ahead without --release-ahead-us ({report[1]['kernels_released_ahead']})")
        if policy != "temporal":
            check(hp_row["kernels_held"] == 0 and hp_row["held_ms"] == 0,
                  f"{policy}: no HP launch waited ({hp_row['kernels_held']}, {hp_row['held_ms']} ms)")
    except (ValueError, KeyError, IndexError) as e:
        check(False, f"{policy}: --report --json is JSON with a row per client ({e}): {r.stdout[-300:]}")

# ---------------------------------------------------------------- --alone: the same commands by themselves
# The BE command runs until stopped: alone it must be stopped after the time
# it ran beside the HP command, or this run would not end.
hp_six = f"{APP} --name hpk --markers --requests 6 --kernels 4 --duration-us 3000 --think-us 2000"
be_forever = f"{APP} --name bek --markers --requests 0 --kernels 6 --duration-us 200"
r = run([ORION, "exec", "--policy", "mps", "--alone", "--hp", hp_six, "--be", be_forever,
         "--profiles", PROFILES, "--report", "--json"], timeout=60)
try:
    rows = json.loads(r.stdout[r.stdout.index("{"):])["rows"]
    check(r.returncode == 0 and [(x["policy"], x["client"]) for x in rows]
          == [("alone", "hp"), ("alone", "be0"), ("mps", "hp"), ("mps", "be0")],
          f"--alone: rows alone first, then the shared run (rc {r.returncode}: {[x['policy'] for x in rows]})")
    hp_sums = [line for line in r.stdout.splitlines() if line.startswith("requests 6 ")]
    # (the BE command's line says "requests 6" too if it managed exactly six: count equal lines)
    check(max(hp_sums.count(x) for x in hp_sums) == 2 and rows[0]["requests"] == 6,
          f"--alone: the HP command ran again by itself, with the same results ({hp_sums})")
    check("be0 alone for" in r.stderr and rows[1]["requests"] > 0,
          f"--alone: the BE command alone was stopped after its time beside the HP one ({r.stderr[-200:]})")
    for alone_row, shared in zip(rows[:2], rows[2:]):
        if shared["outcome"] == "ok":
            check(abs(shared["p99_vs_alone"] - shared["p99_ms"] / alone_row["p99_ms"]) < 1e-9
                  and abs(shared["throughput_vs_alone"]
                          - shared["throughput_per_s"] / alone_row["throughput_per_s"]) < 1e-9,
                  f"--alone: {shared['client']}'s ratios are against its run alone")
        else:
            check(shared["p99_vs_alone"] is None, f"--alone: no ratio for {shared['client']} ({shared['outcome']})")
except (ValueError, KeyError, IndexError, TypeError) as e:
    check(False, f"--alone: a report with runs alone ({e}): rc {r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}")
r = run([ORION, "exec", "--policy", "mps", "--alone", "--hp", hp_six, "--be", be_forever,
         "--profiles", PROFILES, "--report"], timeout=60)
check(r.returncode == 0 and "p99/alone" in r.stdout and "\nalone " in "\n" + r.stdout,
      f"--alone: the table has the ratio columns and the rows alone: {r.stdout[-400:]}")
r = run([ORION, "exec", "--policy", "mps", "--alone", "--hp", f"{APP} --markers --requests 2; exit 3"], timeout=60)
check(r.returncode == 3 and "not run alone" in r.stderr and "\nalone " not in "\n" + r.stdout
      and r.stdout.count("requests 2 ") == 1,
      f"--alone: a failed shared run is reported with its exit code, nothing run again "
      f"(rc {r.returncode}: {r.stderr[-200:]})")

# ---------------------------------------------------------------- decisions on a constructed situation
def hp_request_windows(log):
    return [(e["t_us"] - e["latency_ms"] * 1000, e["t_us"]) for e in log
            if e["event"] == "request" and e["client"] == "hp"]


for policy in ["orion", "mps"]:
    ready = tmp / f"ready-{policy}"
    log_path = tmp / f"{policy}.log"
    hp = (f"{APP} --name hpk --markers --requests 4 --kernels 2 --duration-us 40000 --think-us 20000 "
          f"--wait-file {ready}")
    be = f"{APP} --name bek --requests 0 --kernels 4 --duration-us 2000 --ready-file {ready}"
    r = run([ORION, "exec", "--policy", policy, "--hp", hp, "--be", be, "--profiles", PROFILES, "--log",
             str(log_path), "--report", "--json", "--sm-threshold", "50"])
    check(r.returncode == 0, f"{policy}: BE stopped when HP is done, exit 0 (rc {r.returncode} {r.stderr[-200:]})")
    log = read_log(log_path)
    windows = hp_request_windows(log)
    be_releases = [e["t_us"] for e in log if e["event"] == "release" and e["client"] == "be0"]
    # 5 ms from either end: the scheduler timestamps a decision when it makes it,
    # a few microseconds (more when the machine is loaded) after the marker.
    inside = [t for t in be_releases if any(b + 5000 < t < end - 5000 for b, end in windows)]
    hp_released = [e for e in log if e["event"] == "release" and e["client"] == "hp"]
    check(len(windows) == 4 and be_releases, f"{policy}: 4 HP requests and BE launches in the log")
    check(not hp_released, f"{policy}: HP launches go straight to the GPU (none released by the scheduler)")
    # The log's view of the HP state alternates on/off, one window at least per request.
    states = [e["on"] for e in log if e["event"] == "hp_active"]
    check(len(states) >= 8 and states[0] is True and all(a != b for a, b in zip(states, states[1:])),
          f"{policy}: hp_active events alternate, starting on, one window per request at least ({states[:12]})")
    # Every logged BE completion follows a release, and the scheduler saw it after the client did.
    completes = [e for e in log if e["event"] == "complete" and e["client"] == "be0"]
    check(0 < len(completes) <= len(be_releases) and all(e["seen_after_us"] >= 0 for e in completes),
          f"{policy}: BE completions logged ({len(completes)} of {len(be_releases)} releases)")
    if policy == "orion":
        check(not inside, f"orion: no 100-SM BE kernel (threshold 50) released inside an HP request ({len(inside)} were)")
        held = json.loads(r.stdout[r.stdout.index("{"):])["rows"][1]["kernels_held"]
        check(held > 0, f"orion: BE kernels were held ({held})")
    else:
        check(len(inside) > 0, f"mps: BE kernels released during HP requests ({len(inside)})")

# ---------------------------------------------------------------- REEF's bounded best-effort queue
# --reef-queue-depth 1: a BE launch is released only once the one before it
# has finished, so consecutive BE releases lie at least a kernel's duration
# (2 ms on the stand-in driver) apart, however the machine is loaded; the
# default depth (4) lets an iteration's four launches go within microseconds.
log_path = tmp / "reef.log"
r = run([ORION, "exec", "--policy", "reef", "--reef-queue-depth", "1",
         "--hp", f"{APP} --name hpk --markers --requests 3 --kernels 2 --duration-us 3000 --think-us 2000",
         "--be", f"{APP} --name bek --requests 3 --kernels 4 --duration-us 2000", "--wait-be",
         "--profiles", PROFILES, "--log", str(log_path), "--report", "--json"])
check(r.returncode == 0, f"reef with --reef-queue-depth 1 exits 0 (rc {r.returncode} {r.stderr[-200:]})")
be_releases = [e["t_us"] for e in read_log(log_path) if e["event"] == "release" and e["client"] == "be0"]
gaps = [b - a for a, b in zip(be_releases, be_releases[1:])]
check(len(be_releases) == 12 and min(gaps) >= 1900,
      f"reef depth 1: 12 BE releases, each at least a kernel's 2 ms after the last (gaps {[round(g) for g in gaps]})")

# ---------------------------------------------------------------- releasing ahead of completions
# BE kernels of 2 ms, longer than orion's DUR_THRESHOLD (2.5 % of the 6 ms
# HP request): one is outstanding at a time. With a lead of a second every
# BE kernel is due to end within it, so the next is queued behind the
# running one; results stay those of running alone.
be_long_csv = tmp / "be-long.csv"
be_long_csv.write_text("Name,Profile,Memory_footprint,SM_usage,Duration\nbek_0,1,0,100,2000000\n")
be_long = f"{APP} --name bek --requests 3 --kernels 4 --duration-us 2000"
log_path = tmp / "ahead.log"
r = run([ORION, "exec", "--policy", "orion", "--release-ahead-us", "1000000", "--hp", hp_cmd, "--be", be_long,
         "--wait-be", "--profiles", f"{HP_CSV},{be_long_csv}", "--log", str(log_path), "--report", "--json"])
rows = json.loads(r.stdout[r.stdout.index("{"):])["rows"] if "{" in r.stdout else []
ahead_logged = [e for e in read_log(log_path) if e["event"] == "release" and e.get("ahead")] if log_path.exists() else []
check(r.returncode == 0 and rows and rows[1]["kernels_released_ahead"] > 0
      and rows[1]["kernels_released_ahead"] == len(ahead_logged)
      and checksum_lines(r.stdout) == checksum_lines(run(["sh", "-c", hp_cmd]).stdout + run(["sh", "-c", be_long]).stdout),
      f"--release-ahead-us: BE kernels released ahead ({rows[1]['kernels_released_ahead'] if rows else '-'}, "
      f"{len(ahead_logged)} in the log), same checksums as alone (rc {r.returncode} {r.stderr[-200:]})")

# ---------------------------------------------------------------- what completion tracking costs a client
# Inside marked requests the HP client's launches get no events at all: the
# end marker reports them complete, and every request window still closes.
# Without markers each launch needs tracking, but launches made while a
# stream's event is pending share the next one: 4 kernels launched while
# the first still runs need 2 events, not 4 (checked below with the device
# held, so that it holds however slowly the client launches).
def fake_driver_counts(hp_command, label):
    fake_log, log_path = tmp / f"fake-{label}.log", tmp / f"{label}.log"
    r = run([ORION, "exec", "--policy", "orion", "--hp", hp_command, "--profiles", str(HP_CSV), "--log",
             str(log_path), "--report", "--json"], env=dict(os.environ, FAKE_CUDA_LOG=str(fake_log)))
    lines = fake_log.read_text().splitlines() if fake_log.exists() else []
    events = read_log(log_path) if log_path.exists() else []
    return r, lines.count("event-record"), sum(1 for l in lines if l.startswith("hpk")), events

r, records, kernels, events = fake_driver_counts(hp_cmd, "marked")
# Each end marker closes a request (a "request" event); the scheduler's
# "HP active" view is logged once per poll, so an end marker and the next
# start marker read in one poll (a busy machine) show no "off" between.
closed = sum(1 for e in events if e["event"] == "request" and e["client"] == "hp")
states = [e["on"] for e in events if e["event"] == "hp_active"]
check(r.returncode == 0 and kernels == 16 and records == 0 and closed == 4 and states and states[-1] is False,
      f"HP launches inside marked requests: {records} completion events for {kernels} launches, "
      f"{closed} of 4 request windows closed, HP last seen active: {states[-1:]} (rc {r.returncode})")
# The stand-in device is held (FAKE_CUDA_HOLD: no kernel finishes) until the
# client has launched its first request's 4 kernels and waits for them (its
# "ctx-sync" line, written after the fourth launch returned): by then one
# event is recorded, behind the first launch, and the other three wait for
# it. Released, one more event covers those three: 2 for that burst, so at
# most 2 + 3 x 4 in all, whatever the timing of the later bursts.
fake_log, log_path, hold = tmp / "fake-unmarked.log", tmp / "unmarked.log", tmp / "hold"
hold.write_text("")
p = subprocess.Popen([ORION, "exec", "--policy", "orion", "--hp", hp_cmd.replace(" --markers", ""), "--profiles",
                      str(HP_CSV), "--log", str(log_path), "--report", "--json"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, FAKE_CUDA_LOG=str(fake_log), FAKE_CUDA_HOLD=str(hold)))
fake_lines = lambda: fake_log.read_text().splitlines() if fake_log.exists() else []  # noqa: E731
# Both are states the held device reaches: the first kernel starts (only
# its end is held) and the client's wait follows its fourth launch.
synced = wait_for(lambda: "ctx-sync" in fake_lines() and any(l.startswith("hpk") for l in fake_lines()), 120)
held = fake_lines()
hold.unlink()
out, err = p.communicate(timeout=120)
lines = fake_lines()
records, kernels = lines.count("event-record"), sum(1 for l in lines if l.startswith("hpk"))
events = read_log(log_path) if log_path.exists() else []
states = [e["on"] for e in events if e["event"] == "hp_active"]
check(synced and held.count("event-record") == 1 and sum(1 for l in held if l.startswith("hpk")) == 1,
      f"HP launches without markers, device held: 1 completion event for the 4 launches of a request so far "
      f"({held.count('event-record')} events, {sum(1 for l in held if l.startswith('hpk'))} kernel started)")
check(p.returncode == 0 and kernels == 16 and 2 <= records <= 14 and states and states[-1] is False,
      f"HP launches without markers: {records} completion events for {kernels} launches in bursts of 4 (at most 14), "
      f"and the scheduler saw them all finish (rc {p.returncode} {err[-200:]})")

# ---------------------------------------------------------------- the stand-in's block dispatch
# Two processes on one held device (no kernel finishes): the first holds
# 100 of the 132 SMs; the second's kernel needs all 132. Placed whole (the
# default) it waits for them; with FAKE_CUDA_DISPATCH=blocks it starts on
# the 32 that are free, as a GPU's block scheduler would place its blocks
# (scripts/bench/orion/orion_live_vs_sim.sh relies on that).
for dispatch in ("whole", "blocks"):
    fake_log, hold, device = tmp / f"fake-{dispatch}.log", tmp / f"hold-{dispatch}", tmp / f"device-{dispatch}"
    hold.write_text("")
    env = dict(os.environ, FAKE_CUDA_LOG=str(fake_log), FAKE_CUDA_HOLD=str(hold), FAKE_CUDA_SHARED_DEVICE=str(device),
               FAKE_CUDA_DISPATCH=dispatch)
    first = subprocess.Popen([APP, "--name", "bek", "--requests", "1", "--kernels", "1", "--grid", "800"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    holding = wait_for(lambda: kernel_starts(fake_log, "bek") == 1, 60)
    launched = tmp / f"launched-{dispatch}"  # written once its launch has returned
    second = subprocess.Popen([APP, "--name", "hpk", "--requests", "1", "--kernels", "1", "--grid", "1056",
                               "--ready-file", str(launched)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    if dispatch == "blocks":
        started = wait_for(lambda: kernel_starts(fake_log, "hpk") == 1, 60)
    else:
        # It cannot start until the hold ends; what is checked is that it
        # did not once its launch had returned.
        wait_for(launched.exists, 60)
        started = kernel_starts(fake_log, "hpk") == 1
    hold.unlink()
    codes = (finish(first), finish(second))
    expected = dispatch == "blocks"
    check(holding and started == expected and codes == (0, 0),
          f"stand-in, {dispatch} dispatch: a 132-SM kernel beside one holding 100 SMs "
          f"{'starts on the free ones' if expected else 'waits for all of them'} (started: {started}, rc {codes})")

# A process killed while its kernel waited for more SMs holds up nobody:
# under block dispatch the others respect its place in line only while it
# lives (then its SMs come back too). The held device keeps the 100-SM
# kernel running; the 132-SM one runs on the other 32 and waits for the
# rest; a 20-SM kernel launched after it waits behind it, and must start
# once that process is killed.
fake_log, hold, device = tmp / "fake-killed.log", tmp / "hold-killed", tmp / "device-killed"
hold.write_text("")
env = dict(os.environ, FAKE_CUDA_LOG=str(fake_log), FAKE_CUDA_HOLD=str(hold), FAKE_CUDA_SHARED_DEVICE=str(device),
           FAKE_CUDA_DISPATCH="blocks")
procs, ready = {}, True
for name, grid in (("bek", 800), ("hpk", 1056), ("cck", 160)):
    launched = tmp / f"launched-{name}"  # written once its launch has returned
    procs[name] = subprocess.Popen([APP, "--name", name, "--requests", "1", "--kernels", "1", "--grid", str(grid),
                                    "--ready-file", str(launched)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    ready = ready and wait_for(
        lambda: launched.exists() and (name == "cck" or kernel_starts(fake_log, name) == 1), 60)
waiting = kernel_starts(fake_log, "hpk") == 1 and kernel_starts(fake_log, "cck") == 0
procs["hpk"].kill()
procs["hpk"].wait(timeout=60)
started = wait_for(lambda: kernel_starts(fake_log, "cck") == 1, 60)
hold.unlink()
codes = (finish(procs["bek"]), finish(procs["cck"]))
check(ready and waiting and started and codes == (0, 0),
      f"stand-in, blocks dispatch: a kernel waiting behind one of a process that is killed starts "
      f"(waiting behind it: {waiting}, started: {started}, rc {codes})")

# ---------------------------------------------------------------- a program that outlives its shell
# "; true" keeps the shell from exec'ing the program: SIGTERM ends the shell
# at once while the program finishes its request. exec waits for it too.
r = run([ORION, "exec", "--hp", f"{APP} --name hpk --markers --requests 5 --duration-us 2000",
         "--be", f"{APP} --name bek --requests 0 --kernels 4 --duration-us 500; true", "--report", "--json"])
report_at = r.stdout.find("{")
be_line = r.stdout.find("requests", r.stdout.find("requests") + 1)
check(r.returncode == 0 and 0 < be_line < report_at and "scheduler is gone" not in r.stderr,
      f"exec waits for a program that outlives its shell before the report (rc {r.returncode}): {r.stdout[:300]}")

# ---------------------------------------------------------------- a request cut short by the stop
# A BE command that dies on SIGTERM in the middle of a 1 s request: the
# request has a begin marker and no end. It began before the HP command's
# first request (the HP waits for the BE's first launch) and was still
# running when the HP command's end closed the window, so the report counts
# it in flight at the window's end, not as nothing.
ready = tmp / "ready-cut"
r = run([ORION, "exec", "--policy", "mps",
         "--hp", f"{APP} --name hpk --markers --requests 5 --duration-us 2000 --wait-file {ready}",
         "--be", f"{APP} --name bek --markers --requests 0 --kernels 4 --duration-us 250000 "
                 f"--ready-file {ready} --die-on-term",
         "--profiles", PROFILES, "--report", "--json"])
rows = json.loads(r.stdout[r.stdout.index("{"):])["rows"] if "{" in r.stdout else []
check(r.returncode == 0 and len(rows) == 2 and rows[1]["requests"] == 0 and rows[1]["in_flight_at_window_end"] == 1
      and rows[0]["in_flight_at_window_end"] == 0,
      f"a BE request cut short by the stop counts as in flight at the window's end (rc {r.returncode}: "
      f"{[(x.get('requests'), x.get('in_flight_at_window_end')) for x in rows]} {r.stderr[-200:]})")

# ---------------------------------------------------------------- every route to the driver
for name, app, extra in [("cuLaunchKernelEx", APP, "--launch-ex"), ("dlopen + cuGetProcAddress", APP_DLOPEN, ""),
                         ("cuGetProcAddress + cuLaunchKernelEx", APP_DLOPEN, "--launch-ex")]:
    r = run([ORION, "exec", "--policy", "orion", "--hp", f"{app} --name hpk --markers --requests 3 {extra}",
             "--profiles", str(HP_CSV), "--report", "--json"])
    rows = json.loads(r.stdout[r.stdout.index("{"):])["rows"] if "{" in r.stdout else []
    check(r.returncode == 0 and rows and rows[0]["kernels"] == 12 and rows[0]["requests"] == 3
          and rows[0]["kernels_not_in_profile"] == 0 and rows[0]["lost_processes"] == 0,
          f"launches through {name} reach the scheduler and match the profile: {rows}")

# ---------------------------------------------------------------- a BE client killed mid-run
ready = tmp / "ready-kill"
log_path = tmp / "kill.log"
hp = f"{APP} --name hpk --markers --requests 30 --kernels 2 --duration-us 2000 --think-us 10000"
be = f"{APP} --name bek --requests 0 --kernels 4 --duration-us 1000 --ready-file {ready}"
p = subprocess.Popen([ORION, "exec", "--hp", hp, "--be", be, "--profiles", PROFILES, "--log", str(log_path),
                      "--report", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
# The ready file is written once the scheduler let its first kernel through (a state, not a time).
check(wait_for(lambda: ready.exists() and ready.read_text().strip()), "BE client started")
os.kill(int(ready.read_text()), signal.SIGKILL)
out, err = p.communicate(timeout=60)
check("requests 30" in out, f"the HP client finished all its requests after BE was killed: {out[-200:]}")
check(p.returncode == 128 + 9, f"exec reports the killed BE command's status (rc {p.returncode})")
check("be0 ended first" in err and "of 30 requests in it" in err,
      f"exec says the report's window ended when the BE client died: {err[-300:]}")
leaves = [e for e in read_log(log_path) if e["event"] == "leave" and e["client"] == "be0"]
check(leaves and leaves[0]["why"] == "killed", f"the scheduler freed the killed client's slot: {leaves}")
rows = json.loads(out[out.index("{"):])["rows"] if "{" in out else []
check(rows and rows[1]["lost_processes"] == 1 and rows[0]["lost_processes"] == 0,
      f"the report counts the killed process as lost, the HP one not: {rows}")

# The same on one device shared by both processes (as under MPS; policy mps
# lets the BE kernels run back to back), killed
# while its 100-SM kernel is resident: the HP kernels need all 132 SMs, so
# they can run only once the dead process's SMs are back in the pool (a GPU
# frees a dead process's context; the stand-in must too, or the HP client
# would wait forever and this run would time out).
ready_shared = tmp / "ready-kill-shared"
shared_device = tmp / "kill-device"
p = subprocess.Popen([ORION, "exec", "--policy", "mps", "--hp", f"{hp} --grid 1056",
                      "--be", f"{APP} --name bek --requests 0 --kernels 4 --duration-us 5000 --grid 800 "
                              f"--ready-file {ready_shared}",
                      "--profiles", PROFILES], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, FAKE_CUDA_SHARED_DEVICE=str(shared_device)))
# The ready file is written once its first kernel was launched: it holds its SMs.
check(wait_for(lambda: ready_shared.exists() and ready_shared.read_text().strip()), "BE client started (shared device)")
os.kill(int(ready_shared.read_text()), signal.SIGKILL)
try:
    out, err = p.communicate(timeout=60)
    check("requests 30" in out and p.returncode == 128 + 9,
          f"on a shared device the HP client finished after BE was killed holding SMs (rc {p.returncode}): "
          f"{out[-200:]}")
except subprocess.TimeoutExpired:
    # Stop exec and the clients it left waiting (they keep its pipes open).
    marker = f"FAKE_CUDA_SHARED_DEVICE={shared_device}".encode()
    for pid in [d for d in os.listdir("/proc") if d.isdigit()]:
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    p.kill()
    p.wait()
    check(False, "on a shared device the HP client waited forever for the SMs of the killed BE client")

# ---------------------------------------------------------------- the scheduler killed
hp_out, be_out = tmp / "hp.out", tmp / "be.out"
hp_ready, be_ready = tmp / "hp-ready", tmp / "be-ready"
hp = f"{APP} --name hpk --markers --requests 20 --kernels 4 --duration-us 3000 --think-us 2000"
be = f"{APP} --name bek --requests 300 --kernels 6 --duration-us 200"
p = subprocess.Popen([ORION, "exec", "--wait-be", "--hp", f"{hp} --ready-file {hp_ready} > {hp_out} 2>&1",
                      "--be", f"{be} --ready-file {be_ready} > {be_out} 2>&1", "--profiles", PROFILES],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
# Killed once both clients run under it (each has launched a kernel), however loaded the machine is.
check(wait_for(lambda: all(f.exists() and f.read_text().strip() for f in (hp_ready, be_ready)), 60),
      "both clients started under the scheduler")
p.kill()
p.communicate(timeout=30)
done = wait_for(lambda: all(f.exists() and "checksum" in f.read_text() for f in (hp_out, be_out)), 60)
check(done, "both clients finish after the scheduler was killed")
if done:
    texts = [f.read_text() for f in (hp_out, be_out)]
    check(checksum_lines("".join(texts)) == checksum_lines(run(["sh", "-c", hp]).stdout + run(["sh", "-c", be]).stdout),
          "and compute the same results as alone")
    # "the scheduler is gone" (noticed while waiting) or "is not running" (noticed on connecting).
    notices = sum(t.count("running ungated") for t in texts)
    check(notices >= 1 and all(t.count("running ungated") <= 1 for t in texts),
          f"each client that noticed says so once ({notices} notices): {texts[1][:200]}")
leftover = [f for f in os.listdir("/dev/shm") if f.startswith(f"orion-{p.pid}-")]
check(len(leftover) <= 1, "at most the killed scheduler's own segment is left")
for f in leftover:
    os.unlink(f"/dev/shm/{f}")

# ---------------------------------------------------------------- programs without CUDA, bad input
r = run([ORION, "exec", "--wait-be", "--hp", f"{APP} --no-cuda", "--be", "echo plain program"])
check(r.returncode == 0 and "no cuda used" in r.stdout and "plain program" in r.stdout,
      f"programs that never use CUDA run unchanged (rc {r.returncode})")
marker = tmp / "must-not-exist"
for args, expect in [
    (["--hp", f"touch {marker}", "--profiles", str(tmp / "missing.csv")], "missing.csv"),
    (["--hp", f"touch {marker}", "--profiles", str(tmp / "bad.csv")], "bad.csv"),
    (["--hp", f"touch {marker}", "--profiles", f"{HP_CSV},{BE_CSV}"], "one per command"),
    (["--hp", f"touch {marker}", "--policy", "dedicated"], "simulator mode"),
    (["--hp", f"touch {marker}", "--policy", "fastest"], "unknown policy"),
    (["--hp", f"touch {marker}", "--device", "z80"], "z80"),
    (["--hp", f"touch {marker}", "--release-ahead-us", "-5"], "--release-ahead-us"),
    (["--hp", f"touch {marker}", "--contention", str(tmp / "no-model.json")], "no-model.json"),
    (["--hp", f"touch {marker}", "--contention", str(tmp / "bad.csv")], "bad.csv"),
    (["--be", f"touch {marker}", "--policy", "orion"], "high-priority"),
    ([], "nothing to run"),
    (["--hp", f"touch {marker}", "--be", ""], "a command is empty"),
]:
    (tmp / "bad.csv").write_text("Name,Profile\nk,banana\n")
    r = run([ORION, "exec"] + args)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 2 and expect in r.stderr and not marker.exists() and len(lines) <= 2,
          f"exec {' '.join(args[-2:])}: exit 2 naming '{expect}', nothing started (rc {r.returncode}: {r.stderr.strip()[:200]})")
r = run([ORION, "exec", "--hp", "true"], env=dict(os.environ, ORION_CLIENT_LIBRARY=str(tmp / "nope.so")))
check(r.returncode == 2 and "ORION_CLIENT_LIBRARY" in r.stderr, f"a missing interposer is named: {r.stderr.strip()}")

# ---------------------------------------------------------------- orion-profile capture
PROFILE = str(BIN / "orion-profile")
records = tmp / "records.jsonl"
records.write_text('{"kind":"device","name":"NVIDIA H200","sms":132}\n'
                   '{"kind":"marker","what":"begin","t":100}\n'
                   '{"kind":"kernel","name":"_Z4gemmv","grid":[264,1,1],"block":[256,1,1],"registers":64,'
                   '"static_shared":0,"dynamic_shared":49152,"start":200,"end":5200,"stream":7}\n'
                   '{"kind":"marker","what":"end","t":9000}\n')
out_csv = tmp / "captured.csv"
r = run([PROFILE, "capture", "--from-records", str(records), "-o", str(out_csv)])
rows = out_csv.read_text().splitlines() if out_csv.exists() else []
check(r.returncode == 0 and len(rows) == 2 and rows[1].startswith("_Z4gemmv,-1,0,") and ",5000," in rows[1],
      f"capture --from-records writes the profile of the marked iteration: {rows} {r.stderr.strip()}")
r = run([PROFILE, "capture", "-o", str(tmp / "none.csv"), "--", APP, "--requests", "1"])
check(r.returncode == 1 and "no kernel records" in r.stderr and not (tmp / "none.csv").exists(),
      f"a program CUPTI could not attach to (the stand-in driver has no CUPTI) is a clear error: {r.stderr.strip()}")
for args, expect in [([], "either a program"), (["--from-records", str(records), "--", "true"], "either a program"),
                     (["--from-records", str(tmp / "nope.jsonl")], "nope.jsonl"),
                     (["--", str(tmp / "no-such-program")], "status 127")]:
    r = run([PROFILE, "capture", "-o", str(tmp / "x.csv")] + args)
    check(r.returncode != 0 and expect in r.stderr and not (tmp / "x.csv").exists(),
          f"capture {' '.join(args)[-40:]}: error naming '{expect}' (rc {r.returncode}: {r.stderr.strip()[-160:]})")
# A program whose records cannot be read: one error, and the records' temporary copy is gone.
capture_tmp = tmp / "capture-tmp"
capture_tmp.mkdir()
r = run([PROFILE, "capture", "-o", str(tmp / "x.csv"), "--", "sh", "-c", 'echo "not json" > "$ORION_CAPTURE_OUT"'],
        env=dict(os.environ, TMPDIR=str(capture_tmp)))
left = sorted(p.name for p in capture_tmp.iterdir())
check(r.returncode != 0 and r.stderr.strip() and not (tmp / "x.csv").exists() and not left,
      f"capture of unreadable records: an error, no profile, no temporary records left ({left}; rc {r.returncode}: "
      f"{r.stderr.strip()[-160:]})")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all orion-run exec checks passed")
