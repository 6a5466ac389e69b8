#!/usr/bin/python3
"""Sample the peak RSS (VmHWM) of every child of PID until SIGUSR1;
print the sum of the children's peaks in kB.  nbd-server forks one
child per connection, so its memory is the parent's plus these."""
import os, signal, sys, time

pid = sys.argv[1]
peaks = {}
stop = False

def on_usr1(*_):
    global stop
    stop = True

signal.signal(signal.SIGUSR1, on_usr1)
if len(sys.argv) > 2:
    open(sys.argv[2], "w").close()      # tell bench/run the handler is in place

def children():
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []

def sample():
    for c in children():
        try:
            with open(f"/proc/{c}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        kb = int(line.split()[1])
                        peaks[c] = max(peaks.get(c, 0), kb)
        except OSError:
            pass

while not stop:
    sample()
    time.sleep(0.1)
print(sum(peaks.values()))
