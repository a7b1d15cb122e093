"""The real LeaderWorkerSet controller (kubernetes-sigs/lws) as an optional local cluster component.

``lws-manager`` is built from the pinned Go module by ``hack/build-tools.sh``, which also copies
the module's CRDs, RBAC and webhook manifests into ``lws-config/`` beside the tool binaries.
``LeaderWorkerSetController(cluster).up()``:

1. installs the CRDs and the manager's RBAC (its own ServiceAccount in ``lws-system``, the
   ClusterRole of the release, the leader-election Role), and mints a token for it;
2. writes a self-signed serving certificate for 127.0.0.1 and a manager Configuration with
   the internal cert manager off, the webhook server on 127.0.0.1:<free port>, health probes on
   loopback, metrics off, and leader election (a Lease in ``lws-system``);
3. starts the manager, waits for its webhook port and for it to hold the Lease;
4. registers the release's webhooks (with the release's objectSelector on LWS pods) through
   ``clientConfig.url = https://127.0.0.1:<port>/<path>`` plus the certificate as ``caBundle``,
   as controller-runtime's envtest does: no webhook is ever reached through a Service.

The pod webhook injects the group labels and ``LWS_LEADER_ADDRESS`` / ``LWS_GROUP_SIZE`` /
``LWS_WORKER_INDEX`` into every LWS pod; the controller creates one StatefulSet per group for
the workers and reports group readiness in the LeaderWorkerSet status.

The process is recorded as a cluster component: ``LocalCluster.down()`` stops it.
"""

from __future__ import annotations

import base64
import copy
import json
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.cluster import ClusterError, LocalCluster, free_port

COMPONENT = "lws-controller-manager"
NAMESPACE = "lws-system"
SERVICE_ACCOUNT = "lws-controller-manager"
# The release's default leader-election Lease name (cmd/main.go, --leader-elect-resource-name).
LEASE_NAME = "b8b2488c.x-k8s.io"
CRD_NAMES = ("leaderworkersets.leaderworkerset.x-k8s.io", "disaggregatedsets.disaggregatedset.x-k8s.io")
# The manager runs the DisaggregatedSet controller too: both CRDs must exist before it starts.
CRD_FILES = (
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
)
# kustomize's namePrefix in the release's config/default.
NAME_PREFIX = "lws-"


