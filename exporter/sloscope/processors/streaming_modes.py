"""Whether each pool's EPP runs its latency plugin with ``streamingMode`` on: what the pool's predictions mean.

The ``predicted-latency-producer`` of llm-d-router and of GIE v1.5.0 has ``streamingMode`` off by default
(``predictedlatency/plugin.go``; llm-d-router's README: "TTFT is recorded at EOS and represents the full e2e
latency … TPOT is not trained"), and the charts instantiate it without parameters. Off, the EPP trains the
predictor's TTFT model on end-to-end latency and never gives its TPOT model a sample, so the "TTFT" it predicts is
an end-to-end latency and its TPOT prediction means nothing.

Which mode a pool runs is, in order: what its EPP's page shows once the plugin has predicted
(:attr:`~sloscope.receivers.epp_page.EPPPage.streaming`), else the pool's ``streaming_mode`` setting, else
``predictions.streaming_mode`` (also the mode of requests whose pool no setting names), else off, the upstream
default. A page that stops saying (a restarted EPP, a stale scrape) leaves its last word in force:
the mode changes only with the EPP's configuration.

The map is replaced whole on each change (one reference assignment), so the pipeline thread reads it without a
lock while the event loop writes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NamedTuple

from sloscope import conventions as c

__all__ = ["BASIS_DEFAULT", "BASIS_PAGE", "BASIS_SETTING", "StreamingMode", "StreamingModes", "first_signal"]

BASIS_PAGE = "page"  # the EPP's page showed it
BASIS_SETTING = "setting"  # the pool's streaming_mode setting
BASIS_DEFAULT = "default"  # neither: the upstream default, off

UPSTREAM_DEFAULT = False

log = logging.getLogger(__name__)


def first_signal(streaming: bool) -> str:
    """The signal a pool's predicted "TTFT" stands for: ``ttft`` with streaming on, ``e2e`` with it off."""
    return c.SIGNAL_TTFT if streaming else c.SIGNAL_E2E


class StreamingMode(NamedTuple):
    streaming: bool
    basis: str  # BASIS_PAGE, BASIS_SETTING or BASIS_DEFAULT


class StreamingModes:
    def __init__(self, settings: Mapping[str, bool | None], default: bool | None = None) -> None:
        """``settings``: each configured pool's ``streaming_mode``; ``default``: ``predictions.streaming_mode``, for
        the pools without one and the pools no setting names (None: not set)."""
        self._default = (
            StreamingMode(UPSTREAM_DEFAULT, BASIS_DEFAULT) if default is None else StreamingMode(default, BASIS_SETTING)
        )
        self._by_pool = {
            pool: self._default if setting is None else StreamingMode(setting, BASIS_SETTING)
            for pool, setting in settings.items()
        }
        self._set = dict(self._by_pool)  # what the settings say, kept when a page overrides it

    def tell(self, pool: str, streaming: bool | None) -> None:
        """What ``pool``'s EPP page shows (None: nothing yet); a change is logged once."""
        if streaming is None:
            return
        now = StreamingMode(streaming, BASIS_PAGE)
        before = self.mode(pool)
        if now == before:
            return
        if before.streaming != streaming:
            log.info(
                "Pool %s: the EPP's page shows its latency plugin with streamingMode %s (%s until now): %s",
                pool,
                "on" if streaming else "off",
                f"{'on' if before.streaming else 'off'}, from the {before.basis}",
                "its predicted TTFT is a TTFT, its TPOT a TPOT"
                if streaming
                else "its predicted TTFT is end-to-end latency, its TPOT is not predicted",
            )
        self._by_pool = {**self._by_pool, pool: now}

    def mode(self, pool: str) -> StreamingMode:
        return self._by_pool.get(pool) or self._default

    def streaming(self, pool: str) -> bool:
        return self.mode(pool).streaming

    def contradicted(self, pool: str) -> bool | None:
        """Whether the pool's EPP page shows a mode other than its setting: None while no page spoke or no setting
        names a mode (then the page is simply followed)."""
        now = self.mode(pool)
        setting = self._set.get(pool, self._default)
        if now.basis != BASIS_PAGE or setting.basis != BASIS_SETTING:
            return None
        return now.streaming != setting.streaming

    def modes(self) -> dict[str, StreamingMode]:
        """Every configured pool's mode, and any other pool a page spoke for."""
        return dict(self._by_pool)
