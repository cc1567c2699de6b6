"""sloscope's threads, named for the operating system as well as for Python.

Python 3.11 names a thread for itself only: ``top -H``, ``ps -L``, ``perf`` and ``/proc/<pid>/task/<tid>/comm``
show every thread of sloscope as "python", so an operator cannot tell the pipeline worker at a full core from a
decoding thread or gRPC's own. (Python 3.14 sets the name itself.) The kernel keeps 15 bytes of a thread's name:
there the "sloscope-" prefix is left off (the process says it already), so ``sloscope-pipeline`` shows as
``pipeline`` and ``sloscope-decode_1`` as ``decode_1``. Elsewhere than Linux the names stay Python's.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PREFIX", "name_os_thread", "os_name", "start"]

PREFIX = "sloscope-"
_PR_SET_NAME = 15  # <linux/prctl.h>
_NAME_BYTES = 15  # TASK_COMM_LEN less its terminating zero


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        prctl: Callable[..., int] = ctypes.CDLL(None).prctl
        return prctl
    return None


_set_name = _prctl()


def os_name(name: str) -> bytes:
    """What the kernel is given for a thread named ``name``."""
    return name.removeprefix(PREFIX).encode("ascii", "replace")[:_NAME_BYTES]


def name_os_thread() -> None:
    """Gives the calling thread its Python name as its OS name (the initializer of sloscope's thread pools)."""
    if _set_name is not None:
        _set_name(_PR_SET_NAME, ctypes.c_char_p(os_name(threading.current_thread().name)), 0, 0, 0)


def start(target: Callable[..., Any], name: str, *args: Any) -> threading.Thread:
    """Starts a daemon thread running ``target(*args)``, named ``name`` for Python and the operating system."""

    def body() -> None:
        name_os_thread()
        target(*args)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread
