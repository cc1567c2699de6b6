"""The memory of emitted traces and answered request ids (``processors/recent.py``): two generations, the older
forgotten whole when the newer fills half the limit. The native join's ``Recent`` has the same unit tests
(``native/src/join/recent.rs``); the differential tests hold the two to the same drops."""

from __future__ import annotations

import pytest

from sloscope.processors.recent import Recent


def test_forgets_the_older_half_whole_when_the_newer_fills() -> None:
    recent: Recent[int, int] = Recent(6)
    for k in range(5):
        recent.put(k, k * 10)
    # 0, 1, 2 filled the young generation and became the old one; 3 and 4 are young.
    assert len(recent) == 5 and recent.get(0) == 0
    recent.put(5, 50)  # the young fill: 0, 1, 2 are forgotten
    assert len(recent) == 3 and 2 not in recent and recent.get(3) == 30
    # Taken and put again, an old key is young: it outlives its generation.
    three = recent.take(3)
    assert three == 30
    recent.put(3, three + 1)
    recent.put(6, 60)
    recent.put(7, 70)  # young 3, 6, 7 fill: 4 and 5 are forgotten
    assert (recent.get(3), 4 in recent, recent.take(4)) == (31, False, None)


@pytest.mark.parametrize("limit", range(1, 9))
def test_never_holds_more_than_the_limit_and_always_the_newest(limit: int) -> None:
    recent: Recent[int, None] = Recent(limit)
    for k in range(50):
        recent.put(k, None)
        assert len(recent) <= limit and k in recent
    assert len(recent) >= (limit + 1) // 2  # at least the newer half
