"""Placement: each request's pool (failures before any pod where their gateway serves, or nowhere) and the routing of
requests the spans left ``unknown``; the record-batch path placing exactly as the objects path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sloscope import conventions as c
from sloscope.processors import joined_batch
from sloscope.processors.placement import LEARNED_SECONDS, Placed, Placement, PoolPlace, _distinct
from sloscope.records import JoinedRequest

PODS = {"sim-0": "gie", "sim-1": "llmd"}
ADDRESSES = {"127.0.0.12:8000": "gie"}


def pool_of_pod(placed: Placed) -> str | None:
    return PODS.get(placed.pod or "") or ADDRESSES.get(placed.endpoint or "")


def request(name: str, **fields: object) -> JoinedRequest:
    return dataclasses.replace(JoinedRequest(name, name, "joined"), **fields)


def failure(name: str, reason: str = c.FAILURE_SHED, **fields: object) -> JoinedRequest:
    return request(name, outcome=c.OUTCOME_FAILED, routing=c.ROUTING_NONE, failure_reason=reason, **fields)


def requests() -> list[JoinedRequest]:
    return [
        request("by-pod", pod="sim-0"),
        request("by-address", endpoint="127.0.0.12:8000"),
        request("by-span-pool", pool="gie", pod="sim-1"),  # the span's pool wins over discovery's
        request("other-pool", pod="sim-1"),
        request("said-default", pod="sim-0", routing=c.ROUTING_DEFAULT),
        request("refused", pod="sim-0", routing=c.ROUTING_NONE, failure_reason="shed"),
        request("nowhere"),  # answered, no pod: the default pool
    ]


EXPECTED_ROUTING = [
    c.ROUTING_PREDICTED,
    c.ROUTING_PREDICTED,
    c.ROUTING_PREDICTED,
    c.ROUTING_UNKNOWN,
    c.ROUTING_DEFAULT,
    c.ROUTING_NONE,
    c.ROUTING_UNKNOWN,
]
EXPECTED_POOLS = ["gie", "gie", "gie", "llmd", "gie", "gie", "default-pool"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted(dict[str, int]):
    def __call__(self, reason: str, count: int) -> None:
        self[reason] = self.get(reason, 0) + count


def placement(pools: tuple[PoolPlace, ...] = (), **kwargs: object) -> tuple[Placement, Counted, Clock]:
    counted, clock = Counted(), Clock()
    return Placement("default-pool", pool_of_pod, pools, without_pool=counted, clock=clock, **kwargs), counted, clock


def both_paths(pools: tuple[PoolPlace, ...], batches: list[list[JoinedRequest]]) -> list[tuple[str, str | None]]:
    """(name, pool) of every request kept, placed batch after batch by the objects path and by the records path,
    which must agree; with the counts left out."""
    outputs = []
    for path in ("objects", "records"):
        placed, counted, _ = placement(pools)
        kept: list[JoinedRequest] = []
        for batch in batches:
            fresh = [dataclasses.replace(r) for r in batch]
            if path == "objects":
                kept += placed.place(fresh)
            else:
                out = placed.place_records(joined_batch.from_requests(fresh))
                joined_batch.check(out)
                kept += joined_batch.to_requests(out)
        outputs.append(([(r.trace_id, r.pool) for r in kept], dict(counted)))
    assert outputs[0] == outputs[1]
    return outputs[0]  # type: ignore[return-value]


def test_answered_requests_are_counted_in_the_span_pool_else_discoverys_else_the_default() -> None:
    placed, counted, _ = placement()
    placed.set("gie", c.ROUTING_PREDICTED)
    objects = placed.place(requests())
    assert [r.pool for r in objects] == EXPECTED_POOLS
    assert [r.routing for r in objects] == EXPECTED_ROUTING
    assert counted == {}


def test_a_record_batch_is_placed_as_the_objects_are() -> None:
    placed, _, _ = placement()
    placed.set("gie", c.ROUTING_PREDICTED)
    out = placed.place_records(joined_batch.from_requests(requests()))
    assert out.pylist("routing") == EXPECTED_ROUTING
    assert out.pylist("pool") == EXPECTED_POOLS
    assert joined_batch.to_requests(out)[0] == dataclasses.replace(
        requests()[0], routing=c.ROUTING_PREDICTED, pool="gie"
    )
    placed.set("default-pool", c.ROUTING_DEFAULT)  # a row with no pool, pod or endpoint: the default pool's
    out = placed.place_records(joined_batch.from_requests(requests()))
    assert out.pylist("routing") == [*EXPECTED_ROUTING[:-1], c.ROUTING_DEFAULT]


def test_a_failure_before_any_pod_goes_where_its_gateway_answered_else_nowhere() -> None:
    answered = [
        request("a1", pod="sim-0", gateway="gie-epp-5d9c7b8f4-x7k2p"),
        request("b1", pod="sim-1", gateway="llmd-epp"),
    ]
    failures = [
        failure("shed-a", gateway="gie-epp-5d9c7b8f4-x7k2p"),
        failure("after-restart", reason=c.FAILURE_ABORTED, gateway="gie-epp-5d9c7b8f4-q9w8e"),  # its Deployment's
        failure("shed-b", reason=c.FAILURE_TIMEOUT, gateway="llmd-epp"),
        failure("stranger", gateway="other-epp"),  # two pools, no model, a gateway never seen: nowhere
        failure("none-said"),
    ]
    kept, counted = both_paths((), [answered, failures])
    assert kept == [
        ("a1", "gie"),
        ("b1", "llmd"),
        ("shed-a", "gie"),
        ("after-restart", "gie"),
        ("shed-b", "llmd"),
    ]
    assert counted == {c.FAILURE_SHED: 2}


def test_a_gateway_seen_with_two_pools_says_nothing_and_what_it_showed_fades_after_an_hour() -> None:
    placed, counted, clock = placement()
    placed.place([request("a", pod="sim-0", gateway="shared"), request("b", pod="sim-1", gateway="shared")])
    assert placed.place([failure("f", gateway="shared")]) == []
    assert counted == {c.FAILURE_SHED: 1}
    placed, counted, clock = placement()
    placed.place([request("a", pod="sim-0", gateway="epp")])
    clock.now += LEARNED_SECONDS
    assert [r.pool for r in placed.place([failure("f", gateway="epp")])] == ["gie"]
    clock.now += 1
    assert placed.place([failure("g", gateway="epp")]) == []


def test_configured_gateways_then_the_model_then_the_only_pool() -> None:
    pools = (
        PoolPlace("gie", model="llama", gateways=("gie-epp-.*",)),
        PoolPlace("llmd", model="qwen"),
    )
    kept, counted = both_paths(
        pools,
        [
            [
                failure("by-pattern", gateway="gie-epp-abc"),
                failure("by-target-model", target_model="qwen"),
                failure("by-requested-model", requested_model="llama", target_model=""),
                failure("unserved-model", target_model="mistral"),
                failure("partial-match", gateway="x-gie-epp-abc"),  # patterns are anchored
            ]
        ],
    )
    assert kept == [("by-pattern", "gie"), ("by-target-model", "llmd"), ("by-requested-model", "gie")]
    assert counted == {c.FAILURE_SHED: 2}
    kept, counted = both_paths((PoolPlace("only"),), [[failure("anything", gateway="whoever")]])
    assert kept == [("anything", "only")] and counted == {}


def test_with_no_pool_configured_the_one_pool_answered_requests_went_to_takes_the_failures() -> None:
    answered = [request("a", pod="unseen-by-discovery")]  # the default pool: the only pool there is
    kept, counted = both_paths((), [answered, [failure("f", gateway="epp")]])
    assert kept == [("a", "default-pool"), ("f", "default-pool")]
    kept, counted = both_paths((), [[failure("first", gateway="epp")]])  # nothing answered yet: nowhere
    assert kept == [] and counted == {c.FAILURE_SHED: 1}


def test_a_failure_on_a_pod_stays_on_its_pod() -> None:
    kept, counted = both_paths(
        (PoolPlace("gie"), PoolPlace("llmd")),
        [[failure("model-server-error", reason=c.FAILURE_ERROR, pod="sim-1"), failure("gone", pod="vanished")]],
    )
    assert kept == [("model-server-error", "llmd"), ("gone", "default-pool")] and counted == {}


def test_an_unknown_routing_value_is_refused() -> None:
    with pytest.raises(ValueError, match="routing must be one of"):
        Placement("p").set("p", "fast")


def test_distinct_keys_are_the_same_folded_or_compared_whole() -> None:
    """Codes folded into one integer per row, and (when the radices would overflow) rows compared whole."""
    columns = [np.array([0, -1, 0, 2, 0]), np.array([1, 1, 1, -1, 1]), np.array([0, 0, 0, 0, 1])]
    folded, inverse = _distinct(columns, [3, 2, 2])
    whole, inverse_whole = _distinct(columns, [1 << 40, 1 << 40, 2])
    assert folded.tolist() == whole.tolist() == [[-1, 1, 0], [0, 1, 0], [0, 1, 1], [2, -1, 0]]
    assert inverse.tolist() == inverse_whole.tolist() == [1, 0, 1, 3, 2]
