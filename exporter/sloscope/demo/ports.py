"""Loopback ports for child processes that are told their port before they bind it.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range every outgoing
connection takes its local port from; between choosing such a port and the child binding it, a client connection
of another process (an API server talking to etcd, a scrape) may take it, and the child fails with "Address already
in use". So the ports chosen here lie *below* the ephemeral range, where only listeners that ask for them by
number go, and this process never hands the same one out twice.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_LOWEST = 10_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports, free now, outside the ephemeral range and not given before by this process."""
    highest = _ephemeral_start() - 1
    if highest <= _LOWEST:
        raise RuntimeError(f"the ephemeral port range starts at {highest + 1}: no room below it for fixed ports")
    chosen: list[int] = []
    for _ in range(50 * n):
        if len(chosen) == n:
            break
        port = random.randint(_LOWEST, highest)
        if port in _given or not _bindable(port):
            continue
        _given.add(port)
        chosen.append(port)
    if len(chosen) < n:
        raise RuntimeError(f"found only {len(chosen)} of {n} free loopback ports in {_LOWEST}-{highest}")
    return chosen


def free_port() -> int:
    (port,) = free_ports(1)
    return port
