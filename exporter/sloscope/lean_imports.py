"""What ``sloscope serve`` keeps out of its process: imports a library makes that the server never uses.

httpx imports its command line client (``httpx/__init__.py`` of httpx 0.28.1: ``from ._main import main``, in a
``try`` that answers ``ImportError`` with a stand-in ``main``), and that client imports rich, pygments and click
whenever they are installed, as rich is for sloscope's own command line: 4.6 MiB of the server's resident set
(``docs/performance.md``). A ``None`` entry in ``sys.modules`` makes that one import fail, so httpx takes its
stand-in; nothing else of httpx changes.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from types import ModuleType

HTTPX_COMMAND_LINE = "httpx._main"


def skip_httpx_command_line(modules: MutableMapping[str, ModuleType | None] | None = None) -> bool:
    """Keeps httpx's command line client unimported; True when done here (False: httpx was imported already)."""
    table: MutableMapping[str, ModuleType | None] = sys.modules if modules is None else modules  # type: ignore[assignment]  # a None entry is how an import is blocked
    if "httpx" in table:
        return False
    table.setdefault(HTTPX_COMMAND_LINE, None)
    return True
