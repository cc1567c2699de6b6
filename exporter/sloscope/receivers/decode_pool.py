"""Decoding OTLP bodies off the event loop: the loop hands bytes over and awaits spans.

Both receivers and ``/healthz`` share one event loop, so a decode that runs on it stalls them all
(a 7 MB OTLP/JSON body held every listener for 7 s). Measured on 8 MiB bodies (the default
``limits.max_request_bytes``): inflating takes ~7 ms and releases the GIL; protobuf parsing holds
the GIL for ~20 ms in one C call, then flattening into spans is ~370 ms of Python, which lets other
threads run every switch interval. A thread is enough for those. OTLP/JSON is not: ``json.loads``
alone holds the GIL for ~210 ms in one C call (and ``ParseDict`` is ~2 s of Python), and handing
the decoded spans back from a process is as bad (unpickling them holds the GIL for ~110 ms). So a
JSON body is parsed in a worker process into protobuf bytes, which a thread then decodes like any
protobuf body. ``limits.json_decode_processes: 0`` parses JSON in a thread instead.

The thread pool is bounded (``limits.decode_threads``); work waiting for a thread is bounded by
the bytes in flight (:mod:`sloscope.receivers.in_flight`). The worker process is spawned (never
forked: gRPC's threads do not survive a fork) on the first JSON body, and replaced if it dies.

With ``join.engine: native`` both encodings are decoded by :class:`~sloscope.receivers.native_decode.NativeDecoder`
in a thread, which releases the GIL, so the threads decode in parallel and the worker process is not used;
only an OTLP/JSON body the native decoder leaves to the reference (malformed, or unusually written) takes
the Python path above, and its protobuf bytes are then decoded natively.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any, TypeVar

from sloscope.receivers.native_decode import NativeDecoder
from sloscope.receivers.otlp_decode import Decoded, decode_json, decode_protobuf, decompress, parse_json
from sloscope.threads import name_os_thread
from sloscope.threads import start as start_thread

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_ORPHAN_POLL_SECONDS = 1.0


def _decode_then(
    then: Callable[[Decoded], _T], body: bytes, encoding: str, limit: int, decode: Callable[[bytes], Decoded]
) -> _T:
    """Inflate and decode one body, then hand the spans on (in a decoding thread)."""
    return then(decode(decompress(body, encoding, limit)))


def _decode_protobuf_then(then: Callable[[Decoded], _T], message: bytes, protobuf: Callable[[bytes], Decoded]) -> _T:
    return then(protobuf(message))


class _Unsure:
    """The native JSON decoder left the body to the reference."""


def _native_json_then(
    then: Callable[[Decoded], _T], body: bytes, encoding: str, limit: int, native: NativeDecoder
) -> _T | _Unsure:
    decoded = native.json_natively(decompress(body, encoding, limit))
    return _Unsure() if decoded is None else then(decoded)


def json_to_protobuf(body: bytes, encoding: str, limit: int) -> bytes:
    """Inflate and parse one OTLP/JSON body into protobuf bytes (in the worker process)."""
    message: bytes = parse_json(decompress(body, encoding, limit)).SerializeToString()
    return message


def _worker_start(server_pid: int) -> None:
    """Ctrl-C at a terminal reaches the whole process group: the server decides when its worker stops.
    A parsed document is one large tree that lives until it is converted: with the default thresholds
    the collector traversed it again and again while it grew (full collections of 25-210 ms, several
    per 8 MiB body), so collections run as rarely as in the server (see ``cli._tune_gc``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    start_thread(_exit_when_orphaned, "sloscope-orphan-watch", server_pid)


def _exit_when_orphaned(server_pid: int) -> None:
    """A server killed with SIGKILL never shuts its pool down, and the worker holds both ends of its own
    call queue's pipe, so it would wait for work forever: it leaves once it is no longer the server's child."""
    while os.getppid() == server_pid:
        time.sleep(_ORPHAN_POLL_SECONDS)
    os._exit(0)


class Decoder:
    def __init__(
        self,
        keep: frozenset[str] | None,
        max_request_bytes: int,
        *,
        threads: int,
        json_processes: int,
        native: NativeDecoder | None = None,
    ) -> None:
        self._native = native
        self._protobuf: Callable[[bytes], Decoded] = partial(decode_protobuf, keep=keep)
        self._json: Callable[[bytes], Decoded] = partial(decode_json, keep=keep)
        if native is not None:
            # (JSON is tried natively first, in decode(); these are for the bodies it leaves to the reference)
            self._protobuf, self._json = native.protobuf, native.json_by_reference
        self._limit = max_request_bytes
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="sloscope-decode", initializer=name_os_thread)
        self._json_processes = json_processes
        self._processes: ProcessPoolExecutor | None = None
        self._starting = threading.Lock()
        self._closed = False

    async def decode(self, body: bytes, encoding: str, *, is_json: bool, then: Callable[[Decoded], _T]) -> _T:
        """Decodes ``body`` and calls ``then`` with the spans, in a decoding thread: validating and queueing
        twenty thousand spans is itself ~200 ms of Python. Raises what the decoder raises
        (MalformedPayloadError, PayloadTooLargeError)."""
        if is_json and self._native is not None:
            result: _T | _Unsure = await self._run(
                self._threads, _native_json_then, then, body, encoding, self._limit, self._native
            )
            if not isinstance(result, _Unsure):
                return result
        if is_json and self._json_processes > 0:
            try:
                message = await self._run(self._worker(), json_to_protobuf, body, encoding, self._limit)
            except BrokenProcessPool:
                self._worker_died()
            else:
                return await self._run(self._threads, _decode_protobuf_then, then, message, self._protobuf)
        decode = self._json if is_json else self._protobuf
        return await self._run(self._threads, _decode_then, then, body, encoding, self._limit, decode)

    def decode_blocking(self, body: bytes, encoding: str, *, is_json: bool) -> Decoded:
        """:meth:`decode` for a caller on a thread of its own (the native HTTP front's): the same decoders, and the
        worker process for OTLP/JSON that the native decoder leaves to the reference, waited for here."""
        if is_json and self._native is not None:
            decoded = self._native.json_natively(decompress(body, encoding, self._limit))
            if decoded is not None:
                return decoded
        if is_json and self._json_processes > 0:
            try:
                message = self._worker().submit(json_to_protobuf, body, encoding, self._limit).result()
            except BrokenProcessPool:
                self._worker_died()
            else:
                return self._protobuf(message)
        decode = self._json if is_json else self._protobuf
        return decode(decompress(body, encoding, self._limit))

    @staticmethod
    async def _run(executor: Executor, fn: Callable[..., _T], *args: Any) -> _T:
        # Awaiting the concurrent future (not run_in_executor) so that a cancelled request still lets
        # queued work be dropped, and running work finish, without the loop waiting for it.
        return await asyncio.wrap_future(executor.submit(fn, *args))

    def _worker_died(self) -> None:
        """The worker died (killed for memory?): a new one for the next body, this one decoded in a thread."""
        log.warning("the OTLP/JSON decoding process died; starting another, this body decoded in a thread")
        self._processes = None

    def _worker(self) -> ProcessPoolExecutor:
        with self._starting:  # the event loop and the native HTTP front's threads may ask at once
            return self._started_worker()

    def _started_worker(self) -> ProcessPoolExecutor:
        if self._processes is None:
            if self._closed:
                raise RuntimeError("decoder closed")
            self._processes = ProcessPoolExecutor(
                self._json_processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start,
                initargs=(os.getpid(),),
            )
        return self._processes

    def close(self) -> None:
        """Drops queued work and lets running work finish in the background; safe twice."""
        self._closed = True
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)
            self._processes = None
