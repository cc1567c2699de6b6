"""The latency predictor's HTTP bodies as pydantic models: the fields and constraints of its real servers.

From ``prediction_server.py`` and ``training_server.py`` of the latency predictor (recorded in
``fixtures/predictor/``). Validating a request with these gives the same 422 body the real servers give;
the demo's predictor and the test stand-ins both serve them, so their API cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

__all__ = [
    "BulkPredictionError",
    "BulkPredictionRequest",
    "BulkPredictionResponse",
    "BulkPredictionResponseWithErrors",
    "BulkTrainingRequest",
    "LlmdBulkPredictionRequest",
    "LlmdPredictionRequest",
    "PredictionRequest",
    "PredictionResponse",
    "StatusResponse",
    "TrainingEntryBody",
]


class TrainingEntryBody(BaseModel):
    kv_cache_percentage: float = Field(..., ge=0.0, le=1.0)
    input_token_length: int = Field(..., ge=0)
    num_request_waiting: int = Field(..., ge=0)
    num_request_running: int = Field(..., ge=0)
    actual_ttft_ms: float = Field(..., ge=0.0)
    actual_tpot_ms: float = Field(..., ge=0.0)
    num_tokens_generated: int = Field(..., ge=0)
    prefix_cache_score: float = Field(..., ge=0.0, le=1.0)
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))


class BulkTrainingRequest(BaseModel):
    entries: list[TrainingEntryBody]


class PredictionRequest(BaseModel):
    kv_cache_percentage: float = Field(..., ge=0.0, le=1.0)
    input_token_length: int = Field(..., ge=0)
    num_request_waiting: int = Field(..., ge=0)
    num_request_running: int = Field(..., ge=0)
    num_tokens_generated: int = Field(..., ge=0)
    prefix_cache_score: float = Field(..., ge=0.0, le=1.0)


class PredictionResponse(BaseModel):
    ttft_ms: float
    tpot_ms: float
    predicted_at: datetime
    model_type: str
    quantile: float
    last_model_load: datetime | None


class StatusResponse(BaseModel):
    is_ready: bool
    model_type: str
    quantile: float
    last_model_load: datetime | None
    training_server_url: str
    models_exist: dict[str, bool]


class BulkPredictionRequest(BaseModel):
    requests: list[PredictionRequest] = Field(..., min_length=1, max_length=10000)


class BulkPredictionResponse(BaseModel):
    predictions: list[PredictionResponse]
    total_requests: int
    successful_predictions: int
    failed_predictions: int
    processing_time_ms: float


class BulkPredictionError(BaseModel):
    index: int
    error: str
    request: PredictionRequest


class BulkPredictionResponseWithErrors(BaseModel):
    predictions: list[PredictionResponse | None]
    errors: list[BulkPredictionError]
    total_requests: int
    successful_predictions: int
    failed_predictions: int
    processing_time_ms: float


class LlmdPredictionRequest(PredictionRequest):
    """The llm-d latency predictor's request object: the six features and five optional ones.

    ``common/types.py`` / ``prediction/prediction_server.py`` at llm-d-latency-predictor b5d19f17 (and
    ``fixtures/predictor/llm-d/openapi-prediction-server.trimmed.json``). A late-2025 server ignores
    the extra fields (pydantic's default), so a request of this shape suits both.
    """

    pod_type: str | None = Field(default="", description="Pod type: 'prefill', 'decode', or '' for monolithic")
    prefill_tokens_in_flight: int = Field(default=0, ge=0)
    decode_tokens_in_flight: int = Field(default=0, ge=0)
    encoder_matched_size: int = Field(default=0, ge=0, description="Encoder cache matched size (multimodal)")
    encoder_input_size: int = Field(default=0, ge=0, description="Encoder input size (multimodal)")


class LlmdBulkPredictionRequest(BaseModel):
    requests: list[LlmdPredictionRequest] = Field(..., min_length=1, max_length=10000)
