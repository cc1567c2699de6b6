"""What sloscope reads from a training server's ``/metrics`` page. Pure functions.

The page is untyped text with no HELP/TYPE lines (``get_metrics`` of ``training/training_server.py`` of
the llm-d latency predictor, b5d19f1, lines 1513-1760; the late-2025 predictor writes the same lines
without ``objective_type`` and the ensemble lines). The lines read:

- ``objective_type{type="mean"} 1`` (:1523): what the models predict; absent (late 2025) means quantile;
- ``model_quantile{}`` (:1524): the quantile, still written in mean mode, where it means nothing;
- not ``ensemble_active{}`` / ``ensemble_mode{}`` (:1525-1526): whether the gated ensemble exists says nothing of
  training (:mod:`sloscope.predictor.reset`);
- ``training_samples_count{model,queue_bucket,cache_bucket,prefix_bucket}`` (:1628-1640): samples held;
- quantile mode: ``ttft_coverage_percent{idx}`` / ``tpot_coverage_percent{idx}`` (:1746-1749);
- mean mode: ``ttft_mae{idx}``, ``tpot_mae{idx}``, ``ttft_rmse{idx}``, ``tpot_rmse{idx}`` (:1727-1737), in
  milliseconds (computed on ``actual_ttft_ms`` / ``actual_tpot_ms``, :774-777).

Every ``{idx}`` family is a ring: the server keeps its last five evaluations in a ``deque(maxlen=5)``
(:263-275) and writes it with ``enumerate``, so the **highest idx present is the newest evaluation**.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sloscope import conventions as c
from sloscope.predictor.features import parse_objective
from sloscope.receivers.exposition import ExpositionParser

__all__ = ["TrainingPage", "newest_of_ring", "read_training_page"]

_QUANTILE = "model_quantile"
_OBJECTIVE = "objective_type"
_SAMPLES = "training_samples_count"
_COVERAGE = {c.SIGNAL_TTFT: "ttft_coverage_percent", c.SIGNAL_TPOT: "tpot_coverage_percent"}
_MAE = {c.SIGNAL_TTFT: "ttft_mae", c.SIGNAL_TPOT: "tpot_mae"}
_RMSE = {c.SIGNAL_TTFT: "ttft_rmse", c.SIGNAL_TPOT: "tpot_rmse"}
_PARSER = ExpositionParser(
    [
        _QUANTILE,
        _OBJECTIVE,
        _SAMPLES,
        *_COVERAGE.values(),
        *_MAE.values(),
        *_RMSE.values(),
    ]
)
_INDEX = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class TrainingPage:
    """The values of one ``/metrics`` page; a missing line leaves its field None or its signal out."""

    objective: str = c.OBJECTIVE_QUANTILE
    quantile: float | None = None
    coverage: Mapping[str, float] = field(default_factory=dict)  # signal -> ratio 0..1, newest evaluation
    mae_seconds: Mapping[str, float] = field(default_factory=dict)  # signal -> newest evaluation
    rmse_seconds: Mapping[str, float] = field(default_factory=dict)
    samples: Mapping[str, float] = field(default_factory=dict)  # signal -> sum of its bucket counts


def read_training_page(text: str, openmetrics: bool = False) -> TrainingPage:
    """The page's values. Raises ``ValueError`` for a malformed line of a family read, an idx that is not a
    non-negative integer, or an unknown ``objective_type``."""
    samples = _PARSER.parse(text, openmetrics=openmetrics)
    by_name: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append((sample.labels, sample.value))
    objectives = [labels.get("type") for labels, value in by_name.get(_OBJECTIVE, []) if value == 1]
    return TrainingPage(
        objective=parse_objective(objectives[0] if objectives else None),
        quantile=_first(by_name.get(_QUANTILE)),
        coverage=_rings(by_name, _COVERAGE, 1 / 100.0),
        mae_seconds=_rings(by_name, _MAE, 1 / 1000.0),
        rmse_seconds=_rings(by_name, _RMSE, 1 / 1000.0),
        samples=_samples(by_name.get(_SAMPLES, [])),
    )


def newest_of_ring(samples: Iterable[tuple[Mapping[str, str], float]]) -> float | None:
    """The value at the highest integer ``idx`` among ``(labels, value)`` pairs (the newest evaluation).

    Raises ``ValueError`` for an ``idx`` that is not a non-negative integer.
    """
    best: tuple[int, float] | None = None
    for labels, value in samples:
        raw = labels.get("idx", "")
        if not _INDEX.fullmatch(raw):
            raise ValueError(f"ring sample with idx={raw!r}")
        index = int(raw)
        if best is None or index > best[0]:
            best = (index, value)
    return None if best is None else best[1]


def _rings(
    by_name: Mapping[str, list[tuple[Mapping[str, str], float]]], families: Mapping[str, str], scale: float
) -> dict[str, float]:
    out: dict[str, float] = {}
    for signal, family in families.items():
        newest = newest_of_ring(by_name.get(family, []))
        if newest is not None:
            out[signal] = newest * scale
    return out


def _samples(lines: Iterable[tuple[Mapping[str, str], float]]) -> dict[str, float]:
    """Samples held per signal: the sum of ``training_samples_count{model=...}`` over its buckets."""
    totals: dict[str, float] = {}
    for labels, value in lines:
        model = labels.get("model")
        if model in c.SIGNALS and value >= 0:
            totals[model] = totals.get(model, 0.0) + value
    return totals


def _first(lines: list[tuple[Mapping[str, str], float]] | None) -> float | None:
    return lines[0][1] if lines else None
