"""A real ``sloscope serve`` judging a mean-objective latency predictor, then seeing it reset; and the quantile twin.

Real parts on loopback: a vLLM pod page (the recorded vLLM 0.33 page: 3 waiting, 27 running, KV cache
0.5873), a training-server stand-in serving the capture of the llm-d latency predictor
(``fixtures/predictor/llm-d/<objective>/``, training/training_server.py at b5d19f1) and a prediction-server
stand-in answering with ``objective_type`` (prediction/prediction_server.py:913-919 at b5d19f1) and the
recorded llm-d ``/status`` (:966-995), whose predictions are the documented formula of
``tests/support/prediction_server.py``. Spans go to serve over OTLP/HTTP; everything is read from serve's
/metrics.

Two requests to pod ``vllm-a`` (the llm-d EPP's features: prompt tokens as ``input_token_length``, the pod's
running count without an EPP page, llm-d-router ebab6879 predictedlatency/plugin.go:222-227, 417-423):

 trace  prompt  ttft (s)  e2e (s)  tokens  tpot (s)  predicted ttft (ms)              predicted tpot (ms)
 401    400     0.10      0.50     11      0.04      20+10*3+0.1*400+100*.5873=148.73  5+.5*27+10*.5873=24.373
 402    1000    0.25      0.45     11      0.02      20+30+100+58.73=208.73            24.373

Mean mode (actual - predicted): TTFT -0.04873 and +0.04127 s, TPOT +0.015627 and -0.004373 s, fed to the
error sums (bias, MAE, RMSE over any window in PromQL). The coverage families (``sloscope_predictions_total``,
``..._prediction_covered_total``, ``..._prediction_pinball_loss_seconds_total``, ``..._prediction_ratio``) are
**absent**, not 0: their label sets carry the model and the source, known only once a prediction of that
objective is compared, so serve creates none up front (only the pool-level skip, call and retry counters
start at zero); a mean prediction is never judged against a quantile it does not predict. Quantile mode:
the same requests cover TTFT once (0.10 <= 0.14873) and TPOT once (0.02 <= 0.024373), and the mean sums are
absent for the same reason.
"""

from __future__ import annotations

import asyncio
import functools
import math
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sloscope import conventions as c
from sloscope.demo.prometheus import PrometheusServer
from sloscope.generators.dashboards import dashboards, panel_queries
from sloscope.generators.dashboards.prediction_accuracy import BIAS_AND_MAE
from sloscope.generators.dashboards.prediction_accuracy import FILE_NAME as PREDICTION_ACCURACY
from sloscope.loading import default_spec
from sloscope.testing import export_request, gateway_attributes, span, to_otlp_json, vllm_attributes
from tests.integration.conftest import Server, start_server, wait_until
from tests.integration.test_first_miss_counting import samples, scraped
from tests.integration.test_prometheus_e2e import prometheus_ready, substitute
from tests.support.page_server import PageServer, vllm_page
from tests.support.prediction_server import (
    PredictionBehaviour,
    PredictionServer,
    TrainingBehaviour,
    TrainingServer,
    predicted_tpot_ms,
    predicted_ttft_ms,
)
from tests.support.training_server import recorded_metrics_page, without_samples

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "llama-pool"
POD = "vllm-a"
WAITING, RUNNING, KV = 3, 27, 0.5873  # the recorded vLLM 0.33 page
STRICT = "/predict/bulk/strict"


@dataclass(frozen=True)
class Sent:
    trace: int
    prompt_tokens: int
    ttft: float
    e2e: float
    tokens: int = 11

    @property
    def tpot(self) -> float:
        return (self.e2e - self.ttft) / (self.tokens - 1)

    def features(self) -> dict[str, float]:
        """What the llm-d EPP sends for it (the stand-in's formula reads these four)."""
        return {
            "num_request_waiting": WAITING,
            "num_request_running": RUNNING,
            "input_token_length": self.prompt_tokens,
            "kv_cache_percentage": KV,
        }

    def predicted(self) -> tuple[float, float]:
        """(ttft, tpot) in seconds, by the stand-in's documented formula."""
        return predicted_ttft_ms(self.features()) / 1000.0, predicted_tpot_ms(self.features()) / 1000.0


