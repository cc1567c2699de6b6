"""Where ``sloscope serve``'s resident memory goes: idle, under load, and after the load.

Run from the repository root (``.venv/bin/python bench/memory.py``); docs/performance.md quotes it. One server is
started with the settings ``bench/compare.py`` gives its native engine, pinned with ``taskset`` (``--cpu``), and
runs inside a probe (this script's ``probe`` command) that answers SIGUSR1 with a snapshot of what the process
knows about its own memory, written as JSON: the Python objects (``sys.getallocatedblocks``, the gc's object
counts, pymalloc's arenas, tracemalloc's top files with ``--tracemalloc``), glibc's account (``mallinfo2``: bytes
in use and free in its arenas, bytes in mmapped chunks), Arrow's pool (its backend, bytes allocated, the most it
held), the native join's own count (``pending_bytes``) and the modules imported. SIGUSR2 runs ``malloc_trim(0)``
first, to show what glibc gives back. Beside each snapshot the script reads ``/proc/PID/status`` (VmRSS, RssAnon,
RssFile), ``/proc/PID/smaps_rollup`` and the largest mappings of ``/proc/PID/smaps``.

The load is both payload sets of bench/payloads.py (two-span traces, then llm-d agent sessions) over OTLP/HTTP
protobuf (and OTLP/gRPC with ``--transports http grpc``, as bench/compare.py sends them), ``--rounds`` times with
fresh trace ids, sent by this process from the same core as the server unless
``--client-cpu`` says otherwise. Snapshots: idle after start, after a warm-up, after every round's requests are
counted, and ``--settle`` seconds after the last (the quiet time a server sees between bursts). Extra environment
for the server (``--env NAME=VALUE``, e.g. ``ARROW_DEFAULT_MEMORY_POOL=system`` or ``MALLOC_ARENA_MAX=1``) compares
allocator settings. It asserts nothing and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The probe runs inside the server, so this module imports only the standard library at its top: the server's
# modules and memory are its own. The sibling modules of bench/ (the script's folder is first on sys.path) are
# imported by the functions that start and load a server.
if TYPE_CHECKING:
    from payloads import PayloadSet

SNAPSHOT_WAIT_SECONDS = 10.0
MIB = 1024 * 1024


# ---- inside the server: the probe ----------------------------------------------------------------------------


class _Mallinfo2(ctypes.Structure):
    _fields_ = [  # glibc's struct mallinfo2 (malloc.h), every field a size_t
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]  # fmt: skip


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def _mallinfo() -> dict[str, int]:
    """glibc's totals over every arena: ``arena`` bytes taken from the system by sbrk and mmapped arenas,
    ``uordblks`` in use, ``fordblks`` free in them, ``hblkhd`` in chunks mmapped on their own."""
    libc = _libc()
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name, _ in _Mallinfo2._fields_}


def _pymalloc_arenas() -> dict[str, int]:
    """pymalloc's arenas in use and their bytes, from ``sys._debugmallocstats`` (it writes to the C stderr)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    fields = {}
    for label, key in (("arenas allocated current", "arenas"), ("bytes in allocated blocks", "blocks_bytes"),
                       ("bytes in available blocks", "free_block_bytes"), ("Total", "total_bytes")):  # fmt: skip
        match = re.search(rf"^(?:# )?{re.escape(label)}\s*=\s*([\d,]+)", text, re.MULTILINE)
        if match:
            fields[key] = int(match.group(1).replace(",", ""))
    return fields


def _arrow() -> dict[str, Any] | None:
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return None
    pool = pa.default_memory_pool()
    return {
        "backend": pool.backend_name,
        "bytes_allocated": pool.bytes_allocated(),
        "max_memory": pool.max_memory(),
        "total_allocated_bytes": pa.total_allocated_bytes(),
    }


def _top_packages(modules: list[str]) -> dict[str, int]:
    counts = Counter(name.split(".", 1)[0] for name in modules)
    return dict(counts.most_common())


def _tracemalloc_top(limit: int = 25) -> list[tuple[str, int]] | None:
    import tracemalloc

    if not tracemalloc.is_tracing():
        return None
    by_package: Counter[str] = Counter()
    for stat in tracemalloc.take_snapshot().statistics("filename"):
        name = stat.traceback[0].filename
        site = re.search(r"site-packages/([^/]+)", name) or re.search(r"/sloscope/([^/]+)", name)
        key = ("sloscope/" if "site-packages" not in name and site else "") + (site.group(1) if site else name)
        by_package[key] += stat.size
    return by_package.most_common(limit)


