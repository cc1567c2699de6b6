"""bench/cpu.py: a process's CPU time from the scheduler's nanoseconds; a thread that exited keeps what it had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.cpu import ProcessClock, process_cpu_seconds

# A child whose threads (argv[2]) each spin for argv[1] seconds of CPU and then wait; on a line from stdin they exit.
CHILD = """
import sys, threading, time
def burn(seconds, spun, go):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    spun.release()
    go.wait()
spun, go = threading.Semaphore(0), threading.Event()
workers = [threading.Thread(target=burn, args=(float(sys.argv[1]), spun, go)) for _ in range(int(sys.argv[2]))]
for worker in workers:
    worker.start()
for _ in workers:
    spun.acquire()
print("spun", flush=True)
sys.stdin.readline()
go.set()
for worker in workers:
    worker.join()
print("done", flush=True)
sys.stdin.read()
"""


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads_ns(pid: int) -> int:
    task = Path(f"/proc/{pid}/task")
    return sum(int((task / tid / "schedstat").read_text().split()[0]) for tid in os.listdir(task))


class Spinner:
    """The child above, its threads spun and waiting."""

    def __init__(self, burn: float, threads: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(burn), str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self._line() == "spun\n"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def let_threads_exit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self._line() == "done\n"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


linux = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")


@linux
def test_a_thread_that_exited_keeps_the_time_it_had_when_last_read() -> None:
    burn = 0.3
    child = Spinner(burn, 1)
    try:
        clock = ProcessClock(child.proc.pid)
        seen = clock.seconds()
        assert seen >= burn
        child.let_threads_exit()
        after = clock.seconds()
        tick = 1 / os.sysconf("SC_CLK_TCK")
        # the spinner is gone from /proc: its 0.3 s stay, and the process's ticks agree
        assert clock.vanished == 1
        assert after >= seen
        assert abs(after - _ticks(child.proc.pid)) <= 3 * tick
    finally:
        child.kill()
    assert clock.seconds() == after  # the process gone: what it had
    assert process_cpu_seconds(child.proc.pid) == 0.0  # never read while it lived: nothing known


@linux
def test_many_threads_read_as_their_own_nanoseconds_without_the_ticks_rounding() -> None:
    """Eight idle threads that spun 15 ms each: the reading is the sum of their schedstat, exactly. The process's
    ticks less the threads' ticks is several ticks here (each thread's time rounded down apart), which the first
    version of the clock added as the time of threads that had exited when none had."""
    child = Spinner(0.015, 8)
    try:
        clock = ProcessClock(child.proc.pid)
        reading = clock.seconds()
        assert abs(reading - _threads_ns(child.proc.pid) / 1e9) < 1e-3  # the child is idle: only reading costs
        assert clock.vanished == 0
    finally:
        child.kill()


# A child that spins for a millisecond of CPU each time it is asked (one line in, one line out).
STEPPER = """
import sys, time
for _ in sys.stdin:
    end = time.thread_time() + 0.001
    while time.thread_time() < end:
        pass
    print("ok", flush=True)
"""


@linux
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
