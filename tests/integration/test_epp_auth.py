"""The EPP's /metrics behind authentication and TLS: a real HTTPS server on loopback, real certificates.

What the EPP does, read in llm-d-router at ebab687927f5331c1b39defcb579a07951bce56c:

- ``pkg/epp/server/options.go:156`` defaults ``MetricsEndpointAuth`` to true (flag
  ``--metrics-endpoint-auth``, line 233), and ``cmd/epp/runner/runner.go:391-399`` then installs
  controller-runtime's ``filters.WithAuthenticationAndAuthorization`` in front of /metrics.
- That filter (controller-runtime v0.23.3, ``go.mod:58``; ``pkg/metrics/filters/filters.go:83-119`` at
  f9589b9f) checks the bearer token with a TokenReview, answers 401 ``Unauthorized`` when it is missing
  or refused, then a SubjectAccessReview of verb ``get`` (the method, lowercased) on the non-resource
  URL ``/metrics`` and 403 ``Authorization denied for user <name>`` when that is not allowed. Hence the
  ClusterRole a scraper needs (``filters.go:29-32``; the ServiceMonitor's in llm-d-router's
  ``config/charts/routerlib/templates/_gke.yaml:60-67``): ``nonResourceURLs: ["/metrics"]``, ``get``.
- TLS is off by default: ``pkg/epp/server/options.go:335-339`` (``ConfigureMetricsTLS``) turns secure
  serving on only with ``--metrics-cert-dir`` or ``--metrics-client-ca-file`` (the latter requiring
  client certificates, line 358); with a cert dir that holds no ``tls.crt``/``tls.key``,
  controller-runtime serves a self-signed certificate for ``localhost`` and 127.0.0.1
  (``pkg/metrics/server/server.go:311-318``), which only ``insecure_skip_verify`` accepts.

The server here answers as that filter does (tests/support/tls_epp.py); its certificate names one DNS
name and not 127.0.0.1, so a verified scrape needs both the CA file and the server name.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope import conventions as c
from sloscope.config import HTTPClientConfig, TLSConfig
from sloscope.publishers.epp import EPPCollector
from sloscope.receivers.epp import EPPScraper
from sloscope.receivers.http_auth import HTTPClients
from sloscope.telemetry import Telemetry
from tests.support.tls_epp import PKI, AuthenticatingEPP, make_pki

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

ACCOUNT = "system:serviceaccount:monitoring:sloscope"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.first-token"  # shaped like a ServiceAccount JWT; never to appear in a log
ROTATED = "eyJhbGciOiJSUzI1NiJ9.rotated-token"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LABELS = f'model="{LLAMA}",pool="pool-a",target_model="{LLAMA}"'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def page(shared: Path) -> str:
    return (shared / "fixtures/epp/slo-metrics-constructed-from-code.prom").read_text()


@pytest.fixture
def epp(pki: PKI, page: str) -> Iterator[AuthenticatingEPP]:
    with AuthenticatingEPP(pki, page) as server:
        server.tokens = {TOKEN: ACCOUNT, ROTATED: ACCOUNT}
        server.allowed = {ACCOUNT}
        yield server


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "serviceaccount" / "token"
    path.parent.mkdir()
    path.write_text(TOKEN + "\n")
    return path


def rotate(path: Path, token: str) -> None:
    """Replace the token as the kubelet does: write a new file beside it and rename it over the old one."""
    fresh = path.with_name(".token.new")
    fresh.write_text(token)
    os.replace(fresh, path)


@dataclass
class Outcome:
    results: list[str]
    registry: CollectorRegistry

    def scrapes(self, result: str) -> float:
        value = self.registry.get_sample_value(f"{c.SCRAPES.name}_total", {"kind": c.KIND_EPP, "result": result})
        assert value is not None, f"no {result} series: every result must start at zero"
        return value

    def epp_lines(self) -> list[str]:
        text = generate_latest(self.registry).decode()
        return [line for line in text.splitlines() if line.startswith("sloscope_epp_")]


def scrape(url: str, auth: HTTPClientConfig, times: int = 1, between: Callable[[int], None] | None = None) -> Outcome:
    """``times`` scrapes of the EPP through the client sloscope builds for ``auth``; ``between(i)`` after the i-th."""
    registry = CollectorRegistry()
    telemetry = Telemetry(registry)

    async def run() -> list[str]:
        clients = HTTPClients(httpx.Limits(max_connections=4))
        scraper = EPPScraper("pool-a", url, clients.get(auth), telemetry, 5.0, 5.0, stale_after=30.0)
        registry.register(EPPCollector(lambda: [scraper.latest]))
        results = []
        try:
            for i in range(times):
                results.append(await scraper.scrape_once())
                if between is not None:
                    between(i)
        finally:
            await clients.aclose()
        return results

    return Outcome(asyncio.run(run()), registry)


def verified(pki: PKI, token_file: Path | None, **tls: Any) -> HTTPClientConfig:
    settings: dict[str, Any] = {"ca_file": str(pki.ca), "server_name": pki.server_name, **tls}
    return HTTPClientConfig(credentials_file=str(token_file) if token_file else None, tls_config=TLSConfig(**settings))


def test_the_token_from_the_file_is_sent_and_the_server_verified_against_the_ca_and_server_name(
    epp: AuthenticatingEPP, pki: PKI, token_file: Path
) -> None:
    outcome = scrape(epp.url, verified(pki, token_file))
    assert outcome.results == [c.RESULT_SUCCESS]
    assert epp.authorizations == [f"Bearer {TOKEN}"]  # stripped of the file's newline
    assert f"sloscope_epp_ttft_seconds_count{{{LABELS}}} 1.0" in outcome.epp_lines()
    assert f"sloscope_epp_ttft_seconds_sum{{{LABELS}}} 0.231" in outcome.epp_lines()
    assert outcome.scrapes(c.RESULT_SUCCESS) == 1


def test_a_rotated_token_file_is_sent_at_the_next_scrape(epp: AuthenticatingEPP, pki: PKI, token_file: Path) -> None:
    outcome = scrape(epp.url, verified(pki, token_file), times=2, between=lambda _: rotate(token_file, ROTATED))
    assert outcome.results == [c.RESULT_SUCCESS, c.RESULT_SUCCESS]
    assert epp.authorizations == [f"Bearer {TOKEN}", f"Bearer {ROTATED}"]


@pytest.mark.parametrize(
    ("known", "allowed", "reason"),
    [
        pytest.param({}, set(), "HTTP 401: Unauthorized", id="a token the TokenReview refuses is 401"),
        pytest.param(
            {TOKEN: ACCOUNT}, set(), f"HTTP 403: Authorization denied for user {ACCOUNT}", id="no RBAC is 403"
        ),
    ],
)
def test_a_refusal_counts_auth_error_not_http_error(
    epp: AuthenticatingEPP,
    pki: PKI,
    token_file: Path,
    caplog: pytest.LogCaptureFixture,
    known: dict[str, str],
    allowed: set[str],
    reason: str,
) -> None:
    epp.tokens, epp.allowed = known, allowed
    with caplog.at_level(logging.DEBUG):
        outcome = scrape(epp.url, verified(pki, token_file))
    assert outcome.results == [c.RESULT_AUTH_ERROR]
    assert (outcome.scrapes(c.RESULT_AUTH_ERROR), outcome.scrapes(c.RESULT_HTTP_ERROR)) == (1, 0)
    assert epp.authorizations == [f"Bearer {TOKEN}"]
    assert f"scrape failed (auth_error: {reason})" in caplog.text
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("tls", "result"),
    [
        pytest.param({"ca_file": None}, c.RESULT_TLS_ERROR, id="not signed by a CA the system trusts"),
        pytest.param({"server_name": None}, c.RESULT_TLS_ERROR, id="the certificate does not name 127.0.0.1"),
        pytest.param({"server_name": "other.inference.svc"}, c.RESULT_TLS_ERROR, id="a wrong server name"),
        pytest.param(
            {"ca_file": None, "server_name": None, "insecure_skip_verify": True},
            c.RESULT_SUCCESS,
            id="insecure_skip_verify accepts it",
        ),
    ],
)
def test_an_unverified_certificate_is_refused_unless_insecure_skip_verify(
    epp: AuthenticatingEPP, pki: PKI, token_file: Path, tls: dict[str, Any], result: str
) -> None:
    outcome = scrape(epp.url, verified(pki, token_file, **tls))
    assert outcome.results == [result]
    # A refused certificate fails the handshake: the token never left sloscope.
    assert epp.authorizations == ([f"Bearer {TOKEN}"] if result == c.RESULT_SUCCESS else [])
    assert outcome.scrapes(c.RESULT_CONNECTION_ERROR) == 0


def test_a_missing_token_file_is_credentials_error_and_nothing_is_sent(
    epp: AuthenticatingEPP, pki: PKI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-dir" / "token"
    with caplog.at_level(logging.WARNING):
        outcome = scrape(epp.url, verified(pki, missing))
    assert outcome.results == [c.RESULT_CREDENTIALS_ERROR]
    assert epp.authorizations == []
    assert f"cannot read the bearer token file {missing}: No such file or directory" in caplog.text


def test_mutual_tls_sends_the_client_certificate(pki: PKI, page: str, token_file: Path) -> None:
    """An EPP started with --metrics-client-ca-file requires a client certificate (options.go:358). TLS 1.2,
    so that the refusal is a failed handshake whatever the server's TLS stack (tests/support/tls_epp.py)."""
    with AuthenticatingEPP(pki, page, client_ca=pki.ca, tls12=True) as epp:
        epp.tokens, epp.allowed = {TOKEN: ACCOUNT}, {ACCOUNT}
        without = scrape(epp.url, verified(pki, token_file))
        with_cert = scrape(
            epp.url, verified(pki, token_file, cert_file=str(pki.client_cert), key_file=str(pki.client_key))
        )
    assert (without.results, with_cert.results) == ([c.RESULT_TLS_ERROR], [c.RESULT_SUCCESS])
    assert epp.authorizations == [f"Bearer {TOKEN}"]


