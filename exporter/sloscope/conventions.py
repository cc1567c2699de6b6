"""Every series name and label name sloscope publishes, defined once.

The exporter, the docs test and (later) the dashboard and rule generators import these
definitions, so a renamed series cannot silently break a panel or an alert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NAMESPACE = "sloscope"

# Label names.
MODEL = "model"
POOL = "pool"
POD = "pod"
SLO_CLASS = "slo_class"
ROUTING = "routing"
SLO = "slo"
SIGNAL = "signal"
SOURCE = "source"
REASON = "reason"
OUTCOME = "outcome"
TRANSPORT = "transport"
FIELD = "field"
LABEL = "label"
RESULT = "result"
KIND = "kind"
SERVER = "server"
ROLE = "role"
PURPOSE = "purpose"
TARGET_MODEL = "target_model"
TYPE = "type"
PROTOCOL = "protocol"  # a model server's protocol (the EPP's engine type): vllm, sglang, ...
OBJECTIVE = "objective"
BASIS = "basis"  # what a value in force rests on: page, setting or default
CHECK = "check"  # an upstream contract sloscope's numbers rest on (CONTRACT_CHECKS)
STAGE = "stage"  # a flow-control saturation signal's pipeline stage: prefill, decode, effective (the gating one)
PRIORITY = "priority"  # a flow-control priority band, as the EPP's configuration names it

# Label values with a fixed meaning.
OTHER = "__other__"  # label values beyond the per-label cap fold into this one
UNKNOWN = "unknown"  # a label whose value no span carried
SLO_TTFT = "ttft"
SLO_TPOT = "tpot"
SLO_GOODPUT = "goodput"
SLOS = (SLO_TTFT, SLO_TPOT, SLO_GOODPUT)
ROUTING_PREDICTED = "predicted"
ROUTING_DEFAULT = "default"
ROUTING_UNKNOWN = "unknown"
ROUTING_NONE = "none"  # a failed request refused before scheduling: it was never routed
ROUTINGS = (ROUTING_PREDICTED, ROUTING_DEFAULT, ROUTING_UNKNOWN, ROUTING_NONE)
# Why a request failed (reason label of REQUESTS_FAILED); docs/metrics.md says how each is recognised.
FAILURE_ERROR = "error"  # an error status or HTTP >= 500 (the model server failed, no endpoint, internal)
FAILURE_SHED = "shed"  # refused for load: the EPP's admission (latency-slo-admitter) or saturation, HTTP 429
FAILURE_TIMEOUT = "timeout"  # timed out in the EPP's queue, deadline exceeded, HTTP 504 / 408
FAILURE_ABORTED = "aborted"  # the client went away, or the request reached no model server and nothing says why
FAILURE_INVALID = "invalid"  # a client error (HTTP 4xx, the EPP's BadRequest): counted, but no SLO's bad event
FAILURE_REASONS = (FAILURE_ERROR, FAILURE_SHED, FAILURE_TIMEOUT, FAILURE_ABORTED, FAILURE_INVALID)
# Where a request's TTFT came from (ttft_source in the record store and the evaluation spans).
TTFT_GATEWAY = "gateway"  # a span attribute measured in front of the model server
TTFT_GATEWAY_ARRIVAL = "gateway_arrival"  # the gateway span's start to the model server's first token
TTFT_PD_GATEWAY = "pd_gateway"  # P/D: the gateway span's start to the decode pod's first token
TTFT_PD_SIDECAR = "pd_sidecar"  # P/D without a gateway span: the routing sidecar's span start to the first token
TTFT_MODEL_SERVER = "model_server"  # the model server's own gen_ai.latency.time_to_first_token, from its arrival
TTFT_COORDINATOR = "coordinator"  # llm-d's coordinator: the call's first leg's gateway start to the decode leg's token
TTFT_SOURCES = (
    TTFT_GATEWAY,
    TTFT_GATEWAY_ARRIVAL,
    TTFT_PD_GATEWAY,
    TTFT_PD_SIDECAR,
    TTFT_MODEL_SERVER,
    TTFT_COORDINATOR,
)
# llm-d-router's coordinator runs one EPP call per phase, each scheduled by the profile its EPP-Profile header names
# (pkg/coordinator/gateway/paths.go, header-profile-handler): the phase label of CALL_LEGS.
PHASE_ENCODE = "encode"
PHASE_PREFILL = "prefill"
PHASE_DECODE = "decode"
PHASES = (PHASE_ENCODE, PHASE_PREFILL, PHASE_DECODE)
EARLY_PHASES = (PHASE_ENCODE, PHASE_PREFILL)  # legs that are never the call's answer
# What became of a coordinator leg (result label of CALL_LEGS).
LEG_JOINED = "joined"  # part of its call, which counts once
LEG_WITHOUT_CALL = "without_call"  # the call's final leg never came: a leg of a call sloscope did not see
LEG_RESULTS = (LEG_JOINED, LEG_WITHOUT_CALL)
SIGNAL_TTFT = "ttft"
SIGNAL_TPOT = "tpot"
# The engines' own latency histograms also know these signals.
SIGNAL_QUEUE = "queue"  # time waiting in the engine's queue
SIGNAL_ITL = "itl"  # inter-token latency, one observation per token
SIGNAL_E2E = "e2e"  # end-to-end request latency in the engine
SIGNALS = (SIGNAL_TTFT, SIGNAL_TPOT)
SOURCE_SPAN = "span"  # the prediction the EPP made, carried on a span
SOURCE_SHADOW = "shadow"  # asked of the prediction server by sloscope afterwards
SOURCES = (SOURCE_SPAN, SOURCE_SHADOW)
SOURCE_NONE = "none"  # no prediction: in the record store and the exported spans only, never a series label
ROLE_TRAINING = "training"
ROLE_PREDICTION = "prediction"
# What the latency predictor predicts (its LATENCY_OBJECTIVE_TYPE; values of the objective label).
OBJECTIVE_QUANTILE = "quantile"  # the quantile of the latency (p90 by default): judged by coverage and pinball loss
OBJECTIVE_MEAN = "mean"  # the mean latency: judged by bias, MAE and RMSE
OBJECTIVES = (OBJECTIVE_QUANTILE, OBJECTIVE_MEAN)

MetricType = Literal["counter", "gauge", "histogram", "info"]


@dataclass(frozen=True)
class MetricDef:
    """One published family. ``name`` excludes the ``_total`` suffix of counters, as prometheus_client wants."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str

    @property
    def exposed_name(self) -> str:
        """The name a scraper sees (counters carry ``_total``, info families ``_info``)."""
        if self.type == "counter":
            return f"{self.name}_total"
        if self.type == "info":
            return f"{self.name}_info"
        return self.name


