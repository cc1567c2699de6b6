"""Fixed ports for child processes lie below the ephemeral range; a serve started on port 0 tells its ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sloscope.demo import ports
from sloscope.demo.ports import free_ports
from sloscope.service.server import BoundPorts


def ephemeral_start() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_distinct_bindable_below_the_ephemeral_range_and_never_given_twice() -> None:
    first, second = free_ports(40), free_ports(40)
    assert len(set(first + second)) == 80
    assert all(10_000 <= port < ephemeral_start() for port in first + second)
    for port in first:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_taken_by_a_listener_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))  # a port free_ports never handed out (the ephemeral range is no matter here)
        listener.listen()
        taken = listener.getsockname()[1]
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            free = other.getsockname()[1]
        draws = iter([taken, taken, free])
        monkeypatch.setattr(ports, "_given", set())
        monkeypatch.setattr(ports.random, "randint", lambda low, high: next(draws))
        assert free_ports(1) == [free]  # the listener's port was drawn twice, and passed over both times


def test_the_listening_line_gives_the_bound_ports() -> None:
    line = "INFO sloscope.service.server: sloscope listening: otlp_grpc=::1:4317 otlp_http=::1:4318 metrics=::1:9464"
    assert BoundPorts.from_log(line) == BoundPorts(4317, 4318, 9464)
    assert BoundPorts.from_log("listener security: tls on none") is None
