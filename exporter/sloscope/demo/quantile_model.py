"""The demo's latency predictor: two linear regressors (TTFT, TPOT) trained online by SGD, of a quantile or the mean.

The real training server (``latencypredictor/training_server.py`` of gateway-api-inference-extension)
fits XGBoost with the pinball loss at quantile 0.9 on everything it has kept, every
``RETRAINING_INTERVAL_SEC``. This model does the same job in plain Python so the demo's predictor
behaves like one: it learns, it is wrong in honest ways, and its coverage drifts when the load shifts.

What is taken from the real server (read at the commit the fixtures were recorded from):

- Routing: an entry with ``actual_ttft_ms > 0`` trains TTFT, one with ``actual_tpot_ms > 0`` trains TPOT
  (an entry with both trains both). The EPP sends TTFT entries with ``num_tokens_generated = 0`` and
  TPOT entries with ``actual_ttft_ms = 0``.
- Features: TTFT uses the five request features plus ``effective_input_tokens = (1 - prefix_cache_score)
  * input_token_length`` and ``prefill_score_bucket = min(int(clip(score, 0, 1) * 4), 3)``; TPOT uses
  ``kv_cache_percentage``, ``input_token_length``, ``num_request_waiting``, ``num_request_running`` and
  ``num_tokens_generated``. A linear model cannot split on them as trees do, so each gets a few
  products and squares (``TTFT_FEATURES``, ``TPOT_FEATURES``).
- Held-out data: a deterministic hash of the entry sends ``test_share`` (10%) of entries to the test set
  and never to training, so the same entry always lands on the same side.
- Evaluation after each fit, on the test set (at least two samples): coverage percent (share of actuals
  <= prediction), violation rate percent (share above) and the mean pinball loss, each appended to a
  ``deque(maxlen=5)``: the newest evaluation is always the last (highest index).

What differs, on purpose: the buffers keep only the most recent ``train_capacity`` / ``test_capacity``
entries per signal (the real one keeps up to 10000 per (queue, cache, prefix) bucket and 1000 test
samples), so the model follows the load instead of averaging over all of history. As in the real server
the test set spans a shorter, more recent stretch than the training set (300 of every ~3000 entries vs
6000), so when the load shifts the coverage measured on it drifts away from the quantile until the
training buffer has caught up. By default there is no model before the first fit: a fresh predictor is not ready
until it has seen ``min_samples`` entries per signal. With ``default_models`` it starts as the real training
server does (gateway-api-inference-extension v1.5.0 ``latencypredictor/training_server.py:745-777,1345-1380``):
each signal has a default model fitted to one sample of 10 ms, so it is ready at once and predicts 10 ms until its
first fit, which then starts afresh, not from the default. A signal that never gets a sample (TPOT, when the EPP
runs with ``streamingMode`` off) keeps its default model.

The fit (:func:`_fit`): features standardized by the training buffer's mean and standard deviation;
``prediction = intercept + sum(weight * z)``; SGD on the pinball loss at ``quantile`` in shuffled
epochs, with step ``lr(k) * std(targets)`` where ``lr(k) = max(LR_MIN, LR_START / sqrt(1 + k / LR_DECAY_STEPS))``
and ``k`` counts every step the model has taken since it was created (so learning slows as it settles
but never stops, which is what lets it follow drift). The published parameters are the average of the
iterates over the last epoch (Polyak-Ruppert averaging: the last iterate of pinball SGD jitters). A refit
starts from the previous model re-expressed exactly in the new standardization (a warm start), and the
first fit starts from the empirical quantile of the targets. Predictions are never below
``MIN_PREDICTION_MS``.

The mean objective (``objective="mean"``, as llm-d-router's chart runs the llm-d predictor with
``LATENCY_OBJECTIVE_TYPE: "mean"``): the same features, standardization, warm starts, schedule and averaging,
with the squared loss instead of the pinball loss, so the model predicts the conditional mean. The step is
``lr(k) * (prediction - actual)`` with the error clipped at ``MEAN_ERROR_CLIP`` standard deviations of the
targets (one long request must not throw the line away); the first fit starts from the targets' mean. After
each fit it is evaluated on the test set as the llm-d training server evaluates a mean model: the mean
absolute error and the root mean squared error (ms), in rings of five (:class:`MeanRings`). Predictions
carry ``objective`` "mean"; ``quantile`` stays the configured one, as the llm-d servers report 0.9 in mean mode.

Deterministic: given the rng and the same sequence of calls, every fit and prediction is the same.
Thread-safe: ``retrain`` may run in a worker thread while ``add`` and ``predict`` are called.
"""

