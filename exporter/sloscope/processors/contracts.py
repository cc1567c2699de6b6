"""The upstream-contract checks: does what the upstream shows still mean what sloscope's numbers assume?

Each time an upstream changed the *meaning* of a number (a mean objective where a quantile was read, streaming
off, a renamed family, a span that lost an attribute), sloscope went wrong silently. These checks watch each
assumption, per pool, and say 1 (holds), 0 (broken) or None (nothing seen to judge by), for
``sloscope_upstream_contract{pool,check}`` and one alert per check.

The checks are pure functions of what the receivers last saw; :class:`SpanWindow` keeps the span counts the span
checks need, over the last ``window`` seconds in one-minute buckets, so memory is bounded by pools times buckets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from sloscope import conventions as c
from sloscope.predictor.generation import GIE_2025, GIE_V15, LLM_D, Generation

__all__ = [
    "MIN_SAMPLES",
    "MIN_SHARE",
    "SpanCounts",
    "SpanWindow",
    "epp_families",
    "epp_generation",
    "predictor_answers",
    "predictor_objective",
    "span_checks",
    "streaming_mode",
]

MIN_SAMPLES = 20  # spans in the window before a share is judged: one odd request is no broken contract
MIN_SHARE = 0.9  # the share of model-server spans that must carry a field every engine version sets
WINDOW_SECONDS = 600.0
_BUCKET_SECONDS = 60.0


@dataclass(slots=True)
class SpanCounts:
    """What the requests of one pool showed: model-server spans (anchored requests) and gateway-joined ones."""

    anchored: int = 0  # requests with a model-server span
    with_request_id: int = 0
    answered: int = 0  # anchored and not failed: the spans that must carry token counts
    with_tokens: int = 0
    gateway: int = 0  # requests a gateway span was joined to (or that only a gateway span saw)
    with_slo_header: int = 0  # of those, requests carrying an SLO target header

    def add(self, other: SpanCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class SpanWindow:
    """Per pool, the :class:`SpanCounts` of the last ``window`` seconds, and whether SLO headers were ever seen.

    Written by the pipeline worker, read at scrape time: one lock, held for a few additions.
    """

    def __init__(self, window: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets = max(1, round(window / _BUCKET_SECONDS))
        self._clock = clock
        self._lock = threading.Lock()
        self._by_pool: dict[str, dict[int, SpanCounts]] = {}
        self._headers_seen: set[str] = set()

    def add(self, pool: str, counts: SpanCounts) -> None:
        minute = int(self._clock() // _BUCKET_SECONDS)
        with self._lock:
            buckets = self._by_pool.setdefault(pool, {})
            buckets.setdefault(minute, SpanCounts()).add(counts)
            for old in [m for m in buckets if m <= minute - self._buckets]:
                del buckets[old]
            if counts.with_slo_header:
                self._headers_seen.add(pool)

    def pools(self) -> list[str]:
        with self._lock:
            return sorted(self._by_pool)

    def totals(self, pool: str) -> SpanCounts:
        oldest = int(self._clock() // _BUCKET_SECONDS) - self._buckets
        total = SpanCounts()
        with self._lock:
            for minute, counts in self._by_pool.get(pool, {}).items():
                if minute > oldest:
                    total.add(counts)
        return total

    def headers_seen(self, pool: str) -> bool:
        with self._lock:
            return pool in self._headers_seen


def _share_holds(part: int, whole: int) -> bool | None:
    if whole < MIN_SAMPLES:
        return None
    return part >= MIN_SHARE * whole


def span_checks(counts: SpanCounts, headers_seen: bool) -> dict[str, bool | None]:
    """The span checks of one pool's window.

    SLO headers are a contract only once the pool's gateway spans have carried them: a pool whose clients send
    none (its classes' default targets apply) breaks nothing; one whose headers vanish (a gateway upgrade that
    stops capturing them) does.
    """
    headers: bool | None = None
    if headers_seen and counts.gateway >= MIN_SAMPLES:
        headers = counts.with_slo_header > 0
    return {
        c.CHECK_SPAN_REQUEST_ID: _share_holds(counts.with_request_id, counts.anchored),
        c.CHECK_SPAN_TOKEN_COUNTS: _share_holds(counts.with_tokens, counts.answered),
        c.CHECK_GATEWAY_SLO_HEADERS: headers,
    }


def predictor_objective(generation: Generation, speaks_objective: bool | None) -> bool | None:
    """The llm-d and GIE v1.5.0 predictors state ``objective_type`` in ``/status``; sloscope takes a predictor that
    states none for a quantile one (the late-2025 predictor's only objective). One of the newer generations that
    states none would have its mean predictions judged as quantiles."""
    if speaks_objective is None:
        return None
    return speaks_objective or generation == GIE_2025


def predictor_answers(unreadable: Iterable[str] | None) -> bool | None:
    """Every predictor endpoint polled answered in the shape sloscope reads (None: not polled yet)."""
    if unreadable is None:
        return None
    return not tuple(unreadable)


def streaming_mode(contradicted: bool | None) -> bool | None:
    """The EPP's page shows the streaming mode the settings name (None: the page has not said, or no setting)."""
    return None if contradicted is None else not contradicted


def epp_generation(setting: str, page: Generation | None, served: bool) -> bool | None:
    """The EPP's page is of the generation ``predictions.epp_generation`` names (None: ``auto``, or no page).

    An llm-d page says so from start-up; GIE v1.5.0's only once it has scheduled a request, so a page that looks
    late-2025 says nothing until it has ``served`` (shows a family sloscope reads): an idle v1.5.0 EPP is no
    broken contract."""
    if page is None or setting not in (LLM_D, GIE_V15, GIE_2025):
        return None
    if page == GIE_2025 and not served:
        return None
    return page == setting


def epp_families(page_sources: Iterable[str] | None, gateway_requests: int) -> bool | None:
    """The EPP's page has some family sloscope reads while the pool is served (its requests reach sloscope with
    gateway spans); an idle EPP may have written none yet. None: no page, or too few requests to judge."""
    if page_sources is None or gateway_requests < MIN_SAMPLES:
        return None
    return bool(tuple(page_sources))
