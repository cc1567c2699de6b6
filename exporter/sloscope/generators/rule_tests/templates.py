"""The annotation templates of the generated alerts rendered as Prometheus renders them (``humanize``,
``humanizePercentage``, ``humanizeDuration``), for the annotations the tests expect."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping


def _go_g4(value: float) -> str:
    """Go's ``%.4g`` (Python's matches it for finite values)."""
    if not math.isfinite(value):
        raise ValueError(f"no rendering of a non-finite value {value!r} is expected in a test")
    return f"{value:.4g}"


def _humanize(value: float) -> str:
    """Prometheus' ``humanize``: SI prefixes (k, M, ... and m, u, ...) with four significant digits."""
    if value == 0:
        return _go_g4(value)
    prefix = ""
    if abs(value) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(value) < 1000:
                break
            prefix, value = p, value / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(value) >= 1:
                break
            prefix, value = p, value * 1000
    return f"{_go_g4(value)}{prefix}"


def _humanize_percentage(value: float) -> str:
    return f"{_go_g4(value * 100)}%"


def _humanize_duration(value: float) -> str:
    """Prometheus' ``humanizeDuration`` for whole durations of a second or more (the only ones tests render)."""
    if value < 1:
        raise ValueError(f"sub-second durations are not rendered in these tests: {value!r}")
    whole = int(value)
    seconds, minutes, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
    if days:
        return f"{days}d {hours}h {minutes}m {seconds}s"
    if hours:
        return f"{hours}h {minutes}m {seconds}s"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{_go_g4(value)}s"


_HUMANIZERS = {
    "humanize": _humanize,
    "humanizePercentage": _humanize_percentage,
    "humanizeDuration": _humanize_duration,
}
_ACTION = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL = re.compile(r"^\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)$")
_VALUE = re.compile(r"^\$value(?:\s*\|\s*([a-zA-Z]+))?$")


def render_template(template: str, labels: Mapping[str, str], value: float) -> str:
    """Render the template forms the generated annotations use: ``$labels.x`` and ``$value`` (piped to a humanizer).

    Anything else raises: a template this function cannot render is a template the tests cannot check.
    """

    def action(match: re.Match[str]) -> str:
        body = match.group(1)
        if label := _LABEL.match(body):
            return labels[label.group(1)]
        if value_action := _VALUE.match(body):
            humanizer = value_action.group(1)
            return _go_g4(value) if humanizer is None else _HUMANIZERS[humanizer](value)
        raise ValueError(f"cannot render template action {{{{ {body} }}}}")

    return _ACTION.sub(action, template)