from __future__ import annotations

import math
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from sloscope import conventions as c
from sloscope.predictor.features import Features, Prediction

__all__ = [
    "DEFAULT_PREDICTION_MS",
    "LR_DECAY_STEPS",
    "LR_MIN",
    "LR_START",
    "MIN_PREDICTION_MS",
    "MODEL_TYPE",
    "PREFIX_BUCKETS",
    "TPOT_FEATURES",
    "TTFT_FEATURES",
    "LinearQuantileRegressor",
    "MeanRings",
    "ModelMetrics",
    "ModelSnapshot",
    "OnlineQuantileModel",
    "Rings",
    "TrainingEntry",
    "default_model",
    "learning_rate",
    "prefill_score_bucket",
]

MODEL_TYPE = "online-linear-quantile"
MIN_PREDICTION_MS = 0.1  # a latency is never predicted as zero or less: headroom maths divides by nothing, but
# a 0 ms prediction would make every pod look free
PREFIX_BUCKETS = 4  # the real server's prefix buckets: 0-25%, 25-50%, 50-75%, 75-100%
LR_START = 0.05  # step size in standard deviations of the target, at the first step
LR_DECAY_STEPS = 2000.0
LR_MIN = 0.003  # the step never shrinks below this, so the model keeps following the load
RING_SIZE = 5  # evaluations kept, as the real server's deque(maxlen=5)
MEAN_ERROR_CLIP = 5.0  # mean objective: an SGD step's error is clipped at this many standard deviations of the targets

TTFT_FEATURES = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefix_cache_score",
    "effective_input_tokens",
    "prefill_score_bucket",
    "kv_cache_percentage^2",
    "num_request_waiting*num_request_running",
    "effective_input_tokens*num_request_running",
)
TPOT_FEATURES = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "num_tokens_generated",
    "kv_cache_percentage^2",
    "num_request_running*kv_cache_percentage",
    "num_request_running^2",
)


@dataclass(frozen=True, slots=True)
class TrainingEntry:
    """One item of ``POST /add_training_data_bulk``'s ``entries``, with the real server's field names."""

    kv_cache_percentage: float
    input_token_length: int
    num_request_waiting: int
    num_request_running: int
    actual_ttft_ms: float  # 0: not a TTFT sample
    actual_tpot_ms: float  # 0: not a TPOT sample
    num_tokens_generated: int
    prefix_cache_score: float
    timestamp: datetime | None = None


class _Inputs(Protocol):
    """The request features both :class:`Features` and :class:`TrainingEntry` carry."""

    @property
    def kv_cache_percentage(self) -> float: ...
    @property
    def input_token_length(self) -> int: ...
    @property
    def num_request_waiting(self) -> int: ...
    @property
    def num_request_running(self) -> int: ...
    @property
    def num_tokens_generated(self) -> int: ...
    @property
    def prefix_cache_score(self) -> float: ...


def prefill_score_bucket(prefix_cache_score: float) -> int:
    """The real server's bucket of a prefix-cache score: 0..3 for quarters of 0..1 (1.0 falls in 3)."""
    score = min(max(prefix_cache_score, 0.0), 1.0)
    return min(int(score * PREFIX_BUCKETS), PREFIX_BUCKETS - 1)


