"""Fixed ports for child processes lie below the ephemeral range; a serve started on port 0 tells its ports."""

from __future__ import annotations

import socket
from pathlib import Path

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


def test_a_port_taken_by_a_listener_is_not_given() -> None:
    (taken,) = free_ports(1)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        assert taken not in free_ports(200)


def test_the_listening_line_gives_the_bound_ports() -> None:
    line = "INFO sloscope.service.server: sloscope listening: otlp_grpc=::1:4317 otlp_http=::1:4318 metrics=::1:9464"
    assert BoundPorts.from_log(line) == BoundPorts(4317, 4318, 9464)
    assert BoundPorts.from_log("listener security: tls on none") is None
