#!/usr/bin/python3
"""Measure a memory-bound co-runner's rate over exactly one workload window.

    corun.py CPU L3SIZE DIR -- WORKLOAD...

Starts `stress-ng --stream 1 --stream-l3-size L3SIZE` pinned to CPU
(its pid goes to DIR/sng.pid, its --yaml report to DIR/sng.yaml), waits
until the stressor process is in its measuring loop (process title
"[run]"), runs WORKLOAD (nbdcopy, or `sleep 2` for the co-runner alone),
then stops stress-ng with SIGINT and waits until the stressor has left
its loop (title no longer "[run]").  Every bogo op stress-ng counts was
done between those two moments, so

    rate = bogo ops / (loop end - loop start)

has neither stress-ng's setup (mmap and first touch of the arrays) in it
nor rounding to whole ops.  The window runs past the workload's end by
the op that was in flight (one pass over the arrays, ~25 ms at 16M).

Prints one JSON object:
  ops, window_s, rate        bogo ops, the window, ops per second
  cpu_s, rate_cpu, wait_s    the stressor's CPU time in the window, ops per
                             CPU second, and the time it was runnable but
                             another task had its CPU (/proc/PID/schedstat)
  workload_s, workload_rc    the workload's wall time and exit status
  client_cpu_s               the workload's CPU time (user + system)
  kthread_cpu_s              CPU time of kworker and ksoftirqd threads
  cpu_busy_s                 busy time of every CPU over the window
                             (/proc/stat; 1/CLK_TCK resolution)
"""
import json, os, re, resource, signal, subprocess, sys, time

def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []

def title(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""

def stressor(pid):
    for c in children(pid):
        if "stress-ng-stream" in title(c):
            return c
    return None

def schedstat(pid):
    """(ns on a CPU, ns runnable but waiting for one) of a process."""
    with open(f"/proc/{pid}/schedstat") as f:
        run, wait = f.read().split()[:2]
    return int(run), int(wait)

def cpu_busy():
    """Busy jiffies per CPU (everything but idle and iowait)."""
    busy = []
    with open("/proc/stat") as f:
        for line in f:
            m = re.match(r"cpu(\d+) (.*)", line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                busy.append(sum(v) - v[3] - v[4])
    return busy

def kthread_ns():
    """ns on a CPU of every kworker and ksoftirqd thread, by pid: the
    kernel's share of the I/O path (the loop device's workers, block and
    network softirqs), which no process is charged for."""
    ns = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read()
            if comm.startswith(("kworker/", "ksoftirqd/")):
                ns[pid] = schedstat(pid)[0]
        except (OSError, ValueError):
            pass
    return ns

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def on_term(*_):
    raise SystemExit(143)

def main():
    cpu, l3, d = sys.argv[1:4]
    if sys.argv[4] != "--" or len(sys.argv) < 6:
        sys.exit(__doc__)
    work = sys.argv[5:]
    yaml = os.path.join(d, "sng.yaml")
    for f in (yaml,):
        if os.path.exists(f):
            os.unlink(f)
    signal.signal(signal.SIGTERM, on_term)
    sng = subprocess.Popen(
        ["taskset", "-c", cpu, "stress-ng", "--stream", "1", "--stream-l3-size", l3,
         "-t", "600", "--metrics", "--yaml", yaml],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(d, "sng.pid"), "w") as f:
        f.write(f"{sng.pid}\n")
    hz = os.sysconf("SC_CLK_TCK")
    try:
        deadline = time.monotonic() + 30
        child = None
        while time.monotonic() < deadline:
            child = stressor(sng.pid)
            if child and "[run]" in title(child):
                break
            time.sleep(0.001)
        else:
            sys.exit("corun.py: stress-ng never reached its run loop")
        s1 = schedstat(child)
        k1 = kthread_ns()
        b1 = cpu_busy()
        t1 = time.monotonic()
        cc0 = child_cpu()
        w = subprocess.run(work)
        t2 = time.monotonic()
        cc1 = child_cpu()
        # the stressor may exit as soon as it leaves its loop: keep the
        # last schedstat read while it was still looping
        s3 = schedstat(child)
        sng.send_signal(signal.SIGINT)
        while "[run]" in title(child) and time.monotonic() < t2 + 10:
            try:
                s3 = schedstat(child)
            except OSError:
                break
            time.sleep(0.001)
        t3 = time.monotonic()
        b3 = cpu_busy()
        k3 = kthread_ns()
        sng.wait(timeout=30)
    finally:
        if sng.poll() is None:
            sng.send_signal(signal.SIGINT)
            try:
                sng.wait(timeout=5)
            except subprocess.TimeoutExpired:
                sng.kill()
                sng.wait()
    m = {}
    for line in open(yaml):
        mm = re.match(r"\s+([a-z-]+): ([0-9]+(?:\.[0-9]+)?)\s*$", line)
        if mm:
            m[mm.group(1)] = float(mm.group(2))
    ops = m.get("bogo-ops", 0)
    cpu_s = (s3[0] - s1[0]) / 1e9
    print(json.dumps({
        "ops": ops, "window_s": round(t3 - t1, 4), "rate": ops / (t3 - t1),
        "cpu_s": round(cpu_s, 4), "rate_cpu": ops / cpu_s if cpu_s > 0 else None,
        "wait_s": round((s3[1] - s1[1]) / 1e9, 4),
        "workload_s": round(t2 - t1, 4), "workload_rc": w.returncode,
        "client_cpu_s": round(cc1 - cc0, 3),
        "kthread_cpu_s": round(sum(v - k1.get(p, 0) for p, v in k3.items()) / 1e9, 3),
        "cpu_busy_s": [round((b - a) / hz, 2) for a, b in zip(b1, b3)],
    }))

main()