def _ttft_row(x: _Inputs) -> tuple[float, ...]:
    kv, prefix = float(x.kv_cache_percentage), float(x.prefix_cache_score)
    length, waiting, running = float(x.input_token_length), float(x.num_request_waiting), float(x.num_request_running)
    effective = (1.0 - prefix) * length
    bucket = float(prefill_score_bucket(prefix))
    return (kv, length, waiting, running, prefix, effective, bucket, kv * kv, waiting * running, effective * running)


def _tpot_row(x: _Inputs) -> tuple[float, ...]:
    kv, length = float(x.kv_cache_percentage), float(x.input_token_length)
    waiting, running = float(x.num_request_waiting), float(x.num_request_running)
    generated = float(x.num_tokens_generated)
    return (kv, length, waiting, running, generated, kv * kv, running * kv, running * running)


_ROWS: dict[str, Callable[[_Inputs], tuple[float, ...]]] = {c.SIGNAL_TTFT: _ttft_row, c.SIGNAL_TPOT: _tpot_row}
_NAMES = {c.SIGNAL_TTFT: TTFT_FEATURES, c.SIGNAL_TPOT: TPOT_FEATURES}


def _target(entry: TrainingEntry, signal: str) -> float:
    return entry.actual_ttft_ms if signal == c.SIGNAL_TTFT else entry.actual_tpot_ms


@dataclass(frozen=True, slots=True)
class LinearQuantileRegressor:
    """A fitted model of one signal: ``intercept + sum(weights * (row - means) / scales)``, in ms."""

    signal: str
    means: tuple[float, ...]
    scales: tuple[float, ...]
    intercept: float
    weights: tuple[float, ...]
    steps: int  # SGD steps taken since the first fit: where the learning-rate schedule stands

    def predict_inputs(self, x: _Inputs) -> float:
        """The quantile prediction for one request, never below ``MIN_PREDICTION_MS``."""
        row = _ROWS[self.signal](x)
        total = self.intercept
        for value, mean, scale, weight in zip(row, self.means, self.scales, self.weights, strict=True):
            total += weight * (value - mean) / scale
        return max(MIN_PREDICTION_MS, total)

    def coefficients(self) -> dict[str, float]:
        """The same line in raw feature units: ``{"intercept": b, feature: w}`` (``w = weight / scale``)."""
        out = {
            "intercept": self.intercept
            - sum(w * m / s for w, m, s in zip(self.weights, self.means, self.scales, strict=True))
        }
        out.update((name, w / s) for name, w, s in zip(_NAMES[self.signal], self.weights, self.scales, strict=True))
        return out


class Rings(NamedTuple):
    """The last five test-set evaluations of one signal, oldest first (quantile objective)."""

    quantile_loss: tuple[float, ...]
    coverage_percent: tuple[float, ...]
    violation_rate_percent: tuple[float, ...]


class MeanRings(NamedTuple):
    """The last five test-set evaluations of one signal, oldest first (mean objective; ms)."""

    mae: tuple[float, ...]
    rmse: tuple[float, ...]


@dataclass(frozen=True)
class ModelSnapshot:
    """An immutable copy of the fitted models: what a prediction server serves after a sync."""

    quantile: float
    ttft: LinearQuantileRegressor | None
    tpot: LinearQuantileRegressor | None
    last_modified: Mapping[str, float]  # signal -> seconds since the epoch of its last fit
    generation: int = 0  # retrains that fitted a model so far: a sync loads a snapshot of a higher one
    objective: str = c.OBJECTIVE_QUANTILE  # what the models predict: the quantile, or the mean

    @property
    def ready(self) -> bool:
        """Both models exist, as the real servers' ``is_ready``."""
        return self.ttft is not None and self.tpot is not None

    def predict(self, features: Features) -> Prediction | None:
        """The ``quantile`` (or the mean) of TTFT and TPOT for ``features``; None until both models exist."""
        if self.ttft is None or self.tpot is None:
            return None
        return Prediction(
            self.ttft.predict_inputs(features),
            self.tpot.predict_inputs(features),
            self.quantile,
            MODEL_TYPE,
            self.objective,
        )


