"""Every engine's page through real HTTP to a real scrape: model labels, per-pod engines, DP pods, sleep, histograms.

The pages are the real vLLM 0.33 page (../shared/fixtures) and the pages constructed from upstream code in
tests/data/engines (its README says what was read for each, file:line and version). The expected values are
read off those files.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from sloscope.columnar.cardinality import LabelGuard
from sloscope.config import Pool, Predictions, Scrape
from sloscope.processors.pod_history import PodHistory
from sloscope.processors.shadow import RoutingFeatures
from sloscope.publishers.engine_latency import EngineLatencyCollector
from sloscope.publishers.pod_state import PodStateCollector
from sloscope.receivers.discovery import Target, sorted_labels
from sloscope.receivers.pod_scraper import PodScraper
from sloscope.receivers.protocols import LoraState, PodCounters, PodState
from sloscope.telemetry import Telemetry
from tests.integration.conftest import Server, start_server, wait_until
from tests.support.page_server import PageServer, vllm_page
from tests.support.prediction_server import PredictionServer, TrainingServer

pytestmark = pytest.mark.integration

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM_REAL_COUNTERS = PodCounters(prefix_cache_hits=136480.0, prefix_cache_queries=566788.0, preemptions=14.0)
ENGINES = Path(__file__).parent.parent / "data" / "engines"
ENGINE_TYPE = "llm-d.ai/engine-type"
LEGACY_ENGINE_TYPE = "inference.networking.k8s.io/engine-type"  # the EPP's deprecated key, still read


def page(name: str) -> str:
    return (ENGINES / name).read_text()


def dp_page_after_five_more_requests() -> str:
    """The DP page after engine 1 served 5 more requests of TTFT in (0.08, 0.1] s (sum +0.5 s)."""
    text = page("vllm-0.33-data-parallel.prom")

    def more(match: re.Match[str]) -> str:
        bound, value = match.group(1), float(match.group(2))
        return (
            match.group(0)
            if bound in {"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08"}
            else (f"{match.group(0).rsplit(' ', 1)[0]} {value + 5:g}")
        )

    text, count = re.subn(
        r'^vllm:time_to_first_token_seconds_bucket\{engine="1",le="([^"]+)",[^}]*\} (\S+)$', more, text, flags=re.M
    )
    assert count == 23
    text = re.sub(r'^(vllm:time_to_first_token_seconds_count\{engine="1",[^}]*\}) 60$', r"\1 65", text, flags=re.M)
    return re.sub(r'^(vllm:time_to_first_token_seconds_sum\{engine="1",[^}]*\}) 9.0$', r"\1 9.5", text, flags=re.M)


@dataclass
class ScrapeRig:
    """A registry with the engine-latency collector, a pod history and the scrape settings every test here uses."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    settings: Scrape = field(default_factory=lambda: Scrape(timeout_seconds=2.0))
    latency: EngineLatencyCollector = field(
        default_factory=lambda: EngineLatencyCollector(LabelGuard({"model": 50}, lambda label: None))
    )

    def __post_init__(self) -> None:
        s = self.settings
        self.history = PodHistory(s.history_samples, s.stale_after_seconds, s.vanished_grace_seconds)
        self.registry.register(self.latency)

    def scraper(self, http: httpx.AsyncClient, *pools: Pool) -> PodScraper:
        return PodScraper(
            pools=list(pools),
            settings=self.settings,
            history=self.history,
            telemetry=Telemetry(self.registry),
            http=http,
            latency=self.latency,
        )


