"""The CPU time a process has used, to the nanosecond rather than the clock tick.

``/proc/<pid>/stat`` counts user and system time in clock ticks (10 ms here). A benchmark slice of 12,500 spans
costs a server 60 to 100 ms of CPU, so a tick is a tenth of it, and the comparisons of ``bench/compare.py`` moved
by more than a change worth measuring (docs/performance.md). The scheduler keeps each thread's time on the CPU in
nanoseconds (``/proc/<pid>/task/<tid>/schedstat``, first field, user and system together): summed over the threads
it is the process's CPU time at that resolution.

A thread that has exited is in no list any more. An earlier version took its time from the process's ticks less
the live threads' ticks. That difference is not zero when no thread has exited: the kernel rounds each thread's
time down to a tick, and the process's once, so with a dozen threads under load it wandered by up to 4 ticks
between readings (40 ms: 3 µs a span on a slice of 13,000 spans, more than the gap being measured). So a
:class:`ProcessClock` remembers every thread it has seen, with its last reading: a thread that exits keeps the time
it had when last read. What it loses is a thread's time after its last reading, and all of a thread born and gone
between two readings; ``vanished`` counts the threads that went, so that a benchmark can say when that happened
(the servers measured keep their threads: thread pools, the Go runtime's threads).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ProcessClock", "clock_of", "process_cpu_seconds"]

_clocks: dict[int, ProcessClock] = {}


class ProcessClock:
    """User + system CPU time of process ``pid``, every thread it was seen to have, to the nanosecond."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._task = Path(f"/proc/{pid}/task")
        # (tid, start time in ticks since boot): a tid the kernel hands out again is another thread
        self._last_ns: dict[tuple[str, str], int] = {}
        self._live: set[tuple[str, str]] = set()
        self.vanished = 0

    def seconds(self) -> float:
        """CPU seconds so far; once the process is gone, what it had when last read."""
        try:
            tids = os.listdir(self._task)
        except OSError:
            tids = []
        live = set()
        for tid in tids:
            try:
                stat = (self._task / tid / "stat").read_text()
                schedstat = (self._task / tid / "schedstat").read_text()
            except OSError:  # exited between the listing and now: it keeps its last reading
                continue
            thread = (tid, stat.rsplit(")", 1)[1].split()[19])
            self._last_ns[thread] = int(schedstat.split()[0])
            live.add(thread)
        self.vanished += len(self._live - live)
        self._live = live
        return sum(self._last_ns.values()) / 1e9


def clock_of(pid: int) -> ProcessClock:
    """The one clock of process ``pid`` for the benchmark's run, so that every reader of a server shares the threads
    seen (a benchmark outlives no pid it starts, so a pid is never another process)."""
    clock = _clocks.get(pid)
    if clock is None:
        clock = _clocks[pid] = ProcessClock(pid)
    return clock


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (:func:`clock_of`)."""
    return clock_of(pid).seconds()
