"""A rejected plan names the cheapest changes that fit (placement/fixes.py), checked by planning them.

Every fix a scenario gets is applied to the spec (and, where it says so, to the nodes) and planned
again: the plan must fit with the shape the fix announced, and the next smaller TP of that shape
must not, so the numbers in the message are the planner's own.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.catalog.models import resolve_model
from glm_operator.cli import main
from glm_operator.desired import Observed, compute_desired
from glm_operator.planning.memory.instance import parallelism_error
from glm_operator.planning.placement.fixes import Fix
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-cluster.yaml"
NODES = yaml.safe_load(FIXTURE.read_text())["items"]
POOLS = parse_gpu_pools(NODES)
H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
PRODUCT_LABEL = "nvidia.com/gpu.product"
# The case of the issue: GLM-4.5 in bf16 with only L4 allowed ("short by 146 GiB" and nothing to do).
GLM45_BF16_ON_L4: dict[str, Any] = {
    "model": {"id": "zai-org/GLM-4.5"},
    "quantization": "bf16",
    "gpu": {"products": ["L4"]},
}


def plan(spec: Mapping[str, Any], pools: tuple[GpuPool, ...] = POOLS) -> Plan:
    return plan_placement(placement_request_from_spec(spec, pools))


def patched(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(spec))
    for key, value in patch.items():
        if isinstance(value, Mapping):
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = value
    return out


def h100_nodes(n: int) -> tuple[GpuPool, ...]:
    return tuple(
        GpuPool(f"h100-{i}", H100, H100, 8, node_selector=((PRODUCT_LABEL, H100),)) for i in range(n)
    )


def with_extra_nodes(pools: tuple[GpuPool, ...], fix: Fix) -> tuple[GpuPool, ...]:
    like = max((p for p in pools if p.gpu_product == fix.gpu_product), key=lambda p: p.gpu_count)
    extra = [dataclasses.replace(like, node_name=f"added-{i}", gpus_used=0) for i in range(fix.extra_nodes)]
    return (*pools, *extra)


def assert_fix_plans(spec: Mapping[str, Any], fix: Fix, pools: tuple[GpuPool, ...]) -> None:
    """The fix, applied, plans with the announced shape, and no smaller TP of it fits."""
    new_spec = patched(spec, fix.spec_patch)
    new_pools = with_extra_nodes(pools, fix) if fix.extra_nodes else pools
    p = plan(new_spec, new_pools)
    assert p.fits, fix.describe()
    v = next(v for v in p.variants if v.gpu_product == fix.gpu_product)
    assert (v.gpu_product, v.tensor_parallel_size, v.pipeline_parallel_size, v.quantization, v.model_id) == (
        fix.gpu_product,
        fix.tensor_parallel_size,
        fix.pipeline_parallel_size,
        fix.quantization,
        fix.model_id,
    )
    assert v.gpus_per_replica == fix.gpus_per_replica and v.nodes_per_replica == fix.nodes_per_replica
    arch = resolve_model(fix.model_id).architecture
    smaller = [tp for tp in range(1, fix.tensor_parallel_size) if parallelism_error(arch, tp) is None]
    if smaller and fix.pipeline_parallel_size == 1:
        pinned = patched(new_spec, {"gpu": {"tensorParallelSize": smaller[-1]}})
        assert not plan(pinned, new_pools).fits
    if fix.extra_nodes:  # the nodes are needed: without them the same spec does not fit
        assert not plan(new_spec, pools).fits
    if fix.extra_nodes > 1:  # and no fewer would do on that GPU type
        fewer = with_extra_nodes(pools, dataclasses.replace(fix, extra_nodes=fix.extra_nodes - 1))
        assert all(v.gpu_product != fix.gpu_product for v in plan(new_spec, fewer).variants)


def test_glm45_bf16_on_l4_names_the_fixes_that_fit_cheapest_first() -> None:
    p = plan(GLM45_BF16_ON_L4)
    assert not p.fits and p.fixes
    for fix in p.fixes:
        assert_fix_plans(GLM45_BF16_ON_L4, fix, POOLS)
    costs = [(f.extra_nodes > 0, f.gpus_per_replica, f.nodes_per_replica) for f in p.fixes]
    assert costs == sorted(costs)
    cluster_types = {pool.gpu_product for pool in POOLS}
    # another GPU type the cluster has, in bf16 as pinned: one 8-GPU node of 141 GiB H200s
    other = next(f for f in p.fixes if f.kinds == {"products"})
    assert other.gpu_product in cluster_types - {L4}
    assert other.spec_patch == {"gpu": {"products": ["L4", other.gpu_product]}}
    assert other.quantization == "bf16" and other.capacity_replicas >= 1
    # staying on L4: the three 4-GPU L4 nodes of the cluster, one replica over all of them, int4
    stay = next(f for f in p.fixes if f.gpu_product == L4)
    assert stay.kinds == {"multinode", "quantization:int4"} and stay.nodes_per_replica == 3
    assert stay.model_id != "zai-org/GLM-4.5" and stay.quantization == "int4"  # the AWQ checkpoint
    assert stay.model_id in stay.describe() and "over 3 nodes" in stay.describe()
    # fp8 on L4 over more nodes: the fewest that fit (5), not as many as raise tokens/s per GPU (8)
    more = next(f for f in p.fixes if f.gpu_product == L4 and f.extra_nodes)
    assert (more.quantization, more.extra_nodes, more.nodes_per_replica) == ("fp8", 2, 5)
    # and the L4 rejection itself ends with it
    (rejection,) = p.rejected
    assert rejection.gpu_product == L4
    assert rejection.reason.endswith(
        "Cheapest on NVIDIA-L4: gpu.allowMultiNode: true and quantization: int4 plans TP=4 x PP=3 int4 "
        "on 12 NVIDIA-L4 over 3 nodes"
    )


def test_fix_with_more_nodes_says_how_many_the_replica_needs() -> None:
    # One H100 node: bf16 GLM-4.5 needs two nodes of eight (TP=8 x PP=2); fp8 fits on the one node.
    spec = {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16", "gpu": {"products": ["H100"]}}
    pools = h100_nodes(1)
    p = plan(spec, pools)
    assert not p.fits
    for fix in p.fixes:
        assert_fix_plans(spec, fix, pools)
    nodes = next(f for f in p.fixes if f.extra_nodes)
    assert nodes.kinds == {"multinode", "nodes"}
    assert (nodes.extra_nodes, nodes.nodes_per_replica, nodes.gpus_per_node) == (1, 2, 8)
    assert "1 more NVIDIA-H100-80GB-HBM3 node(s) of 8 GPUs (2 in all, the cluster has 1)" in nodes.describe()
    assert nodes.capacity_replicas == 0 and "no free GPUs" in nodes.describe()
    # a lower precision on the node there is takes fewer GPUs than two nodes: int4 (the AWQ
    # checkpoint) on 4, the official FP8 checkpoint on 8
    assert [(f.kinds, f.gpus_per_replica, f.model_id) for f in p.fixes[:2]] == [
        ({"quantization:int4"}, 4, "QuantTrio/GLM-4.5-AWQ"),
        ({"quantization:fp8"}, 8, "zai-org/GLM-4.5-FP8"),
    ]
    # with the second node there, allowMultiNode alone is the fix, with no node to add
    two = plan(spec, h100_nodes(2))
    multi = next(f for f in two.fixes if "multinode" in f.kinds)
    assert multi.kinds == {"multinode"} and multi.extra_nodes == 0 and multi.capacity_replicas == 1


def test_a_combination_is_dropped_when_part_of_it_fits_as_cheaply() -> None:
    p = plan(GLM45_BF16_ON_L4)
    kinds = [f.kinds for f in p.fixes]
    assert len(kinds) == len(set(kinds))  # one fix per kind of change
    for f in p.fixes:
        for g in p.fixes:
            if g.kinds < f.kinds:
                assert g.cost[:4] > f.cost[:4], (g.describe(), f.describe())


def test_a_plan_that_fits_carries_no_fixes() -> None:
    p = plan({"model": {"id": "zai-org/GLM-4.5-Air"}, "gpu": {"products": ["H100"]}})
    assert p.fits and p.fixes == ()


def test_status_condition_and_event_lead_with_the_cheapest_fix() -> None:
    body = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "g", "namespace": "llm", "uid": "uid-1", "generation": 1},
        "spec": GLM45_BF16_ON_L4,
        "status": {},
    }
    d = compute_desired(
        Observed(
            body=body,
            nodes=NODES,
            gpus_used={},
            children=[],
            pods=[],
            default_image="vllm/vllm-openai:v0.33.0",
            now="2026-11-30T00:00:00Z",
        )
    )
    assert d.plan is not None and d.plan.fixes
    cheapest = d.plan.fixes[0].describe()
    planned = next(c for c in d.status["conditions"] if c["type"] == "Planned")
    assert planned["status"] == "False"
    assert planned["message"].startswith(f"does not fit: cheapest fix: {cheapest}")
    assert d.status["plan"]["fixes"] == [f.describe() for f in d.plan.fixes]
    warning = next(e for e in d.events if e.type == "Warning")
    assert cheapest in warning.message


def test_plan_command_prints_the_fixes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    manifest = tmp_path / "g.yaml"
    manifest.write_text(yaml.safe_dump({"kind": "GLMDeployment", "spec": GLM45_BF16_ON_L4}))
    assert main(["plan", "-f", str(manifest), "--nodes", str(FIXTURE)]) == 1
    table = capsys.readouterr().out
    fixes = plan(GLM45_BF16_ON_L4).fixes
    assert f"fix 1 (cheapest): {fixes[0].describe()}" in table
    assert main(["plan", "-f", str(manifest), "--nodes", str(FIXTURE), "-o", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["description"] for f in data["fixes"]] == [f.describe() for f in fixes]
