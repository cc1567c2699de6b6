"""StaticDiscovery: the settings' list, reported once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sloscope.config import StaticTarget
from sloscope.receivers.discovery import Target
from sloscope.receivers.discovery.static import StaticDiscovery


def test_reports_the_list_once_and_runs_until_cancelled() -> None:
    reports: list[list[Target]] = []
    source = StaticDiscovery(
        "llama",
        [
            StaticTarget(address="10.52.3.17:8000", pod="vllm-llama3-8b-instruct-7d9f8c6b5d-x2k9p"),
            StaticTarget(address="vllm-1.vllm.llm.svc:8000", labels={"llm-d.ai/role": "decode", "app": "vllm"}),
        ],
    )

    def update(targets: Sequence[Target]) -> None:
        reports.append(list(targets))

    async def main() -> bool:
        task = asyncio.create_task(source.run(update))
        for _ in range(10):  # let it run a few turns: it must neither return nor report again
            await asyncio.sleep(0)
        running = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return running

    assert asyncio.run(main()) is True
    assert reports == [
        [
            Target("llama", "vllm-llama3-8b-instruct-7d9f8c6b5d-x2k9p", "10.52.3.17:8000"),
            Target(  # no pod: named by its address
                "llama",
                "vllm-1.vllm.llm.svc:8000",
                "vllm-1.vllm.llm.svc:8000",
                labels=(("app", "vllm"), ("llm-d.ai/role", "decode")),
            ),
        ]
    ]


def test_an_empty_list_is_reported_as_empty() -> None:
    reports: list[list[Target]] = []

    async def main() -> None:
        task = asyncio.create_task(StaticDiscovery("llama", []).run(lambda targets: reports.append(list(targets))))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert reports == [[]]


def test_rank_ports_make_a_multi_port_data_parallel_pod_and_bad_ports_are_refused() -> None:
    reports: list[list[Target]] = []
    targets = [
        StaticTarget(address="10.52.3.17:8000", pod="vllm-dp", rank_ports=[8200, 8201]),
        StaticTarget(address="10.52.3.18:8000", pod="vllm-one", rank_ports=[8300]),  # one rank: one endpoint
    ]

    async def main() -> None:
        task = asyncio.create_task(StaticDiscovery("llama", targets).run(lambda found: reports.append(list(found))))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert reports == [
        [
            Target("llama", "vllm-dp", "10.52.3.17:8200", ranks=((0, 8200), (1, 8201))),
            Target("llama", "vllm-one", "10.52.3.18:8300"),
        ]
    ]
    for bad in ([8000, 8000], [0], [70000]):
        with pytest.raises(ValueError, match="rank_ports must be distinct ports"):
            StaticTarget(address="10.52.3.17:8000", rank_ports=bad)
