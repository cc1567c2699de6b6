"""Generators: the SLO spec and the series definitions turned into Prometheus rules and Grafana dashboards.

Like Sloth (an SLO spec turned into rules by a small generator) and kubernetes-mixin (one config drives
dashboards and alerts): every name comes from :mod:`sloscope.conventions`, every objective and period from
the SLO spec, so the generated files cannot drift from what the exporter publishes. ``sloscope build``
writes them; the output for the built-in spec is committed under ``dashboards/`` and ``alerts/`` and a test
fails when it is stale.
"""

RULES_FILE = "sloscope-rules.yaml"
"""The plain Prometheus rule file under ``alerts/`` (what a ``rule_files:`` entry loads)."""