def _m(name: str, type_: MetricType, labels: tuple[str, ...], help_: str) -> MetricDef:
    return MetricDef(f"{NAMESPACE}_{name}", type_, labels, help_)


_REQ = (MODEL, POOL, SLO_CLASS, ROUTING)

# Request series: each evaluated (joined) request counted with its adjusted count (1 / the probability its trace
# was sampled with: 1 when every trace is kept); the sampled_ twins count each once.
REQUESTS = _m("requests", "counter", _REQ, "Evaluated (joined) requests, each with its adjusted count.")
SLO_REQUESTS = _m(
    "slo_requests", "counter", (*_REQ, SLO), "Requests eligible for an SLO (ttft, tpot or goodput), adjusted counts."
)
SLO_VIOLATIONS = _m(
    "slo_violations", "counter", (*_REQ, SLO), "Eligible requests that missed the SLO, adjusted counts."
)
SAMPLED_REQUESTS = _m("sampled_requests", "counter", _REQ, "Evaluated requests as sampled: each once.")
SAMPLED_SLO_REQUESTS = _m("sampled_slo_requests", "counter", (*_REQ, SLO), "Eligible requests as sampled: each once.")
SAMPLED_SLO_VIOLATIONS = _m(
    "sampled_slo_violations", "counter", (*_REQ, SLO), "Eligible requests that missed the SLO as sampled: each once."
)
REQUESTS_FAILED = _m(
    "requests_failed",
    "counter",
    (*_REQ, REASON),
    "Requests that failed, were shed or aborted, by reason (also counted as violations of every SLO they carried, "
    "except invalid ones).",
)
TTFT_SECONDS = _m(
    "ttft_seconds",
    "histogram",
    (MODEL, POOL, SLO_CLASS),
    "Actual time to first token, from the request's arrival at its gateway (the SLO's TTFT).",
)
MODEL_SERVER_TTFT_SECONDS = _m(
    "model_server_ttft_seconds",
    "histogram",
    (MODEL, POOL, SLO_CLASS),
    "The model server's own time to first token, from the request's arrival at the model server.",
)
TPOT_SECONDS = _m(
    "tpot_seconds",
    "histogram",
    (MODEL, POOL, SLO_CLASS),
    "Actual time per output token after the first, (e2e - ttft) / (completion_tokens - 1).",
)
# What each request asked for and got, from the model-server span: tokens per second are the rates of the sums.
E2E_SECONDS = _m(
    "e2e_seconds", "histogram", (MODEL, POOL, SLO_CLASS), "End-to-end latency of a request at its model server."
)
PROMPT_TOKENS = _m("prompt_tokens", "histogram", (MODEL, POOL, SLO_CLASS), "Prompt (input) tokens of a request.")
COMPLETION_TOKENS = _m(
    "completion_tokens", "histogram", (MODEL, POOL, SLO_CLASS), "Completion (output) tokens of a request."
)
POD_REQUESTS = _m("pod_requests", "counter", (POOL, POD), "Evaluated requests per pod.")
POD_SLO_VIOLATIONS = _m("pod_slo_violations", "counter", (POOL, POD, SLO), "SLO violations per pod.")
# Request values that can be invalid (values of the field label of INVALID_VALUES).
FIELD_TTFT_SECONDS = "ttft_seconds"
FIELD_E2E_SECONDS = "e2e_seconds"
FIELD_COMPLETION_TOKENS = "completion_tokens"
INVALID_FIELDS = (FIELD_TTFT_SECONDS, FIELD_E2E_SECONDS, FIELD_COMPLETION_TOKENS)
INVALID_VALUES = _m(
    "invalid_values",
    "counter",
    (FIELD,),
    "Request values that were missing, negative or not finite; the request is ineligible for the SLOs needing them.",
)

# The SLO spec, as series.
SLO_OBJECTIVE_RATIO = _m(
    "slo_objective_ratio", "gauge", (MODEL, SLO_CLASS, SLO), "Objective of an SLO class (share of requests to meet it)."
)
SLO_TARGET_SECONDS = _m(
    "slo_target_seconds",
    "gauge",
    (MODEL, SLO_CLASS, SLO),
    "Default target of an SLO class, used for requests that carry none (present only when the class sets one).",
)
SLO_COMPLIANCE_PERIOD_SECONDS = _m(
    "slo_compliance_period_seconds",
    "gauge",
    (SLO_CLASS,),
    "Compliance period over which an SLO class's budget is counted.",
)

