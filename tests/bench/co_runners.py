"""The harness's co-runners among a process's children, for the bench tests: found in /proc by
their command line (the spinning loop bench/harness.py starts)."""
import os


def co_runner_pids(parent):
    """Pids of the children of `parent` running the co-runner's loop."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open("/proc/%s/stat" % pid).read()
            cmdline = open("/proc/%s/cmdline" % pid, "rb").read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and "while :; do :; done" in cmdline:
            pids.append(int(pid))
    return pids
