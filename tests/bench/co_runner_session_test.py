#!/usr/bin/python3
"""bench/harness.py puts the co-runner where --co-runner-session says: by default in the measured
run's session (Linux with autogroups shares the CPUs per session first, so a co-runner in another
session would cap every multi-threaded run at half of the machine), with "own" in a session of its
own. The measured command here is this file in probe mode: it finds the co-runner among its
siblings (children of the harness) and reports both session ids."""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import co_runners  # noqa: E402


def co_runner_sessions(parent):
    sessions = []
    for pid in co_runners.co_runner_pids(parent):
        try:
            sessions.append(os.getsid(pid))
        except OSError:
            continue
    return sessions


def probe(out):
    # The harness starts the co-runner before the run, but its exec of sh may not be done yet.
    deadline = time.monotonic() + 30
    co = co_runner_sessions(os.getppid())
    while not co and time.monotonic() < deadline:
        time.sleep(0.01)
        co = co_runner_sessions(os.getppid())
    json.dump({"run_sid": os.getsid(0), "co_sids": co, "seconds_per_epoch": [1.0],
               "global_batch_size": 1, "steps_per_epoch": 1}, open(out, "w"))


def run(session):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness
    harness.CO_RUNNER_SESSION = session
    config = {"cmd": [sys.executable, os.path.abspath(__file__), "probe"], "env": {},
              "kind": "torch", "condition": "co-runner"}
    result = harness.run_one(config, timeout=60)
    if "error" in result:
        raise AssertionError("the probe failed: %s" % result["error"])
    return result


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        probe(sys.argv[sys.argv.index("--out") + 1])
        return
    failures = []
    same = run("same")
    if len(same["co_sids"]) != 1:
        failures.append("same: expected one co-runner beside the run, found %s" % same["co_sids"])
    elif same["co_sids"][0] != same["run_sid"]:
        failures.append("same: the co-runner's session %d differs from the run's %d" %
                        (same["co_sids"][0], same["run_sid"]))
    own = run("own")
    if len(own["co_sids"]) != 1:
        failures.append("own: expected one co-runner beside the run, found %s" % own["co_sids"])
    elif own["co_sids"][0] == own["run_sid"]:
        failures.append("own: the co-runner shares the run's session %d" % own["run_sid"])
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("co-runner sessions: same %s, own %s" % (same, own))


if __name__ == "__main__":
    main()
