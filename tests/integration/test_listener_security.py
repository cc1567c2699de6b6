"""TLS, client certificates and credentials on a real ``sloscope serve``, with the OpenTelemetry SDK's exporters.

The exporters are the real ``opentelemetry-exporter-otlp-proto-grpc`` and ``-http`` 1.45.2 (pyproject.toml):
over gRPC the channel credentials carry the CA and the client certificate and ``headers`` become call
metadata; over HTTP ``certificate_file``, ``client_certificate_file`` and ``client_key_file`` go to
``requests`` and ``headers`` to every POST (opentelemetry/exporter/otlp/proto/http/trace_exporter/__init__.py,
``__init__``). Neither retries 401 or UNAUTHENTICATED, so a refused export returns FAILURE at once.
The certificates are a throwaway CA, a server certificate for ``localhost`` and a client certificate,
made with the openssl CLI (tests/support/tls_epp.py).
"""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sloscope import conventions as c
from sloscope.testing import vllm_attributes
from tests.support.series import Samples, samples
from tests.support.tls_epp import PKI, make_pki

from .conftest import Server, start_server, wait_until

pytestmark = pytest.mark.integration

TOKEN = "s3cr3t-token-value"
HOST = "localhost"  # the server certificate's only name
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _spans() -> list[ReadableSpan]:
    sink = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm", "k8s.pod.name": "vllm-0"}))
    provider.add_span_processor(SimpleSpanProcessor(sink))
    attributes = vllm_attributes(ttft=0.1, e2e=1.0, completion_tokens=10)
    provider.get_tracer("vllm.llm_engine").start_span("llm_request", attributes=attributes).end()
    return list(sink.get_finished_spans())


def _client_context(ca: Path, pki: PKI | None, alpn: str = "http/1.1") -> ssl.SSLContext:
    """Verifies the server against ``ca``; presents ``pki``'s client certificate when given."""
    context = ssl.create_default_context(cafile=str(ca))
    if pki is not None:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    context.set_alpn_protocols([alpn])
    return context


