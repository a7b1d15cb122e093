"""``glm-operator run`` as a subprocess with the chart's ServiceAccount and RBAC (not admin).

Used by the e2e tests, ``make demo`` and the benchmarks: install the CRD and exactly the RBAC of
``manifests/install.yaml``, mint a token for the operator's ServiceAccount, start/stop/kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from glm_operator.testing.cluster import LocalCluster, repo_root

OPERATOR_NAMESPACE = "glm-operator-system"
OPERATOR_SA = "glm-operator"
RBAC_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "CustomResourceDefinition",
}


# Far above any test's duration: every behaviour under test must be driven by watch events, as in
# production; only the test that proves the resync repairs drift asks for a short one.
DEFAULT_RESYNC_SECONDS = 600.0


class RunningOperator:
    """``glm-operator run`` as a subprocess, authenticated as the chart's ServiceAccount (not admin)."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        namespaces: str = "ctl-*",
        resync_seconds: float = DEFAULT_RESYNC_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.resync_seconds = resync_seconds
        self.workdir = workdir
        self.namespaces = namespaces
        self.kubeconfig = workdir / "operator.kubeconfig"
        self.log_path = workdir / "operator.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        """CRD + ServiceAccount + RBAC exactly as manifests/install.yaml has them."""
        docs = [d for d in yaml.safe_load_all((repo_root() / "manifests" / "install.yaml").read_text()) if d]
        wanted = [d for d in docs if d.get("kind") in RBAC_KINDS]
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(wanted)
        )
        self.cluster.kubectl(
            "wait", "--for=condition=Established", "crd/glmdeployments.inference.glm.dev", "--timeout=60s"
        )
        token = self.cluster.kubectl(
            "create", "token", OPERATOR_SA, "-n", OPERATOR_NAMESPACE, "--duration=6h"
        ).stdout.strip()
        cfg = json.loads(self.cluster.kubeconfig.read_text())
        cfg["users"] = [{"name": "operator", "user": {"token": token}}]
        cfg["contexts"][0]["context"]["user"] = "operator"
        self.kubeconfig.write_text(json.dumps(cfg))

    def start(self, *extra: str, env: dict[str, str] | None = None) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "POD_NAMESPACE": OPERATOR_NAMESPACE,
            **(env or {}),
        }
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "glm_operator.cli", "run",
                *(["--namespace", self.namespaces] if self.namespaces else ["--all-namespaces"]),
                "--resync-seconds", str(self.resync_seconds),
                "--leader-election-namespace", OPERATOR_NAMESPACE,
                "--log-level", "info",
                *extra,
            ],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""
