"""``sloscope serve`` as a child process of the demo, configured for the simulated pool.

The demo runs the real exporter the way an operator would: a settings file and an SLO spec file in a
working folder, the ``serve`` command, its log in a file, the bound ports read from its start-up line,
SIGTERM to stop it (it drains and flushes, see docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sloscope.demo.router import REFRESH_SECONDS
from sloscope.service.server import BoundPorts

__all__ = ["FAILURE_WINDOW_SECONDS", "SloscopeProcess", "demo_settings"]

FAILURE_WINDOW_SECONDS = 4.0  # join.failure_window_seconds of the llm-d demo (the default is 15 s)


def demo_settings(
    pool: str,
    pods: list[tuple[str, str]],
    training_url: str,
    prediction_urls: list[str],
    *,
    metrics_port: int = 0,
    store: Path | None = None,
    upstream: str = "gie-2025",
    epp_metrics_url: str | None = None,
) -> dict[str, Any]:
    """Settings for the simulated pool: pods by address and name, the predictor, its EPP's /metrics, fast loops.

    The EPP's page is scraped without credentials (``auth: {}``): the simulated EPP serves it openly, where a
    real one authenticates /metrics by default. The pods and the EPP are scraped as often as the router scrapes
    the pods, so that a shadow prediction is given a pod state about as old as the router's was.

    For the llm-d upstream, a failed request (no model-server span) is emitted 4 s after its gateway span
    arrived rather than 15 s, and a trace holds up to 256 spans: an agent session's five calls, P/D ones
    included, make up to about 150.
    """
    settings: dict[str, Any] = {
        "slo_spec": "slo.yaml",
        "listeners": {"host": "127.0.0.1", "otlp_grpc_port": 0, "otlp_http_port": 0, "metrics_port": metrics_port},
        "final_scrape_wait_seconds": 0,
        "join": {"window_seconds": 2.0, "trace_ttl_seconds": 10.0},
        "scrape": {"interval_seconds": REFRESH_SECONDS, "timeout_seconds": 1.0, "stale_after_seconds": 10.0},
        "predictions": {
            "batch_wait_seconds": 0.5,
            "health_interval_seconds": 2.0,
            "timeout_seconds": 1.0,
            "breaker_open_seconds": 5.0,
        },
        "headroom": {"interval_seconds": 2.0},
        "pools": [
            {
                "name": pool,
                "targets": {"static": [{"address": address, "pod": name} for name, address in pods]},
                "predictor": {"training_url": training_url, "prediction_urls": prediction_urls},
                # the demo's EPP and predictor stream: they predict and record TTFT at the first token, and TPOT
                "streaming_mode": True,
            }
        ],
    }
    if epp_metrics_url is not None:
        settings["pools"][0]["epp"] = {"metrics_url": epp_metrics_url, "auth": {}}
    if upstream == "llm-d":
        settings["join"].update({"failure_window_seconds": FAILURE_WINDOW_SECONDS, "max_spans_per_trace": 256})
    if store is not None:
        settings["store"] = {"enabled": True, "directory": str(store), "flush_interval_seconds": 5.0}
    return settings


@dataclass
class SloscopeProcess:
    workdir: Path
    process: asyncio.subprocess.Process | None = None
    grpc_port: int = 0
    http_port: int = 0
    metrics_port: int = 0
    _log_task: asyncio.Task[None] | None = None

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sloscope.log"

    async def start(self, settings: dict[str, Any], spec: dict[str, Any], timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "settings.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        (self.workdir / "slo.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("SLOSCOPE_", "OTEL_"))}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sloscope",
            "serve",
            "--config",
            str(self.workdir / "settings.yaml"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            await asyncio.wait_for(self._read_ports(), timeout)
        except (TimeoutError, RuntimeError) as exc:
            await self.stop()
            raise RuntimeError(f"sloscope serve did not start; see {self.log_path}") from exc
        self._log_task = asyncio.get_running_loop().create_task(self._copy_log(self.process))

    async def _read_ports(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        with self.log_path.open("a") as log:
            while True:
                line = (await self.process.stderr.readline()).decode()
                if not line:
                    raise RuntimeError("sloscope serve exited")
                log.write(line)
                bound = BoundPorts.from_log(line)
                if bound is not None:
                    self.grpc_port, self.http_port, self.metrics_port = bound.otlp_grpc, bound.otlp_http, bound.metrics
                    return

    async def _copy_log(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        with self.log_path.open("a") as log:
            while line := await process.stderr.readline():
                log.write(line.decode())
                log.flush()

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then wait for the drain; returns the exit status."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return process.returncode if process else None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            status = await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            status = await process.wait()
        if self._log_task is not None:
            await self._log_task  # the rest of the log, up to the exit
        return status
