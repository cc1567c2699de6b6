"""Where each request is counted: its pool, and the routing of requests whose spans cannot say it.

**The pool.** A request counts in the pool its spans name, else in the pool discovery found its pod (or endpoint)
in, else in the default pool. A request that failed before reaching any pod (shed, refused, timed out or aborted at
the gateway) has neither pod nor endpoint, and no upstream gateway or EPP span names a pool. Counting it in the
default pool made a phantom pool of failures only (an error ratio of 1, paging on a handful of aborts, while the
real pool's budget never saw them). It is counted where the gateway that handled it serves, by the identity its
gateway's spans carry (``attributes.gateway``: the EPP's pod or Deployment, from the resource attributes the EPP
charts set):

1. the first pool whose ``gateways`` patterns match that identity;
2. the one pool the same gateway's answered requests went to within the last hour (an EPP serves one pool; a
   gateway seen with two is ambiguous and says nothing). A Deployment's pod learns for its Deployment too, so a
   restarted EPP's failures are placed before its first answered request;
3. the one pool serving the request's model (``pools[].model``, else learned the same way);
4. the one pool there is: the only pool configured or, with none configured, the only pool answered requests
   went to within the last hour.

A failure none of these places has no pool: it is kept out of every pool's series and budget and counted in
``sloscope_requests_without_pool_total`` (a data-quality ticket watches it).

**The routing.** The EPP of gateway-api-inference-extension v1.5.0 emits no scheduling span and reads no routing
header, so the join leaves its requests' ``routing`` at ``unknown``. It does run one scheduling profile for every
request, and its ``/metrics`` page times each scorer that ran (:func:`sloscope.receivers.epp_page.page_routing`):
the EPP scraper tells :meth:`Placement.set` what that says, and every request still ``unknown`` takes its pool's
routing. A request whose spans did say is never changed.

Both paths (objects and the native join's record batches) learn from a batch's answered requests before placing
its failures, so they place alike. The learned maps are touched only under the pipeline's publishing lock; the
routing map is replaced whole on each change (one reference assignment), so the pipeline reads it without a lock
while the event loop writes.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sloscope import conventions as c
from sloscope.columnar.batch import Batch, LabelColumn
from sloscope.columnar.columns import Codes
from sloscope.records import JoinedRequest

__all__ = ["Place", "Placed", "Placement", "PoolPlace"]

LEARNED_SECONDS = 3600.0  # how long what answered requests showed is believed
MAX_LEARNED = 4096  # gateway identities and models remembered, each (the least recently seen forgotten first)

# A Deployment's pod: <deployment>-<pod-template-hash>-<5 random>; the Deployment is the gateway that stays.
_DEPLOYMENT_POD = re.compile(r"^(.+)-[a-z0-9]{6,10}-[a-z0-9]{5}$")


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


@dataclass(frozen=True)
class PoolPlace:
    """What the settings say of one pool: its name, its model, the gateways whose requests are its."""

    name: str
    model: str | None = None
    gateways: tuple[str, ...] = ()
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_patterns", tuple(re.compile(p) for p in self.gateways))

    def serves(self, gateway: str) -> bool:
        return any(p.fullmatch(gateway) for p in self._patterns)


class _Learned:
    """Key -> the pools it was seen with and when; answers only when exactly one is recent."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, dict[str, float]] = OrderedDict()

    def learn(self, key: str, pool: str, now: float) -> None:
        pools = self._seen.get(key)
        if pools is None:
            pools = self._seen[key] = {}
            if len(self._seen) > MAX_LEARNED:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(key)
        pools[pool] = now

    def only(self, key: str, now: float) -> str | None:
        pools = self._seen.get(key)
        if not pools:
            return None
        recent = [pool for pool, seen in pools.items() if now - seen <= LEARNED_SECONDS]
        return recent[0] if len(recent) == 1 else None


def _identities(gateway: str) -> tuple[str, ...]:
    """The gateway itself, and its Deployment when it is a Deployment's pod."""
    found = _DEPLOYMENT_POD.match(gateway)
    return (gateway, found.group(1)) if found else (gateway,)


@dataclass(frozen=True, slots=True)
class _Key:
    """What placing a request depends on."""

    pool: str | None
    pod: str | None
    endpoint: str | None
    gateway: str | None
    model: str | None
    failed: bool


