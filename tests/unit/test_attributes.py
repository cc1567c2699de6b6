"""The attribute mapping: header parsing like the EPP, strict types for model-server numbers."""

from __future__ import annotations

from typing import Any

import pytest

from sloscope.attributes import Mapping, View
from sloscope.config import Attributes
from sloscope.testing import span

MAPPING = Mapping(Attributes())


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        pytest.param({"http.request.header.x-slo-ttft-ms": ["200"]}, 200.0, id="captured header: string array"),
        pytest.param({"http.request.header.x-slo-ttft-ms": "150.5"}, 150.5, id="captured header: string"),
        pytest.param({"x-slo-ttft-ms": "90"}, 90.0, id="plain header name"),
        pytest.param({"x-llm-d-slo-ttft-ms": "70"}, 70.0, id="llm-d header name"),
        pytest.param({"x-slo-ttft-ms": 120}, 120.0, id="a number is taken as is"),
        pytest.param({"x-slo-ttft-ms": "fast"}, None, id="unparsable means no SLO"),
        pytest.param({"x-slo-ttft-ms": "inf"}, None, id="infinite means no SLO"),
        pytest.param({"x-slo-ttft-ms": []}, None, id="empty array means no SLO"),
        pytest.param({}, None, id="absent"),
    ],
)
def test_slo_header_parsing(attributes: dict[str, Any], expected: float | None) -> None:
    assert MAPPING.header_number("slo_ttft_ms", View([span(1, 1, "gateway.request", attributes)])) == expected


def test_configured_order_first_then_the_nearest_span() -> None:
    near = span(1, 2, "a", {"x-slo-ttft-ms": "100", "http.request.header.x-slo-tpot-ms": ["20"]})
    far = span(1, 1, "b", {"http.request.header.x-slo-ttft-ms": ["300"], "http.request.header.x-slo-tpot-ms": ["40"]})
    # The captured-header name comes first in the configuration, wherever it is found...
    assert MAPPING.header_number("slo_ttft_ms", View([near, far])) == 300.0
    # ...and of two spans carrying the same attribute, the nearer one wins.
    assert MAPPING.header_number("slo_tpot_ms", View([near, far])) == 20.0
    assert MAPPING.header_number("slo_tpot_ms", View([far, near])) == 40.0


def test_resource_attributes_are_read_with_the_resource_prefix() -> None:
    s = span(1, 1, "llm_request", {}, resource={"service.instance.id": "inst-1", "host.name": "h"})
    assert MAPPING.string("pod", View([s])) == "h"  # never the SDK's random service.instance.id


def test_an_integer_request_id_reads_as_its_decimal_string() -> None:
    """TensorRT-LLM puts its internal integer request id in gen_ai.request.id (not checked against a release)."""
    s = span(1, 1, "llm_request", {"gen_ai.request.id": 42})
    assert (MAPPING.check(s), MAPPING.identifier("request_id", View([s]))) == (None, "42")
    assert MAPPING.check(span(1, 1, "llm_request", {"gen_ai.request.id": 4.2})) is not None


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        pytest.param(
            {"gen_ai.usage.completion_tokens": "eleven"},
            "attribute gen_ai.usage.completion_tokens (completion_tokens) must be a number, got str 'eleven'",
            id="string token count",
        ),
        pytest.param(
            {"gen_ai.latency.e2e": True},
            "attribute gen_ai.latency.e2e (e2e_seconds) must be a number, got bool True",
            id="bool latency",
        ),
        pytest.param(
            {"gen_ai.response.model": 7},
            "attribute gen_ai.response.model (target_model) must be a string, got int 7",
            id="number for model",
        ),
    ],
)
def test_wrong_attribute_types_are_reported(attributes: dict[str, Any], problem: str) -> None:
    message = MAPPING.check(span(1, 1, "llm_request", attributes))
    assert message == f"span 0000000000000001 (llm_request): {problem}"


def test_well_typed_spans_pass_the_check() -> None:
    attributes = {"gen_ai.usage.completion_tokens": 3, "gen_ai.latency.e2e": 0.5, "x-slo-ttft-ms": "fast"}
    assert MAPPING.check(span(1, 1, "llm_request", attributes)) is None
