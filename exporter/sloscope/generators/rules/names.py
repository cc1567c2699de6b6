"""Names the generated rules carry: the rule groups and every alert."""

from __future__ import annotations

from sloscope import conventions as c

GROUP_SLO_RECORDING = "sloscope-slo-recording"
GROUP_SLO_BUDGET = "sloscope-slo-budget"
GROUP_SLO_ALERTS = "sloscope-slo-alerts"
GROUP_PREDICTOR_ALERTS = "sloscope-predictor-alerts"
GROUP_PIPELINE_ALERTS = "sloscope-pipeline-alerts"
GROUP_UPSTREAM_ALERTS = "sloscope-upstream-alerts"

# Alert names: public (runbooks, silences and routes refer to them).
ERROR_BUDGET_BURN_PAGE = "SloscopeErrorBudgetBurnPage"
ERROR_BUDGET_BURN_TICKET = "SloscopeErrorBudgetBurnTicket"
PREDICTOR_CALIBRATION_DRIFT = "SloscopePredictorCalibrationDrift"
PREDICTOR_BIASED = "SloscopePredictorBiased"
PREDICTOR_UNTRAINED = "SloscopePredictorUntrained"
PREDICTOR_DOWN = "SloscopePredictorDown"
PREDICTOR_MODEL_STALE = "SloscopePredictorModelStale"
POOL_HEADROOM_EXHAUSTED = "SloscopePoolHeadroomExhausted"
SHADOW_PREDICTIONS_FAILING = "SloscopeShadowPredictionsFailing"
NO_SPANS = "SloscopeNoSpans"
NOT_SCRAPED = "SloscopeNotScraped"
QUEUE_NEARLY_FULL = "SloscopeQueueNearlyFull"
REFUSING_SPANS = "SloscopeRefusingSpans"
SPANS_DROPPED = "SloscopeSpansDropped"
EVICTING_TRACES = "SloscopeEvictingTraces"
JOIN_RATIO_LOW = "SloscopeJoinRatioLow"
INVALID_VALUES = "SloscopeInvalidValues"
LABEL_VALUES_FOLDED = "SloscopeLabelValuesFolded"
SERIES_FOLDED = "SloscopeSeriesFolded"
SCRAPES_FAILING = "SloscopeScrapesFailing"
RECORDS_LOST = "SloscopeRecordsLost"
ELIGIBLE_TRAFFIC_VANISHED = "SloscopeEligibleTrafficVanished"
FAILURES_WITHOUT_POOL = "SloscopeFailuresWithoutPool"
ABORTS_RISING = "SloscopeAbortsRising"
# One alert per upstream-contract check (the check label of sloscope_upstream_contract), in check order.
CONTRACT_ALERTS = {
    c.CHECK_PREDICTOR_OBJECTIVE: "SloscopePredictorObjectiveUnstated",
    c.CHECK_PREDICTOR_ANSWERS: "SloscopePredictorAnswersUnreadable",
    c.CHECK_STREAMING_MODE: "SloscopeEPPStreamingModeMismatch",
    c.CHECK_EPP_GENERATION: "SloscopeEPPGenerationMismatch",
    c.CHECK_EPP_FAMILIES: "SloscopeEPPFamiliesMissing",
    c.CHECK_SPAN_REQUEST_ID: "SloscopeSpansWithoutRequestId",
    c.CHECK_SPAN_TOKEN_COUNTS: "SloscopeSpansWithoutTokenCounts",
    c.CHECK_GATEWAY_SLO_HEADERS: "SloscopeSLOHeadersVanished",
}

ALERT_NAMES = (
    ERROR_BUDGET_BURN_PAGE,
    ERROR_BUDGET_BURN_TICKET,
    PREDICTOR_CALIBRATION_DRIFT,
    PREDICTOR_BIASED,
    PREDICTOR_UNTRAINED,
    PREDICTOR_DOWN,
    PREDICTOR_MODEL_STALE,
    POOL_HEADROOM_EXHAUSTED,
    SHADOW_PREDICTIONS_FAILING,
    NO_SPANS,
    NOT_SCRAPED,
    QUEUE_NEARLY_FULL,
    REFUSING_SPANS,
    SPANS_DROPPED,
    EVICTING_TRACES,
    JOIN_RATIO_LOW,
    INVALID_VALUES,
    LABEL_VALUES_FOLDED,
    SERIES_FOLDED,
    SCRAPES_FAILING,
    RECORDS_LOST,
    ELIGIBLE_TRAFFIC_VANISHED,
    FAILURES_WITHOUT_POOL,
    ABORTS_RISING,
    *(CONTRACT_ALERTS[check] for check in c.CONTRACT_CHECKS),
)
"""Every alert the generated rules can contain (the SLO alerts only when the spec lists a class)."""
