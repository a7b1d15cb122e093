"""`helm install`, `upgrade` and `uninstall` of the chart with the real Helm binary on the local cluster.

The operator pods are simulated: the scheduler places them on the fixture's CPU node (no GPU
taint) and KWOK, which plays every kubelet here, reports them Running and Ready without running a
container, so `helm install --wait` sees an available Deployment. The image itself runs in
test_image.py, under podman, exactly as this Deployment specifies.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import yaml

from tests.harness.chart import CHART, KUBE_VERSION

from .conftest import E2ECluster, delete_namespace

pytestmark = pytest.mark.e2e

INSTANCE = "app.kubernetes.io/instance"


def chart_crds(cluster: E2ECluster) -> list[str]:
    """The CustomResourceDefinitions the chart installs with its default values."""
    rendered = cluster.helm("template", "crds", str(CHART), "--kube-version", KUBE_VERSION).stdout
    docs = yaml.safe_load_all(rendered)
    return sorted(d["metadata"]["name"] for d in docs if d and d["kind"] == "CustomResourceDefinition")


def adopt_crds(cluster: E2ECluster, release: str, namespace: str) -> None:
    """Let the release take over the CRDs other tests applied, the way Helm documents it (its
    ownership label and annotations); on a cluster without them this is not needed."""
    for name in chart_crds(cluster):
        crd = f"customresourcedefinitions.apiextensions.k8s.io/{name}"
        if cluster.kubectl("get", crd, check=False).returncode != 0:
            continue
        cluster.kubectl("label", "--overwrite", crd, "app.kubernetes.io/managed-by=Helm")
        cluster.kubectl(
            "annotate", "--overwrite", crd,
            f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}",
        )  # fmt: skip


def cluster_scoped(cluster: E2ECluster, release: str) -> list[str]:
    kinds = "clusterroles,clusterrolebindings,customresourcedefinitions"
    out = cluster.kubectl("get", kinds, "-l", f"{INSTANCE}={release}", "-o", "name").stdout
    return sorted(out.split())


def helm_status(cluster: E2ECluster, release: str, namespace: str) -> dict[str, Any]:
    return dict(json.loads(cluster.helm("status", release, "-n", namespace, "-o", "json").stdout))


def deployment(cluster: E2ECluster, release: str, namespace: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "deployment", "-n", namespace, "-l", f"{INSTANCE}={release}", "-o", "json")
    (item,) = json.loads(out.stdout)["items"]
    return dict(item)


def env_of(dep: dict[str, Any]) -> dict[str, str]:
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", "") for e in env}


@pytest.mark.parametrize("values", ["default", "namespaced"])
def test_helm_install_upgrade_uninstall(cluster: E2ECluster, values: str) -> None:
    namespace = f"helm-{values[:2]}-{os.getpid()}"
    release = f"glm-{values[:2]}-{os.getpid()}"
    args = ["install", release, str(CHART), "-n", namespace, "--create-namespace", "--wait", "--timeout=3m"]
    watched: list[str] = []
    if values == "namespaced":
        watched = [cluster.namespace("helm-w1"), cluster.namespace("helm-w2")]
        args += ["-f", str(CHART / "ci" / "namespaced-values.yaml")]
        args += ["--set", f"watchNamespaces={{{','.join(watched)}}}"]
    adopt_crds(cluster, release, namespace)
    try:
        result = cluster.helm(*args, timeout=240)
        assert "STATUS: deployed" in result.stdout, result.stdout + result.stderr
        for crd in chart_crds(cluster):
            cluster.local.wait_crds_established(crd)
        dep = deployment(cluster, release, namespace)
        expected_replicas = 1 if values == "namespaced" else 2
        assert dep["status"].get("readyReplicas") == expected_replicas, dep["status"]

        # RBAC is bound to the release's ServiceAccount.
        account = dep["spec"]["template"]["spec"]["serviceAccountName"]
        subject = f"system:serviceaccount:{namespace}:{account}"

        def can(*check: str) -> bool:
            res = cluster.kubectl("auth", "can-i", *check, "--as", subject, check=False)
            return res.stdout.strip() == "yes"

        assert can("update", "leases.coordination.k8s.io", "-n", namespace)
        if values == "namespaced":
            assert can("patch", "glmdeployments.inference.glm.dev", "-n", watched[0])
            assert can("create", "deployments.apps", "-n", watched[1])
            assert not can("list", "glmdeployments.inference.glm.dev", "--all-namespaces")
            assert env_of(dep)["GLM_OPERATOR_WATCH_NAMESPACES"] == ",".join(watched)
        else:
            assert can("list", "glmdeployments.inference.glm.dev", "--all-namespaces")
            assert env_of(dep)["GLM_OPERATOR_WATCH_NAMESPACES"] == ""
        assert not can("list", "secrets", "-n", namespace)
        owned = cluster_scoped(cluster, release)
        assert any(name.startswith("clusterrole.") for name in owned), owned

        # `helm upgrade` to a changed value rolls the Deployment.
        upgraded = cluster.helm(
            "upgrade", release, str(CHART), "-n", namespace, "--reuse-values",
            "--set", "logLevel=debug", "--set", "replicaCount=1", "--wait", "--timeout=3m", timeout=240,
        )  # fmt: skip
        assert "has been upgraded" in upgraded.stdout, upgraded.stdout + upgraded.stderr
        assert helm_status(cluster, release, namespace)["version"] == 2
        dep = deployment(cluster, release, namespace)
        assert env_of(dep)["GLM_OPERATOR_LOG_LEVEL"] == "debug"
        assert dep["spec"]["replicas"] == 1

        # `helm uninstall` leaves nothing cluster-scoped but the CRDs (kept, as Helm documents).
        cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout=2m", timeout=180)
        left = cluster_scoped(cluster, release)
        crds = [f"customresourcedefinition.apiextensions.k8s.io/{name}" for name in chart_crds(cluster)]
        assert left == crds, left
        kinds = "deployments,serviceaccounts,roles,rolebindings,leases"
        namespaced = cluster.kubectl(
            "get", kinds, "-A", "-l", f"{INSTANCE}={release}", "-o", "name"
        ).stdout.split()
        assert namespaced == [], namespaced
    finally:
        cluster.helm("uninstall", release, "-n", namespace, "--ignore-not-found", check=False)
        delete_namespace(cluster, namespace)
