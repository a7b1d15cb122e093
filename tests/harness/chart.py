"""The Helm chart as the cluster tests use it: rendered with the cached helm, its CRD applied.

Shared by the integration tests (the chart against kube-apiserver alone) and the e2e tests (the
chart installed, the operator image run as it says).
"""

from __future__ import annotations

from tests.harness.cluster import SessionCluster, repo_root

CHART = repo_root() / "charts" / "glm-operator"
GLM_CRD = repo_root() / "crds" / "glmdeployments.inference.glm.dev.yaml"
KUBE_VERSION = "1.34.4"


def template(cluster: SessionCluster, release: str, namespace: str, *sets: str) -> str:
    """``helm template`` of the chart with ``--set`` for each of ``sets``."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for value in sets:
        args += ["--set", value]
    return cluster.helm(*args).stdout


def apply_crds(cluster: SessionCluster) -> None:
    """The GLMDeployment CRD, so that `kubectl auth can-i` can resolve its resource names through
    discovery (the chart has no other CRD: leader election uses a built-in Lease)."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=glm-e2e-chart", "-f", str(GLM_CRD)
    )
    cluster.local.wait_crds_established("glmdeployments.inference.glm.dev")
