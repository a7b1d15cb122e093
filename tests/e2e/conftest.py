"""Session fixture: a real local control plane (etcd, kube-apiserver, controller-manager,
scheduler) with KWOK-simulated GPU nodes from tests/fixtures/gpu-cluster.yaml.

Reuses a cluster that is already running (``make cluster``); otherwise starts one for the session
and stops it at the end. Everything listens on loopback.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from glm_operator.testing.cluster import LocalCluster, repo_root

NODES = repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml"
_counter = itertools.count()


class E2ECluster:
    """What e2e tests get: kubeconfig, binaries, kubectl/helm runners, fresh namespaces."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.kubeconfig: Path = local.kubeconfig
        self.bin_dir: Path = local.bin_dir
        self.namespaces: list[str] = []

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.local.kubectl(*args, input=input, check=check, timeout=timeout)

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.local.helm(*args, input=input, check=check, timeout=timeout)

    def namespace(self, name_prefix: str = "t") -> str:
        name = f"{name_prefix}-{os.getpid()}-{next(_counter)}"[:63]
        self.kubectl("create", "namespace", name)
        self.namespaces.append(name)
        return name


def delete_namespace(cluster: E2ECluster, name: str, timeout: float = 60) -> None:
    """Delete a namespace and wait until it is gone, so its pods no longer hold GPUs."""
    cluster.kubectl(
        "delete", "namespace", name, "--ignore-not-found", f"--timeout={timeout:.0f}s", check=False
    )


@pytest.fixture
def ns(cluster: E2ECluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named ctl-<test> (served by the operator fixture), deleted after the test."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:30]
    name = f"ctl-{base}-{next(_counter)}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        delete_namespace(cluster, name)


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    local = LocalCluster()
    started = local.up(nodes=[NODES])
    e2e = E2ECluster(local)
    try:
        yield e2e
    finally:
        if started and not os.environ.get("GLM_KEEP_CLUSTER"):
            local.down()
        else:
            for ns in e2e.namespaces:
                local.kubectl("delete", "namespace", ns, "--wait=false", check=False)


# -- the operator under test ---------------------------------------------------------------------
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


class RunningOperator:
    """``glm-operator run`` as a subprocess, authenticated as the chart's ServiceAccount (not admin)."""

    def __init__(self, cluster: E2ECluster, workdir: Path, namespaces: str = "ctl-*") -> None:
        self.cluster = cluster
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

    def start(self, *extra: str) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "POD_NAMESPACE": OPERATOR_NAMESPACE}
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "glm_operator.cli", "run",
                "--namespace", self.namespaces,
                "--resync-seconds", "5",
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


@pytest.fixture(scope="session")
def operator(cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningOperator]:
    op = RunningOperator(cluster, tmp_path_factory.mktemp("operator"))
    op.install()
    op.start()
    try:
        yield op
    finally:
        op.stop()
