"""Target discovery: which model-server pods of each pool to scrape.

Sources (static lists, Prometheus ``file_sd`` files, the Kubernetes API) each report their whole
current target list whenever it changes; :class:`~sloscope.receivers.discovery.manager.DiscoveryManager`
merges them per pool and tells the scrape loop. A source never raises out of :meth:`Discovery.run`
for a bad file or a failed API call: it logs, counts, keeps its last good list and retries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Discovery", "Target", "Update", "sorted_labels"]


@dataclass(frozen=True)
class Target:
    """One pod to scrape. ``pod`` is the name spans carry (``k8s.pod.name``); ``address`` is host:port.

    ``interval_seconds`` and ``timeout_seconds`` override the pool's scrape settings for this target
    (file_sd's ``__scrape_interval__`` and ``__scrape_timeout__`` labels, as in Prometheus).
    ``labels`` are the pod's labels (Kubernetes metadata labels, a file_sd group's labels, a static
    target's ``labels``), sorted by name: the EPP reads a pod's role (``llm-d.ai/role``) and engine
    (``llm-d.ai/engine-type``) from them, and so does sloscope. A tuple, so that a target stays hashable.
    """

    pool: str
    pod: str
    address: str
    interval_seconds: float | None = None
    timeout_seconds: float | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.pod)

    def label(self, name: str) -> str | None:
        """The value of the pod label ``name``, None when the pod has none."""
        return next((value for key, value in self.labels if key == name), None)


def sorted_labels(labels: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """``labels`` as a :attr:`Target.labels` value."""
    return tuple(sorted((labels or {}).items()))


Update = Callable[[Sequence[Target]], None]
"""Called by a source with its complete current list (not a diff), on the event loop's thread."""


class Discovery(Protocol):
    """A source of targets for one pool."""

    async def run(self, update: Update) -> None:
        """Report the list now and after every change, until cancelled."""
        ...
