"""A bounded memory of what was finished most recently: the emitted traces whose late and duplicate spans the
trace assembler recognises, and the request ids model servers answered."""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The keys put most recently, at most ``limit`` of them, kept as two generations: a key goes into the young one;
    when that holds half the limit it becomes the old one and the old one is forgotten whole.

    Forgetting the single oldest key on every insert touched an entry long gone cold each time; a generation is
    forgotten at once (the native join clears it in one pass and reuses its table). The price: between half the
    limit and the limit are remembered, never more. The native join's ``Recent`` (``native/src/join/recent.rs``)
    forgets the same keys at the same time.
    """

    def __init__(self, limit: int) -> None:
        self._half = max(1, (limit + 1) // 2)
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def __contains__(self, key: object) -> bool:
        return key in self._young or key in self._old

    def get(self, key: K) -> V | None:
        if key in self._young:
            return self._young[key]
        return self._old.get(key)

    def take(self, key: K) -> V | None:
        """Removes a key, to be put again (its value updated, and remembered as recent)."""
        if key in self._young:
            return self._young.pop(key)
        return self._old.pop(key, None)

    def put(self, key: K, value: V) -> None:
        """Remembers a key that is not remembered now (``take`` it first)."""
        self._young[key] = value
        if len(self._young) >= self._half:
            self._old, self._young = self._young, {}
