"""GPU nodes whose product is not in the catalog: planned from their labels, or reported."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.catalog.estimated_gpus import NOT_IN_CATALOG, estimate_gpu
from glm_operator.catalog.gpus import find_gpu
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import PlanningInputError, placement_request_from_spec
from glm_operator.planning.supply.nodes import parse_gpu_pools


def node(name: str, labels: dict[str, str], gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


L20X = {
    "nvidia.com/gpu.product": "NVIDIA-L20X",
    "nvidia.com/gpu.memory": "49152",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "9",
}


def test_estimate_from_gfd_labels() -> None:
    gpu, how = estimate_gpu("NVIDIA-L20X", L20X)
    assert gpu is not None
    assert gpu.memory_gib == round(49152 / 1024 - 0.46, 2) and gpu.compute_capability == 8.9
    assert gpu.fp8 and gpu.bf16 and not gpu.nvlink
    assert how.startswith(NOT_IN_CATALOG) and "nvidia.com/gpu.memory=49152" in how


def test_a_node_without_memory_or_capability_labels_is_reported_not_dropped() -> None:
    gpu, why = estimate_gpu("NVIDIA-Mystery", {"nvidia.com/gpu.product": "NVIDIA-Mystery"})
    assert gpu is None and "nvidia.com/gpu.memory" in why and "compute.major" in why
    pools = parse_gpu_pools([node("m-0", {"nvidia.com/gpu.product": "NVIDIA-Mystery"})])
    plan = plan_placement(placement_request_from_spec({"model": {"id": "zai-org/GLM-4-9B-0414"}}, pools))
    assert not plan.fits
    rejected = {r.gpu_product: r.reason for r in plan.rejected}
    assert "NVIDIA-Mystery" in rejected and "m-0" in rejected["NVIDIA-Mystery"]


def test_unknown_gpu_is_planned_from_its_labels_and_flagged() -> None:
    pools = parse_gpu_pools([node("l20x-0", L20X)])
    assert pools[0].gpu_product == "NVIDIA-L20X" and pools[0].estimated is not None
    plan = plan_placement(placement_request_from_spec({"model": {"id": "zai-org/GLM-4-9B-0414"}}, pools))
    assert plan.fits
    variant = plan.variants[0]
    assert variant.gpu_product == "NVIDIA-L20X"
    assert dict(variant.node_selector) == {"nvidia.com/gpu.product": "NVIDIA-L20X"}
    assert any(NOT_IN_CATALOG in n for n in variant.notes)
    assert any(NOT_IN_CATALOG in d for d in plan.details)


def test_new_catalog_gpus() -> None:
    for name in ("A800", "H800", "H20", "L20", "L40S", "RTX-6000-Ada", "B200", "GB200"):
        gpu = find_gpu(name)
        assert gpu.memory_gib > 20 and gpu.memory_source, name


def _plan(spec: dict[str, Any], nodes: list[dict[str, Any]]) -> Any:
    return plan_placement(placement_request_from_spec(spec, parse_gpu_pools(nodes)))


MIXED = [node("l20x-0", L20X), node("l4-0", {"nvidia.com/gpu.product": "NVIDIA-L4"})]


def test_gpu_products_can_name_an_estimated_gpu_by_its_product_label() -> None:
    spec = {"model": {"id": "zai-org/GLM-4-9B-0414"}, "gpu": {"products": ["nvidia-l20x"]}}
    plan = _plan(spec, MIXED)
    assert [v.gpu_product for v in plan.variants] == ["NVIDIA-L20X"]
    assert any("not in gpu.products, not used: NVIDIA-L4" in d for d in plan.details)
    # preference order holds across catalog and estimated products
    both = _plan({**spec, "gpu": {"products": ["L4", "NVIDIA-L20X"]}, "replicas": 2}, MIXED)
    assert [v.gpu_product for v in both.variants] == ["NVIDIA-L4", "NVIDIA-L20X"]


def test_gpu_products_naming_neither_a_catalog_gpu_nor_a_cluster_label_is_an_input_error() -> None:
    spec = {"model": {"id": "zai-org/GLM-4-9B-0414"}, "gpu": {"products": ["NVIDIA-L20Y"]}}
    with pytest.raises(PlanningInputError, match=r"spec\.gpu\.products: GPU 'NVIDIA-L20Y' is neither") as exc:
        _plan(spec, MIXED)
    assert "in the cluster now: NVIDIA-L20X" in str(exc.value) and "NVIDIA-H100-80GB-HBM3" in str(exc.value)


def test_gpu_products_naming_a_label_whose_nodes_cannot_be_estimated_says_what_they_lack() -> None:
    spec = {"model": {"id": "zai-org/GLM-4-9B-0414"}, "gpu": {"products": ["NVIDIA-Mystery"]}}
    with pytest.raises(PlanningInputError, match=r"spec\.gpu\.products: .*nvidia\.com/gpu\.memory"):
        _plan(spec, [node("m-0", {"nvidia.com/gpu.product": "NVIDIA-Mystery"})])


def test_a_catalog_gpu_absent_from_the_cluster_stays_allowed() -> None:
    plan = _plan({"model": {"id": "zai-org/GLM-4-9B-0414"}, "gpu": {"products": ["H100"]}}, MIXED)
    assert not plan.fits
    assert any("no schedulable node has NVIDIA-H100-80GB-HBM3" in r.reason for r in plan.rejected)
