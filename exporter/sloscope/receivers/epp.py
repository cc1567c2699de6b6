"""The EPP's own SLO series, scraped from its ``/metrics`` and put right for re-publishing.

The endpoint picker (gateway-api-inference-extension, ``pkg/epp/metrics/metrics.go``) records, per
request routed by its latency-predicting plugin, six histograms and one counter, all labelled
``model_name`` and ``target_model_name`` (the counter also ``type``)::

    inference_objective_request_ttft_seconds                   actual TTFT
    inference_objective_request_predicted_ttft_seconds         predicted TTFT (a re-prediction at response-header time)
    inference_objective_request_tpot_seconds                   actual TPOT (average of the sampled tokens)
    inference_objective_request_predicted_tpot_seconds         predicted TPOT (average of the sampled predictions)
    inference_objective_request_ttft_prediction_duration_seconds   time spent predicting TTFT
    inference_objective_request_tpot_prediction_duration_seconds   time spent predicting TPOT
    inference_objective_request_slo_violation_total{type}      SLO violations, type "ttft" or "tpot"

Two label defects of the EPP are put right here, per series, so that a fixed EPP passes unchanged:

- The plugin never assigns the incoming (requested) model name, so every SLO series carries
  ``model_name=""``. A series with an empty ``model_name`` and a non-empty ``target_model_name``
  gets ``model`` = the target model. The requested model is therefore reported as the target
  model: exact unless the pool rewrites model names (an InferenceModelRewrite or traffic split),
  in which case ``model`` names the model actually served, not the one asked for.
- The two ``*_prediction_duration_seconds`` histograms are recorded with the two model labels in
  the wrong order: ``model_name`` holds the target model and ``target_model_name`` the (empty)
  incoming one. A duration series with an empty ``target_model_name`` and a non-empty
  ``model_name`` has the two swapped back; the empty model is then filled as above.

A swap cannot be recognized once the EPP fills in the incoming model (both labels non-empty); such
series pass through as written.

Histograms keep the EPP's own bucket boundaries. A series that is incomplete or inconsistent (no
``+Inf`` bucket, cumulative counts that decrease, a missing ``_sum`` or ``_count``, a ``_count``
other than the ``+Inf`` bucket, a non-finite or negative count) is dropped, never repaired; so is a
counter series whose value is negative or not finite. :func:`normalize` lists what it dropped in
:attr:`EPPPage.dropped`, and the scraper logs each dropped series once, when it first appears.

Staleness: a failed scrape keeps the last good page for ``stale_after`` seconds (the
``scrape.stale_after_seconds`` setting), then drops it. One missed scrape therefore does not make
every ``sloscope_epp_*`` series vanish and reappear (which breaks ``absent()`` alerts and panel
continuity), while an EPP that stays unreachable does not have its last counter values re-published
forever as if nothing were happening: after the period its series disappear, as a Prometheus target's
series go stale when the target is down. Values are re-published as the EPP wrote them, so an EPP
restart shows as a counter reset, which ``rate()`` handles.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from sloscope import conventions as c
from sloscope.receivers.epp_inflight import INFLIGHT_FAMILIES
from sloscope.receivers.exposition import ExpositionError, ExpositionParser, Sample
from sloscope.receivers.http_fetch import fetch
from sloscope.telemetry import Telemetry

__all__ = [
    "EPP_FAMILIES",
    "DroppedSeries",
    "EPPPage",
    "EPPScraper",
    "HistogramSeries",
    "normalize",
]

log = logging.getLogger(__name__)

# The EPP's family names (pkg/epp/metrics/metrics.go, subsystem "inference_objective") and the
# sloscope families they are re-published as.
_TTFT = "inference_objective_request_ttft_seconds"
_PREDICTED_TTFT = "inference_objective_request_predicted_ttft_seconds"
_TPOT = "inference_objective_request_tpot_seconds"
_PREDICTED_TPOT = "inference_objective_request_predicted_tpot_seconds"
_TTFT_DURATION = "inference_objective_request_ttft_prediction_duration_seconds"
_TPOT_DURATION = "inference_objective_request_tpot_prediction_duration_seconds"
# The counter's family as OpenMetrics names it; its samples are "..._total" in both formats.
_VIOLATIONS = "inference_objective_request_slo_violation"

_HISTOGRAMS: Mapping[str, c.MetricDef] = {
    _TTFT: c.EPP_TTFT_SECONDS,
    _PREDICTED_TTFT: c.EPP_PREDICTED_TTFT_SECONDS,
    _TPOT: c.EPP_TPOT_SECONDS,
    _PREDICTED_TPOT: c.EPP_PREDICTED_TPOT_SECONDS,
    _TTFT_DURATION: c.EPP_TTFT_PREDICTION_DURATION_SECONDS,
    _TPOT_DURATION: c.EPP_TPOT_PREDICTION_DURATION_SECONDS,
}
_SWAPPED_LABELS = frozenset({_TTFT_DURATION, _TPOT_DURATION})
EPP_FAMILIES: frozenset[str] = frozenset({*_HISTOGRAMS, _VIOLATIONS})
"""The families read from the EPP's page (the parser selects ``_bucket``, ``_sum``, ``_count``, ``_total``)."""

