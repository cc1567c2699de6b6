"""Targets written in the settings: reported once, never changing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sloscope.config import StaticTarget
from sloscope.receivers.discovery import Target, Update, sorted_labels
from sloscope.redaction import without_userinfo

__all__ = ["StaticDiscovery"]


class StaticDiscovery:
    """A fixed list from ``pools[].targets.static``; a pod without a name is named by its address (without userinfo)."""

    def __init__(self, pool: str, targets: Sequence[StaticTarget]) -> None:
        self._targets = tuple(_target(pool, target) for target in targets)

    async def run(self, update: Update) -> None:
        """Report the list once, then wait to be cancelled (returning would look like a crash)."""
        update(list(self._targets))
        await asyncio.Event().wait()


def _target(pool: str, target: StaticTarget) -> Target:
    host = target.address.rsplit(":", 1)[0]
    ports = target.rank_ports
    return Target(
        pool=pool,
        pod=target.pod or without_userinfo(target.address),
        address=f"{host}:{ports[0]}" if ports else target.address,
        labels=sorted_labels(target.labels),
        ranks=tuple(enumerate(ports)) if len(ports) > 1 else (),
    )
