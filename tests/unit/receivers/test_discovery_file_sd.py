"""file_sd: the pure parsing of target-group files, then the polling source on real files in tmp_path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sloscope.config import FileSD
from sloscope.receivers.discovery import Target, file_sd
from sloscope.receivers.discovery.file_sd import (
    FileSDDiscovery,
    FileSDError,
    expand_paths,
    file_format,
    parse_duration,
    parse_file,
    targets_from_groups,
)

LOGGER = "sloscope.receivers.discovery.file_sd"

# ---- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("5s", 5.0, id="seconds"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1m", 60.0, id="minutes"),
        pytest.param("1m30s", 90.0, id="minutes and seconds"),
        pytest.param("1h", 3600.0, id="hours"),
        pytest.param("2d", 172800.0, id="days"),
        pytest.param("1w", 604800.0, id="weeks"),
        pytest.param("1y", 31536000.0, id="years of 365 days"),
        pytest.param("1s250ms", 1.25, id="seconds and milliseconds"),
        pytest.param("0", 0.0, id="a bare zero"),
    ],
)
def test_prometheus_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("5", id="no unit"),
        pytest.param("1.5s", id="a fraction"),
        pytest.param("5S", id="an upper-case unit"),
        pytest.param("1s1m", id="units out of order"),
        pytest.param("-1s", id="negative"),
        pytest.param("5 s", id="a space"),
        pytest.param("5sec", id="an unknown unit"),
    ],
)
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


# ---- parsing -----------------------------------------------------------------------------------


def test_format_by_extension() -> None:
    assert [file_format(name) for name in ("a.json", "b.yml", "c.yaml", "D.JSON")] == ["json", "yaml", "yaml", "json"]
    with pytest.raises(FileSDError, match="unsupported extension"):
        file_format("targets.txt")


def test_json_file_with_labels_pod_names_and_timing() -> None:
    text = json.dumps(
        [
            {
                "targets": ["10.52.3.17:8000"],
                "labels": {"pod": "vllm-0", "__scrape_interval__": "2s", "__scrape_timeout__": "500ms"},
            },
            {"targets": ["10.52.5.9:8000"], "labels": {"__meta_kubernetes_pod_name": "vllm-1", "pod": ""}},
            {"targets": ["10.52.7.21:8000", "10.52.7.22:8000"], "labels": {"team": "search"}},
            {"targets": [], "labels": {"pod": "nobody"}},
            {"targets": ["10.52.9.2:8000"]},
        ]
    )
    assert parse_file("llama", "/etc/sloscope/targets.json", text) == [
        Target("llama", "vllm-0", "10.52.3.17:8000", interval_seconds=2.0, timeout_seconds=0.5),
        Target("llama", "vllm-1", "10.52.5.9:8000"),  # an empty pod label counts as unset
        Target("llama", "10.52.7.21:8000", "10.52.7.21:8000", labels=(("team", "search"),)),
        Target("llama", "10.52.7.22:8000", "10.52.7.22:8000", labels=(("team", "search"),)),
        Target("llama", "10.52.9.2:8000", "10.52.9.2:8000"),
    ]


def test_yaml_file() -> None:
    text = """
- targets: ['10.52.3.17:8000']
  labels:
    pod: vllm-0
    __scrape_interval__: 1m
- targets:
    - vllm-1.vllm.llm.svc:8000
