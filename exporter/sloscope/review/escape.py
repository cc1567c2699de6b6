"""Text from spans (model, pod, pool and class names, failure reasons) made safe for each output.

A span's attributes are whatever a client or a model server put there. None of it may change the report's
structure or run anywhere:

- **HTML**: ``html.escape`` (in ``render``), quotes included;
- **Markdown**: :func:`markdown` turns the characters Markdown or inline HTML give a meaning to into entities or
  backslash escapes (CommonMark allows a backslash before any ASCII punctuation), so ``|`` cannot split a table
  cell, ``[x](javascript:...)`` is no link, ``<script>`` is text, and a newline cannot end a table row;
- **CSV**: :func:`csv_cell` prefixes ``'`` to a text cell a spreadsheet would read as a formula (one starting
  with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return: OWASP's "CSV injection" advice);
- **charts**: :func:`plain` escapes ``$`` so matplotlib never hands the text to its mathtext parser (an odd
  ``$`` pair raises, an even one renders as a formula), and the charts keep ``text.usetex`` off.
"""

from __future__ import annotations

import re

import pandas as pd

__all__ = ["csv_cell", "csv_safe", "markdown", "plain"]

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_PUNCTUATION = re.compile(r"([\\`*_\[\]#|~$])")  # no brackets, no link; no emphasis, code, heading, cell or math
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def markdown(text: str) -> str:
    """``text`` as literal Markdown inline text (a table cell, a list item, a heading)."""
    text = "".join(_ENTITIES.get(c, c) for c in text)
    text = _PUNCTUATION.sub(r"\\\1", text)
    return re.sub(r"[\r\n]+", " ", text)


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet would evaluate, prefixed with ``'``; anything else unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_safe(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every text cell passed through :func:`csv_cell` (numbers and times untouched)."""
    text = [c for c in table.columns if table[c].dtype == object or pd.api.types.is_string_dtype(table[c])]
    if not text:
        return table
    safe = table.copy()
    for column in text:
        safe[column] = safe[column].map(csv_cell, na_action="ignore")
    return safe


def plain(text: object) -> str:
    """``text`` as a matplotlib label that is drawn as written: every ``$`` escaped, so no mathtext."""
    return str(text).replace("$", r"\$")