@dataclass
class LeaderWorkerSetController:
    cluster: LocalCluster

    @property
    def binary(self) -> Path:
        return self.cluster.bin_dir / "lws-manager"

    @property
    def config_dir(self) -> Path:
        """CRDs, RBAC and webhook manifests of the release (hack/build-tools.sh, ``lws_config``)."""
        return self.cluster.bin_dir.parent / "lws-config"

    @property
    def work_dir(self) -> Path:
        return self.cluster.state_dir / "lws"

    @property
    def log_path(self) -> Path:
        return self.cluster.state_dir / "logs" / f"{COMPONENT}.log"

    # -- lifecycle ---------------------------------------------------------------------------
    def is_running(self) -> bool:
        info = self.cluster.component(COMPONENT)
        if info is None or not self.cluster.component_alive(COMPONENT):
            return False
        return _healthy(int(info["health_port"]))

    def up(self, timeout: float = 90.0) -> bool:
        """Start the controller unless a healthy one runs already. True if it started one."""
        if self.is_running():
            return False
        self.cluster.stop_component(COMPONENT)
        missing = [p for p in (self.binary, self.config_dir / "webhooks.yaml") if not p.exists()]
        if missing:
            raise ClusterError(f"missing {', '.join(map(str, missing))}; run hack/build-tools.sh first")
        deadline = time.monotonic() + timeout
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._install_crds_and_rbac()
        ca_bundle = self._write_serving_certificate()
        webhook_port, health_port = free_port(), free_port()
        config = self._write_manager_config(webhook_port, health_port)
        kubeconfig = self._write_kubeconfig()
        self.cluster.start_component(
            COMPONENT,
            [str(self.binary), f"--config={config}", "--zap-log-level=info"],
            env={"KUBECONFIG": str(kubeconfig)},
            info={"webhook_port": webhook_port, "health_port": health_port},
        )
        self._wait(
            lambda: _healthy(health_port) and _accepts_tls(webhook_port), deadline, "health and webhook ports"
        )
        self._register_webhooks(webhook_port, ca_bundle)
        self._wait(self._holds_lease, deadline, f"the Lease {NAMESPACE}/{LEASE_NAME}")
        return True

    def down(self) -> None:
        self.cluster.stop_component(COMPONENT)

    # -- steps -------------------------------------------------------------------------------
    def _install_crds_and_rbac(self) -> None:
        files = [f"--filename={self.config_dir / crd}" for crd in CRD_FILES]
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", *files)
        self.cluster.wait_crds_established(*CRD_NAMES)
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(self._rbac())
        )

    def _rbac(self) -> list[dict[str, Any]]:
        cluster_role = _load_one(self.config_dir / "rbac-role.yaml")
        election_role = _load_one(self.config_dir / "rbac-leader-election-role.yaml")
        cluster_role["metadata"] = {"name": NAME_PREFIX + cluster_role["metadata"]["name"]}
        election_role["metadata"] = {
            "name": NAME_PREFIX + election_role["metadata"]["name"],
            "namespace": NAMESPACE,
        }
        subject = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            },
            cluster_role,
            election_role,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": cluster_role["metadata"]["name"]},
                "roleRef": _role_ref("ClusterRole", cluster_role),
                "subjects": subject,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": election_role["metadata"],
                "roleRef": _role_ref("Role", election_role),
                "subjects": subject,
            },
        ]

    def _write_serving_certificate(self) -> str:
        """Self-signed certificate for 127.0.0.1 (tls.crt/tls.key, as controller-runtime reads them)."""
        certs = self.work_dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                "-subj", "/CN=lws-webhook", "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt"),
            ],
            check=True, capture_output=True,
        )  # fmt: skip
        return base64.b64encode((certs / "tls.crt").read_bytes()).decode()

    def _write_manager_config(self, webhook_port: int, health_port: int) -> Path:
        config = {
            "apiVersion": "config.lws.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": True},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(self.work_dir / "certs")},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
        }
        path = self.work_dir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _write_kubeconfig(self) -> Path:
        token = self.cluster.kubectl(
            "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=24h"
        ).stdout.strip()
        cfg = json.loads(self.cluster.kubeconfig.read_text())
        cfg["users"] = [{"name": SERVICE_ACCOUNT, "user": {"token": token}}]
        cfg["contexts"][0]["context"]["user"] = SERVICE_ACCOUNT
        path = self.work_dir / "kubeconfig"
        path.write_text(json.dumps(cfg))
        path.chmod(0o600)
        return path

    def _register_webhooks(self, port: int, ca_bundle: str) -> None:
        configs = webhook_configurations(self.config_dir, f"https://127.0.0.1:{port}", ca_bundle)
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(configs)
        )

    def _holds_lease(self) -> bool:
        res = self.cluster.kubectl("get", "lease", LEASE_NAME, "-n", NAMESPACE, "-o", "json", check=False)
        if res.returncode != 0:
            return False
        return bool(json.loads(res.stdout).get("spec", {}).get("holderIdentity"))

    def _wait(self, ready: Any, deadline: float, what: str) -> None:
        while not ready():
            if not self.cluster.component_alive(COMPONENT):
                tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
                raise ClusterError(f"{COMPONENT} exited; last log lines:\n{tail}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{COMPONENT}: timed out waiting for {what}; see {self.log_path}")
            time.sleep(0.3)


def webhook_configurations(config_dir: Path, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The release's webhook configurations, patched as its kustomization does, served at ``base_url``.

    The release's patches add an objectSelector to the pod webhooks (only pods carrying the
    ``leaderworkerset.sigs.k8s.io/name`` label go to the webhook); each ``clientConfig.service``
    becomes ``url: <base_url><path>`` with ``caBundle``.
    """
    docs = [d for d in yaml.safe_load_all((config_dir / "webhooks.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": yaml.safe_load((config_dir / "mutating-patch.yaml").read_text()),
        "ValidatingWebhookConfiguration": yaml.safe_load((config_dir / "validating-patch.yaml").read_text()),
    }
    result = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for op in patches.get(doc["kind"], []):
            _apply_replace(doc, op)
        doc["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
        result.append(doc)
    return result


def _apply_replace(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """The JSON-patch subset the release uses: ``replace`` at ``/webhooks/<index>``."""
    parts = op["path"].strip("/").split("/")
    if op.get("op") != "replace" or len(parts) != 2 or parts[0] != "webhooks":
        raise ClusterError(f"unsupported webhook patch {op!r}")
    doc["webhooks"][int(parts[1])] = op["value"]


def _load_one(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ClusterError(f"{path}: expected one object")
    return docs[0]


def _role_ref(kind: str, role: dict[str, Any]) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role["metadata"]["name"]}


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _accepts_tls(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock,
            ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return True
    except OSError:
        return False