"""
    assert parse_file("llama", "targets.yml", text) == [
        Target("llama", "vllm-0", "10.52.3.17:8000", interval_seconds=60.0),
        Target("llama", "vllm-1.vllm.llm.svc:8000", "vllm-1.vllm.llm.svc:8000"),
    ]


def test_an_empty_yaml_file_has_no_targets_but_an_empty_json_file_is_an_error() -> None:
    assert parse_file("llama", "targets.yaml", "") == []
    with pytest.raises(FileSDError, match="not valid JSON"):
        parse_file("llama", "targets.json", "")


@pytest.mark.parametrize(
    ("groups", "reason"),
    [
        pytest.param({"targets": ["a:1"]}, "expected a list of target groups, got dict", id="not a list"),
        pytest.param(["a:1"], "target group 0: expected a mapping with targets and labels, got str", id="bare"),
        pytest.param([{"target": ["a:1"]}], "target group 0: unknown key(s) target", id="misspelt key"),
        pytest.param([{"targets": "a:1"}], "target group 0: targets must be a list of host:port", id="one string"),
        pytest.param([{"targets": ["10.0.0.1"]}], "target group 0: target '10.0.0.1' is not host:port", id="no port"),
        pytest.param([{"targets": ["http://a:1"]}], "is not host:port", id="a URL"),
        pytest.param([{"targets": [8000]}], "target 8000 is not host:port", id="a number"),
        pytest.param([{"targets": ["a:1"], "labels": ["pod"]}], "labels must be a mapping, got list", id="labels list"),
        pytest.param(
            [{"targets": ["a:1"], "labels": {"shard": 3}}], "label 'shard' must be a string", id="a number label"
        ),
        pytest.param(
            [{"targets": ["a:1"]}, {"targets": ["b:1"], "labels": {"__scrape_interval__": "5"}}],
            "target group 1: label __scrape_interval__: not a duration: '5'",
            id="bad interval",
        ),
        pytest.param(
            [{"targets": ["a:1"], "labels": {"__scrape_timeout__": "0"}}],
            "label __scrape_timeout__ must be positive",
            id="zero timeout",
        ),
        pytest.param(
            [{"targets": ["a:1"], "labels": {"__scrape_interval__": "1s", "__scrape_timeout__": "2s"}}],
            "__scrape_timeout__ is longer than __scrape_interval__",
            id="timeout above interval",
        ),
        pytest.param(
            [{"targets": ["a:1", "b:1"], "labels": {"pod": "vllm-0"}}],
            "pod 'vllm-0' of b:1 is already the pod of a:1",
            id="one pod name for two targets",
        ),
    ],
)
def test_wrong_shapes_name_the_place_and_the_reason(groups: Any, reason: str) -> None:
    with pytest.raises(FileSDError) as raised:
        targets_from_groups("llama", groups)
    assert reason in str(raised.value)


def test_only_the_last_path_component_is_a_glob(tmp_path: Path) -> None:
    (tmp_path / "sd").mkdir()
    (tmp_path / "s*").mkdir()
    for name in ("sd/a.json", "sd/b.yaml", "sd/.a.json.swp", "sd/notes.txt", "s*/c.json"):
        (tmp_path / name).write_text("[]")
    assert expand_paths([str(tmp_path / "sd" / "*.json"), str(tmp_path / "sd" / "*.yaml")]) == [
        str(tmp_path / "sd" / "a.json"),
        str(tmp_path / "sd" / "b.yaml"),
    ]
    assert expand_paths([str(tmp_path / "s*" / "*.json")]) == [str(tmp_path / "s*" / "c.json")]  # dir taken literally
    assert expand_paths([str(tmp_path / "sd" / "missing.json")]) == []


# ---- the polling source ------------------------------------------------------------------------


class Files:
    """Writes files with a fresh mtime each time, so that every write is a change whatever the clock's grain."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._clock = 1_700_000_000 * 10**9

    def write(self, name: str, content: Any) -> Path:
        path = self.root / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        self._clock += 10**9
        os.utime(path, ns=(self._clock, self._clock))
        return path


