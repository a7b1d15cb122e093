"""Node dicts -> GPU pools, on the simulated cluster fixture and small builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"


def node(name: str, labels: dict[str, str], allocatable: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable},
    }


def test_fixture_pools() -> None:
    pools = parse_gpu_pools(yaml.safe_load(FIXTURE.read_text()))
    by_node = {(p.node_name, p.resource_name): p for p in pools}
    # 1 H200 + 1 B200 + 4 H100 + 2 A100 + 3 L4 + 2 types on mixed-0; cpu-0 has none
    assert len(pools) == 13
    h100 = by_node[("h100-sxm-0", "nvidia.com/gpu")]
    assert h100.gpu_product == "NVIDIA-H100-80GB-HBM3" and h100.gpu_count == 8
    assert dict(h100.node_selector) == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    a100 = by_node[("mixed-0", "nvidia.com/a100-80gb")]
    rtx = by_node[("mixed-0", "nvidia.com/rtx-4090")]
    assert a100.gpu_product == "NVIDIA-A100-80GB-PCIe" and a100.node_selector == ()
    assert rtx.gpu_product == "NVIDIA-GeForce-RTX-4090" and rtx.gpu_count == 1
    assert not any(p.node_name == "cpu-0" for p in pools)


def test_gke_label_and_unknown_product() -> None:
    pools = parse_gpu_pools(
        [
            node("gke", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"nvidia.com/gpu": "2"}),
            node("old", {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}, {"nvidia.com/gpu": "8"}),
        ]
    )
    assert pools[0].gpu_product == "NVIDIA-L4"
    assert dict(pools[0].node_selector) == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pools[1].gpu_product == "" and pools[1].product_label == "Tesla-V100-SXM2-16GB"


def test_cordoned_notready_and_mig_are_skipped() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    not_ready = node("nr", labels, {"nvidia.com/gpu": "8"})
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pools = parse_gpu_pools(
        {
            "kind": "List",
            "items": [
                node("cordoned", labels, {"nvidia.com/gpu": "8"}, unschedulable=True),
                not_ready,
                node("mig", labels, {"nvidia.com/mig-1g.10gb": "7"}),
                node("ok", labels, {"nvidia.com/gpu": "8"}),
            ],
        }
    )
    assert [p.node_name for p in pools] == ["ok"]


def test_gpus_used() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4"}
    pools = parse_gpu_pools(
        [node("a", labels, {"nvidia.com/gpu": "4"})], gpus_used={"a": {"nvidia.com/gpu": 3}}
    )
    assert pools == (
        GpuPool(
            "a", "NVIDIA-L4", "NVIDIA-L4", 4, "nvidia.com/gpu", (("nvidia.com/gpu.product", "NVIDIA-L4"),), 3
        ),
    )
    assert pools[0].gpus_free == 1