def test_every_engine_scraped_by_its_label_with_its_model_label(shared: Path) -> None:
    async def scenario() -> None:
        rig = ScrapeRig()
        registry, history = rig.registry, rig.history
        async with httpx.AsyncClient() as http:
            scraper = rig.scraper(
                http,
                Pool(name="mixed", model=LLAMA),  # protocol vllm, the pods' labels choose others
                Pool(name="triton", protocol="triton-trtllm", model="tensorrt_llm"),  # the old name, accepted
            )
            registry.register(PodStateCollector(history, ["mixed", "triton"]))
            with (
                PageServer(vllm_page(shared)) as real,
                PageServer(page("tgi.prom")) as tgi,
                PageServer(page("vllm-0.33-data-parallel.prom")) as dp,
                PageServer(page("vllm-0.33-sleeping.prom")) as asleep,
                PageServer(page("triton-tensorrt-llm.prom")) as triton,
            ):
                targets = [
                    Target("mixed", "vllm-real", real.address),  # no label: the pool's protocol
                    Target("mixed", "tgi-0", tgi.address, labels=sorted_labels({ENGINE_TYPE: "tgi"})),
                    Target("mixed", "vllm-dp", dp.address, labels=sorted_labels({ENGINE_TYPE: "vllm"})),
                    Target("mixed", "vllm-asleep", asleep.address, labels=sorted_labels({LEGACY_ENGINE_TYPE: "vllm"})),
                    Target("triton", "triton-0", triton.address),
                ]
                scraper.on_targets({t.key: t for t in targets})
                for target in targets:
                    assert await scraper.scrape_once(target) == "success"
                states = {r.target.pod: r.latest.state for r in history.snapshot() if r.latest is not None}
                lora = LoraState(running=("sql-lora", "chat-lora"), waiting=("chat-lora",), max_lora=2)
                assert states == {
                    # the real page: 3 waiting, 27 running, KV 0.5873, awake
                    "vllm-real": PodState(
                        3.0, 27.0, 0.5873, None, frozenset({LLAMA}), sleeping=False, counters=VLLM_REAL_COUNTERS
                    ),
                    # TGI names no model: the pool's model filter does not apply
                    "tgi-0": PodState(5.0, 12.0, None, None, frozenset()),
                    # the whole pod: 1+5 waiting, 10+14 running, KV (0.25+0.75)/2; the LoRA series (no model
                    # label) read despite the filter. The EPP reads engine 0's series, the first on the page.
                    "vllm-dp": PodState(
                        6.0,
                        24.0,
                        0.5,
                        lora,
                        frozenset({LLAMA}),
                        sleeping=False,
                        routing=PodState(1.0, 10.0, 0.25, lora, frozenset({LLAMA}), sleeping=False),
                    ),
                    "vllm-asleep": PodState(0.0, 0.0, 0.0, None, frozenset({LLAMA}), sleeping=True),
                    # Triton filtered on its "model" label: tensorrt_llm's 2 waiting, 6 scheduled, 0.4875
                    "triton-0": PodState(2.0, 6.0, 0.4875, None, frozenset({"tensorrt_llm", "tensorrt_llm_small"})),
                }

                def value(name: str, pod: str, pool: str = "mixed") -> float | None:
                    return registry.get_sample_value(name, {"pool": pool, "pod": pod})

                assert value("sloscope_pod_sleeping", "vllm-asleep") == 1.0
                assert value("sloscope_pod_sleeping", "vllm-dp") == 0.0
                assert value("sloscope_pod_sleeping", "tgi-0") is None  # TGI publishes no sleep state
                assert value("sloscope_pod_requests_waiting", "vllm-dp") == 6.0  # the whole pod's
                assert registry.get_sample_value("sloscope_pool_pods", {"pool": "mixed"}) == 3.0  # asleep left out

                # The engines' histograms: the first scrape is each pod's baseline, then increases are added.
                ttft = {"pool": "mixed", "model": LLAMA, "protocol": "vllm", "signal": "ttft"}
                assert registry.get_sample_value("sloscope_engine_latency_seconds_count", ttft) is None
                dp.page = dp_page_after_five_more_requests()
                for target in targets:
                    await scraper.scrape_once(target)
                bucket = "sloscope_engine_latency_seconds_bucket"
                assert registry.get_sample_value(bucket, {**ttft, "le": "0.08"}) == 0.0
                assert registry.get_sample_value(bucket, {**ttft, "le": "0.1"}) == 5.0
                assert registry.get_sample_value(bucket, {**ttft, "le": "+Inf"}) == 5.0
                assert registry.get_sample_value("sloscope_engine_latency_seconds_count", ttft) == 5.0
                assert registry.get_sample_value("sloscope_engine_latency_seconds_sum", ttft) == pytest.approx(0.5)
                # the real page's other signals are there, unchanged (its ITL histogram: 0 more observations)
                itl = {**ttft, "signal": "itl"}
                assert registry.get_sample_value("sloscope_engine_latency_seconds_count", itl) == 0.0
                # TGI and Triton publish no request histograms of the shapes read here
                assert not [
                    s
                    for m in registry.collect()
                    for s in m.samples
                    if s.name.startswith("sloscope_engine_latency") and s.labels["protocol"] != "vllm"
                ]
            await scraper.stop()

    asyncio.run(scenario())


