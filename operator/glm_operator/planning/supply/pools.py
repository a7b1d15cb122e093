"""Node autoscaler pools: GPU machines that do not exist yet but can be added (pure).

Karpenter ``NodePool`` objects and the node groups of other autoscalers (the ``--node-groups-file``
document) become :class:`ElasticPool`: the GPU type, the label that pins pods to it, the GPUs per machine
of each machine shape it may launch, and the GPUs it may still add within its limits. The planner can
then place a replica on a machine that will be launched for it, and no more than the pool can give.
docs/planning.md ("Where the GPUs come from") has how each field is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.catalog.gpus import GPU_RESOURCE, PRODUCT_LABELS, GpuType, find_gpu, gpu_from_labels
from glm_operator.catalog.instance_types import InstanceType, find_instance_type
from glm_operator.catalog.models import CatalogError

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
KARPENTER_GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
GFD_COUNT_LABEL = "nvidia.com/gpu.count"
_PRODUCT_KEYS = {key for _, key in PRODUCT_LABELS}


class NodeGroupsError(ValueError):
    """The node-groups file is malformed; the message names the entry and field."""


@dataclass(frozen=True)
class ElasticPool:
    """GPU machines of one type that a node autoscaler can add."""

    name: str  # "NodePool gpu-h100" / "node group gpu-h100"
    gpu_product: str  # catalog name; "" when not recognised
    node_selector: tuple[tuple[str, str], ...]
    machine_gpus: tuple[int, ...]  # GPUs per machine of each shape it may launch, largest first
    headroom_gpus: int | None  # GPUs it may still add; None = no limit
    limit_note: str = ""  # what bounds it, in words ("spec.limits nvidia.com/gpu 16, 16 in use")
    machine_names: tuple[str, ...] = ()
    resource_name: str = GPU_RESOURCE
    in_flight_gpus: int = 0  # GPUs of machines launched (counted in its status) but not yet Ready nodes

    @property
    def largest_machine_gpus(self) -> int:
        return self.machine_gpus[0] if self.machine_gpus else 0


def _quantity(value: Any) -> float:
    """Kubernetes quantity -> number (cpu cores, bytes, counts)."""
    text = str(value).strip()
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    if not match:
        return 0.0
    number, suffix = float(match.group(1)), match.group(2)
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
    decimal = {"": 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    return number * binary.get(suffix, decimal.get(suffix, 1.0))


def _requirements(nodepool: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [r for r in spec.get("requirements") or [] if isinstance(r, Mapping)]


def _in_values(requirements: Iterable[Mapping[str, Any]], key: str) -> list[str] | None:
    for req in requirements:
        if req.get("key") == key and req.get("operator") == "In":
            return [str(v) for v in req.get("values") or []]
    return None


def _gpu_type(
    labels: Mapping[str, str], requirements: list[Mapping[str, Any]], machines: list[InstanceType]
) -> tuple[GpuType | None, tuple[tuple[str, str], ...]]:
    gpu, key, value = gpu_from_labels(labels)
    if gpu is not None:
        return gpu, ((key, value),)
    for req in requirements:
        values = req.get("values") or []
        if req.get("key") in _PRODUCT_KEYS and req.get("operator") == "In" and len(values) == 1:
            gpu, key, value = gpu_from_labels({str(req["key"]): str(values[0])})
            if gpu is not None:
                return gpu, ((key, value),)
    types = {m.gpu.name: m.gpu for m in machines}
    if len(types) == 1:
        return next(iter(types.values())), ()
    return None, ()


def _karpenter_headroom(
    nodepool: Mapping[str, Any], machines: list[InstanceType], largest: int
) -> tuple[int | None, str]:
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    used = (nodepool.get("status") or {}).get("resources") or {}
    headroom: int | None = None
    notes: list[str] = []
    if GPU_RESOURCE in limits:
        limit, in_use = _quantity(limits[GPU_RESOURCE]), _quantity(used.get(GPU_RESOURCE, 0))
        headroom = max(0, int(limit - in_use))
        notes.append(f"spec.limits {GPU_RESOURCE} {limit:g}, {in_use:g} in use")
    per_machine = {"cpu": 0.0, "memory": 0.0}
    for m in machines:
        if m.gpus == largest:
            per_machine = {"cpu": float(m.cpu), "memory": float(m.memory_gib) * 2**30}
            break
    for resource in ("cpu", "memory"):
        if resource not in limits or not per_machine[resource]:
            continue
        left = max(0.0, _quantity(limits[resource]) - _quantity(used.get(resource, 0)))
        by_resource = int(left // per_machine[resource]) * largest
        if headroom is None or by_resource < headroom:
            headroom = by_resource
            notes.append(f"spec.limits {resource} {limits[resource]} leaves room for {by_resource} GPUs")
    return headroom, "; ".join(notes)


def _ready_gpus_by_nodepool(nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in nodes:
        name = ((node.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
        if not name:
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        out[str(name)] = out.get(str(name), 0) + int(_quantity(allocatable.get(GPU_RESOURCE, 0)))
    return out


def parse_karpenter_nodepools(
    nodepools: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]] = ()
) -> tuple[tuple[ElasticPool, ...], tuple[str, ...]]:
    """Karpenter NodePools -> elastic GPU pools, and notes on NodePools that could not be used.

    NodePools without GPUs (no GPU label, no GPU instance type) are skipped silently. ``nodes``
    (the cluster's Nodes) tell how many of the GPUs a pool holds are still being launched.
    """
    nodepools = list(nodepools)
    if not nodepools:
        return (), ()  # no Karpenter: no walk over every node
    ready = _ready_gpus_by_nodepool(nodes)
    pools: list[ElasticPool] = []
    notes: list[str] = []
    for np in nodepools:
        pool = _nodepool_pool(np, ready, notes)
        if pool is not None:
            pools.append(pool)
    return tuple(pools), tuple(notes)


def _nodepool_pool(np: Mapping[str, Any], ready: Mapping[str, int], notes: list[str]) -> ElasticPool | None:
    """One NodePool's elastic pool, or None (a note in ``notes`` when it has GPUs but cannot be used)."""
    meta = np.get("metadata") or {}
    name = str(meta.get("name", ""))
    if meta.get("deletionTimestamp"):
        return None
    template = (np.get("spec") or {}).get("template") or {}
    labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
    requirements = _requirements(np)
    type_names = _in_values(requirements, INSTANCE_TYPE_LABEL) or []
    known = [m for m in (find_instance_type(t) for t in type_names) if m is not None]
    gpu, selector = _gpu_type(labels, requirements, known)
    if gpu is None:
        if any(k in labels for k in _PRODUCT_KEYS) or known:
            notes.append(f"NodePool {name}: GPU type not recognised from its labels or instance types")
        return None
    machines = [m for m in known if m.gpu.name == gpu.name]
    shapes = _machine_shapes(machines, requirements, labels)
    if not shapes:
        notes.append(
            f"NodePool {name} ({gpu.name}): not counted as capacity, its machine size is unknown; name "
            f"instance types ({INSTANCE_TYPE_LABEL} In [...]) in its requirements"
        )
        return None
    headroom, limit_note = _karpenter_headroom(np, machines, shapes[0])
    in_use = int(_quantity(((np.get("status") or {}).get("resources") or {}).get(GPU_RESOURCE, 0)))
    return ElasticPool(
        name=f"NodePool {name}",
        gpu_product=gpu.name,
        node_selector=selector or ((NODEPOOL_LABEL, name),),
        machine_gpus=tuple(shapes),
        headroom_gpus=headroom,
        limit_note=limit_note,
        machine_names=tuple(m.name for m in sorted(machines, key=lambda m: -m.gpus)),
        in_flight_gpus=max(0, in_use - ready.get(name, 0)),
    )


def _machine_shapes(
    machines: list[InstanceType], requirements: list[Mapping[str, Any]], labels: Mapping[str, str]
) -> list[int]:
    """GPUs per machine a NodePool launches, largest first: from its known instance types, else its
    GPU-count requirement or label (empty: unknown)."""
    shapes = sorted({m.gpus for m in machines}, reverse=True)
    if shapes:
        return shapes
    counts = _in_values(requirements, KARPENTER_GPU_COUNT_LABEL)
    if counts is None and GFD_COUNT_LABEL in labels:
        counts = [labels[GFD_COUNT_LABEL]]
    return sorted({int(c) for c in counts or [] if str(c).isdigit() and int(c) > 0}, reverse=True)


def _matches(node: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def node_group_label_keys(document: Mapping[str, Any] | None) -> frozenset[str]:
    """The label keys the node-groups file's nodeSelectors name (nodes are counted by them)."""
    groups = (document or {}).get("nodeGroups")
    keys: set[str] = set()
    for group in groups if isinstance(groups, list) else []:
        selector = group.get("nodeSelector") if isinstance(group, Mapping) else None
        if isinstance(selector, Mapping):
            keys.update(str(k) for k in selector)
    return frozenset(keys)


def parse_node_groups(
    document: Mapping[str, Any] | None, nodes: Sequence[Mapping[str, Any]] = ()
) -> tuple[ElasticPool, ...]:
    """The node-groups file (see module docstring) -> elastic pools; headroom from present nodes."""
    if not document:
        return ()
    groups = document.get("nodeGroups")
    if not isinstance(groups, list):
        raise NodeGroupsError(
            "nodeGroups must be a list of {name, gpuProduct, gpusPerNode, maxNodes, nodeSelector}"
        )
    pools: list[ElasticPool] = []
    for i, group in enumerate(groups):
        where = f"nodeGroups[{i}]"
        if not isinstance(group, Mapping):
            raise NodeGroupsError(f"{where} must be a mapping")
        name = str(group.get("name") or "")
        if not name:
            raise NodeGroupsError(f"{where}.name is required")
        try:
            gpu = find_gpu(str(group.get("gpuProduct") or ""))
        except CatalogError as exc:
            raise NodeGroupsError(f"{where}.gpuProduct: {exc}") from None
        per_node, max_nodes = group.get("gpusPerNode"), group.get("maxNodes")
        if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
            raise NodeGroupsError(f"{where}.gpusPerNode must be a whole number >= 1, got {per_node!r}")
        if not isinstance(max_nodes, int) or isinstance(max_nodes, bool) or max_nodes < 0:
            raise NodeGroupsError(f"{where}.maxNodes must be a whole number >= 0, got {max_nodes!r}")
        selector = group.get("nodeSelector") or {}
        if not isinstance(selector, Mapping) or not selector:
            raise NodeGroupsError(
                f"{where}.nodeSelector must name the labels the group's nodes carry, "
                "e.g. {cloud.google.com/gke-nodepool: NAME}"
            )
        selector = {str(k): str(v) for k, v in selector.items()}
        present = sum(1 for n in nodes if _matches(n, selector))
        labelled, key, value = gpu_from_labels(selector)
        pin = ((key, value),) if labelled is not None else tuple(sorted(selector.items()))[:1]
        pools.append(
            ElasticPool(
                name=f"node group {name}",
                gpu_product=gpu.name,
                node_selector=pin,
                machine_gpus=(per_node,),
                headroom_gpus=max(0, max_nodes - present) * per_node,
                limit_note=f"maxNodes {max_nodes}, {present} present",
            )
        )
    return tuple(pools)


def new_machines(pool: ElasticPool, gpus_wanted: int) -> list[int]:
    """GPUs per machine of the machines the pool would add, largest first, within its headroom.

    Bounded pools: the largest shape that still fits the remaining headroom, repeatedly (Karpenter
    skips instance types that would exceed a limit). Unbounded pools: enough of the largest shape
    for ``gpus_wanted`` GPUs.
    """
    if not pool.machine_gpus:
        return []
    if pool.headroom_gpus is None:
        return [pool.largest_machine_gpus] * max(0, math.ceil(gpus_wanted / pool.largest_machine_gpus))
    out: list[int] = []
    left = pool.headroom_gpus
    while True:
        fitting = [g for g in pool.machine_gpus if g <= left]
        if not fitting:
            return out
        out.append(fitting[0])
        left -= fitting[0]
