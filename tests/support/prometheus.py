"""A real Prometheus for a test: the generated rules evaluated every second, and its readiness awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from sloscope.demo.prometheus import PrometheusServer
from sloscope.generators.rules import rule_file
from sloscope.loading import default_spec

T = TypeVar("T")


def rules_every_second(path: Path) -> Path:
    """The built-in spec's rule file with every group evaluated every second: a rule's ``for:`` still holds, but
    its condition, and so its pending alert, follows the series within a second."""
    rules = rule_file(default_spec())
    for group in rules["groups"]:
        group["interval"] = "1s"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


async def prometheus_ready(http: httpx.AsyncClient, server: PrometheusServer, workdir: Path) -> None:
    """Returns once the server answers ready (a bound of 30 s on its start-up, not a measurement)."""
    for _ in range(60):
        try:
            if (await http.get(f"{server.url}/-/ready")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"Prometheus did not become ready; see {workdir / 'prometheus'}")


async def query(http: httpx.AsyncClient, prometheus: str, expr: str) -> dict[str, Any]:
    """The body of an instant query at ``prometheus`` (its URL); an AssertionError unless it succeeded."""
    response = await http.get(f"{prometheus}/api/v1/query", params={"query": expr})
    body: dict[str, Any] = response.json()
    assert response.status_code == 200 and body["status"] == "success", f"{expr}\n{response.status_code} {body}"
    return body


async def instant(http: httpx.AsyncClient, server: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    """The result vector of an instant query."""
    result: list[dict[str, Any]] = (await query(http, server.url, expr))["data"]["result"]
    return result


def run_beside(prometheus: PrometheusServer, scenario: Callable[[], Awaitable[T]]) -> T:
    """Runs ``scenario`` with ``prometheus`` started, and stops it whatever happens."""

    async def run() -> T:
        await prometheus.start()
        try:
            return await scenario()
        finally:
            await prometheus.stop()

    return asyncio.run(run())
