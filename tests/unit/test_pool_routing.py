"""PoolRouting: requests the spans left ``unknown`` take their pool's routing, found as the publisher finds pools."""

from __future__ import annotations

import dataclasses

import pytest

from sloscope import conventions as c
from sloscope.processors import joined_batch
from sloscope.processors.pool_routing import Placed, PoolRouting
from sloscope.records import JoinedRequest

PODS = {"sim-0": "gie", "sim-1": "llmd"}
ADDRESSES = {"127.0.0.12:8000": "gie"}


def pool_of_pod(placed: Placed) -> str | None:
    return PODS.get(placed.pod or "") or ADDRESSES.get(placed.endpoint or "")


def request(name: str, **fields: object) -> JoinedRequest:
    return dataclasses.replace(JoinedRequest(name, name, "joined"), **fields)


def requests() -> list[JoinedRequest]:
    return [
        request("by-pod", pod="sim-0"),
        request("by-address", endpoint="127.0.0.12:8000"),
        request("by-span-pool", pool="gie", pod="sim-1"),  # the span's pool wins over discovery's
        request("other-pool", pod="sim-1"),
        request("said-default", pod="sim-0", routing=c.ROUTING_DEFAULT),
        request("refused", pod="sim-0", routing=c.ROUTING_NONE, failure_reason="shed"),
        request("nowhere"),  # no pod: the default pool
    ]


EXPECTED = [
    c.ROUTING_PREDICTED,
    c.ROUTING_PREDICTED,
    c.ROUTING_PREDICTED,
    c.ROUTING_UNKNOWN,
    c.ROUTING_DEFAULT,
    c.ROUTING_NONE,
    c.ROUTING_UNKNOWN,
]


def test_unknown_requests_take_their_pools_routing_and_nothing_else_changes() -> None:
    routing = PoolRouting("default-pool", pool_of_pod)
    routing.set("gie", c.ROUTING_PREDICTED)
    objects = requests()
    routing.fill(objects)
    assert [r.routing for r in objects] == EXPECTED
    routing.set("default-pool", c.ROUTING_DEFAULT)
    objects = requests()
    routing.fill(objects)
    assert objects[-1].routing == c.ROUTING_DEFAULT


def test_a_record_batch_is_filled_as_the_objects_are() -> None:
    routing = PoolRouting("default-pool", pool_of_pod)
    batch = joined_batch.from_requests(requests())
    assert routing.fill_records(batch) is batch  # no pool has said: the very same batch
    routing.set("gie", c.ROUTING_PREDICTED)
    filled = routing.fill_records(batch)
    assert filled.column("routing").to_pylist() == EXPECTED
    assert filled.schema == joined_batch.SCHEMA
    assert joined_batch.to_requests(filled)[0] == dataclasses.replace(requests()[0], routing=c.ROUTING_PREDICTED)
    nothing_unknown = joined_batch.from_requests([requests()[4]])
    assert routing.fill_records(nothing_unknown) is nothing_unknown
    routing.set("default-pool", c.ROUTING_DEFAULT)  # a row with no pool, pod or endpoint: the default pool's
    assert routing.fill_records(batch).column("routing").to_pylist() == [*EXPECTED[:-1], c.ROUTING_DEFAULT]


def test_without_discovery_only_span_pools_and_the_default_pool_are_known() -> None:
    routing = PoolRouting("default-pool")
    routing.set("default-pool", c.ROUTING_DEFAULT)
    objects = requests()
    routing.fill(objects)
    assert [r.routing for r in objects][:4] == [
        c.ROUTING_DEFAULT,
        c.ROUTING_DEFAULT,
        c.ROUTING_UNKNOWN,
        c.ROUTING_DEFAULT,
    ]


def test_an_unknown_routing_value_is_refused() -> None:
    with pytest.raises(ValueError, match="routing must be one of"):
        PoolRouting("p").set("p", "fast")