# The EPP's label names.
_MODEL_NAME = "model_name"
_TARGET_MODEL_NAME = "target_model_name"
_TYPE = "type"
_LE = "le"

_Labels = tuple[tuple[str, str], ...]  # label pairs as written on the page, sorted
SeriesKey = tuple[str, str, str]
"""(pool, model, target_model), the label values of a sloscope_epp_* histogram series."""
ViolationKey = tuple[str, str, str, str]
"""(pool, model, target_model, type), the label values of a sloscope_epp_slo_violations series."""


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram series as the EPP wrote it: cumulative buckets by ascending ``le``, ``+Inf`` last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True)
class DroppedSeries:
    """A series left out of a page, and why. ``key`` holds the label values after normalization."""

    family: str  # the EPP's family name
    labels: _Labels  # as on the page, ``le`` excluded
    key: tuple[str, ...]  # SeriesKey or ViolationKey
    reason: str


@dataclass(frozen=True)
class EPPPage:
    """One scrape of one pool's EPP, normalized; never mutated after :func:`normalize` built it.

    ``histograms`` maps every sloscope_epp_* histogram family name (``MetricDef.name``) to its series,
    ``violations`` holds the counter's series.
    """

    pool: str
    histograms: Mapping[str, Mapping[SeriesKey, HistogramSeries]]
    violations: Mapping[ViolationKey, float]
    dropped: tuple[DroppedSeries, ...] = ()
    models_filled: int = 0  # series whose empty model_name was filled from target_model_name
    labels_swapped: int = 0  # duration series whose two model labels were swapped back


@dataclass
class _RawHistogram:
    buckets: list[tuple[str, float]] = field(default_factory=list)  # (le as written, count)
    sums: list[float] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)


def normalize(samples: Iterable[Sample], pool: str) -> EPPPage:
    """The EPP's samples as sloscope series of ``pool``: labels put right, broken series dropped.

    Pure: reads only its arguments. Samples of other families, OpenMetrics ``_created`` samples
    and timestamps are ignored. Extra labels beyond the EPP's are not kept; series that become
    one (only possible with extra labels, or a page mixing fixed and defective series) are added
    up, histograms only when their bucket boundaries agree.
    """
    raw_histograms, raw_counters = _group(samples)
    histograms: dict[str, dict[SeriesKey, HistogramSeries]] = {d.name: {} for d in _HISTOGRAMS.values()}
    violations: dict[ViolationKey, float] = {}
    dropped: list[DroppedSeries] = []
    filled = swapped = 0

    for (family, labels), raw in raw_histograms.items():
        model, target, was_filled, was_swapped = _put_right(family, dict(labels))
        key: SeriesKey = (pool, model, target)
        series, reason = _histogram(raw)
        out = histograms[_HISTOGRAMS[family].name]
        if series is not None and key in out:
            series, reason = _add_histograms(out[key], series)
        if series is None:
            dropped.append(DroppedSeries(family, labels, key, reason))
            continue
        out[key] = series
        filled += was_filled
        swapped += was_swapped

    for labels, values in raw_counters.items():
        label_map = dict(labels)
        model, target, was_filled, _ = _put_right(_VIOLATIONS, label_map)
        vkey: ViolationKey = (pool, model, target, label_map.get(_TYPE, ""))
        value = values[0]
        if len(values) > 1:
            reason = "the same series twice on the page"
        elif not math.isfinite(value) or value < 0:
            reason = f"counter value {value!r} is negative or not finite"
        else:
            violations[vkey] = violations.get(vkey, 0.0) + value
            filled += was_filled
            continue
        dropped.append(DroppedSeries(f"{_VIOLATIONS}_total", labels, vkey, reason))

    return EPPPage(pool, histograms, violations, tuple(dropped), filled, swapped)


