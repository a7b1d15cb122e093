"""The Helm chart rendered by the real helm: RBAC shape, hardening, and manifests/install.yaml drift.

These tests need the helm binary that `make tools` builds (hack/build-tools.sh). When it is
missing they fail with that instruction instead of skipping: CI always builds it. No cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "glm-operator"
INSTALL = ROOT / "manifests" / "install.yaml"
KUBE_VERSION = "1.34.4"


@pytest.fixture(scope="module")
def helm() -> Path:
    if os.environ.get("HELM"):
        return Path(os.environ["HELM"])
    bin_dir = subprocess.run(
        ["bash", str(ROOT / "hack" / "tools-bin.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    candidate = Path(bin_dir) / "helm"
    if candidate.exists():
        return candidate
    on_path = shutil.which("helm")
    if on_path:
        return Path(on_path)
    pytest.fail(f"helm not found at {candidate} nor on PATH: run `make tools` (hack/build-tools.sh) first")


def render(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "template", "glm-operator", str(CHART), "--namespace", "glm-operator-system",
         "--kube-version", KUBE_VERSION, *args],
        capture_output=True, text=True, check=check,
    )  # fmt: skip


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    return operator


def assert_no_kopf_peering(docs: list[dict[str, Any]]) -> None:
    """Leader election is the operator's own Lease: nothing of kopf's peering may be left."""
    for doc in docs:
        assert not doc["apiVersion"].startswith("kopf.dev/"), doc["kind"]
        assert "kopf.dev" not in doc["metadata"]["name"], doc["metadata"]["name"]
        for rule in doc.get("rules", []):
            assert "kopf.dev" not in rule["apiGroups"], doc["metadata"]["name"]
    env = {item["name"] for item in container(docs)["env"]}
    assert not any("PEERING" in name for name in env), env


def test_install_yaml_is_the_rendered_chart(helm: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "generate.sh")],
        env={**os.environ, "OUT_DIR": str(tmp_path), "HELM": str(helm)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    fresh = (tmp_path / "manifests" / "install.yaml").read_text()
    hint = "manifests/install.yaml drifted from the chart: run hack/generate.sh and commit"
    assert documents(INSTALL.read_text()) == documents(fresh), hint
    assert INSTALL.read_text() == fresh, hint
    for generated in (
        "crds/glmdeployments.inference.glm.dev.yaml",
        "charts/glm-operator/templates/crd.yaml",
        "crds/glmgateways.inference.glm.dev.yaml",
        "charts/glm-operator/templates/crd-glmgateway.yaml",
        "charts/glm-operator/monitoring/alerts.yaml",
    ):
        assert (ROOT / generated).read_text() == (tmp_path / generated).read_text(), generated
    dashboards = "charts/glm-operator/monitoring/dashboards"
    committed = {p.name: p.read_text() for p in (ROOT / dashboards).glob("*.json")}
    assert committed == {p.name: p.read_text() for p in (tmp_path / dashboards).glob("*.json")}, hint


def test_install_yaml_contents() -> None:
    docs = documents(INSTALL.read_text())
    kinds = [doc["kind"] for doc in docs]
    assert kinds[0] == "Namespace"
    assert docs[0]["metadata"]["name"] == "glm-operator-system"
    for kind in (
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ):
        assert kind in kinds
    crd_names = {doc["metadata"]["name"] for doc in by_kind(docs, "CustomResourceDefinition")}
    assert crd_names == {"glmdeployments.inference.glm.dev", "glmgateways.inference.glm.dev"}
    # One `kubectl apply` is enough: no object's kind comes from a CRD defined in the same file.
    builtin = {"v1", "apps/v1", "apiextensions.k8s.io/v1", "rbac.authorization.k8s.io/v1", "policy/v1"}
    assert {doc["apiVersion"] for doc in docs} <= builtin
    assert "second apply" not in INSTALL.read_text()
    assert_no_kopf_peering(docs)
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Deployment", "Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] == "glm-operator-system", doc["metadata"]["name"]
    assert "--leader-election-namespace=glm-operator-system" in container(docs)["args"]


def test_deployment_is_hardened(helm: Path) -> None:
    (deployment,) = by_kind(documents(render(helm).stdout), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"]
    assert container["args"] == [
        "run",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--leader-election-namespace=glm-operator-system",
        "--node-grace-seconds=300",
        "--pod-monitor=auto",
        "--metrics-port=8081",
    ]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["ports"] == [
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 8081, "protocol": "TCP"},
    ]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["GLM_OPERATOR_VLLM_IMAGE"] == "vllm/vllm-openai:v0.33.0"
    assert env["GLM_OPERATOR_WATCH_NAMESPACES"] == ""
    assert env["GLM_OPERATOR_PROMETHEUS_URL"] == ""
    assert not any("PEERING" in name for name in env)
    pod_namespace = next(item for item in container["env"] if item["name"] == "POD_NAMESPACE")
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # Selector labels must not change on upgrade: no chart or app version in them.
    selector = spec["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "glm-operator",
        "app.kubernetes.io/instance": "glm-operator",
    }
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == "glm-operator-0.1.0"


def test_cluster_wide_rbac_never_grants_secrets(helm: Path) -> None:
    docs = documents(render(helm).stdout)
    (cluster_role,) = by_kind(docs, "ClusterRole")
    resources = {resource for rule in cluster_role["rules"] for resource in rule["resources"]}
    assert "secrets" not in resources
    assert {"glmdeployments", "deployments", "leaderworkersets", "services", "pods", "nodes"} <= resources
    for rule in cluster_role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "deletecollection" not in rule["verbs"]
        assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"]
    # The only namespaced grant: Leases for leader election, in the release namespace only.
    (role,) = by_kind(docs, "Role")
    assert role["metadata"] == {**role["metadata"], "name": "glm-operator-leader-election",
                                "namespace": "glm-operator-system"}  # fmt: skip
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        }
    ]
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "glm-operator-system"
    assert binding["roleRef"]["name"] == "glm-operator-leader-election"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "glm-operator", "namespace": "glm-operator-system"}
    ]
    assert_no_kopf_peering(docs)


def test_namespaced_mode(helm: Path) -> None:
    docs = documents(render(helm, "--set", "watchNamespaces={llm,llm-staging}").stdout)
    (cluster_role,) = by_kind(docs, "ClusterRole")
    cluster_resources = {resource for rule in cluster_role["rules"] for resource in rule["resources"]}
    assert cluster_resources == {"nodes", "namespaces", "customresourcedefinitions", "nodepools"}
    roles = {
        (role["metadata"]["namespace"], role["metadata"]["name"]): role for role in by_kind(docs, "Role")
    }
    assert set(roles) == {
        ("llm", "glm-operator"),
        ("llm-staging", "glm-operator"),
        ("glm-operator-system", "glm-operator-leader-election"),
    }
    role_resources = {
        resource for rule in roles[("llm", "glm-operator")]["rules"] for resource in rule["resources"]
    }
    assert "glmdeployments" in role_resources and "deployments" in role_resources
    assert "secrets" not in role_resources and "leases" not in role_resources
    bindings = by_kind(docs, "RoleBinding")
    assert {binding["metadata"]["namespace"] for binding in bindings} == {
        "llm",
        "llm-staging",
        "glm-operator-system",
    }
    assert_no_kopf_peering(docs)
    operator = container(docs)
    env = {item["name"]: item.get("value") for item in operator["env"]}
    assert env["GLM_OPERATOR_WATCH_NAMESPACES"] == "llm,llm-staging"
    # The Lease stays in the operator's namespace, not in a watched one.
    assert "--leader-election-namespace=glm-operator-system" in operator["args"]


def test_crd_switches(helm: Path) -> None:
    default = documents(render(helm).stdout)
    crds = by_kind(default, "CustomResourceDefinition")
    assert len(crds) == 2  # GLMDeployment and GLMGateway
    for crd in crds:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/name"] == "glm-operator"
    assert not by_kind(
        documents(render(helm, "--set", "crds.install=false").stdout), "CustomResourceDefinition"
    )
    for unkept in by_kind(
        documents(render(helm, "--set", "crds.keep=false").stdout), "CustomResourceDefinition"
    ):
        assert "annotations" not in unkept["metadata"]
    # No crds/ directory any more (kopf's peering CRDs were its only content).
    assert not (CHART / "crds").exists()
    with_crds = documents(render(helm, "--include-crds").stdout)
    assert len(by_kind(with_crds, "CustomResourceDefinition")) == 2


def test_names_are_truncated_to_63_characters(helm: Path) -> None:
    long_release = "a" * 53  # Helm allows at most 53; <release>-glm-operator is 66
    result = subprocess.run(
        [str(helm), "template", long_release, str(CHART), "--kube-version", KUBE_VERSION],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    for doc in documents(result.stdout):
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    docs = documents(render(helm, "--set", "fullnameOverride=glm").stdout)
    assert by_kind(docs, "Deployment")[0]["metadata"]["name"] == "glm"


@pytest.mark.parametrize(
    "override",
    [
        "logLevel=verbose",
        "replicaCount=-1",
        "image.pullPolicy=Sometimes",
        "vllm.image=vllm/vllm-openai",  # unpinned: no tag or digest
        "watchNamespaces={Not_A_Namespace}",
        "unknownKey=1",
        "peering.enabled=true",  # removed: leader election is the operator's Lease
        "metrics.port=0",
        "metrics.serviceMonitor.interval=soon",
    ],
)
def test_values_schema_rejects_bad_values(helm: Path, override: str) -> None:
    result = render(helm, "--set", override, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower() or "values don't meet" in result.stderr.lower(), result.stderr


def test_image_digest_and_notes(helm: Path) -> None:
    digest = "sha256:" + "0" * 64
    docs = documents(render(helm, "--set", f"image.digest={digest}").stdout)
    image = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/glm-operator/glm-operator@{digest}"
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "kubectl explain glmdeployment" in notes
    assert "Lease" in notes and "peering" not in notes.lower()


def test_metrics_port(helm: Path) -> None:
    operator = container(documents(render(helm, "--set", "metrics.port=9100").stdout))
    assert "--metrics-port=9100" in operator["args"]
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in operator["ports"]
    docs = documents(render(helm, "--set", "metrics.enabled=false").stdout)
    operator = container(docs)
    assert not [arg for arg in operator["args"] if arg.startswith("--metrics-port")]
    assert [port["name"] for port in operator["ports"]] == ["health"]
    for override, message in (
        ("metrics.port=8080", "metrics.port must differ from healthPort"),
        ("metrics.enabled=false,metrics.serviceMonitor.enabled=true", "needs metrics.enabled"),
    ):
        result = render(helm, "--set", override, check=False)
        assert result.returncode != 0 and message in result.stderr, result.stderr


def test_service_monitor_only_when_enabled(helm: Path) -> None:
    default = documents(render(helm).stdout)
    assert not by_kind(default, "ServiceMonitor") and not by_kind(default, "Service")
    docs = documents(
        render(
            helm,
            "--set", "metrics.serviceMonitor.enabled=true",
            "--set", "metrics.serviceMonitor.interval=30s",
            "--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
            "--set", "metrics.port=9100",
        ).stdout
    )  # fmt: skip
    (service,) = by_kind(docs, "Service")
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == "glm-operator-system"
    # The Service reaches every operator pod (standbys too) on the container port named metrics.
    (deployment,) = by_kind(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}
    ]
    # The ServiceMonitor selects exactly that Service and scrapes its metrics port.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["glm-operator-system"]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "30s"}
    ]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for template in ("metrics-service.yaml", "servicemonitor.yaml"):
        result = render(helm, "--set", "metrics.serviceMonitor.enabled=true", "-s", f"templates/{template}")
        assert len(documents(result.stdout)) == 1, template


def test_prometheus_settings_reach_the_operator(
    helm: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The rendered args and env, parsed by the operator's own command line, give its config."""
    from glm_operator.cli import build_parser
    from glm_operator.commands.run import config_from_args
    from glm_operator.controller.config import (
        DEFAULT_KV_CACHE_QUERY,
        DEFAULT_RUNNING_QUERY,
        DEFAULT_WAITING_QUERY,
    )

    def operator_config(*args: str) -> Any:
        operator = container(documents(render(helm, *args).stdout))
        for item in operator["env"]:
            if "value" in item:
                monkeypatch.setenv(item["name"], item["value"])
        # The downward API's values, as the kubelet would set them.
        monkeypatch.setenv("POD_NAMESPACE", "glm-operator-system")
        monkeypatch.setenv("POD_NAME", "glm-operator-0")
        assert operator["command"] == ["glm-operator"]
        return config_from_args(build_parser().parse_args(operator["args"]))

    default = operator_config()
    assert default.prometheus_url is None
    assert (default.waiting_query, default.running_query) == (DEFAULT_WAITING_QUERY, DEFAULT_RUNNING_QUERY)
    assert default.kv_cache_query == DEFAULT_KV_CACHE_QUERY
    assert default.lease_namespace == "glm-operator-system" and default.lease_name == "glm-operator"
    assert default.leader_election is True and default.metrics_port == 8081
    assert default.node_grace_seconds == 300
    assert operator_config("--set", "nodeGraceSeconds=90").node_grace_seconds == 90
    waiting = 'sum(vllm:num_requests_waiting{namespace="{namespace}",model_name="{model}",job="x"})'
    running = 'max(vllm:num_requests_running{model_name="{model}"}) * 2'
    queries = tmp_path / "queries.yaml"  # a file: --set would split the PromQL at its commas
    kv = 'vllm:cache_config_info{namespace="{namespace}",job="x"}'
    queries.write_text(
        yaml.safe_dump({"prometheus": {"waitingQuery": waiting, "runningQuery": running, "kvCacheQuery": kv}})
    )
    custom = operator_config("-f", str(CHART / "ci" / "namespaced-values.yaml"), "-f", str(queries))
    assert custom.prometheus_url == "http://prometheus.monitoring.svc:9090"
    assert (custom.waiting_query, custom.running_query, custom.kv_cache_query) == (waiting, running, kv)
    assert custom.namespaces == ("llm", "llm-staging")
    assert custom.metrics_port == 9100
    operator = container(documents(render(helm, "--set", "prometheus.url=http://p:9090").stdout))
    query_flags = ("--waiting-query", "--running-query", "--kv-cache-query")
    assert not [arg for arg in operator["args"] if arg.startswith(query_flags)]


