"""The demo's predictor servers over real HTTP: the recorded shapes, and sloscope's own clients against them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sloscope import conventions as c
from sloscope.config import Predictions, PredictorServers
from sloscope.demo.predictor_servers import PredictorFleet
from sloscope.demo.quantile_model import MODEL_TYPE, OnlineQuantileModel
from sloscope.predictor.client import PredictionClient
from sloscope.predictor.features import Features
from sloscope.predictor.health import PredictorHealth
from sloscope.predictor.status import parse_last_modified, parse_training_metrics
from sloscope.telemetry import Telemetry

pytestmark = pytest.mark.integration

HOUR = 3600.0  # background loops that never tick during a test: the tests retrain and sync on demand


def recorded(shared: Path, name: str) -> Any:
    return json.loads((shared / "fixtures" / "predictor" / name).read_text())


def shape(value: Any) -> Any:
    """Keys and value types, recursively: what must match between a recorded body and ours."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def epp_entries(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Training entries as the EPP sends them: a TTFT one (no tokens generated) and a TPOT one per request."""
    out: list[dict[str, Any]] = []
    for _ in range(n):
        length, running, waiting = rng.randint(50, 1500), rng.randint(0, 30), rng.randint(0, 12)
        features = {
            "kv_cache_percentage": round(rng.random(), 3),
            "input_token_length": length,
            "num_request_waiting": waiting,
            "num_request_running": running,
            "prefix_cache_score": round(rng.random(), 2),
        }
        ttft = 15.0 + 0.12 * length + 25.0 * waiting + rng.expovariate(1 / 20.0)
        tpot = 6.0 + 0.6 * running + rng.expovariate(1 / 3.0)
        out.append({**features, "num_tokens_generated": 0, "actual_ttft_ms": ttft, "actual_tpot_ms": 0})
        out.append(
            {**features, "num_tokens_generated": rng.randint(2, 400), "actual_ttft_ms": 0, "actual_tpot_ms": tpot}
        )
    return out


@contextlib.asynccontextmanager
async def running_fleet(
    n: int = 2, retrain_seconds: float = HOUR, sync_seconds: float = HOUR
) -> AsyncIterator[tuple[PredictorFleet, httpx.AsyncClient]]:
    fleet = PredictorFleet(
        OnlineQuantileModel(0.9, random.Random(1)), retrain_seconds=retrain_seconds, sync_seconds=sync_seconds
    )
    await fleet.start(n)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
            yield fleet, http
    finally:
        await fleet.stop()


async def train(fleet: PredictorFleet, http: httpx.AsyncClient, seed: int = 2, n: int = 600) -> None:
    response = await http.post(
        fleet.training_url + "/add_training_data_bulk", json={"entries": epp_entries(random.Random(seed), n)}
    )
    assert response.status_code == 202
    assert await fleet.retrain_now() is True
    await fleet.sync_now()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_not_ready_before_the_first_fit_as_the_real_servers(shared: Path) -> None:
    async def scenario() -> None:
        async with running_fleet() as (fleet, http):
            training = await http.get(fleet.training_url + "/readyz")
            assert (training.status_code, training.json()) == (503, {"detail": "Models are not ready."})
            listed = (await http.get(fleet.training_url + "/models/list")).json()
            assert [m["last_modified"] for m in listed["models"].values()] == [None] * 4
            assert parse_last_modified(listed) == {}
            url = fleet.prediction_urls[0]
            ready = await http.get(url + "/readyz")
            assert (ready.status_code, ready.json()) == (503, {"detail": "Models are not ready"})
            status = (await http.get(url + "/status")).json()
            assert shape(status) == shape(recorded(shared, "prediction-server-status.json"))
            assert (status["is_ready"], status["models_exist"]) == (False, {"ttft_model": False, "tpot_model": False})
            request = recorded(shared, "predict-bulk-request.json")
            single = await http.post(url + "/predict", json=request["requests"][0])
            assert (single.status_code, single.json()) == (503, {"detail": "Models not ready"})
            strict = await http.post(url + "/predict/bulk/strict", json=request)
            assert (strict.status_code, strict.json()) == (503, {"detail": "Models not ready"})
            bulk = await http.post(url + "/predict/bulk", json=request)
            assert bulk.status_code == 200
            body = bulk.json()
            assert body["predictions"] == [None, None, None]
            assert body["errors"] == [
                {"index": i, "error": "Batch prediction error: 503: Models not ready", "request": r}
                for i, r in enumerate(request["requests"])
            ]
            assert (body["successful_predictions"], body["failed_predictions"]) == (0, 3)

    run(scenario)


