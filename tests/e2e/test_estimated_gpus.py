"""A GPU product the catalog does not know, named in ``spec.gpu.products``, on the real control plane.

A KWOK node labelled like GPU Feature Discovery labels an unknown product (memory and compute
capability labels, no cloud accelerator label) is planned from its labels; naming it before such a
node exists is Planned=False naming the field, and the node's arrival (a watch event) re-plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import NODES, E2ECluster, RunningOperator
from .test_controller import apply, children, condition, get, glmd, phase_is, small, wait_for

pytestmark = pytest.mark.e2e
PRODUCT = "NVIDIA-L20X"


def unknown_gpu_node(name: str) -> dict[str, Any]:
    """The fixture's L4 node with another product: 48 GiB per GPU, compute capability 8.9."""
    template = next(n for n in yaml.safe_load(NODES.read_text())["items"] if n["metadata"]["name"] == "l4-0")
    node: dict[str, Any] = yaml.safe_load(yaml.safe_dump(template))
    labels = node["metadata"]["labels"]
    labels.pop("cloud.google.com/gke-accelerator", None)
    labels.update(
        {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.product": PRODUCT,
            "nvidia.com/gpu.memory": "49152",
            "nvidia.com/gpu.compute.major": "8",
            "nvidia.com/gpu.compute.minor": "9",
        }
    )
    node["metadata"]["name"] = name
    return node


def test_gpu_products_names_an_unknown_gpu_once_a_node_carries_its_label(
    cluster: E2ECluster, operator: RunningOperator, ns: str, tmp_path: Path
) -> None:
    node_name = f"l20x-{ns}"[:63]
    apply(cluster, ns, small("est", gpu={"products": [PRODUCT]}))

    def planned_false() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, "est")
        return obj if condition(obj, "Planned").get("status") == "False" else None

    obj = wait_for(planned_false, 60, "Planned=False for an unknown product no node carries")
    message = condition(obj, "Planned")["message"]
    assert "spec.gpu.products" in message and PRODUCT in message and "nvidia.com/gpu.product" in message
    assert not children(cluster, ns, "est")

    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(unknown_gpu_node(node_name)))
    try:
        cluster.local.apply_nodes([path])
        obj = wait_for(phase_is(cluster, ns, "est", "Ready"), 90, "Ready on the estimated GPU")
        (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
        assert variant["gpuProduct"] == PRODUCT
        assert any("not in catalog: estimated from labels" in n for n in variant.get("notes", []))
        (deployment,) = children(cluster, ns, "est")
        assert deployment["metadata"]["labels"]["inference.glm.dev/gpu-product"] == PRODUCT
        pods = get(cluster, ns, "pods", selector="inference.glm.dev/deployment=est")["items"]
        assert pods and all(pod["spec"]["nodeName"] == node_name for pod in pods)
    finally:
        cluster.kubectl("delete", "node", node_name, "--ignore-not-found", "--wait=true")
