"""Caps on distinct values per label and on series per family, so no client can explode a series set.

The first ``limit`` distinct values of a label are admitted, in order of arrival; later ones fold
into ``__other__`` and each fold is counted. First-come admission is deliberate: a ranking that
changes over time would move counts between series and break ``rate()``. :class:`SeriesBudget`
caps what the admitted values still multiply to: the label sets of each family, and of all
families together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from sloscope import conventions as c
from sloscope.conventions import OTHER, MetricDef

Labels = tuple[str, ...]


class LabelGuard:
    """Caps the distinct values of some labels, first come first served; a value past the cap is folded into
    :data:`OTHER`. One guard serves the pipeline thread (request series) and the scrapers (the engines' latency
    series), so its verdicts are taken under a lock."""

    def __init__(self, limits: dict[str, int], on_fold: Callable[[str], None]) -> None:
        self._limits = dict(limits)
        self._admitted: dict[str, set[str]] = {label: set() for label in limits}
        self._on_fold = on_fold
        self._lock = threading.Lock()

    def admit(self, label: str, value: str) -> str:
        admitted = self._admitted.get(label)
        if admitted is None or value in admitted:
            return value
        with self._lock:
            if value in admitted or len(admitted) < self._limits[label]:
                admitted.add(value)
                return value
        self._on_fold(label)
        return OTHER

    def admit_all(self, label: str, values: Sequence[str], occurrences: Sequence[int]) -> list[str]:
        """:meth:`admit` of each of ``values`` (distinct, in order of first arrival) as often as it occurred: the
        verdict on a value is that of its first arrival (an admitted value stays admitted, a refused one is
        refused again, since nothing is ever given back), and each refused arrival is a fold."""
        admitted = self._admitted.get(label)
        if admitted is None:
            return list(values)
        limit, out, folds = self._limits[label], [], 0
        with self._lock:
            for value, count in zip(values, occurrences, strict=True):
                if value in admitted or len(admitted) < limit:
                    admitted.add(value)
                    out.append(value)
                else:
                    folds += count
                    out.append(OTHER)
        for _ in range(folds):
            self._on_fold(label)
        return out


FOLDED_LABELS = frozenset({c.MODEL, c.POOL, c.SLO_CLASS, c.POD, c.TARGET_MODEL})
"""The labels a series cap folds: those whose values come from spans, pages or discovery. The others (routing,
reason, slo, signal, source, ...) have a fixed vocabulary and are kept, so a folded series still says which
reason or SLO its counts are of."""


class _Admission:
    """The label sets a family (or a group of families read as a ratio of each other) holds, with their weight."""

    __slots__ = ("admitted", "members", "used")

    def __init__(self) -> None:
        self.admitted: set[Labels] = set()
        self.used = 0  # series of one member family
        self.members = 1  # families sharing the admission, each holding every admitted label set


class FamilyCap:
    """One family's share of a :class:`SeriesBudget`: admits a new label set, or names the series it folds into.

    Only label sets not yet held are asked about (the families look themselves up first), and a refused label set
    is never remembered: remembering it would itself grow without bound. Refusals are final, since nothing is ever
    given back. ``folded`` is updated under the lock of the family's owner (one writer per family).
    """

    def __init__(self, budget: SeriesBudget, definition: MetricDef, weight: int, admission: _Admission) -> None:
        self.name = definition.exposed_name  # as it is queried: sloscope_requests_total, sloscope_ttft_seconds
        self.weight = weight
        self.folded = 0
        self._budget = budget
        self._admission = admission
        self._fold_at = frozenset(i for i, label in enumerate(definition.labels) if label in FOLDED_LABELS)

    def fold(self, labels: Labels) -> Labels:
        """``labels`` with every capped label ``__other__``: the series that holds what the cap refused."""
        return tuple(OTHER if i in self._fold_at else value for i, value in enumerate(labels))

    def admit(self, labels: Labels, *, observed: bool = True, weight: int | None = None, events: int = 1) -> Labels:
        """``labels`` when the family holds it or the caps leave room for it, else its fold (counted ``events``
        times when ``observed``: a series started at 0 loses no observation)."""
        admission = self._admission
        if labels in admission.admitted:
            return labels
        folded = self.fold(labels)
        if folded == labels:  # nothing to fold (a fixed vocabulary) or already the fold: outside the caps
            return labels
        if self._budget.take(admission, self.weight if weight is None else weight):
            admission.admitted.add(labels)
            return labels
        if observed:
            self.folded += events
        return folded


class SeriesBudget:
    """Caps on the series sloscope creates, per family and in total, with the folds counted per family.

    Per-label caps (:class:`LabelGuard`) bound each label, but reusing admitted values still multiplies:
    50 models x 50 pools x 20 classes x 4 routings x 5 reasons is a million label sets of one family. A
    family admits label sets first come first served while it holds fewer than ``per_family`` series and all
    families together fewer than ``total``; a later one is counted into its fold (the capped labels
    ``__other__``, the others kept), so a family's sum stays right. Series are counted as Prometheus counts
    them: a histogram label set is one series per bucket plus ``_sum`` and ``_count``. The fold series
    themselves are outside the caps: at most one per combination of a family's fixed-vocabulary labels.

    ``sloscope_series_folded_total{family}`` is rendered from the families' counts, each at 0 from the family's
    creation. Admission takes one lock shared by every family (admitting is rare: once per new label set).
    """

    def __init__(self, per_family: int, total: int) -> None:
        self.per_family = per_family
        self.total = total
        self._used = 0
        self._lock = threading.Lock()
        self._families: list[FamilyCap] = []

    def family(self, definition: MetricDef, weight: int = 1, *, share: FamilyCap | None = None) -> FamilyCap:
        """The cap of a family whose label sets are ``weight`` series each. ``share``: a family of the same labels
        read as a ratio with this one (violations over requests), so a label set is held by both or folded in
        both, never split between a real series and ``__other__``."""
        with self._lock:
            if share is not None:
                admission = share._admission  # the same budget's
                admission.members += 1
                self._used += admission.used
            else:
                admission = _Admission()
            cap = FamilyCap(self, definition, weight, admission)
            self._families.append(cap)
        return cap

    def take(self, admission: _Admission, weight: int) -> bool:
        with self._lock:
            cost = weight * admission.members
            if admission.used + weight > self.per_family or self._used + cost > self.total:
                return False
            admission.used += weight
            self._used += cost
            return True

    @property
    def used(self) -> int:
        """Series held by every capped family together (the folds left out)."""
        return self._used

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(c.SERIES_FOLDED.name, c.SERIES_FOLDED.help, labels=c.SERIES_FOLDED.labels)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(c.SERIES_FOLDED.name, c.SERIES_FOLDED.help, labels=c.SERIES_FOLDED.labels)
        folded: dict[str, int] = {}
        for cap in list(self._families):
            folded[cap.name] = folded.get(cap.name, 0) + cap.folded
        for name in sorted(folded):
            family.add_metric([name], float(folded[name]))
        yield family
