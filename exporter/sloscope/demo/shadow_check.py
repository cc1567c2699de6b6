"""Sets sloscope's shadow predictions beside the router's own, request by request, to say which strayed and why.

The demo's test judges the shadow predictions by their aggregate (coverage, or mean absolute error) against the
router's. When that fails, the aggregate alone does not say whether a few requests strayed far (a stale pod
sample, a model that changed between the router's prediction and the shadow one) or all strayed a little. This
reads sloscope's record store (``predicted_ttft_seconds`` and ``predicted_tpot_seconds`` with
``prediction_source`` ``shadow``, the pod state it used and that state's age) and the router's predictions the
ground truth kept (:attr:`sloscope.demo.truth.GroundTruth.recent`), pairs them by request id, and lists the
requests where the two differ most.

With the model fixed, a shadow prediction made from the very pod state the router used must equal the router's
prediction; the others differ by as much as the two pod states do (sloscope's scrape and the router's saw the pod
at different moments). :func:`agreement` counts both kinds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sloscope import conventions as c
from sloscope.demo.truth import RoutedPrediction
from sloscope.store.read import read_records

__all__ = ["Agreement", "Stray", "agreement", "format_strays", "pairs", "read_shadows", "strays"]

SAME = 1e-9  # relative: two predictions (or KV-cache utilizations) this close are the same number

_COLUMNS = (
    "request_id",
    "pod",
    "prediction_source",
    "predicted_ttft_seconds",
    "predicted_tpot_seconds",
    "pod_waiting",
    "pod_running",
    "pod_kv_cache_utilization",
    "pod_state_age_seconds",
)


@dataclass(frozen=True, slots=True)
class Stray:
    """One request's shadow prediction beside the router's (seconds)."""

    request_id: str
    signal: str
    routed: RoutedPrediction
    shadow: float
    sloscope_pod: str | None  # the pod sloscope joined the request to (the router's choice, unless the join erred)
    pod_waiting: float | None
    pod_running: float | None
    pod_state_age: float | None
    pod_kv_cache: float | None = None

    @property
    def same_state(self) -> bool:
        """sloscope gave the predictor the pod state the router predicted from (queue, batch, KV cache)."""
        router = self.routed
        return (
            None not in (router.waiting, router.running, router.kv_cache, self.pod_kv_cache)
            and (self.pod_waiting, self.pod_running) == (router.waiting, router.running)
            and _same(self.pod_kv_cache, router.kv_cache)
        )

    @property
    def same_prediction(self) -> bool:
        return _same(self.shadow, self.routed.predicted)

    @property
    def gap(self) -> float:
        """How much farther from the actual the shadow prediction was than the router's (negative: nearer)."""
        return abs(self.routed.actual - self.shadow) - abs(self.routed.actual - self.routed.predicted)


def read_shadows(store: Path) -> list[dict[str, object]]:
    """sloscope's shadow-predicted rows in its record store, every hour of it."""
    table = read_records(store, datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC), _COLUMNS)
    return [row for row in table.to_pylist() if row["prediction_source"] == c.SOURCE_SHADOW]


def strays(
    routed: Mapping[tuple[str, str], RoutedPrediction], shadows: Iterable[Mapping[str, object]], worst: int = 10
) -> list[Stray]:
    """The ``worst`` requests whose shadow prediction was farthest from the actual beyond the router's own."""
    return sorted(pairs(routed, shadows), key=lambda s: s.gap, reverse=True)[:worst]


@dataclass(frozen=True, slots=True)
class Agreement:
    """The shadow predictions of one signal beside the router's, over a set of requests."""

    compared: int  # requests with both predictions
    identical: int  # given the router's pod state, and predicted what the router predicted
    mismatched: tuple[Stray, ...]  # given the router's pod state, and predicted something else
    same_queue: tuple[Stray, ...]  # given the router's count of requests waiting on the pod

    def mean_absolute_errors(self) -> tuple[float, float]:
        """Over :attr:`same_queue`: the shadow predictions' mean absolute error and the router's (seconds)."""
        n = len(self.same_queue) or 1
        shadow = sum(abs(s.routed.actual - s.shadow) for s in self.same_queue) / n
        return shadow, sum(abs(s.routed.actual - s.routed.predicted) for s in self.same_queue) / n


def agreement(found: Iterable[Stray], signal: str, request_ids: Collection[str]) -> Agreement:
    """How the shadow predictions of ``signal`` for ``request_ids`` agree with the router's."""
    kept = [
        s
        for s in found
        if s.signal == signal and (s.request_id in request_ids or s.request_id.removeprefix("cmpl-") in request_ids)
    ]
    same = [s for s in kept if s.same_state]
    mismatched = tuple(s for s in same if not s.same_prediction)
    same_queue = tuple(s for s in kept if s.routed.waiting is not None and s.pod_waiting == s.routed.waiting)
    return Agreement(len(kept), len(same) - len(mismatched), mismatched, same_queue)


def pairs(routed: Mapping[tuple[str, str], RoutedPrediction], shadows: Iterable[Mapping[str, object]]) -> list[Stray]:
    """Every (request, signal) with both a router and a shadow prediction.

    A row's request id is matched as the record store holds it and without vLLM's ``cmpl-`` prefix (the late-2025
    pods' ``gen_ai.request.id``)."""
    found: list[Stray] = []
    for row in shadows:
        request_id = str(row["request_id"] or "")
        for signal in ("ttft", "tpot"):
            shadow = row[f"predicted_{signal}_seconds"]
            router = routed.get((request_id, signal)) or routed.get((request_id.removeprefix("cmpl-"), signal))
            if router is None or not isinstance(shadow, float):
                continue
            found.append(
                Stray(
                    request_id,
                    signal,
                    router,
                    shadow,
                    _text(row["pod"]),
                    _number(row["pod_waiting"]),
                    _number(row["pod_running"]),
                    _number(row["pod_state_age_seconds"]),
                    _number(row.get("pod_kv_cache_utilization")),
                )
            )
    return found


def format_strays(found: Iterable[Stray]) -> str:
    """One line a request, for a failing test's output."""
    lines = [
        f"{s.signal} {s.request_id}: actual {s.routed.actual:.4f} router {s.routed.predicted:.4f} "
        f"(pod {s.routed.pod}, waiting {_count(s.routed.waiting)}, running {_count(s.routed.running)}) "
        f"shadow {s.shadow:.4f} (pod {s.sloscope_pod}, waiting {_count(s.pod_waiting)}, "
        f"running {_count(s.pod_running)}, state {_age(s.pod_state_age)} old) gap {s.gap:+.4f}"
        for s in found
    ]
    return "\n".join(lines) or "(no request has both a shadow and a router prediction)"


def _same(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= SAME * max(abs(a), abs(b), 1e-12)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _count(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _age(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.2f}s"
