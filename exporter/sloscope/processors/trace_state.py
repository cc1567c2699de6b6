"""What the trace assembler holds per trace: the pending spans, and what it remembers of past ones.

A pending trace keeps its spans with a child index, so a request's subtree and ancestor chain are
found without scanning; spans of emitted requests leave it and are remembered by id only, which
is what tells a retried span (a duplicate) and one arriving under an emitted request (late) from
a later LLM call of the same trace.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from sloscope import conventions as c
from sloscope.records import Span

# What a held span costs, estimated: measured with tracemalloc on decoded vLLM and EPP spans (about
# 1.4 KiB for six kept attributes and 180 characters of keys and strings), plus the trace's indexes.
_SPAN_BYTES = 700
_ATTRIBUTE_BYTES = 100


def span_bytes(span: Span) -> int:
    """The estimated memory of one held span: a fixed part, its strings, and a part per attribute.
    Resource attributes are not counted: the decoder shares one dict among the spans of a resource."""
    size = _SPAN_BYTES + len(span.name) + len(span.status_message) + len(span.tracestate)
    for key, value in span.attributes.items():
        size += _ATTRIBUTE_BYTES + len(key) + _value_bytes(value)
    return size


def _value_bytes(value: object) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list):
        return sum(_ATTRIBUTE_BYTES + _value_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_ATTRIBUTE_BYTES + len(k) + _value_bytes(v) for k, v in value.items())
    return 0


@dataclass(slots=True)
class Footprint:
    """Estimated bytes of the spans every pending trace holds (the total ``join.max_pending_bytes`` caps)."""

    total: int = 0


@dataclass(slots=True)
class PendingTrace:
    first_seen: float
    footprint: Footprint = field(default_factory=Footprint)  # shared by every pending trace of an assembler
    size: int = 0  # estimated bytes of the spans held
    spans: dict[str, Span] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)  # parent span id -> child span ids held
    anchors: dict[str, float] = field(default_factory=dict)  # anchor span id -> arrival, not yet emitted
    gateways: dict[str, None] = field(default_factory=dict)  # gateway span ids not yet resolved
    bare: deque[str] = field(default_factory=deque)  # spans that carry nothing: the first to go when full
    request_ids: list[str] = field(default_factory=list)  # companion request ids indexed for this trace
    anchor_request_ids: list[str] = field(default_factory=list)  # anchors waiting for a companion by id
    lent: bool = False  # a companion of this trace completed an anchor of another trace
    emitted: bool = False  # a request of this trace was emitted

    def add(self, span: Span, size: int) -> None:
        """Holds ``span``, whose estimated size (:func:`span_bytes`) the caller already computed."""
        self.spans[span.span_id] = span
        if span.parent_span_id:
            self.children.setdefault(span.parent_span_id, []).append(span.span_id)
        self._grow(size)

    def remove(self, span_id: str) -> None:
        span = self.spans.pop(span_id)
        siblings = self.children.get(span.parent_span_id)
        if siblings is not None:
            siblings.remove(span_id)
            if not siblings:
                del self.children[span.parent_span_id]
        self._grow(-span_bytes(span))

    def _grow(self, size: int) -> None:
        self.size += size
        self.footprint.total += size

    def release(self) -> None:
        """The trace leaves the assembler with whatever it still holds: its bytes no longer count."""
        self._grow(-self.size)

    def clear(self) -> None:
        """Every span left (their request was emitted); gateways, bare spans and anchors with them."""
        self.release()
        self.spans.clear()
        self.children.clear()
        self.anchors.clear()
        self.gateways.clear()
        self.bare.clear()

    def ancestors(self, span: Span) -> list[Span]:
        """The held ancestors of ``span``, nearest first, up to the first one missing."""
        chain: list[Span] = []
        seen = {span.span_id}
        parent = span.parent_span_id
        while parent and parent not in seen:
            above = self.spans.get(parent)
            if above is None:
                break
            chain.append(above)
            seen.add(parent)
            parent = above.parent_span_id
        return chain

    def chain_complete(self, span: Span) -> bool:
        """True when every ancestor of ``span`` up to a root span is held (a parent cycle never is)."""
        chain = self.ancestors(span)
        top = chain[-1] if chain else span
        return not top.parent_span_id

    def descendants(self, span_id: str) -> list[Span]:
        out: list[Span] = []
        stack = list(self.children.get(span_id, ()))
        seen = {span_id}
        while stack:
            child_id = stack.pop()
            if child_id in seen:
                continue
            seen.add(child_id)
            out.append(self.spans[child_id])
            stack.extend(self.children.get(child_id, ()))
        return out


SEEN, CLAIMED, PARENT = 1, 2, 4  # the lists a remembered span id is in, as bits of its marks


@dataclass(slots=True)
class SeenSpans:
    """What is remembered of a trace's spans once they left the pending trace: the ids seen (a second copy is a
    duplicate), those claimed by an emitted request (a child of one is late) and their parents (one arriving now is
    late). One entry an id, marked with its lists, in order of first mention: a list over its cap takes its mark
    from its oldest entries, and an entry with no mark left is forgotten (the native join's ``seen.rs`` the same)."""

    marks: dict[str, int] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=lambda: {SEEN: 0, CLAIMED: 0, PARENT: 0})

    def remember(self, spans: Iterable[Span], *, claimed: bool, cap: int) -> None:
        for span in spans:
            self._mark(span.span_id, SEEN)
            if claimed:
                self._mark(span.span_id, CLAIMED)
                if span.parent_span_id:
                    self._mark(span.parent_span_id, PARENT)
        for bit, count in self.counts.items():
            if count > cap:  # a trace that never ends forgets its oldest spans first
                self._unmark_oldest(bit, count - cap)

    def _mark(self, span_id: str, bit: int) -> None:
        marks = self.marks.get(span_id, 0)
        if not marks & bit:
            self.marks[span_id] = marks | bit
            self.counts[bit] += 1

    def _unmark_oldest(self, bit: int, over: int) -> None:
        self.counts[bit] -= over
        for span_id, marks in list(self.marks.items()):
            if not over:
                break
            if marks & bit:
                over -= 1
                if marks == bit:
                    del self.marks[span_id]
                else:
                    self.marks[span_id] = marks & ~bit

    def verdict(self, span: Span) -> str | None:
        marks = self.marks.get(span.span_id, 0)
        if marks & SEEN:
            return c.DROP_DUPLICATE
        if marks & PARENT or self.marks.get(span.parent_span_id, 0) & CLAIMED:
            return c.DROP_LATE
        return None
