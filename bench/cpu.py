"""The CPU time a process has used, to the nanosecond rather than the clock tick.

``/proc/<pid>/stat`` counts user and system time in clock ticks (10 ms here). A benchmark slice of 12,500 spans
costs a server 60 to 100 ms of CPU, so a tick is a tenth of it, and the comparisons of ``bench/compare.py`` moved
by more than a change worth measuring (docs/performance.md). The scheduler keeps each thread's time on the CPU in
nanoseconds (``/proc/<pid>/task/<tid>/schedstat``, first field, user and system together): summed over the live
threads it is the process's CPU time at that resolution. A thread that has exited is in neither list any more;
its time is still in the process's ticks, so what the ticks hold beyond the live threads' ticks is added (at tick
resolution: servers keep their threads, so that part is normally zero).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["process_cpu_seconds"]


def _ticks(stat: str) -> int:
    """utime + stime of a ``/proc/.../stat`` line (the fields after the command's closing parenthesis)."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far, every thread (0 once it is gone)."""
    proc = Path(f"/proc/{pid}")
    try:
        process_ticks = _ticks((proc / "stat").read_text())
        tasks = os.listdir(proc / "task")
    except OSError:
        return 0.0
    running_ns = 0
    thread_ticks = 0
    for tid in tasks:
        try:
            schedstat = (proc / "task" / tid / "schedstat").read_text()
            stat = (proc / "task" / tid / "stat").read_text()
        except OSError:  # exited between the listing and now: its time is in the process's ticks
            continue
        running_ns += int(schedstat.split()[0])
        thread_ticks += _ticks(stat)
    exited = max(0, process_ticks - thread_ticks) / os.sysconf("SC_CLK_TCK")
    return running_ns / 1e9 + exited
