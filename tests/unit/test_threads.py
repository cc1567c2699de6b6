"""sloscope's threads carry their names to the operating system (``top -H``, ``perf``, ``/proc/<pid>/task``)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sloscope import threads
from sloscope.config import Settings
from sloscope.loading import default_spec
from sloscope.pipeline import Pipeline

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")


def _os_name_of_this_thread() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().rstrip("\n")


def _os_names() -> list[str]:
    task = Path(f"/proc/{os.getpid()}/task")
    return [(task / tid / "comm").read_text().rstrip("\n") for tid in os.listdir(task)]


def test_the_kernel_gets_the_name_less_the_prefix_cut_to_15_bytes() -> None:
    assert threads.os_name("sloscope-pipeline") == b"pipeline"
    assert threads.os_name("sloscope-discovery-inference-pool-a") == b"discovery-infer"
    assert threads.os_name("worker") == b"worker"


def test_a_started_thread_is_named_for_the_os_and_runs_its_target_with_its_arguments() -> None:
    seen: list[tuple[str, str, int]] = []
    thread = threads.start(lambda a, b: seen.append((_os_name_of_this_thread(), a, b)), "sloscope-record-store", "x", 2)
    thread.join(5)
    assert thread.daemon and thread.name == "sloscope-record-store"
    assert seen == [("record-store", "x", 2)]


def test_a_pools_threads_are_named_by_the_initializer() -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="sloscope-decode", initializer=threads.name_os_thread) as pool:
        assert pool.submit(_os_name_of_this_thread).result(5) == "decode_0"


def test_the_pipeline_worker_shows_as_pipeline() -> None:
    pipe = Pipeline(Settings(), default_spec(), CollectorRegistry())
    before = _os_names().count("pipeline")
    pipe.start()
    try:
        deadline = time.monotonic() + 5  # the worker names itself as it starts
        while _os_names().count("pipeline") == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _os_names().count("pipeline") == before + 1
    finally:
        assert pipe.shutdown(5)
