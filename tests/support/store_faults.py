"""A record store directory that refuses writes for real, for one ``sloscope serve`` process, without root.

The serve process runs in a mount namespace of its own (``unshare``: with a user namespace when the tests
do not run as root, where an unprivileged user may mount tmpfs and bind mounts), set up before it starts:

- ``full``: the store directory is a 1 MiB tmpfs filled to the last byte, so every write gets ENOSPC, exactly
  as on a full volume. :meth:`FaultyStore.remove` deletes the filler (through ``/proc/<pid>/root``).
- ``read-only``: the store directory is bind-mounted read-only onto itself, so every write gets EROFS, as on
  a volume the kernel remounted read-only after an I/O error. :meth:`FaultyStore.remove` remounts it
  read-write from inside the namespace (``nsenter``).

Nothing outside the process's namespace changes: the test's own view of the directory stays as it was. A
chmod would not do, since the tests may run as root, which ignores file modes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

import pytest

Fault = Literal["full", "read-only"]
_FILLER = "filler"


def _namespace_flags() -> list[str]:
    return ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]


def require_mount_namespaces(scratch: Path) -> None:
    """Skips (fails in CI) when this machine cannot give a process a mount namespace with a tmpfs."""
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    probe = scratch / "probe"
    probe.mkdir(exist_ok=True)
    if not missing:
        script = f"mount -t tmpfs -o size=64k tmpfs {probe}"
        command = ["unshare", *_namespace_flags(), "sh", "-c", script]
        ran = subprocess.run(command, check=False, capture_output=True, timeout=30)
        if ran.returncode == 0:
            return
        reason = ran.stderr.decode(errors="replace").strip()
    else:
        reason = f"{', '.join(missing)} not found (util-linux)"
    message = f"a mount namespace for the faulty store is not available: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


class FaultyStore:
    """A store directory that is full or read-only for the process started with :meth:`prefix`."""

    def __init__(self, directory: Path, fault: Fault) -> None:
        self.directory = directory
        self.fault = fault
        self.pid: int | None = None  # the serve process, once started
        directory.mkdir(parents=True, exist_ok=True)

    def prefix(self) -> list[str]:
        """The command before ``python -m sloscope serve ...``: sets the fault up, then execs the command."""
        d = self.directory
        if self.fault == "full":
            fill = f"head -c 2m /dev/zero > {d}/{_FILLER} 2>/dev/null"  # stops at ENOSPC, the tmpfs full
            setup = f"mount -t tmpfs -o size=1m tmpfs {d} && {{ {fill}; true; }}"
        else:
            setup = f"mount --bind {d} {d} && mount -o remount,ro,bind {d}"
        return ["unshare", *_namespace_flags(), "sh", "-c", f'{setup} && exec "$@"', "sh"]

    def seen_by_process(self) -> Path:
        """The directory as the serve process sees it (its mount namespace), readable while it runs."""
        assert self.pid is not None
        return Path(f"/proc/{self.pid}/root{self.directory}")

    def remove(self) -> None:
        """Ends the fault: the filler goes, or the directory is writable again."""
        assert self.pid is not None
        if self.fault == "full":
            (self.seen_by_process() / _FILLER).unlink()
            return
        flags = ["--user", "--preserve-credentials"] if os.geteuid() != 0 else []
        command = ["nsenter", "--target", str(self.pid), *flags, "--mount", "mount", "-o", "remount,rw,bind"]
        subprocess.run([*command, str(self.directory)], check=True, capture_output=True, timeout=30)