SPEC = {
    "version": "sloscope/v1",
    "classes": [
        {
            "name": "interactive",
            "match": {"ttft_ms": {"max": 1000}},
            "reference": {"prompt_tokens": 800, "ttft_ms": 500, "tpot_ms": 50},
        }
    ],
}


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("engines")
    (tmp / "slo.yaml").write_text(yaml.safe_dump(SPEC))
    with (
        PageServer(vllm_page(shared)) as awake,
        PageServer(page("vllm-0.33-sleeping.prom")) as asleep,
        PageServer(page("tgi.prom")) as tgi,
        PredictionServer() as predictor,
        TrainingServer(shared) as training,
    ):
        server = start_server(
            tmp,
            {
                "slo_spec": str(tmp / "slo.yaml"),
                "scrape": {"interval_seconds": 0.2, "timeout_seconds": 0.5, "stale_after_seconds": 60},
                "predictions": {"timeout_seconds": 0.5, "health_interval_seconds": 0.2},
                "headroom": {"interval_seconds": 0.2},
                "pools": [
                    {
                        "name": "pool-a",
                        "model": LLAMA,
                        "targets": {
                            "static": [
                                {"address": awake.address, "pod": "vllm-awake"},
                                {"address": asleep.address, "pod": "vllm-asleep"},
                                {"address": tgi.address, "pod": "tgi-0", "labels": {ENGINE_TYPE: "tgi"}},
                            ]
                        },
                        "predictor": {"training_url": training.url, "prediction_urls": [predictor.url]},
                        "streaming_mode": True,  # the stand-in predicts TTFT and TPOT, as with streaming on
                    }
                ],
            },
        )
        try:
            yield server
        finally:
            server.stop()


def test_a_sleeping_engine_has_no_headroom_and_is_not_a_pod_of_the_pool(serving: Server) -> None:
    server = serving
    headroom = {"pool": "pool-a", "slo_class": "interactive", "signal": "ttft"}
    # each pod's first headroom lands in the round after its first scrape: wait for both that have room
    for pod in ("vllm-awake", "tgi-0"):
        has_room = functools.partial(server.value, "sloscope_pod_headroom_seconds", pod=pod, **headroom)
        wait_until(lambda: has_room() != 0, what=f"{pod} headroom")  # noqa: B023 - called within the iteration
    wait_until(lambda: server.value("sloscope_pod_sleeping", pool="pool-a", pod="vllm-asleep") == 1.0, what="asleep")
    assert server.value("sloscope_pod_sleeping", pool="pool-a", pod="vllm-awake") == 0.0
    assert server.value("sloscope_pod_requests_waiting", pool="pool-a", pod="tgi-0") == 5.0  # TGI, by its label
    # vllm-awake and tgi-0 (KV sent as 0) have room; the sleeping pod is neither a pod with headroom nor a pod
    assert server.total("sloscope_pod_headroom_seconds", pod="vllm-asleep") == 0
    assert server.value("sloscope_pool_pods", pool="pool-a") == 2.0
    pods_with_headroom = {"pool": "pool-a", "slo_class": "interactive"}
    wait_until(lambda: server.value("sloscope_pool_pods_with_headroom", **pods_with_headroom) == 2.0, what="pool count")
    # the engine histograms of the real page, republished once each pod was scraped twice: no new request yet
    ttft = {"pool": "pool-a", "model": LLAMA, "protocol": "vllm", "signal": "ttft"}
    key = ("sloscope_engine_latency_seconds_count", frozenset(ttft.items()))
    wait_until(lambda: key in server.samples(), what="engine histograms")
    assert server.samples()[key] == 0.0


def bumped(text: str, families: tuple[str, ...], n: int) -> str:
    """``text`` after ``n`` more requests observed into ``families`` (in their lowest bucket, so ``_sum`` stays)."""
    for family in families:
        text, count = re.subn(
            rf"^({re.escape(family)}_(?:bucket|count)\{{[^}}]*\}}) (\S+)$",
            lambda m: f"{m.group(1)} {float(m.group(2)) + n:g}",
            text,
            flags=re.M,
        )
        assert count > 2, family
    return text


TTFT, E2E, ITL = (
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:inter_token_latency_seconds",
)


