"""Capacity: GPUs free on existing nodes plus GPUs node autoscalers can still add (pure).

``capacity_pools(...)`` returns the :class:`~glm_operator.planning.supply.nodes.GpuPool` tuple the planner
works on: the existing nodes' pools plus virtual nodes for each elastic pool's headroom and for the pods
of this GLMDeployment that wait for a machine being launched (so their replica keeps its place while the
node boots). No Kubernetes client, no clock (``now`` is passed in). docs/planning.md ("Where the GPUs
come from").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.catalog.gpus import GPU_RESOURCE
from glm_operator.planning.supply.nodes import GpuPool
from glm_operator.planning.supply.pools import (
    ElasticPool,
    new_machines,
    parse_karpenter_nodepools,
    parse_node_groups,
)

DEFAULT_NODE_PROVISIONING_GRACE_SECONDS = 600.0
MAX_PIPELINE_NODES = 8  # nodes per replica the planner may use when multi-node is allowed


@dataclass(frozen=True)
class WaitingPod:
    """A pod of this GLMDeployment that waits for a node an elastic pool is launching."""

    name: str
    pool: ElasticPool
    gpus: int


@dataclass(frozen=True)
class ElasticCapacityInput:
    """What the operator knows about node autoscalers: Karpenter NodePools (as read from the
    apiserver), the node-groups document (``--node-groups-file``) and the grace period."""

    nodepools: Sequence[Mapping[str, Any]] = ()
    node_groups: Mapping[str, Any] | None = None
    grace_seconds: float = DEFAULT_NODE_PROVISIONING_GRACE_SECONDS


@dataclass(frozen=True)
class ObservedCapacity:
    pools: tuple[GpuPool, ...]  # existing nodes, then virtual nodes of elastic pools
    elastic: tuple[ElasticPool, ...]
    waiting: tuple[WaitingPod, ...]
    notes: tuple[str, ...]


def _parse_time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _pod_gpus(pod: Mapping[str, Any], resource: str) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(
            resource
        )
        if value is not None and str(value).isdigit():
            total += int(str(value))
    return total


def _affinity_values(pod: Mapping[str, Any]) -> dict[str, set[str]]:
    """Required node-affinity ``In`` values of the pod's first term (what pins it to a GPU type)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    out: dict[str, set[str]] = {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In":
                out.setdefault(str(expr.get("key")), set()).update(str(v) for v in expr.get("values") or [])
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    for key, value in selector.items():
        out.setdefault(str(key), set()).add(str(value))
    return out


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def is_waiting_for_node(pod: Mapping[str, Any], now: str, grace_seconds: float) -> bool:
    """Unschedulable, created less than ``grace_seconds`` before ``now``."""
    current = _parse_time(now)
    created = _parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    if current is None or created is None or not _unschedulable(pod):
        return False
    return (current - created).total_seconds() <= grace_seconds


def waiting_pods(
    pods: Sequence[Mapping[str, Any]],
    elastic: Sequence[ElasticPool],
    now: str,
    grace_seconds: float = DEFAULT_NODE_PROVISIONING_GRACE_SECONDS,
) -> tuple[WaitingPod, ...]:
    """Pods that wait for a node being launched (see module docstring, rule 2)."""
    budget = {p.name: p.in_flight_gpus for p in elastic}
    out: list[WaitingPod] = []
    ordered = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    for pod in ordered:
        if not is_waiting_for_node(pod, now, grace_seconds):
            continue
        meta = pod.get("metadata") or {}
        wanted = _affinity_values(pod)
        for pool in elastic:
            if not all(v in wanted.get(k, set()) for k, v in pool.node_selector):
                continue
            gpus = _pod_gpus(pod, pool.resource_name)
            if gpus <= 0 or gpus > budget[pool.name]:
                continue
            budget[pool.name] -= gpus
            out.append(WaitingPod(str(meta.get("name", "")), pool, gpus))
            break
    return tuple(out)


