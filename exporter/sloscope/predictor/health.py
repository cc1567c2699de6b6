"""Health of one pool's latency predictor: readiness, objective, quantile, model age, offline accuracy, training.

One :meth:`PredictorHealth.poll_once` GETs, all at once (endpoints as in ``training_server.py`` and
``prediction_server.py`` of the latency predictor, recorded in ``fixtures/predictor/``):

- the training server's ``/readyz`` (200 ``{"status": "ready"}`` once both models exist, else 503
  ``{"detail": "Models are not ready."}``), ``/models/list`` (``models.<signal>.last_modified``: the
  model file's mtime as an ISO timestamp with offset, ``null`` while it does not exist) and
  ``/metrics`` (untyped text, read by :mod:`sloscope.predictor.training_page`: objective, quantile, the
  coverage or MAE/RMSE rings, sample counts, ensemble state);
- each prediction server's ``/readyz`` (200, or 503 ``{"detail": "Models are not ready"}``) and
  ``/status`` (``is_ready``, ``quantile``; the llm-d predictor adds ``objective_type``, ``ensemble_active``
  and the gated models in ``models_exist``, prediction/prediction_server.py:966-995 at b5d19f1);
- then, unless the probe is off (``probe=False``, the ``predictions.reset_probe`` setting), each prediction
  server that answered ready gets two ``POST /predict`` with the probe requests of
  :mod:`sloscope.predictor.reset` (``/predict`` is in both predictor generations; the answers carry
  ``objective_type`` too): the same prediction for both is the mark of the default model. Without the
  probe a reset shows only by its other markers, and the objective comes from ``/status`` and ``/metrics``.

A training server is up when ``/readyz`` answers 2xx; a prediction server when ``/readyz`` answers
2xx and ``/status`` says ``is_ready: true``. The quantile comes from the first prediction server (in
configured order) whose ``/status`` answered, else from the training server's ``model_quantile{}``:
the prediction servers' is the quantile the predictions are made at. The objective likewise: the first
prediction server that answered (a probe answer before its ``/status``), else the training server's
``objective_type`` line; a server that states none (the late-2025 predictor) predicts a quantile. A change
of objective is logged once. ``trained`` holds, per signal some source spoke of, the reset markers found
(:func:`sloscope.predictor.reset.untrained_markers`; empty: trained); a change is logged once.

Coverage rings (and the MAE/RMSE rings of a mean-objective server): the training server keeps its last
five evaluations in a ``deque(maxlen=5)`` per signal and writes them as ``ttft_coverage_percent{idx="N"}``
with ``enumerate`` over the deque, so ``idx`` is the position from the oldest kept evaluation (0) to the
newest. When a sixth evaluation is appended the deque drops the oldest and every position shifts
down: the indices never wrap, and the **highest idx present is always the newest evaluation**.
That one is published (coverage divided by 100, MAE/RMSE by 1000: they are in ms). A ring is emptied by
the training server's ``/flush``, and a server in the other mode writes none; then none is published.

Each GET counts ``telemetry.scrape(kind, result)`` once (``training_server`` / ``prediction_server``);
a 2xx whose body is not the documented shape counts ``parse_error``. A value, once fetched, is kept
until a later successful GET of the same endpoint replaces it (or shows it gone): a server that is
down shows up=0 and the values it gave before stay. Values never fetched are absent, never 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from sloscope import conventions as c
from sloscope.config import PredictorServers
from sloscope.predictor import reset
from sloscope.predictor.status import Status, parse_last_modified, probe_answer, read_status
from sloscope.predictor.training_page import TrainingPage, read_training_page
from sloscope.receivers.http_fetch import MAX_ANSWER_BYTES, Fetched, exchange, fetch, fetch_json, read_json
from sloscope.receivers.off_loop import off_loop
from sloscope.redaction import redact_url
from sloscope.telemetry import Telemetry

__all__ = [
    "PredictorHealth",
    "PredictorSnapshot",
    "ServerStatus",
    "server_labels",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class ServerStatus:
    """One predictor server as last polled; ``role`` is ``conventions.ROLE_TRAINING`` or ``ROLE_PREDICTION``.

    ``server`` is its ``server`` label: the configured name, else the URL with its userinfo masked.
    """

    server: str
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
    polled_at: float = 0.0  # seconds since the epoch, by the health poller's clock
    training_samples: Mapping[str, float] = field(default_factory=dict)  # signal -> samples held for its model
    objective: str | None = None  # conventions.OBJECTIVES
    mae_offline: Mapping[str, float] = field(default_factory=dict)  # signal -> seconds, newest evaluation
    rmse_offline: Mapping[str, float] = field(default_factory=dict)
    untrained: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # signal -> reset markers; () trained
    speaks_objective: bool | None = None  # a prediction server's /status states objective_type; None: none answered
    unreadable: tuple[str, ...] = ()  # endpoints (/status, /predict, ...) whose 2xx body had another shape this poll

    def model_age_seconds(self, now: float) -> dict[str, float]:
        """Seconds from each signal's model write to ``now`` (negative if the clocks disagree that much)."""
        return {signal: now - modified for signal, modified in self.model_last_modified.items()}


