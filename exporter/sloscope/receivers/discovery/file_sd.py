"""Prometheus ``file_sd`` files: JSON or YAML lists of target groups, polled for changes.

A file is a list of ``{"targets": ["host:port", ...], "labels": {...}}``; the last path component
of a configured path may be a glob. As in Prometheus, a file that cannot be read or has the wrong
shape keeps the targets it last gave (a half-written file must not empty a pool), a deleted file's
targets go away, and ``__scrape_interval__`` / ``__scrape_timeout__`` labels set one target's
scrape timing. The parsing is a set of pure functions; :class:`FileSDDiscovery` only polls.
"""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from sloscope.config import FileSD
from sloscope.receivers.discovery import Target, Update, sorted_labels
from sloscope.redaction import without_userinfo

__all__ = [
    "FileSDDiscovery",
    "FileSDError",
    "expand_paths",
    "file_format",
    "parse_duration",
    "parse_file",
    "targets_from_groups",
]

log = logging.getLogger(__name__)

POD_LABELS = ("pod", "__meta_kubernetes_pod_name")
"""Labels naming a target's pod, tried in order; the address names it when neither is set."""
INTERVAL_LABEL = "__scrape_interval__"
TIMEOUT_LABEL = "__scrape_timeout__"

_GROUP_KEYS = frozenset({"targets", "labels"})
_ADDRESS = re.compile(r"^[^\s/]+:\d+$")  # the same rule as StaticTarget.address
# Prometheus' duration syntax (common/model.ParseDuration): units in this order, integers only.
_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$",
)
_UNIT_SECONDS = (365 * 86400.0, 7 * 86400.0, 86400.0, 3600.0, 60.0, 1.0, 0.001)

Format = Literal["json", "yaml"]


class FileSDError(ValueError):
    """Why a file's content is not a usable list of target groups (the message names the place)."""


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration (``500ms``, ``5s``, ``1m30s``, ``1h``, ``0``); ValueError otherwise."""
    if text == "0":
        return 0.0
    match = _DURATION.match(text)
    if not text or match is None:
        raise ValueError(f"not a duration: {text!r} (like 500ms, 5s, 1m30s)")
    return sum(int(value) * unit for value, unit in zip(match.groups(), _UNIT_SECONDS, strict=True) if value)


def file_format(path: str) -> Format:
    """The format a file's extension names, as Prometheus decides it."""
    lowered = path.lower()
    if lowered.endswith(".json"):
        return "json"
    if lowered.endswith((".yml", ".yaml")):
        return "yaml"
    raise FileSDError("unsupported extension; file_sd files end in .json, .yml or .yaml")