# Scraped pod state (model servers).
_POD = (POOL, POD)
POD_KV_CACHE_UTILIZATION = _m(
    "pod_kv_cache_utilization", "gauge", _POD, "KV-cache utilization of a pod, 0..1, as last scraped."
)
POD_REQUESTS_WAITING = _m("pod_requests_waiting", "gauge", _POD, "Requests queued on a pod, as last scraped.")
POD_REQUESTS_RUNNING = _m("pod_requests_running", "gauge", _POD, "Requests running on a pod, as last scraped.")
POD_UP = _m("pod_up", "gauge", _POD, "1 when the pod's last metrics scrape succeeded, else 0.")
POD_SCRAPE_AGE_SECONDS = _m(
    "pod_scrape_age_seconds", "gauge", _POD, "Seconds since the pod's state was last scraped successfully."
)
POD_SLEEPING = _m(
    "pod_sleeping",
    "gauge",
    _POD,
    "1 when every engine of the pod is asleep (vLLM sleep mode), 0 when awake; absent when the server publishes "
    "no sleep state. A sleeping pod has no headroom and is not counted in sloscope_pool_pods.",
)
POD_PREFIX_CACHE_HITS = _m(
    "pod_prefix_cache_hits",
    "counter",
    _POD,
    "Prompt tokens a pod's prefix cache supplied: the model server's own counter, passed through (resets with it).",
)
POD_PREFIX_CACHE_QUERIES = _m(
    "pod_prefix_cache_queries",
    "counter",
    _POD,
    "Prompt tokens a pod looked up in its prefix cache: the model server's own counter, passed through.",
)
POD_PREEMPTIONS = _m(
    "pod_preemptions",
    "counter",
    _POD,
    "Requests a pod preempted (vLLM) or retracted (SGLang) to free KV cache: the server's counter, passed through.",
)
ENGINE_LATENCY_SECONDS = _m(
    "engine_latency_seconds",
    "histogram",
    (POOL, MODEL, PROTOCOL, SIGNAL),
    "The model servers' own request-latency histograms (signal queue, ttft, itl, tpot, e2e), summed over the "
    "pool's pods from their increases between scrapes; unsampled, unlike the span-based series.",
)

# Predicted versus actual.
_PRED = (MODEL, POOL, SIGNAL, SOURCE)
PREDICTION_RATIO = _m(
    "prediction_ratio",
    "histogram",
    _PRED,
    "Actual over predicted latency per request; the bucket le=1 counts the requests the prediction covered.",
)
PREDICTION_COVERED = _m(
    "prediction_covered", "counter", _PRED, "Requests whose actual latency was at most the predicted one."
)
PREDICTIONS = _m("predictions", "counter", _PRED, "Requests whose actual latency was compared with a prediction.")
PREDICTION_PINBALL_LOSS = _m(
    "prediction_pinball_loss_seconds",
    "counter",
    _PRED,
    "Sum of the pinball (quantile) loss of the predictions at the predictor's quantile; divide its rate by the "
    "rate of sloscope_predictions_total for the mean loss over any window.",
)
# Mean-objective predictors: sums and a count, so that PromQL takes bias, MAE and RMSE over any window.
MEAN_PREDICTIONS = _m(
    "mean_predictions", "counter", _PRED, "Requests whose actual latency was compared with a mean prediction."
)
MEAN_PREDICTION_PREDICTED = _m(
    "mean_prediction_predicted_seconds",
    "counter",
    _PRED,
    "Sum of the mean predictions compared (the denominator of the relative bias).",
)
# The error split by its sign into two sums that only grow: a signed sum falls whenever a prediction was too high,
# and rate() reads every fall as a counter reset. Bias = (under - over) / n, MAE = (under + over) / n.
MEAN_PREDICTION_UNDERESTIMATE = _m(
    "mean_prediction_underestimate_seconds",
    "counter",
    _PRED,
    "Sum of max(actual - predicted, 0) of mean predictions: by how much they were too low. Its rate minus that of "
    "sloscope_mean_prediction_overestimate_seconds_total, over that of sloscope_mean_predictions_total: the bias "
    "(positive: the predictor predicts too low); the two rates added, over it: the MAE.",
)
MEAN_PREDICTION_OVERESTIMATE = _m(
    "mean_prediction_overestimate_seconds",
    "counter",
    _PRED,
    "Sum of max(predicted - actual, 0) of mean predictions: by how much they were too high (see "
    "sloscope_mean_prediction_underestimate_seconds_total).",
)
MEAN_PREDICTION_SQUARED_ERROR = _m(
    "mean_prediction_squared_error_seconds_squared",
    "counter",
    _PRED,
    "Sum of (actual - predicted)^2 of mean predictions, in square seconds; the square root of it over "
    "sloscope_mean_predictions_total: the RMSE.",
)
HEADROOM_SECONDS = _m(
    "headroom_seconds",
    "histogram",
    (MODEL, POOL, SIGNAL),
    "SLO minus predicted latency of a request on the pod it was routed to (TPOT: against the buffered, "
    "tightest TPOT SLO on the pod); negative means the prediction already missed.",
)
SHADOW_SKIPPED = _m(
    "shadow_skipped",
    "counter",
    (POOL, REASON),
    "Completed requests that got no shadow prediction, by reason.",
)
PREDICTOR_REQUESTS = _m(
    "predictor_requests",
    "counter",
    (POOL, PURPOSE, RESULT),
    "Calls sloscope made to a prediction server (purpose shadow or headroom), by result.",
)
PREDICTOR_RETRIES = _m(
    "predictor_retries",
    "counter",
    (POOL, PURPOSE),
    "Batches sent once more to another prediction server of the pool (breaker closed) after a failed call.",
)

# Live headroom and saturation.
POD_HEADROOM_SECONDS = _m(
    "pod_headroom_seconds",
    "gauge",
    (POOL, POD, SIGNAL, SLO_CLASS),
    "SLO of the class's reference request minus its current predicted latency on the pod.",
)
POOL_PODS_WITH_HEADROOM = _m(
    "pool_pods_with_headroom",
    "gauge",
    (POOL, SLO_CLASS),
    "Pods whose TTFT and TPOT headroom for the class's reference request are both positive.",
)
POOL_PODS = _m(
    "pool_pods", "gauge", (POOL,), "Pods of the pool whose state is known (scraped recently), sleeping ones left out."
)