class Placement:
    def __init__(
        self,
        default_pool: str,
        pool_of_pod: PoolOfPod | None = None,
        pools: Sequence[PoolPlace] = (),
        *,
        without_pool: Callable[[str, int], None] = lambda reason, count: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``without_pool(reason, count)`` counts the failures no pool could be told for (they are left out)."""
        self._default_pool = default_pool
        self._pool_of_pod = pool_of_pod
        self._pools = tuple(pools)
        self._with_gateways = tuple(p for p in self._pools if p.gateways)
        self._without_pool = without_pool
        self._clock = clock
        self._by_pool: dict[str, str] = {}
        self._gateways, self._models, self._answered = _Learned(), _Learned(), _Learned()

    # ---- routing, told by the EPP scrapers ------------------------------------------------------------------

    def set(self, pool: str, routing: str) -> None:
        """How ``pool``'s EPP routes every request (:data:`~sloscope.conventions.ROUTINGS`)."""
        if routing not in c.ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(c.ROUTINGS)}, got {routing!r}")
        self._by_pool = {**self._by_pool, pool: routing}

    def get(self, pool: str) -> str | None:
        return self._by_pool.get(pool)

    # ---- the pool of one request ----------------------------------------------------------------------------

    def _pools_of(self, keys: Sequence[_Key], now: float) -> list[str | None]:
        """The pool of each distinct key: what the answered ones show is learned first, so that the keys of one
        batch are placed alike whichever path (objects or records) brought them."""
        told = [key.pool or self._discovered(key) for key in keys]
        for key, pool in zip(keys, told, strict=True):
            if not key.failed:
                self._learn(key, pool, now)
        return [self._place(key, pool, now) for key, pool in zip(keys, told, strict=True)]

    def _learn(self, key: _Key, told: str | None, now: float) -> None:
        """What an answered request shows: its gateway's pool (``told``: its span's or discovery's), its model's,
        and that its pool answers."""
        self._answered.learn("", told or self._default_pool, now)
        if told is None:
            return
        if key.gateway:
            for identity in _identities(key.gateway):
                self._gateways.learn(identity, told, now)
        if key.model:
            self._models.learn(key.model, told, now)

    def _discovered(self, key: _Key) -> str | None:
        if self._pool_of_pod is None or not (key.pod or key.endpoint):
            return None
        return self._pool_of_pod(Place(key.pod, key.endpoint))

    def _place(self, key: _Key, told: str | None, now: float) -> str | None:
        """The request's pool; None for a failure before any pod that nothing places."""
        if told:
            return told
        if not key.failed or key.pod or key.endpoint:
            return self._default_pool
        return self._by_gateway(key.gateway, now) or self._by_model(key.model, now) or self._only_pool(now)

    def _by_gateway(self, gateway: str | None, now: float) -> str | None:
        if not gateway:
            return None
        configured = next((p.name for p in self._with_gateways if p.serves(gateway)), None)
        if configured is not None:
            return configured
        return next(filter(None, (self._gateways.only(i, now) for i in _identities(gateway))), None)

    def _by_model(self, model: str | None, now: float) -> str | None:
        if not model:
            return None
        serving = [p.name for p in self._pools if p.model == model]
        if serving:
            return serving[0] if len(serving) == 1 else None
        return self._models.only(model, now)

    def _only_pool(self, now: float) -> str | None:
        if self._pools:
            return self._pools[0].name if len(self._pools) == 1 else None
        return self._answered.only("", now)

    # ---- batches ----------------------------------------------------------------------------------------------

    def place(self, requests: Sequence[JoinedRequest]) -> list[JoinedRequest]:
        """The requests placed (their ``pool`` set, ``unknown`` routing filled in), in order; the failures no pool
        could be told for are counted and left out."""
        now = self._clock()
        keys = [_key_of(r) for r in requests]
        distinct = list(dict.fromkeys(keys))
        placed = dict(zip(distinct, self._pools_of(distinct, now), strict=True))
        kept: list[JoinedRequest] = []
        unplaced: dict[str, int] = {}
        by_pool = self._by_pool
        for request, key in zip(requests, keys, strict=True):
            pool = placed[key]
            if pool is None:
                reason = request.failure_reason or c.FAILURE_ABORTED
                unplaced[reason] = unplaced.get(reason, 0) + 1
                continue
            request.pool = pool
            if request.routing == c.ROUTING_UNKNOWN and pool in by_pool:
                request.routing = by_pool[pool]
            kept.append(request)
        for reason, count in unplaced.items():
            self._without_pool(reason, count)
        return kept

    def place_records(self, batch: Batch) -> Batch:
        """:meth:`place` on a joined record batch: the batch with its ``pool`` and ``routing`` columns filled in
        and its unplaced failures left out.

        Vectorized: each distinct (pool, pod, endpoint, gateway, model, failed) of the batch is placed once, and the
        columns are rebuilt from the distinct answers rather than row by row.
        """
        if not len(batch):
            return batch
        now = self._clock()
        coded = [batch.coded(name) for name in _KEY_COLUMNS]
        model_codes, model_values = _models(coded[4], coded[5])
        failed = coded[6][0] >= 0
        columns = [codes for codes, _ in coded[:4]] + [model_codes, failed.astype(np.intp)]
        sizes = [len(values) for _, values in coded[:4]] + [len(model_values), 2]
        distinct, inverse = _distinct(columns, sizes)
        keys = []
        for row in distinct.tolist():
            pool, pod, endpoint, gateway = (
                values[code] if code >= 0 else None for code, (_, values) in zip(row[:4], coded[:4], strict=True)
            )
            model = model_values[row[4]] if row[4] >= 0 else None
            keys.append(_Key(pool, pod, endpoint, gateway, model, failed=bool(row[5])))
        return self._rewrite(batch, self._pools_of(keys, now), inverse, coded[6])

    def _rewrite(
        self, batch: Batch, pools: list[str | None], inverse: Codes, reasons: tuple[Codes, list[str]]
    ) -> Batch:
        """The pool column from each row's distinct key, ``unknown`` routings filled in, unplaced rows left out
        (counted): columns built by ``take`` from the distinct answers, not row by row."""
        named = [pool is not None for pool in pools]
        pool_codes = np.array([i if kept else -1 for i, kept in enumerate(named)] + [-1], dtype=np.intp)
        batch = batch.with_column("pool", LabelColumn(pool_codes[inverse], [p or "" for p in pools], ordered=False))
        by_pool = self._by_pool
        if by_pool:
            batch = _fill_routing(batch, [by_pool.get(pool) if pool else None for pool in pools], inverse)
        unplaced = np.array([pool is None for pool in pools], dtype=bool)[inverse]
        if not unplaced.any():
            return batch
        reason_codes, reason_values = reasons
        counts = np.bincount(reason_codes[unplaced], minlength=len(reason_values))
        for reason, count in zip(reason_values, counts.tolist(), strict=True):
            if count:
                self._without_pool(reason, count)
        return batch.filter(~unplaced)


