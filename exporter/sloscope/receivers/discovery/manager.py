"""Runs every pool's discovery sources and keeps the merged target set the scrape loop follows.

Each source reports its whole list; the manager keeps the latest list of each, merges a pool's
lists (the union, one target per ``(pool, pod)``: the first source in the order static, file_sd,
kubernetes wins) and tells its listeners whenever the merged set changes. A source that raises
is logged and restarted after a growing delay; its last list stays in force meanwhile, so a
crash never empties a pool, and it never takes another source down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from sloscope.config import Pool
from sloscope.receivers.discovery import Discovery, Target
from sloscope.receivers.discovery.file_sd import FileSDDiscovery
from sloscope.receivers.discovery.static import StaticDiscovery

__all__ = ["DiscoveryManager", "Listener", "TargetMap", "build_sources", "merge"]

log = logging.getLogger(__name__)

TargetMap = dict[tuple[str, str], Target]
"""The merged targets of every pool, keyed by :attr:`Target.key`."""
Listener = Callable[[TargetMap], None]
"""Called on the event loop with the new merged targets (a copy) after every change; must not block."""


def build_sources(pool: Pool) -> list[Discovery]:
    """The pool's sources in precedence order: static, file_sd, kubernetes (those configured)."""
    targets = pool.targets
    sources: list[Discovery] = []
    if targets.static:
        sources.append(StaticDiscovery(pool.name, targets.static))
    if targets.file_sd is not None:
        sources.append(FileSDDiscovery(pool.name, targets.file_sd))
    if targets.kubernetes is not None:
        # Imported here: the Kubernetes client costs some 10 MiB of resident memory, paid only by a pool that watches.
        from sloscope.receivers.discovery.kubernetes import KubernetesDiscovery

        sources.append(KubernetesDiscovery(pool.name, targets.kubernetes))
    return sources


def merge(lists: Sequence[Sequence[Target]]) -> TargetMap:
    """The union of lists in order, keeping the first target of each key."""
    merged: TargetMap = {}
    for targets in lists:
        for target in targets:
            merged.setdefault(target.key, target)
    return merged


class DiscoveryManager:
    """Starts the sources of ``pools``, merges their reports and notifies listeners of changes.

    ``build`` makes a pool's sources (tests pass their own). A crashed source waits
    ``restart_seconds``, doubled per crash in a row up to ``max_restart_seconds``, before it runs again;
    a run that lasted longer than ``max_restart_seconds`` starts the count again.
    """

    def __init__(
        self,
        pools: Sequence[Pool],
        *,
        build: Callable[[Pool], list[Discovery]] = build_sources,
        restart_seconds: float = 1.0,
        max_restart_seconds: float = 60.0,
    ) -> None:
        self._pools = list(pools)
        self._build = build
        self._restart_seconds = restart_seconds
        self._max_restart_seconds = max_restart_seconds
        self._lists: dict[str, list[list[Target]]] = {}
        self._targets: TargetMap = {}
        self._listeners: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` after every change of the merged targets (not with the current set)."""
        self._listeners.append(listener)

    def targets(self) -> TargetMap:
        """The merged targets of every pool now (a copy)."""
        return dict(self._targets)

    async def start(self) -> None:
        """Build and start every pool's sources; returns at once. A second call does nothing."""
        if self._running or self._tasks:
            return
        self._running = True
        for pool in self._pools:
            sources = self._build(pool)
            self._lists[pool.name] = [[] for _ in sources]
            for index, source in enumerate(sources):
                name = f"discovery {pool.name}[{index}] {type(source).__name__}"
                task = asyncio.create_task(self._supervise(pool.name, index, source, name), name=name)
                self._tasks.append(task)

    async def stop(self) -> None:
        """Cancel every source and wait for them; safe without start and safe twice."""
        self._running = False
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _supervise(self, pool: str, index: int, source: Discovery, name: str) -> None:
        loop = asyncio.get_running_loop()
        crashes = 0

        def update(targets: Sequence[Target]) -> None:
            self._update(pool, index, targets)

        while True:
            started = loop.time()
            try:
                await source.run(update)
                log.error("%s returned; a source runs until cancelled, restarting it", name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s crashed; restarting it, its last targets stay meanwhile", name)
            crashes = 1 if loop.time() - started > self._max_restart_seconds else crashes + 1
            await asyncio.sleep(min(self._restart_seconds * 2 ** (crashes - 1), self._max_restart_seconds))

    def _update(self, pool: str, index: int, targets: Sequence[Target]) -> None:
        if not self._running:
            return  # a report that was already on its way when stop() began
        strays = [target for target in targets if target.pool != pool]
        if strays:
            log.error("a source of pool %s reported targets of another pool; ignoring %s", pool, strays)
            targets = [target for target in targets if target.pool == pool]
        self._lists[pool][index] = list(targets)
        merged: TargetMap = {}
        for lists in self._lists.values():
            merged.update(merge(lists))
        if merged == self._targets:
            return
        self._targets = merged
        for listener in list(self._listeners):
            try:
                listener(dict(merged))
            except Exception:
                log.exception("discovery listener %r failed", listener)