class Listeners:
    """A TLS + token ``sloscope serve`` and the HTTPS calls a test makes to it."""

    def __init__(self, server: Server, pki: PKI, tls_dir: Path) -> None:
        self.server = server
        self.pki = pki
        self.tls_dir = tls_dir

    def get(self, port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPSConnection(HOST, port, timeout=10, context=_client_context(self.pki.ca, self.pki))
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def samples(self) -> Samples:
        status, _, body = self.get(self.server.metrics_port, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200
        return samples(body.decode())

    def value(self, name: str, **labels: str) -> float:
        return self.samples().get((name, frozenset(labels.items())), 0.0)

    def grpc_exporter(self, ca: Path, token: str | None = TOKEN) -> GrpcExporter:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.read_bytes(),
            private_key=self.pki.client_key.read_bytes(),
            certificate_chain=self.pki.client_cert.read_bytes(),
        )
        headers = {"authorization": f"Bearer {token}"} if token else None
        return GrpcExporter(
            endpoint=f"{HOST}:{self.server.grpc_port}", credentials=credentials, headers=headers, timeout=10
        )

    def http_exporter(self, ca: Path, token: str | None = TOKEN) -> HttpExporter:
        return HttpExporter(
            endpoint=f"https://{HOST}:{self.server.http_port}/v1/traces",
            certificate_file=str(ca),
            client_certificate_file=str(self.pki.client_cert),
            client_key_file=str(self.pki.client_key),
            headers={"Authorization": f"Bearer {token}"} if token else None,
            timeout=10,
        )


def _presented_certificate(port: int, pki: PKI, alpn: str) -> bytes:
    """The DER certificate a fresh handshake with the listener presents (not verified: it may be any)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(pki.client_cert, pki.client_key)
    context.set_alpn_protocols([alpn])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text())


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Listeners]:
    # requests 2.34.2 sessions.py:855-860 (merge_environment_settings) replaces the session's verify, which
    # is where the HTTP exporter puts certificate_file, with REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE when set.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    pki = make_pki(tmp_path / "pki", server_name=HOST)
    tls_dir = tmp_path / "tls"  # what a mounted Secret would hold; replaced in place by the reload test
    tls_dir.mkdir()
    shutil.copy(pki.server_cert, tls_dir / "tls.crt")
    shutil.copy(pki.server_key, tls_dir / "tls.key")
    (tmp_path / "token").write_text(TOKEN + "\n")
    settings: dict[str, Any] = {
        "listeners": {
            "tls": {
                "cert_file": str(tls_dir / "tls.crt"),
                "key_file": str(tls_dir / "tls.key"),
                "client_ca_file": str(pki.ca),
                "client_auth_type": "RequireAndVerifyClientCert",
            },
            "auth": {"token_file": str(tmp_path / "token")},
        }
    }
    server = start_server(tmp_path, settings)
    try:
        yield Listeners(server, pki, tls_dir)
    finally:
        assert server.stop() == 0
    log = "\n".join(server.log)
    assert TOKEN not in log  # never logged, whatever happened


def test_the_sdk_exporters_send_over_tls_with_a_client_certificate_and_a_token(secured: Listeners) -> None:
    spans = _spans()
    assert secured.grpc_exporter(secured.pki.ca).export(spans) == SpanExportResult.SUCCESS
    assert secured.http_exporter(secured.pki.ca).export(spans) == SpanExportResult.SUCCESS
    assert secured.value("sloscope_spans_received_total", transport="grpc") == 1
    assert secured.value("sloscope_spans_received_total", transport="http") == 1
    failures = f"{c.LISTENER_AUTH_FAILURES.name}_total"
    for listener in c.LISTENERS:
        for reason in c.AUTH_FAILURE_REASONS:
            assert secured.value(failures, listener=listener, reason=reason) == 0  # each exists at 0


def test_missing_or_wrong_credentials_are_refused_and_counted(secured: Listeners) -> None:
    spans = _spans()
    assert secured.grpc_exporter(secured.pki.ca, token="wrong").export(spans) == SpanExportResult.FAILURE
    assert secured.http_exporter(secured.pki.ca, token=None).export(spans) == SpanExportResult.FAILURE

    credentials = grpc.ssl_channel_credentials(
        secured.pki.ca.read_bytes(), secured.pki.client_key.read_bytes(), secured.pki.client_cert.read_bytes()
    )
    with grpc.secure_channel(f"{HOST}:{secured.server.grpc_port}", credentials) as channel:
        call = channel.unary_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as refused:
            call(b"", timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    metrics = secured.server.metrics_port
    status, headers, body = secured.get(metrics, "/metrics")
    assert (status, headers["www-authenticate"]) == (401, 'Bearer realm="sloscope"')
    assert body == b"401 Unauthorized: credentials missing\n"
    basic = base64.b64encode(b"user:" + TOKEN.encode()).decode()
    assert secured.get(metrics, "/metrics", {"Authorization": f"Basic {basic}"})[0] == 401  # basic is not set up
    for path in ("/healthz", "/readyz"):  # probes need no credentials
        assert secured.get(metrics, path)[0] == 200

    failures = f"{c.LISTENER_AUTH_FAILURES.name}_total"
    assert secured.value(failures, listener="otlp_grpc", reason=c.AUTH_INVALID) == 1
    assert secured.value(failures, listener="otlp_grpc", reason=c.AUTH_MISSING) == 1
    assert secured.value(failures, listener="otlp_http", reason=c.AUTH_MISSING) == 1
    assert secured.value(failures, listener="metrics", reason=c.AUTH_MISSING) == 1
    assert secured.value(failures, listener="metrics", reason=c.AUTH_INVALID) == 1
    assert secured.value("sloscope_spans_received_total", transport="grpc") == 0
    assert secured.value("sloscope_spans_received_total", transport="http") == 0


def test_a_client_without_a_certificate_is_refused_in_the_handshake(secured: Listeners) -> None:
    refused = f"{c.LISTENER_CONNECTIONS_REFUSED.name}_total"
    context = _client_context(secured.pki.ca, None)
    with (
        pytest.raises((ssl.SSLError, ConnectionError)),  # TLS 1.3: the client sees the refusal at its first read
        socket.create_connection(("127.0.0.1", secured.server.http_port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: sloscope\r\n\r\n")
        if not tls.recv(1024):
            raise ConnectionError("closed")
    wait_until(lambda: secured.value(refused, listener="otlp_http", reason=c.REFUSED_TLS_HANDSHAKE) == 1)
    assert secured.value(refused, listener="metrics", reason=c.REFUSED_TLS_HANDSHAKE) == 0


def test_replaced_certificate_files_are_presented_from_the_next_handshake(secured: Listeners, tmp_path: Path) -> None:
    old = _der(secured.pki.server_cert)
    assert _presented_certificate(secured.server.http_port, secured.pki, "http/1.1") == old
    assert _presented_certificate(secured.server.grpc_port, secured.pki, "h2") == old

    renewed = make_pki(tmp_path / "renewed", server_name=HOST)  # another CA: the old one cannot verify it
    for name, source in (("tls.key", renewed.server_key), ("tls.crt", renewed.server_cert)):
        staged = secured.tls_dir / f".{name}.new"
        shutil.copy(source, staged)
        os.replace(staged, secured.tls_dir / name)  # as a Secret update swaps files

    new = _der(renewed.server_cert)
    for port in (secured.server.http_port, secured.server.metrics_port):
        assert _presented_certificate(port, secured.pki, "http/1.1") == new
    assert _presented_certificate(secured.server.grpc_port, secured.pki, "h2") == new
    spans = _spans()
    assert secured.http_exporter(renewed.ca).export(spans) == SpanExportResult.SUCCESS
    assert secured.grpc_exporter(renewed.ca).export(spans) == SpanExportResult.SUCCESS
    assert any("listener TLS reloaded" in line for line in secured.server.log)
