"""Elastic capacity: Karpenter NodePools / node groups read as GPUs they can add, and the planner on them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.desired import Observed, compute_desired
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.supply.capacity import (
    ElasticCapacityInput,
    capacity_pools,
    largest_machines_note,
    observed_capacity,
    pool_limits_note,
    waiting_pods,
)
from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools
from glm_operator.planning.supply.pools import (
    ElasticPool,
    NodeGroupsError,
    new_machines,
    parse_karpenter_nodepools,
    parse_node_groups,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NODEPOOLS = [
    d
    for d in yaml.safe_load_all((FIXTURES / "karpenter" / "nodepools.yaml").read_text())
    if d["kind"] == "NodePool"
]
H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"
SMALL = {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192}  # one L4 per replica
NOW = "2026-11-30T12:00:00Z"


def nodepool(name: str, **changes: Any) -> dict[str, Any]:
    np = copy.deepcopy(next(n for n in NODEPOOLS if n["metadata"]["name"] == name))
    np.update(changes)
    return np


def pools_by_type(nodepools: list[dict[str, Any]]) -> dict[str, ElasticPool]:
    pools, _ = parse_karpenter_nodepools(nodepools)
    return {p.gpu_product: p for p in pools}


def plan_on(spec: dict[str, Any], nodes: tuple[GpuPool, ...], elastic: tuple[ElasticPool, ...]) -> Plan:
    replicas = int(spec.get("replicas", 1))
    pools = capacity_pools(nodes, elastic, (), replicas)
    return plan_placement(placement_request_from_spec(spec, pools))


def l4_node(name: str, gpus: int = 1, used: int = 0) -> GpuPool:
    return GpuPool(name, L4, L4, gpus, node_selector=(("nvidia.com/gpu.product", L4),), gpus_used=used)


# -- reading the pools ----------------------------------------------------------------------------


def test_fixture_nodepools_read_as_gpu_type_machine_shapes_and_limits() -> None:
    pools = pools_by_type(NODEPOOLS)
    assert set(pools) == {H100, A100, L4}
    h100, l4 = pools[H100], pools[L4]
    assert h100.name == "NodePool gpu-h100"
    assert h100.node_selector == (("nvidia.com/gpu.product", H100),)  # the template label pins pods
    assert (h100.machine_gpus, h100.machine_names, h100.headroom_gpus) == ((8,), ("p5.48xlarge",), 16)
    assert (l4.machine_gpus, l4.headroom_gpus) == ((4, 1), 2)
    assert pools[A100].machine_names == ("p4de.24xlarge",)


def test_resources_in_use_reduce_headroom_and_a_full_pool_says_so() -> None:
    full = nodepool("gpu-h100", status={"resources": {"nvidia.com/gpu": "16", "cpu": "384"}})
    pool = pools_by_type([full])[H100]
    assert pool.headroom_gpus == 0 and new_machines(pool, 8) == []
    assert pool.in_flight_gpus == 16  # no Ready node of the pool yet: all launching
    note = pool_limits_note([pool], [H100])
    assert (
        note
        == "NodePool gpu-h100 (NVIDIA-H100-80GB-HBM3) is capped by spec.limits nvidia.com/gpu 16, 16 in use"
    )


def test_ready_nodes_of_the_pool_are_not_in_flight() -> None:
    np = nodepool("gpu-l4", status={"resources": {"nvidia.com/gpu": "2"}})
    node = {
        "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "gpu-l4"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    pools, _ = parse_karpenter_nodepools([np], [node])
    assert pools[0].in_flight_gpus == 1


def test_cpu_limit_bounds_machines_when_tighter_than_gpus() -> None:
    np = nodepool("gpu-h100")
    np["spec"]["limits"] = {"cpu": "400"}  # p5.48xlarge has 192 vCPUs: two machines
    assert pools_by_type([np])[H100].headroom_gpus == 16


def test_pool_known_only_by_instance_types_is_pinned_by_its_nodepool_label() -> None:
    np = nodepool("gpu-a100")
    np["spec"]["template"]["metadata"]["labels"] = {}
    pool = pools_by_type([np])[A100]
    assert pool.node_selector == (("karpenter.sh/nodepool", "gpu-a100"),)


def test_pool_without_machine_size_is_not_counted_and_says_what_to_add() -> None:
    np = nodepool("gpu-h100")
    np["spec"]["template"]["spec"]["requirements"] = []
    pools, notes = parse_karpenter_nodepools([np])
    assert pools == () and "node.kubernetes.io/instance-type" in notes[0]


def test_cpu_only_nodepool_is_ignored() -> None:
    np = {"metadata": {"name": "general"}, "spec": {"template": {"spec": {"requirements": []}}}}
    assert parse_karpenter_nodepools([np]) == ((), ())


@pytest.mark.parametrize(
    ("shapes", "headroom", "wanted", "machines"),
    [((4, 1), 2, 99, [1, 1]), ((4, 1), 5, 99, [4, 1]), ((8,), 16, 99, [8, 8]), ((8,), None, 20, [8, 8, 8])],
)
def test_new_machines_fill_the_headroom_with_the_largest_shape_that_fits(
    shapes: tuple[int, ...], headroom: int | None, wanted: int, machines: list[int]
) -> None:
    pool = ElasticPool("NodePool p", L4, (), shapes, headroom)
    assert new_machines(pool, wanted) == machines


def test_node_groups_file_is_read_and_counts_present_nodes() -> None:
    doc = {
        "nodeGroups": [
            {
                "name": "gpu-h100",
                "gpuProduct": "H100",
                "gpusPerNode": 8,
                "maxNodes": 3,
                "nodeSelector": {"cloud.google.com/gke-nodepool": "gpu-h100"},
            }
        ]
    }
    node = {"metadata": {"labels": {"cloud.google.com/gke-nodepool": "gpu-h100"}}}
    (pool,) = parse_node_groups(doc, [node])
    assert (pool.gpu_product, pool.headroom_gpus, pool.machine_gpus) == (H100, 16, (8,))
    assert pool.node_selector == (("cloud.google.com/gke-nodepool", "gpu-h100"),)


@pytest.mark.parametrize(
    ("group", "field"),
    [
        ({"gpuProduct": "H100", "gpusPerNode": 8, "maxNodes": 1, "nodeSelector": {"a": "b"}}, "name"),
        (
            {"name": "g", "gpuProduct": "H999", "gpusPerNode": 8, "maxNodes": 1, "nodeSelector": {"a": "b"}},
            "gpuProduct",
        ),
        (
            {"name": "g", "gpuProduct": "H100", "gpusPerNode": 0, "maxNodes": 1, "nodeSelector": {"a": "b"}},
            "gpusPerNode",
        ),
        (
            {"name": "g", "gpuProduct": "H100", "gpusPerNode": 8, "maxNodes": -1, "nodeSelector": {"a": "b"}},
            "maxNodes",
        ),
        ({"name": "g", "gpuProduct": "H100", "gpusPerNode": 8, "maxNodes": 1}, "nodeSelector"),
    ],
)
def test_bad_node_group_names_the_field(group: dict[str, Any], field: str) -> None:
    with pytest.raises(NodeGroupsError, match=rf"nodeGroups\[0\]\.{field}"):
        parse_node_groups({"nodeGroups": [group]})


# -- planning on them ------------------------------------------------------------------------------


def test_zero_gpu_nodes_plans_on_the_pool_and_says_replicas_wait_for_nodes() -> None:
    p = plan_on({**SMALL, "gpu": {"products": ["L4"]}}, (), tuple(pools_by_type(NODEPOOLS).values()))
    assert p.fits and p.shortfall_replicas == 0
    (v,) = [v for v in p.variants if v.replicas]
    assert (v.gpu_product, v.replicas, v.new_node_replicas, v.node_pools) == (L4, 1, 1, ("NodePool gpu-l4",))
    assert v.node_selector == {"nvidia.com/gpu.product": L4}
    assert "wait for new nodes from NodePool gpu-l4" in " ".join(p.details)


def test_existing_free_gpus_first_then_the_pool_then_shortfall_at_its_limit() -> None:
    pools = tuple(pools_by_type(NODEPOOLS).values())
    p = plan_on({**SMALL, "gpu": {"products": ["L4"]}, "replicas": 4}, (l4_node("l4-a"),), pools)
    (v,) = [v for v in p.variants if v.replicas]
    # 1 on the existing node, 2 on new g6.xlarge nodes (limit 2 GPUs), 1 short
    assert (v.replicas, v.new_node_replicas, p.shortfall_replicas) == (3, 2, 1)


def test_preference_order_holds_over_existing_free_gpus() -> None:
    pools = tuple(pools_by_type(NODEPOOLS).values())
    p = plan_on({**SMALL, "gpu": {"products": ["H100", "L4"]}}, (l4_node("l4-a"),), pools)
    assert p.variants[0].gpu_product == H100 and p.variants[0].replicas == 1
    assert p.variants[0].new_node_replicas == 1


def test_without_preference_existing_free_gpus_come_before_pools() -> None:
    pools = tuple(pools_by_type(NODEPOOLS).values())
    p = plan_on(SMALL, (l4_node("l4-a"),), pools)
    first = p.variants[0]
    assert (first.gpu_product, first.replicas, first.new_node_replicas) == (L4, 1, 0)


def test_replica_larger_than_any_machine_is_rejected_with_the_pools_largest_machine() -> None:
    pools = tuple(pools_by_type(NODEPOOLS).values())
    spec = {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16", "gpu": {"products": ["L4"]}}
    p = plan_on(spec, (), pools)
    assert not p.fits and p.rejected[0].gpu_product == L4
    note = largest_machines_note(pools, L4)
    assert note == (
        "NodePool gpu-l4 launches at most 4 NVIDIA-L4 GPUs per node (g6.12xlarge), "
        "1 within its limits (spec.limits nvidia.com/gpu 2, 0 in use)"
    )
    unbounded = [
        ElasticPool("NodePool big", L4, (), (4, 1), None, machine_names=("g6.12xlarge", "g6.xlarge"))
    ]
    assert (
        largest_machines_note(unbounded, L4)
        == "NodePool big launches at most 4 NVIDIA-L4 GPUs per node (g6.12xlarge)"
    )


# -- pods waiting for a node (stickiness) ------------------------------------------------------------


def pending_pod(name: str, created: str, gpus: int = 1, product: str = L4) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
            "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def test_pod_waiting_for_a_launching_node_keeps_its_place_within_the_grace_period() -> None:
    launching = nodepool("gpu-l4", status={"resources": {"nvidia.com/gpu": "2"}})  # both machines launching
    pools, _ = parse_karpenter_nodepools([launching])
    pods = [pending_pod("a", "2026-11-30T11:59:00Z"), pending_pod("b", "2026-11-30T11:59:30Z")]
    waiting = waiting_pods(pods, pools, NOW, grace_seconds=600)
    assert [w.name for w in waiting] == ["a", "b"]
    # the pool has no headroom left, yet both replicas stay planned on it
    p = plan_placement(
        placement_request_from_spec({**SMALL, "replicas": 2}, capacity_pools((), pools, waiting, 2))
    )
    assert (p.variants[0].replicas, p.variants[0].new_node_replicas, p.shortfall_replicas) == (2, 2, 0)
    # after the grace period they no longer hold capacity
    assert waiting_pods(pods, pools, "2026-11-30T12:30:00Z", grace_seconds=600) == ()


def test_pod_the_pool_cannot_provide_is_not_waiting() -> None:
    full = nodepool("gpu-l4", status={"resources": {"nvidia.com/gpu": "2"}})
    ready = {
        "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "gpu-l4"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    pools, _ = parse_karpenter_nodepools(
        [full], [ready, {**ready, "metadata": {**ready["metadata"], "name": "n2"}}]
    )
    assert waiting_pods([pending_pod("c", "2026-11-30T11:59:50Z")], pools, NOW) == ()


# -- the reconcile's view ----------------------------------------------------------------------------


def glmd(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": spec,
    }


def observed(spec: dict[str, Any], nodepools: list[dict[str, Any]], pods: tuple[Any, ...] = ()) -> Observed:
    return Observed(
        body=glmd(spec), nodes=[], gpus_used={}, children=[], pods=list(pods), default_image="vllm:test",
        now=NOW, elastic=ElasticCapacityInput(nodepools=nodepools),
    )  # fmt: skip


def test_status_plan_names_the_pool_and_the_replicas_waiting_for_nodes() -> None:
    d = compute_desired(observed({**SMALL, "gpu": {"products": ["L4"]}, "replicas": 2}, NODEPOOLS))
    assert d.plan is not None and d.objects
    (v,) = [v for v in d.status["plan"]["variants"] if v["replicas"]]
    assert (v["replicas"], v["newNodeReplicas"], v["nodePools"]) == (2, 2, ["NodePool gpu-l4"])
    assert "2 on new nodes from NodePool gpu-l4" in d.status["plan"]["summary"]
    assert any(e.reason == "WaitingForNodes" for e in d.events)
    degraded = next(c for c in d.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


def test_shortfall_beyond_the_pool_limit_is_degraded_with_the_limit() -> None:
    d = compute_desired(observed({**SMALL, "gpu": {"products": ["L4"]}, "replicas": 3}, NODEPOOLS))
    degraded = next(c for c in d.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "InsufficientGPU"
    assert (
        "NodePool gpu-l4 (NVIDIA-L4) is capped by spec.limits nvidia.com/gpu 2, 0 in use"
        in degraded["message"]
    )
    assert "1 of 3 replicas" in degraded["message"]


def test_no_machine_big_enough_fails_the_plan_naming_the_pools() -> None:
    spec = {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16", "gpu": {"products": ["L4"]}}
    d = compute_desired(observed(spec, NODEPOOLS))
    assert d.objects == () and d.status["phase"] == "Failed"
    planned = next(c for c in d.status["conditions"] if c["type"] == "Planned")
    assert planned["status"] == "False"
    assert "NodePool gpu-l4 launches at most 4 NVIDIA-L4 GPUs per node (g6.12xlarge)" in planned["message"]
    assert "fix: one replica must fit on one machine" in planned["message"]


def test_observed_capacity_on_plain_nodes_is_the_node_pools() -> None:
    nodes = [yaml.safe_load((FIXTURES / "gpu-cluster.yaml").read_text())["items"][0]]
    node_pools = parse_gpu_pools(nodes)
    cap = observed_capacity(node_pools, nodes, ElasticCapacityInput(), [], NOW, 1)
    assert cap.pools == node_pools and cap.elastic == ()


def test_pending_pod_of_a_replica_planned_on_a_new_node_is_not_degraded() -> None:
    from glm_operator.desired.children import variant_slug
    from glm_operator.render import names

    pod = pending_pod("m-l4-abc", "2026-11-30T11:59:58Z")  # Karpenter has not counted its machine yet
    pod["metadata"]["labels"] = {names.LABEL_VARIANT: names.label_value(variant_slug("nvidia-l4"))}
    spec = {**SMALL, "gpu": {"products": ["L4"]}}
    d = compute_desired(observed(spec, NODEPOOLS, (pod,)))
    assert next(c for c in d.status["conditions"] if c["type"] == "Degraded")["status"] == "False"
    # the same pod once the grace period is over is a degradation
    late = Observed(**{**observed(spec, NODEPOOLS, (pod,)).__dict__, "now": "2026-11-30T13:00:00Z"})
    d = compute_desired(late)
    assert next(c for c in d.status["conditions"] if c["type"] == "Degraded")["status"] == "True"