class Reports:
    def __init__(self) -> None:
        self.lists: list[list[Target]] = []

    def __call__(self, targets: Sequence[Target]) -> None:
        self.lists.append(list(targets))

    @property
    def latest(self) -> dict[str, str] | None:
        return {target.pod: target.address for target in self.lists[-1]} if self.lists else None


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Poll until true; the timeout only turns a hang into a failure."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the source's polls (each one expands the paths once)."""
    count = [0]
    real = file_sd.expand_paths

    def counting(patterns: Sequence[str]) -> list[str]:
        count[0] += 1
        return real(patterns)

    monkeypatch.setattr(file_sd, "expand_paths", counting)
    yield count


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file names parse_file was given, in order: the files the source re-read."""
    seen: list[str] = []
    real = file_sd.parse_file

    def recording(pool: str, path: str, text: str) -> list[Target]:
        seen.append(os.path.basename(path))
        return real(pool, path, text)

    monkeypatch.setattr(file_sd, "parse_file", recording)
    return seen


def run(patterns: list[str], body: Callable[[Reports], Awaitable[None]]) -> Reports:
    reports = Reports()

    async def main() -> None:
        source = FileSDDiscovery("llama", FileSD(files=patterns, refresh_seconds=0.01))
        task = asyncio.create_task(source.run(reports))
        try:
            await body(reports)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())
    return reports


async def next_polls(polls: list[int], n: int = 2) -> None:
    """Wait until n more polls have run (one may already have been under way)."""
    start = polls[0]
    await wait_until(lambda: polls[0] >= start + n, f"{n} polls")


def test_an_edited_json_file_is_picked_up_without_restart(files: Files) -> None:
    path = files.write("targets.json", [{"targets": ["10.52.3.17:8000"], "labels": {"pod": "vllm-0"}}])

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == {"vllm-0": "10.52.3.17:8000"}, "the file's targets")
        files.write(
            "targets.json",
            [
                {"targets": ["10.52.3.18:8000"], "labels": {"pod": "vllm-0", "__scrape_interval__": "1s"}},
                {"targets": ["10.52.5.9:8000"], "labels": {"pod": "vllm-1"}},
            ],
        )
        await wait_until(lambda: len(reports.lists) == 2, "the edited targets")

    reports = run([str(path)], body)

    assert reports.lists == [
        [Target("llama", "vllm-0", "10.52.3.17:8000")],
        [
            Target("llama", "vllm-0", "10.52.3.18:8000", interval_seconds=1.0),
            Target("llama", "vllm-1", "10.52.5.9:8000"),
        ],
    ]


def test_update_only_when_the_merged_list_changes_and_only_changed_files_are_read(
    files: Files, polls: list[int], reads: list[str]
) -> None:
    files.write("a.json", [{"targets": ["10.52.3.17:8000"], "labels": {"pod": "vllm-0"}}])
    files.write("b.yaml", "- targets: ['10.52.5.9:8000']\n  labels: {pod: vllm-1}\n")

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")
        await next_polls(polls)
        assert reads == ["a.json", "b.yaml"]  # unchanged files are not read again
        files.write("a.json", [{"labels": {"pod": "vllm-0"}, "targets": ["10.52.3.17:8000"]}])  # the same targets
        await next_polls(polls)
        assert reads == ["a.json", "b.yaml", "a.json"]
        assert len(reports.lists) == 1  # read again, but the list did not change

    reports = run([str(files.root / "*.json"), str(files.root / "*.yaml")], body)
    assert reports.lists == [
        [Target("llama", "vllm-0", "10.52.3.17:8000"), Target("llama", "vllm-1", "10.52.5.9:8000")]
    ]


def test_yaml_files_and_a_glob_that_gains_and_loses_files(files: Files) -> None:
    files.write("pool-a.yaml", "- targets: ['10.52.3.17:8000']\n  labels: {pod: vllm-0}\n")

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == {"vllm-0": "10.52.3.17:8000"}, "the first file")
        files.write("pool-b.yml", "- targets: ['10.52.5.9:8000']\n  labels: {__meta_kubernetes_pod_name: vllm-1}\n")
        await wait_until(
            lambda: reports.latest == {"vllm-0": "10.52.3.17:8000", "vllm-1": "10.52.5.9:8000"}, "the second file"
        )
        (files.root / "pool-a.yaml").unlink()
        await wait_until(lambda: reports.latest == {"vllm-1": "10.52.5.9:8000"}, "the deleted file's targets gone")

    reports = run([str(files.root / "pool-*.y*ml")], body)
    assert len(reports.lists) == 3


def test_a_broken_file_keeps_its_last_good_targets_and_says_why(
    files: Files, polls: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    path = files.write("targets.json", [{"targets": ["10.52.3.17:8000"], "labels": {"pod": "vllm-0"}}])
    other = files.write("other.json", [{"targets": ["10.52.5.9:8000"], "labels": {"pod": "vllm-1"}}])
    both = {"vllm-0": "10.52.3.17:8000", "vllm-1": "10.52.5.9:8000"}

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == both, "both files")
        files.write("targets.json", '[{"targets": ["10.52.3.17:8000"], "labels": {"pod": "vllm-0"}')  # cut short
        await wait_until(lambda: len(caplog.records) == 1, "the warning")
        files.write("other.json", [{"targets": ["10.52.5.10:8000"], "labels": {"pod": "vllm-1"}}])
        await wait_until(lambda: reports.latest == {**both, "vllm-1": "10.52.5.10:8000"}, "the other file's change")
        await next_polls(polls)
        files.write("targets.json", [{"targets": ["10.52.3.17:8000"], "labelz": {}}])  # a wrong shape
        await wait_until(lambda: len(caplog.records) == 2, "the second warning")
        files.write("targets.json", [{"targets": ["10.52.3.99:8000"], "labels": {"pod": "vllm-0"}}])  # fixed
        await wait_until(lambda: reports.latest == {"vllm-0": "10.52.3.99:8000", "vllm-1": "10.52.5.10:8000"}, "fix")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        reports = run([str(path), str(other)], body)

    assert [{target.pod: target.address for target in report} for report in reports.lists] == [
        both,  # the broken writes changed nothing
        {"vllm-0": "10.52.3.17:8000", "vllm-1": "10.52.5.10:8000"},
        {"vllm-0": "10.52.3.99:8000", "vllm-1": "10.52.5.10:8000"},
    ]
    first, second = (record.getMessage() for record in caplog.records)
    assert first.startswith(f"file_sd {path}: not valid JSON: ")
    assert first.endswith("keeping its last good targets (1) until the file changes")
    assert second.startswith(f"file_sd {path}: target group 0: unknown key(s) labelz; ")
    assert all(record.levelno == logging.WARNING for record in caplog.records)


def test_a_file_broken_from_the_start_gives_no_targets_and_warns_once(
    files: Files, polls: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    path = files.write("targets.yaml", "- targets: [10.52.3.17:8000\n")

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")
        await next_polls(polls, 3)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        reports = run([str(path)], body)

    assert reports.lists == [[]]
    assert len(caplog.records) == 1  # not once per poll
    assert caplog.records[0].getMessage().startswith(f"file_sd {path}: not valid YAML: ")
    assert "keeping its last good targets (0)" in caplog.records[0].getMessage()


def test_per_target_scrape_timing_from_labels(files: Files) -> None:
    files.write(
        "targets.json",
        [
            {"targets": ["10.52.3.17:8000"], "labels": {"pod": "vllm-0", "__scrape_interval__": "1m30s"}},
            {"targets": ["10.52.5.9:8000"], "labels": {"pod": "vllm-1", "__scrape_timeout__": "750ms"}},
        ],
    )

    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest is not None, "the first report")

    reports = run([str(files.root / "targets.json")], body)
    assert reports.lists == [
        [
            Target("llama", "vllm-0", "10.52.3.17:8000", interval_seconds=90.0),
            Target("llama", "vllm-1", "10.52.5.9:8000", timeout_seconds=0.75),
        ]
    ]


def test_no_files_yet_reports_an_empty_list_then_the_file_once_it_appears(files: Files) -> None:
    async def body(reports: Reports) -> None:
        await wait_until(lambda: reports.latest == {}, "the empty first report")
        files.write("late.json", [{"targets": ["10.52.3.17:8000"]}])
        await wait_until(lambda: reports.latest == {"10.52.3.17:8000": "10.52.3.17:8000"}, "the late file")

    reports = run([str(files.root / "*.json")], body)
    assert len(reports.lists) == 2
