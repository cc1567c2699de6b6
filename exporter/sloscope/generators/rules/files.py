"""The rule groups in their fixed order, as a Prometheus rule file or as a prometheus-operator
``PrometheusRule``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sloscope.generators.rules.budget import BUDGET_INTERVAL, budget_rules
from sloscope.generators.rules.common import Group
from sloscope.generators.rules.conventions import DEFAULT_CONVENTIONS, Conventions, render
from sloscope.generators.rules.names import (
    GROUP_PIPELINE_ALERTS,
    GROUP_PREDICTOR_ALERTS,
    GROUP_SLO_ALERTS,
    GROUP_SLO_BUDGET,
    GROUP_SLO_RECORDING,
    GROUP_UPSTREAM_ALERTS,
)
from sloscope.generators.rules.pipeline_alerts import pipeline_alerts
from sloscope.generators.rules.predictor_alerts import predictor_alerts
from sloscope.generators.rules.recording import RECORDING_INTERVAL, recording_rules
from sloscope.generators.rules.slo_alerts import slo_alerts
from sloscope.generators.rules.thresholds import DEFAULT_THRESHOLDS, AlertThresholds
from sloscope.generators.rules.upstream_alerts import upstream_alerts
from sloscope.slo.spec import SLOSpec


def groups(
    spec: SLOSpec, *, thresholds: AlertThresholds = DEFAULT_THRESHOLDS, conventions: Conventions = DEFAULT_CONVENTIONS
) -> list[Group]:
    """The rule groups, in evaluation-independent but fixed order; a spec without classes has no SLO alerts. Alerts
    carry the ``conventions``' severities, labels and runbook URLs."""
    out: list[Group] = [
        {"name": GROUP_SLO_RECORDING, "interval": RECORDING_INTERVAL, "rules": recording_rules(spec)},
    ]
    if spec.classes:
        out.append({"name": GROUP_SLO_BUDGET, "interval": BUDGET_INTERVAL, "rules": budget_rules(spec)})
        out.append({"name": GROUP_SLO_ALERTS, "rules": slo_alerts(spec, thresholds)})
    out.append({"name": GROUP_PREDICTOR_ALERTS, "rules": predictor_alerts(thresholds)})
    out.append({"name": GROUP_PIPELINE_ALERTS, "rules": pipeline_alerts(thresholds)})
    out.append({"name": GROUP_UPSTREAM_ALERTS, "rules": upstream_alerts(thresholds)})
    return render(out, conventions)


def rule_file(
    spec: SLOSpec, *, thresholds: AlertThresholds = DEFAULT_THRESHOLDS, conventions: Conventions = DEFAULT_CONVENTIONS
) -> dict[str, Any]:
    """A Prometheus rule file (``rule_files:`` in prometheus.yml; ``promtool check rules`` accepts it)."""
    return {"groups": groups(spec, thresholds=thresholds, conventions=conventions)}


def prometheus_rule(
    spec: SLOSpec,
    *,
    name: str = "sloscope",
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    conventions: Conventions = DEFAULT_CONVENTIONS,
) -> dict[str, Any]:
    """The same groups as a prometheus-operator ``PrometheusRule`` (``monitoring.coreos.com/v1``).

    ``labels`` go on the object's metadata: the Prometheus resource's ``ruleSelector`` usually matches on them.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": groups(spec, thresholds=thresholds)},
    }
