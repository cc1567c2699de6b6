"""Reading a Prometheus text page into samples, and summing the series of a family whose labels match."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def page(url: str, token: str | None = None) -> str:
    """The text of a /metrics page, with a bearer token when one is given."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


def samples(text: str) -> Samples:
    """Every sample of the page keyed by (name, labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def total(values: Samples, name: str, **labels: str) -> float:
    """Sum of every sample named ``name`` whose labels include ``labels``; 0 when there is none."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in values.items() if n == name and wanted <= ls)


def grown(after: Samples, before: Samples, name: str, **labels: str) -> float:
    """How much :func:`total` grew from the ``before`` page to the ``after`` one."""
    return total(after, name, **labels) - total(before, name, **labels)


def label_values(values: Samples, name: str, label: str) -> set[str]:
    """The values ``label`` takes among the samples named ``name``."""
    return {dict(ls)[label] for (n, ls), _ in values.items() if n == name and label in dict(ls)}
