"""Bodies above ``INLINE_BYTES`` are read in a reading thread, smaller ones inline; errors reach the caller."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sloscope.receivers.exposition import ExpositionError, ExpositionParser
from sloscope.receivers.off_loop import INLINE_BYTES, off_loop


def where(text: str) -> str:
    return threading.current_thread().name


def test_a_small_body_is_read_inline_and_a_large_one_in_a_reading_thread() -> None:
    async def scenario() -> tuple[str, str, str]:
        return (
            await off_loop(INLINE_BYTES, where, "x"),
            await off_loop(INLINE_BYTES + 1, where, "x"),
            threading.current_thread().name,
        )

    small, large, loop = asyncio.run(scenario())
    assert small == loop
    assert large.startswith("sloscope-read")


def test_what_the_reading_raises_reaches_the_caller() -> None:
    page = "foo 1\n" * (INLINE_BYTES // 6) + 'foo{a="1" 2\n'  # the last wanted line is broken

    async def scenario() -> None:
        await off_loop(len(page), ExpositionParser({"foo"}).parse, page)

    with pytest.raises(ExpositionError, match="malformed labels"):
        asyncio.run(scenario())
