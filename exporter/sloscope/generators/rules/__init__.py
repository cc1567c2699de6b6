"""Prometheus recording and alerting rules generated from the SLO spec.

Six groups, as Sloth splits SLI recording rules from alert rules and kubernetes-mixin splits alerts by subject:

- ``sloscope-slo-recording``: per window of :data:`~sloscope.conventions.RULE_WINDOWS`, the eligible-request
  rate and the error ratio by model, pool, SLO class and SLO (the routing label is summed away, and so are
  replicas: each request is counted by exactly one), then the objective, error budget and current burn rate.
- ``sloscope-slo-budget``: requests and violations counted over 5 minutes, and from them the error ratio,
  burn rate and error budget remaining over each class's compliance period (:mod:`.budget`).
- ``sloscope-slo-alerts``: multi-window multi-burn-rate alerts per SLO class and SLO, with the class's own
  objective and compliance period (:mod:`sloscope.generators.windows`).
- ``sloscope-predictor-alerts``: calibration, availability and freshness of the latency predictor, pod headroom,
  shadow predictions.
- ``sloscope-pipeline-alerts``: sloscope's own health (spans in, queue, drops, joins, scrapes).
- ``sloscope-upstream-alerts``: one per upstream-contract check, when the upstream stops showing what sloscope's
  numbers assume (:mod:`.upstream_alerts`).

Every series name comes from :mod:`sloscope.conventions`, every objective and period from the spec, every
threshold from :class:`AlertThresholds`. Every alert carries ``severity`` (its class ``page`` or ``ticket`` as
the deployment's label value, ``critical`` or ``warning`` by default: :class:`Conventions`), a ``summary``, a
``description`` templated with the alert's labels and value, and a ``runbook_url`` ``<base>/<AlertName>.md``
(the runbooks are in ``docs/runbooks/``).

The functions return plain data in a stable order; the caller writes the YAML.

The modules, one per job: :mod:`.names` (group and alert names), :mod:`.thresholds` (:class:`AlertThresholds`
and the fixed windows), :mod:`.common` (PromQL and template helpers, the shape of an alert), one module per
group (:mod:`.recording`, :mod:`.budget`, :mod:`.slo_alerts`, :mod:`.predictor_alerts`, :mod:`.pipeline_alerts`,
:mod:`.upstream_alerts`), :mod:`.conventions` (severity values, extra labels, runbook URLs) and
:mod:`.files` (the groups assembled into a rule file or a ``PrometheusRule``).
"""

from __future__ import annotations

from sloscope.generators.rules.budget import budget_rules, period_ratio_rule
from sloscope.generators.rules.conventions import CLASSES, DEFAULT_CONVENTIONS, Conventions, render
from sloscope.generators.rules.files import groups, prometheus_rule, rule_file
from sloscope.generators.rules.names import (
    ABORTS_RISING,
    ALERT_NAMES,
    CONTRACT_ALERTS,
    ELIGIBLE_TRAFFIC_VANISHED,
    ERROR_BUDGET_BURN_PAGE,
    ERROR_BUDGET_BURN_TICKET,
    EVICTING_TRACES,
    FAILURES_WITHOUT_POOL,
    GROUP_PIPELINE_ALERTS,
    GROUP_PREDICTOR_ALERTS,
    GROUP_SLO_ALERTS,
    GROUP_SLO_BUDGET,
    GROUP_SLO_RECORDING,
    GROUP_UPSTREAM_ALERTS,
    INVALID_VALUES,
    JOIN_RATIO_LOW,
    LABEL_VALUES_FOLDED,
    NO_SPANS,
    NOT_SCRAPED,
    POOL_HEADROOM_EXHAUSTED,
    PREDICTOR_BIASED,
    PREDICTOR_CALIBRATION_DRIFT,
    PREDICTOR_DOWN,
    PREDICTOR_MODEL_STALE,
    PREDICTOR_UNTRAINED,
    QUEUE_NEARLY_FULL,
    RECORDS_LOST,
    REFUSING_SPANS,
    SCRAPES_FAILING,
    SERIES_FOLDED,
    SHADOW_PREDICTIONS_FAILING,
    SPANS_DROPPED,
)
from sloscope.generators.rules.pipeline_alerts import pipeline_alerts
from sloscope.generators.rules.predictor_alerts import predictor_alerts
from sloscope.generators.rules.recording import recording_rules
from sloscope.generators.rules.slo_alerts import slo_alerts
from sloscope.generators.rules.thresholds import DEFAULT_THRESHOLDS, AlertThresholds, burn_threshold, is_capped
from sloscope.generators.rules.upstream_alerts import upstream_alerts

__all__ = [
    "ABORTS_RISING",
    "ALERT_NAMES",
    "CLASSES",
    "CONTRACT_ALERTS",
    "DEFAULT_CONVENTIONS",
    "DEFAULT_THRESHOLDS",
    "ELIGIBLE_TRAFFIC_VANISHED",
    "ERROR_BUDGET_BURN_PAGE",
    "ERROR_BUDGET_BURN_TICKET",
    "EVICTING_TRACES",
    "FAILURES_WITHOUT_POOL",
    "GROUP_PIPELINE_ALERTS",
    "GROUP_PREDICTOR_ALERTS",
    "GROUP_SLO_ALERTS",
    "GROUP_SLO_BUDGET",
    "GROUP_SLO_RECORDING",
    "GROUP_UPSTREAM_ALERTS",
    "INVALID_VALUES",
    "JOIN_RATIO_LOW",
    "LABEL_VALUES_FOLDED",
    "NOT_SCRAPED",
    "NO_SPANS",
    "POOL_HEADROOM_EXHAUSTED",
    "PREDICTOR_BIASED",
    "PREDICTOR_CALIBRATION_DRIFT",
    "PREDICTOR_DOWN",
    "PREDICTOR_MODEL_STALE",
    "PREDICTOR_UNTRAINED",
    "QUEUE_NEARLY_FULL",
    "RECORDS_LOST",
    "REFUSING_SPANS",
    "SCRAPES_FAILING",
    "SERIES_FOLDED",
    "SHADOW_PREDICTIONS_FAILING",
    "SPANS_DROPPED",
    "AlertThresholds",
    "Conventions",
    "budget_rules",
    "burn_threshold",
    "groups",
    "is_capped",
    "period_ratio_rule",
    "pipeline_alerts",
    "predictor_alerts",
    "prometheus_rule",
    "recording_rules",
    "render",
    "rule_file",
    "slo_alerts",
    "upstream_alerts",
]