def test_chart_passes_the_mode_and_grants_podmonitors_in_both_rbac_modes(helm: Path) -> None:
    def rules(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
        return [r for doc in by_kind(docs, kind) for r in doc["rules"] if "podmonitors" in r["resources"]]

    docs = documents(render(helm).stdout)
    (deployment,) = by_kind(docs, "Deployment")
    assert "--pod-monitor=auto" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (rule,) = rules(docs, "ClusterRole")
    assert rule["apiGroups"] == ["monitoring.coreos.com"] and {"create", "patch", "delete"} <= set(
        rule["verbs"]
    )

    namespaced = documents(render(helm, "--set", "watchNamespaces={a,b}").stdout)
    assert not rules(namespaced, "ClusterRole")
    assert len(rules(namespaced, "Role")) == 2

    off = documents(render(helm, "--set", "prometheus.podMonitor=off").stdout)
    (rule,) = rules(off, "ClusterRole")
    assert set(rule["verbs"]) == {"get", "list", "watch", "delete"}  # prune only
    assert render(helm, "--set", "prometheus.podMonitor=yes", check=False).returncode != 0


def test_prometheus_rule_only_when_enabled(helm: Path) -> None:
    from devtools import alerts

    assert not by_kind(documents(render(helm).stdout), "PrometheusRule")
    on = ("--set", "monitoring.alerts.enabled=true", "--set", "monitoring.alerts.labels.release=kps")
    docs = documents(render(helm, *on).stdout)
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "glm-operator-system"
    assert rule["metadata"]["labels"]["release"] == "kps"
    # The chart embeds the generated rule file as it is: the rules promtool tested.
    assert rule["spec"] == alerts.rule_groups()
    for item in rule["spec"]["groups"][0]["rules"]:
        assert item["annotations"]["runbook"], item["alert"]


def test_dashboards_only_when_enabled(helm: Path) -> None:
    import json

    from devtools import dashboards

    assert not by_kind(documents(render(helm).stdout), "ConfigMap")
    on = (
        "--set",
        "monitoring.dashboards.enabled=true",
        "--set",
        "monitoring.dashboards.annotations.grafana_folder=GLM",
    )
    maps = by_kind(documents(render(helm, *on).stdout), "ConfigMap")
    assert len(maps) == len(dashboards.VIEWS) == 5
    uids = set()
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "GLM"}
        assert config_map["metadata"]["namespace"] == "glm-operator-system"
        (text,) = config_map["data"].values()
        board = json.loads(text)
        uids.add(board["uid"])
        assert board["panels"], board["uid"]
    assert uids == {view.uid for view in dashboards.VIEWS}
    elsewhere = (
        "--set",
        "monitoring.dashboards.enabled=true",
        "--set",
        "monitoring.dashboards.namespace=grafana",
    )
    (other, *_) = by_kind(documents(render(helm, *elsewhere).stdout), "ConfigMap")
    assert other["metadata"]["namespace"] == "grafana"
