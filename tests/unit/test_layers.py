"""The package's floors: every import of a sloscope module points down, never sideways or up.

Data moves receivers → processors → publishers; below them stand the value types, the columnar batch, the
settings and the pure SLO maths; above them the wiring, the generators, the review, the demo and the CLI
(docs/architecture.md draws it). A unit (a top-level module or subpackage of ``sloscope``) may import only
units of lower floors, so a change on one floor never has to be made on the floors beneath it, and a
receiver knows only the consumer interfaces it hands data to (``receivers/consumers.py``). Every import is
read, those inside functions and under ``TYPE_CHECKING`` too. Runs in ``make lint``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "exporter" / "sloscope"

FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        # value types and names every floor speaks
        ("__init__", "conventions", "records", "redaction", "threads", "allocator", "lean_imports"),
        # engine names and the span vocabulary of the upstreams, the columnar batch and series
        ("engines", "upstream", "columnar"),
        ("store",),  # the Parquet files and their row format, built from columnar parts
        ("config",),  # the settings
        # attribute mapping, self-metrics, SLO maths, what listeners share, the compiled core (built from the settings)
        ("attributes", "telemetry", "slo", "listeners", "_native"),
        ("receivers",),
        ("predictor",),  # the predictor's client: called by the processors
        ("processors",),
        ("publishers",),
        ("pipeline",),
        ("service", "loading", "testing"),
        ("generators", "review"),
        ("demo",),
        ("cli",),
        ("__main__",),
    )
)
FLOOR_OF = {unit: level for level, floor in enumerate(FLOORS) for unit in floor}


def unit_of(path: Path) -> str:
    """The unit a file of the package belongs to: its top-level module or subpackage."""
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py").removesuffix(".pyi")


def imported_units(source: str) -> Iterator[tuple[int, str]]:
    """(line, unit) of every sloscope unit ``source`` imports, wherever the import statement is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "sloscope":
                    yield node.lineno, parts[1] if len(parts) > 1 else "__init__"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "sloscope":
                continue
            if len(parts) > 1:
                yield node.lineno, parts[1]
            else:  # from sloscope import conventions, __version__
                for alias in node.names:
                    yield (
                        node.lineno,
                        alias.name
                        if (PACKAGE / alias.name).exists() or (PACKAGE / f"{alias.name}.py").exists()
                        else "__init__",
                    )


def back_arrows(files: Iterable[tuple[str, str, str]]) -> list[str]:
    """Imports of ``(unit, path, source)`` files that point to their own floor's other units or above."""
    found = []
    for unit, path, source in files:
        for line, target in imported_units(source):
            if target != unit and FLOOR_OF[target] >= FLOOR_OF[unit]:
                found.append(
                    f"{path}:{line}: {unit} (floor {FLOOR_OF[unit]}) imports {target} (floor {FLOOR_OF[target]})"
                )
    return found


def package_files() -> list[tuple[str, str, str]]:
    return [
        (unit_of(path), str(path.relative_to(PACKAGE.parent)), path.read_text())
        for path in sorted(PACKAGE.rglob("*.py*"))
        if path.suffix in (".py", ".pyi")
    ]


def test_every_unit_has_a_floor() -> None:
    units = {unit for unit, _, _ in package_files()} | {"__init__"}
    assert units - set(FLOOR_OF) == set(), "place the new unit on a floor of FLOORS"
    assert set(FLOOR_OF) - units == set(), "a floor names a unit that no longer exists"


def test_every_import_points_down() -> None:
    assert back_arrows(package_files()) == []


def test_a_back_arrow_is_caught_wherever_the_import_is() -> None:
    """The check itself: the pure SLO maths importing a processor, at module level or inside a function."""
    source = "from sloscope.columnar import columns\n\ndef f():\n    from sloscope.processors import shadow\n"
    assert back_arrows([("slo", "slo/x.py", source)]) == ["slo/x.py:4: slo (floor 4) imports processors (floor 7)"]
    sideways = "import sloscope.telemetry\n"
    assert back_arrows([("slo", "slo/y.py", sideways)]) == ["slo/y.py:1: slo (floor 4) imports telemetry (floor 4)"]
    assert back_arrows([("publishers", "publishers/z.py", source)]) == []