# Predictor health.
PREDICTOR_UP = _m("predictor_up", "gauge", (POOL, SERVER, ROLE), "1 when a predictor server answers ready, else 0.")
PREDICTOR_MODEL_AGE_SECONDS = _m(
    "predictor_model_age_seconds",
    "gauge",
    (POOL, SIGNAL),
    "Seconds since the training server last wrote the signal's model.",
)
PREDICTOR_COVERAGE_OFFLINE_RATIO = _m(
    "predictor_coverage_offline_ratio",
    "gauge",
    (POOL, SIGNAL),
    "Coverage the training server measured on its held-out test set (newest evaluation), 0..1.",
)
PREDICTOR_TRAINING_SAMPLES = _m(
    "predictor_training_samples",
    "gauge",
    (POOL, SIGNAL),
    "Samples the training server holds to fit the signal's model (the sum of its training_samples_count buckets).",
)
PREDICTOR_QUANTILE = _m("predictor_quantile", "gauge", (POOL,), "Quantile the latency predictor models (0.9: p90).")
PREDICTOR_OBJECTIVE = _m(
    "predictor_objective",
    "gauge",
    (POOL, OBJECTIVE),
    "1 for what the latency predictor predicts (objective quantile or mean), 0 for the other.",
)
PREDICTOR_MAE_OFFLINE_SECONDS = _m(
    "predictor_mae_offline_seconds",
    "gauge",
    (POOL, SIGNAL),
    "Mean absolute error a mean-objective training server measured on its held-out test set (newest evaluation).",
)
PREDICTOR_RMSE_OFFLINE_SECONDS = _m(
    "predictor_rmse_offline_seconds",
    "gauge",
    (POOL, SIGNAL),
    "Root mean squared error a mean-objective training server measured on its held-out test set (newest evaluation).",
)
PREDICTOR_TRAINED = _m(
    "predictor_trained",
    "gauge",
    (POOL, SIGNAL),
    "1 when the signal's model looks trained, 0 when it looks reset to the default model (no training samples, "
    "default-model markers on /metrics or /status, the same prediction for different features).",
)

# The EPP's own SLO series, re-published with their label defects put right. Actual latencies carry the
# model labels only; the plugin's predictions, prediction durations and violations also name the plugin
# instance that recorded them (llm-d-router's plugin_name/plugin_type; "" on EPPs that write none).
PLUGIN_NAME = "plugin_name"
PLUGIN_TYPE = "plugin_type"
STATUS = "status"
EPP_TYPE_E2E = "e2e"  # a violation type: the EPP's "ttft" violation when its TTFT is end-to-end latency
_EPP = (POOL, MODEL, TARGET_MODEL)
_EPP_PLUGIN = (*_EPP, PLUGIN_NAME, PLUGIN_TYPE)
EPP_TTFT_SECONDS = _m(
    "epp_ttft_seconds", "histogram", _EPP, "The EPP's actual TTFT histogram (streamed responses only)."
)
EPP_E2E_SECONDS = _m(
    "epp_e2e_seconds",
    "histogram",
    _EPP,
    "What the EPP records as TTFT when it is end-to-end latency: non-streamed responses, or the plugin "
    "running with streamingMode off.",
)
EPP_PREDICTED_TTFT_SECONDS = _m(
    "epp_predicted_ttft_seconds",
    "histogram",
    _EPP_PLUGIN,
    "The EPP's predicted TTFT histogram (llm-d-router: the routing-time prediction for the chosen endpoint).",
)
EPP_PREDICTED_E2E_SECONDS = _m(
    "epp_predicted_e2e_seconds",
    "histogram",
    _EPP_PLUGIN,
    "The EPP's predicted TTFT when its plugin runs with streamingMode off, where that is a predicted "
    "end-to-end latency.",
)
EPP_TPOT_SECONDS = _m(
    "epp_tpot_seconds", "histogram", _EPP, "The EPP's actual TPOT histogram (average per request, streamed)."
)
EPP_PREDICTED_TPOT_SECONDS = _m(
    "epp_predicted_tpot_seconds",
    "histogram",
    _EPP_PLUGIN,
    "The EPP's predicted TPOT histogram (llm-d-router: the routing-time prediction for the chosen endpoint).",
)
EPP_TTFT_PREDICTION_DURATION_SECONDS = _m(
    "epp_ttft_prediction_duration_seconds",
    "histogram",
    _EPP_PLUGIN,
    "Time the EPP spent on TTFT predictions (llm-d-router: one bulk call per routed request).",
)
EPP_TPOT_PREDICTION_DURATION_SECONDS = _m(
    "epp_tpot_prediction_duration_seconds",
    "histogram",
    _EPP_PLUGIN,
    "Time the EPP spent on TPOT predictions (llm-d-router: the same bulk call as the TTFT one).",
)
EPP_SLO_VIOLATIONS = _m(
    "epp_slo_violations",
    "counter",
    (*_EPP_PLUGIN, TYPE),
    "The EPP's SLO violation counter, by type (ttft, tpot; e2e where its TTFT is end-to-end latency).",
)
EPP_REQUESTS = _m(
    "epp_requests",
    "counter",
    _EPP,
    "The EPP's own count of the requests it scheduled, every one (traces may be sampled, this is not), summed over "
    "priority and fairness flow.",
)
EPP_SCHEDULER_ATTEMPTS = _m(
    "epp_scheduler_attempts",
    "counter",
    (POOL, TARGET_MODEL, POD, STATUS),
    'The EPP\'s scheduling attempts, by status and the pod it picked (pod "" on failure or where not named).',
)
EPP_UP = _m(
    "epp_up",
    "gauge",
    (POOL,),
    "1 when sloscope's last scrape of the pool's EPP /metrics succeeded, 0 when it failed; absent before the first.",
)
# The EPP's flow control (opt-in: llm-d-router's flowControl feature gate, GIE v1.5.0's flow control layer).
FLOW_STAGE_EFFECTIVE = "effective"  # the saturation that gates dispatch (llm-d-router: max of prefill and decode)
EPP_FLOW_CONTROL_SATURATION = _m(
    "epp_flow_control_saturation",
    "gauge",
    (POOL, STAGE),
    "The EPP's pool saturation signal gating flow-control dispatch (1.0: the set point; above: oversubscribed), by "
    "stage; effective is the gating value (GIE v1.5.0 writes only that one).",
)
EPP_FLOW_CONTROL_QUEUED_REQUESTS = _m(
    "epp_flow_control_queued_requests",
    "gauge",
    (POOL, PRIORITY),
    "Requests held in the EPP's flow-control queues now, by priority band (summed over flows and models).",
)
EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS = _m(
    "epp_flow_control_queue_duration_seconds",
    "histogram",
    (POOL, OUTCOME),
    "Time requests spent in the EPP's flow control, from enqueue to their final outcome (Dispatched, Rejected..., "
    "Evicted...), the outcome as the EPP names it; its count is the requests leaving flow control by outcome.",
)
EPP_STREAMING_MODE = _m(
    "epp_streaming_mode",
    "gauge",
    (POOL, BASIS),
    "1 when the pool's EPP runs its latency plugin with streamingMode on (its predicted TTFT is a TTFT), 0 when "
    "off (its predicted TTFT is end-to-end latency, its TPOT is not predicted); basis: page (the EPP's page "
    "shows it), setting (the pool's streaming_mode) or default (the upstream default, off).",
)
EPP_INFLIGHT_REQUESTS = _m(
    "epp_inflight_requests",
    "gauge",
    (POOL, POD),
    "Requests the llm-d EPP has routed to the pod and not yet seen end (its in-flight load producer), all ranks.",
)
EPP_INFLIGHT_TOKENS = _m(
    "epp_inflight_tokens",
    "gauge",
    (POOL, POD),
    "Uncached prompt tokens of the requests in flight to the pod, as the llm-d EPP counts them, all ranks.",
)

