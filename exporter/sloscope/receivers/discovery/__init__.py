"""Target discovery: which model-server pods of each pool to scrape.

Sources (static lists, Prometheus ``file_sd`` files, the Kubernetes API) each report their whole
current target list whenever it changes; :class:`~sloscope.receivers.discovery.manager.DiscoveryManager`
merges them per pool and tells the scrape loop. A source never raises out of :meth:`Discovery.run`
for a bad file or a failed API call: it logs, counts, keeps its last good list and retries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Discovery", "Target", "Update"]


@dataclass(frozen=True)
class Target:
    """One pod to scrape. ``pod`` is the name spans carry (``k8s.pod.name``); ``address`` is host:port.

    ``interval_seconds`` and ``timeout_seconds`` override the pool's scrape settings for this target
    (file_sd's ``__scrape_interval__`` and ``__scrape_timeout__`` labels, as in Prometheus).
    """

    pool: str
    pod: str
    address: str
    interval_seconds: float | None = None
    timeout_seconds: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.pod)


Update = Callable[[Sequence[Target]], None]
"""Called by a source with its complete current list (not a diff), on the event loop's thread."""


class Discovery(Protocol):
    """A source of targets for one pool."""

    async def run(self, update: Update) -> None:
        """Report the list now and after every change, until cancelled."""
        ...