@dataclass(frozen=True)
class _Training:
    up: bool
    last_modified: dict[str, float] | None = None  # None: /models/list not read this time
    page: TrainingPage | None = None  # None: /metrics not read this time


@dataclass(frozen=True)
class _Prediction:
    up: bool
    status: Status | None = None
    probe_objective: str | None = None  # None: not probed, or no usable answer
    constant: frozenset[str] | None = None  # None: not probed


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
        probe: bool = True,
    ) -> None:
        self.pool = pool
        self._probe_enabled = probe
        self._training_url = servers.training_url.rstrip("/") if servers.training_url else None
        self._prediction_urls = [url.rstrip("/") for url in servers.prediction_urls]
        self._training_label, self._prediction_labels = server_labels(servers)
        self._http = http
        self._telemetry = telemetry
        self._timeout = timeout
        self._clock = clock
        self._snapshot: PredictorSnapshot | None = None
        self._unreadable: set[str] = set()  # this poll's endpoints that answered in an undocumented shape

    @property
    def snapshot(self) -> PredictorSnapshot | None:
        return self._snapshot

    async def poll_once(self) -> PredictorSnapshot:
        """GET every health endpoint once and merge the answers into a new snapshot. Never raises for server trouble."""
        self._unreadable = set()
        training, predictions = await asyncio.gather(self._poll_training(), self._poll_predictions())
        previous = self._snapshot or PredictorSnapshot(self.pool, ())
        servers: list[ServerStatus] = []
        last_modified = previous.model_last_modified
        page: TrainingPage | None = None
        if self._training_url is not None and training is not None:
            servers.append(ServerStatus(self._training_label, c.ROLE_TRAINING, training.up))
            if training.last_modified is not None:
                last_modified = training.last_modified
            page = training.page
        for label, prediction in zip(self._prediction_labels, predictions, strict=True):
            servers.append(ServerStatus(label, c.ROLE_PREDICTION, prediction.up))
        statuses = [p.status for p in predictions if p.status is not None]
        quantile = _first(
            [s.quantile for s in statuses] + [page.quantile if page else None, previous.quantile],
        )
        objective = _first(
            [p.probe_objective or (p.status.objective if p.status else None) for p in predictions]
            + [page.objective if page else None, previous.objective]
        )
        snapshot = PredictorSnapshot(
            self.pool,
            tuple(servers),
            quantile,
            dict(last_modified),
            dict(page.coverage) if page else dict(previous.coverage),
            self._clock(),
            dict(page.samples) if page else dict(previous.training_samples),
            objective,
            dict(page.mae_seconds) if page else dict(previous.mae_offline),
            dict(page.rmse_seconds) if page else dict(previous.rmse_offline),
            _untrained(page, predictions, previous),
            any(s.states_objective for s in statuses) if statuses else previous.speaks_objective,
            tuple(sorted(self._unreadable)),
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
            self._get_json(c.KIND_TRAINING_SERVER, base, "/models/list", parse_last_modified),
            self._get(c.KIND_TRAINING_SERVER, base + "/metrics", text=True),
        )
        page: TrainingPage | None = None
        if metrics.ok:
            try:
                page = await off_loop(len(metrics.text), read_training_page, metrics.text, metrics.openmetrics)
            except ValueError as exc:  # ExpositionError, an idx that is not a number, an unknown objective
                log.debug("training server %s: unreadable /metrics: %s", base, exc)
                self._unreadable.add("/metrics")
                self._telemetry.scrape(c.KIND_TRAINING_SERVER, c.RESULT_PARSE_ERROR)
            else:
                self._telemetry.scrape(c.KIND_TRAINING_SERVER, c.RESULT_SUCCESS)
        return _Training(ready.ok, models, page)

    async def _poll_predictions(self) -> list[_Prediction]:
        return list(await asyncio.gather(*(self._poll_prediction(url) for url in self._prediction_urls)))

    async def _poll_prediction(self, base: str) -> _Prediction:
        ready, status = await asyncio.gather(
            self._get(c.KIND_PREDICTION_SERVER, base + "/readyz"),
            self._get_json(c.KIND_PREDICTION_SERVER, base, "/status", read_status),
        )
        if status is None:
            return _Prediction(False)
        up = ready.ok and status.is_ready
        if not up:
            return _Prediction(False, status)
        if not self._probe_enabled:
            return _Prediction(up, status)
        answers = await asyncio.gather(*(self._probe(base, features.to_json()) for features in reset.PROBE))
        usable = [a for a in answers if a is not None]
        if len(usable) < len(answers):
            return _Prediction(up, status)
        probed = reset.constant_signals([(ttft, tpot) for ttft, tpot, _ in usable])
        return _Prediction(up, status, usable[-1][2], frozenset(probed))

    async def _probe(self, base: str, request: dict[str, float | int | str]) -> tuple[float, float, str] | None:
        """``POST /predict`` of one probe request: (ttft_ms, tpot_ms, objective), or None; counted once."""
        kind, url = c.KIND_PREDICTION_SERVER, base + "/predict"
        answer = await exchange(
            self._http,
            "POST",
            url,
            timeout=self._timeout,
            max_bytes=MAX_ANSWER_BYTES,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            content=json.dumps(request).encode(),
        )
        result, probed = answer.result, None
        if answer.ok:
            try:
                probed = probe_answer(await off_loop(len(answer.body), read_json, answer.body))
            except ValueError as exc:  # not JSON (or nested too deeply), another shape, or values out of range
                log.debug("%s %s: unexpected body: %s", kind, url, exc)
                self._unreadable.add("/predict")
                result = c.RESULT_PARSE_ERROR
        else:
            log.debug("%s %s: %s %s", kind, url, answer.result, answer.error)
        self._telemetry.scrape(kind, result)
        return probed

    async def _get(self, kind: str, url: str, *, text: bool = False) -> Fetched:
        """A GET counted here unless ``text``: a page to parse is counted once its parse is known."""
        fetched = await fetch(self._http, url, self._timeout)
        if not fetched.ok:
            log.debug("%s %s: %s %s", kind, url, fetched.result, fetched.error)
        if not (text and fetched.ok):
            self._telemetry.scrape(kind, fetched.result)
        return fetched

    async def _get_json(self, kind: str, base: str, path: str, parse: Callable[[Any], _T]) -> _T | None:
        """The parsed body of a JSON endpoint, or None (failed GET or undocumented shape); counted once."""
        url = base + path
        fetched, document = await fetch_json(self._http, url, self._timeout)
        if not fetched.ok:
            log.debug("%s %s: %s %s", kind, url, fetched.result, fetched.error)
            self._telemetry.scrape(kind, fetched.result)
            return None
        try:
            value = parse(document)
        except ValueError as exc:
            log.debug("%s %s: unexpected body: %s", kind, url, exc)
            self._unreadable.add(path)
            self._telemetry.scrape(kind, c.RESULT_PARSE_ERROR)
            return None
        self._telemetry.scrape(kind, c.RESULT_SUCCESS)
        return value


