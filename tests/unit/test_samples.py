"""The samples' prerequisites (Secrets, bound claims) and the demo's placement rows."""

from __future__ import annotations

from typing import Any

import yaml

from glm_operator.api.v1alpha1 import spec_from_dict
from tests.harness.demo import placement_row
from tests.harness.samples import prerequisites, sample_files, volume_selector


def test_every_sample_is_a_valid_spec() -> None:
    names = {path.name for path in sample_files()}
    assert {"glm-5.1.yaml", "glm-5.2.yaml", "glm-5.3.yaml"} <= names
    for path in sample_files():
        spec_from_dict(yaml.safe_load(path.read_text())["spec"])


def test_prerequisites_bind_each_claim_to_its_own_volume() -> None:
    objects = prerequisites("demo")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (secret,) = by_kind["Secret"]
    assert secret["metadata"] == {"name": "glm-5-2-api-key", "namespace": "demo"}
    assert list(secret["stringData"]) == ["api-key"] and len(secret["stringData"]["api-key"]) > 20
    (pv,) = by_kind["PersistentVolume"]
    (pvc,) = by_kind["PersistentVolumeClaim"]
    assert pvc["metadata"] == {"name": "glm-5-2-weights", "namespace": "demo"}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["claimRef"] == {"namespace": "demo", "name": "glm-5-2-weights"}
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert volume_selector("demo") == "=".join(next(iter(pv["metadata"]["labels"].items())))
    other = [o for o in prerequisites("other") if o["kind"] == "PersistentVolume"]
    assert other[0]["metadata"]["name"] != pv["metadata"]["name"]  # PVs are cluster-scoped


def pod(labels: dict[str, str], args: list[str], node: str = "h100-sxm-0") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"inference.glm.dev/deployment": "glm-5-1", **labels}},
        "spec": {
            "nodeName": node,
            "containers": [{"args": args, "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_placement_rows_name_the_group_and_role() -> None:
    args = ["m", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    lws = {"leaderworkerset.sigs.k8s.io/name": "glm-5-1-h100", "leaderworkerset.sigs.k8s.io/group-index": "0"}
    products = {"h100-sxm-0": "NVIDIA-H100-80GB-HBM3"}
    leader = placement_row(pod({**lws, "leaderworkerset.sigs.k8s.io/worker-index": "0"}, args), products)
    worker = placement_row(pod({**lws, "leaderworkerset.sigs.k8s.io/worker-index": "1"}, args), products)
    assert leader[1:3] == ("glm-5-1-h100/0", "leader") and worker[1:3] == ("glm-5-1-h100/0", "worker 1")
    assert leader[6:] == ("NVIDIA-H100-80GB-HBM3", "8xgpu", "8", "2")
    single = placement_row(pod({}, ["m", "--tensor-parallel-size", "4"], node="x"), products)
    assert single[1:3] == ("-", "server") and single[6:] == ("-", "8xgpu", "4", "1")


def test_no_sample_names_a_gpu_type_its_model_cannot_run_on() -> None:
    """The planner rejects a GPU type below the model's compute capability (GLM-5.x's sparse
    attention needs 9.0): a sample that lists one promises what the operator will not do."""
    from glm_operator.catalog.gpus import find_gpu
    from glm_operator.catalog.models import resolve_model

    for path in sample_files():
        spec = spec_from_dict(yaml.safe_load(path.read_text())["spec"])
        model = resolve_model(spec.model.id)
        for product in spec.gpu.products:
            gpu = find_gpu(product)
            assert gpu.compute_capability >= model.min_compute_capability, (
                f"{path.name}: {product} ({gpu.compute_capability}) cannot run {model.name} "
                f"(needs {model.min_compute_capability})"
            )
