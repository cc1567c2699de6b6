"""Ingest through a real ``sloscope serve``: the loop stays responsive under the largest bodies, memory
stays bounded in bytes, and transport faults are counted, never server errors.

The body sizes follow ``--ingest-limit-bytes`` (``limits.max_request_bytes``, 8 MiB by default), so
the same tests run larger from the command line:
``pytest tests/integration/test_ingest_limits.py --ingest-limit-bytes=33554432``.
"""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from sloscope.receivers.otlp_grpc import SERVICE
from tests.support import prober
from tests.support.otlp_bodies import largest_body

from .conftest import Server, wait_until

pytestmark = pytest.mark.integration

PROBE_INTERVAL = 0.05  # the acceptance: /healthz every 50 ms ...
PROBE_BOUND = 0.1  # ... and no probe slower than 100 ms
PROBE_ROUNDS = 3
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
GZIP = {"Content-Encoding": "gzip"}


def _grpc_options(limit: int) -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", 8 * limit), ("grpc.max_receive_message_length", 8 * limit)]


def _post(server: Server, body: bytes, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=120)
    try:
        connection.request("POST", "/v1/traces", body, headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _send_every_encoding(server: Server, limit: int, first_trace: int) -> list[int]:
    """The largest body of each encoding, once: four over OTLP/HTTP (their statuses returned), two over gRPC."""
    traces = iter(range(first_trace, first_trace + 6_000_000, 1_000_000))  # ids of each body's own traces
    protobuf = largest_body(limit, json=False, first_trace=next(traces))
    json_body = largest_body(limit, json=True, first_trace=next(traces))
    assert min(len(protobuf), len(json_body)) > 0.95 * limit
    http_bodies = [
        (protobuf, PROTOBUF),
        (json_body, JSON),
        (
            gzip.compress(largest_body(limit, json=False, first_trace=next(traces))),
            {**PROTOBUF, "Content-Encoding": "gzip"},
        ),
        (gzip.compress(largest_body(limit, json=True, first_trace=next(traces))), {**JSON, "Content-Encoding": "gzip"}),
    ]
    grpc_bodies = [
        (largest_body(limit, json=False, first_trace=next(traces)), grpc.Compression.NoCompression),
        (largest_body(limit, json=False, first_trace=next(traces)), grpc.Compression.Gzip),
    ]
    statuses = [_post(server, body, headers) for body, headers in http_bodies]
    with grpc.insecure_channel(server.otlp_grpc, options=_grpc_options(limit)) as channel:
        export = channel.unary_unary(f"/{SERVICE}/Export")
        for body, compression in grpc_bodies:
            export(body, timeout=120, compression=compression)
    return statuses


def test_largest_bodies_of_every_encoding_keep_healthz_under_100ms(
    serve: Callable[..., Server], ingest_limit_bytes: int
) -> None:
    """Measured in up to ``PROBE_ROUNDS`` rounds, passing when one round meets the bound: the machine is shared,
    and noise only ever adds latency. Decoding on the event loop missed by 0.7-4.5 s in every round."""
    limit = ingest_limit_bytes
    queue = max(200_000, limit // 40)  # room for every span of the six bodies, whatever their size
    server = serve(limits={"max_request_bytes": limit, "queue_spans": queue}, self_tracing={"enabled": False})
    slowest: list[float] = []
    for round_ in range(PROBE_ROUNDS):
        probe = prober.start(server.url("/healthz"), PROBE_INTERVAL)
        try:
            statuses = _send_every_encoding(server, limit, first_trace=1 + round_ * 10_000_000)
            wait_until(lambda: server.value("sloscope_queue_spans") == 0, timeout=120, what="the pipeline to catch up")
        finally:
            latencies = prober.stop(probe)
        assert statuses == [200, 200, 200, 200]
        assert server.value("sloscope_otlp_requests_total", transport="http", result="accepted") == 4 * (round_ + 1)
        assert server.value("sloscope_otlp_requests_total", transport="grpc", result="accepted") == 2 * (round_ + 1)
        assert len(latencies) > 10
        worst = sorted(latencies)[-5:]
        print(
            f"round {round_ + 1}: {len(latencies)} probes of /healthz; slowest {[round(s * 1000, 1) for s in worst]} ms"
        )
        slowest.append(max(latencies))
        if slowest[-1] <= PROBE_BOUND:
            break
    assert min(slowest) <= PROBE_BOUND, f"slowest probe of each round: {slowest}"


def test_refused_maximum_size_grpc_messages_from_8_senders_leave_rss_flat(
    serve: Callable[..., Server], ingest_limit_bytes: int
) -> None:
    """The largest message gRPC hands over (its own cap is 4 x limits.max_request_bytes), refused by sloscope.
    Before the fix, 40 refused 30 MiB messages took RSS from 129 MB to 1.5 GB (the abort exception kept the
    request alive in a reference cycle), and freed memory stayed in glibc's arenas."""
    limit = ingest_limit_bytes
    server = serve(limits={"max_request_bytes": limit}, self_tracing={"enabled": False})
    message = bytes(4 * limit - 64)  # refused on its size: the content does not matter
    senders, total = 8, 100
    baseline = server.rss_bytes()
    codes: Counter[grpc.StatusCode] = Counter()
    lock = threading.Lock()

    def send(first: int) -> None:
        with grpc.insecure_channel(server.otlp_grpc, options=_grpc_options(limit)) as channel:
            export = channel.unary_unary(f"/{SERVICE}/Export")
            for _ in range(first, total, senders):
                try:
                    export(message, timeout=120)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as exc:
                    code = exc.code()
                with lock:
                    codes[code] += 1

    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert codes == {grpc.StatusCode.INVALID_ARGUMENT: total}
    assert server.value("sloscope_otlp_requests_total", transport="grpc", result="too_large") == total
    bound = 64 * 1024 * 1024  # stated bound: RSS back within 64 MiB of where it started
    wait_until(lambda: server.rss_bytes() <= baseline + bound, timeout=30, what="RSS back near its start")
    print(f"RSS {baseline >> 20} MiB before, {server.rss_bytes() >> 20} MiB after {total} refused messages")


def _hold_http_body(server: Server, declared: int) -> socket.socket:
    """An OTLP/HTTP request whose headers (and so its declared length) have arrived, its body not yet."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
    head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    sock.sendall(f"{head}Content-Length: {declared}\r\n\r\n".encode())
    return sock


def test_bytes_in_flight_cap_refuses_with_retry_on_both_transports(serve: Callable[..., Server]) -> None:
    limit = 1024 * 1024
    server = serve(
        limits={"max_request_bytes": limit, "max_bytes_in_flight": limit, "retry_after_seconds": 3},
        self_tracing={"enabled": False},
    )
    body = largest_body(limit // 2, json=False)
    held = _hold_http_body(server, len(body))
    wait_until(lambda: server.value("sloscope_otlp_bytes_in_flight") == len(body), what="the first body admitted")

    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    connection.request("POST", "/v1/traces", largest_body(limit * 3 // 4, json=False, first_trace=10_000), PROTOBUF)
    refused = connection.getresponse()
    refused.read()
    assert (refused.status, refused.headers["Retry-After"]) == (429, "3")
    with grpc.insecure_channel(server.otlp_grpc) as channel:
        export = channel.unary_unary(f"/{SERVICE}/Export")
        with pytest.raises(grpc.RpcError) as refusal:
            export(largest_body(limit * 3 // 4, json=False, first_trace=20_000), timeout=30)
        assert refusal.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        retry = error_details_pb2.RetryInfo.FromString(
            dict(refusal.value.trailing_metadata())["google.rpc.retryinfo-bin"]
        )
        assert retry.retry_delay.seconds == 3

        held.sendall(body)  # the first request completes and lets go of its bytes
        answer = held.recv(65536)
        held.close()
        assert answer.startswith(b"HTTP/1.1 200")
        wait_until(lambda: server.value("sloscope_otlp_bytes_in_flight") == 0, what="the bytes released")
        export(largest_body(limit * 3 // 4, json=False, first_trace=20_000), timeout=30)  # the retry succeeds

    for transport in ("grpc", "http"):
        assert server.value("sloscope_otlp_requests_total", transport=transport, result="in_flight_full") == 1
    assert server.value("sloscope_otlp_requests_total", transport="http", result="accepted") == 1
    assert server.value("sloscope_otlp_requests_total", transport="grpc", result="accepted") == 1


def test_client_disconnecting_mid_body_is_counted_and_logged_at_debug(serve: Callable[..., Server]) -> None:
    server = serve(log_level="DEBUG", self_tracing={"enabled": False})
    body = largest_body(64 * 1024, json=False)
    sock = _hold_http_body(server, len(body))
    sock.sendall(body[: len(body) // 2])
    wait_until(lambda: server.value("sloscope_otlp_bytes_in_flight") == len(body), what="the body being read")
    sock.close()
    wait_until(
        lambda: server.value("sloscope_otlp_requests_total", transport="http", result="client_disconnected") == 1,
        what="the disconnect counted",
    )
    assert any("client disconnected before its body was read whole" in line for line in server.log)
    assert not [line for line in server.log if " ERROR " in line or "Traceback" in line]
    assert server.total("http_requests_total", status="500") == 0
    assert server.total("http_requests_total", status="499") == 1
    assert server.value("sloscope_otlp_bytes_in_flight") == 0
    assert _post(server, body, PROTOBUF) == 200  # the server goes on serving


def _read_responses(sock: socket.socket, expected: int) -> list[int]:
    """Statuses of the responses on ``sock``: ``expected`` of them, or fewer if the server closes it
    (an orderly close; a reset raises)."""
    data = b""
    statuses: list[int] = []
    while len(statuses) < expected:
        head, separator, rest = data.partition(b"\r\n\r\n")
        if separator:
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            length = int(dict(line.lower().split(": ", 1) for line in header_lines).get("content-length", "0"))
            if len(rest) >= length:
                statuses.append(int(status_line.split()[1]))
                data = rest[length:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return statuses


@pytest.mark.parametrize(
    ("first_headers", "first_status"),
    [
        ({"Content-Type": "application/x-protobuf"}, 413),  # refused on Content-Length, the body unread
        ({"Content-Type": "text/plain"}, 415),  # refused on Content-Type, the body unread
    ],
)
def test_pipelined_request_after_an_early_error_is_answered(
    serve: Callable[..., Server], first_headers: dict[str, str], first_status: int
) -> None:
    limit = 64 * 1024
    server = serve(limits={"max_request_bytes": limit}, self_tracing={"enabled": False})
    oversize = bytes(limit + 1) if first_status == 413 else bytes(1000)
    good = largest_body(limit, json=False)

    def request(headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"{k}: {v}" for k, v in {**headers, "Host": "x", "Content-Length": str(len(body))}.items()]
        return ("POST /v1/traces HTTP/1.1\r\n" + "\r\n".join(lines) + "\r\n\r\n").encode() + body

    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
    sock.sendall(request(first_headers, oversize) + request(PROTOBUF, good) + request(PROTOBUF, b""))
    statuses = _read_responses(sock, 3)
    sock.close()
    assert statuses == [first_status, 200, 200]
    assert server.value("sloscope_otlp_requests_total", transport="http", result="accepted") == 2


@pytest.mark.parametrize("http_server", ["native", "uvicorn"])
def test_four_pipelined_requests_are_answered_in_order_on_both_http_servers(
    serve: Callable[..., Server], http_server: str
) -> None:
    """200, 415 (refused on its Content-Type, its body unread), 200, 404 sent in one write: four answers, in order,
    on the same connection, whichever server serves OTLP/HTTP."""
    server = serve(listeners={"otlp_http_server": http_server}, self_tracing={"enabled": False})
    good = largest_body(4096, json=False)

    def request(method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"{k}: {v}" for k, v in {**headers, "Host": "x", "Content-Length": str(len(body))}.items()]
        return (f"{method} {path} HTTP/1.1\r\n" + "\r\n".join(lines) + "\r\n\r\n").encode() + body

    pipelined = (
        request("POST", "/v1/traces", PROTOBUF, good)
        + request("POST", "/v1/traces", {"Content-Type": "text/plain"}, bytes(5000))
        + request("POST", "/v1/traces", PROTOBUF, good)
        + request("GET", "/nowhere", {}, b"")
    )
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(pipelined)
        assert _read_responses(sock, 4) == [200, 415, 200, 404]
    assert server.value("sloscope_otlp_requests_total", transport="http", result="accepted") == 2


def _json_workers(pid: int) -> list[int]:
    """The OTLP/JSON decoding processes the server spawned (its resource tracker left out)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def test_the_json_decoding_process_leaves_when_the_server_is_killed(serve: Callable[..., Server]) -> None:
    """SIGKILL skips every shutdown step; the worker holds both ends of its own work pipe, so without its
    watch of its parent it waited for work forever (orphans piled up across test runs). The Python engine
    parses every JSON body in the worker; the native one reads plain OTLP/JSON itself and starts it only for a
    body it leaves to the reference."""
    server = serve(self_tracing={"enabled": False}, join={"engine": "python"})
    assert _post(server, largest_body(64 * 1024, json=True), JSON) == 200
    workers = _json_workers(server.process.pid)
    assert len(workers) == 1
    server.process.kill()
    server.process.wait(timeout=10)
    wait_until(lambda: not _running(workers[0]), timeout=10, what="the worker to leave")


def _running(pid: int) -> bool:
    """Alive and not a zombie (whoever reaps orphans here may be slow to)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_trickled_body_times_out_and_frees_its_bytes(serve: Callable[..., Server]) -> None:
    """A body that never arrives whole would hold its declared bytes in flight (and refuse every other
    exporter with 429 once a few such requests hold the cap): 408 and close at listeners.body_timeout_seconds."""
    server = serve(listeners={"body_timeout_seconds": 0.5}, self_tracing={"enabled": False})
    sock = _hold_http_body(server, declared=1_000_000)
    try:
        sock.sendall(b"\x0a")  # one byte of a million, then nothing
        answer = sock.makefile("rb").read()  # the server answers, then closes: read() ends
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body not received within 0.5s" in answer
    assert server.value("sloscope_otlp_requests_total", transport="http", result="body_timeout") == 1
    assert server.value("sloscope_otlp_bytes_in_flight") == 0
