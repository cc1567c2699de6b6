"""The "sloscope itself" dashboard: is the exporter keeping up, and what is it losing?

Every stage counts what it receives, drops and why (docs/metrics.md, self-monitoring): spans in and out of
the queue, traces waiting for their spans, how requests were joined, scrapes of pods, EPPs and predictors,
label values folded by the caps, and the process's own HTTP latency, memory and CPU. A wrong SLO number is
often a pipeline problem first; this is where to look.
"""

from __future__ import annotations

from typing import Any

from sloscope import conventions as c
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards import variables as v
from sloscope.generators.dashboards.promql import (
    max_by,
    min_by,
    missed_share,
    ne,
    rate,
    regex,
    sel,
    series,
    sum_by,
    var,
)
from sloscope.generators.rules.thresholds import ANCHORED_OUTCOMES, JOINED_OUTCOMES
from sloscope.slo.spec import SLOSpec

FILE_NAME = "sloscope-itself.json"

# Labels Prometheus attaches to every scraped target (not sloscope's own).
JOB = "job"
INSTANCE = "instance"
# prometheus_client's standard process collector (on Linux), registered by `sloscope serve`.
PROCESS_RESIDENT_MEMORY = "process_resident_memory_bytes"
PROCESS_CPU_SECONDS = "process_cpu_seconds_total"
PROCESS_OPEN_FDS = "process_open_fds"
PROCESS_MAX_FDS = "process_max_fds"
PROCESS_SERIES = (PROCESS_RESIDENT_MEMORY, PROCESS_CPU_SECONDS, PROCESS_OPEN_FDS, PROCESS_MAX_FDS)

_SELF = (var(JOB), var(INSTANCE))
_JOINED = regex(c.OUTCOME, "|".join(JOINED_OUTCOMES))
_ANCHORED = regex(c.OUTCOME, "|".join(ANCHORED_OUTCOMES))  # requests with a model-server span, as the alert counts


def dashboard(spec: SLOSpec) -> Any:
    """Receivers and queue, the join, scrapes and label caps, HTTP and process, for the chosen instances."""
    return d.build(
        title="sloscope itself",
        service=spec.service,
        file_name=FILE_NAME,
        description=(
            "sloscope's own health: spans received and dropped, queue fill, traces pending, join outcomes, scrapes, "
            "label values folded by the caps, upstream contracts, request records (store, OTLP export), HTTP latency, "
            "memory and CPU."
        ),
        tags=["self-monitoring"],
        variables=[
            v.datasource_variable(),
            v.label_variable(JOB, c.BUILD_INFO, "Job"),
            v.label_variable(INSTANCE, c.BUILD_INFO, "Instance", narrowed_by=(JOB,)),
        ],
        panels=[*_spans(), *_join(), *_scrapes(), *_contracts(), *_records(), *_process()],
        time_from="now-3h",
    )


def _self(name: str) -> str:
    return sel(name, _SELF)


def _spans() -> list[Any]:
    fill = max_by((INSTANCE,), f"{_self(series(c.QUEUE_SPANS))} / {_self(series(c.QUEUE_CAPACITY_SPANS))}")
    queue_full = d.steps(d.GREEN, (0.5, d.ORANGE), (0.8, d.RED))
    return [
        d.row("Spans in"),
        d.timeseries(
            "Spans received by transport",
            "Spans accepted into the receiver-to-assembler queue per second, by receiver (grpc, http).",
            [d.Query(sum_by((c.TRANSPORT,), rate(series(c.SPANS_RECEIVED), _SELF)), "{{transport}}")],
            unit=d.PER_SECOND,
            width=8,
            stacked=True,
        ),
        d.timeseries(
            "Spans dropped by reason",
            "Spans refused or discarded per second. queue_full: refused with 429 / RESOURCE_EXHAUSTED, the client may "
            "retry; invalid: rejected in a partial success; duplicate: exporter retries; late: after the trace was "
            "emitted; pending_cap, trace_too_large: the assembler's bounds; shutdown: while stopping.",
            [d.Query(sum_by((c.REASON,), rate(series(c.SPANS_DROPPED), _SELF)), "{{reason}}")],
            unit=d.PER_SECOND,
            width=8,
            stacked=True,
        ),
        d.timeseries(
            "OTLP requests by transport and result",
            "OTLP export requests per second by outcome: accepted, partial (some spans rejected), queue_full, "
            "shutting_down, malformed, too_large, unsupported.",
            [
                d.Query(
                    sum_by((c.TRANSPORT, c.RESULT), rate(series(c.OTLP_REQUESTS), _SELF)), "{{transport}} {{result}}"
                )
            ],
            unit=d.REQUESTS_PER_SECOND,
            width=8,
        ),
        d.gauge(
            "Queue fill",
            "Spans waiting in the receiver-to-assembler queue over its capacity, now, per instance. A full queue "
            "refuses new spans (queue_full drops).",
            [d.Query(fill, "{{instance}}")],
            unit=d.PERCENT,
            thresholds=queue_full,
            minimum=0,
            maximum=1,
            width=6,
            height=8,
        ),
        d.timeseries(
            "Queue fill over time",
            "Queue length over capacity per instance. Sustained fill means the assembler cannot keep up with the "
            "spans coming in.",
            [d.Query(fill, "{{instance}}")],
            unit=d.PERCENT,
            width=9,
            thresholds=queue_full,
            threshold_style="dashed",
            maximum=1,
        ),
        d.timeseries(
            "Traces pending",
            "Traces the assembler holds while waiting for their spans, per instance (bounded by "
            "join.max_pending_traces; at the bound, traces are evicted early).",
            [d.Query(max_by((INSTANCE,), _self(series(c.TRACES_PENDING))), "{{instance}}")],
            unit=d.SHORT,
            width=9,
        ),
    ]


