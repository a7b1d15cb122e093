"""The Helm chart against the real apiserver: lint, server-side dry run, and RBAC that is exactly
enough (the operator's ServiceAccount can do its job and cannot read Secrets)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import E2ECluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "glm-operator"
KOPF_CRDS = CHART / "crds" / "kopf-peering.yaml"
GLM_CRD = ROOT / "crds" / "glmdeployments.inference.glm.dev.yaml"
KUBE_VERSION = "1.34.4"


def template(cluster: E2ECluster, release: str, namespace: str, *sets: str) -> str:
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for value in sets:
        args += ["--set", value]
    return cluster.helm(*args).stdout


def apply_crds(cluster: E2ECluster) -> None:
    """kopf's peering CRDs (Helm installs them from crds/) and the GLMDeployment CRD, so that
    `kubectl auth can-i` can resolve the resource names through discovery."""
    for path in (KOPF_CRDS, GLM_CRD):
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=glm-e2e-chart", "-f", str(path)
        )
    for name in ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev", "glmdeployments.inference.glm.dev"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


def test_helm_lint(cluster: E2ECluster) -> None:
    for values in (None, CHART / "ci" / "namespaced-values.yaml"):
        args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
        if values is not None:
            args += ["-f", str(values)]
        result = cluster.helm(*args)
        assert "0 chart(s) failed" in result.stdout, result.stdout + result.stderr
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_rendered_chart_passes_server_side_dry_run(cluster: E2ECluster, mode: str) -> None:
    apply_crds(cluster)
    namespace = cluster.namespace("chart-dry")
    sets = ["crds.keep=true"]
    if mode == "namespaced":
        watched = cluster.namespace("chart-watched")
        sets.append(f"watchNamespaces={{{watched}}}")
    rendered = template(cluster, f"dry-{os.getpid()}", namespace, *sets)
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    assert "deployment.apps/" in result.stdout and "(server dry run)" in result.stdout


def test_install_yaml_passes_server_side_dry_run(cluster: E2ECluster) -> None:
    """install.yaml creates its own namespace, so dry-run the objects that do not live in it."""
    apply_crds(cluster)
    text = (ROOT / "manifests" / "install.yaml").read_text()
    result = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=glm-e2e-install", "--dry-run=server",
        "-f", "-", input=text, check=False,
    )  # fmt: skip
    # Namespaced objects fail only because a dry run does not really create the namespace.
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors and all('namespaces "glm-operator-system" not found' in line for line in errors), (
        result.stderr
    )
    assert "customresourcedefinition.apiextensions.k8s.io/glmdeployments.inference.glm.dev" in result.stdout
    assert "clusterrole.rbac.authorization.k8s.io/glm-operator" in result.stdout


class Installed:
    def __init__(self, cluster: E2ECluster, release: str, namespace: str) -> None:
        self.cluster = cluster
        self.release = release
        self.namespace = namespace
        self.subject = f"system:serviceaccount:{namespace}:{release}"

    def can_access(self, verb: str, group: str, resource: str, namespace: str = "") -> bool:
        """A SubjectAccessReview with an explicit API group: works for resources whose CRD is not
        installed (kubectl auth can-i resolves names through discovery and answers no)."""
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": self.subject,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "namespace": namespace,
                },
            },
        }
        result = self.cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
        return bool(json.loads(result.stdout)["status"].get("allowed"))

    def can(self, *args: str) -> bool:
        result = self.cluster.kubectl("auth", "can-i", *args, "--as", self.subject, check=False)
        answer = result.stdout.strip()
        assert answer in ("yes", "no"), result.stdout + result.stderr
        return answer == "yes"


@pytest.fixture(scope="module")
def cluster_wide(cluster: E2ECluster) -> Iterator[Installed]:
    """The chart really applied (RBAC, ServiceAccount, peering object), with no operator pods."""
    apply_crds(cluster)
    namespace = cluster.namespace("chart-rbac")
    release = f"glmop-{os.getpid()}"
    rendered = template(
        cluster,
        release,
        namespace,
        "replicaCount=0",
        "crds.install=false",
        f"peering.name={release}",
        f"fullnameOverride={release}",
    )
    cluster.kubectl("apply", "-f", "-", input=rendered)
    yield Installed(cluster, release, namespace)
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=rendered, check=False)


ALLOWED = [
    ("list", "glmdeployments.inference.glm.dev", "--all-namespaces"),
    ("watch", "glmdeployments.inference.glm.dev", "--all-namespaces"),
    ("patch", "glmdeployments.inference.glm.dev", "-n", "default"),
    ("patch", "glmdeployments.inference.glm.dev", "--subresource=status", "-n", "default"),
    ("update", "glmdeployments.inference.glm.dev", "--subresource=scale", "-n", "default"),
    ("create", "deployments.apps", "-n", "default"),
    ("delete", "deployments.apps", "-n", "default"),
    ("patch", "services", "-n", "default"),
    ("watch", "pods", "--all-namespaces"),
    ("create", "events", "-n", "default"),
    ("create", "events.events.k8s.io", "-n", "default"),
    ("list", "nodes"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "namespaces"),
    ("patch", "clusterkopfpeerings.kopf.dev"),
]

DENIED = [
    ("list", "secrets", "--all-namespaces"),
    ("get", "secrets", "-n", "default"),
    ("watch", "secrets", "--all-namespaces"),
    ("create", "pods", "-n", "default"),
    ("deletecollection", "deployments.apps", "-n", "default"),
    ("delete", "nodes"),
    ("delete", "glmdeployments.inference.glm.dev", "-n", "default"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("get", "configmaps", "-n", "default"),
    ("create", "leases.coordination.k8s.io", "-n", "default"),
    ("*", "*"),
]


@pytest.mark.parametrize("check", ALLOWED, ids=[" ".join(c) for c in ALLOWED])
def test_service_account_can(cluster_wide: Installed, check: tuple[str, ...]) -> None:
    assert cluster_wide.can(*check)


@pytest.mark.parametrize("check", DENIED, ids=[" ".join(c) for c in DENIED])
def test_service_account_cannot(cluster_wide: Installed, check: tuple[str, ...]) -> None:
    assert not cluster_wide.can(*check)


def test_leaderworkersets_without_their_crd(cluster_wide: Installed) -> None:
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        assert cluster_wide.can_access(verb, "leaderworkerset.x-k8s.io", "leaderworkersets", "default"), verb
    assert not cluster_wide.can_access(
        "deletecollection", "leaderworkerset.x-k8s.io", "leaderworkersets", "default"
    )


def test_leases_only_in_the_operator_namespace(cluster_wide: Installed) -> None:
    assert cluster_wide.can("create", "leases.coordination.k8s.io", "-n", cluster_wide.namespace)
    assert not cluster_wide.can("create", "leases.coordination.k8s.io", "-n", "kube-system")
    assert not cluster_wide.can("list", "secrets", "-n", cluster_wide.namespace)


def test_peering_object_exists(cluster_wide: Installed) -> None:
    peering = json.loads(
        cluster_wide.cluster.kubectl("get", "clusterkopfpeering", cluster_wide.release, "-o", "json").stdout
    )
    assert peering["metadata"]["labels"]["app.kubernetes.io/instance"] == cluster_wide.release


def test_namespaced_mode_rbac(cluster: E2ECluster) -> None:
    apply_crds(cluster)
    namespace = cluster.namespace("chart-nsop")
    watched = cluster.namespace("chart-nsw")
    other = cluster.namespace("chart-nso")
    release = f"glmns-{os.getpid()}"
    rendered = template(
        cluster,
        release,
        namespace,
        "replicaCount=0",
        "crds.install=false",
        f"watchNamespaces={{{watched}}}",
        f"fullnameOverride={release}",
    )
    cluster.kubectl("apply", "-f", "-", input=rendered)
    try:
        installed = Installed(cluster, release, namespace)
        assert installed.can("list", "glmdeployments.inference.glm.dev", "-n", watched)
        assert installed.can("create", "deployments.apps", "-n", watched)
        assert installed.can("patch", "kopfpeerings.kopf.dev", "-n", watched)
        assert not installed.can("list", "glmdeployments.inference.glm.dev", "-n", other)
        assert not installed.can("list", "glmdeployments.inference.glm.dev", "--all-namespaces")
        assert not installed.can("create", "deployments.apps", "-n", other)
        assert not installed.can("patch", "clusterkopfpeerings.kopf.dev")
        assert installed.can("list", "nodes")
        assert not installed.can("list", "secrets", "-n", watched)
    finally:
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=rendered, check=False
        )
