"""The demo's training server: the latency predictor's training API over the online quantile model.

It answers the routes of the latency predictor's ``training_server.py`` (gateway-api-inference-extension
``latencypredictor/``, the commit ``fixtures/predictor/`` was recorded from): ``POST /add_training_data_bulk``
buffers entries (202); ``/readyz`` is 503 ``{"detail": "Models are not ready."}`` until both models exist;
``/models/list`` and ``/model/{name}/info`` give each model's last fit as ``last_modified`` (the real server
gives the mtime of the model file), ``size_bytes`` the size of the model's coefficients as JSON, and the
scalers are reported absent because the standardization lives inside each model;
``/model/download/info`` has the real server's shape for its linear model type; ``/metrics`` is the
untyped training page in the real line formats. :mod:`sloscope.demo.predictor_servers` runs it.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, HTTPException, Response, status

from sloscope import conventions as c
from sloscope.demo.quantile_model import (
    MODEL_TYPE,
    PREFIX_BUCKETS,
    TPOT_FEATURES,
    TTFT_FEATURES,
    ModelMetrics,
    ModelSnapshot,
    OnlineQuantileModel,
    TrainingEntry,
    prefill_score_bucket,
)
from sloscope.predictor import api

__all__ = ["create_training_app", "training_metrics_page"]

_MODEL_NAMES = (c.SIGNAL_TTFT, c.SIGNAL_TPOT, "ttft_scaler", "tpot_scaler")
_TEXT = "text/plain; version=0.0.4"


def create_training_app(
    model: OnlineQuantileModel, clock: Callable[[], float] = time.time, *, announce_objective: bool = False
) -> FastAPI:
    """The training server's routes over ``model`` (retraining is the caller's: see :class:`PredictorFleet`).

    ``announce_objective``: the llm-d predictor's page, with its ``objective_type`` line.
    """
    app = FastAPI(title="sloscope demo: latency predictor training server")
    quantile = model.quantile

    @app.post("/add_training_data_bulk", status_code=status.HTTP_202_ACCEPTED)
    async def add_training_data_bulk(batch: api.BulkTrainingRequest) -> dict[str, str]:
        model.add([TrainingEntry(**entry.model_dump()) for entry in batch.entries])
        return {"message": f"Accepted {len(batch.entries)} training samples."}

    @app.get("/metrics")
    async def metrics() -> Response:
        page = training_metrics_page(model.metrics(), announce_objective=announce_objective)
        return Response(page, media_type=_TEXT)

    @app.get("/readyz")
    async def readiness_check() -> dict[str, str]:
        if not model.ready:
            raise HTTPException(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, detail="Models are not ready.")
        return {"status": "ready"}

    @app.get("/healthz")
    async def health_check() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    async def root() -> dict[str, Any]:
        return {
            "message": "Latency Predictor is running.",
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "description": f"Predicting {quantile:.0%} quantile for TTFT and TPOT latencies",
        }

    @app.get("/models/list")
    async def list_models() -> dict[str, Any]:
        files = _model_files(model.snapshot())
        return {
            "models": {name: _file_entry(files.get(name)) for name in _MODEL_NAMES},
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "server_time": _iso(clock()),
            "evaluation_metrics": {
                "quantile_loss": "Lower is better",
                "coverage_percent": f"Target: {quantile * 100:.1f}%",
                "violation_rate_percent": f"Target: {(1 - quantile) * 100:.1f}%",
            },
        }

    @app.get("/model/download/info")
    async def model_download_info() -> dict[str, Any]:
        snapshot = model.snapshot()
        ttft, tpot = snapshot.ttft is not None, snapshot.tpot is not None
        return {
            "model_type": MODEL_TYPE,
            "quantile": quantile,
            "available_endpoints": {"coefficients": "/metrics"},
            "coefficients_info": {
                "ttft_coefficients_available": ttft,
                "tpot_coefficients_available": tpot,
                "description": "Descaled coefficients available in Prometheus metrics endpoint",
            },
            "model_status": {
                "ttft_model_ready": ttft,
                "tpot_model_ready": tpot,
                "ttft_coefficients_ready": ttft,
                "tpot_coefficients_ready": tpot,
            },
            "evaluation_info": {
                "quantile_loss": "Pinball loss for quantile regression evaluation",
                "coverage_percent": f"Percentage of actual values below predicted {quantile:.0%} quantile "
                f"(target: {quantile * 100:.1f}%)",
                "violation_rate_percent": f"Percentage of actual values above predicted {quantile:.0%} quantile "
                f"(target: {(1 - quantile) * 100:.1f}%)",
            },
        }

    @app.get("/model/{model_name}/info")
    async def model_info(model_name: str) -> dict[str, Any]:
        if model_name not in _MODEL_NAMES:
            raise HTTPException(status_code=404, detail=f"Unknown model: {model_name}")
        file = _model_files(model.snapshot()).get(model_name)
        if file is None:
            raise HTTPException(status_code=404, detail=f"Model {model_name} not found")
        return {
            "model_name": model_name,
            "path": f"memory:{model_name}",
            **_file_entry(file),
            "model_type": MODEL_TYPE,
            "quantile": quantile if model_name in c.SIGNALS else None,
        }

    return app


def _model_files(snapshot: ModelSnapshot) -> dict[str, tuple[int, float]]:
    """(size in bytes of the coefficients as JSON, last fit) of each existing model."""
    files: dict[str, tuple[int, float]] = {}
    for signal, regressor in ((c.SIGNAL_TTFT, snapshot.ttft), (c.SIGNAL_TPOT, snapshot.tpot)):
        if regressor is not None:
            files[signal] = (len(json.dumps(regressor.coefficients())), snapshot.last_modified[signal])
    return files


def _file_entry(file: tuple[int, float] | None) -> dict[str, Any]:
    if file is None:
        return {"exists": False, "size_bytes": 0, "last_modified": None}
    return {"exists": True, "size_bytes": file[0], "last_modified": _iso(file[1])}


def _iso(seconds: float) -> str:
    """ISO 8601 with the UTC offset, as the real server writes ``last_modified`` and ``server_time``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


