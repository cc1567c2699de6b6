"""Fuzz target: the exposition parser of scraped pages (``ExpositionParser``) and the readers of its samples.

Contract: a page gives samples or raises :class:`ExpositionError` (a ``ValueError`` naming the line),
nothing else, and the readers the scrape loops call on a good page's samples (every built-in engine
protocol's ``pod_state`` and ``engine_histograms``, the EPP page's ``normalize`` and ``parse_inflight``)
never raise: the loops catch only ``ExpositionError``. Oracle: on every damaged page that
prometheus_client's parser accepts and sloscope accepts too, both give the same samples (within the
differences the parser's docstring lists); where sloscope alone refuses, the line is one the formats
do not allow.

Seeds: the shared fixture pages (vLLM 0.33.0, the llm-d EPP, the latency predictor's training server).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from prometheus_client.openmetrics import parser as om_parser
from prometheus_client.parser import text_string_to_metric_families

from sloscope.predictor import training_page
from sloscope.receivers.engine_latency import engine_histograms
from sloscope.receivers.epp_inflight import INFLIGHT_FAMILIES, parse_inflight
from sloscope.receivers.epp_page import EPP_FAMILIES, normalize
from sloscope.receivers.exposition import SUFFIXES, ExpositionError, ExpositionParser, Sample
from sloscope.receivers.protocols import BUILTIN
from tests.fuzz.budget import fuzz_settings
from tests.fuzz.mutate import mutated_text
from tests.fuzz.seeds import EXPOSITION_PAGES, fixture_text

WANTED = frozenset(
    EPP_FAMILIES
    | INFLIGHT_FAMILIES
    | training_page._PARSER.families
    | {f for protocol in BUILTIN.values() for f in protocol.families}
)
PARSER = ExpositionParser(WANTED)
PAGES = tuple(fixture_text(name) for name in EXPOSITION_PAGES)
TOKENS = (
    "{",
    "}",
    '"',
    ",",
    "=",
    "\\",
    " ",
    "\t",
    "\n",
    "\r\n",
    "#",
    "# EOF\n",
    "# TYPE x counter\n",
    "# HELP x \\n\n",
    'le="+Inf"',
    "+Inf",
    "-Inf",
    "NaN",
    "1e308",
    "1e999",
    "0x1",
    "1_0",
    "-0",
    ".",
    "_total",
    "_bucket",
    "_sum",
    "_created",
    ":",
    "\\n",
    '\\"',
    "٣",
    "\x00",
    "\u2028",
    " 1700000000000",
    ' # {a="b"} 1',
)


def _reference(text: str, openmetrics: bool) -> list[tuple[str, dict[str, str], float, float | None]] | None:
    """prometheus_client's samples of the wanted families, or None when it refuses the page."""
    parse = om_parser.text_string_to_metric_families if openmetrics else text_string_to_metric_families
    try:
        samples = [s for family in parse(text) for s in family.samples]
    except Exception:  # the oracle refuses (any way it likes)
        return None
    return [
        (s.name, s.labels, float(s.value), None if s.timestamp is None else float(s.timestamp))
        for s in samples
        if _selected(s.name)
    ]


def _selected(name: str) -> bool:
    return name in WANTED or any(name.endswith(suffix) and name[: -len(suffix)] in WANTED for suffix in SUFFIXES)


def _same(mine: list[Sample], expected: list[tuple[str, dict[str, str], float, float | None]]) -> None:
    assert len(mine) == len(expected), (mine, expected)
    for got, (name, labels, value, timestamp) in zip(mine, expected, strict=True):
        # The reference renames a text-format counter's sample F to F_total (the parser's docstring).
        assert got.name in (name, name.removesuffix("_total")), (got, name)
        assert got.labels == labels
        assert got.value == value or (math.isnan(got.value) and math.isnan(value))
        if got.timestamp is None or timestamp is None:
            assert got.timestamp is timestamp
        else:
            assert math.isclose(got.timestamp, timestamp, rel_tol=1e-15, abs_tol=1e-9)


# Refusals where prometheus_client reads the line anyway (the parser's docstring: "stricter where
# neither format allows the input").
_STRICTER = ("invalid timestamp", "malformed sample", "malformed labels", "invalid value", "an exemplar in the text")


def _read(samples: list[Sample]) -> Any:
    """What the scrape loops do with a good page's samples; none of it may raise."""
    for protocol in BUILTIN.values():
        protocol.pod_state(samples)
        protocol.pod_state(samples, "meta-llama/Llama-3.1-8B-Instruct")
        engine_histograms(protocol, samples, None)
    normalize(samples, "pool")
    parse_inflight(samples)


@fuzz_settings()
@given(text=mutated_text(PAGES, TOKENS), openmetrics=st.booleans())
def test_any_page_parses_or_names_its_bad_line(text: str, openmetrics: bool) -> None:
    try:
        samples = PARSER.parse(text, openmetrics=openmetrics)
    except ExpositionError as error:
        assert 1 <= error.line <= text.count("\n") + 1
        assert str(error).startswith(f"line {error.line}: ")
        if _reference(text, openmetrics) is None:
            event("refused by both")
        else:
            event("refused by sloscope only")
            assert error.reason.startswith(_STRICTER) or "__name__" in error.reason or "duplicate" in error.reason
        return
    assert all(isinstance(s.value, float) for s in samples)
    _read(samples)
    expected = _reference(text, openmetrics)
    if expected is None:
        event("accepted by sloscope only")
    else:
        event("accepted by both: samples compared")
        _same(samples, expected)
