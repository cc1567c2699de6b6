"""Each step of shutdown within its own deadline: a step that overruns is abandoned, logged, and the next runs.

Shutdown must end before the pod's kill (``terminationGracePeriodSeconds``), whatever a peer does: a
clean-up step waiting on a trickling connection or a task that ignores cancellation must not keep the
steps after it, which write the records, from running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


async def within(seconds: float, what: str, step: Awaitable[_T]) -> _T | None:
    """``await step``, cancelled after ``seconds``; None (and a warning naming ``what``) when it overran."""
    try:
        return await asyncio.wait_for(step, max(seconds, 0.0))
    except TimeoutError:
        log.warning("shutdown: %s did not finish within %.1fs; going on without it", what, seconds)
        return None