def _group(
    samples: Iterable[Sample],
) -> tuple[dict[tuple[str, _Labels], _RawHistogram], dict[_Labels, list[float]]]:
    """The samples by series as written on the page: histograms by (family, labels without ``le``)."""
    histograms: dict[tuple[str, _Labels], _RawHistogram] = {}
    counters: dict[_Labels, list[float]] = {}
    for sample in samples:
        family, name = sample.family, sample.name
        if family in _HISTOGRAMS:
            suffix = name[len(family) :]
            if suffix not in ("_bucket", "_sum", "_count"):
                continue  # OpenMetrics "_created", or a sample named like the family itself
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != _LE))
            raw = histograms.setdefault((family, labels), _RawHistogram())
            if suffix == "_bucket":
                raw.buckets.append((sample.labels.get(_LE, ""), sample.value))
            elif suffix == "_sum":
                raw.sums.append(sample.value)
            else:
                raw.counts.append(sample.value)
        elif family == _VIOLATIONS and name == f"{_VIOLATIONS}_total":
            counters.setdefault(tuple(sorted(sample.labels.items())), []).append(sample.value)
    return histograms, counters


def _put_right(family: str, labels: Mapping[str, str]) -> tuple[str, str, bool, bool]:
    """(model, target_model, whether model was filled, whether the labels were swapped back)."""
    model = labels.get(_MODEL_NAME, "")
    target = labels.get(_TARGET_MODEL_NAME, "")
    swapped = family in _SWAPPED_LABELS and not target and bool(model)
    if swapped:
        model, target = target, model
    filled = not model and bool(target)
    if filled:
        model = target
    return model, target, filled, swapped


def _histogram(raw: _RawHistogram) -> tuple[HistogramSeries | None, str]:
    """The series, or None and the reason it cannot be published."""
    bounds: dict[float, float] = {}
    for le_text, count in raw.buckets:
        try:
            le = float(le_text)
        except ValueError:
            return None, f"bucket boundary le={le_text!r} is not a number"
        if math.isnan(le):
            return None, "bucket boundary le=NaN"
        if le in bounds:
            return None, f"bucket le={le_text!r} twice"
        if not math.isfinite(count) or count < 0:
            return None, f"bucket count {count!r} is negative or not finite"
        bounds[le] = count
    if math.inf not in bounds:
        return None, "no +Inf bucket"
    if len(raw.sums) != 1 or len(raw.counts) != 1:
        return None, "not exactly one _sum and one _count"
    buckets = tuple(sorted(bounds.items()))
    if any(later < earlier for (_, earlier), (_, later) in itertools.pairwise(buckets)):
        return None, "cumulative bucket counts decrease"
    total, count = raw.sums[0], raw.counts[0]
    if not math.isfinite(total):
        return None, f"_sum {total!r} is not finite"
    if count != buckets[-1][1]:
        return None, f"_count {count!r} differs from the +Inf bucket {buckets[-1][1]!r}"
    return HistogramSeries(buckets, total, count), ""


def _add_histograms(a: HistogramSeries, b: HistogramSeries) -> tuple[HistogramSeries | None, str]:
    if [le for le, _ in a.buckets] != [le for le, _ in b.buckets]:
        return None, "same labels as another series after normalization, with other bucket boundaries"
    buckets = tuple((le, x + y) for (le, x), (_, y) in zip(a.buckets, b.buckets, strict=True))
    return HistogramSeries(buckets, a.sum + b.sum, a.count + b.count), ""


