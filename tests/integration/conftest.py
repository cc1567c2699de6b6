"""A real ``sloscope serve`` process on loopback, with ports read back from its log."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sloscope.service.server import BoundPorts
from tests.conftest import tool
from tests.support.jaeger import Jaeger, start_jaeger
from tests.support.series import Samples, page, samples
from tests.support.serving import RunningServer


@dataclass
class Server:
    process: subprocess.Popen[str]
    grpc_port: int
    http_port: int
    metrics_port: int
    log: list[str] = field(default_factory=list)

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1/traces"

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    def text(self) -> str:
        """/metrics in the Prometheus text format."""
        return page(self.url("/metrics"))

    def samples(self) -> Samples:
        """Every sample of /metrics keyed by (name, labels)."""
        return samples(self.text())

    def value(self, name: str, **labels: str) -> float:
        """One sample's value; 0 when the series does not exist (a counter never incremented)."""
        return self.samples().get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """Sum of every series of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples().items() if n == name and wanted <= ls)

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match
        return int(match.group(1)) * 1024


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ingest-limit-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="limits.max_request_bytes of the ingest limit tests (their largest bodies); default the setting's",
    )
    parser.addoption(
        "--grpc-server",
        choices=("grpcio", "native"),
        default=None,
        help="serve OTLP/gRPC with this listeners.grpc.server in every server of the native engine whose settings "
        "do not name one (make test runs the OTLP tests a second time with grpcio)",
    )
    parser.addoption(
        "--http-server",
        choices=("uvicorn", "native"),
        default=None,
        help="serve OTLP/HTTP with this listeners.otlp_http_server in every server of the native engine whose "
        "settings do not name one (make test runs the OTLP tests a second time with uvicorn)",
    )


GRPC_SERVER: list[str] = []  # the --grpc-server option, set once the options are parsed
HTTP_SERVER: list[str] = []  # the --http-server option


def pytest_configure(config: pytest.Config) -> None:
    chosen = config.getoption("--grpc-server", default=None)
    GRPC_SERVER[:] = [chosen] if chosen else []
    chosen = config.getoption("--http-server", default=None)
    HTTP_SERVER[:] = [chosen] if chosen else []


@pytest.fixture
def ingest_limit_bytes(request: pytest.FixtureRequest) -> int:
    value: int = request.config.getoption("--ingest-limit-bytes")
    return value


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_server(
    tmp_path: Path, settings: dict[str, Any], *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Server:
    """``sloscope serve`` with ``settings``; ``prefix`` runs before the command (it must exec it), ``env`` adds
    variables to the environment (which has no SLOSCOPE_ or OTEL_ variable of the test's own)."""
    base = {
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": 0},
        "final_scrape_wait_seconds": 0,
    }
    merged = {**base, **settings, "listeners": {**base["listeners"], **settings.get("listeners", {})}}
    grpc, native = merged["listeners"].get("grpc", {}), merged.get("join", {}).get("engine") != "python"
    if GRPC_SERVER and native and "server" not in grpc:
        merged["listeners"]["grpc"] = {**grpc, "server": GRPC_SERVER[0]}
    if HTTP_SERVER and native:
        merged["listeners"].setdefault("otlp_http_server", HTTP_SERVER[0])
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(merged))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLOSCOPE_", "OTEL_"))} | dict(env or {})
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "sloscope", "serve", "--config", str(path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=environ,
    )
    log: list[str] = []
    ports: list[int] = []
    found = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line.rstrip())
            bound = BoundPorts.from_log(line)
            if bound is not None and not ports:
                ports.extend((bound.otlp_grpc, bound.otlp_http, bound.metrics))
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(30) or not ports:
        process.kill()
        raise AssertionError("sloscope serve did not start:\n" + "\n".join(log))
    return Server(process, ports[0], ports[1], ports[2], log)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def factory(*, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None, **settings: Any) -> Server:
        server = start_server(tmp_path, settings, prefix=prefix, env=env)
        started.append(server)
        return server

    yield factory
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(10)


@pytest.fixture
def start() -> Iterator[Callable[[RunningServer], RunningServer]]:
    """Starts stand-in servers (the predictor's, on loopback) for one test and stops them after it."""
    started: list[RunningServer] = []

    def run(server: RunningServer) -> RunningServer:
        started.append(server.start())
        return server

    yield run
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """A real Jaeger v2 (the pinned ``make tools`` build) receiving OTLP; see tests/support/jaeger.py."""
    binary = tool("jaeger")
    process = start_jaeger(binary, tmp_path_factory.mktemp("jaeger"))
    yield process
    process.stop()
