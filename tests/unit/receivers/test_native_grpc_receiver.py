"""The Python half of the native gRPC front: what it answers and counts for each outcome the front hands it
(native/src/front/server.rs ``Handler``), the grpcio receiver's answers, and the settings it needs."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pydantic
import pytest
from google.rpc import error_details_pb2, status_pb2
from prometheus_client import CollectorRegistry

from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline
from sloscope.receivers.otlp_grpc_native import NativeGrpcReceiver
from sloscope.testing import export_request, span, vllm_attributes

LIMIT = 64 * 1024


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    settings = Settings.model_validate(
        {"join": {"engine": "native"}, "limits": {"max_request_bytes": LIMIT, "retry_after_seconds": 3}}
    )
    built = Pipeline(settings, default_spec(), CollectorRegistry())
    yield built
    built.shutdown()


def counted(pipeline: Pipeline, result: str) -> float:
    value = pipeline.registry.get_sample_value("sloscope_otlp_requests_total", {"transport": "grpc", "result": result})
    return value or 0.0


def test_a_decoded_message_goes_to_the_queue_and_is_answered_ok(pipeline: Pipeline) -> None:
    receiver = NativeGrpcReceiver(pipeline.intake, LIMIT)
    decoder = pipeline.intake.native_decoder
    assert decoder is not None
    payload = export_request([span(7, 1, "llm_request", vllm_attributes())]).SerializeToString()
    assert receiver.export(decoder.protobuf(payload)) == (0, "", [], b"")
    assert (len(pipeline.queue), counted(pipeline, "accepted")) == (1, 1)


def test_a_message_that_did_not_decode_is_invalid_argument_with_its_reason(pipeline: Pipeline) -> None:
    receiver = NativeGrpcReceiver(pipeline.intake, LIMIT)
    assert receiver.export("not a valid OTLP ExportTraceServiceRequest protobuf: x") == (
        3,
        "not a valid OTLP ExportTraceServiceRequest protobuf: x",
        [],
        b"",
    )
    assert counted(pipeline, "malformed") == 1


def test_refusals_are_counted_and_worded_as_the_grpcio_receiver_words_them(pipeline: Pipeline) -> None:
    receiver = NativeGrpcReceiver(pipeline.intake, LIMIT)
    message = f"message of {LIMIT + 1} bytes exceeds the limit of {LIMIT}; send smaller batches"
    assert receiver.refused("too_large", LIMIT + 1, "") == (3, message, [], b"")
    code, text, metadata, body = receiver.refused("in_flight_full", 0, "")
    assert (code, text, body) == (8, "sloscope is busy: too many bytes in flight, retry later", b"")
    details = dict(metadata)
    retry = error_details_pb2.RetryInfo.FromString(details["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 3
    assert status_pb2.Status.FromString(details["grpc-status-details-bin"]).code == 8
    assert receiver.refused("unsupported_encoding", 0, "grpc-encoding snappy is not supported")[:2] == (
        12,
        "grpc-encoding snappy is not supported",
    )
    assert [counted(pipeline, r) for r in ("too_large", "in_flight_full", "malformed")] == [1, 1, 1]


def test_the_native_front_needs_the_native_decoder() -> None:
    with pytest.raises(pydantic.ValidationError, match=re.escape("it needs join.engine: native")):
        Settings.model_validate({"listeners": {"grpc": {"server": "native"}}, "join": {"engine": "python"}})
    assert Settings.model_validate({"listeners": {"grpc": {"server": "native"}}}).listeners.grpc.server == "native"


def test_the_answers_codes_are_grpcs_numbers_and_names() -> None:
    """The answers carry gRPC's status numbers without grpcio (the native front sends the number); the grpcio
    receiver maps them to its StatusCode by name."""
    import grpc

    from sloscope.receivers.otlp_grpc_answers import Code

    for code in Code:
        assert grpc.StatusCode[code.name].value[0] == code.value


def test_serve_with_the_native_front_imports_no_grpcio() -> None:
    import subprocess
    import sys

    program = (
        "import sys\n"
        "from sloscope.service.server import Service\n"
        "from sloscope.receivers import otlp_grpc_native\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "[]", done.stderr