def _decode(text: str, fmt: Format) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise FileSDError(f"not valid JSON: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FileSDError("not valid YAML: " + " ".join(str(exc).split())) from exc
    return [] if data is None else data  # an empty YAML file is an empty list, as in Prometheus


def _seconds(labels: dict[str, str], name: str, where: str) -> float | None:
    value = labels.get(name)
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise FileSDError(f"{where}: label {name}: {exc}") from exc
    if seconds <= 0:
        raise FileSDError(f"{where}: label {name} must be positive, got {value!r}")
    return seconds


def _labels(group: dict[Any, Any], where: str) -> dict[str, str]:
    labels = group.get("labels", {})
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise FileSDError(f"{where}: labels must be a mapping, got {type(labels).__name__}")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise FileSDError(f"{where}: label {name!r} must be a string with a string value, got {value!r}")
    return labels


def _addresses(group: dict[Any, Any], where: str) -> list[str]:
    addresses = group.get("targets", [])
    if addresses is None:
        return []
    if not isinstance(addresses, list):
        raise FileSDError(f"{where}: targets must be a list of host:port, got {type(addresses).__name__}")
    for address in addresses:
        if not isinstance(address, str) or not _ADDRESS.match(address):
            raise FileSDError(f"{where}: target {address!r} is not host:port")
    return addresses


def targets_from_groups(pool: str, groups: Any) -> list[Target]:
    """The targets of decoded file content; FileSDError naming the group and reason when the shape is wrong.

    Unknown keys in a group are refused (a misspelt ``target`` would otherwise give nothing, silently),
    and so are two targets of one file with the same pod name: only one of them could be scraped.
    """
    if not isinstance(groups, list):
        raise FileSDError(f"expected a list of target groups, got {type(groups).__name__}")
    out: list[Target] = []
    seen: dict[str, str] = {}
    for index, group in enumerate(groups):
        where = f"target group {index}"
        if not isinstance(group, dict):
            raise FileSDError(f"{where}: expected a mapping with targets and labels, got {type(group).__name__}")
        unknown = sorted(str(key) for key in group if key not in _GROUP_KEYS)
        if unknown:
            raise FileSDError(f"{where}: unknown key(s) {', '.join(unknown)}; a group has targets and labels")
        labels = _labels(group, where)
        interval = _seconds(labels, INTERVAL_LABEL, where)
        timeout = _seconds(labels, TIMEOUT_LABEL, where)
        if interval is not None and timeout is not None and timeout > interval:
            raise FileSDError(f"{where}: {TIMEOUT_LABEL} is longer than {INTERVAL_LABEL}")
        named = next((labels[name] for name in POD_LABELS if labels.get(name)), None)
        pod_labels = sorted_labels(
            {name: value for name, value in labels.items() if not name.startswith("__") and name not in POD_LABELS}
        )
        for address in _addresses(group, where):
            pod = named or without_userinfo(address)
            if pod in seen:
                raise FileSDError(f"{where}: pod {pod!r} of {address} is already the pod of {seen[pod]}")
            seen[pod] = address
            out.append(
                Target(pool, pod, address, interval_seconds=interval, timeout_seconds=timeout, labels=pod_labels)
            )
    return out


def parse_file(pool: str, path: str, text: str) -> list[Target]:
    """The targets of one file's text, its format taken from its extension; FileSDError when unusable."""
    return targets_from_groups(pool, _decode(text, file_format(path)))


def expand_paths(patterns: Sequence[str]) -> list[str]:
    """Existing files the patterns name, sorted and without repeats.

    Only the last path component is a glob (Prometheus refuses a glob anywhere else), so the
    directory part is matched literally. Hidden files are skipped, like editors' swap files.
    """
    found: set[str] = set()
    for pattern in patterns:
        directory, name = os.path.split(pattern)
        literal = os.path.join(glob.escape(directory), name) if directory else name
        found.update(path for path in glob.glob(literal) if os.path.isfile(path))
    return sorted(found)


@dataclass(frozen=True)
class _Seen:
    stamp: tuple[int, int, int]  # (mtime_ns, size, inode) when last read
    targets: tuple[Target, ...]  # the last good targets; empty if the file never parsed


class FileSDDiscovery:
    """Polls ``config.files`` every ``refresh_seconds``; re-reads only files that changed, appeared or went.

    A file counts as changed when its mtime, size or inode differs from the last read.
    """

    def __init__(self, pool: str, config: FileSD) -> None:
        self._pool = pool
        self._config = config
        self._files: dict[str, _Seen] = {}

    async def run(self, update: Update) -> None:
        """Report the merged list now, then whenever a poll changes it; never returns."""
        reported: list[Target] | None = None
        while True:
            targets = await asyncio.to_thread(self._refresh)  # stat and read off the event loop
            if targets != reported:
                update(targets)
                reported = targets
            await asyncio.sleep(self._config.refresh_seconds)

    def _refresh(self) -> list[Target]:
        paths = expand_paths(self._config.files)
        for gone in sorted(set(self._files) - set(paths)):
            log.info("file_sd %s: file is gone; dropping its %d target(s)", gone, len(self._files.pop(gone).targets))
        for path in paths:
            self._read_if_changed(path)
        return [target for path in sorted(self._files) for target in self._files[path].targets]

    def _read_if_changed(self, path: str) -> None:
        try:
            status = os.stat(path)  # before reading: a write after this changes the stamp again
        except OSError:
            self._files.pop(path, None)  # removed since the glob; the next poll agrees
            return
        # The inode too: a file replaced by a rename (a ConfigMap update, an atomic write) is a change
        # even when it has the old one's size and, within the clock's resolution, its mtime.
        stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
        known = self._files.get(path)
        if known is not None and known.stamp == stamp:
            return
        kept = known.targets if known is not None else ()
        try:
            with open(path, encoding="utf-8") as file:
                targets = tuple(parse_file(self._pool, path, file.read()))
        except (OSError, UnicodeDecodeError, FileSDError) as exc:
            log.warning(
                "file_sd %s: %s; keeping its last good targets (%d) until the file changes", path, exc, len(kept)
            )
            targets = kept
        self._files[path] = _Seen(stamp, targets)