class Probe:
    """What the server process knows of its memory, written to ``out`` as JSON on SIGUSR1 (SIGUSR2: after
    ``malloc_trim(0)``). Installed before ``serve`` starts; finds the service among the gc's objects when asked
    (importing the service's module beforehand would import pyarrow before ``serve`` chooses its pool)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.snapshots = 0

    @staticmethod
    def service() -> Any:
        return next((o for o in gc.get_objects() if type(o).__name__ == "Service" and hasattr(o, "pipeline")), None)

    def snapshot(self, trimmed: bool) -> dict[str, Any]:
        trim = None
        if trimmed:
            start = time.perf_counter()
            trim = {"released": int(_libc().malloc_trim(0)), "seconds": time.perf_counter() - start}
        pending = None
        service = self.service()
        if service is not None:
            shards = service.pipeline._shards
            pending = {
                "traces": sum(s.assembler.pending for s in shards),
                "bytes": sum(s.assembler.pending_bytes for s in shards),
            }
        modules = sorted(sys.modules)
        return {
            "time": time.time(),
            "trim": trim,
            "allocated_blocks": sys.getallocatedblocks(),
            "gc_objects": len(gc.get_objects()),
            "gc_frozen": gc.get_freeze_count(),
            "pymalloc": _pymalloc_arenas(),
            "mallinfo2": _mallinfo(),
            "arrow": _arrow(),
            "join_pending": pending,
            "threads": threading.active_count(),
            "modules": len(modules),
            "packages": _top_packages(modules),
            "tracemalloc": _tracemalloc_top(),
        }

    def on_signal(self, signum: int, frame: Any) -> None:
        del frame
        document = self.snapshot(trimmed=signum == signal.SIGUSR2)
        self.snapshots += 1
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(document), encoding="utf-8")
        tmp.replace(self.out)  # the parent waits for the file to appear whole


def probe_main(argv: list[str]) -> int:
    """``probe OUT serve --config FILE``: ``sloscope serve`` with the probe's signal handlers."""
    out = Path(argv[0])
    if os.environ.get("BENCH_MEMORY_TRACEMALLOC"):
        import tracemalloc

        tracemalloc.start(1)
    probe = Probe(out)
    signal.signal(signal.SIGUSR1, probe.on_signal)
    signal.signal(signal.SIGUSR2, probe.on_signal)
    from sloscope import cli  # imports no more than `sloscope serve` does before it starts

    return cli.main(argv[1:])


# ---- outside: /proc ------------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """``/proc/PID/status``'s memory fields and thread count, in kB (Threads: a count)."""
    wanted = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize", "Threads")
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in wanted:
                fields[name] = int(value.split()[0])
    return fields


def smaps_rollup(pid: int) -> dict[str, int]:
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                fields[name] = int(parts[0])
    return fields


def mappings(pid: int) -> list[dict[str, Any]]:
    """Every mapping of ``/proc/PID/smaps``: its path (or ``[anon]``, ``[heap]``, ``[stack]``), size and Rss, kB."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                current = {"path": head[5] if len(head) > 5 else "[anon]", "perms": head[1]}
                out.append(current)
            elif current is not None and len(head) == 3 and head[2] == "kB":
                current[head[0].rstrip(":")] = int(head[1])
    return out


def by_file(maps: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Rss by backing file, kB, largest first. Anonymous mappings are told apart where their shape says what they
    are: a thread's stack follows its guard page (a small ``---p`` mapping), a glibc arena's heap is followed by
    the rest of its 64 MiB reservation (``---p``), pymalloc's arenas are 1 MiB each (adjacent ones may be merged
    into one mapping: counted with the rest), and the rest is ``[anon]``."""
    groups: dict[str, dict[str, int]] = {}
    for k, m in enumerate(maps):
        path = m["path"]
        before = maps[k - 1] if k else None
        after = maps[k + 1] if k + 1 < len(maps) else None
        if path == "[anon]" and m["perms"].startswith("rw"):
            if before is not None and before["perms"] == "---p" and before.get("Size", 0) <= 64:
                path = "[anon: thread stacks]"
            elif (
                after is not None
                and after["perms"] == "---p"
                and after["path"] == "[anon]"
                and (m.get("Size", 0) + after.get("Size", 0) == 65536)
            ):
                path = "[anon: glibc arena heaps]"
        elif "site-packages/" in path:
            path = "site-packages/" + path.split("site-packages/", 1)[1].split("/", 1)[0]
        elif path.endswith(".so") or ".so." in path:
            path = "lib/" + path.rsplit("/", 1)[-1]
        entry = groups.setdefault(path, {"Rss": 0, "Anonymous": 0, "AnonHugePages": 0, "Size": 0, "count": 0})
        for key in ("Rss", "Anonymous", "AnonHugePages", "Size"):
            entry[key] += m.get(key, 0)
        entry["count"] += 1
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]["Rss"]))