def test_pd_pods_count_each_signal_once_prefill_ttft_and_decode_the_rest(shared: Path) -> None:
    """P/D: a request's prefill runs on a prefill pod and its decode on a decode pod, and both engines observe it.
    The role (``llm-d.ai/role``, llm-d-router ebab6879 ``filter/bylabel/roles.go:11-25``) says which pods count
    which signal: TTFT and queue time from prefill pods, ITL, TPOT and e2e from decode pods, everything from pods
    with no role or an interleaved one, nothing from encoders or unknown roles. Every pod serves the real vLLM
    0.33 page, then the same page after 5 more requests of each family."""

    async def scenario() -> None:
        rig = ScrapeRig()
        registry = rig.registry
        roles = {"prefill-0": "prefill", "decode-0": "decode", "both-0": "prefill-decode", "encode-0": "encode"}
        roles |= {"plain-0": None, "odd-0": "sidecar"}
        async with httpx.AsyncClient() as http:
            scraper = rig.scraper(http, Pool(name="pd", model=LLAMA))
            with PageServer(vllm_page(shared)) as server:
                targets = [
                    Target("pd", pod, server.address, labels=sorted_labels({"llm-d.ai/role": role} if role else {}))
                    for pod, role in roles.items()
                ]
                scraper.on_targets({t.key: t for t in targets})
                for target in targets:
                    assert await scraper.scrape_once(target) == "success"  # each pod's baseline
                server.page = bumped(server.page, (TTFT, E2E, ITL), 5)
                for target in targets:
                    assert await scraper.scrape_once(target) == "success"
            await scraper.stop()

        def count(signal: str) -> float | None:
            labels = {"pool": "pd", "model": LLAMA, "protocol": "vllm", "signal": signal}
            return registry.get_sample_value("sloscope_engine_latency_seconds_count", labels)

        assert {signal: count(signal) for signal in ("ttft", "e2e", "itl", "tpot", "queue")} == {
            "ttft": 15.0,  # prefill-0, both-0, plain-0
            "e2e": 15.0,  # decode-0, both-0, plain-0
            "itl": 15.0,
            "tpot": 0.0,  # counted from the same pods, with no new observation
            "queue": 0.0,
        }

    asyncio.run(scenario())


def test_a_multi_port_data_parallel_pod_is_every_ranks_page_and_a_request_is_asked_of_its_own_rank(
    shared: Path,
) -> None:
    """llm-d's multi-port data parallelism: rank i of the pod serves its own page on the i-th target port
    (llm-d-router ebab6879 pkg/epp/datastore/datastore.go:330-346). Rank 0 serves the real vLLM 0.33 page (3 waiting,
    27 running, KV 0.5873), rank 1 the same with 7 waiting. The pod's series are the whole pod's (10 waiting, 54
    running, KV 0.5873); a request sent to rank 1 (its destination endpoint) is predicted with rank 1's page, as the
    EPP predicted it for endpoint <pod>-rank-1; without an endpoint, rank 0's. A failed rank leaves the pod without a
    state for that scrape, and each rank's engine histograms keep their own baseline."""

    async def scenario() -> None:
        # Scrapes are the test's own: the target's periodic scrape (every 5 s by default, first at a random offset:
        # the address has a random port) must not add one, so its interval is a day.
        rig = ScrapeRig(settings=Scrape(timeout_seconds=2.0, interval_seconds=86_400.0))
        registry, history = rig.registry, rig.history
        registry.register(PodStateCollector(history, ["dp"]))
        async with httpx.AsyncClient() as http:
            scraper = rig.scraper(http, Pool(name="dp", model=LLAMA))
            with PageServer(vllm_page(shared)) as rank0, PageServer(vllm_page(shared, waiting=7)) as rank1:
                ports = [int(server.address.rsplit(":", 1)[1]) for server in (rank0, rank1)]
                target = Target("dp", "vllm-dp", rank0.address, ranks=((0, ports[0]), (1, ports[1])))
                scraper.on_targets({target.key: target})
                assert await scraper.scrape_once(target) == "success"
                (record,) = [r for r in history.snapshot() if r.latest is not None]
                state = record.latest.state
                assert (state.waiting, state.running, state.kv_cache_utilization) == (10.0, 54.0, 0.5873)
                assert (
                    registry.get_sample_value("sloscope_pod_requests_waiting", {"pool": "dp", "pod": "vllm-dp"}) == 10
                )
                routing = RoutingFeatures(Predictions(epp_generation="llm-d"), history)
                at = record.latest.at

                def waiting(endpoint: str | None) -> int:
                    rank = target.rank_of(endpoint)
                    features = routing(target.key, state, at, 400, None, rank=rank)
                    assert features is not None
                    return features.num_request_waiting

                assert (waiting(rank1.address), waiting(rank0.address), waiting(None)) == (7, 3, 3)

                rank1.page = bumped(rank1.page, (TTFT,), 5)  # rank 1 served 5 requests
                rank0.status = 503
                assert await scraper.scrape_once(target) == "http_error"
                (failed,) = history.snapshot()  # down, and no new sample: rank 1's page alone is not the pod
                assert (failed.up, failed.latest.at if failed.latest else None) == (False, at)
                rank0.status = 200
                assert await scraper.scrape_once(target) == "success"
            await scraper.stop()
        scrapes = {"kind": "model_server", "result": "success"}
        assert registry.get_sample_value("sloscope_scrapes_total", scrapes) == 5.0  # per rank: 2 + 1 + 2
        ttft = {"pool": "dp", "model": LLAMA, "protocol": "vllm", "signal": "ttft"}
        assert registry.get_sample_value("sloscope_engine_latency_seconds_count", ttft) == 5.0

    asyncio.run(scenario())
