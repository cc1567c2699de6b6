"""`sloscope serve` needs none of the review extra (pandas, matplotlib): it must import and build without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_WITHOUT_REVIEW_EXTRA = """
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pandas", "matplotlib"):
            raise ImportError(f"{name} is not installed")
        return None

sys.meta_path.insert(0, Absent())
from sloscope.cli import _parser
from sloscope.config import Settings
from sloscope.service.server import Service
from sloscope.loading import default_spec

settings = Settings(store={"enabled": True, "directory": sys.argv[1]}, export={"enabled": True})
service = Service(settings, default_spec())
assert [sink.name for sink in service.sinks.sinks] == ["store", "otlp"]
_parser().parse_args(["review", "--store", "x"])  # the review command is declared without importing its code
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pandas", "matplotlib"))
assert not loaded, loaded
print("ok")
"""


def test_serve_builds_with_the_store_and_export_without_pandas_or_matplotlib(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_REVIEW_EXTRA, str(tmp_path / "records")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
