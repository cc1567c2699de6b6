"""StreamingModes: each pool's latency-plugin streaming mode, from its EPP's page, else its setting, else off."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sloscope.processors.streaming_modes import StreamingMode, StreamingModes
from sloscope.publishers.streaming_mode import StreamingModeCollector
from tests.support.series import samples


def test_the_page_wins_over_the_setting_which_wins_over_the_upstream_default() -> None:
    modes = StreamingModes({"set-on": True, "set-off": False, "unset": None})
    assert modes.mode("set-on") == StreamingMode(True, "setting")
    assert modes.mode("set-off") == StreamingMode(False, "setting")
    assert modes.mode("unset") == StreamingMode(False, "default")
    assert modes.mode("never-configured") == StreamingMode(False, "default")
    modes.tell("set-on", False)
    modes.tell("unset", True)
    assert modes.mode("set-on") == StreamingMode(False, "page")
    assert modes.streaming("unset") is True


def test_a_page_that_stops_saying_leaves_its_last_word() -> None:
    modes = StreamingModes({"p": True})
    modes.tell("p", False)
    modes.tell("p", None)  # a restarted EPP that has not predicted yet
    assert modes.mode("p") == StreamingMode(False, "page")


def test_a_change_of_mode_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    modes = StreamingModes({"p": None})
    with caplog.at_level(logging.INFO, logger="sloscope.processors.streaming_modes"):
        modes.tell("p", False)  # the page confirms the default: nothing changes but the basis
        modes.tell("p", True)
        modes.tell("p", True)
    assert [r.getMessage() for r in caplog.records] == [
        "Pool p: the EPP's page shows its latency plugin with streamingMode on (off, from the page until now): "
        "its predicted TTFT is a TTFT, its TPOT a TPOT"
    ]


def test_every_configured_pool_is_published_from_the_start() -> None:
    modes = StreamingModes({"a": None, "b": True})
    registry = CollectorRegistry()
    registry.register(StreamingModeCollector(modes))
    assert samples(generate_latest(registry).decode()) == {
        ("sloscope_epp_streaming_mode", frozenset({("pool", "a"), ("basis", "default")})): 0.0,
        ("sloscope_epp_streaming_mode", frozenset({("pool", "b"), ("basis", "setting")})): 1.0,
    }
    modes.tell("a", True)
    assert (
        samples(generate_latest(registry).decode())[
            ("sloscope_epp_streaming_mode", frozenset({("pool", "a"), ("basis", "page")}))
        ]
        == 1.0
    )


def test_the_predictions_default_stands_for_pools_without_a_setting_and_pools_none_names() -> None:
    modes = StreamingModes({"set-off": False, "unset": None}, default=True)
    assert modes.mode("set-off") == StreamingMode(False, "setting")
    assert modes.mode("unset") == StreamingMode(True, "setting")
    assert modes.mode("a-span-pool") == StreamingMode(True, "setting")