def _virtual(pool: ElasticPool, label: str, gpus: int) -> GpuPool:
    return GpuPool(
        node_name=f"{pool.name}: {label}",
        gpu_product=pool.gpu_product,
        product_label=pool.gpu_product,
        gpu_count=gpus,
        resource_name=pool.resource_name,
        node_selector=pool.node_selector,
        elastic_pool=pool.name,
    )


def elastic_gpu_pools(
    elastic: Sequence[ElasticPool],
    waiting: Sequence[WaitingPod] = (),
    replicas: int = 1,
    allow_multi_node: bool = False,
) -> tuple[GpuPool, ...]:
    """Virtual nodes for pods waiting for a node, then for each pool's headroom."""
    out = [_virtual(w.pool, f"node for pod {w.name}", w.gpus) for w in waiting]
    depth = MAX_PIPELINE_NODES if allow_multi_node else 1
    for pool in elastic:
        wanted = max(1, replicas) * depth * pool.largest_machine_gpus
        for i, gpus in enumerate(new_machines(pool, wanted)):
            out.append(_virtual(pool, f"new node {i + 1}", gpus))
    return tuple(out)


def capacity_pools(
    node_pools: Sequence[GpuPool],
    elastic: Sequence[ElasticPool] = (),
    waiting: Sequence[WaitingPod] = (),
    replicas: int = 1,
    allow_multi_node: bool = False,
) -> tuple[GpuPool, ...]:
    """Existing nodes' pools, then virtual nodes of the elastic pools (see module docstring)."""
    return (*node_pools, *elastic_gpu_pools(elastic, waiting, replicas, allow_multi_node))


def observed_capacity(
    node_pools: Sequence[GpuPool],
    nodes: Sequence[Mapping[str, Any]],
    elastic_input: ElasticCapacityInput,
    pods: Sequence[Mapping[str, Any]],
    now: str,
    replicas: int,
    allow_multi_node: bool = False,
) -> ObservedCapacity:
    """Everything above in one call: what the reconcile and the autoscaler plan on."""
    karpenter, notes = parse_karpenter_nodepools(elastic_input.nodepools, nodes)
    elastic = (*karpenter, *parse_node_groups(elastic_input.node_groups, nodes))
    waiting = waiting_pods(pods, elastic, now, elastic_input.grace_seconds)
    pools = capacity_pools(node_pools, elastic, waiting, replicas, allow_multi_node)
    return ObservedCapacity(pools, elastic, waiting, notes)


def pool_limits_note(elastic: Sequence[ElasticPool], gpu_products: Sequence[str]) -> str:
    """What caps the elastic pools of these GPU types, for the shortfall message."""
    parts = [
        f"{p.name} ({p.gpu_product}) is capped by {p.limit_note}"
        for p in elastic
        if p.gpu_product in gpu_products and p.headroom_gpus is not None
    ]
    return "; ".join(parts)


def largest_machines_note(elastic: Sequence[ElasticPool], gpu_product: str) -> str:
    """The largest machine the pools of one GPU type can launch, for a rejection's fix."""
    parts = []
    for p in elastic:
        if p.gpu_product != gpu_product:
            continue
        text = f"{p.name} launches at most {p.largest_machine_gpus} {gpu_product} GPUs per node"
        text += f" ({p.machine_names[0]})" if p.machine_names else ""
        within = new_machines(p, p.largest_machine_gpus)
        if p.headroom_gpus is not None and (not within or within[0] < p.largest_machine_gpus):
            text += f", {within[0] if within else 0} within its limits ({p.limit_note})"
        parts.append(text)
    return "; ".join(parts)


__all__ = [
    "DEFAULT_NODE_PROVISIONING_GRACE_SECONDS",
    "GPU_RESOURCE",
    "ElasticCapacityInput",
    "ObservedCapacity",
    "WaitingPod",
    "capacity_pools",
    "elastic_gpu_pools",
    "is_waiting_for_node",
    "largest_machines_note",
    "observed_capacity",
    "pool_limits_note",
    "waiting_pods",
]