# ---- the run -------------------------------------------------------------------------------------------------


class ProbedServer:
    """``sloscope serve`` inside the probe, pinned to ``cpu`` (bench/run.py's ``Server`` running this file's probe);
    ``snapshot()`` reads /proc and asks the probe."""

    def __init__(self, settings: dict[str, Any], cpu: int, workdir: Path, env: dict[str, str]) -> None:
        from run import Server  # not at import: the probe process chooses its allocators before pyarrow comes in

        self.out = workdir / "probe.json"
        program = [sys.executable, __file__, "probe", str(self.out)]
        self.server = Server(settings, cpu, workdir, program=program, env=env)
        self.proc, self.metrics_port = self.server.proc, self.server.metrics_port
        self.ports = {name: self.server.ports[f"otlp_{name}"] for name in ("http", "grpc")}

    def snapshot(self, label: str, trim: bool = False) -> dict[str, Any]:
        pid = self.proc.pid
        before = proc_status(pid)
        self.out.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR2 if trim else signal.SIGUSR1)
        deadline = time.monotonic() + SNAPSHOT_WAIT_SECONDS
        while not self.out.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"the probe did not answer ({label})")
            time.sleep(0.02)
        inside = json.loads(self.out.read_text(encoding="utf-8"))
        maps = mappings(pid)
        return {
            "label": label,
            "status_before": before,
            "status": proc_status(pid),
            "smaps_rollup": smaps_rollup(pid),
            "by_file": dict(list(by_file(maps).items())[:25]),
            "largest_anon": sorted(
                (
                    {key: m.get(key, 0) for key in ("Size", "Rss", "AnonHugePages")} | {"path": m["path"]}
                    for m in maps
                    if m["path"] in ("[anon]", "[heap]")
                ),
                key=lambda m: -m["Rss"],
            )[:12],
            "inside": inside,
        }

    def stop(self) -> None:
        self.server.stop()


def summary_line(snap: dict[str, Any]) -> str:
    status, inside = snap["status"], snap["inside"]
    malloc = inside["mallinfo2"]
    arrow = inside["arrow"] or {}
    pending = inside["join_pending"] or {}
    pymalloc = inside["pymalloc"]
    parts = [
        f"{snap['label']:<22}",
        f"VmRSS {status['VmRSS'] / 1024:6.1f}",
        f"anon {status['RssAnon'] / 1024:6.1f}",
        f"file {status['RssFile'] / 1024:5.1f}",
        f"glibc used {malloc['uordblks'] / MIB:5.1f} free {malloc['fordblks'] / MIB:5.1f} "
        f"mmapped {malloc['hblkhd'] / MIB:5.1f}",
        f"pymalloc {pymalloc.get('total_bytes', 0) / MIB:5.1f}",
        f"arrow {arrow.get('backend', '-')} {arrow.get('bytes_allocated', 0) / MIB:4.1f} "
        f"(max {arrow.get('max_memory', 0) / MIB:4.1f})",
        f"pending {pending.get('bytes', 0) / MIB:4.1f}",
        f"threads {status['Threads']}",
    ]
    if inside["trim"] is not None:
        parts.append(f"(VmRSS before trim {snap['status_before']['VmRSS'] / 1024:.1f})")
    return "  ".join(parts)