# Self-monitoring.
SPANS_RECEIVED = _m("spans_received", "counter", (TRANSPORT,), "Spans accepted by a receiver.")
SPANS_DROPPED = _m("spans_dropped", "counter", (REASON,), "Spans refused or discarded, by reason.")
OTLP_REQUESTS = _m("otlp_requests", "counter", (TRANSPORT, RESULT), "OTLP export requests received, by outcome.")
QUEUE_SPANS = _m("queue_spans", "gauge", (), "Spans waiting in the receiver-to-assembler queue.")
QUEUE_CAPACITY_SPANS = _m("queue_capacity_spans", "gauge", (), "Capacity of the receiver-to-assembler queue.")
TRACES_PENDING = _m("traces_pending", "gauge", (), "Traces held by the assembler waiting for their spans.")
REQUESTS_AWAITING_EVALUATION = _m(
    "requests_awaiting_evaluation",
    "gauge",
    (),
    "Joined requests gathered for the next evaluation batch, not yet in any request series.",
)
# Ingest memory bounded in bytes (limits.max_bytes_in_flight, join.max_pending_bytes).
OTLP_BYTES_IN_FLIGHT = _m(
    "otlp_bytes_in_flight", "gauge", (), "Bytes of OTLP requests being read or decoded, across both receivers."
)
TRACES_PENDING_BYTES = _m(
    "traces_pending_bytes", "gauge", (), "Estimated bytes of the spans held by the assembler in pending traces."
)
# Values of the ``result`` label of OTLP_REQUESTS.
OTLP_RESULTS = (
    "accepted",
    "partial",
    "queue_full",
    "in_flight_full",
    "shutting_down",
    "malformed",
    "too_large",
    "unsupported",
    "client_disconnected",
    "body_timeout",
)
TRACES_JOINED = _m(
    "traces_joined", "counter", (OUTCOME,), "Requests emitted or traces expired by the assembler, by outcome."
)
PHASE = "phase"
CALL_LEGS = _m(
    "call_legs",
    "counter",
    (PHASE, RESULT),
    "Legs of LLM calls made of several requests (llm-d's coordinator: one EPP call per phase; the routing sidecar's "
    "encoder requests), by phase and what became of them.",
)
REQUESTS_WITHOUT_POOL = _m(
    "requests_without_pool",
    "counter",
    (REASON,),
    "Requests that failed before reaching any pod and whose pool nothing told (neither a span, a pool's gateways "
    "setting, what their gateway's answered requests showed, their model nor a single pool): kept out of every "
    "pool's series and SLO budget, by failure reason.",
)
LABEL_VALUES_FOLDED = _m(
    "label_values_folded", "counter", (LABEL,), "Observations whose label value was folded into __other__ by the cap."
)
FAMILY = "family"
SERIES_FOLDED = _m(
    "series_folded",
    "counter",
    (FAMILY,),
    "Observations whose label set was counted into the family's __other__ series by the series caps "
    "(limits.max_series_per_family, limits.max_series_total).",
)
SCRAPES = _m(
    "scrapes",
    "counter",
    (KIND, RESULT),
    "Scrapes of model servers, the EPP and predictor servers, by kind and result.",
)
BUILD_INFO = _m("build", "info", ("version", "python"), "sloscope build information.")
UPSTREAM_CONTRACT = _m(
    "upstream_contract",
    "gauge",
    (POOL, CHECK),
    "1 while an assumption sloscope's numbers rest on holds for the pool, 0 when what the upstream shows breaks it "
    "(check: one of the upstream-contract checks, docs/metrics.md); absent while nothing was seen to judge by.",
)

