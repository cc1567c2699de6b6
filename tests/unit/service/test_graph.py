"""The service graph: components start downstream first and stop upstream first, whatever order they are declared
in; a failed start stops what started; a cycle or an unknown name is refused at construction."""

from __future__ import annotations

import asyncio

import pytest

from sloscope.service.graph import Component, Graph


class Journal:
    def __init__(self, fail_start: str = "", slow_stop: str = "") -> None:
        self.events: list[str] = []
        self.deadlines: list[float] = []
        self._fail_start, self._slow_stop = fail_start, slow_stop

    def component(self, name: str, *feeds: str) -> Component:
        async def start() -> None:
            self.events.append(f"start {name}")
            if name == self._fail_start:
                raise OSError(f"{name} cannot bind")

        async def stop(deadline: float) -> bool:
            self.events.append(f"stop {name}")
            self.deadlines.append(deadline)
            return name != self._slow_stop

        return Component(name, start, stop, feeds=feeds)


def service(journal: Journal) -> Graph:
    """The service's own shape, declared upstream first as Service.__init__ declares it."""
    c = journal.component
    return Graph(
        [
            c("otlp_grpc", "pipeline", "self-tracing"),
            c("otlp_http", "pipeline", "self-tracing"),
            c("pipeline", "pool monitor", "record sinks"),
            c("pool monitor", "record sinks", "metrics"),
            c("record sinks", "metrics"),
            c("metrics", "self-tracing"),
            c("self-tracing"),
        ],
        grace_seconds=5.0,
    )


def test_start_is_downstream_first_and_stop_upstream_first() -> None:
    journal = Journal()
    graph = service(journal)

    async def run() -> bool:
        await graph.start()
        return await graph.stop(123.0)

    assert asyncio.run(run()) is True
    order = ["self-tracing", "metrics", "record sinks", "pool monitor", "pipeline", "otlp_grpc", "otlp_http"]
    assert journal.events == [f"start {name}" for name in order] + [f"stop {name}" for name in reversed(order)]
    assert journal.deadlines == [123.0] * 7


def test_the_order_does_not_depend_on_the_order_of_declaration() -> None:
    journal = Journal()
    c = journal.component
    graph = Graph([c("metrics"), c("receiver", "pipeline"), c("pipeline", "metrics")], grace_seconds=1.0)
    assert [component.name for component in graph.start_order] == ["metrics", "pipeline", "receiver"]


def test_a_failed_start_stops_what_started_upstream_first_and_raises() -> None:
    journal = Journal(fail_start="otlp_grpc")
    graph = service(journal)

    async def run() -> None:
        with pytest.raises(OSError, match="otlp_grpc cannot bind"):
            await graph.start()
        assert await graph.stop(0.0) is True  # the stop the failed start made answers again, and nothing reruns

    asyncio.run(run())
    started = ["self-tracing", "metrics", "record sinks", "pool monitor", "pipeline", "otlp_grpc"]
    assert journal.events == [f"start {name}" for name in started] + [f"stop {name}" for name in reversed(started)]
    assert "start otlp_http" not in journal.events


def test_stop_says_whether_every_component_finished_and_stops_all_of_them_anyway() -> None:
    journal = Journal(slow_stop="pipeline")
    graph = service(journal)

    async def run() -> tuple[bool, bool]:
        await graph.start()
        return await graph.stop(1.0), await graph.stop(2.0)

    assert asyncio.run(run()) == (False, False)
    assert journal.events.count("stop self-tracing") == 1


def test_stop_without_start_stops_nothing() -> None:
    journal = Journal()
    assert asyncio.run(service(journal).stop(1.0)) is True
    assert journal.events == []


def test_a_cycle_an_unknown_component_and_a_repeated_name_are_refused() -> None:
    c = Journal().component
    with pytest.raises(ValueError, match="cycle: a, b"):
        Graph([c("a", "b"), c("b", "a"), c("c")], grace_seconds=1.0)
    with pytest.raises(ValueError, match="a feeds nowhere, which is not a component"):
        Graph([c("a", "nowhere")], grace_seconds=1.0)
    with pytest.raises(ValueError, match="share a name"):
        Graph([c("a"), c("a")], grace_seconds=1.0)