def send(
    server: ProbedServer, part: PayloadSet, counted: float, args: argparse.Namespace, transport: str = "http"
) -> float:
    from compare import GrpcClient
    from run import Client, wait_for_requests

    make = Client if transport == "http" else GrpcClient
    client = make(server.ports[transport], args.connections, 0.05)
    try:
        client.send(part.payloads, time.monotonic() + args.timeout)
    finally:
        client.close()
    counted += part.requests
    wait_for_requests(server.metrics_port, counted, time.monotonic() + args.timeout)
    return counted


def run(args: argparse.Namespace) -> dict[str, Any]:
    from compare import sloscope_settings
    from payloads import build, build_llmd

    env = dict(item.split("=", 1) for item in args.env)
    settings = sloscope_settings("native", args.window)
    for item in args.set:
        override(settings, item)
    if args.tracemalloc:
        env["BENCH_MEMORY_TRACEMALLOC"] = "1"
    rounds = []
    for k in range(args.rounds):
        parts = []
        for t, transport in enumerate(args.transports):
            first = 10**7 * (k * len(args.transports) + t + 1)  # a trace never comes twice
            parts.append((transport, build(args.spans, 512, 8, seed=k + 1, first_request=first)))
            parts.append((transport, build_llmd(args.spans, 512, seed=k + 1, first_session=first)))
        rounds.append(parts)
    warmup = build(2048, 512, 8, seed=99, first_request=10**9)
    snaps = []
    with tempfile.TemporaryDirectory(prefix="sloscope-bench-memory-") as tmp:
        server = ProbedServer(settings, args.cpu, Path(tmp), env)
        try:
            time.sleep(args.idle_wait)
            snaps.append(server.snapshot("idle"))
            counted = send(server, warmup, 0, args)
            snaps.append(server.snapshot("after warm-up"))
            for k, parts in enumerate(rounds):
                for transport, part in parts:
                    counted = send(server, part, counted, args, transport)
                snaps.append(server.snapshot(f"after round {k + 1}"))
            time.sleep(args.settle)
            snaps.append(server.snapshot(f"{args.settle:.0f} s later"))
            snaps.append(server.snapshot("malloc_trim(0)", trim=True))
        finally:
            server.stop()
    for snap in snaps:
        print(summary_line(snap))
    return {"env": env, "settings": settings, "snapshots": snaps}


def override(settings: dict[str, Any], item: str) -> None:
    """``join.max_done_traces=20000``: one setting by its dotted path, the value read as YAML."""
    import yaml

    path, _, value = item.partition("=")
    *sections, name = path.split(".")
    for section in sections:
        settings = settings.setdefault(section, {})
    settings[name] = yaml.safe_load(value)


def parse_args(argv: list[str]) -> argparse.Namespace:
    from run import output_options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--cpu", type=int, default=1, help="the core the server is pinned to (default 1)")
    add("--client-cpu", type=int, help="the core this process sends from (default: the server's)")
    add("--spans", type=int, default=50_000, help="spans of each payload set per round (default 50000)")
    add("--transports", nargs="+", choices=("http", "grpc"), default=["http"], help="OTLP transports (default http)")
    add("--rounds", type=int, default=2, help="rounds of both payload sets, fresh trace ids each (default 2)")
    add("--connections", type=int, default=4, help="HTTP connections sending at once (default 4)")
    add("--window", type=float, default=0.5, help="join.window_seconds (default 0.5, as bench/compare.py)")
    add("--idle-wait", type=float, default=2.0, help="seconds after start before the idle snapshot (default 2)")
    add(
        "--settle",
        type=float,
        default=70.0,
        help="seconds after the load before the last snapshots (default 70: the server trims its heap once the load "
        "has stopped for 60 to 120 s)",
    )
    add("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment of the server")
    add("--set", action="append", default=[], metavar="PATH=VALUE", help="a setting of the server (join.workers=2)")
    add("--tracemalloc", action="store_true", help="trace Python allocations in the server (slower)")
    add("--json", action="store_true", help="also print the snapshots' JSON")
    output_options(parser)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        return probe_main(argv[1:])
    args = parse_args(argv)
    os.sched_setaffinity(0, {args.client_cpu if args.client_cpu is not None else args.cpu})
    document = run(args)
    if args.json:
        print(json.dumps(document, indent=1))
    from run import write_results

    write_results(args, "memory", document)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main(sys.argv[1:]))