# The upstream-contract checks (the check label): each an assumption about what the EPP, the predictor or the
# spans mean, watched continuously so that a changed upstream raises an alert instead of a wrong graph.
CHECK_PREDICTOR_OBJECTIVE = "predictor_objective"  # the predictor states its objective where its generation does
CHECK_PREDICTOR_ANSWERS = "predictor_answers"  # the predictor's endpoints answer in the shapes sloscope reads
CHECK_STREAMING_MODE = "streaming_mode"  # the EPP's streaming mode is the one the settings say
CHECK_EPP_GENERATION = "epp_generation"  # the EPP is the generation the settings name
CHECK_EPP_FAMILIES = "epp_families"  # the EPP's page has the families sloscope reads while the pool is served
CHECK_SPAN_REQUEST_ID = "span_request_id"  # model-server spans carry a request id
CHECK_SPAN_TOKEN_COUNTS = "span_token_counts"  # answered model-server spans carry their completion tokens
CHECK_GATEWAY_SLO_HEADERS = "gateway_slo_headers"  # gateway spans still carry the SLO headers they carried
CONTRACT_CHECKS = (
    CHECK_PREDICTOR_OBJECTIVE,
    CHECK_PREDICTOR_ANSWERS,
    CHECK_STREAMING_MODE,
    CHECK_EPP_GENERATION,
    CHECK_EPP_FAMILIES,
    CHECK_SPAN_REQUEST_ID,
    CHECK_SPAN_TOKEN_COUNTS,
    CHECK_GATEWAY_SLO_HEADERS,
)

# Record sinks: the record store and the OTLP export of evaluation spans.
SINK = "sink"
RECORDS = _m(
    "records",
    "counter",
    (SINK, RESULT),
    "Evaluated requests handed to a record sink, by outcome (written, filtered, dropped, failed).",
)
RECORDS_QUEUED = _m("records_queued", "gauge", (SINK,), "Records waiting in a sink's memory to be written or sent.")
STORE_FILES = _m("store_files", "gauge", (), "Complete Parquet files in the record store.")
STORE_BYTES = _m("store_bytes", "gauge", (), "Size of the record store's complete files.")
STORE_FILES_DELETED = _m(
    "store_files_deleted", "counter", (REASON,), "Record store files deleted by retention (age or size)."
)

# Join outcomes (values of the ``outcome`` label).
OUTCOME_JOINED = "joined"  # anchor and gateway span in one trace
OUTCOME_JOINED_BY_REQUEST_ID = "joined_by_request_id"  # gateway span found in another trace by request id
OUTCOME_ANCHOR_ONLY = "anchor_only"  # the join window passed with no gateway span
OUTCOME_NO_ANCHOR = "no_anchor"  # a trace expired without a model-server span
OUTCOME_EVICTED = "evicted"  # emitted early because the pending-trace cap was reached
OUTCOME_FAILED = "failed"  # a gateway request that reached no model server, emitted as a failed request
# the coordinator's conditional-decode probe the EPP answered 412 (no decode pod holds the prompt's KV cache): a step
# of a call whose pipeline goes on, not a call; emitted as a decode leg for the call joiner only (processors/calls.py)
OUTCOME_PROBE = "conditional_decode_probe"
# the routing sidecar's encoder requests (x-request-id <id>-enc-<n>) with nothing else of their call in their trace:
# emitted as an encode leg (processors/calls.py), no call by itself
OUTCOME_ENCODER_PART = "encoder_part"
OUTCOMES = (
    OUTCOME_JOINED,
    OUTCOME_JOINED_BY_REQUEST_ID,
    OUTCOME_ANCHOR_ONLY,
    OUTCOME_NO_ANCHOR,
    OUTCOME_EVICTED,
    OUTCOME_FAILED,
    OUTCOME_PROBE,
    OUTCOME_ENCODER_PART,
)

