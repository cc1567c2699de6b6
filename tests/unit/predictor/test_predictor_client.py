"""Answers no well-behaved prediction server gives, through an in-process transport.

Everything a real server does is tested over loopback in tests/integration/test_predictor_client.py;
here are the malformed bodies and inputs, which must be counted and never raise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sloscope import conventions as c
from sloscope.config import Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.features import Features, Prediction

URL = "http://prediction:8001"
FEATURES = [Features(0.1, 100, 1, 2, 1, 0.0), Features(0.2, 200, 3, 4, 1, 0.5)]


def entry(ttft: Any = 50.0, tpot: Any = 10.0) -> dict[str, Any]:
    return {
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "predicted_at": "2026-11-30T10:22:27.591462Z",
        "model_type": "xgboost",
        "quantile": 0.9,
        "last_model_load": "2026-11-30T10:22:25.042983Z",
    }


def bulk(predictions: list[Any], errors: list[Any] | None = None) -> dict[str, Any]:
    return {
        "predictions": predictions,
        "errors": errors or [],
        "total_requests": len(predictions),
        "successful_predictions": sum(p is not None for p in predictions),
        "failed_predictions": sum(p is None for p in predictions),
        "processing_time_ms": 1.0,
    }


def run(
    handler: Callable[[httpx.Request], httpx.Response], features: list[Features] = FEATURES
) -> tuple[list[Prediction | None], list[tuple[str, str]], PredictionClient]:
    counted: list[tuple[str, str]] = []

    async def go() -> tuple[list[Prediction | None], PredictionClient]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = PredictionClient([URL], Predictions(breaker_failures=1), http, lambda p, r: counted.append((p, r)))
            return await client.predict(features, c.PURPOSE_SHADOW), client

    results, client = asyncio.run(go())
    return results, counted, client


def answer(status: int = 200, body: Any = None, content: bytes | None = None) -> Callable[..., httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        if content is not None:
            return httpx.Response(status, content=content)
        return httpx.Response(status, json=body)

    return handler


def test_the_request_is_a_bulk_post_of_the_features() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=bulk([entry(), entry(60.0, 12.5)]))

    results, counted, _ = run(handler)
    assert results == [Prediction(50.0, 10.0, 0.9, "xgboost"), Prediction(60.0, 12.5, 0.9, "xgboost")]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_SUCCESS)]
    (request,) = seen
    assert (request.method, str(request.url)) == ("POST", URL + "/predict/bulk/strict")
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"requests": [f.to_json() for f in FEATURES]}


def test_a_strict_style_response_without_errors_is_read_too() -> None:
    body = bulk([entry(), entry()])
    del body["errors"]
    results, counted, _ = run(answer(body=body))
    assert results == [Prediction(50.0, 10.0, 0.9, "xgboost")] * 2
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_SUCCESS)]


def test_an_index_listed_in_errors_is_none_even_with_an_entry() -> None:
    body = bulk([entry(), entry()], errors=[{"index": 1, "error": "boom", "request": FEATURES[1].to_json()}])
    results, counted, _ = run(answer(body=body))
    assert results == [Prediction(50.0, 10.0, 0.9, "xgboost"), None]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_SUCCESS)]


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(answer(content=b"<html>bad gateway</html>"), id="not JSON"),
        pytest.param(answer(content=b"\xff\xfe"), id="not UTF-8"),
        # json.loads raises RecursionError, not ValueError, past Python's recursion limit: it escaped the
        # client (and the health poller's probe and JSON GETs) until read_json turned it into a ValueError.
        pytest.param(answer(content=b"[" * 100_000), id="nested too deeply"),
        pytest.param(answer(content=b'{"predictions":' + b"9" * 5000 + b"}"), id="an integer of 5000 digits"),
        pytest.param(answer(body=[entry(), entry()]), id="a list, not an object"),
        pytest.param(answer(body={"errors": []}), id="no predictions"),
        pytest.param(answer(body=bulk([entry(), entry(ttft="fast")])), id="a prediction that is not a number"),
        pytest.param(answer(body=bulk([entry(), entry(tpot=True)])), id="a boolean for a number"),
        # Found by tests/fuzz/test_predictor.py: math.isfinite of an integer beyond the largest float raised
        # OverflowError out of the client (and so out of a shadow round).
        pytest.param(
            answer(content=json.dumps(bulk([entry(), entry(ttft=10**400)])).encode()),
            id="a prediction too large for a float",
        ),
        pytest.param(answer(body=bulk([entry(), {"ttft_ms": 1.0}])), id="an entry missing fields"),
        pytest.param(answer(body=bulk([entry(), 7])), id="an entry that is not an object"),
    ],
)
def test_a_body_that_is_not_a_bulk_response_is_a_parse_error(handler: Callable[..., httpx.Response]) -> None:
    results, counted, client = run(handler)
    assert results == [None, None]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_PARSE_ERROR)]
    assert client.breaker_states() == {URL: "open"}  # breaker_failures=1: a failure for the breaker


def entry_with(**fields: Any) -> dict[str, Any]:
    return {**entry(), **fields}


@pytest.mark.parametrize(
    "handler",
    [
        # the prediction server clips at 0 and reports LATENCY_QUANTILE_ALPHA, a probability
        # (prediction/prediction_server.py:78,312,1028-1029 at llm-d-latency-predictor b5d19f1)
        pytest.param(answer(body=bulk([entry(), entry_with(quantile=90)])), id="quantile 90 for 0.9"),
        pytest.param(answer(body=bulk([entry(), entry_with(quantile=0)])), id="quantile 0"),
        pytest.param(answer(body=bulk([entry(), entry_with(quantile=1.0)])), id="quantile 1"),
        pytest.param(answer(body=bulk([entry(ttft=-3.0), entry()])), id="a negative ttft"),
        pytest.param(answer(body=bulk([entry(), entry(tpot=-0.001)])), id="a negative tpot"),
        pytest.param(
            answer(
                content=b'{"predictions": ['
                + json.dumps(entry()).encode()
                + b", "
                + json.dumps(entry()).replace("50.0", "NaN").encode()
                + b"]}"
            ),
            id="NaN ttft",
        ),
        pytest.param(
            answer(
                content=b'{"predictions": ['
                + json.dumps(entry()).encode()
                + b", "
                + json.dumps(entry()).replace("10.0", "Infinity").encode()
                + b"]}"
            ),
            id="infinite tpot",
        ),
        # the EPP's client refuses another count too (latencypredictorclient/coalescer.go:165 at llm-d-router ebab6879)
        pytest.param(answer(body=bulk([entry()])), id="fewer predictions than requests"),
        pytest.param(answer(body=bulk([entry(), entry(), entry()])), id="more predictions than requests"),
    ],
)
def test_an_answer_with_values_out_of_range_is_an_invalid_answer_discarded_whole(
    handler: Callable[..., httpx.Response],
) -> None:
    results, counted, client = run(handler)
    assert results == [None, None]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_INVALID_ANSWER)]
    assert client.breaker_states() == {URL: "open"}  # breaker_failures=1: a failure for the breaker


def test_an_invalid_answer_is_retried_on_another_replica() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        bad = request.url.host == "prediction"
        return httpx.Response(200, json=bulk([entry_with(quantile=90 if bad else 0.9), entry()]))

    counted: list[tuple[str, str]] = []

    async def go() -> list[Prediction | None]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = PredictionClient(
                [URL, "http://other:8001"], Predictions(), http, lambda p, r: counted.append((p, r))
            )
            return await client.predict(FEATURES, c.PURPOSE_SHADOW)

    results = asyncio.run(go())
    assert [r.quantile if r else None for r in results] == [0.9, 0.9]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_INVALID_ANSWER), (c.PURPOSE_SHADOW, c.RESULT_SUCCESS)]


@pytest.mark.parametrize("status", [400, 404, 500, 502, 503])
def test_other_statuses_are_http_errors(status: int) -> None:
    results, counted, client = run(answer(status, {"detail": "no"}))
    assert results == [None, None]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_HTTP_ERROR)]
    assert client.breaker_states() == {URL: "open"}


def test_features_that_json_cannot_carry_are_rejected_without_a_call() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no call expected")

    results, counted, client = run(handler, [FEATURES[0], Features(float("nan"), 1, 0, 0, 1, 0.0)])
    assert results == [None, None]
    assert counted == [(c.PURPOSE_SHADOW, c.RESULT_REJECTED)]
    assert client.breaker_states() == {URL: "closed"}


def test_no_features_no_call() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no call expected")

    assert run(handler, [])[:2] == ([], [])


def test_a_client_needs_a_server() -> None:
    with pytest.raises(ValueError):
        PredictionClient([], Predictions(), httpx.AsyncClient())


def test_an_unusable_url_is_a_connection_error() -> None:
    counted: list[tuple[str, str]] = []

    async def go() -> list[Prediction | None]:
        async with httpx.AsyncClient() as http:
            client = PredictionClient(
                ["http://exa mple:8001"], Predictions(), http, lambda p, r: counted.append((p, r))
            )
            return await client.predict(FEATURES, c.PURPOSE_HEADROOM)

    assert asyncio.run(go()) == [None, None]
    assert counted == [(c.PURPOSE_HEADROOM, c.RESULT_CONNECTION_ERROR)]
