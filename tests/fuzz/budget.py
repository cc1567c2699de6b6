"""How many examples each fuzz target runs: a bounded, reproducible number in ``make test``, more on request.

Bounded (the default, :data:`BOUNDED` examples per target): derandomized, so every run of the suite
tries the same inputs and a failure reproduces on any machine, and no example database is written.
Long (``pytest tests/fuzz --fuzz-examples=N``, or ``FUZZ_EXAMPLES=N``, or ``make fuzz``): random
inputs each run, and failing examples are kept in hypothesis' database (``.hypothesis/``) so that the
next run replays them first. ``--hypothesis-show-statistics`` prints how many examples each target ran.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["BOUNDED", "configure", "examples", "fuzz_settings"]

BOUNDED = 200
_examples: int | None = None


def configure(examples: int | None) -> None:
    """Set the number of examples per target (the ``--fuzz-examples`` option); None keeps the default."""
    global _examples  # noqa: PLW0603 - set once by pytest_configure, before any fuzz module is imported
    _examples = examples


def examples() -> int:
    if _examples is not None:
        return _examples
    return int(os.environ.get("FUZZ_EXAMPLES", BOUNDED))


def fuzz_settings(scale: float = 1.0) -> settings:
    """Settings for one target; ``scale`` < 1 for a target whose examples are expensive (a real page parsed)."""
    count = max(1, int(examples() * scale))
    long = examples() > BOUNDED
    return settings(
        max_examples=count,
        derandomize=not long,
        database=settings.default.database if long else None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
