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

    ``ranks`` are a data-parallel pod's ranks as (rank, port) pairs: llm-d's multi-port data parallelism serves
    rank *i* of a pod on the InferencePool's i-th target port, each rank an endpoint of its own with its own metrics
    page (the EPP's ``<pod>-rank-<i>``, llm-d-router ebab6879 ``pkg/epp/datastore/datastore.go:330-346,519-526``).
    Empty: the pod is one endpoint, rank 0, at ``address``. ``address`` is then the first listed rank's.
    """

    pool: str
    pod: str
    address: str
    interval_seconds: float | None = None
    timeout_seconds: float | None = None
    labels: tuple[tuple[str, str], ...] = ()
    ranks: tuple[tuple[int, int], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.pod)

    def endpoints(self) -> list[tuple[int, str]]:
        """Each (rank, host:port) to scrape: the ranks' ports on the address's host, else rank 0 at the address."""
        if not self.ranks:
            return [(0, self.address)]
        host = self.address.rsplit(":", 1)[0]
        return [(rank, f"{host}:{port}") for rank, port in self.ranks]

    def rank_of(self, address: str | None) -> int | None:
        """The rank serving at ``address`` (host:port, as the EPP's destination endpoint names it), None if none."""
        if address is None:
            return None
        return next((rank for rank, endpoint in self.endpoints() if endpoint == address), None)

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
