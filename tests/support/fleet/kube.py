"""A real Kubernetes control plane on loopback: etcd v3.6 and kube-apiserver v1.35, as ``make tools`` builds them.

No kubelet runs: the fleet creates Pod objects and sets their status (IP, phase, Ready) itself, as a kubelet would,
through the ``status`` subresource. Clients authenticate with static bearer tokens (``--token-auth-file``) and are
authorized by RBAC, so a missing permission is refused as in a cluster. The API server serves TLS with the
certificate it makes for itself (``--cert-dir``); clients skip its verification.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sloscope.demo.ports import free_ports
from tests.support.fleet.process import Child, http_ok, spawn, wait_for

ADMIN = "fleet-admin"
_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status = status


@dataclass
class User:
    name: str
    token: str
    groups: tuple[str, ...] = ()


class ControlPlane:
    """etcd and kube-apiserver as children of the test session; ``stop`` ends both, ``restart_apiserver`` one."""

    def __init__(self, tools: Path, folder: Path) -> None:
        self.tools = tools
        self.folder = folder
        self.users: dict[str, User] = {ADMIN: User(ADMIN, "admin-" + random_token(), ("system:masters",))}
        self.etcd: Child | None = None
        self.apiserver: Child | None = None
        self.port = 0

    # ---- life cycle ------------------------------------------------------------------------------

    def start(self, extra_users: list[User]) -> None:
        for user in extra_users:
            self.users[user.name] = user
        client, peer, self.port = free_ports(3)
        self.etcd = spawn(
            "etcd",
            [
                self.tools / "etcd",
                "--name=fleet",
                f"--data-dir={self.folder / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=fleet=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.folder,
        )
        wait_for(self.etcd, lambda: http_ok(f"http://127.0.0.1:{client}/health"), 30, "etcd health")
        self._etcd_url = f"http://127.0.0.1:{client}"
        self._write_credentials()
        self._start_apiserver()

    def _write_credentials(self) -> None:
        key = self.folder / "sa.key"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.folder / "sa.pub")],
                check=True,
                capture_output=True,
            )
        lines = [f'{u.token},{u.name},{u.name},"{",".join(u.groups)}"' for u in self.users.values()]
        (self.folder / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _start_apiserver(self) -> None:
        assert self.etcd is not None
        self.apiserver = spawn(
            "kube-apiserver",
            [
                self.tools / "kube-apiserver",
                f"--etcd-servers={self._etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.folder / 'apiserver-certs'}",
                f"--token-auth-file={self.folder / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={self.folder / 'sa.pub'}",
                f"--service-account-signing-key-file={self.folder / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--v=1",
            ],
            self.folder,
        )
        wait_for(self.apiserver, self._ready, 90, "kube-apiserver /readyz")

    def _ready(self) -> bool:
        return http_ok(self.url("/readyz"), headers=self._auth(ADMIN), context=_INSECURE)

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        assert self.apiserver is not None
        self.apiserver.stop()
        time.sleep(down_seconds)
        self._start_apiserver()

    def stop(self) -> None:
        for child in (self.apiserver, self.etcd):
            if child is not None:
                child.stop()

    # ---- clients ---------------------------------------------------------------------------------

    @property
    def ca(self) -> Path:
        """The API server's self-signed serving certificate (``--cert-dir``), which clients trust as its own CA."""
        return self.folder / "apiserver-certs" / "apiserver.crt"

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def _auth(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.users[user].token}"}

    def kubeconfig(self, user: str) -> Path:
        """A kubeconfig file of ``user`` (its token), for the EPP, sloscope and the Kubernetes Python client."""
        path = self.folder / f"kubeconfig-{user}.yaml"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fleet", "cluster": {"server": self.url(""), "certificate-authority": str(self.ca)}}],
            "users": [{"name": user, "user": {"token": self.users[user].token}}],
            "contexts": [{"name": "fleet", "context": {"cluster": "fleet", "user": user}}],
            "current-context": "fleet",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def request(self, method: str, path: str, body: Any = None, *, user: str = ADMIN, patch: str = "") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self._auth(user), "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = patch or "application/json"
        request = urllib.request.Request(self.url(path), data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=15, context=_INSECURE) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, error.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else None

    def apply(self, path: str, body: dict[str, Any]) -> Any:
        """Create ``body`` at the collection ``path``; an existing object of that name is replaced."""
        try:
            return self.request("POST", path, body)
        except ApiError as error:
            if error.status != 409:
                raise
        name = body["metadata"]["name"]
        current = self.request("GET", f"{path}/{name}")
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        return self.request("PUT", f"{path}/{name}", body)

    def install_crds(self, folder: Path) -> None:
        """Every CustomResourceDefinition in ``folder``, then waits until each is served."""
        names = []
        for file in sorted(folder.glob("*.yaml")):
            crd = yaml.safe_load(file.read_text())
            self.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            names.append(crd["metadata"]["name"])
        deadline = time.monotonic() + 30
        for name in names:
            while True:
                crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
                if conditions.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"CRD {name} not established: {conditions}")
                time.sleep(0.1)


def random_token() -> str:
    """A fresh secret for a static token."""
    import secrets

    return secrets.token_hex(16)