class EPPScraper:
    """Scrapes one pool's EPP every ``interval`` seconds and keeps the latest normalized page.

    ``latest`` is read from other threads (the /metrics handler); it is one attribute holding an
    immutable page and its time, replaced whole, so readers need no lock.
    """

    def __init__(  # noqa: PLR0917  # positional interval and timeout: the agreed signature the pool wiring calls
        self,
        pool: str,
        url: str,
        http: httpx.AsyncClient,
        telemetry: Telemetry,
        interval: float,
        timeout: float,
        *,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        on_samples: Callable[[str, Sequence[Sample]], None] | None = None,
    ) -> None:
        if interval <= 0 or timeout <= 0 or stale_after <= 0:
            raise ValueError("interval, timeout and stale_after must be positive")
        self.pool = pool
        self.url = url
        self._http = http
        self._telemetry = telemetry
        self._interval = interval
        self._timeout = timeout
        self._stale_after = stale_after
        self._clock = clock
        self._parser = ExpositionParser(EPP_FAMILIES | INFLIGHT_FAMILIES)
        self._on_samples = on_samples  # each good page's samples (pool, samples): the in-flight history
        self._latest: tuple[EPPPage, float] | None = None
        self._failing = False
        self._warned: set[tuple[str, _Labels, str]] = set()
        self._fixes_logged = False

    @property
    def latest(self) -> EPPPage | None:
        """The last good page, unless it is older than ``stale_after`` seconds."""
        latest = self._latest
        if latest is None or self._clock() - latest[1] > self._stale_after:
            return None
        return latest[0]

    async def scrape_once(self) -> str:
        """Scrape the EPP now, keep the page if it is good, count the outcome; returns the result label."""
        fetched = await fetch(self._http, self.url, self._timeout)
        result, page, error = fetched.result, None, ""
        if fetched.ok:
            try:
                samples = self._parser.parse(fetched.text, openmetrics=fetched.openmetrics)
                page = normalize(samples, self.pool)
                if self._on_samples is not None:
                    self._on_samples(self.pool, samples)
            except ExpositionError as exc:
                result, error = c.RESULT_PARSE_ERROR, str(exc)
        else:
            error = f"{fetched.result}: {fetched.error}"
        now = self._clock()
        if page is not None:
            self._latest = (page, now)
            if self._failing:
                log.info("EPP of pool %s at %s answers again", self.pool, self.url)
            self._failing = False
            self._report(page)
        else:
            latest = self._latest
            if latest is not None and now - latest[1] > self._stale_after:
                self._latest = None  # also hidden by ``latest`` already; this frees it
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "EPP of pool %s at %s: scrape failed (%s)", self.pool, self.url, error)
            self._failing = True
        self._telemetry.scrape(c.KIND_EPP, result)
        return result

    async def run(self) -> None:
        """Scrape every ``interval`` seconds (fixed rate) until cancelled; scrape trouble never ends the loop."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await self.scrape_once()
            except Exception:  # a bug must cost this scrape, not the loop
                log.exception("EPP scrape of pool %s at %s failed unexpectedly", self.pool, self.url)
            next_at += self._interval
            now = loop.time()
            if next_at < now:  # fell behind (a slow scrape or a pause): skip the missed ticks
                next_at += ((now - next_at) // self._interval + 1) * self._interval
            await asyncio.sleep(next_at - now)

    def _report(self, page: EPPPage) -> None:
        """Log each dropped series when it first appears (not on every scrape), and the label fixes once."""
        current = {(d.family, d.labels, d.reason) for d in page.dropped}
        for family, labels, reason in sorted(current - self._warned):
            shown = ",".join(f'{k}="{v}"' for k, v in labels)
            log.warning("EPP of pool %s: dropped %s{%s}: %s", self.pool, family, shown, reason)
        self._warned = current
        if not self._fixes_logged and (page.models_filled or page.labels_swapped):
            self._fixes_logged = True
            log.info(
                "EPP of pool %s: model filled from target_model on %d series, swapped model labels put right "
                "on %d (known EPP label defects)",
                self.pool,
                page.models_filled,
                page.labels_swapped,
            )
