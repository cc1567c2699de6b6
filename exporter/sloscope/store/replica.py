"""Which replica this process is, for the record store's per-replica folders and file names.

Several replicas may share one store directory (a ReadWriteMany volume). Each writes its temporary
files under ``.incoming/<replica>/`` and puts its id in the names of the files it completes, so a
replica's start-up cleaning never touches a file another replica is writing, and two files never
share a name. The id is ``store.replica_id`` when set, else the pod name (``POD_NAME``, which the
chart sets from the downward API, then ``HOSTNAME``, which Kubernetes sets to the pod name), else
the host name: stable across restarts of one pod, distinct between the pods of a Deployment or a
StatefulSet.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

__all__ = ["REPLICA_ID_PATTERN", "replica_id"]

# A DNS-1123 label (every pod name) fits, and so does a host name with dots.
REPLICA_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def replica_id(configured: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``configured``, else the pod or host name made safe for a file name (``sloscope`` as a last resort)."""
    if configured:
        return configured
    env = os.environ if environ is None else environ
    for candidate in (env.get("POD_NAME"), env.get("HOSTNAME"), socket.gethostname()):
        safe = _UNSAFE.sub("-", candidate or "").strip("-.")[:63]
        if safe:
            return safe
    return "sloscope"