# Drop reasons (values of the ``reason`` label of SPANS_DROPPED).
DROP_QUEUE_FULL = "queue_full"  # refused with 429 / RESOURCE_EXHAUSTED; the client may retry
DROP_INVALID = "invalid"  # rejected in an OTLP partial success
DROP_DUPLICATE = "duplicate"  # the same span id seen twice in a trace (exporter retries)
DROP_LATE = "late"  # arrived after its trace was emitted
DROP_PENDING_CAP = "pending_cap"  # a trace without an anchor evicted by the pending-trace cap
DROP_TRACE_TOO_LARGE = "trace_too_large"  # beyond the per-trace span cap
DROP_SHUTDOWN = "shutdown"  # arrived while shutting down
# Record sinks (labels of RECORDS) and retention reasons (labels of STORE_FILES_DELETED).
SINK_STORE = "store"
SINK_OTLP = "otlp"
SINKS = (SINK_STORE, SINK_OTLP)
RECORD_WRITTEN = "written"  # in a complete store file, or accepted by the OTLP endpoint
RECORD_FILTERED = "filtered"  # not exported: export.only_violations and no SLO missed
RECORD_DROPPED = "dropped"  # the queue was full, the sink was not running, or the shutdown deadline passed first
RECORD_FAILED = "failed"  # the write or the export failed after its retries
RECORD_RESULTS = (RECORD_WRITTEN, RECORD_FILTERED, RECORD_DROPPED, RECORD_FAILED)
DELETED_AGE = "age"
DELETED_SIZE = "size"
# Scrape kinds and results (labels of SCRAPES).
KIND_MODEL_SERVER = "model_server"
KIND_EPP = "epp"
KIND_TRAINING_SERVER = "training_server"
KIND_PREDICTION_SERVER = "prediction_server"
SCRAPE_KINDS = (KIND_MODEL_SERVER, KIND_EPP, KIND_TRAINING_SERVER, KIND_PREDICTION_SERVER)
RESULT_SUCCESS = "success"
RESULT_TIMEOUT = "timeout"
RESULT_CONNECTION_ERROR = "connection_error"
RESULT_HTTP_ERROR = "http_error"
RESULT_PARSE_ERROR = "parse_error"
RESULT_AUTH_ERROR = "auth_error"  # 401 or 403: the target refused sloscope's credentials (or their absence)
RESULT_CREDENTIALS_ERROR = "credentials_error"  # sloscope could not read its own token or TLS files; nothing sent
RESULT_TLS_ERROR = "tls_error"  # the TLS handshake failed: a certificate not verified, a wrong server name
SCRAPE_RESULTS = (
    RESULT_SUCCESS,
    RESULT_TIMEOUT,
    RESULT_CONNECTION_ERROR,
    RESULT_HTTP_ERROR,
    RESULT_PARSE_ERROR,
    RESULT_AUTH_ERROR,
    RESULT_CREDENTIALS_ERROR,
    RESULT_TLS_ERROR,
)
# Calls to a prediction server (labels of PREDICTOR_REQUESTS); 422 is "rejected", an open breaker "circuit_open".
PURPOSE_SHADOW = "shadow"
PURPOSE_HEADROOM = "headroom"
RESULT_REJECTED = "rejected"
RESULT_CIRCUIT_OPEN = "circuit_open"
# A 2xx answer of the documented shape whose values cannot be predictions (a quantile outside (0, 1), a
# negative, NaN or infinite latency, another count of predictions than requests): none of it is used.
RESULT_INVALID_ANSWER = "invalid_answer"
PREDICTOR_RESULTS = (
    RESULT_SUCCESS,
    RESULT_TIMEOUT,
    RESULT_CONNECTION_ERROR,
    RESULT_HTTP_ERROR,
    RESULT_PARSE_ERROR,
    RESULT_AUTH_ERROR,
    RESULT_CREDENTIALS_ERROR,
    RESULT_TLS_ERROR,
    RESULT_REJECTED,
    RESULT_CIRCUIT_OPEN,
    RESULT_INVALID_ANSWER,
)
# Why a completed request got no shadow prediction (reason label of SHADOW_SKIPPED).
SKIP_SAMPLED_OUT = "sampled_out"  # outside the configured share
SKIP_RATE_LIMITED = "rate_limited"  # beyond predictions.max_per_second
SKIP_NO_PREDICTOR = "no_predictor"  # its pool has no prediction server configured
SKIP_NO_POD_STATE = "no_pod_state"  # no scraped sample of its pod at or before its arrival
SKIP_NO_FEATURES = "no_features"  # the request lacks prompt tokens or a usable arrival time
SKIP_QUEUE_FULL = "queue_full"  # the shadow queue was full
SKIP_FAILED = "failed"  # the prediction call failed (see sloscope_predictor_requests_total)
SKIP_SHUTDOWN = "shutdown"  # still queued, or its call still unanswered, when sloscope stopped
SKIP_REASONS = (
    SKIP_SAMPLED_OUT,
    SKIP_RATE_LIMITED,
    SKIP_NO_PREDICTOR,
    SKIP_NO_POD_STATE,
    SKIP_NO_FEATURES,
    SKIP_QUEUE_FULL,
    SKIP_FAILED,
    SKIP_SHUTDOWN,
)

DROP_REASONS = (
    DROP_QUEUE_FULL,
    DROP_INVALID,
    DROP_DUPLICATE,
    DROP_LATE,
    DROP_PENDING_CAP,
    DROP_TRACE_TOO_LARGE,
    DROP_SHUTDOWN,
)

# sloscope's own HTTP server metrics: the family vLLM exposes through prometheus-fastapi-instrumentator.
HTTP_REQUESTS = MetricDef(
    "http_requests", "counter", ("handler", "method", "status"), "HTTP requests served by sloscope, by handler."
)
HTTP_REQUEST_DURATION = MetricDef(
    "http_request_duration_seconds", "histogram", ("handler", "method"), "Latency of sloscope's HTTP handlers."
)

# sloscope's own listeners: connections refused or closed by their limits, and refused credentials.
LISTENER_CONNECTIONS_REFUSED = _m(
    "listener_connections_refused",
    "counter",
    ("listener", "reason"),
    "HTTP listener connections refused or closed by a limit, by reason.",
)
LISTENER_AUTH_FAILURES = _m(
    "listener_auth_failures", "counter", ("listener", "reason"), "Requests refused for missing or wrong credentials."
)
HTTP_LISTENERS = ("otlp_http", "metrics")  # listener label of the connection counter (gRPC core keeps its own)
LISTENERS = ("otlp_grpc", *HTTP_LISTENERS)
REFUSED_CONNECTION_LIMIT = "connection_limit"  # every slot held by a request in progress: 503 and close
REFUSED_EVICTED = "evicted"  # an idle or header-less connection closed to make room for a new one
REFUSED_HEADER_TIMEOUT = "header_timeout"  # request line and headers not complete in time: 408 and close
REFUSED_TLS_HANDSHAKE = "tls_handshake"  # the TLS handshake failed or did not finish in time
REFUSED_REASONS = (REFUSED_CONNECTION_LIMIT, REFUSED_EVICTED, REFUSED_HEADER_TIMEOUT, REFUSED_TLS_HANDSHAKE)
AUTH_MISSING = "missing"  # no credentials of a configured kind
AUTH_INVALID = "invalid"  # credentials that match none configured (or a secret file that cannot be read)
AUTH_FAILURE_REASONS = (AUTH_MISSING, AUTH_INVALID)

