"""The ``routing`` of requests whose spans cannot say it, from how their pool's EPP routes every request.

The EPP of gateway-api-inference-extension v1.5.0 emits no scheduling span and reads no routing header, so the
join leaves its requests' ``routing`` at ``unknown``. It does run one scheduling profile for every request, and
its ``/metrics`` page times each scorer that ran (:func:`sloscope.receivers.epp_page.page_routing`): the EPP
scraper tells :meth:`PoolRouting.set` what that says, and every request still ``unknown`` when it is handed to
the evaluator takes its pool's routing. The pool is found as the Prometheus publisher finds it: the span's pool,
else the pool discovery found the request's pod (or endpoint) in, else the default pool. A request whose spans
did say (``predicted``, ``default``, or ``none`` for one refused before scheduling) is never changed, and
nothing changes for a pool whose EPP never said (every other generation).

The map is replaced whole on each change (one reference assignment), so the pipeline thread reads it without a
lock while the event loop writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from sloscope import conventions as c
from sloscope.records import JoinedRequest

__all__ = ["Place", "Placed", "PoolRouting"]


class Placed(Protocol):
    """Where a request ran, as discovery knows pods: by name, else by address (a :class:`JoinedRequest`)."""

    @property
    def pod(self) -> str | None: ...

    @property
    def endpoint(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Place:
    """A :class:`Placed` of a record batch's row."""

    pod: str | None
    endpoint: str | None


PoolOfPod = Callable[[Placed], str | None]


class PoolRouting:
    def __init__(self, default_pool: str, pool_of_pod: PoolOfPod | None = None) -> None:
        self._default_pool = default_pool
        self._pool_of_pod = pool_of_pod
        self._by_pool: dict[str, str] = {}

    def set(self, pool: str, routing: str) -> None:
        """How ``pool``'s EPP routes every request (:data:`~sloscope.conventions.ROUTINGS`)."""
        if routing not in c.ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(c.ROUTINGS)}, got {routing!r}")
        self._by_pool = {**self._by_pool, pool: routing}

    def get(self, pool: str) -> str | None:
        return self._by_pool.get(pool)

    def pool_of(self, pool: str | None, pod: str | None, endpoint: str | None) -> str:
        if pool:
            return pool
        found = self._pool_of_pod(Place(pod, endpoint)) if self._pool_of_pod is not None else None
        return found or self._default_pool

    def fill(self, requests: Sequence[JoinedRequest]) -> None:
        """Gives each ``unknown`` request its pool's routing, where the pool's EPP said it."""
        by_pool = self._by_pool
        if not by_pool:
            return
        for request in requests:
            if request.routing == c.ROUTING_UNKNOWN:
                found = by_pool.get(self.pool_of(request.pool, request.pod, request.endpoint))
                if found is not None:
                    request.routing = found

    def fill_records(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """:meth:`fill` on a joined record batch: the same batch with its ``routing`` column filled in.

        Vectorized: each distinct (pool, pod, endpoint) of the batch is looked up once, and the column is
        rewritten by one ``if_else`` rather than row by row.
        """
        by_pool = self._by_pool
        if not by_pool:
            return batch
        index = batch.schema.get_field_index("routing")
        routing = batch.column(index)
        unknown = pc.equal(routing, c.ROUTING_UNKNOWN)
        if not pc.any(unknown).as_py():
            return batch
        places = pc.dictionary_encode(
            pc.binary_join_element_wise(
                *(batch.column(name).cast(pa.string()) for name in _PLACE),
                _SEP,
                null_handling="replace",
                null_replacement=_NULL,
            )
        )
        found = [by_pool.get(self.pool_of(*_place(key))) for key in places.dictionary.to_pylist()]
        routed = pa.array(found, pa.string()).take(places.indices).cast(routing.type)
        filled = pc.if_else(pc.and_(unknown, pc.is_valid(routed)), routed, routing)
        return batch.set_column(index, batch.schema.field(index), filled)


_PLACE = ("pool", "pod", "endpoint")
_SEP = "\x1f"  # neither separator nor null marker can be part of a Kubernetes name or a host:port
_NULL = "\x1e"


def _place(key: str) -> tuple[str | None, ...]:
    return tuple(None if part == _NULL else part for part in key.split(_SEP))
