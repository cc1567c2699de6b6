"""Child processes of the real fleet: started with their log in a file, awaited until ready, stopped in order.

Every process writes its standard output and error to ``<folder>/<name>.log``; the fleet keeps the folder, and a
failing test prints the tail of each log (see ``Fleet.logs``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def spawn(name: str, argv: Sequence[str | Path], folder: Path, env: Mapping[str, str] | None = None) -> Child:
    log = folder / f"{name}.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SLOSCOPE_", "KUBECONFIG"))}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(a) for a in argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environ | dict(env or {}),
            cwd=folder,
        )
    return Child(name, process, log)


def wait_for(child: Child, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Until ``ready()``; an AssertionError with the child's log if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise AssertionError(f"{child.name} exited ({child.process.returncode}) before {what}:\n{child.tail()}")
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{child.name}: no {what} within {timeout}s:\n{child.tail()}")


def http_ok(url: str, *, headers: Mapping[str, str] | None = None, context: SSLContext | None = None) -> bool:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(200 <= response.status < 300)
    except (urllib.error.URLError, OSError):
        return False


def logged(child: Child, text: str) -> bool:
    return text in child.log.read_text(errors="replace")
