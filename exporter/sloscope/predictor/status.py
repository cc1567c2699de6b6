"""Reading the predictor servers' answers: ``/status``, ``/models/list``, ``/predict`` and the training page.

Pure functions over parsed JSON documents (and the training server's ``/metrics`` text), used by the
health poller (:mod:`sloscope.predictor.health`). Each raises ``ValueError`` (:class:`ShapeError`)
for a 2xx body that is not the documented shape, so the poller can count it as ``parse_error``.
Shapes as in ``prediction_server.py`` and ``training_server.py`` of the latency predictor, recorded in
``fixtures/predictor/`` (and ``fixtures/predictor/llm-d/`` for the llm-d predictor at b5d19f1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sloscope import conventions as c
from sloscope.predictor.features import is_json_number, out_of_range, parse_objective
from sloscope.predictor.training_page import newest_of_ring, read_training_page

__all__ = [
    "ShapeError",
    "Status",
    "newest_coverage",
    "parse_last_modified",
    "parse_status",
    "parse_training_metrics",
    "parse_training_samples",
    "probe_answer",
    "read_status",
]


@dataclass(frozen=True)
class Status:
    """A prediction server's ``/status``: readiness, quantile, objective and whether it states one at all."""

    is_ready: bool
    quantile: float | None = None
    objective: str = c.OBJECTIVE_QUANTILE
    states_objective: bool = False  # objective_type present: the llm-d (or GIE v1.5.0) predictor


class ShapeError(ValueError):
    """A 2xx body that is not what the endpoint documents."""


def probe_answer(document: Any) -> tuple[float, float, str]:
    """(ttft_ms, tpot_ms, objective) of a ``POST /predict`` answer; ``ValueError`` for another shape or values
    out of range (:func:`sloscope.predictor.features.out_of_range`)."""
    if not isinstance(document, dict):
        raise ShapeError("not an object")
    ttft, tpot = document.get("ttft_ms"), document.get("tpot_ms")
    if not (is_json_number(ttft) and is_json_number(tpot)):
        raise ShapeError("no numeric ttft_ms and tpot_ms")
    quantile = document.get("quantile")
    reason = out_of_range(float(ttft), float(tpot), float(quantile) if is_json_number(quantile) else None)
    if reason is not None:
        raise ShapeError(reason)
    return float(ttft), float(tpot), parse_objective(document.get("objective_type"))


def parse_last_modified(document: Any) -> dict[str, float]:
    """Seconds since the epoch of each signal's model write, from a ``/models/list`` body.

    A model that does not exist (``last_modified: null``) is left out. A timestamp without an offset
    (the real server always writes one) is read as UTC. Raises ``ValueError`` for another shape.
    """
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        raise ShapeError("no 'models' object")
    out: dict[str, float] = {}
    for signal in c.SIGNALS:
        entry = models.get(signal)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise ShapeError(f"models.{signal} is not an object")
        stamp = entry.get("last_modified")
        if stamp is None:
            continue
        if not isinstance(stamp, str):
            raise ShapeError(f"models.{signal}.last_modified is not a string")
        try:
            moment = datetime.fromisoformat(stamp)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            out[signal] = moment.timestamp()
        except (ValueError, OverflowError) as exc:
            raise ShapeError(f"models.{signal}.last_modified: {exc}") from exc
    return out


def read_status(document: Any) -> Status:
    """A prediction server's ``/status`` body; ``ValueError`` if it has no boolean ``is_ready`` or a field of
    another type.

    ``objective_type`` absent (the late-2025 predictor) is quantile. The llm-d predictor's ``models_exist`` and
    ``ensemble_active`` are not read: whether the gated ensemble exists says nothing of training
    (:mod:`sloscope.predictor.reset`).
    """
    if not isinstance(document, dict) or not isinstance(document.get("is_ready"), bool):
        raise ShapeError("no boolean 'is_ready'")
    quantile = document.get("quantile")
    if quantile is not None and not is_json_number(quantile):
        raise ShapeError("'quantile' is not a number")
    if quantile is not None and (reason := out_of_range(0.0, 0.0, float(quantile))) is not None:
        raise ShapeError(reason)  # 90 for 0.9 would be published as sloscope_predictor_quantile
    return Status(
        document["is_ready"],
        None if quantile is None else float(quantile),
        parse_objective(document.get("objective_type")),
        "objective_type" in document,
    )


def parse_status(document: Any) -> tuple[bool, float | None]:
    """``is_ready`` and ``quantile`` of a prediction server's ``/status`` body; ``ValueError`` if it is none."""
    status = read_status(document)
    return status.is_ready, status.quantile


def parse_training_metrics(text: str, openmetrics: bool = False) -> tuple[float | None, dict[str, float]]:
    """``model_quantile{}`` and the newest coverage ratio per signal of a training server's ``/metrics``.

    Raises ``ValueError`` (an ``ExpositionError``) for a malformed line of those families.
    """
    page = read_training_page(text, openmetrics)
    return page.quantile, dict(page.coverage)


def parse_training_samples(text: str, openmetrics: bool = False) -> dict[str, float]:
    """Training samples held per signal: the sum of ``training_samples_count{model=...}`` over its buckets.

    The training server keeps samples in (queue, cache, prefix) buckets per model and publishes one line per
    bucket; their sum is what the next fit learns from. Signals with no line are left out.
    """
    return dict(read_training_page(text, openmetrics).samples)


def newest_coverage(samples: Iterable[tuple[Mapping[str, str], float]]) -> float | None:
    """The value at the highest integer ``idx`` among ``(labels, value)`` pairs (the newest evaluation).

    Raises ``ValueError`` for an ``idx`` that is not a non-negative integer.
    """
    return newest_of_ring(samples)
