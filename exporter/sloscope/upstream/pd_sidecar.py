"""llm-d's P/D routing sidecar (llm-d-router ebab6879, ``pkg/sidecar/proxy``, run with ``--tracing``): the spans it
writes for one disaggregated request on the decode pod, as the catalogue draws them.

otelhttp's handler span ``llm_d.pd_proxy.<METHOD> <path>`` (SERVER, scope otelhttp 0.68.0, semconv v1.40 request
and response attributes; ``proxy_helpers.go:41-50``, otelhttp ``internal/semconv/server.go``) > ``forward_request``
(SERVER, ``chat_completions.go:65-84,110-114``) > the connector's legs, each with otelhttp's ``HTTP POST`` CLIENT
span (``transport.go:59-60,80-81``) under which the pod's vLLM puts its ``llm_request``:

* NIXL (``--kv-connector nixlv2``, ``connector_nixlv2.go:55-469``): ``prefill`` > [its POST, ``decode`` > its POST],
  serial; decode is the prefill span's child (the function's one ``ctx`` rebound at :87, used at :296) and carries
  the request summary (:449-467);
* concurrent P2P (``offloading``, ``connector_p2p.go:46-214``): the prefill POST under ``forward_request`` (cloned
  before the prefill span starts, :126-129), ``llm_d.pd_proxy.prefill`` > ``llm_d.pd_proxy.decode`` > its POST;
* with ``--decode-chunk-size > 0``, a ``chunked_decode`` span under the decode leg, one POST per chunk
  (``pkg/sidecar/proxy/decode.go:63-98``).

Every ``*_ms`` is ``float64(duration.Milliseconds())``: whole milliseconds, truncated. Resource:
``cmd/pd-sidecar/main.go:58``; ``Dockerfile.sidecar:40`` stamps another version package, so the version and the
scope's commit-sha are empty. Written up in ``../shared/fixtures/llm-d-router/spans.md`` section 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal

from sloscope.upstream.llmd_router import SEMCONV_1_37
from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = ["LOCAL_VLLM", "Legs", "Peer", "Sidecar", "sidecar_process"]

OTELHTTP = Scope("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", "0.68.0")  # config.go:19
PROXY = Scope("llm-d-router/pkg/sidecar/proxy", "", {"commit-sha": ""})  # pkg/sidecar/proxy/constants.go:20
LOCAL_VLLM = "localhost:8200"  # where the sidecar reaches its own pod's vLLM (options.go:92,399)
MS = 1_000_000
Connector = Literal["nixlv2", "offloading"]


def sidecar_process() -> Process:
    """cmd/pd-sidecar/main.go:58, the schema URL of the EPP's telemetry package; the version empty."""
    return Process({"service.name": "llm-d-disagg-sidecar", "service.version": ""}, SEMCONV_1_37)


@dataclass(frozen=True)
class Peer:
    """What otelhttp's handler reads off the request it served and the response it wrote."""

    server_address: str
    peer_address: str
    peer_port: int
    user_agent: str
    client_address: str
    request_body_size: int
    response_body_size: int
    server_port: int = 8000
    status_code: int = 200


@dataclass(frozen=True)
class Legs:
    """One request's legs through a connector: its sidecar request id (a v1 UUID, NIXL only), when
    ``forward_request`` started (the handler's clock), and each leg span's and its POST's (start, end)."""

    connector: Connector
    request_uuid: str
    forward_start: int
    prefill: tuple[int, int]
    prefill_post: tuple[int, int]
    decode: tuple[int, int]
    decode_post: tuple[int, int]
    streaming: bool = True  # the decode leg streams (a chat call)


