"""The llm-d demo's spans through sloscope's join, in process: sloscope counts what the demo's truth counts,
whatever order the simulated processes' exporters deliver in (tests/support/demo_join.py)."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import pytest

from sloscope.demo.agents import Call
from sloscope.demo.calls import (
    MODEL_SERVER_ERROR,
    REFUSED_MESSAGE,
    SHED_MESSAGE,
    TIMEOUT_MESSAGE,
    CallRecord,
    Scheduling,
    outcome,
)
from sloscope.demo.compare import differences
from sloscope.demo.records import Completion
from sloscope.demo.truth import GroundTruth
from tests.support.demo_calls import T0, Captured, choices, decision, disaggregated, request, session, single
from tests.support.demo_join import counted, process_of
from tests.support.engines import assembler_engine  # noqa: F401  (the fixture below)

pytestmark = pytest.mark.usefixtures("assembler_engine")  # every test on both engines


def truth_of(records: list[CallRecord]) -> GroundTruth:
    truth = GroundTruth(default_class="batch")
    for record in records:
        truth.add(outcome(record))
    return truth


def failed(failure: str) -> CallRecord:
    call = Call(request(), "chat", failure=failure)  # type: ignore[arg-type]
    if failure in ("shed", "refused", "timeout"):
        message = {"shed": SHED_MESSAGE, "refused": REFUSED_MESSAGE, "timeout": TIMEOUT_MESSAGE}[failure]
        status = 500 if failure == "refused" else 429
        return CallRecord(session(call), call, T0, T0 + 0.002, T0 + 0.001, (), (), None, None, status, message, message)
    schedule = (Scheduling("default", T0, T0 + 0.004, decision(routing="default")),)
    if failure == "error":
        return CallRecord(
            session(call), call, T0, T0 + 0.02, T0 + 0.004, schedule, http_status=500, error=MODEL_SERVER_ERROR
        )
    return CallRecord(session(call), call, T0, T0 + 0.5, T0 + 0.004, schedule, aborted=True)


SHAPES = {
    "chat": lambda: single(Call(request(), "chat")),
    "completions, default profile": lambda: single(Call(request(), "completions"), routing="default"),
    "P/D NIXL": lambda: disaggregated("nixl"),
    "P/D P2P": lambda: disaggregated("p2p"),
    "P/D sidecar off": lambda: disaggregated("off"),
    "n = 3": choices,
    **{f"failed: {f}": (lambda f=f: failed(f)) for f in ("shed", "refused", "timeout", "error", "aborted")},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_joins_to_the_truth_in_every_delivery_order(shape: str) -> None:
    record = SHAPES[shape]()
    processes = sorted({process_of(s) for s in Captured().spans(record)})
    truth = truth_of([record])
    for order in itertools.permutations(processes):
        assert differences(truth, counted([record], lambda _, order=order: list(order))) == [], order


def later(record: CallRecord, seconds: float, request_id: str) -> CallRecord:
    """The same call, ``seconds`` later, with another x-request-id (the next call of the session)."""

    def moved(done: Completion) -> Completion:
        return replace(
            done, **{f: getattr(done, f) + seconds for f in ("arrived", "scheduled", "first_token", "finished")}
        )

    times = record.sidecar
    if times is not None:
        shifted = {
            f.name: getattr(times, f.name) + seconds
            for f in fields(times)
            if f.name not in ("connector", "request_uuid")
        }
        times = replace(times, **shifted)
    call = replace(record.call, request=replace(record.call.request, request_id=request_id))
    return replace(
        record,
        call=call,
        arrival=record.arrival + seconds,
        end=record.end + seconds,
        routed=record.routed + seconds,
        schedules=tuple(replace(s, start=s.start + seconds, end=s.end + seconds) for s in record.schedules),
        completions=tuple(moved(c) for c in record.completions),
        prefill=moved(record.prefill) if record.prefill is not None else None,
        sidecar=times,
    )


@pytest.mark.parametrize(
    "order", [sorted, lambda names: sorted(names, reverse=True)], ids=["envoy first", "envoy last"]
)
def test_the_calls_of_one_agent_session_are_one_request_each(order: object) -> None:
    shapes = [
        "chat",
        "P/D NIXL",
        "failed: shed",
        "n = 3",
        "P/D sidecar off",
        "failed: aborted",
        "completions, default profile",
    ]
    records = [later(SHAPES[s](), 4.0 * i, f"00000000-0000-4000-8000-{i:012d}") for i, s in enumerate(shapes)]
    truth = truth_of(records)
    assert truth.total == len(shapes)
    assert differences(truth, counted(records, order)) == []  # type: ignore[arg-type]
