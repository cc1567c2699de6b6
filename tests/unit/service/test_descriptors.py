"""The listeners' connection caps fit under the process's open-file limit with a reserve for everything else."""

from __future__ import annotations

import logging
import resource

import pytest

from sloscope.config import Listeners, Settings
from sloscope.service import descriptors
from sloscope.service.descriptors import Budget, demand, fitted, reserve


def test_caps_that_fit_are_kept() -> None:
    listeners = Listeners()
    assert demand(listeners) == 2 * (512 + 2 * 128) + 512 + 128  # 2176 with the defaults
    assert fitted(listeners, Budget(limit=1 << 20, reserved=200)) is listeners


def test_caps_that_do_not_fit_are_lowered_in_proportion(caplog: pytest.LogCaptureFixture) -> None:
    """Under nofile=512 with the default settings: 512 - 144 reserved leaves 368 for 2176 wanted, a share of
    0.1691: 86 connections per HTTP listener, 86 on gRPC, a backlog of 21; 2 x (86 + 42) + 86 + 21 = 363 <= 368."""
    settings = Settings()
    assert reserve(settings) == 64 + 64 + 16  # no pool configured
    budget = Budget(limit=512, reserved=reserve(settings))
    with caplog.at_level(logging.WARNING):
        out = fitted(settings.listeners, budget)
    assert (out.max_connections, out.grpc.max_connections, out.backlog) == (86, 86, 21)
    assert demand(out) == 363 <= budget.available
    assert out.grpc.max_concurrent_streams == settings.listeners.grpc.max_concurrent_streams  # the rest kept
    assert "lowered to 86 connections per HTTP listener, 86 on gRPC and a backlog of 21" in caplog.text


def test_a_limit_below_the_reserve_leaves_the_smallest_caps() -> None:
    out = fitted(Listeners(), Budget(limit=100, reserved=144))
    assert (out.max_connections, out.grpc.max_connections, out.backlog) == (4, 4, 4)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 256) if hard == resource.RLIM_INFINITY else min(soft, hard, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert descriptors.raise_soft_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)
        now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert now == (hard if hard != resource.RLIM_INFINITY else max(lowered, 1 << 20))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