def _ms(start_ns: int, end_ns: int) -> float:
    return float((end_ns - start_ns) // MS)


class Sidecar(Generic[Handle]):
    """One decode pod's routing sidecar writing through ``writer``; times are Unix nanoseconds."""

    def __init__(self, writer: SpanWriter[Handle], process: Process | None = None) -> None:
        self.writer = writer
        self.process = process or sidecar_process()

    def _span(self, scope: Scope, drawn: Drawn[Handle]) -> Handle:
        return self.writer.span(self.process, scope, drawn)

    def server(self, parent: Handle | None, start_ns: int, end_ns: int, *, path: str, peer: Peer) -> Handle:
        """otelhttp's handler span: the request's attributes at its start, the sizes and status at its end."""
        attributes: dict[str, Any] = {
            "server.address": peer.server_address,
            "server.port": peer.server_port,
            "http.request.method": "POST",
            "url.scheme": "http",
            "network.peer.address": peer.peer_address,
            "network.peer.port": peer.peer_port,
            "user_agent.original": peer.user_agent,
            "client.address": peer.client_address,
            "url.path": path,
            "network.protocol.version": "1.1",
            "http.request.body.size": peer.request_body_size,
            "http.response.body.size": peer.response_body_size,
            "http.response.status_code": peer.status_code,
        }
        return self._span(
            OTELHTTP, Drawn(f"llm_d.pd_proxy.POST {path}", parent, start_ns, end_ns, "server", attributes)
        )

    def forward_request(
        self, server: Handle, start_ns: int, end_ns: int, *, connector: str, path: str, prefill_target: str
    ) -> Handle:
        """chat_completions.go:65-84 and the P/D decision (:110-114): one prefill candidate, the header's."""
        attributes: dict[str, Any] = {
            "llm_d.pd_proxy.connector": connector,
            "llm_d.pd_proxy.kv_connector": connector,
            "llm_d.pd_proxy.ec_connector": "",
            "llm_d.pd_proxy.request_path": path,
            "llm_d.openai.api": "chat_completions",  # also for /v1/completions (proxy.go:627-631)
            "llm_d.pd_proxy.disaggregation_used": True,
            "llm_d.pd_proxy.prefill_target": prefill_target,
            "llm_d.pd_proxy.prefill_candidates": 1,
        }
        return self._span(PROXY, Drawn("forward_request", server, start_ns, end_ns, "server", attributes))

    def post(self, parent: Handle, start_ns: int, end_ns: int, *, target: str, path: str) -> Handle:
        """otelhttp.NewTransport's CLIENT span to ``target`` (host:port), answered 200; its context is the
        traceparent the pod's vLLM extracts."""
        host, port = target.split(":")
        attributes: dict[str, Any] = {
            "http.request.method": "POST",
            "url.full": f"http://{target}{path}",
            "server.address": host,
            "server.port": int(port),
            "network.protocol.version": "1.1",
            "http.response.status_code": 200,
        }
        return self._span(OTELHTTP, Drawn("HTTP POST", parent, start_ns, end_ns, "client", attributes))

    def chunked_decode(
        self,
        parent: Handle,
        start_ns: int,
        end_ns: int,
        *,
        chunk_size: int,
        chunks: int,
        total_tokens: int,
        streaming: bool = True,
    ) -> Handle:
        """``--decode-chunk-size > 0``: chunked_decode, INTERNAL, under the decode leg (``parent``), each chunk's
        request to the pod's own vLLM a :meth:`post` under it (``pkg/sidecar/proxy/decode.go:63-98``); the chunk
        size and streaming at its start, the chunks, tokens and whole milliseconds at its end, as spans.md section
        2.1 names them."""
        attributes: dict[str, Any] = {
            "llm_d.pd_proxy.chunked_decode.chunk_size": chunk_size,
            "llm_d.pd_proxy.chunked_decode.streaming": streaming,
            "llm_d.pd_proxy.chunked_decode.chunks": chunks,
            "llm_d.pd_proxy.chunked_decode.total_tokens": total_tokens,
            "llm_d.pd_proxy.chunked_decode.duration_ms": _ms(start_ns, end_ns),
        }
        return self._span(PROXY, Drawn("chunked_decode", parent, start_ns, end_ns, attributes=attributes))

    def legs(self, forward: Handle, legs: Legs, *, path: str, prefill_target: str) -> tuple[Handle, Handle]:
        """The connector's leg spans and their POSTs under ``forward``; returns the prefill and the decode POST,
        the parents of the two pods' ``llm_request``."""
        nixl = legs.connector == "nixlv2"
        prefill_ms, decode_ms = _ms(*legs.prefill_post), _ms(*legs.decode_post)
        summary: dict[str, Any] = {
            "llm_d.pd_proxy.total_duration_ms": _ms(legs.forward_start, legs.decode[1]),
            "llm_d.pd_proxy.true_ttft_ms": _ms(legs.forward_start, legs.decode_post[0]),
        }
        common: dict[str, Any] = {"llm_d.pd_proxy.connector": legs.connector}
        if nixl:  # connector_nixlv2.go:87-94,244-248 and :296-304,350,429-467
            prefill_name, decode_name = "prefill", "decode"
            prefill_attributes: dict[str, Any] = {
                "llm_d.pd_proxy.request_id": legs.request_uuid,
                "llm_d.pd_proxy.prefill_target": prefill_target,
                **common,
                "llm_d.pd_proxy.prefill.status_code": 200,
                "llm_d.pd_proxy.prefill.duration_ms": prefill_ms,
            }
            decode_attributes: dict[str, Any] = {
                "llm_d.pd_proxy.request_id": legs.request_uuid,
                **common,
                "llm_d.pd_proxy.decode.streaming": legs.streaming,
                "llm_d.pd_proxy.decode.data_parallel": False,
                "llm_d.pd_proxy.decode.target": LOCAL_VLLM,
                "llm_d.pd_proxy.decode.duration_ms": decode_ms,
                **summary,
                "llm_d.pd_proxy.prefill_duration_ms": prefill_ms,
                "llm_d.pd_proxy.decode_duration_ms": decode_ms,
                "llm_d.pd_proxy.coordinator_overhead_ms": _ms(legs.prefill_post[1], legs.decode_post[0]),
            }
        else:  # connector_p2p.go:134-141,154-172 and :175-212
            prefill_name, decode_name = "llm_d.pd_proxy.prefill", "llm_d.pd_proxy.decode"
            prefill_attributes = {
                "llm_d.pd_proxy.prefill_target": prefill_target,
                **common,
                "llm_d.pd_proxy.prefill.async": True,
                "llm_d.pd_proxy.prefill.status_code": 200,
                "llm_d.pd_proxy.prefill.duration_ms": prefill_ms,
            }
            decode_attributes = {
                **common,
                "llm_d.pd_proxy.decode.concurrent_with_prefill": True,
                "llm_d.pd_proxy.decode.duration_ms": decode_ms,
                "llm_d.pd_proxy.decode.target": LOCAL_VLLM,
                **summary,
                "llm_d.pd_proxy.decode_duration_ms": decode_ms,
                "llm_d.pd_proxy.concurrent_pd": True,
            }
        prefill = self._span(PROXY, Drawn(prefill_name, forward, *legs.prefill, attributes=prefill_attributes))
        prefill_post = self.post(prefill if nixl else forward, *legs.prefill_post, target=prefill_target, path=path)
        decode = self._span(PROXY, Drawn(decode_name, prefill, *legs.decode, attributes=decode_attributes))
        decode_post = self.post(decode, *legs.decode_post, target=LOCAL_VLLM, path=path)
        return prefill_post, decode_post
