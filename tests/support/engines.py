"""Both trace assemblers, so the assembler's tests run on each: the Python reference and the native core.

A test module opts in with ``pytestmark = pytest.mark.usefixtures("assembler_engine")`` and imports
the fixture; each of its tests then runs once per engine, with ``TraceAssembler`` in the modules
that build assemblers bound to that engine. The native one counts pending bytes as the reference
estimates them, so the tests that pin ``join.max_pending_bytes`` in those units hold for both.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator

import pytest

from sloscope.processors.assembler import TraceAssembler
from sloscope.processors.native_assembler import NativeTraceAssembler

ENGINES = {
    "python": TraceAssembler,
    "native": functools.partial(NativeTraceAssembler, reference_bytes=True),
}
# The modules that build assemblers by the name TraceAssembler.
_BUILDERS = ("tests.unit.processors.test_assembler", "tests.support.demo_join")


@pytest.fixture(params=sorted(ENGINES))
def assembler_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in _BUILDERS:
        module = sys.modules.get(name)
        if module is not None:
            monkeypatch.setattr(module, "TraceAssembler", ENGINES[request.param])
    yield request.param
