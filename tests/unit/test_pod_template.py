"""Pod details a real cluster needs, rendered through compute_desired from the spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.desired import compute_desired
from glm_operator.render import sizing
from tests.harness.scenarios import observed

ROOT = Path(__file__).resolve().parents[2]
NODES = yaml.safe_load((ROOT / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]
# bf16 only: the sizes below are those of the bf16 checkpoint (auto would serve the FP8 one for speed)
AIR = {
    "model": {"id": "zai-org/GLM-4.5-Air"},
    "allowedQuantizations": ["bf16"],
    "gpu": {"products": ["H100"]},
}


def pod_of(spec: dict[str, Any]) -> dict[str, Any]:
    desired = compute_desired(observed(spec, NODES))
    deployment = next(o for o in desired.objects if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0].get("env", [])}


def test_defaults_requests_cache_and_startup_budget_follow_the_model() -> None:
    pod = pod_of(AIR)
    container = pod["containers"][0]
    requests = container["resources"]["requests"]
    assert set(requests) == {"cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"}
    gpus = int(requests["nvidia.com/gpu"])
    assert requests["cpu"] == str(1 + gpus)
    cache = next(v for v in pod["volumes"] if v["name"] == "model-cache")
    assert cache["emptyDir"]["sizeLimit"] == requests["ephemeral-storage"]
    size_gib = int(requests["ephemeral-storage"].removesuffix("Gi"))
    assert 200 <= size_gib <= 260  # GLM-4.5-Air bf16 is ~205 GiB of weights
    assert env_of(pod)["HF_HOME"] == "/root/.cache/huggingface"
    budget = container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
    assert budget >= 600 + 10 * 200  # a ~200 GiB download does not hit the 20-minute default
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]


def test_user_resources_and_startup_timeout_win() -> None:
    spec = {
        **AIR,
        "serving": {
            "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "32Gi"}},
            "startupTimeoutSeconds": 600,
        },
    }
    container = pod_of(spec)["containers"][0]
    requests = container["resources"]["requests"]
    assert requests["cpu"] == "4"
    assert "memory" not in requests  # a default above the user's limit would make the pod invalid
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 600


def test_model_cache_fields_are_honoured() -> None:
    spec = {
        **AIR,
        "serving": {
            "modelCache": {"claimName": "weights", "mountPath": "/cache", "subPath": "hf", "readOnly": True}
        },
    }
    pod = pod_of(spec)
    assert {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "weights", "readOnly": True},
    } in pod["volumes"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model-cache")
    assert mount == {"name": "model-cache", "mountPath": "/cache", "subPath": "hf", "readOnly": True}
    env = env_of(pod)
    assert env["HF_HOME"] == "/cache" and env["HF_HUB_OFFLINE"] == "1"
    assert "ephemeral-storage" not in pod["containers"][0]["resources"]["requests"]


def test_hf_token_service_account_and_pull_secrets() -> None:
    spec = {
        **AIR,
        "serving": {
            "hfTokenSecretRef": {"name": "hf"},
            "serviceAccountName": "vllm-s3-reader",
            "imagePullSecrets": ["registry-a", "registry-b"],
        },
    }
    pod = pod_of(spec)
    assert env_of(pod)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert pod["serviceAccountName"] == "vllm-s3-reader"
    assert pod["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "registry-b"}]


def test_s3_source_has_no_download_cache() -> None:
    pod = pod_of({**AIR, "model": {"id": "zai-org/GLM-4.5-Air", "source": "s3://weights/glm-4.5-air"}})
    assert not any(v["name"] == "model-cache" for v in pod.get("volumes", []))


@pytest.mark.parametrize(
    "serving",
    [
        {"startupTimeoutSeconds": 30},
        {"serviceAccountName": "Not_A_Name"},
        {"imagePullSecrets": [""]},
        {"hfTokenSecretRef": {"key": "token"}},
    ],
)
def test_bad_serving_fields_are_rejected(serving: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        spec_from_dict({**AIR, "serving": serving})


def test_sizing_figures() -> None:
    assert sizing.default_startup_timeout_seconds(0) == 20 * 60
    assert sizing.default_startup_timeout_seconds(700) == 600 + 7000
    assert sizing.default_startup_timeout_seconds(10**6) == 24 * 3600
    assert sizing.default_requests(10.0, 1, None) == {"cpu": "2", "memory": "7Gi"}
    # A 1-GPU pod of GLM-4-9B (17.5 GiB of weights) fits a 4 vCPU / 16 GiB machine (g6.xlarge).
    small = sizing.default_requests(17.5, 1, None)
    assert int(small["cpu"]) < 4 and int(small["memory"].removesuffix("Gi")) <= 12


def test_one_pod_disruption_budget_over_all_serving_pods() -> None:
    desired = compute_desired(observed(AIR, NODES))
    pdbs = [o for o in desired.objects if o["kind"] == "PodDisruptionBudget"]
    assert len(pdbs) == 1
    pdb = pdbs[0]
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "GLMDeployment"
    pod_labels = next(o for o in desired.objects if o["kind"] == "Deployment")["spec"]["template"][
        "metadata"
    ]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
