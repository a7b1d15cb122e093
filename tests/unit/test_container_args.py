"""The chart's operator Deployment (manifests/install.yaml, rendered with default values) turned
into `podman run` arguments the way a kubelet would run it; anything not reproduced is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import repo_root
from tests.harness.container import (
    SERVICE_ACCOUNT_DIR,
    PodIdentity,
    UnsupportedPodSpec,
    podman_run_args,
    quantity_bytes,
)

POD = PodIdentity("op-a", "glm-operator-system", Path("/tmp/sa"), 6443)


@pytest.fixture
def deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((repo_root() / "manifests" / "install.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "Deployment")


def pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_the_chart_container_runs_non_root_read_only_without_capabilities(deployment: dict[str, Any]) -> None:
    args = podman_run_args(deployment, POD, "operator", "op-a")
    assert pairs(args, "--user") == ["65532:65532"]
    assert "--read-only" in args and "--read-only-tmpfs=false" in args
    assert "--cap-drop=ALL" in args
    assert pairs(args, "--security-opt") == ["no-new-privileges"]
    assert "--privileged" not in args
    assert "--network=host" in args and "--pull=never" in args


def test_env_downward_api_and_in_cluster_config(deployment: dict[str, Any]) -> None:
    env = dict(e.split("=", 1) for e in pairs(podman_run_args(deployment, POD, "operator", "x"), "--env"))
    assert env["POD_NAME"] == "op-a"
    assert env["POD_NAMESPACE"] == "glm-operator-system"
    assert env["GLM_OPERATOR_LOG_LEVEL"] == "info"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"


def test_mounts_entrypoint_and_args(deployment: dict[str, Any]) -> None:
    args = podman_run_args(deployment, POD, "operator", "x")
    assert pairs(args, "--volume") == [f"/tmp/sa:{SERVICE_ACCOUNT_DIR}:ro"]
    assert pairs(args, "--mount") == [f"type=tmpfs,destination=/tmp,tmpfs-mode=1777,tmpfs-size={64 * 2**20}"]
    assert json.loads(pairs(args, "--entrypoint")[0]) == ["glm-operator"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    after = args[args.index(image) + 1 :]
    assert after[0] == "run" and "--leader-election-namespace=glm-operator-system" in after


def secret_env(pod: dict[str, Any]) -> None:
    secret = {"secretKeyRef": {"name": "s", "key": "k"}}
    pod["containers"][0]["env"].append({"name": "K", "valueFrom": secret})


def host_path(pod: dict[str, Any]) -> None:
    pod["volumes"][0] = {"name": "tmp", "hostPath": {"path": "/"}}


def non_root_without_user(pod: dict[str, Any]) -> None:
    pod["securityContext"].pop("runAsUser")
    pod["containers"][0]["securityContext"].pop("runAsUser", None)


def localhost_seccomp(pod: dict[str, Any]) -> None:
    pod["securityContext"]["seccompProfile"] = {"type": "Localhost", "localhostProfile": "x.json"}


@pytest.mark.parametrize("change", [secret_env, host_path, non_root_without_user, localhost_seccomp])
def test_what_is_not_reproduced_is_refused(deployment: dict[str, Any], change: Any) -> None:
    changed = copy.deepcopy(deployment)
    change(changed["spec"]["template"]["spec"])
    with pytest.raises(UnsupportedPodSpec):
        podman_run_args(changed, POD, "operator", "x")


def test_quantities() -> None:
    assert quantity_bytes("64Mi") == 64 * 2**20
    assert quantity_bytes("1G") == 10**9
    with pytest.raises(UnsupportedPodSpec):
        quantity_bytes("1.5Gi")
