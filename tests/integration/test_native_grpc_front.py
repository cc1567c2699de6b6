"""The native gRPC front (``listeners.grpc.server: native``) where the shared tests do not reach it: credentials
without TLS. The other behaviours are the grpcio receiver's, checked by the same tests on both servers."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from sloscope.receivers.otlp_grpc import SERVICE
from sloscope.testing import export_request, span, vllm_attributes

from .conftest import Server, start_server, wait_until

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    folder = tmp_path_factory.mktemp("front")
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    listeners = {"grpc": {"server": "native"}, "auth": {"token_file": str(token), "listeners": ["otlp_grpc"]}}
    started = start_server(Path(folder), {"join": {"engine": "native"}, "listeners": listeners})
    yield started
    assert started.stop() == 0


def export(server: Server, metadata: tuple[tuple[str, str], ...]) -> bytes:
    body = export_request([span(0xF1, 1, "llm_request", vllm_attributes())]).SerializeToString()
    with grpc.insecure_channel(server.otlp_grpc) as channel:
        return bytes(channel.unary_unary(f"/{SERVICE}/Export")(body, metadata=metadata, timeout=10))


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [((), "missing"), ((("authorization", "Bearer wrong"),), "invalid"), ((("authorization", "Digest x"),), "missing")],
)
def test_calls_without_accepted_credentials_are_refused_before_their_message_and_counted(
    server: Server, metadata: tuple[tuple[str, str], ...], reason: str
) -> None:
    before = server.value("sloscope_listener_auth_failures_total", listener="otlp_grpc", reason=reason)
    with pytest.raises(grpc.RpcError) as refused:
        export(server, metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert refused.value.details() == f"credentials {reason}: send authorization metadata (Bearer token or Basic)"
    assert server.value("sloscope_listener_auth_failures_total", listener="otlp_grpc", reason=reason) == before + 1
    assert server.value("sloscope_spans_received_total", transport="grpc") == 0


def test_a_call_with_the_token_is_taken(server: Server) -> None:
    assert export(server, (("authorization", f"Bearer {TOKEN}"),)) == b""
    wait_until(lambda: server.value("sloscope_spans_received_total", transport="grpc") == 1, what="the span")
