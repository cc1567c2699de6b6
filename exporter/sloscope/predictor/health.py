"""Health of one pool's latency predictor: readiness, quantile, model age and offline coverage.

One :meth:`PredictorHealth.poll_once` GETs, all at once (endpoints as in ``training_server.py`` and
``prediction_server.py`` of the latency predictor, recorded in ``fixtures/predictor/``):

- the training server's ``/readyz`` (200 ``{"status": "ready"}`` once both models exist, else 503
  ``{"detail": "Models are not ready."}``), ``/models/list`` (``models.<signal>.last_modified``: the
  model file's mtime as an ISO timestamp with offset, ``null`` while it does not exist) and
  ``/metrics`` (untyped text: ``model_quantile{}`` and the coverage rings below);
- each prediction server's ``/readyz`` (200, or 503 ``{"detail": "Models are not ready"}``) and
  ``/status`` (``is_ready``, ``quantile``).

A training server is up when ``/readyz`` answers 2xx; a prediction server when ``/readyz`` answers
2xx and ``/status`` says ``is_ready: true``. The quantile comes from the first prediction server (in
configured order) whose ``/status`` answered, else from the training server's ``model_quantile{}``:
the prediction servers' is the quantile the predictions are made at.

Coverage rings: the training server keeps the coverage of its last five evaluations in a
``deque(maxlen=5)`` per signal and writes them as ``ttft_coverage_percent{idx="N"}`` with
``enumerate`` over the deque, so ``idx`` is the position from the oldest kept evaluation (0) to the
newest. When a sixth evaluation is appended the deque drops the oldest and every position shifts
down: the indices never wrap, and the **highest idx present is always the newest evaluation**.
That one is published, divided by 100. The ring is emptied by the training server's ``/flush``;
then no coverage is published.

Each GET counts ``telemetry.scrape(kind, result)`` once (``training_server`` / ``prediction_server``);
a 2xx whose body is not the documented shape counts ``parse_error``. A value, once fetched, is kept
until a later successful GET of the same endpoint replaces it (or shows it gone): a server that is
down shows up=0 and the values it gave before stay. Values never fetched are absent, never 0.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx

from sloscope import conventions as c
from sloscope.config import PredictorServers
from sloscope.receivers.exposition import ExpositionParser
from sloscope.receivers.http_fetch import Fetched, fetch, fetch_json
from sloscope.redaction import redact_url
from sloscope.telemetry import Telemetry

__all__ = [
    "PredictorHealth",
    "PredictorSnapshot",
    "ServerStatus",
    "newest_coverage",
    "parse_last_modified",
    "parse_status",
    "parse_training_metrics",
    "parse_training_samples",
]

log = logging.getLogger(__name__)

_QUANTILE = "model_quantile"
_COVERAGE = {c.SIGNAL_TTFT: "ttft_coverage_percent", c.SIGNAL_TPOT: "tpot_coverage_percent"}
_PARSER = ExpositionParser([_QUANTILE, *_COVERAGE.values()])
_SAMPLES = "training_samples_count"  # one line per (model, queue, cache, prefix) bucket
_SAMPLES_PARSER = ExpositionParser([_SAMPLES])

_INDEX = re.compile(r"[0-9]+")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ServerStatus:
    """One predictor server as last polled; ``role`` is ``conventions.ROLE_TRAINING`` or ``ROLE_PREDICTION``."""

    url: str
    role: str
    up: bool


@dataclass(frozen=True)
class PredictorSnapshot:
    """What is known of one pool's predictor after a poll. Absent keys and None mean "never fetched"."""

    pool: str
    servers: tuple[ServerStatus, ...]
    quantile: float | None = None
    model_last_modified: Mapping[str, float] = field(default_factory=dict)  # signal -> seconds since the epoch
    coverage: Mapping[str, float] = field(default_factory=dict)  # signal -> ratio 0..1 of the newest evaluation
    polled_at: float = 0.0
    training_samples: Mapping[str, float] = field(
        default_factory=dict
    )  # signal -> samples held for its model  # seconds since the epoch, by the health poller's clock

    def model_age_seconds(self, now: float) -> dict[str, float]:
        """Seconds from each signal's model write to ``now`` (negative if the clocks disagree that much)."""
        return {signal: now - modified for signal, modified in self.model_last_modified.items()}


class _ShapeError(ValueError):
    """A 2xx body that is not what the endpoint documents."""


@dataclass(frozen=True)
class _Training:
    up: bool
    quantile: float | None = None
    last_modified: dict[str, float] | None = None  # None: /models/list not read this time
    coverage: dict[str, float] | None = None  # None: /metrics not read this time
    samples: dict[str, float] | None = None  # None: /metrics not read this time