def server_labels(servers: PredictorServers) -> tuple[str, list[str]]:
    """The ``server`` label of the training server and of each prediction server, in configured order.

    A URL may carry userinfo (``http://user:password@host``, sent as basic authentication): without a
    ``name`` the label is the URL with it masked, never the URL as written.
    """
    name = servers.name
    training = name if name else redact_url((servers.training_url or "").rstrip("/"))
    urls = [url.rstrip("/") for url in servers.prediction_urls]
    return training, [f"{name}-{i}" if name else redact_url(url) for i, url in enumerate(urls)]


def _first(values: Iterable[_T | None]) -> _T | None:
    return next((v for v in values if v is not None), None)


def _untrained(
    page: TrainingPage | None,
    predictions: list[_Prediction],
    previous: PredictorSnapshot,
) -> dict[str, tuple[str, ...]]:
    """The reset markers per signal from this poll, for the signals a source that can tell spoke of (the training
    server's sample counts, the probe); the previous ones where none answered this time."""
    probed = [p.constant for p in predictions if p.constant is not None]
    known: set[str] = set(page.samples) if page is not None else set()
    if probed:
        known.update(c.SIGNALS)
    if not known:
        return dict(previous.untrained)
    return reset.untrained_markers(
        samples=page.samples if page else {},
        constant=[signal for found in probed for signal in found],
        known=known,
    )


def _log_changes(previous: PredictorSnapshot, current: PredictorSnapshot) -> None:
    if previous.objective is not None and current.objective != previous.objective:
        log.warning(
            "latency predictor of pool %s now predicts the %s (was the %s)",
            current.pool,
            current.objective,
            previous.objective,
        )
    for endpoint in sorted(set(current.unreadable) - set(previous.unreadable)):
        log.warning(
            "latency predictor of pool %s: %s answers in a shape sloscope does not read (an upgrade changed it?)",
            current.pool,
            endpoint,
        )
    for endpoint in sorted(set(previous.unreadable) - set(current.unreadable)):
        log.info("latency predictor of pool %s: %s is readable again", current.pool, endpoint)
    for signal, markers in sorted(current.untrained.items()):
        before = previous.untrained.get(signal)
        if markers and markers != before:
            log.warning(
                "latency predictor of pool %s: the %s model looks reset to its default (%s)",
                current.pool,
                signal,
                ", ".join(markers),
            )
        elif not markers and before:
            log.info("latency predictor of pool %s: the %s model is trained again", current.pool, signal)
    was_up = {(s.server, s.role): s.up for s in previous.servers}
    for server in current.servers:
        was = was_up.get((server.server, server.role))
        if was is not None and was != server.up:
            log.warning(
                "predictor %s server %s of pool %s is %s",
                server.role,
                server.server,
                current.pool,
                "up" if server.up else "down",
            )
