"""The Helm chart: rendering, RBAC shape, hardening, and manifests/install.yaml drift.

These tests need the helm binary that `make tools` builds (hack/build-tools.sh). When it is
missing they fail with that instruction instead of skipping: CI always builds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    for generated in ("crds/glmdeployments.inference.glm.dev.yaml", "charts/glm-operator/templates/crd.yaml"):
        assert (ROOT / generated).read_text() == (tmp_path / generated).read_text(), generated


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
    assert crd_names == {
        "glmdeployments.inference.glm.dev",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Deployment", "Role", "RoleBinding"):
            assert doc["metadata"]["namespace"] == "glm-operator-system", doc["metadata"]["name"]


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
    assert container["args"] == ["run", "--liveness=http://0.0.0.0:8080/healthz"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["GLM_OPERATOR_VLLM_IMAGE"] == "vllm/vllm-openai:v0.11.0"
    assert env["GLM_OPERATOR_WATCH_NAMESPACES"] == ""
    assert env["GLM_OPERATOR_PEERING_NAME"] == "glm-operator"
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
    roles = by_kind(docs, "Role")
    assert [role["metadata"]["name"] for role in roles] == ["glm-operator-leader-election"]
    assert roles[0]["rules"][0]["resources"] == ["leases"]
    assert by_kind(docs, "ClusterKopfPeering")[0]["metadata"]["name"] == "glm-operator"


def test_namespaced_mode(helm: Path) -> None:
    docs = documents(render(helm, "--set", "watchNamespaces={llm,llm-staging}").stdout)
    (cluster_role,) = by_kind(docs, "ClusterRole")
    cluster_resources = {resource for rule in cluster_role["rules"] for resource in rule["resources"]}
    assert cluster_resources == {"nodes", "namespaces", "customresourcedefinitions"}
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
    assert "glmdeployments" in role_resources and "kopfpeerings" in role_resources
    assert "secrets" not in role_resources
    bindings = by_kind(docs, "RoleBinding")
    assert {binding["metadata"]["namespace"] for binding in bindings} == {
        "llm",
        "llm-staging",
        "glm-operator-system",
    }
    assert {peering["metadata"]["namespace"] for peering in by_kind(docs, "KopfPeering")} == {
        "llm",
        "llm-staging",
    }
    assert not by_kind(docs, "ClusterKopfPeering")
    (deployment,) = by_kind(docs, "Deployment")
    env = {
        item["name"]: item.get("value")
        for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GLM_OPERATOR_WATCH_NAMESPACES"] == "llm,llm-staging"


def test_crd_switches(helm: Path) -> None:
    default = documents(render(helm).stdout)
    (crd,) = by_kind(default, "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/name"] == "glm-operator"
    assert not by_kind(
        documents(render(helm, "--set", "crds.install=false").stdout), "CustomResourceDefinition"
    )
    (unkept,) = by_kind(
        documents(render(helm, "--set", "crds.keep=false").stdout), "CustomResourceDefinition"
    )
    assert "annotations" not in unkept["metadata"]
    with_crds = documents(render(helm, "--include-crds").stdout)
    assert len(by_kind(with_crds, "CustomResourceDefinition")) == 3


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
