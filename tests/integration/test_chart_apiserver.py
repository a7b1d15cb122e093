"""The Helm chart against the real kube-apiserver (no controller, no pod): lint, server-side dry run,
and RBAC that is exactly enough (the operator's ServiceAccount can do its job, hold its
leader-election Lease in the release namespace only, and cannot read Secrets)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness.chart import CHART, KUBE_VERSION, apply_crds, template
from tests.harness.cluster import SessionCluster
from tests.harness.prometheus_operator import monitoring_crd_files

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_helm_lint(cluster: SessionCluster) -> None:
    for values in (None, CHART / "ci" / "namespaced-values.yaml", CHART / "ci" / "monitoring-values.yaml"):
        args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION]
        if values is not None:
            args += ["-f", str(values)]
        result = cluster.helm(*args)
        assert "0 chart(s) failed" in result.stdout, result.stdout + result.stderr
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced", "service-monitor", "monitoring"])
def test_rendered_chart_passes_server_side_dry_run(cluster: SessionCluster, mode: str) -> None:
    apply_crds(cluster)
    namespace = cluster.namespace("chart-dry")
    sets = ["crds.keep=true"]
    if mode == "namespaced":
        watched = cluster.namespace("chart-watched")
        sets.append(f"watchNamespaces={{{watched}}}")
    if mode == "service-monitor":
        sets.append("metrics.serviceMonitor.enabled=true")
    if mode == "monitoring":
        sets += [
            "metrics.serviceMonitor.enabled=true",
            "monitoring.alerts.enabled=true",
            "monitoring.dashboards.enabled=true",
        ]
    rendered = template(cluster, f"dry-{os.getpid()}", namespace, *sets)
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert not [doc for doc in docs if doc["apiVersion"].startswith("kopf.dev/")]
    monitors = [doc for doc in docs if doc["kind"] == "ServiceMonitor"]
    assert len(monitors) == (1 if mode in ("service-monitor", "monitoring") else 0)
    rules = [doc for doc in docs if doc["kind"] == "PrometheusRule"]
    assert len(rules) == (1 if mode == "monitoring" else 0)
    if mode == "monitoring":
        # The Prometheus Operator's real CRDs validate the ServiceMonitor and the PrometheusRule.
        files = monitoring_crd_files()
        for crd in files.values():
            cluster.kubectl("apply", "--server-side", "--field-manager=glm-chart-test", "-f", str(crd))
        cluster.local.wait_crds_established(*files)
    else:  # without them: dry-run everything else
        docs = [doc for doc in docs if doc["kind"] not in ("ServiceMonitor", "PrometheusRule")]
    rendered = yaml.safe_dump_all(docs)
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    assert "deployment.apps/" in result.stdout and "(server dry run)" in result.stdout
    assert ("service/" in result.stdout) == (mode in ("service-monitor", "monitoring")), result.stdout
    assert result.stdout.count("configmap/") == (5 if mode == "monitoring" else 0), result.stdout
    assert ("prometheusrule.monitoring.coreos.com/" in result.stdout) == (mode == "monitoring"), result.stdout


def test_install_yaml_passes_server_side_dry_run(cluster: SessionCluster) -> None:
    """install.yaml creates its own namespace, so dry-run the objects that do not live in it."""
    apply_crds(cluster)
    text = (ROOT / "manifests" / "install.yaml").read_text()
    result = cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=glm-e2e-install", "--dry-run=server",
        "-f", "-", input=text, check=False,
    )  # fmt: skip
    # Namespaced objects can fail only because a dry run does not really create the namespace (it
    # exists already on a cluster where the operator's RBAC was installed into it).
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert all('namespaces "glm-operator-system" not found' in line for line in errors), result.stderr
    if not errors:
        assert result.returncode == 0
        assert "deployment.apps/glm-operator serverside-applied (server dry run)" in result.stdout
        assert "role.rbac.authorization.k8s.io/glm-operator-leader-election" in result.stdout
    assert "customresourcedefinition.apiextensions.k8s.io/glmdeployments.inference.glm.dev" in result.stdout
    assert "clusterrole.rbac.authorization.k8s.io/glm-operator" in result.stdout
    # One apply suffices: no object needs a CRD from the same file (kopf peering is gone).
    assert "no matches for kind" not in result.stderr
    assert "kopf.dev" not in text


class Installed:
    def __init__(self, cluster: SessionCluster, release: str, namespace: str) -> None:
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
def cluster_wide(cluster: SessionCluster) -> Iterator[Installed]:
    """The chart really applied (RBAC, ServiceAccount), with no operator pods."""
    apply_crds(cluster)
    namespace = cluster.namespace("chart-rbac")
    release = f"glmop-{os.getpid()}"
    rendered = template(
        cluster,
        release,
        namespace,
        "replicaCount=0",
        "crds.install=false",
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
    ("patch", "poddisruptionbudgets.policy", "-n", "default"),
    ("patch", "networkpolicies.networking.k8s.io", "-n", "default"),
    ("delete", "networkpolicies.networking.k8s.io", "-n", "default"),
    ("watch", "pods", "--all-namespaces"),
    ("create", "events", "-n", "default"),
    ("create", "events.events.k8s.io", "-n", "default"),
    ("list", "nodes"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "namespaces"),
    # a recorded load test (<name>-loadtest, written by `glm-operator loadtest --record`) is an input of the
    # plan: the operator reads ConfigMaps, never writes them (DENIED below)
    ("watch", "configmaps", "--all-namespaces"),
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
    ("patch", "configmaps", "-n", "default"),
    ("create", "configmaps", "-n", "default"),
    ("list", "networkpolicies.networking.k8s.io", "--all-namespaces"),
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


def test_leader_election_lease_as_the_service_account(cluster_wide: Installed) -> None:
    """What LeaderElector does (GET, POST, PUT with resourceVersion), as the operator's identity,
    in the release namespace; the same Lease elsewhere is refused."""
    cluster, namespace = cluster_wide.cluster, cluster_wide.namespace
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "glm-operator"},
        "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15, "acquireTime": now,
                 "renewTime": now, "leaseTransitions": 0},
    }  # fmt: skip
    as_operator = ("--as", cluster_wide.subject)
    cluster.kubectl("create", "-n", namespace, *as_operator, "-f", "-", input=json.dumps(lease))
    held = json.loads(
        cluster.kubectl("get", "lease", "glm-operator", "-n", namespace, "-o", "json", *as_operator).stdout
    )
    held["spec"].update(holderIdentity="replica-b", leaseTransitions=1)
    cluster.kubectl("replace", "-n", namespace, *as_operator, "-f", "-", input=json.dumps(held))
    holder = cluster.kubectl(
        "get", "lease", "glm-operator", "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}", *as_operator
    )
    assert holder.stdout == "replica-b"
    refused = cluster.kubectl(
        "create", "-n", "default", *as_operator, "-f", "-", input=json.dumps(lease), check=False
    )
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr


def test_no_kopf_peering_access(cluster_wide: Installed) -> None:
    for verb in ("get", "list", "watch", "patch"):
        assert not cluster_wide.can_access(verb, "kopf.dev", "clusterkopfpeerings"), verb
        assert not cluster_wide.can_access(verb, "kopf.dev", "kopfpeerings", "default"), verb


def test_namespaced_mode_rbac(cluster: SessionCluster) -> None:
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
        assert not installed.can("list", "glmdeployments.inference.glm.dev", "-n", other)
        assert not installed.can("list", "glmdeployments.inference.glm.dev", "--all-namespaces")
        assert not installed.can("create", "deployments.apps", "-n", other)
        assert not installed.can_access("patch", "kopf.dev", "kopfpeerings", watched)
        # The Lease lives in the operator's namespace, never in a watched one.
        assert installed.can("update", "leases.coordination.k8s.io", "-n", namespace)
        assert not installed.can("create", "leases.coordination.k8s.io", "-n", watched)
        assert installed.can("list", "nodes")
        assert not installed.can("list", "secrets", "-n", watched)
    finally:
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=rendered, check=False
        )
