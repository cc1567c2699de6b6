"""An optional Prometheus server for the demo, scraping sloscope, so its series can be queried and graphed.

Used with ``sloscope demo --with-prometheus``: the binary is the one given, else ``prometheus`` on the PATH,
else the one ``make test`` bootstraps into ``.tools/bin``. The generated rule file ``alerts/sloscope-rules.yaml``
is loaded when it exists (not the PrometheusRule beside it, which is a Kubernetes object). Its data lives in
the demo's working folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from pathlib import Path

import yaml

from sloscope.demo.ports import free_port
from sloscope.generators import RULES_FILE

__all__ = ["PrometheusServer", "find_prometheus"]

_REPO = Path(__file__).resolve().parents[3]


def find_prometheus(given: str | None = None) -> Path | None:
    """The binary given (and only it, when given), else ``prometheus`` on the PATH, else ``.tools/bin``'s."""
    candidates = (given,) if given else (shutil.which("prometheus"), str(_REPO / ".tools" / "bin" / "prometheus"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


class PrometheusServer:
    def __init__(
        self,
        binary: Path,
        workdir: Path,
        metrics_port: int,
        *,
        rule_files: list[Path] | None = None,
        interval: str = "2s",
    ) -> None:
        """``rule_files``: the rule files to load (default: those under ``alerts/``); ``interval``: the scrape
        and evaluation interval."""
        self._binary = binary
        self._workdir = workdir / "prometheus"
        self._metrics_port = metrics_port
        self._rule_files = rule_files
        self._interval = interval
        self.port = free_port()
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        if self._rule_files is not None:
            rules = [str(p) for p in self._rule_files]
        else:
            rules = [str(path)] if (path := _REPO / "alerts" / RULES_FILE).is_file() else []
        config = {
            "global": {"scrape_interval": self._interval, "evaluation_interval": self._interval},
            "rule_files": rules,
            "scrape_configs": [
                {"job_name": "sloscope", "static_configs": [{"targets": [f"127.0.0.1:{self._metrics_port}"]}]}
            ],
        }
        path = self._workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        with (self._workdir / "prometheus.log").open("w") as log:
            self._process = await asyncio.create_subprocess_exec(
                str(self._binary),
                f"--config.file={path}",
                f"--storage.tsdb.path={self._workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--enable-feature=exemplar-storage",
                stdout=log,
                stderr=log,
            )

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            await process.wait()
