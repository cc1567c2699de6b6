"""The service as a graph of components: declared with the components each hands its data to, started
downstream first and stopped upstream first.

Started downstream first, a component never hands data to one that is not running yet; stopped upstream
first, each one drains into a neighbour that is still there (the receivers stop taking spans, the pipeline
drains into the publishers, the shadow predictor's queue into the record sinks, the sinks write, and /metrics
goes last, so a final scrape reads everything). The order is the declaration order wherever the edges leave a
choice, so it is the same on every run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

__all__ = ["Component", "Graph"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Component:
    """One part of the service. ``start()`` makes it run; ``stop(deadline)`` makes it hand on what it holds and
    end by ``deadline`` (the event loop's clock), returning False when it could not finish in time. ``feeds``:
    the components it hands data to."""

    name: str
    start: Callable[[], Awaitable[None]]
    stop: Callable[[float], Awaitable[bool]]
    feeds: tuple[str, ...] = ()


class Graph:
    def __init__(self, components: Sequence[Component], grace_seconds: float) -> None:
        """``grace_seconds``: how long a stop after a failed start may take."""
        self.grace_seconds = grace_seconds
        self.components = {component.name: component for component in components}
        if len(self.components) != len(components):
            raise ValueError("two components of the service share a name")
        self.start_order = _downstream_first(components)
        self._started: list[Component] = []
        self._stopped: bool | None = None

    async def start(self) -> None:
        """Start every component, downstream first. If one fails, those already started are stopped (upstream
        first, within the grace) and the error is raised."""
        for component in self.start_order:
            self._started.append(component)  # a failed start still stops what it began
            try:
                await component.start()
            except BaseException:
                log.error("%s failed to start; stopping what started", component.name)
                await self.stop(asyncio.get_running_loop().time() + self.grace_seconds)
                raise

    async def stop(self, deadline: float) -> bool:
        """Stop every started component, upstream first, each by ``deadline``; True when all finished in time.
        Safe twice: the second call returns the first one's answer."""
        if self._stopped is not None:
            return self._stopped
        finished = True
        for component in reversed(self._started):
            finished = await component.stop(deadline) and finished
        self._stopped = finished
        return finished


def _downstream_first(components: Sequence[Component]) -> list[Component]:
    """Every component after all it feeds; ties in declaration order. ValueError on an unknown name or a cycle."""
    names = [component.name for component in components]
    for component in components:
        for target in component.feeds:
            if target not in names:
                raise ValueError(f"{component.name} feeds {target}, which is not a component of the service")
    by_name = {component.name: component for component in components}
    order: list[Component] = []
    placed: set[str] = set()
    while len(order) < len(components):
        ready = [
            name for name in names if name not in placed and all(target in placed for target in by_name[name].feeds)
        ]
        if not ready:
            waiting = [name for name in names if name not in placed]
            raise ValueError(f"the service's components feed each other in a cycle: {', '.join(waiting)}")
        placed.add(ready[0])
        order.append(by_name[ready[0]])
    return order
