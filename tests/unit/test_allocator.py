"""The C allocator's arena cap (sloscope/allocator.py): checked on glibc itself, in a fresh interpreter whose
threads allocate, by counting the arenas ``malloc_stats`` reports."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sloscope import allocator

# Six threads each allocate and keep blocks while the others do: glibc gives each its own arena by default.
_PROGRAM = textwrap.dedent(
    """
    import ctypes, sys, threading
    from sloscope.allocator import limit_arenas

    capped = limit_arenas() if sys.argv[1] == "cap" else False
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    start = threading.Barrier(6)

    def allocate():
        start.wait()  # all six hold their blocks at once
        blocks = [libc.malloc(256) for _ in range(1000)]
        start.wait()
        for block in blocks:
            libc.free(ctypes.c_void_p(block))

    threads = [threading.Thread(target=allocate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(capped)
    libc.malloc_stats()
    """
)


def _arenas(mode: str, environ: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, timeout=60, env=environ, check=True
    )
    arenas = sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    return done.stdout.strip(), arenas


_NOT_GLIBC = allocator.malloc_trim() is None


@pytest.mark.skipif(_NOT_GLIBC, reason="glibc's malloc only (the cap is a no-op elsewhere)")
def test_the_process_makes_at_most_two_arenas_when_capped_and_one_per_thread_when_not() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _arenas("cap", environ) == ("True", allocator.ARENAS)
    capped_not, arenas = _arenas("free", environ)
    assert capped_not == "False"
    assert arenas == 7  # the main thread's and one for each of the six


@pytest.mark.skipif(_NOT_GLIBC, reason="glibc's malloc only")
def test_the_operators_malloc_arena_max_wins() -> None:
    environ = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    assert _arenas("cap", environ) == ("False", 4)


def test_nothing_is_asked_of_the_allocator_when_the_environment_sets_the_cap() -> None:
    calls: list[tuple[int, int]] = []

    def mallopt(parameter: int, value: int) -> int:
        calls.append((parameter, value))
        return 1

    assert not allocator.limit_arenas({"MALLOC_ARENA_MAX": "1"}, mallopt)
    assert calls == []
    assert allocator.limit_arenas({}, mallopt)
    assert calls == [(-8, 2)]  # M_ARENA_MAX in glibc's malloc.h


def test_arrow_allocates_with_the_c_allocator_unless_the_environment_names_a_pool() -> None:
    environ: dict[str, str] = {}
    assert allocator.arrow_system_pool(environ)
    assert environ == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    chosen = {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    assert not allocator.arrow_system_pool(chosen)
    assert chosen == {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}


def test_serve_imports_pyarrow_with_the_system_pool() -> None:
    program = (
        "from sloscope.allocator import arrow_system_pool\n"
        "arrow_system_pool()\n"
        "import pyarrow\n"
        "print(pyarrow.default_memory_pool().backend_name)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=environ, check=False
    )
    assert done.stdout.strip() == "system", done.stderr
