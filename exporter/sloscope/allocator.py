"""The C allocator's knobs the server turns: how many arenas glibc may make, and giving freed memory back.

glibc's malloc gives each thread that allocates an arena of its own (up to eight per core), and memory freed in
an arena stays with it. The native core decodes spans on the receivers' threads and the join frees them on its
own, so with an arena per thread every arena keeps the slack of what the others freed: with ``bench/pending.py``
(100,000 two-span traces waiting with both spans) the server's resident set grew by 1,052 to 1,072 bytes a trace
with glibc's default and 950 with two arenas for the whole process, against 864 bytes held by the join's own
count; the CPU per span was no higher with two (``docs/performance.md``). So ``sloscope serve`` asks glibc for
at most :data:`ARENAS` arenas before it starts a thread, unless ``MALLOC_ARENA_MAX`` is in its environment: the
operator's setting wins. Elsewhere than glibc nothing is done.

Arrow allocates through a pool of its own, mimalloc by default in the pyarrow this project pins, which reserves
1 GiB of address space at its first allocation and backs what it touches with huge pages: 4 MiB resident at
start and 6 MiB under ``bench/memory.py``'s load, while Arrow itself never held more than 0.1 MiB there (the
joined batches are the native join's memory, imported through the C data interface; Arrow allocates only the
small results of a few compute calls). So ``serve`` has Arrow use the C allocator (:func:`arrow_system_pool`),
unless ``ARROW_DEFAULT_MEMORY_POOL`` is in its environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Mapping, MutableMapping

ARENAS = 2
ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"  # read by Arrow when it first needs its default pool
_M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h


def _glibc(name: str) -> Callable[..., int] | None:
    with contextlib.suppress(OSError, AttributeError):
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)  # ctypes releases the GIL around calls
        return function
    return None


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, None elsewhere."""
    return _glibc("malloc_trim")


def limit_arenas(environ: Mapping[str, str] = os.environ, mallopt: Callable[[int, int], int] | None = None) -> bool:
    """Caps glibc's arenas at :data:`ARENAS` unless the environment sets ``MALLOC_ARENA_MAX``; True when capped.

    Call it before any thread allocates: an arena once made stays."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    mallopt = mallopt if mallopt is not None else _glibc("mallopt")
    return mallopt is not None and mallopt(_M_ARENA_MAX, ARENAS) == 1


def arrow_system_pool(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Has Arrow allocate with the C allocator unless the environment names a pool; True when set here.

    Call it before pyarrow is imported: the default pool is chosen once."""
    if ARROW_POOL in environ:
        return False
    environ[ARROW_POOL] = "system"
    return True
