"""How the alerts fit the stack that routes them: severity label values, extra labels, the runbook base URL.

The rule modules write each alert with a severity *class*, ``page`` or ``ticket`` (:data:`~sloscope.generators.
windows.PAGE`): what the alert means for the on-call. :func:`render` turns the classes into the label values the
deployment's Alertmanager routes and inhibits on (``critical`` and ``warning`` by default, as
kube-prometheus-stack's rules and inhibitions use them; Sloth and Pyrra make them settings too), adds the
deployment's extra labels and points ``runbook_url`` at where it publishes the runbooks. The Helm chart does the
same at install time from its values (``templates/prometheusrule.yaml``), from a copy of the rules left in classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sloscope.generators.rules.common import SEVERITY, Group, Rule
from sloscope.generators.windows import PAGE, TICKET

__all__ = ["CLASSES", "DEFAULT_CONVENTIONS", "Conventions", "render"]

DEFAULT_SEVERITIES: dict[str, str] = {PAGE: "critical", TICKET: "warning"}


@dataclass(frozen=True)
class Conventions:
    severities: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SEVERITIES))
    """The severity label value of each class (``page``, ``ticket``)."""
    alert_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels every alert carries besides its own (an alert's own labels win: ``severity``, its SLO's)."""
    runbook_base: str = "docs/runbooks"
    """Prefix of every ``runbook_url``: ``<base>/<AlertName>.md``. Relative by default: where a deployment
    publishes the runbooks cannot be known here."""

    def __post_init__(self) -> None:
        missing = {PAGE, TICKET} - set(self.severities)
        if missing:
            raise ValueError(f"severities: no label value for {', '.join(sorted(missing))}")
        if SEVERITY in self.alert_labels:
            raise ValueError("alert_labels: severity is set by severities")


DEFAULT_CONVENTIONS = Conventions()
CLASSES = Conventions(severities={PAGE: PAGE, TICKET: TICKET})
"""The rules left in severity classes: the chart's copy, which its template renders from its values."""


def render(groups: list[Group], conventions: Conventions) -> list[Group]:
    """The groups with every alert's severity class turned into its label value, the extra labels added and the
    runbook URL under the base (new objects; ``groups`` is left as it was)."""
    return [{**group, "rules": [_rendered(rule, conventions) for rule in group["rules"]]} for group in groups]


def _rendered(rule: Rule, conventions: Conventions) -> Rule:
    if "alert" not in rule:
        return rule  # a recording rule
    labels = {**conventions.alert_labels, **rule["labels"]}
    labels[SEVERITY] = conventions.severities[rule["labels"][SEVERITY]]
    runbook = f"{conventions.runbook_base.rstrip('/')}/{rule['alert']}.md"
    annotations = dict(sorted({**rule["annotations"], "runbook_url": runbook}.items()))
    return {**rule, "labels": dict(sorted(labels.items())), "annotations": annotations}
