"""Files whose content is re-read when they change on disk: certificates, keys, tokens, passwords.

Kubernetes updates a mounted Secret by swapping a symlink, so a change shows as a new inode, mtime or
size of the path as resolved now; :func:`stamp` reads all three through the link. Reading is cheap
(a ``stat`` per use), so callers check at every handshake or request rather than on a timer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Stamp = tuple[tuple[int, int, int], ...]


def stamp(paths: Sequence[str]) -> Stamp:
    """(inode, mtime ns, size) of each path, following symlinks; OSError when one cannot be read."""
    out = []
    for path in paths:
        info = os.stat(path)
        out.append((info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(out)


class Reloading(Generic[T]):
    """A value built from files, rebuilt when their stamp changes.

    The first build must succeed (a wrong path is a start-up error). A later failed rebuild, say a
    certificate renewed before its key, keeps the last good value and is retried at the next use;
    it is logged once per stamp, naming the files only, never their content.
    """

    def __init__(self, what: str, paths: Sequence[str], build: Callable[[], T]) -> None:
        self._what = what
        self._paths = tuple(paths)
        self._build = build
        self._stamp = stamp(self._paths)
        self._value = build()
        self._failed: object = None  # the stamp (or stat error) of the last failed rebuild, logged once
        self.generation = 0
        """How many times the value was rebuilt after the first build (tests and logs)."""

    def current(self) -> T:
        return self.refresh()[0]

    def refresh(self) -> tuple[T, bool]:
        """The value, and whether it was rebuilt just now."""
        try:
            now = stamp(self._paths)
        except OSError as exc:
            self._log_once(("stat", exc.errno), f"cannot stat: {exc.strerror}")
            return self._value, False
        if now in (self._stamp, self._failed):
            return self._value, False
        try:
            value = self._build()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self._log_once(now, type(exc).__name__)
            return self._value, False
        self._value, self._stamp, self._failed = value, now, None
        self.generation += 1
        log.info("%s reloaded from %s", self._what, ", ".join(self._paths))
        return value, True

    def _log_once(self, key: object, reason: str) -> None:
        if key == self._failed:
            return
        self._failed = key
        files = ", ".join(self._paths)
        log.warning("%s: could not reload %s (%s); keeping the previous one", self._what, files, reason)
