"""A targeted parser for scraped ``/metrics`` pages: only the configured families, everything else skipped.

The scrapers read a handful of families from pages of hundreds of lines (a vLLM page has about 650; the
model-server state needs four of them). ``prometheus_client.parser`` tokenizes every line in Python,
which costs about 10 ms per vLLM page; this parser looks for the wanted names at line starts with one
compiled regular expression over the whole page, so the lines of other families are never split,
tokenized or even visited one by one in Python. The lines it does find are parsed strictly.

Formats: the Prometheus text format 0.0.4 and OpenMetrics 1.0 text (``openmetrics=True``; the scraper
knows which from the response's ``Content-Type``, see :func:`is_openmetrics`). Within the lines of a
wanted family it handles everything both formats allow: label values with the escapes ``\\\\``, ``\\"``
and ``\\n`` and containing ``,`` ``}`` ``=`` ``#``, any float spelling (``1``, ``1.0``, ``1e3``,
``+Inf``, ``-Inf``, ``NaN``), optional timestamps, exemplars after `` # `` (OpenMetrics), blanks around
tokens and at line ends, CRLF line ends, and names with colons. Comments, ``HELP``, ``TYPE`` and
``UNIT`` lines and blank lines are skipped like every unwanted line.

Which samples a wanted name selects is decided by the sample's name alone, never by ``TYPE`` lines: the
latency predictor's training server writes no ``TYPE`` lines at all, and a name rule costs nothing per
line. A wanted name ``F`` selects the samples named ``F`` and ``F`` plus one of the suffixes the formats
derive sample names with (:data:`SUFFIXES`: ``F_bucket``, ``F_count``, ``F_sum`` of a histogram,
``F_total`` of an OpenMetrics counter, ...). A sample whose name is itself wanted belongs to that name.

Results agree with ``prometheus_client``'s parsers sample for sample (tests/unit/receivers/test_exposition.py
compares them on the shared fixture pages and on generated pages), with these differences:

- values are ``float`` (the reference returns ``int`` for integer spellings: equal below 2**53), and
  timestamps are seconds as ``float`` in both formats (the reference: seconds, or ``Timestamp``);
- names are kept as written: the reference renames a text-format counter's sample ``F`` to ``F_total``;
- stricter where neither format allows the input: extra tokens after the timestamp, an exemplar in the
  text format, a text-format timestamp that is not integer milliseconds, a leading comma or a colon in
  a label block (the reference reads all of these, some into wrong values);
- more lenient where it costs nothing to be: CRLF and extra blanks in OpenMetrics; OpenMetrics'
  structural rules (bucket order, one TYPE per family, where exemplars may appear) are not checked,
  since they concern whole families, not the lines read here;
- the reference reads the OpenMetrics timestamp ``-0.5`` as ``+0.5``; this parser reads ``-0.5``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

__all__ = ["SCAN_CHARS", "SUFFIXES", "ExpositionError", "ExpositionParser", "Sample", "is_openmetrics"]

SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
"""Sample-name suffixes that still belong to the family named without them (counter, histogram,
summary, gauge histogram and OpenMetrics info samples)."""

SCAN_CHARS = 1 << 20
"""Characters of a page one step of the line scan covers (~1.3 ms of unread lines on the machine measured)."""

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

# One quoted label value: any character but a quote, a backslash or a line end, or a backslash pair.
# A backslash before another character than \ " n is kept as written, as the Prometheus server and
# prometheus_client do (the Go expfmt library would refuse the line).
_QUOTED = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_PAIR = rf"[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*{_QUOTED}"
# A label block as the text format allows it: blanks around every token and one trailing comma.
_LABELS = rf"\{{[ \t]*(?:{_PAIR}(?:[ \t]*,[ \t]*{_PAIR})*[ \t]*,?[ \t]*)?\}}"
_TOKEN = r"[^ \t\r\n]+"
# The rest of a line after the metric name: labels (or at least one blank), value, timestamp. A value
# never starts with "{", so that a broken label block is reported as such, not as a strange value.
_TAIL = (
    rf"(?:[ \t]*({_LABELS})[ \t]*|[ \t]+)"  # 1: the label block, braces included
    r"([^ \t\r\n{][^ \t\r\n]*)"  # 2: the value
    r"(?:[ \t]+([^ \t\r\n#][^ \t\r\n]*))?"  # 3: the timestamp
)
_END = r"[ \t]*\r?(?=\n|\Z)"
_TEXT_TAIL = re.compile(_TAIL + _END)
_OPENMETRICS_TAIL = re.compile(
    _TAIL
    + rf"(?:[ \t]+\#[ \t]+{_LABELS}[ \t]*({_TOKEN})(?:[ \t]+({_TOKEN}))?)?"  # 4, 5: exemplar value, timestamp
    + _END
)
_LABEL_BLOCK = re.compile(rf"[ \t]*{_LABELS}")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}
_EOF = "# EOF"
_EOF_END = re.compile(r"\r?(?:\n|\Z)")


class Sample(NamedTuple):
    """One sample of a wanted family, as written on the page (label values unescaped)."""

    family: str  # the wanted name that selected it
    name: str  # the sample's own name, e.g. ``F_bucket``
    labels: dict[str, str]  # ``le`` and ``quantile`` stay strings as written: ``"1.0"``, ``"+Inf"``
    value: float
    timestamp: float | None  # seconds since the epoch, in both formats


class ExpositionError(ValueError):
    """A line of a wanted family (or an OpenMetrics page's end) is malformed.

    The scrape loop counts the page as a failed scrape rather than keep part of it: a page that is
    wrong in one wanted line cannot be trusted in the others. ``line`` is 1-based.
    """

    def __init__(self, line: int, reason: str, text: str = "") -> None:
        self.line = line
        self.reason = reason
        excerpt = f": {text[:200]!r}" if text else ""
        super().__init__(f"line {line}: {reason}{excerpt}")


def is_openmetrics(content_type: str) -> bool:
    """Whether a response's ``Content-Type`` is OpenMetrics text (anything else is read as text 0.0.4)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/openmetrics-text"


class ExpositionParser:
    """Extracts the samples of a fixed set of families from exposition text; build once per target kind.

    The constructor compiles the set into one regular expression and a name table, so ``parse`` does
    no per-call set-up. Instances hold no state between calls and can be shared between threads.
    """

    __slots__ = ("_by_name", "_first_line", "_later_lines", "families")

    def __init__(self, families: Iterable[str]) -> None:
        self.families = frozenset(families)
        if not self.families:
            raise ValueError("an exposition parser needs at least one wanted family")
        invalid = sorted(f for f in self.families if not _METRIC_NAME.fullmatch(f))
        if invalid:
            raise ValueError(f"not metric names: {invalid}")
        # Suffixed names first, so that a wanted name that happens to carry a suffix keeps its own samples.
        self._by_name = {family + suffix: family for family in self.families for suffix in SUFFIXES}
        self._by_name.update((family, family) for family in self.families)
        # A line is a candidate when it starts (after blanks) with a wanted name; the whole name is
        # captured and looked up, so "F_by_reason" is skipped without being parsed. The pattern
        # begins with a literal line feed, which lets the regex engine jump from line to line.
        # OpenMetrics' "# EOF" is found by the same scan, which visits every line start anyway.
        candidate = rf"[ \t]*({_prefix_pattern(self.families)}[a-zA-Z0-9_:]*|{_EOF})"
        self._first_line = re.compile(candidate)
        self._later_lines = re.compile("\n" + candidate)

    def parse(self, text: str, *, openmetrics: bool = False) -> list[Sample]:
        """The samples of the wanted families in page order; raises :class:`ExpositionError`.

        Lines of other families are not parsed, so garbage there goes unnoticed, as it should: the
        scrape only depends on the wanted lines. An OpenMetrics page must end with ``# EOF``, which
        tells a complete page from one cut off in transit.
        """
        tail = _OPENMETRICS_TAIL if openmetrics else _TEXT_TAIL
        by_name = self._by_name
        samples: list[Sample] = []
        for match in self._candidates(text):
            name = match.group(1)
            family = by_name.get(name)
            if family is not None:
                samples.append(_read_sample(text, match, family, tail, openmetrics))
            elif name == _EOF and openmetrics and _EOF_END.match(text, match.end()):
                _check_after_eof(text, match.end())
                return samples
            # else an unwanted family whose name starts like a wanted one, or a text-format comment
        if openmetrics:
            raise ExpositionError(text.count("\n") + 1, "OpenMetrics page without a final # EOF line")
        return samples

    def _candidates(self, text: str) -> Iterator[re.Match[str]]:
        """The line starts that name a wanted family (or ``# EOF``), in page order.

        The scan runs over slices of about ``SCAN_CHARS`` ending before a line feed, so that each step
        of it (one C call, which holds the GIL throughout) is bounded: a single search through 16 MiB
        of unread lines held it for ~21 ms, during which no other thread, the event loop included,
        could run. A slice ends before a line feed, so no line start or name is cut in two.
        """
        first = self._first_line.match(text)
        if first is not None:
            yield first
        start, size = 0, len(text)
        while start < size:
            end = text.find("\n", start + SCAN_CHARS)
            end = size if end < 0 else end
            yield from self._later_lines.finditer(text, start, end)
            start = end


def _read_sample(text: str, match: re.Match[str], family: str, tail: re.Pattern[str], openmetrics: bool) -> Sample:
    """The sample on the line whose metric name ``match`` found; raises :class:`ExpositionError`."""
    name = match.group(1)
    found = tail.match(text, match.end())
    if found is None:
        raise _error(text, match.start(1), _diagnose(text, match.end(), openmetrics))
    labels_text, value_text, timestamp_text = found.group(1, 2, 3)
    labels: dict[str, str] = {}
    if labels_text is not None and len(labels_text) > 2:
        pairs = _LABEL_PAIR.findall(labels_text)
        if "\\" in labels_text:
            pairs = [(k, _ESCAPE.sub(_unescape, v) if "\\" in v else v) for k, v in pairs]
        labels = dict(pairs)
        if len(labels) != len(pairs):
            raise _error(text, match.start(1), "duplicate label name")
        if "__name__" in labels:
            raise _error(text, match.start(1), "__name__ label beside a metric name")
    value = _number(value_text)
    if value is None:
        raise _error(text, match.start(1), f"invalid value {value_text!r}")
    timestamp = None
    if timestamp_text is not None:
        timestamp = _timestamp(timestamp_text, openmetrics)
        if timestamp is None:
            raise _error(text, match.start(1), f"invalid timestamp {timestamp_text!r}")
    if openmetrics and found.group(4) is not None:
        exemplar_timestamp = found.group(5)
        if _number(found.group(4)) is None or (
            exemplar_timestamp is not None and _timestamp(exemplar_timestamp, True) is None
        ):
            raise _error(text, match.start(1), "invalid exemplar value or timestamp")
    return Sample(family, name, labels, value, timestamp)


def _prefix_pattern(names: Iterable[str]) -> str:
    """A pattern matching any of ``names`` at its start, as a trie: ``a(?:b|c)`` rather than ``ab|ac``.

    The regex engine tries the alternatives of a flat alternation one after the other at every line,
    so its cost grows with the number of wanted names (four times slower with a hundred names on a
    vLLM page); a trie reads each character of a line start once. A name that extends another wanted
    name is left out: the caller matches the rest of the name anyway.
    """
    root: dict[str, dict[str, Any]] = {}
    for name in names:
        node = root
        for char in name:
            node = node.setdefault(char, {})
        node[""] = {}

    def alternatives(node: dict[str, dict[str, Any]]) -> str:
        if "" in node:
            return ""
        branches = [re.escape(char) + alternatives(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return alternatives(root)


def _number(token: str) -> float | None:
    """A sample value: what ``float`` reads, but only in ASCII and without ``_`` digit separators."""
    if "_" in token or not token.isascii():
        return None
    try:
        return float(token)
    except ValueError:
        return None


def _timestamp(token: str, openmetrics: bool) -> float | None:
    """Seconds: OpenMetrics writes seconds (any finite number), the text format integer milliseconds."""
    if "_" in token or not token.isascii():
        return None
    try:
        if openmetrics:
            seconds = float(token)
            return seconds if math.isfinite(seconds) else None
        return int(token) / 1000
    except ValueError:
        return None


def _unescape(match: re.Match[str]) -> str:
    return _UNESCAPED.get(match.group(1), match.group(0))


def _check_after_eof(text: str, end_of_eof: int) -> None:
    """Only blanks may follow the ``# EOF`` line: text after it is a second page or a broken one."""
    after = text[end_of_eof:]
    if after.strip():
        raise _error(text, end_of_eof + len(after) - len(after.lstrip()), "text after # EOF")


def _diagnose(text: str, after_name: int, openmetrics: bool) -> str:
    """A reason for a line the tail pattern refused, from what follows the name."""
    end = text.find("\n", after_name)
    rest = text[after_name : end if end >= 0 else len(text)]
    if rest.lstrip(" \t").startswith("{"):
        block = _LABEL_BLOCK.match(rest)
        if block is None:
            return 'malformed labels (each needs name="value", separated by commas, closed by })'
        rest = rest[block.end() :]
    elif rest and rest[0] not in " \t\r":
        return "the metric name is followed by neither a blank nor {"
    if not openmetrics and " # " in rest:
        return "an exemplar in the text format (only OpenMetrics carries exemplars)"
    return "malformed sample (expected: name{labels} value [timestamp]" + (" [# exemplar])" if openmetrics else ")")


def _error(text: str, position: int, reason: str) -> ExpositionError:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    line = text[start : end if end >= 0 else len(text)]
    return ExpositionError(text.count("\n", 0, start) + 1, reason, line.rstrip("\r"))
