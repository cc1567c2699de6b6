"""Shadow predictions of a P/D request as the llm-d EPP makes them: TTFT on the prefill pod, TPOT on the decode pod.

For a P/D request the EPP keeps, at routing time, the TTFT predicted for the *prefill* endpoint (with that pod's
state, in-flight load and ``pod_type``) and the TPOT predicted for the decode endpoint (llm-d-router ebab6879
``predictedlatency/requestcontrol_hooks.go:83-97`` PreRequest, ``:228-241`` processPreRequestForLatencyPrediction,
``:261-281`` the prefill TTFT trained on the prefill pod). sloscope asks the predictor the same two questions in one
bulk call. The prediction server here answers by the stand-in's documented formula (tests/support/prediction_server.py):

 pod        role     waiting running kv    ttft_ms = 20 + 10 w + 0.1 x 400 + 100 kv    tpot_ms = 5 + 0.5 r + 10 kv
 prefill-0  prefill  6       2       0.25  20 + 60 + 40 + 25 = 145                      (6.5 + 2.5 = 9, not used)
 decode-0   decode   1       30      0.5   (20 + 10 + 40 + 50 = 120, not used)          5 + 15 + 5 = 25
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from types import SimpleNamespace
from typing import Any

import httpx
import pyarrow as pa
from prometheus_client import CollectorRegistry

from sloscope import conventions as c
from sloscope.config import Headroom, Predictions
from sloscope.predictor.client import PredictionClient
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.prediction_series import PredictionSeries
from sloscope.processors.predictions import PredictionTracker
from sloscope.processors.running_slos import RunningSLOs
from sloscope.processors.shadow import ShadowPredictor
from sloscope.processors.streaming_modes import StreamingModes
from sloscope.receivers.discovery import Target, sorted_labels
from sloscope.receivers.protocols import PodState
from tests.support.joined_requests import answered
from tests.support.prediction_server import predicted_tpot_ms, predicted_ttft_ms
from tests.support.records import rows_of
from tests.support.stage import publishing_to

ROLE = "llm-d.ai/role"
PREFILL = Target("pool-a", "prefill-0", "10.0.0.1:8000", labels=sorted_labels({ROLE: "prefill"}))
DECODE = Target("pool-a", "decode-0", "10.0.0.2:8000", labels=sorted_labels({ROLE: "decode"}))
STATES = {
    PREFILL.key: PodState(waiting=6.0, running=2.0, kv_cache_utilization=0.25, lora=None, models=frozenset()),
    DECODE.key: PodState(waiting=1.0, running=30.0, kv_cache_utilization=0.5, lora=None, models=frozenset()),
}
SETTINGS = Predictions(
    timeout_seconds=30.0,
    batch_wait_seconds=0.01,
    max_per_second=10_000,
    epp_generation="llm-d",
    endpoint_role_label=ROLE,
)


class Rig:
    def __init__(self, *, streaming: bool = True) -> None:
        self.tables: list[pa.RecordBatch] = []
        self.bodies: list[list[dict[str, Any]]] = []
        self.registry = CollectorRegistry()
        self.history = PodHistory(8, 300.0, 60.0)
        for target in (PREFILL, DECODE):
            self.history.track(target)
        self.history.record(DECODE.key, 100.0, STATES[DECODE.key])
        series = PredictionSeries(self.registry, ["pool-a"])
        self.tracker = PredictionTracker(
            settings=SETTINGS,
            headroom=Headroom(),
            history=self.history,
            running=RunningSLOs(),
            series=series,
            predicted_pools={"pool-a"},
            streaming_of=StreamingModes({}, default=streaming).streaming,
            rng=random.Random(7),
            sink=self.tables.append,
        )
        self._publish = publishing_to(self.tracker)
        self.http = httpx.AsyncClient(transport=httpx.MockTransport(self.answer))
        client = PredictionClient(["http://pool-a:8001"], SETTINGS, self.http, functools.partial(series.call, "pool-a"))
        self.shadow = ShadowPredictor(self.tracker, self.history, {"pool-a": client}, SETTINGS)

    async def answer(self, request: httpx.Request) -> httpx.Response:
        asked = json.loads(request.content)["requests"]
        self.bodies.append(asked)
        predictions = [  # the entries of fixtures/predictor/llm-d/mean/predict-bulk-strict-response-new-fields.json
            {
                "ttft_ms": predicted_ttft_ms(r),
                "tpot_ms": predicted_tpot_ms(r),
                "quantile": 0.9,
                "objective_type": "mean",
                "model_type": "xgboost",
            }
            for r in asked
        ]
        return httpx.Response(200, json={"predictions": predictions})

    @property
    def records(self) -> list[SimpleNamespace]:
        """The records so far, a row each (its columns as attributes)."""
        return rows_of(self.tables)

    def publish(self, trace: int, **fields: Any) -> None:
        request = answered(f"{trace:032x}", DECODE.pod, pool="pool-a", server_ttft_seconds=0.08, **fields)
        self._publish(request)

    def drain(self) -> None:
        async def go() -> None:
            await self.shadow.drain_once("pool-a")
            await self.http.aclose()

        asyncio.run(go())


def asked_of(body: dict[str, Any]) -> tuple[str, int, int, float]:
    return body["pod_type"], body["num_request_waiting"], body["num_request_running"], body["kv_cache_percentage"]


def test_a_pd_request_gets_its_ttft_from_the_prefill_pod_and_its_tpot_from_the_decode_pod() -> None:
    rig = Rig()
    rig.history.record(PREFILL.key, 100.0, STATES[PREFILL.key])
    rig.publish(1, prefill_pod=PREFILL.pod)
    rig.publish(2)  # an aggregated request on the same pod: one question, both answers from it
    rig.drain()
    assert [[asked_of(body) for body in call] for call in rig.bodies] == [
        [("decode", 1, 30, 0.5), ("prefill", 6, 2, 0.25), ("decode", 1, 30, 0.5)]
    ]
    assert [(r.predicted_ttft_seconds, r.predicted_tpot_seconds) for r in rig.records] == [
        (0.145, 0.025),  # prefill-0's TTFT, decode-0's TPOT
        (0.12, 0.025),  # decode-0's both
    ]


def test_with_streaming_off_the_pd_end_to_end_prediction_is_the_prefill_pods() -> None:
    """Streaming off, the EPP's "TTFT" is end-to-end latency, still predicted (and trained) on the prefill endpoint."""
    rig = Rig(streaming=False)
    prefill_busy = PodState(waiting=40.0, running=2.0, kv_cache_utilization=0.25, lora=None, models=frozenset())
    rig.history.record(PREFILL.key, 100.0, prefill_busy)
    rig.publish(1, prefill_pod=PREFILL.pod)
    rig.drain()
    (record,) = rig.records
    assert (record.predicted_e2e_seconds, record.predicted_ttft_seconds, record.predicted_tpot_seconds) == (
        0.485,  # 20 + 400 + 40 + 25 ms: the prefill pod's queue, not the decode pod's 1
        None,
        None,
    )


def test_without_the_prefill_pods_state_the_request_is_skipped_not_asked_of_the_decode_pod() -> None:
    rig = Rig()  # prefill-0 tracked, never scraped
    rig.publish(1, prefill_pod=PREFILL.pod)
    rig.publish(2, prefill_pod="prefill-unknown")
    rig.drain()
    assert rig.bodies == []
    assert [(r.prediction_source, r.prediction_skipped) for r in rig.records] == [
        (c.SOURCE_NONE, c.SKIP_NO_POD_STATE),
        (c.SOURCE_NONE, c.SKIP_NO_POD_STATE),
    ]
