"""File descriptors: the listeners' connection caps sized against what the process may open.

Every connection a listener holds is a descriptor, and so is every file, pipe and outbound connection (the
scrapes of pods, EPPs and predictor servers, the record store). A process at its ``RLIMIT_NOFILE`` fails every
``accept`` and ``open`` alike: a flood of slow connections to one listener used to stop the others accepting
and the scrapes connecting. So, as servers do, sloscope raises its soft limit to the hard one at start-up, and
lowers the listeners' caps (``listeners.max_connections``, ``listeners.grpc.max_connections``,
``listeners.backlog``) in proportion when all of them together would not fit under it with a reserve left for
everything else. At a cap a listener closes its longest-waiting idle or header-less connection, or refuses: the
other listeners and the scrapes keep their descriptors.
"""

from __future__ import annotations

import logging
import math
import resource
from dataclasses import dataclass

from sloscope.config import Listeners, Settings

__all__ = ["Budget", "fitted", "raise_soft_limit", "reserve"]

log = logging.getLogger(__name__)

BASE_RESERVE = 64
"""Standard streams, the event loop and the native runtimes' pollers, logs, the store's open files, pipes to
the decoding process, the Python runtime's own."""
PER_POOL = 8
"""A pool's EPP and predictor clients (one connection each per server, a few servers)."""
MIN_CAP = 4
HTTP_LISTENERS = 2  # OTLP/HTTP and /metrics, each with listeners.max_connections


def raise_soft_limit() -> tuple[int, int]:
    """Raises the soft ``RLIMIT_NOFILE`` to the hard one (a server's habit: the soft default of many systems,
    1024, is far below what a busy listener needs); returns the (soft, hard) limits then in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as error:  # a sandbox may refuse: the soft limit stands
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, wanted, error)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def reserve(settings: Settings) -> int:
    """Descriptors kept for everything but the listeners' connections."""
    return BASE_RESERVE + settings.scrape.max_concurrency + 16 + PER_POOL * len(settings.pools)


@dataclass(frozen=True)
class Budget:
    """What the listeners may hold at most, in descriptors, and what they would hold with the settings' caps."""

    limit: int
    reserved: int

    @property
    def available(self) -> int:
        return max(0, self.limit - self.reserved)


def demand(listeners: Listeners) -> int:
    """Descriptors the listeners hold at most: each HTTP listener its cap and up to twice its backlog (connections
    accepted at once before they are admitted), the gRPC one its cap and its backlog."""
    http = listeners.max_connections + 2 * listeners.backlog
    return HTTP_LISTENERS * http + listeners.grpc.max_connections + listeners.backlog


def fitted(listeners: Listeners, budget: Budget) -> Listeners:
    """``listeners`` with their caps lowered in proportion to fit ``budget`` (the same object when they fit)."""
    wanted = demand(listeners)
    if wanted <= budget.available:
        return listeners
    share = budget.available / wanted

    def scaled(value: int) -> int:
        return max(MIN_CAP, math.floor(value * share))

    grpc = listeners.grpc.model_copy(update={"max_connections": scaled(listeners.grpc.max_connections)})
    out = listeners.model_copy(
        update={
            "max_connections": scaled(listeners.max_connections),
            "backlog": scaled(listeners.backlog),
            "grpc": grpc,
        }
    )
    log.warning(
        "the process may open %d files (RLIMIT_NOFILE), %d of them kept for files and outbound connections: the "
        "listeners' caps are lowered to %d connections per HTTP listener, %d on gRPC and a backlog of %d (from "
        "%d, %d and %d); raise the limit to keep them",
        budget.limit,
        budget.reserved,
        out.max_connections,
        grpc.max_connections,
        out.backlog,
        listeners.max_connections,
        listeners.grpc.max_connections,
        listeners.backlog,
    )
    return out