# --- the training server's /metrics page ---

_QUEUE_BUCKETS = 5  # waiting requests: 0, 1-2, 3-5, 6-10, 11+
_CACHE_BUCKETS = 20  # KV-cache utilization in steps of 5%


def training_metrics_page(metrics: ModelMetrics, *, announce_objective: bool = False) -> str:
    """The training server's ``/metrics``: the real page's series and line formats, no HELP or TYPE lines.

    With ``announce_objective``, as the llm-d predictor's page (``training/training_server.py`` at
    llm-d-latency-predictor b5d19f17; ``fixtures/predictor/llm-d/{quantile,mean}/training-server-metrics.txt``):
    ``objective_type{type="..."} 1`` after ``model_type``, and for the mean objective the MAE and RMSE rings
    (``ttft_mae``, ``tpot_mae``, ``ttft_rmse``, ``tpot_rmse``) instead of the quantile loss, coverage and
    violation rings and the two targets. The late-2025 page has no ``objective_type`` line.

    As the real server's linear model type: ``<signal>_intercept{}`` and ``<signal>_coef{feature=...}`` in
    raw feature units (placeholders 0.0 before a model exists); sample counts of the training buffer by
    (queue, cache, prefix) bucket; prefix-score statistics of the TTFT buffer; the rings of the last five
    evaluations with ``idx`` 0 the oldest; the targets.
    """
    snapshot, q = metrics.snapshot, metrics.snapshot.quantile
    lines = [f'model_type{{type="{MODEL_TYPE}"}} 1']
    if announce_objective:
        lines.append(f'objective_type{{type="{snapshot.objective}"}} 1')
    lines.append(f"model_quantile{{}} {q}")
    for signal, regressor, names in (
        (c.SIGNAL_TTFT, snapshot.ttft, TTFT_FEATURES),
        (c.SIGNAL_TPOT, snapshot.tpot, TPOT_FEATURES),
    ):
        if regressor is None:
            lines.append(f"{signal}_intercept{{}} 0.0")
            lines.extend(f'{signal}_coef{{feature="{name}"}} 0.0' for name in names)
        else:
            coefficients = regressor.coefficients()
            lines.append(f"{signal}_intercept{{}} {coefficients['intercept']:.6f}")
            lines.extend(f'{signal}_coef{{feature="{name}"}} {coefficients[name]:.6f}' for name in names)
    counts = {signal: _bucket_counts(metrics.training[signal]) for signal in c.SIGNALS}
    for signal in c.SIGNALS:
        lines.extend(
            f'training_samples_count{{model="{signal}",queue_bucket="{qb}",cache_bucket="{cb}",prefix_bucket="{pb}"}} '
            f"{counts[signal].get((qb, cb, pb), 0)}"
            for qb in range(_QUEUE_BUCKETS)
            for cb in range(_CACHE_BUCKETS)
            for pb in range(PREFIX_BUCKETS)
        )
    for axis, size, label in (
        (0, _QUEUE_BUCKETS, "queue"),
        (1, _CACHE_BUCKETS, "cache"),
        (2, PREFIX_BUCKETS, "prefix"),
    ):
        for bucket in range(size):
            extra = f',range="{bucket / size:.2f}-{(bucket + 1) / size:.2f}"' if label == "prefix" else ""
            for signal in c.SIGNALS:
                total = sum(n for key, n in counts[signal].items() if key[axis] == bucket)
                lines.append(
                    f'training_samples_{label}_total{{model="{signal}",{label}_bucket="{bucket}"{extra}}} {total}'
                )
    lines.extend(_prefix_lines(metrics.training[c.SIGNAL_TTFT]))
    # quantile_loss, coverage_percent, violation_rate_percent; or mae, rmse
    for position, family in enumerate(type(metrics.rings[c.SIGNAL_TTFT])._fields):
        for signal in c.SIGNALS:
            ring = metrics.rings[signal][position]
            lines.extend(f'{signal}_{family}{{idx="{i}"}} {value:.6f}' for i, value in enumerate(ring))
    if snapshot.objective == c.OBJECTIVE_QUANTILE:
        lines.append(f"target_coverage_percent{{}} {q * 100:.1f}")
        lines.append(f"target_violation_rate_percent{{}} {(1 - q) * 100:.1f}")
    return "\n".join(lines) + "\n"