REQUESTS = (Sent(401, 400, 0.10, 0.50), Sent(402, 1000, 0.25, 0.45))


def send(server: Server, requests: tuple[Sent, ...]) -> None:
    """Each request as a gateway span and vLLM's llm_request span in one trace, arrived a moment ago."""
    arrival_ns = time.time_ns()
    spans = []
    for r in requests:
        gateway = gateway_attributes(model=MODEL)
        spans.append(
            span(r.trace, 1, "gateway.request", gateway, resource={"service.name": "gateway"}, start_ns=arrival_ns)
        )
        attributes = vllm_attributes(
            ttft=r.ttft, e2e=r.e2e, completion_tokens=r.tokens, prompt_tokens=r.prompt_tokens, model=MODEL
        )
        start = arrival_ns  # scheduled at once: the TTFT from the gateway's arrival is ``r.ttft``
        resource = {"service.name": "vllm", "k8s.pod.name": POD}
        spans.append(
            span(
                r.trace,
                2,
                "llm_request",
                attributes,
                parent=1,
                resource=resource,
                start_ns=start,
                end_ns=start + int(r.e2e * 1e9),
            )
        )
    body = to_otlp_json(export_request(spans))
    request = urllib.request.Request(server.otlp_http, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@dataclass
class Env:
    server: Server
    training: TrainingServer
    prediction: PredictionServer


def llmd_fixture(shared: Path, objective: str, name: str) -> str:
    return (shared / "fixtures" / "predictor" / "llm-d" / objective / name).read_text()


def started(
    tmp: Path, shared: Path, objective: str, *, reset_probe: bool, streaming: bool | None = True
) -> Iterator[Env]:
    """Serve with one pool: the recorded pod page, the llm-d predictor stand-ins of ``objective``; ``streaming``:
    the pool's ``streaming_mode`` (None: unset, the upstream default, off)."""
    status = llmd_fixture(shared, objective, "prediction-server-status.json")
    with (
        PageServer(vllm_page(shared)) as pod,
        TrainingServer(shared, TrainingBehaviour(llmd=objective)) as training,
        PredictionServer(PredictionBehaviour(objective=objective, status_body=status)) as prediction,
    ):
        (tmp / "slo.yaml").write_text(yaml.safe_dump({"version": "sloscope/v1", "classes": []}))  # no headroom calls
        settings: dict[str, Any] = {
            "slo_spec": str(tmp / "slo.yaml"),
            "join": {"window_seconds": 0.3, "trace_ttl_seconds": 5.0},
            "scrape": {"interval_seconds": 0.2, "timeout_seconds": 1.0, "stale_after_seconds": 60},
            "predictions": {
                "batch_wait_seconds": 0.1,
                "timeout_seconds": 2.0,
                "health_interval_seconds": 0.2,
                # epp_generation auto: no EPP page, so the prediction server's /status, which states objective_type,
                # tells the llm-d predictor apart from its first health poll on
                "reset_probe": reset_probe,
            },
            "pools": [
                {
                    "name": POOL,
                    "model": MODEL,
                    "targets": {"static": [{"address": pod.address, "pod": POD}]},
                    "predictor": {"training_url": training.url, "prediction_urls": [prediction.url]},
                    "streaming_mode": streaming,  # True: TTFT and TPOT judged apart, as with streaming on
                }
            ],
        }
        server = start_server(tmp, settings)
        try:
            wait_until(lambda: server.value("sloscope_pod_up", pool=POOL, pod=POD) == 1.0, what="pod scraped")
            yield Env(server, training, prediction)
        finally:
            server.stop()


@pytest.fixture
def mean(tmp_path: Path, shared: Path) -> Iterator[Env]:
    """A serve of its own per test: the sums asserted are those of the test's requests only."""
    yield from started(tmp_path, shared, c.OBJECTIVE_MEAN, reset_probe=True)


@pytest.fixture
def quantile(tmp_path: Path, shared: Path) -> Iterator[Env]:
    yield from started(tmp_path, shared, c.OBJECTIVE_QUANTILE, reset_probe=False)


@pytest.fixture
def upstream_defaults(tmp_path: Path, shared: Path) -> Iterator[Env]:
    """llm-d-router's defaults: the mean objective, streamingMode off (no setting, no EPP page to say otherwise)."""
    yield from started(tmp_path, shared, c.OBJECTIVE_MEAN, reset_probe=False, streaming=None)


def key(signal: str) -> dict[str, str]:
    return {c.MODEL: MODEL, c.POOL: POOL, c.SIGNAL: signal, c.SOURCE: c.SOURCE_SHADOW}


def names(server: Server) -> set[str]:
    return {name for name, _ in server.samples()}


def families(*definitions: c.MetricDef) -> set[str]:
    """Every sample name the families can expose (a histogram's _bucket/_sum/_count, a counter's _total)."""
    out: set[str] = set()
    for d in definitions:
        out |= {d.name + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count", "_created")}
    return out


def shadow_predicted(env: Env, definition: c.MetricDef, requests: tuple[Sent, ...]) -> list[dict[str, Any]]:
    """Sends ``requests``, waits until serve compared a shadow prediction of each for both signals, and returns
    the request objects the prediction stand-in received meanwhile (by prompt length), as sent."""
    server, received = env.server, env.prediction.behaviour.received
    before = {signal: server.value(definition.exposed_name, **key(signal)) for signal in c.SIGNALS}
    first = len(received)
    send(server, requests)
    for signal in c.SIGNALS:
        count = before[signal] + len(requests)
        compared = functools.partial(is_value, server, definition.exposed_name, count, **key(signal))
        wait_until(compared, what=f"{count} shadow {signal} predictions compared")
    rows = [row for path, body in received[first:] if path == STRICT for row in body["requests"]]
    return sorted(rows, key=lambda row: row["input_token_length"])


def llm_d_request(r: Sent) -> dict[str, Any]:
    """What the llm-d EPP sends for ``r`` to a pod without a role label and no EPP page read (training.go:33-59)."""
    return {
        **r.features(),
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.0,
        "prefill_tokens_in_flight": 0,
        "decode_tokens_in_flight": 0,
        "encoder_matched_size": 0,
        "encoder_input_size": 0,
    }


def is_value(server: Server, name: str, value: float, **labels: str) -> bool:
    return server.value(name, **labels) == value


def all_trained(server: Server, what: str) -> None:
    for signal in c.SIGNALS:
        trained = functools.partial(is_value, server, c.PREDICTOR_TRAINED.name, 1.0, pool=POOL, signal=signal)
        wait_until(trained, what=f"{signal} {what}")


def sum_of_samples(page: str, model: str) -> float:
    """The training_samples_count lines of ``model`` on a recorded page, added up (by hand, not by sloscope)."""
    pattern = rf'^training_samples_count\{{model="{model}",[^}}]*\}} (\d+)$'
    return float(sum(int(v) for v in re.findall(pattern, page, flags=re.M)))


QUANTILE_FAMILIES = (c.PREDICTIONS, c.PREDICTION_COVERED, c.PREDICTION_PINBALL_LOSS, c.PREDICTION_RATIO)
MEAN_FAMILIES = (
    c.MEAN_PREDICTIONS,
    c.MEAN_PREDICTION_PREDICTED,
    c.MEAN_PREDICTION_UNDERESTIMATE,
    c.MEAN_PREDICTION_OVERESTIMATE,
    c.MEAN_PREDICTION_SQUARED_ERROR,
)


def test_a_mean_predictor_is_judged_by_its_error_sums_through_serve(mean: Env, shared: Path) -> None:
    server = mean.server
    objective = c.PREDICTOR_OBJECTIVE.name
    wait_until(lambda: server.value(objective, pool=POOL, objective=c.OBJECTIVE_MEAN) == 1, what="mean objective")
    assert server.value(objective, pool=POOL, objective=c.OBJECTIVE_QUANTILE) == 0.0
    assert (objective, frozenset({(c.POOL, POOL), (c.OBJECTIVE, c.OBJECTIVE_QUANTILE)})) in server.samples()

    assert shadow_predicted(mean, c.MEAN_PREDICTIONS, REQUESTS) == [llm_d_request(r) for r in REQUESTS]

    # The inputs as serve evaluated them.
    assert server.total("sloscope_ttft_seconds_sum", pool=POOL) == pytest.approx(0.35, abs=1e-12)
    assert server.total("sloscope_tpot_seconds_sum", pool=POOL) == pytest.approx(0.06, abs=1e-12)
    (p1_ttft, p1_tpot), (p2_ttft, p2_tpot) = (r.predicted() for r in REQUESTS)
    assert (p1_ttft, p1_tpot, p2_ttft, p2_tpot) == pytest.approx((0.14873, 0.024373, 0.20873, 0.024373), abs=1e-12)

    expected = {
        # signal: (sum predicted, sum too low, sum too high, sum error^2), errors as in the module docstring
        c.SIGNAL_TTFT: (0.35746, 0.04127, 0.04873, 0.04873**2 + 0.04127**2),
        c.SIGNAL_TPOT: (0.048746, 0.015627, 0.004373, 0.015627**2 + 0.004373**2),
    }
    for signal, (predicted, under, over, squared) in expected.items():
        labels = key(signal)
        assert server.value(c.MEAN_PREDICTIONS.exposed_name, **labels) == 2.0
        assert server.value(c.MEAN_PREDICTION_PREDICTED.exposed_name, **labels) == pytest.approx(predicted, abs=1e-12)
        assert server.value(c.MEAN_PREDICTION_UNDERESTIMATE.exposed_name, **labels) == pytest.approx(under, abs=1e-12)
        assert server.value(c.MEAN_PREDICTION_OVERESTIMATE.exposed_name, **labels) == pytest.approx(over, abs=1e-12)
        assert server.value(c.MEAN_PREDICTION_SQUARED_ERROR.exposed_name, **labels) == pytest.approx(squared, abs=1e-12)
    # bias = (under - over) / n, MAE = (under + over) / n and RMSE, as the dashboards take them from the sums
    ttft = key(c.SIGNAL_TTFT)
    count = server.value(c.MEAN_PREDICTIONS.exposed_name, **ttft)
    under = server.value(c.MEAN_PREDICTION_UNDERESTIMATE.exposed_name, **ttft)
    over = server.value(c.MEAN_PREDICTION_OVERESTIMATE.exposed_name, **ttft)
    assert (under - over) / count == pytest.approx(-0.00373, abs=1e-12)
    assert (under + over) / count == pytest.approx(0.045)
    rmse = math.sqrt(server.value(c.MEAN_PREDICTION_SQUARED_ERROR.exposed_name, **ttft) / count)
    assert rmse == pytest.approx(math.sqrt((0.04873**2 + 0.04127**2) / 2), abs=1e-12)
    # never judged against a quantile it does not predict: the coverage families do not exist
    assert not names(server) & families(*QUANTILE_FAMILIES)

    # The training server's own accuracy, newest evaluation of the recorded page (ms there, seconds here):
    # ttft_mae{idx="1"} 114.851140, tpot_mae 4.470668, ttft_rmse 159.126286, tpot_rmse 5.932218.
    offline = {
        c.PREDICTOR_MAE_OFFLINE_SECONDS: {c.SIGNAL_TTFT: 0.11485114, c.SIGNAL_TPOT: 0.004470668},
        c.PREDICTOR_RMSE_OFFLINE_SECONDS: {c.SIGNAL_TTFT: 0.159126286, c.SIGNAL_TPOT: 0.005932218},
    }
    for definition, values in offline.items():
        for signal, seconds in values.items():
            assert server.value(definition.name, pool=POOL, signal=signal) == pytest.approx(seconds, abs=1e-12)
    assert not names(server) & families(c.PREDICTOR_COVERAGE_OFFLINE_RATIO)  # a mean page has no coverage ring
    page = recorded_metrics_page(shared, c.OBJECTIVE_MEAN)
    for signal in c.SIGNALS:
        samples = server.value(c.PREDICTOR_TRAINING_SAMPLES.name, pool=POOL, signal=signal)
        assert samples == sum_of_samples(page, signal) > 0
        assert server.value(c.PREDICTOR_TRAINED.name, pool=POOL, signal=signal) == 1.0
    assert mean.prediction.behaviour.calls.count("/predict") >= 2  # the reset probe runs


def test_a_reset_mean_predictor_is_untrained_on_serves_metrics(mean: Env, shared: Path) -> None:
    """The training server restarted without its models: no samples, and its prediction servers serve the
    default models (one fit on a 10 ms target: the same prediction for every request, training_server.py:794-832)
    and report their gated models absent (the recorded fresh /status)."""
    server, trained = mean.server, c.PREDICTOR_TRAINED.name
    all_trained(server, "trained first")
    mean.training.behaviour.metrics = without_samples(recorded_metrics_page(shared, c.OBJECTIVE_MEAN))
    mean.prediction.behaviour.constant_ms = (10.0, 10.0)
    mean.prediction.behaviour.status_body = llmd_fixture(
        shared, c.OBJECTIVE_MEAN, "fresh-prediction-server-status.json"
    )
    samples = c.PREDICTOR_TRAINING_SAMPLES.name

    def reset_seen(signal: str) -> bool:
        """Untrained, no samples held, and the reset logged with the three markers (the three sources are polled
        at once, but one poll may catch the stand-ins half switched: each marker change is logged)."""
        logged = (
            f"latency predictor of pool {POOL}: the {signal} model looks reset to its default (no_samples, constant)"
        )
        return (
            server.value(trained, pool=POOL, signal=signal) == 0.0
            and server.value(samples, pool=POOL, signal=signal) == 0.0
            and any(line.endswith(logged) for line in server.log)
        )

    for signal in c.SIGNALS:
        wait_until(functools.partial(reset_seen, signal), what=f"the {signal} reset")
    assert server.value(c.PREDICTOR_OBJECTIVE.name, pool=POOL, objective=c.OBJECTIVE_MEAN) == 1.0  # still mean

    # Its predictions are still compared, as the constant they are: 10 ms for each of two more requests.
    before = server.value(c.MEAN_PREDICTION_PREDICTED.exposed_name, **key(c.SIGNAL_TTFT))
    shadow_predicted(mean, c.MEAN_PREDICTIONS, (Sent(403, 400, 0.10, 0.50), Sent(404, 1000, 0.25, 0.45)))
    after = server.value(c.MEAN_PREDICTION_PREDICTED.exposed_name, **key(c.SIGNAL_TTFT))
    assert after - before == pytest.approx(0.020, abs=1e-12)

    # Retrained: the markers clear.
    mean.training.behaviour.metrics = None
    mean.prediction.behaviour.constant_ms = None
    mean.prediction.behaviour.status_body = llmd_fixture(shared, c.OBJECTIVE_MEAN, "prediction-server-status.json")
    all_trained(server, "trained again")


def test_a_quantile_predictor_feeds_coverage_and_no_mean_sums_through_serve(quantile: Env) -> None:
    server = quantile.server
    objective = c.PREDICTOR_OBJECTIVE.name
    wait_until(lambda: server.value(objective, pool=POOL, objective=c.OBJECTIVE_QUANTILE) == 1, what="objective")
    assert server.value(objective, pool=POOL, objective=c.OBJECTIVE_MEAN) == 0.0

    assert shadow_predicted(quantile, c.PREDICTIONS, REQUESTS) == [llm_d_request(r) for r in REQUESTS]
    q = 0.9  # the stand-in's and the recorded /status's quantile
    expected = {
        # signal: (covered, pinball loss): TTFT 401 over by 0.04873 s (1-q), 402 under by 0.04127 s (q)
        c.SIGNAL_TTFT: (1.0, (1 - q) * 0.04873 + q * 0.04127),
        # TPOT 401 under by 0.015627 s (q), 402 over by 0.004373 s (1-q)
        c.SIGNAL_TPOT: (1.0, q * 0.015627 + (1 - q) * 0.004373),
    }
    for signal, (covered, loss) in expected.items():
        labels = key(signal)
        assert server.value(c.PREDICTIONS.exposed_name, **labels) == 2.0
        assert server.value(c.PREDICTION_COVERED.exposed_name, **labels) == covered
        assert server.value(c.PREDICTION_PINBALL_LOSS.exposed_name, **labels) == pytest.approx(loss, abs=1e-12)
        assert server.value(c.PREDICTION_RATIO.name + "_count", **labels) == 2.0
    assert not names(server) & families(*MEAN_FAMILIES)
    # the recorded quantile page's newest coverage evaluation; no MAE/RMSE ring on it
    for signal, ratio in ((c.SIGNAL_TTFT, 0.85333333), (c.SIGNAL_TPOT, 0.82214765)):
        value = server.value(c.PREDICTOR_COVERAGE_OFFLINE_RATIO.name, pool=POOL, signal=signal)
        assert value == pytest.approx(ratio, abs=1e-12)
        assert server.value(c.PREDICTOR_TRAINED.name, pool=POOL, signal=signal) == 1.0
    assert not names(server) & families(c.PREDICTOR_MAE_OFFLINE_SECONDS, c.PREDICTOR_RMSE_OFFLINE_SECONDS)
    # predictions.reset_probe is off: the health poll asked no prediction; the shadow calls went to the strict
    # endpoint only
    assert "/predict" not in quantile.prediction.behaviour.calls
    assert {path for path, _ in quantile.prediction.behaviour.received} == {STRICT}


def test_a_negative_bias_reads_negative_through_a_real_prometheus(
    mean: Env, prometheus_binary: Path, tmp_path: Path
) -> None:
    """The dashboard's bias and MAE queries, run by the pinned Prometheus scraping serve, for a predictor too high.

    A first request of one completion token has a TTFT and no TPOT: its comparison starts every TPOT sum at 0, and
    Prometheus scrapes those zeros. Then request 402 (TPOT 0.02 s against 0.024373 s): too high by 0.004373 s, so
    bias = (0 - 0.004373) / 1 and MAE = 0.004373 s. Exact through rate() over $window (1h) at the newest sample's
    timestamp: with every series first stored at 0, Prometheus extrapolates none of them (promql/functions.go
    ``extrapolatedRate``, the zero point and the range's end: see tests/integration/test_first_miss_counting.py), so
    each rate is its increase over 3600 s and the ratios are the increases'. A signed error sum would have fallen
    from 0 to -0.004373 and rate() would have read the fall as a reset: a positive bias.
    """
    server = mean.server
    labels = key(c.SIGNAL_TPOT)
    count = c.MEAN_PREDICTIONS.exposed_name
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    prometheus = PrometheusServer(prometheus_binary, workdir, server.metrics_port, rule_files=[], interval="1s")
    tpot = f'{{signal="{c.SIGNAL_TPOT}", source="{c.SOURCE_SHADOW}"}}'

    async def run() -> dict[str, list[Any]]:
        await prometheus.start()
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=30.0) as http:
                await prometheus_ready(http, prometheus, workdir)
                send(server, (Sent(501, 400, 0.10, 0.50, tokens=1),))
                ttft_compared = functools.partial(is_value, server, count, 1.0, **key(c.SIGNAL_TTFT))
                wait_until(ttft_compared, what="the first TTFT compared")
                assert server.value(count, **labels) == 0.0  # started with the first comparison
                await scraped(http, prometheus.url, f"{c.MEAN_PREDICTION_OVERESTIMATE.exposed_name}{tpot}", 0)
                await scraped(http, prometheus.url, f"{count}{tpot}", 0)
                send(server, (REQUESTS[1],))
                wait_until(functools.partial(is_value, server, count, 1.0, **labels), what="the TPOT compared")
                await scraped(http, prometheus.url, f"{count}{tpot}", 1)
                newest = (await samples(http, prometheus.url, f"{count}{tpot}"))[-1][0]
                out: dict[str, list[Any]] = {}
                for legend, expr in bias_and_mae_queries():
                    response = await http.get(
                        f"{prometheus.url}/api/v1/query", params={"query": expr, "time": f"{newest:.3f}"}
                    )
                    out[legend] = response.json()["data"]["result"]
                return out
        finally:
            await prometheus.stop()

    results = asyncio.run(run())
    by_legend = {
        legend: {r["metric"]["signal"]: float(r["value"][1]) for r in result} for legend, result in results.items()
    }
    assert by_legend["bias"][c.SIGNAL_TPOT] == pytest.approx(-0.004373, abs=1e-12)  # too high reads negative
    assert by_legend["MAE"][c.SIGNAL_TPOT] == pytest.approx(0.004373, abs=1e-12)


def bias_and_mae_queries() -> list[tuple[str, str]]:
    """The Bias and MAE panel's two queries (bias, then MAE), as Grafana sends them with All selected, $window 1h."""
    dashboard = dashboards(default_spec())[PREDICTION_ACCURACY]
    found = [expr for title, expr in panel_queries(dashboard) if title == BIAS_AND_MAE]
    assert len(found) == 2, found
    return [(legend, substitute(expr, dashboard, 3600)) for legend, expr in zip(("bias", "MAE"), found, strict=True)]


def test_with_the_upstream_defaults_the_predicted_ttft_is_judged_as_end_to_end_latency(upstream_defaults: Env) -> None:
    """streamingMode off, llm-d-router's default (predictedlatency/plugin.go; its README: "TTFT is recorded at EOS and
    represents the full e2e latency ... TPOT is not trained"): the predictor's "TTFT" is compared with the request's
    end-to-end latency as the EPP measures it, from the gateway span's start (the request's arrival) to the model
    server's end: 0.50 s and 0.45 s (vLLM started at once), against the stand-in's 0.14873 and 0.20873 s. No TPOT is
    compared, and the never-trained TPOT model reads neither as reset nor as stale."""
    server = upstream_defaults.server
    mode = c.EPP_STREAMING_MODE.name
    assert server.value(mode, pool=POOL, basis="default") == 0.0
    objective = c.PREDICTOR_OBJECTIVE.name
    wait_until(lambda: server.value(objective, pool=POOL, objective=c.OBJECTIVE_MEAN) == 1, what="a health poll")
    send(server, REQUESTS)
    compared = functools.partial(is_value, server, c.MEAN_PREDICTIONS.exposed_name, 2.0, **key(c.SIGNAL_E2E))
    wait_until(compared, what="2 shadow e2e predictions compared")
    labels = key(c.SIGNAL_E2E)
    (p1, _), (p2, _) = (r.predicted() for r in REQUESTS)
    under = (0.50 - p1, 0.45 - p2)  # 0.35127 and 0.24127 s too low
    assert server.value(c.MEAN_PREDICTION_PREDICTED.exposed_name, **labels) == pytest.approx(0.35746, abs=1e-12)
    assert server.value(c.MEAN_PREDICTION_UNDERESTIMATE.exposed_name, **labels) == pytest.approx(sum(under), abs=1e-12)
    assert server.value(c.MEAN_PREDICTION_OVERESTIMATE.exposed_name, **labels) == 0.0
    squared = under[0] ** 2 + under[1] ** 2
    assert server.value(c.MEAN_PREDICTION_SQUARED_ERROR.exposed_name, **labels) == pytest.approx(squared, abs=1e-12)
    comparisons = {dict(ls)[c.SIGNAL] for name, ls in server.samples() if name == c.MEAN_PREDICTIONS.exposed_name}
    assert comparisons == {c.SIGNAL_E2E}  # neither TTFT nor TPOT, not even at 0
    # the SLO series still judge a TTFT: from the gateway's arrival to the first token
    assert server.total("sloscope_ttft_seconds_sum", pool=POOL) == pytest.approx(0.35, abs=1e-12)
    trained = c.PREDICTOR_TRAINED.name
    wait_until(lambda: server.value(trained, pool=POOL, signal=c.SIGNAL_TTFT) == 1.0, what="the TTFT model polled")
    for definition in (c.PREDICTOR_TRAINED, c.PREDICTOR_MODEL_AGE_SECONDS):
        signals = {dict(ls)[c.SIGNAL] for name, ls in server.samples() if name == definition.name}
        assert signals == {c.SIGNAL_TTFT}, definition.name
