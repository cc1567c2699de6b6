"""Probes a URL at a fixed interval from a process of its own, so the test's own work cannot delay it.

``python -m tests.support.prober URL INTERVAL`` GETs URL every INTERVAL seconds, each on a new
connection as the kubelet's HTTP probe does, until its standard input closes, then prints one JSON
list: each probe's latency in seconds (connect to body read). Start it with :func:`start` and stop it with :func:`stop`.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse


def _probe(url: str, interval: float, stop: threading.Event) -> list[float]:
    parts = urllib.parse.urlsplit(url)
    latencies = []
    next_at = time.monotonic()
    while not stop.is_set():
        start = time.monotonic()
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        connection.request("GET", parts.path, headers={"Connection": "close"})
        response = connection.getresponse()
        response.read()
        connection.close()
        latencies.append(time.monotonic() - start)
        if response.status != 200:
            raise SystemExit(f"{url} answered {response.status}")
        next_at += interval
        stop.wait(max(0.0, next_at - time.monotonic()))
    return latencies


def main() -> None:
    url, interval = sys.argv[1], float(sys.argv[2])
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print(json.dumps(_probe(url, interval, stop)), flush=True)


def start(url: str, interval: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.prober", url, str(interval)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return process


def stop(process: subprocess.Popen[str]) -> list[float]:
    out, _ = process.communicate("", timeout=60)
    if process.returncode != 0:
        raise AssertionError(f"the prober failed (exit {process.returncode})")
    latencies: list[float] = json.loads(out)
    return latencies


if __name__ == "__main__":
    main()
