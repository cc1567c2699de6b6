"""Running an OpenTelemetry Collector distribution (Jaeger v2, the builder's otelcol-sloscope) for a test.

Both are Collector binaries: started with ``--config=file:PATH``, ready once the service logs that every pipeline
runs (the receivers start last), stopped with SIGTERM.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

READY = "Everything is ready"


def start(binary: Path, config: Path, what: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The process and its log (filled as it runs), once it is ready; an AssertionError with the log if not."""
    process = subprocess.Popen(
        [str(binary), f"--config=file:{config}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    log: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            log.append(line.rstrip())
            if READY in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or process.poll() is not None:
        stop(process)
        raise AssertionError(f"{what} did not start:\n" + "\n".join(log[-30:]))
    return process, log


@dataclass
class Otelcol:
    """A running Collector distribution and its OTLP receiver's loopback ports."""

    process: subprocess.Popen[str]
    otlp_grpc_port: int
    otlp_http_port: int
    config: Path
    log: list[str]

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}/v1/traces"

    def stop(self) -> None:
        stop(self.process)


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
