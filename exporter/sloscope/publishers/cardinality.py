"""A cap on distinct values per label, so a client sending random model names cannot explode a series set.

The first ``limit`` distinct values of a label are admitted, in order of arrival; later ones fold
into ``__other__`` and each fold is counted. First-come admission is deliberate: a ranking that
changes over time would move counts between series and break ``rate()``.
"""

from __future__ import annotations

from collections.abc import Callable

from sloscope.conventions import OTHER


class LabelGuard:
    def __init__(self, limits: dict[str, int], on_fold: Callable[[str], None]) -> None:
        self._limits = dict(limits)
        self._admitted: dict[str, set[str]] = {label: set() for label in limits}
        self._on_fold = on_fold

    def admit(self, label: str, value: str) -> str:
        admitted = self._admitted.get(label)
        if admitted is None or value in admitted:
            return value
        if len(admitted) < self._limits[label]:
            admitted.add(value)
            return value
        self._on_fold(label)
        return OTHER