ALL_METRICS: tuple[MetricDef, ...] = (
    REQUESTS,
    SLO_REQUESTS,
    SLO_VIOLATIONS,
    SAMPLED_REQUESTS,
    SAMPLED_SLO_REQUESTS,
    SAMPLED_SLO_VIOLATIONS,
    REQUESTS_FAILED,
    TTFT_SECONDS,
    MODEL_SERVER_TTFT_SECONDS,
    TPOT_SECONDS,
    E2E_SECONDS,
    PROMPT_TOKENS,
    COMPLETION_TOKENS,
    POD_REQUESTS,
    POD_SLO_VIOLATIONS,
    INVALID_VALUES,
    SLO_OBJECTIVE_RATIO,
    SLO_TARGET_SECONDS,
    SLO_COMPLIANCE_PERIOD_SECONDS,
    POD_KV_CACHE_UTILIZATION,
    POD_REQUESTS_WAITING,
    POD_REQUESTS_RUNNING,
    POD_UP,
    POD_SCRAPE_AGE_SECONDS,
    POD_SLEEPING,
    POD_PREFIX_CACHE_HITS,
    POD_PREFIX_CACHE_QUERIES,
    POD_PREEMPTIONS,
    ENGINE_LATENCY_SECONDS,
    PREDICTION_RATIO,
    PREDICTION_COVERED,
    PREDICTIONS,
    PREDICTION_PINBALL_LOSS,
    MEAN_PREDICTIONS,
    MEAN_PREDICTION_PREDICTED,
    MEAN_PREDICTION_UNDERESTIMATE,
    MEAN_PREDICTION_OVERESTIMATE,
    MEAN_PREDICTION_SQUARED_ERROR,
    HEADROOM_SECONDS,
    SHADOW_SKIPPED,
    PREDICTOR_REQUESTS,
    PREDICTOR_RETRIES,
    POD_HEADROOM_SECONDS,
    POOL_PODS_WITH_HEADROOM,
    POOL_PODS,
    PREDICTOR_UP,
    PREDICTOR_MODEL_AGE_SECONDS,
    PREDICTOR_COVERAGE_OFFLINE_RATIO,
    PREDICTOR_TRAINING_SAMPLES,
    PREDICTOR_QUANTILE,
    PREDICTOR_OBJECTIVE,
    PREDICTOR_MAE_OFFLINE_SECONDS,
    PREDICTOR_RMSE_OFFLINE_SECONDS,
    PREDICTOR_TRAINED,
    EPP_TTFT_SECONDS,
    EPP_E2E_SECONDS,
    EPP_PREDICTED_TTFT_SECONDS,
    EPP_PREDICTED_E2E_SECONDS,
    EPP_TPOT_SECONDS,
    EPP_PREDICTED_TPOT_SECONDS,
    EPP_TTFT_PREDICTION_DURATION_SECONDS,
    EPP_TPOT_PREDICTION_DURATION_SECONDS,
    EPP_SLO_VIOLATIONS,
    EPP_REQUESTS,
    EPP_SCHEDULER_ATTEMPTS,
    EPP_STREAMING_MODE,
    EPP_UP,
    EPP_FLOW_CONTROL_SATURATION,
    EPP_FLOW_CONTROL_QUEUED_REQUESTS,
    EPP_FLOW_CONTROL_QUEUE_DURATION_SECONDS,
    EPP_INFLIGHT_REQUESTS,
    EPP_INFLIGHT_TOKENS,
    SPANS_RECEIVED,
    SPANS_DROPPED,
    OTLP_REQUESTS,
    QUEUE_SPANS,
    QUEUE_CAPACITY_SPANS,
    TRACES_PENDING,
    REQUESTS_AWAITING_EVALUATION,
    OTLP_BYTES_IN_FLIGHT,
    TRACES_PENDING_BYTES,
    TRACES_JOINED,
    CALL_LEGS,
    REQUESTS_WITHOUT_POOL,
    LABEL_VALUES_FOLDED,
    SERIES_FOLDED,
    SCRAPES,
    BUILD_INFO,
    UPSTREAM_CONTRACT,
    RECORDS,
    RECORDS_QUEUED,
    STORE_FILES,
    STORE_BYTES,
    STORE_FILES_DELETED,
    HTTP_REQUESTS,
    HTTP_REQUEST_DURATION,
    LISTENER_CONNECTIONS_REFUSED,
    LISTENER_AUTH_FAILURES,
)


# Recording rules written by the generated rule files (sloscope build), used by the generated alerts and
# dashboards. Named level:metric:operations, as the Prometheus docs recommend.
RULE_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
"""Windows of the multi-window multi-burn-rate alerts (Google SRE workbook, as Sloth uses them)."""
RULE_LABELS = (MODEL, POOL, SLO_CLASS, SLO)


def slo_error_ratio_rule(window: str) -> str:
    """Share of eligible requests that missed their SLO over ``window``, by model, pool, class and SLO."""
    return f"{NAMESPACE}:slo_error_ratio:rate{window}"


def slo_requests_rate_rule(window: str) -> str:
    """Eligible requests per second over ``window``, by model, pool, class and SLO."""
    return f"{NAMESPACE}:slo_requests:rate{window}"


def slo_sampled_requests_rate_rule(window: str) -> str:
    """Eligible requests per second over ``window`` as sampled (each once): how many an estimate rests on."""
    return f"{NAMESPACE}:slo_sampled_requests:rate{window}"


def slo_requests_increase_rule(window: str) -> str:
    """Eligible requests counted over ``window``, by model, pool, class and SLO (tiles of the compliance period)."""
    return f"{NAMESPACE}:slo_requests:increase{window}"


def slo_violations_increase_rule(window: str) -> str:
    """Violations counted over ``window``, by model, pool, class and SLO (tiles of the compliance period)."""
    return f"{NAMESPACE}:slo_violations:increase{window}"


# The error budget as series, named as Sloth names its metadata rules (slo:objective:ratio, ...), by model, pool,
# class and SLO: real label values, so that they join one to one with the error ratios above.
SLO_OBJECTIVE_RULE = f"{NAMESPACE}:slo_objective:ratio"
SLO_ERROR_BUDGET_RULE = f"{NAMESPACE}:slo_error_budget:ratio"
SLO_CURRENT_BURN_RATE_RULE = f"{NAMESPACE}:slo_current_burn_rate:ratio"
SLO_PERIOD_BURN_RATE_RULE = f"{NAMESPACE}:slo_period_burn_rate:ratio"
SLO_PERIOD_ERROR_BUDGET_REMAINING_RULE = f"{NAMESPACE}:slo_period_error_budget_remaining:ratio"
