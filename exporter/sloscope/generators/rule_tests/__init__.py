"""promtool unit tests of the generated rules (``promtool test rules``), generated beside them.

For every alert: a test group where it fires, with its exact labels and annotations, and one where it must
stay silent (``exp_alerts: []``); alerts with a ``for`` are also checked one evaluation before they fire, as
kubernetes-mixin's tests do (14m silent, 15m firing). The recording rules get ``promql_expr_test`` cases with
exact expected values: 10 violations in 100 requests a minute give an error ratio of 0.1 in every window.

The scenarios derive their inputs from the spec and the :class:`~sloscope.generators.rules.AlertThresholds`
(an error ratio between the ticket and the page thresholds of a class, a coverage beyond the allowed
deviation...), so the tests follow a custom spec. The expected annotations are the rules' own templates
rendered the way Prometheus renders them (``humanize``, ``humanizePercentage``, ``humanizeDuration``): promtool
compares them with what Prometheus itself produced, so a wrong template or a wrong value fails.

Expected values are the mathematically exact ones; ``fuzzy_compare`` lets promtool accept the last-bit
rounding of ``rate()``'s extrapolation (one unit in the last place).

The modules: :mod:`.templates` (the annotation templates rendered as Prometheus does), :mod:`.common` (input
series, test groups, alert cases), one module per rule group (:mod:`.recording`, :mod:`.slo_alerts`,
:mod:`.predictor_alerts`, :mod:`.pipeline_alerts`) and :mod:`.files` (the test file).
"""

from __future__ import annotations

from sloscope.generators.rule_tests.files import rule_tests
from sloscope.generators.rule_tests.slo_alerts import TimeToPage, time_to_page, time_to_page_table
from sloscope.generators.rule_tests.templates import render_template

__all__ = ["TimeToPage", "render_template", "rule_tests", "time_to_page", "time_to_page_table"]