@dataclass(frozen=True)
class _Prediction:
    up: bool
    quantile: float | None = None


class PredictorHealth:
    """Polls one pool's predictor servers; :attr:`snapshot` is the latest result (None before the first poll)."""

    def __init__(
        self,
        pool: str,
        servers: PredictorServers,
        http: httpx.AsyncClient,
        telemetry: Telemetry,
        timeout: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pool = pool
        self._training_url = servers.training_url.rstrip("/") if servers.training_url else None
        self._prediction_urls = [url.rstrip("/") for url in servers.prediction_urls]
        self._http = http
        self._telemetry = telemetry
        self._timeout = timeout
        self._clock = clock
        self._snapshot: PredictorSnapshot | None = None

    @property
    def snapshot(self) -> PredictorSnapshot | None:
        return self._snapshot

    async def poll_once(self) -> PredictorSnapshot:
        """GET every health endpoint once and merge the answers into a new snapshot. Never raises for server trouble."""
        training, predictions = await asyncio.gather(self._poll_training(), self._poll_predictions())
        previous = self._snapshot or PredictorSnapshot(self.pool, ())
        servers: list[ServerStatus] = []
        quantile: float | None = None
        last_modified = previous.model_last_modified
        coverage = previous.coverage
        samples = previous.training_samples
        if self._training_url is not None and training is not None:
            servers.append(ServerStatus(redact_url(self._training_url), c.ROLE_TRAINING, training.up))
            if training.last_modified is not None:
                last_modified = training.last_modified
            if training.coverage is not None:
                coverage = training.coverage
            if training.samples is not None:
                samples = training.samples
        for url, prediction in zip(self._prediction_urls, predictions, strict=True):
            servers.append(ServerStatus(redact_url(url), c.ROLE_PREDICTION, prediction.up))  # a label value
            if quantile is None:
                quantile = prediction.quantile
        if quantile is None and training is not None:
            quantile = training.quantile
        if quantile is None:
            quantile = previous.quantile
        snapshot = PredictorSnapshot(
            self.pool, tuple(servers), quantile, dict(last_modified), dict(coverage), self._clock(), dict(samples)
        )
        _log_changes(previous, snapshot)
        self._snapshot = snapshot
        return snapshot

    async def _poll_training(self) -> _Training | None:
        base = self._training_url
        if base is None:
            return None
        ready, models, metrics = await asyncio.gather(
            self._get(c.KIND_TRAINING_SERVER, base + "/readyz"),
            self._get_json(c.KIND_TRAINING_SERVER, base + "/models/list", parse_last_modified),
            self._get(c.KIND_TRAINING_SERVER, base + "/metrics", text=True),
        )
        quantile: float | None = None
        coverage: dict[str, float] | None = None
        samples: dict[str, float] | None = None
        if metrics.ok:
            try:
                quantile, coverage = parse_training_metrics(metrics.text, metrics.openmetrics)
                samples = parse_training_samples(metrics.text, metrics.openmetrics)
            except ValueError as exc:  # ExpositionError or an idx that is not a number
                log.debug("training server %s: unreadable /metrics: %s", base, exc)
                self._telemetry.scrape(c.KIND_TRAINING_SERVER, c.RESULT_PARSE_ERROR)
            else:
                self._telemetry.scrape(c.KIND_TRAINING_SERVER, c.RESULT_SUCCESS)
        return _Training(ready.ok, quantile, models, coverage, samples)

    async def _poll_predictions(self) -> list[_Prediction]:
        return list(await asyncio.gather(*(self._poll_prediction(url) for url in self._prediction_urls)))

    async def _poll_prediction(self, base: str) -> _Prediction:
        ready, status = await asyncio.gather(
            self._get(c.KIND_PREDICTION_SERVER, base + "/readyz"),
            self._get_json(c.KIND_PREDICTION_SERVER, base + "/status", parse_status),
        )
        if status is None:
            return _Prediction(False)
        is_ready, quantile = status
        return _Prediction(ready.ok and is_ready, quantile)

    async def _get(self, kind: str, url: str, *, text: bool = False) -> Fetched:
        """A GET counted here unless ``text``: a page to parse is counted once its parse is known."""
        fetched = await fetch(self._http, url, self._timeout)
        if not fetched.ok:
            log.debug("%s %s: %s %s", kind, url, fetched.result, fetched.error)
        if not (text and fetched.ok):
            self._telemetry.scrape(kind, fetched.result)
        return fetched

    async def _get_json(self, kind: str, url: str, parse: Callable[[Any], _T]) -> _T | None:
        """The parsed body of a JSON endpoint, or None (failed GET or undocumented shape); counted once."""
        fetched, document = await fetch_json(self._http, url, self._timeout)
        if not fetched.ok:
            log.debug("%s %s: %s %s", kind, url, fetched.result, fetched.error)
            self._telemetry.scrape(kind, fetched.result)
            return None
        try:
            value = parse(document)
        except ValueError as exc:
            log.debug("%s %s: unexpected body: %s", kind, url, exc)
            self._telemetry.scrape(kind, c.RESULT_PARSE_ERROR)
            return None
        self._telemetry.scrape(kind, c.RESULT_SUCCESS)
        return value


def parse_last_modified(document: Any) -> dict[str, float]:
    """Seconds since the epoch of each signal's model write, from a ``/models/list`` body.

    A model that does not exist (``last_modified: null``) is left out. A timestamp without an offset
    (the real server always writes one) is read as UTC. Raises ``ValueError`` for another shape.
    """
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        raise _ShapeError("no 'models' object")
    out: dict[str, float] = {}
    for signal in c.SIGNALS:
        entry = models.get(signal)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise _ShapeError(f"models.{signal} is not an object")
        stamp = entry.get("last_modified")
        if stamp is None:
            continue
        if not isinstance(stamp, str):
            raise _ShapeError(f"models.{signal}.last_modified is not a string")
        try:
            moment = datetime.fromisoformat(stamp)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            out[signal] = moment.timestamp()
        except (ValueError, OverflowError) as exc:
            raise _ShapeError(f"models.{signal}.last_modified: {exc}") from exc
    return out


def parse_status(document: Any) -> tuple[bool, float | None]:
    """``is_ready`` and ``quantile`` of a prediction server's ``/status`` body; ``ValueError`` if it is none."""
    if not isinstance(document, dict) or not isinstance(document.get("is_ready"), bool):
        raise _ShapeError("no boolean 'is_ready'")
    quantile = document.get("quantile")
    if quantile is not None and not _is_number(quantile):
        raise _ShapeError("'quantile' is not a number")
    return document["is_ready"], None if quantile is None else float(quantile)


def parse_training_metrics(text: str, openmetrics: bool = False) -> tuple[float | None, dict[str, float]]:
    """``model_quantile{}`` and the newest coverage ratio per signal of a training server's ``/metrics``.

    Raises ``ValueError`` (an ``ExpositionError``) for a malformed line of those families.
    """
    samples = _PARSER.parse(text, openmetrics=openmetrics)
    quantile = next((s.value for s in samples if s.name == _QUANTILE), None)
    coverage: dict[str, float] = {}
    for signal, family in _COVERAGE.items():
        newest = newest_coverage((s.labels, s.value) for s in samples if s.name == family)
        if newest is not None:
            coverage[signal] = newest / 100.0
    return quantile, coverage


def parse_training_samples(text: str, openmetrics: bool = False) -> dict[str, float]:
    """Training samples held per signal: the sum of ``training_samples_count{model=...}`` over its buckets.

    The training server keeps samples in (queue, cache, prefix) buckets per model and publishes one line per
    bucket; their sum is what the next fit learns from. Signals with no line are left out.
    """
    totals: dict[str, float] = {}
    for sample in _SAMPLES_PARSER.parse(text, openmetrics=openmetrics):
        model = sample.labels.get("model")
        if sample.name == _SAMPLES and model in c.SIGNALS and sample.value >= 0:
            totals[model] = totals.get(model, 0.0) + sample.value
    return totals


def newest_coverage(samples: Iterable[tuple[Mapping[str, str], float]]) -> float | None:
    """The value at the highest integer ``idx`` among ``(labels, value)`` pairs (the newest evaluation).

    Raises ``ValueError`` for an ``idx`` that is not a non-negative integer.
    """
    best: tuple[int, float] | None = None
    for labels, value in samples:
        raw = labels.get("idx", "")
        if not _INDEX.fullmatch(raw):
            raise _ShapeError(f"coverage sample with idx={raw!r}")
        index = int(raw)
        if best is None or index > best[0]:
            best = (index, value)
    return None if best is None else best[1]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _log_changes(previous: PredictorSnapshot, current: PredictorSnapshot) -> None:
    before = {(s.url, s.role): s.up for s in previous.servers}
    for server in current.servers:
        was = before.get((server.url, server.role))
        if was is not None and was != server.up:
            log.warning(
                "predictor %s server %s of pool %s is %s",
                server.role,
                server.url,
                current.pool,
                "up" if server.up else "down",
            )
