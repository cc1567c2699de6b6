"""Reading scraped pages and peers' JSON answers off the event loop when they are large.

The scrapers, both OTLP receivers and ``/healthz`` share one event loop, and a page may be as large
as ``MAX_PAGE_BYTES`` (16 MiB): parsed on the loop, a page of that size held every listener for
0.4-2.7 s. :func:`off_loop` runs the reading of a body larger than ``INLINE_BYTES`` in a small
thread pool and awaits it; a smaller body is read inline, where it costs less than the hand-over
(the recorded vLLM 0.33 page, 65 kB, parses in ~1 ms; the llm-d EPP page, 174 kB, in ~3 ms and goes
to a thread; 64 KiB of nothing but wanted lines parse in ~9 ms, the most inline reading costs).

Measured with the server's 1 ms switch interval and collector thresholds (``cli._tune_gil``,
``_tune_gc``), as the longest a ticking thread waited while a 16 MiB page was read in another: a page
of wanted lines is 1-2.7 s of Python, which lets other threads run every switch interval (longest
wait 30-40 ms, a collection of the young samples); a page of unread lines is skipped inside the
parser's regex scans, which :class:`~sloscope.receivers.exposition.ExpositionParser` keeps to about
1 MiB each (one scan of 16 MiB held the GIL for 16-26 ms, sliced 3-6 ms). Decoding 16 MiB of UTF-8
is 12-25 ms in one C call, so it moves too. ``json.loads`` of a 1 MiB answer (``MAX_ANSWER_BYTES``)
holds the GIL for 20-30 ms in one C call wherever it runs: the cap is what bounds it. What is read
comes back to the loop, where the scrapers update their histories and counters as before.

The pool has ``THREADS`` threads (reading is CPU-bound and holds the GIL: more threads would not
read faster). Work waiting for a thread is bounded by its callers: the pod scraper holds its
concurrency slot until its page is read, the EPP scraper and the predictor poll read one page at a
time. A cancelled caller drops its work if it has not started; started work runs to its end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from sloscope.threads import name_os_thread

__all__ = ["INLINE_BYTES", "THREADS", "off_loop"]

INLINE_BYTES = 64 * 1024  # a vLLM page (65 kB) is read inline; 64 KiB of wanted lines parse in ~9 ms
THREADS = 2

_P = ParamSpec("_P")
_T = TypeVar("_T")
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


async def off_loop(size: int, read: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """``read(*args, **kwargs)``, in a reading thread when ``size`` (the body's bytes) is above ``INLINE_BYTES``.

    Raises what ``read`` raises.
    """
    if size <= INLINE_BYTES:
        return read(*args, **kwargs)
    # The concurrent future (not run_in_executor): a cancelled caller's queued work is dropped.
    return await asyncio.wrap_future(_executor().submit(read, *args, **kwargs))


def _executor() -> ThreadPoolExecutor:
    """The process's reading threads, started on the first large body (most deployments never see one)."""
    global _pool  # noqa: PLW0603  # one pool per process, shared by every scraper and event loop
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="sloscope-read", initializer=name_os_thread)
        return _pool