def _fill_routing(batch: Batch, routing_of_key: list[str | None], inverse: Codes) -> Batch:
    """The batch with each ``unknown`` routing replaced by its key's pool's (where the pool's EPP said it)."""
    codes, values = batch.coded("routing")
    unknown = np.array([v == c.ROUTING_UNKNOWN for v in values] + [False], dtype=bool)[codes]
    said = np.array([r is not None for r in routing_of_key], dtype=bool)[inverse]
    replace = unknown & said
    if not replace.any():
        return batch
    choices = [*values, *(r or "" for r in routing_of_key)]
    filled = np.where(replace, len(values) + inverse, codes)
    return batch.with_column("routing", LabelColumn(filled, choices, ordered=False))


_KEY_COLUMNS = ("pool", "pod", "endpoint", "gateway", "target_model", "requested_model", "failure_reason")


def _key_of(request: JoinedRequest) -> _Key:
    return _Key(
        request.pool or None,
        request.pod,
        request.endpoint,
        request.gateway,
        request.model,
        request.failure_reason is not None,
    )


def _models(
    target: tuple[np.ndarray, list[str]], requested: tuple[np.ndarray, list[str]]
) -> tuple[np.ndarray, list[str]]:
    """:attr:`JoinedRequest.model` of every row: the target model, else the requested one (codes into one list)."""
    (target_codes, target_values), (requested_codes, requested_values) = target, requested
    values = [*target_values, *requested_values]
    non_empty = np.array([v != "" for v in target_values] + [False], dtype=bool)  # index -1: no target model
    named = non_empty[target_codes]
    shifted = np.where(requested_codes >= 0, requested_codes + len(target_values), -1)
    return np.where(named, target_codes, shifted), values


def _distinct(columns: list[Codes], sizes: list[int]) -> tuple[npt.NDArray[np.int64], Codes]:
    """The distinct rows of the code columns (column ``i`` holds -1..sizes[i]-1) and every row's index among them:
    the codes folded into one integer per row (mixed radix) when that fits in 62 bits, else rows compared whole."""
    radices = [size + 1 for size in sizes]
    if math.prod(radices) < 1 << 62:
        folded = np.zeros(len(columns[0]), dtype=np.int64)
        for column, radix in zip(columns, radices, strict=True):
            folded = folded * radix + (column + 1)
        keys, inverse = np.unique(folded, return_inverse=True)
        rows = np.empty((len(keys), len(columns)), dtype=np.int64)
        for i in reversed(range(len(columns))):
            keys, rows[:, i] = np.divmod(keys, radices[i])
        return rows - 1, inverse.reshape(-1)
    distinct, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return distinct, inverse.reshape(-1)