def test_trained_servers_answer_in_the_recorded_shapes(shared: Path) -> None:
    async def scenario() -> None:
        async with running_fleet() as (fleet, http):
            accepted = await http.post(
                fleet.training_url + "/add_training_data_bulk",
                json=recorded(shared, "add-training-data-bulk-request.json"),
            )
            assert (accepted.status_code, accepted.json()) == (202, {"message": "Accepted 2 training samples."})
            await train(fleet, http)
            ready = await http.get(fleet.training_url + "/readyz")
            assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
            snapshot = fleet.model.snapshot()
            request = recorded(shared, "predict-bulk-request.json")
            expected = [snapshot.predict(Features(**r)) for r in request["requests"]]
            for url in fleet.prediction_urls:
                ready = await http.get(url + "/readyz")
                assert (ready.status_code, ready.json()) == (
                    200,
                    {"status": "ready", "model_type": MODEL_TYPE, "quantile": 0.9},
                )
                for path, fixture in (
                    ("/predict/bulk", "predict-bulk-response.json"),
                    ("/predict/bulk/strict", "predict-bulk-strict-response.json"),
                ):
                    body = (await http.post(url + path, json=request)).json()
                    assert shape(body) == shape(recorded(shared, fixture))
                    assert [(p["ttft_ms"], p["tpot_ms"]) for p in body["predictions"]] == [
                        (e.ttft_ms, e.tpot_ms) for e in expected if e
                    ]
                    assert {(p["model_type"], p["quantile"]) for p in body["predictions"]} == {(MODEL_TYPE, 0.9)}
                single = (await http.post(url + "/predict", json=request["requests"][0])).json()
                assert shape(single) == shape(recorded(shared, "prediction-server-predict-response.json"))
                status = (await http.get(url + "/status")).json()
                assert shape(status) == shape(recorded(shared, "prediction-server-status.json"))
                assert (status["is_ready"], status["training_server_url"]) == (True, fleet.training_url)

    run(scenario)


def test_a_validation_error_is_the_recorded_one(shared: Path) -> None:
    invalid = {  # kv_cache_percentage out of range and prefix_cache_score missing, as recorded
        "kv_cache_percentage": 1.3,
        "input_token_length": 500,
        "num_request_waiting": 2,
        "num_request_running": 8,
        "num_tokens_generated": 1,
    }

    async def scenario() -> None:
        async with running_fleet(n=1) as (fleet, http):
            await train(fleet, http)
            url = fleet.prediction_urls[0]
            single = await http.post(url + "/predict", json=invalid)
            assert single.status_code == 422
            assert single.json() == recorded(shared, "prediction-server-422-validation-error.json")
            bulk = await http.post(url + "/predict/bulk", json={"requests": [invalid]})
            assert bulk.status_code == 422
            assert [(e["type"], e["loc"]) for e in bulk.json()["detail"]] == [
                ("less_than_equal", ["body", "requests", 0, "kv_cache_percentage"]),
                ("missing", ["body", "requests", 0, "prefix_cache_score"]),
            ]
            empty = await http.post(url + "/predict/bulk/strict", json={"requests": []})
            assert (empty.status_code, empty.json()["detail"][0]["type"]) == (422, "too_short")
            bad_entry = await http.post(
                fleet.training_url + "/add_training_data_bulk", json={"entries": [{**invalid, "prefix_cache_score": 0}]}
            )
            assert bad_entry.status_code == 422

    run(scenario)