def test_sloscope_serve_scrapes_the_epp_with_its_token_and_never_logs_it(
    serve: Callable[..., Server], epp: AuthenticatingEPP, pki: PKI, token_file: Path
) -> None:
    auth = {
        "credentials_file": str(token_file),
        "tls_config": {"ca_file": str(pki.ca), "server_name": pki.server_name},
    }
    # The pods' pages (here the same server) get a token of their own, one the server does not know.
    pod_token = token_file.with_name("pod-token")
    pod_token.write_text("pod-token-unknown-to-the-server")
    pod_auth = {**auth, "credentials_file": str(pod_token)}
    address = epp.url.removeprefix("https://").removesuffix("/metrics")
    pool = {
        "name": "pool-a",
        "scheme": "https",
        "auth": pod_auth,
        "targets": {"static": [{"address": address, "pod": "vllm-0"}]},
        "epp": {"metrics_url": epp.url, "auth": auth},
    }
    server = serve(log_level="DEBUG", scrape={"interval_seconds": 0.2}, pools=[pool])
    wait_until(lambda: server.value("sloscope_epp_ttft_seconds_count", **_labels()) == 1.0, what="the EPP's series")
    scrapes = f"{c.SCRAPES.name}_total"
    wait_until(lambda: server.value(scrapes, kind=c.KIND_MODEL_SERVER, result=c.RESULT_AUTH_ERROR) >= 1, what="pods")
    # Each kind sent its own token and counted its own outcome.
    assert set(epp.authorizations) == {f"Bearer {TOKEN}", "Bearer pod-token-unknown-to-the-server"}
    assert server.value(scrapes, kind=c.KIND_EPP, result=c.RESULT_AUTH_ERROR) == 0
    assert server.value(scrapes, kind=c.KIND_MODEL_SERVER, result=c.RESULT_SUCCESS) == 0
    rotate(token_file, "not-a-known-token")
    wait_until(
        lambda: server.value(f"{c.SCRAPES.name}_total", kind=c.KIND_EPP, result=c.RESULT_AUTH_ERROR) >= 1,
        what="the refused token counted as auth_error",
    )
    assert server.stop() == 0
    log = "\n".join(server.log)
    assert f"EPP of pool pool-a: scraped with the bearer token in {token_file}" in log
    assert "scrape failed (auth_error: HTTP 401: Unauthorized)" in log
    assert TOKEN not in log and "not-a-known-token" not in log and "pod-token-unknown" not in log


def _labels() -> dict[str, str]:
    return {"pool": "pool-a", "model": LLAMA, "target_model": LLAMA}
