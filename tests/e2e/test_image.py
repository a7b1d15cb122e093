"""The operator image, run as the chart runs it, against the local control plane.

The chart is rendered with ``helm template``; the operator container of its Deployment (command,
args, env, ports, user 65532, read-only root filesystem, no capabilities, no privilege escalation,
the /tmp emptyDir) runs from the image ``hack/image.sh`` built, under podman, on the host network
with in-cluster configuration as a kubelet provides it (see ``tests.harness.container``).
Only loopback is dialled: the apiserver, the probe paths and /metrics on 127.0.0.1.

The chart's default values (cluster-wide mode), except free ports per replica, which the shared
host network requires. Such an operator serves every namespace, so this module runs a cluster of
its own: it must not meet the GLMDeployments other tests leave in the session's cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import container
from tests.harness.chart import CHART, KUBE_VERSION, apply_crds
from tests.harness.cluster import LocalCluster, free_port, repo_root

from .conftest import NODES, E2ECluster, delete_namespace, forbidden_lines
from .test_controller import phase_is, wait_for

pytestmark = pytest.mark.e2e

SAMPLE = repo_root() / "manifests" / "samples" / "glm-4.7-flash.yaml"
VERSION = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]["version"]
LEASE = "glm-operator"


@pytest.fixture(scope="module")
def image() -> str:
    problem = container.container_problem()
    if problem:
        message = f"containers cannot run on this machine: {problem}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; .ci/run installs podman and runc, and CI runs as root")
        pytest.skip(message)
    return container.build_image()


@pytest.fixture(scope="module")
def own_cluster(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    local = LocalCluster(state_dir=tmp_path_factory.mktemp("image-cluster"))
    local.up(nodes=[NODES])
    try:
        yield E2ECluster(local)
    finally:
        local.down()


def render(cluster: E2ECluster, release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for value in sets:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(cluster.helm(*args).stdout) if doc]


def http_get(port: int, path: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


@dataclass
class Replica:
    """One operator pod of the release, as a podman container named like the pod."""

    name: str
    deployment: dict[str, Any]

    @property
    def container_spec(self) -> dict[str, Any]:
        return dict(self.deployment["spec"]["template"]["spec"]["containers"][0])

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        ports = {p["name"]: int(p["containerPort"]) for p in self.container_spec["ports"]}
        return ports[name_or_number]

    def probe_path_and_port(self, probe: str) -> tuple[str, int]:
        get = self.container_spec[probe]["httpGet"]
        return str(get["path"]), self.port(get["port"])

    def logs(self) -> str:
        return container.logs_tail(self.name)

    def wait_until_ready(self, timeout: float = 120) -> None:
        path, port = self.probe_path_and_port("readinessProbe")
        try:
            wait_for(lambda: http_get(port, path)[0] == 200, timeout, f"readiness of {self.name}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{container.container_state(self.name)}\n{self.logs()}") from None


class Release:
    """The chart's objects (all but the Deployment) applied, plus what a kubelet would mount."""

    def __init__(self, cluster: E2ECluster, workdir: Path, name: str, namespaced: bool = False) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.name = f"{name}-{os.getpid()}"
        self.namespace = cluster.namespace(f"{name}-op")
        self.samples = cluster.namespace(f"{name}-llm")
        # Namespaced mode (the chart's watchNamespaces): Roles in the samples' namespace only.
        self.values = [f"watchNamespaces={{{self.samples}}}"] if namespaced else []
        self.replicas: list[Replica] = []
        docs = self.render()
        self.rbac = [d for d in docs if d["kind"] != "Deployment"]
        apply_crds(cluster)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(self.rbac))
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        self.service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        token = cluster.kubectl(
            "create", "token", self.service_account, "-n", self.namespace, "--duration=2h"
        ).stdout.strip()
        ca = cluster.local.state_dir / "certs" / "apiserver.crt"
        self.sa_dir = container.write_service_account(workdir / "serviceaccount", token, ca, self.namespace)

    def render(self, *sets: str) -> list[dict[str, Any]]:
        return render(self.cluster, self.name, self.namespace, "crds.install=false", *self.values, *sets)

    def start_replica(self, suffix: str) -> Replica:
        """A pod of the Deployment: its own free ports (the host network is shared)."""
        docs = self.render(f"healthPort={free_port()}", f"metrics.port={free_port()}")
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        replica = Replica(f"{self.name}-glm-operator-{suffix}", deployment)
        identity = container.PodIdentity(
            pod_name=replica.name,
            namespace=self.namespace,
            service_account_dir=self.sa_dir,
            apiserver_port=int(str(self.cluster.local.server_url()).rsplit(":", 1)[1]),
        )
        container.remove(replica.name)
        container.podman(*container.podman_run_args(deployment, identity, "operator", replica.name))
        self.replicas.append(replica)
        return replica

    def lease_holder(self) -> str:
        res = self.cluster.kubectl(
            "get", "lease", LEASE, "-n", self.namespace, "-o", "jsonpath={.spec.holderIdentity}", check=False
        )
        return res.stdout.strip() if res.returncode == 0 else ""

    def close(self) -> None:
        for replica in self.replicas:
            container.remove(replica.name)
        delete_namespace(self.cluster, self.samples)
        cluster_scoped = [d for d in self.rbac if "namespace" not in d["metadata"]]
        self.cluster.kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(cluster_scoped), check=False
        )