def test_the_metrics_page_reads_as_sloscope_reads_it() -> None:
    async def scenario() -> None:
        async with running_fleet(n=1) as (fleet, http):
            for seed in range(3):
                await train(fleet, http, seed=seed)
            response = await http.get(fleet.training_url + "/metrics")
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            page = response.text
            rings = fleet.model.metrics().rings
            quantile, coverage = parse_training_metrics(page)
            assert quantile == 0.9
            assert coverage == {
                "ttft": pytest.approx(rings["ttft"].coverage_percent[-1] / 100, abs=1e-8),
                "tpot": pytest.approx(rings["tpot"].coverage_percent[-1] / 100, abs=1e-8),
            }
            assert [line for line in page.splitlines() if line.startswith("ttft_coverage_percent")] == [
                f'ttft_coverage_percent{{idx="{i}"}} {value:.6f}'
                for i, value in enumerate(rings["ttft"].coverage_percent)
            ]
            assert not [line for line in page.splitlines() if line.startswith("#")]
            # untyped: the reference parser makes one family per line, so samples are gathered by name
            families = list(text_string_to_metric_families(page))
            assert {f.type for f in families} == {"unknown"}
            samples: dict[str, list[Any]] = {}
            for family in families:
                for sample in family.samples:
                    samples.setdefault(sample.name, []).append(sample)
            assert samples["model_type"][0].labels == {"type": MODEL_TYPE}
            assert samples["target_coverage_percent"][0].value == 90.0
            counts = [s for s in samples["training_samples_count"] if s.labels["model"] == "ttft"]
            assert len(counts) == 5 * 20 * 4
            assert sum(s.value for s in counts) == len(fleet.model.metrics().training["ttft"])
            for name in ("ttft_violation_rate_percent", "tpot_quantile_loss", "tpot_coverage_percent"):
                assert [s.labels["idx"] for s in samples[name]] == ["0", "1", "2"]

    run(scenario)


def test_sloscope_health_and_prediction_client_work_against_the_fleet() -> None:
    async def scenario() -> None:
        async with running_fleet() as (fleet, http):
            await train(fleet, http)
            registry = CollectorRegistry()
            servers = PredictorServers(training_url=fleet.training_url, prediction_urls=fleet.prediction_urls)
            health = PredictorHealth("pool-a", servers, http, Telemetry(registry), timeout=5.0)
            snapshot = await health.poll_once()
            assert [(s.role, s.up) for s in snapshot.servers] == [
                (c.ROLE_TRAINING, True),
                (c.ROLE_PREDICTION, True),
                (c.ROLE_PREDICTION, True),
            ]
            assert snapshot.quantile == 0.9
            assert snapshot.model_last_modified == pytest.approx(fleet.model.last_modified, abs=1e-6)
            rings = fleet.model.metrics().rings
            assert snapshot.coverage == pytest.approx(
                {s: rings[s].coverage_percent[-1] / 100 for s in c.SIGNALS}, abs=1e-8
            )

            synced = fleet.model.snapshot()
            client = PredictionClient(fleet.prediction_urls, Predictions(batch_size=100), http)
            features = [Features(0.1 * i, 100 + 50 * i, i % 7, 3 * i, 1, (i % 5) / 4) for i in range(10)]
            assert await client.predict(features, "shadow") == [synced.predict(f) for f in features]

            # a newer fit is not served until the next sync: the servers keep the snapshot they loaded
            await http.post(
                fleet.training_url + "/add_training_data_bulk", json={"entries": epp_entries(random.Random(9), 300)}
            )
            assert await fleet.retrain_now() is True
            assert fleet.model.predict(features[3]) != synced.predict(features[3])
            assert await client.predict(features, "shadow") == [synced.predict(f) for f in features]
            before = (await http.get(fleet.prediction_urls[0] + "/status")).json()["last_model_load"]
            await fleet.sync_now()
            assert await client.predict(features, "shadow") == [fleet.model.predict(f) for f in features]
            assert (await http.get(fleet.prediction_urls[0] + "/status")).json()["last_model_load"] > before

    run(scenario)


def test_the_background_loops_retrain_and_sync_on_their_own() -> None:
    async def scenario() -> None:
        async with running_fleet(n=1, retrain_seconds=0.01, sync_seconds=0.01) as (fleet, http):
            entries = {"entries": epp_entries(random.Random(3), 200)}
            assert (await http.post(fleet.training_url + "/add_training_data_bulk", json=entries)).status_code == 202
            url = fleet.prediction_urls[0] + "/readyz"
            async with asyncio.timeout(30):  # a bound on a wait, not a timing assertion
                while (await http.get(url)).status_code != 200:
                    await asyncio.sleep(0.01)
            assert fleet.model.ready
            assert fleet.model.pending == 0

    run(scenario)


def test_stop_is_safe_twice_and_without_start() -> None:
    async def scenario() -> None:
        unstarted = PredictorFleet(seed=3)
        await unstarted.stop()
        fleet = PredictorFleet(seed=3)
        await fleet.start(1)
        urls = [fleet.training_url, *fleet.prediction_urls]
        await fleet.stop()
        await fleet.stop()
        async with httpx.AsyncClient(trust_env=False) as http:
            for url in urls:
                with pytest.raises(httpx.ConnectError):
                    await http.get(url + "/healthz")

    run(scenario)