@dataclass(frozen=True)
class ModelMetrics:
    """What the training server's ``/metrics`` page shows, taken at one moment."""

    snapshot: ModelSnapshot
    rings: Mapping[str, Rings | MeanRings]  # by the snapshot's objective
    training: Mapping[str, tuple[TrainingEntry, ...]]  # the training buffer of each signal, oldest first
    test: Mapping[str, tuple[TrainingEntry, ...]]  # the held-out entries the rings were computed on


class OnlineQuantileModel:
    """Buffers training entries and refits both regressors on :meth:`retrain`.

    ``rng`` drives the SGD shuffles (``random.Random(0)`` if None); ``clock`` stamps ``last_modified``;
    ``objective`` is ``quantile`` (the pinball loss at ``quantile``) or ``mean`` (the squared loss).
    """

    def __init__(
        self,
        quantile: float = 0.9,
        rng: random.Random | None = None,
        *,
        clock: Callable[[], float] = time.time,
        train_capacity: int = 6000,
        test_capacity: int = 300,
        test_share: float = 0.1,
        min_samples: int = 10,
        epochs: int = 2,
        objective: str = c.OBJECTIVE_QUANTILE,
        default_models: bool = False,
    ) -> None:
        if objective not in c.OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(c.OBJECTIVES)}, got {objective!r}")
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        if min_samples < 2 or epochs < 1 or train_capacity < min_samples or test_capacity < 1:
            raise ValueError("need min_samples >= 2, epochs >= 1, train_capacity >= min_samples, test_capacity >= 1")
        if not 0.0 <= test_share < 1.0:
            raise ValueError(f"test_share must be in [0, 1), got {test_share}")
        self.quantile = quantile
        self.objective = objective
        self._rings_type: type[Rings] | type[MeanRings] = MeanRings if objective == c.OBJECTIVE_MEAN else Rings
        self._rng = rng if rng is not None else random.Random(0)
        self._clock = clock
        self._test_percent = round(test_share * 100)
        self._min_samples = min_samples
        self._epochs = epochs
        self._train: dict[str, deque[TrainingEntry]] = {s: deque(maxlen=train_capacity) for s in c.SIGNALS}
        self._test: dict[str, deque[TrainingEntry]] = {s: deque(maxlen=test_capacity) for s in c.SIGNALS}
        self._rings: dict[str, tuple[deque[float], ...]] = {
            s: tuple(deque(maxlen=RING_SIZE) for _ in self._rings_type._fields) for s in c.SIGNALS
        }
        self._models: dict[str, LinearQuantileRegressor] = {}
        self._last_modified: dict[str, float] = {}
        self._defaults: set[str] = set()  # signals whose model is still the default one
        if default_models:
            now = clock()
            for signal in c.SIGNALS:
                self._models[signal] = default_model(signal)
                self._last_modified[signal] = now
            self._defaults = set(c.SIGNALS)
        self._pending = 0
        self._generation = 0
        self._lock = threading.Lock()  # buffers, models, rings
        self._fitting = threading.Lock()  # one retrain at a time: the rng is used in call order

    @property
    def pending(self) -> int:
        """Entries added since the last :meth:`retrain` began (the training server retrains only when > 0)."""
        return self._pending

    @property
    def ready(self) -> bool:
        with self._lock:
            return len(self._models) == len(c.SIGNALS)

    @property
    def last_modified(self) -> dict[str, float]:
        """Seconds since the epoch of each existing model's last fit."""
        with self._lock:
            return dict(self._last_modified)

    def add(self, entries: Sequence[TrainingEntry]) -> None:
        """Buffers entries: each to the test set or to training, for TTFT and/or TPOT by its actuals."""
        with self._lock:
            for entry in entries:
                is_test = zlib.crc32(repr(astuple(entry)).encode()) % 100 < self._test_percent
                buffers = self._test if is_test else self._train
                for signal in c.SIGNALS:
                    if _target(entry, signal) > 0:
                        buffers[signal].append(entry)
                self._pending += 1

    def retrain(self) -> bool:
        """Refits every signal with at least ``min_samples`` training entries; True if both models now exist."""
        with self._fitting:
            with self._lock:
                data = {s: (list(self._train[s]), list(self._test[s])) for s in c.SIGNALS}
                previous = dict(self._models)
                self._pending = 0
            fitted: dict[str, tuple[LinearQuantileRegressor, tuple[float, ...] | None]] = {}
            for signal in c.SIGNALS:
                train, test = data[signal]
                if len(train) < self._min_samples:
                    continue
                model = _fit(
                    signal,
                    train,
                    None if signal in self._defaults else previous.get(signal),
                    quantile=self.quantile,
                    rng=self._rng,
                    epochs=self._epochs,
                    mean=self.objective == c.OBJECTIVE_MEAN,
                )
                evaluate = _evaluate_mean if self.objective == c.OBJECTIVE_MEAN else _evaluate
                fitted[signal] = (model, evaluate(model, test, self.quantile))
            now = self._clock()
            with self._lock:
                self._generation += bool(fitted)
                for signal, (model, evaluation) in fitted.items():
                    self._models[signal] = model
                    self._defaults.discard(signal)
                    self._last_modified[signal] = now
                    if evaluation is not None:
                        for ring, value in zip(self._rings[signal], evaluation, strict=True):
                            ring.append(value)
                return len(self._models) == len(c.SIGNALS)

    def snapshot(self) -> ModelSnapshot:
        """The current models, frozen: later fits do not change what a snapshot predicts."""
        with self._lock:
            return self._snapshot_unlocked()

    def predict(self, features: Features) -> Prediction | None:
        """The current models' prediction; None until both exist."""
        return self.snapshot().predict(features)

    def metrics(self) -> ModelMetrics:
        with self._lock:
            return ModelMetrics(
                self._snapshot_unlocked(),
                {s: self._rings_type(*(tuple(ring) for ring in self._rings[s])) for s in c.SIGNALS},
                {s: tuple(self._train[s]) for s in c.SIGNALS},
                {s: tuple(self._test[s]) for s in c.SIGNALS},
            )

    def _snapshot_unlocked(self) -> ModelSnapshot:
        models = self._models
        return ModelSnapshot(
            self.quantile,
            models.get(c.SIGNAL_TTFT),
            models.get(c.SIGNAL_TPOT),
            dict(self._last_modified),
            self._generation,
            self.objective,
        )