def _bucket_counts(entries: Sequence[TrainingEntry]) -> dict[tuple[int, int, int], int]:
    """Entries per (queue, cache, prefix) bucket, bucketed as the real server files its samples."""
    counts: dict[tuple[int, int, int], int] = {}
    for entry in entries:
        waiting = entry.num_request_waiting
        queue = 0 if waiting == 0 else 1 if waiting <= 2 else 2 if waiting <= 5 else 3 if waiting <= 10 else 4
        cache = min(int(min(max(entry.kv_cache_percentage, 0.0), 1.0) * _CACHE_BUCKETS), _CACHE_BUCKETS - 1)
        key = (queue, cache, prefill_score_bucket(entry.prefix_cache_score))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _prefix_lines(entries: Sequence[TrainingEntry]) -> list[str]:
    """Prefix-score statistics and TTFT by prefix quarter (the last quarter includes 1.0), if any entries."""
    if not entries:
        return []
    scores = [e.prefix_cache_score for e in entries]
    lines = [
        f"prefix_score_mean{{}} {statistics.fmean(scores):.4f}",
        f"prefix_score_std{{}} {statistics.pstdev(scores):.4f}",
        f"prefix_score_min{{}} {min(scores):.4f}",
        f"prefix_score_max{{}} {max(scores):.4f}",
    ]
    for bucket in range(PREFIX_BUCKETS):
        low, high = bucket / PREFIX_BUCKETS, (bucket + 1) / PREFIX_BUCKETS
        last = bucket == PREFIX_BUCKETS - 1
        ttfts = [
            e.actual_ttft_ms
            for e in entries
            if low <= e.prefix_cache_score < high or (last and e.prefix_cache_score == high)
        ]
        if ttfts:
            labels = f'prefix_bucket="{bucket}",range="{low:.2f}-{high:.2f}"'
            lines.append(f"avg_ttft_by_prefix{{{labels}}} {statistics.fmean(ttfts):.2f}")
            lines.append(f"median_ttft_by_prefix{{{labels}}} {statistics.median(ttfts):.2f}")
    return lines
