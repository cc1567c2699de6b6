"""What ``sloscope serve`` keeps out of its process (``sloscope/lean_imports.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

from sloscope import lean_imports

CLI_PACKAGES = ("rich", "pygments", "click")


def imported_with_httpx(skip: bool) -> dict[str, object]:
    program = (
        "import json, sys\n"
        "from sloscope.lean_imports import skip_httpx_command_line\n"
        f"if {skip}: skip_httpx_command_line()\n"
        "import httpx\n"
        "client = httpx.Client(timeout=1.0); client.close()\n"
        f"print(json.dumps({{'loaded': [m for m in {CLI_PACKAGES!r} if m in sys.modules], "
        "'cli': sys.modules.get('httpx._main') is not None, 'main': callable(httpx.main)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_httpx_imports_its_command_line_clients_packages_unless_skipped() -> None:
    assert imported_with_httpx(skip=False) == {"loaded": list(CLI_PACKAGES), "cli": True, "main": True}
    assert imported_with_httpx(skip=True) == {"loaded": [], "cli": False, "main": True}  # main: httpx's stand-in


def test_the_skip_is_not_made_once_httpx_is_imported_and_keeps_an_entry_already_there() -> None:
    assert not lean_imports.skip_httpx_command_line({"httpx": sys})
    modules: dict[str, object] = {}
    assert lean_imports.skip_httpx_command_line(modules)  # type: ignore[arg-type]
    assert modules == {"httpx._main": None}