DEFAULT_PREDICTION_MS = 10.0
"""What a default model predicts: the real server's default is fitted to one sample whose target is 10 ms."""


def default_model(signal: str) -> LinearQuantileRegressor:
    """The model a signal has before its first fit, with ``default_models``: 10 ms whatever the request."""
    width = len(_NAMES[signal])
    return LinearQuantileRegressor(
        signal, (0.0,) * width, (1.0,) * width, DEFAULT_PREDICTION_MS, (0.0,) * width, steps=0
    )


def learning_rate(step: int) -> float:
    """Step size (in standard deviations of the target) of SGD step number ``step`` of a model's life."""
    return max(LR_MIN, LR_START / math.sqrt(1.0 + step / LR_DECAY_STEPS))


def _fit(
    signal: str,
    entries: Sequence[TrainingEntry],
    previous: LinearQuantileRegressor | None,
    *,
    quantile: float,
    rng: random.Random,
    epochs: int,
    mean: bool = False,
) -> LinearQuantileRegressor:
    """SGD on the pinball loss (the squared loss if ``mean``) over ``entries``, warm-started from ``previous``.

    See the module docstring.
    """
    rows = [_ROWS[signal](entry) for entry in entries]
    targets = [_target(entry, signal) for entry in entries]
    n, width = len(rows), len(rows[0])
    means = tuple(math.fsum(row[j] for row in rows) / n for j in range(width))
    scales = tuple(_std([row[j] for row in rows], means[j]) for j in range(width))
    target_mean = math.fsum(targets) / n
    spread = math.sqrt(math.fsum((t - target_mean) ** 2 for t in targets) / n)
    target_scale = spread or abs(target_mean) or 1.0  # constant targets: steps relative to their size
    if previous is None:
        start = target_mean if mean else sorted(targets)[min(n - 1, int(quantile * n))]
        intercept, weights, step = start, [0.0] * width, 0
    else:  # the same line in the new standardization: w' = w * s' / s, b' = b + sum(w * (m' - m) / s)
        intercept = previous.intercept + sum(
            w * (m1 - m0) / s0
            for w, m0, s0, m1 in zip(previous.weights, previous.means, previous.scales, means, strict=True)
        )
        weights = [w * s1 / s0 for w, s0, s1 in zip(previous.weights, previous.scales, scales, strict=True)]
        step = previous.steps
    standardized = [[(v - m) / s for v, m, s in zip(row, means, scales, strict=True)] for row in rows]
    order = list(range(n))
    sum_intercept, sum_weights = 0.0, [0.0] * width
    for epoch in range(epochs):
        rng.shuffle(order)
        averaging = epoch == epochs - 1
        for i in order:
            z = standardized[i]
            predicted = intercept + sum(w * v for w, v in zip(weights, z, strict=True))
            if mean:  # d squared loss / d prediction, in standard deviations of the targets, clipped
                gradient = min(max((predicted - targets[i]) / target_scale, -MEAN_ERROR_CLIP), MEAN_ERROR_CLIP)
            else:  # d pinball / d prediction: 1 - q when the actual is covered, -q when it is above
                gradient = (1.0 - quantile) if targets[i] <= predicted else -quantile
            delta = learning_rate(step) * target_scale * gradient
            intercept -= delta
            for j in range(width):
                weights[j] -= delta * z[j]
            step += 1
            if averaging:
                sum_intercept += intercept
                for j in range(width):
                    sum_weights[j] += weights[j]
    return LinearQuantileRegressor(signal, means, scales, sum_intercept / n, tuple(w / n for w in sum_weights), step)