@pytest.fixture(scope="module")
def release(own_cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    rel = Release(own_cluster, tmp_path_factory.mktemp("image"), "img")
    try:
        yield rel
    finally:
        rel.close()


@pytest.fixture(scope="module")
def leader(release: Release) -> Replica:
    replica = release.start_replica("a")
    replica.wait_until_ready()
    wait_for(lambda: release.lease_holder() == replica.name, 60, "the Lease held by the first replica")
    return replica


def test_image_is_non_root_with_the_operator_as_entrypoint(image: str, own_cluster: E2ECluster) -> None:
    config = json.loads(container.podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["glm-operator"]
    assert config["Cmd"] == ["run"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://github.com/")
    # The chart's default image is the one built here: the tag follows Chart.appVersion.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert image.endswith(f":{chart['appVersion']}")
    deployment = next(d for d in render(own_cluster, "defaults", "default") if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image
    version = container.podman("run", "--rm", "--pull=never", *container.ulimit_args(), image, "--version")
    assert version.stdout.strip() == f"glm-operator {VERSION}"


def test_image_reconciles_a_sample_as_the_chart_runs_it(release: Release, leader: Replica) -> None:
    cluster = release.cluster
    spec = leader.container_spec
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    state = json.loads(container.podman("inspect", leader.name).stdout)[0]
    assert state["Config"]["User"] == "65532:65532"
    for probe in ("livenessProbe", "readinessProbe"):
        path, port = leader.probe_path_and_port(probe)
        assert http_get(port, path)[0] == 200, probe
    cluster.kubectl("apply", "-n", release.samples, "-f", str(SAMPLE))
    name = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
    obj = wait_for(phase_is(cluster, release.samples, name, "Ready"), 180, f"{name} Ready: {leader.logs()}")
    assert obj["status"]["phase"] == "Ready"
    status, metrics = http_get(leader.port("metrics"), "/metrics")
    assert status == 200, metrics
    assert "glm_operator_reconciles_total" in metrics
    assert f'namespace="{release.samples}"' in metrics, metrics[-2000:]
    # The read-only root filesystem held: nothing crashed writing outside /tmp.
    assert "Read-only file system" not in leader.logs()


def test_sigterm_stops_within_the_grace_period_and_hands_over_the_lease(
    release: Release, leader: Replica
) -> None:
    grace = int(leader.deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    standby = release.start_replica("b")
    standby.wait_until_ready()
    assert release.lease_holder() == leader.name
    t0 = time.monotonic()
    container.podman("kill", "--signal", "TERM", leader.name)
    try:
        container.podman("wait", leader.name, timeout=grace + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {grace + 30}s after SIGTERM: {leader.logs()}")
    exited = time.monotonic() - t0
    exit_code = container.container_state(leader.name).get("ExitCode")
    wait_for(lambda: release.lease_holder() == standby.name, 60, "the standby holding the Lease")
    took_over = time.monotonic() - t0
    print(f"\nSIGTERM: exited in {exited:.1f}s (code {exit_code}); standby leader after {took_over:.1f}s")
    assert exited < grace, leader.logs()
    assert exit_code == 0, leader.logs()


def test_the_namespaced_values_run_the_operator(tmp_path: Path, release: Release) -> None:
    """After the cluster-wide tests (``release``), whose replicas have stopped by then."""
    cluster = release.cluster
    for replica in release.replicas:
        container.remove(replica.name)
    namespaced = Release(cluster, tmp_path, "imgns", namespaced=True)
    try:
        replica = namespaced.start_replica("a")
        path, port = replica.probe_path_and_port("readinessProbe")

        def ready_or_forbidden() -> bool:
            assert not forbidden_lines(replica.logs()), replica.logs()
            return http_get(port, path)[0] == 200

        wait_for(ready_or_forbidden, 120, f"readiness of {replica.name}")
        cluster.kubectl("apply", "-n", namespaced.samples, "-f", str(SAMPLE))
        name = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
        wait_for(phase_is(cluster, namespaced.samples, name, "Ready"), 180, f"{name} Ready")
    finally:
        namespaced.close()
