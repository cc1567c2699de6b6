"""The native core as built: importable, the same version as the Python package, spans crossing intact."""

from __future__ import annotations

import tomllib

import pytest

import sloscope
from sloscope import _native
from sloscope.records import Span
from tests.conftest import TOOLS

ROOT = TOOLS.parents[1]


def test_the_crate_and_the_package_have_one_version() -> None:
    """maturin takes the wheel's version from native/Cargo.toml; sloscope.__version__ must say the same."""
    crate = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text(encoding="utf-8"))
    assert crate["package"]["version"] == sloscope.__version__ == _native.__version__


def _span(**changes: object) -> Span:
    fields: dict[str, object] = {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "b7ad6b7169203331",
        "parent_span_id": "00f067aa0ba902b7",
        "name": "llm_request",
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_001_500_000_000,
        "attributes": {
            "gen_ai.request.id": "chatcmpl-42",
            "gen_ai.usage.prompt_tokens": 128,
            "gen_ai.latency.e2e": 1.5,
            "flag": True,
            "http.request.header.x-slo-ttft-ms": ["200"],
            "nested": {"k": [1, 2.5, "x", None, b"\x00\x01"]},
        },
        "resource": {"service.name": "vllm", "k8s.pod.name": "pod-a"},
        "tracestate": "vendor=1",
        "status_code": 2,
        "status_message": "boom",
    }
    fields.update(changes)
    return Span(**fields)  # type: ignore[arg-type]


def test_spans_cross_into_native_memory_and_back_unchanged() -> None:
    spans = [_span(), _span(span_id="b7ad6b7169203332", parent_span_id="", attributes={}, status_code=0)]
    batch = _native.SpanBatch.from_spans(spans)
    assert len(batch) == 2
    back = batch.to_spans()
    assert back == spans
    # bool stays bool and int stays int (a Python bool is an int: the native side must not merge them)
    assert type(back[0].attributes["flag"]) is bool
    assert type(back[0].attributes["gen_ai.usage.prompt_tokens"]) is int


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trace_id": "abc"}, 'trace_id "abc" is not 16 bytes of hex'),
        ({"span_id": "zz" * 8}, "span_id"),
        ({"parent_span_id": "123"}, "parent_span_id"),
    ],
)
def test_spans_with_unusable_ids_are_refused_with_the_field_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _native.SpanBatch.from_spans([_span(**changes)])