def _evaluate(
    model: LinearQuantileRegressor, test: Sequence[TrainingEntry], quantile: float
) -> tuple[float, float, float] | None:
    """Mean pinball loss, coverage percent and violation rate percent on ``test``; None below 2 samples."""
    if len(test) < 2:
        return None
    losses: list[float] = []
    covered = 0
    for entry in test:
        actual, predicted = _target(entry, model.signal), model.predict_inputs(entry)
        error = actual - predicted
        losses.append(quantile * error if error >= 0 else (quantile - 1.0) * error)
        covered += actual <= predicted
    coverage = covered / len(test) * 100.0
    return math.fsum(losses) / len(test), coverage, (len(test) - covered) / len(test) * 100.0


def _evaluate_mean(
    model: LinearQuantileRegressor, test: Sequence[TrainingEntry], quantile: float
) -> tuple[float, float] | None:
    """Mean absolute error and root mean squared error (ms) on ``test``; None below 2 samples.

    ``quantile`` is unused: the signature is :func:`_evaluate`'s, so a retrain calls either.
    """
    del quantile
    if len(test) < 2:
        return None
    errors = [_target(entry, model.signal) - model.predict_inputs(entry) for entry in test]
    return math.fsum(abs(e) for e in errors) / len(errors), math.sqrt(math.fsum(e * e for e in errors) / len(errors))


def _std(values: Sequence[float], mean: float) -> float:
    """Population standard deviation; 1.0 for a constant column, so it standardizes to zeros, not NaN."""
    spread = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return spread if spread > 1e-12 * max(1.0, abs(mean)) else 1.0