def _join() -> list[Any]:
    joined = rate(series(c.TRACES_JOINED), _SELF)
    return [
        d.row("Joining spans into requests"),
        d.timeseries(
            "Join outcomes",
            "Requests emitted by the assembler per second by join outcome (joined, joined_by_request_id, anchor_only, "
            "evicted, failed), plus traces expired without a model-server span (no_anchor), the coordinator's refused "
            "conditional-decode probes (conditional_decode_probe) and encoder requests alone in their trace "
            "(encoder_part).",
            [d.Query(sum_by((c.OUTCOME,), joined), "{{outcome}}")],
            unit=d.PER_SECOND,
            width=8,
            stacked=True,
        ),
        d.timeseries(
            "Requests joined with a gateway span",
            "Share of requests with a model-server span joined with a gateway span, in their own trace or by request "
            "id (as SloscopeJoinRatioLow counts them). Low: SLO "
            "headers and routing are not reaching sloscope, and requests count as carrying no SLO.",
            [
                d.Query(
                    f"{sum_by((), rate(series(c.TRACES_JOINED), (*_SELF, _JOINED)))} / "
                    f"{sum_by((), rate(series(c.TRACES_JOINED), (*_SELF, _ANCHORED)))}",
                    "joined",
                )
            ],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
        d.timeseries(
            "Legs of calls",
            "Legs of LLM calls made of several requests, per second, by phase and result: llm-d's coordinator "
            "makes one EPP call per phase, the routing sidecar one encoder request per multimodal item. joined: part "
            "of its call, which counts once; without_call: its call's final leg never came (sampled out by a trace "
            "of its own, or lost), so it counts as no call.",
            [d.Query(sum_by((c.PHASE, c.RESULT), rate(series(c.CALL_LEGS), _SELF)), "{{phase}} {{result}}")],
            unit=d.PER_SECOND,
            width=8,
            stacked=True,
        ),
        d.timeseries(
            "Invalid request values by field",
            "Request values that were missing, negative or not finite, per second, by field; such a request is "
            "ineligible for the SLOs needing the value.",
            [d.Query(sum_by((c.FIELD,), rate(series(c.INVALID_VALUES), _SELF)), "{{field}}")],
            unit=d.PER_SECOND,
            width=8,
        ),
    ]


def _scrapes() -> list[Any]:
    scrapes = rate(series(c.SCRAPES), _SELF)
    failed = rate(series(c.SCRAPES), (*_SELF, ne(c.RESULT, c.RESULT_SUCCESS)))
    return [
        d.row("Scrapes and label caps"),
        d.timeseries(
            "Scrapes by kind and result",
            "Scrapes per second of model-server pods, EPPs, training and prediction servers, by result "
            f"({', '.join(c.SCRAPE_RESULTS)}).",
            [d.Query(sum_by((c.KIND, c.RESULT), scrapes), "{{kind}} {{result}}")],
            unit=d.PER_SECOND,
            width=8,
        ),
        d.timeseries(
            "Scrape failure share by kind",
            "Share of scrapes that failed, per kind. Failed pod scrapes leave predictions without a fresh pod state.",
            [d.Query(missed_share(failed, scrapes, (c.KIND,)), "{{kind}}")],
            unit=d.PERCENT,
            width=8,
            thresholds=d.steps(d.GREEN, (0.05, d.RED)),
            threshold_style="dashed",
        ),
        d.timeseries(
            "Label values and series folded into __other__",
            "Observations per second whose label value was published as __other__ because the label's cap "
            "(limits.max_label_values) was reached (by label), or whose label set was counted into its family's "
            "__other__ series because the series caps (limits.max_series_per_family, limits.max_series_total) "
            "were reached (by family). Any rate here merges series: raise the cap.",
            [
                d.Query(sum_by((c.LABEL,), rate(series(c.LABEL_VALUES_FOLDED), _SELF)), "{{label}}"),
                d.Query(sum_by((c.FAMILY,), rate(series(c.SERIES_FOLDED), _SELF)), "{{family}}"),
            ],
            unit=d.PER_SECOND,
            width=8,
        ),
    ]


def _contracts() -> list[Any]:
    contracts = min_by((c.POOL, c.CHECK), _self(c.UPSTREAM_CONTRACT.name))
    return [
        d.row("Upstream contracts"),
        d.table(
            "Broken upstream contracts",
            "The assumptions sloscope's numbers rest on that the upstream breaks now, per pool and check (0 on any "
            "selected instance): a renamed family or span attribute, a predictor that stopped stating its "
            "objective, an EPP of another generation or streaming mode than the settings say. Each check has an "
            "alert and a runbook (docs/runbooks). Empty: every contract judged holds.",
            [d.Query(f"{contracts} == 0", instant=True, format="table")],
            unit=d.NONE,
            transformations=d.merged_columns("value"),
            width=8,
        ),
        d.timeseries(
            "Upstream contracts by pool and check",
            "1 while the check holds, 0 while the upstream breaks it; no line while nothing was seen to judge by "
            "(no page, no poll, fewer than 20 requests in the last 10 minutes).",
            [d.Query(contracts, "{{pool}} {{check}}")],
            unit=d.NONE,
            width=16,
            minimum=0,
            maximum=1,
            thresholds=d.steps(d.RED, (1, d.GREEN)),
        ),
    ]


def _records() -> list[Any]:
    return [
        d.row("Request records"),
        d.timeseries(
            "Request records by sink and result",
            "Records per second handed to the record store (sink store) and the OTLP export (sink otlp), by result: "
            "written, filtered (only_violations), dropped (queue full or shutdown deadline), failed (write or export "
            "error). Dropped or failed records are missing from reviews or the trace backend.",
            [d.Query(sum_by((c.SINK, c.RESULT), rate(series(c.RECORDS), _SELF)), "{{sink}} {{result}}")],
            unit=d.PER_SECOND,
            width=8,
        ),
        d.timeseries(
            "Records waiting in sinks",
            "Records held in memory waiting to be written (store) or sent (otlp). A level near store."
            "max_buffered_records or export.max_queue_size means the sink cannot keep up and will drop.",
            [d.Query(sum_by((c.SINK,), _self(series(c.RECORDS_QUEUED))), "{{sink}}")],
            unit=d.SHORT,
            width=8,
        ),
        d.timeseries(
            "Record store size",
            "Bytes of complete Parquet files in the record store after the last retention pass (store.max_bytes "
            "bounds it), per instance.",
            [d.Query(_self(series(c.STORE_BYTES)), "{{instance}}")],
            unit=d.BYTES,
            width=8,
        ),
    ]


def _process() -> list[Any]:
    buckets = rate(series(c.HTTP_REQUEST_DURATION, "_bucket"), _SELF)
    return [
        d.row("HTTP and process"),
        d.timeseries(
            "HTTP latency by handler",
            "p50 and p99 latency of sloscope's HTTP handlers (OTLP/HTTP /v1/traces, /metrics, health).",
            [
                d.Query(
                    f"histogram_quantile({q}, {sum_by(('handler', 'le'), buckets)})",
                    f"p{round(q * 100)} {{{{handler}}}}",
                )
                for q in (0.5, 0.99)
            ],
            unit=d.SECONDS,
            width=8,
        ),
        d.timeseries(
            "HTTP requests by handler and status",
            "HTTP requests served per second by handler and status code.",
            [d.Query(sum_by(("handler", "status"), rate(series(c.HTTP_REQUESTS), _SELF)), "{{handler}} {{status}}")],
            unit=d.REQUESTS_PER_SECOND,
            width=8,
        ),
        d.table(
            "Build",
            "Version of sloscope and of Python on each instance.",
            [d.Query(_self(series(c.BUILD_INFO)), instant=True, format="table")],
            unit=d.SHORT,
            transformations=[
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True, JOB: True}},
                }
            ],
            width=8,
        ),
        d.timeseries(
            "Resident memory",
            "Resident memory of each sloscope process. Every buffer is bounded (queue, pending traces, pod history, "
            "label caps): a steady climb is a leak.",
            [d.Query(_self(PROCESS_RESIDENT_MEMORY), "{{instance}}")],
            unit=d.BYTES,
            width=8,
        ),
        d.timeseries(
            "CPU",
            "CPU seconds per second used by each sloscope process (1 = one core busy).",
            [d.Query(rate(PROCESS_CPU_SECONDS, _SELF), "{{instance}}")],
            unit=d.SHORT,
            width=8,
        ),
        d.timeseries(
            "Open file descriptors",
            "Open file descriptors over the process limit; connections to pods and predictors each hold one.",
            [d.Query(f"{_self(PROCESS_OPEN_FDS)} / {_self(PROCESS_MAX_FDS)}", "{{instance}}")],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
    ]
