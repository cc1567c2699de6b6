"""bench/cpu.py: a process's CPU time from the scheduler's nanoseconds, a thread that exited still counted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench.cpu import process_cpu_seconds

# A child that spins in a thread for BURN seconds of CPU, lets that thread exit, then waits to be read.
CHILD = """
import sys, threading, time
def burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=burn, args=(float(sys.argv[1]),))
worker.start()
worker.join()
print("done", flush=True)
sys.stdin.read()
"""
BURN = 0.3


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_a_thread_that_exited_is_still_counted_and_agrees_with_the_kernels_ticks() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(BURN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        time.sleep(0.05)
        measured = process_cpu_seconds(child.pid)
        ticks = _ticks(child.pid)
        tick = 1 / os.sysconf("SC_CLK_TCK")
        # the spinning thread is gone: its 0.3 s come from the process's ticks, the rest from the live threads
        assert measured >= BURN
        assert abs(measured - ticks) <= 3 * tick
    finally:
        child.kill()
        child.wait()
    assert process_cpu_seconds(child.pid) == 0.0  # gone


# A child that spins for a millisecond of CPU each time it is asked (one line in, one line out).
STEPPER = """
import sys, time
for _ in sys.stdin:
    end = time.thread_time() + 0.001
    while time.thread_time() < end:
        pass
    print("ok", flush=True)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_a_live_process_is_read_finer_than_a_clock_tick() -> None:
    """Readings a millisecond of a child's work apart differ by about that, not by 0 or a whole 10 ms tick (the
    child, not this process: a test run's own threads make each reading cost more than a millisecond)."""
    tick = 1 / os.sysconf("SC_CLK_TCK")
    child = subprocess.Popen([sys.executable, "-c", STEPPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write("go\n")  # started: the interpreter's start-up is behind it
        child.stdin.flush()
        assert child.stdout.readline() == "ok\n"
        steps = []
        for _ in range(20):
            before = process_cpu_seconds(child.pid)
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "ok\n"
            steps.append(process_cpu_seconds(child.pid) - before)
    finally:
        child.kill()
        child.wait()
    assert all(0.001 <= step < tick for step in steps), steps
