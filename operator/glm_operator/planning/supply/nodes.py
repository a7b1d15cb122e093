"""Kubernetes Node dicts -> GPU pools (pure).

A *pool* is one GPU type on one node: its count, how a pod requests it (the extended resource name) and
how a pod is pinned to that type (a nodeSelector label, or the per-type resource itself on mixed
machines). Unready and cordoned nodes count only where held through an outage, and then only with the
GPUs the deployment's own pods hold there. Work is O(nodes) once per list of Node dicts, then O(nodes in
``gpus_used``) per call. docs/planning.md ("Where the GPUs come from") has the label order.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from glm_operator.catalog.estimated_gpus import estimate_gpu
from glm_operator.catalog.gpus import (
    GFD_PRODUCT_LABEL,
    GPU_RESOURCE,
    NVIDIA_RESOURCE_PREFIX,
    GpuType,
    gpu_from_labels,
    gpu_from_resource_name,
)

# Node label keys placement reads (by prefix): the GPU type and size (GPU Feature Discovery, GKE,
# EKS, Karpenter's well-known labels) and the node pool a node belongs to (Karpenter, GKE). The
# keys of the node-groups file's nodeSelectors are added by the caller (supply.pools). Other
# labels (kubelet's and the controller-manager's beta.kubernetes.io/*, topology, NFD features,
# users' own) never change a plan, so a node cache can drop them and need not re-plan on them.
PLACEMENT_LABEL_PREFIXES = (
    NVIDIA_RESOURCE_PREFIX,
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "cloud.google.com/",
    "k8s.amazonaws.com/",
)


def placement_labels(labels: Mapping[str, Any], extra_keys: frozenset[str] = frozenset()) -> dict[str, str]:
    """The node labels placement reads: keys under PLACEMENT_LABEL_PREFIXES, and ``extra_keys``."""
    return {
        str(k): str(v)
        for k, v in labels.items()
        if str(k).startswith(PLACEMENT_LABEL_PREFIXES) or k in extra_keys
    }


GroupKey = tuple[str, str, tuple[tuple[str, str], ...]]  # GPU type, resource, nodeSelector


@dataclass(frozen=True, slots=True)
class GpuPool:
    """GPUs of one type on one node."""

    node_name: str
    gpu_product: str  # catalog GPU name; "" when the node's GPU is not in the catalog
    product_label: str  # the raw label value or resource name that identified it
    gpu_count: int
    resource_name: str = GPU_RESOURCE
    node_selector: tuple[tuple[str, str], ...] = field(default=())
    gpus_used: int = 0
    held_gpus: int | None = None  # node in an outage grace period: only these (own pods') GPUs count
    estimated: GpuType | None = None  # not in the catalog: sized from the node's labels
    unknown_reason: str = ""  # not in the catalog and not estimable: why
    elastic_pool: str = ""  # a node a node autoscaler can add (supply.capacity), not one that exists
    # Derived from the fields above when the pool is made: a node set's pools are shared by every
    # plan until a node changes (see _NodeSet), so placement's grouping and counting read these
    # instead of recomputing them on each plan. Slots: a thousand pools per node set stay small.
    group_key: GroupKey = field(init=False, repr=False, compare=False)  # one candidate variant
    capacity_key: tuple[int, int, bool] = field(init=False, repr=False, compare=False)
    # (gpus_free_when_available, gpus_free, on a node an autoscaler would add)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_key", (self.gpu_product, self.resource_name, self.node_selector))
        object.__setattr__(
            self, "capacity_key", (self.gpus_free_when_available, self.gpus_free, bool(self.elastic_pool))
        )

    @property
    def gpus_free(self) -> int:
        """GPUs new or kept replicas can use now."""
        if self.held_gpus is not None:
            return min(self.held_gpus, self.gpu_count)
        return self.gpus_free_when_available

    @property
    def gpus_free_when_available(self) -> int:
        """GPUs free once the node is available again (for ordering: an outage must not reorder)."""
        return max(0, self.gpu_count - self.gpus_used)


def _quantity(value: Any) -> int:
    """Integer extended-resource quantity ('8', 8, '8000m' is not used for GPUs)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _node_items(nodes: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    if isinstance(nodes, Mapping):
        if nodes.get("kind") == "Node":
            return [nodes]
        items = nodes.get("items")
        return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []
    return nodes


def _is_schedulable(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return True


def _pools_of(node: Mapping[str, Any]) -> tuple[GpuPool, ...]:
    """The pools of one node as if nothing used its GPUs (no usage, no outage)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    pools: list[GpuPool] = []
    for resource, raw in allocatable.items():
        if not resource.startswith(NVIDIA_RESOURCE_PREFIX):
            continue
        count = _quantity(raw)
        if count <= 0:
            continue
        if resource == GPU_RESOURCE:
            gpu, key, value = gpu_from_labels(labels)
            estimated, why = (None, "")
            if gpu is None and value:
                estimated, why = estimate_gpu(value, labels)
            elif gpu is None:
                why = (
                    f"the node has {GPU_RESOURCE} but no GPU product label; label it with GPU Feature "
                    f"Discovery ({GFD_PRODUCT_LABEL}), or list the catalog types of other nodes in "
                    "gpu.products"
                )
            known = gpu or estimated
            pools.append(
                GpuPool(
                    node_name=name,
                    gpu_product=known.name if known else "",
                    product_label=value,
                    gpu_count=count,
                    resource_name=resource,
                    node_selector=((key, value),) if known and key else (),
                    estimated=estimated,
                    unknown_reason=why if known is None else "",
                )
            )
            continue
        typed = gpu_from_resource_name(resource)
        if typed is None:
            continue  # MIG slices and other nvidia.com/* resources are not whole GPUs we plan on
        pools.append(
            GpuPool(
                node_name=name,
                gpu_product=typed.name,
                product_label=resource,
                gpu_count=count,
                resource_name=resource,
                node_selector=(),
            )
        )
    return tuple(pools)


# Node dict identity -> (the dict, its schedulability, its pools). The operator's node cache
# replaces a node's dict when the node changes and hands the planner the same dicts otherwise,
# so a changed node set re-reads 1,000 nodes in ~1 ms instead of parsing their labels again (30 ms).
# The entry keeps the dict alive, so its id cannot be reused while the entry exists.
_NODE_MEMO: dict[int, tuple[Mapping[str, Any], bool, tuple[GpuPool, ...]]] = {}
_NODE_MEMO_SLACK = 1024  # entries beyond twice the nodes of a call before the memo is emptied


def _node_facts(node: Mapping[str, Any]) -> tuple[bool, tuple[GpuPool, ...]]:
    hit = _NODE_MEMO.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1], hit[2]
    facts = (_is_schedulable(node), _pools_of(node))
    _NODE_MEMO[id(node)] = (node, *facts)
    return facts


class _NodeSet:
    """One list of Node dicts read once: the pools of its available nodes as if nothing used
    their GPUs (in node order), where each node's pools sit in that tuple, and the nodes that
    are not available. Reconciles between two node changes see the same list of dicts, so they
    share one of these and only overlay their GPU usage (``parse_gpu_pools``)."""

    def __init__(self, nodes: list[Mapping[str, Any]]) -> None:
        self.nodes = list(nodes)
        pools: list[GpuPool] = []
        positions: dict[str, tuple[int, ...]] = {}
        unavailable: list[Mapping[str, Any]] = []
        for node in nodes:
            schedulable, node_pools = _node_facts(node)
            if not schedulable:
                unavailable.append(node)
            elif node_pools:
                start = len(pools)
                pools.extend(node_pools)
                at = (start,) if len(node_pools) == 1 else tuple(range(start, len(pools)))
                name = node_pools[0].node_name
                positions[name] = positions[name] + at if name in positions else at
        self.available = tuple(pools)
        self.positions = positions
        self.unavailable = tuple(unavailable)
        # (position in ``available``, GPUs used) -> that pool with its usage: a node's usage
        # changes rarely between reconciles, so its pool object (and what placement derives
        # from it) is reused. Bounded: emptied past _USAGE_MEMO_FACTOR entries per pool.
        self._with_usage: dict[tuple[int, int], GpuPool] = {}

    @functools.cached_property
    def groups(self) -> _GroupLayout:
        """``available`` grouped (positions per group): the same for every overlay of usage."""
        return _group_layout(self.available)

    def pool_with_usage(self, at: int, gpus_used: int) -> GpuPool:
        """The pool at position ``at`` of ``available`` with ``gpus_used`` GPUs in use."""
        key = (at, gpus_used)
        pool = self._with_usage.get(key)
        if pool is None:
            if len(self._with_usage) > _USAGE_MEMO_FACTOR * len(self.available) + _NODE_MEMO_SLACK:
                self._with_usage.clear()
            pool = replace(self.available[at], gpus_used=gpus_used)
            self._with_usage[key] = pool
        return pool


# The last few node sets read, newest last, so planning threads still working on the previous
# node set do not evict the current one. A list of Node dicts matches one when it holds the same
# dicts in the same order: ``==`` on two lists checks identity before value, so the usual case
# (the node cache's unchanged dicts) costs microseconds, and a list that differs stops at the
# first node that differs.
_NODE_SETS: list[_NodeSet] = []
_NODE_SETS_KEPT = 2
_USAGE_MEMO_FACTOR = 4
_NODE_SETS_LOCK = threading.Lock()


def _node_set(items: list[Mapping[str, Any]]) -> _NodeSet:
    with _NODE_SETS_LOCK:
        for known in reversed(_NODE_SETS):
            if known.nodes == items:
                return known
    if len(_NODE_MEMO) > 2 * len(items) + _NODE_MEMO_SLACK:
        _NODE_MEMO.clear()  # entries of replaced node dicts: start again from the current ones
    built = _NodeSet(items)
    with _NODE_SETS_LOCK:
        _NODE_SETS.append(built)
        del _NODE_SETS[:-_NODE_SETS_KEPT]
    return built


# The last few tuples parse_gpu_pools returned from a node set, so group_pools can tell a tuple
# (or a tuple that starts with one: elastic pools appended) is one and use the node set's groups.
_RESULTS: list[tuple[tuple[GpuPool, ...], _NodeSet]] = []
_RESULTS_KEPT = 8


def _remember(pools: tuple[GpuPool, ...], node_set: _NodeSet) -> tuple[GpuPool, ...]:
    with _NODE_SETS_LOCK:
        _RESULTS.append((pools, node_set))
        del _RESULTS[:-_RESULTS_KEPT]
    return pools


def unavailable_nodes(nodes: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The nodes that are not Ready or are cordoned (read once per node set, like the pools)."""
    return _node_set(list(nodes)).unavailable


def parse_gpu_pools(
    nodes: Mapping[str, Any] | Iterable[Mapping[str, Any]],
    gpus_used: Mapping[str, Mapping[str, int]] | None = None,
    held: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[GpuPool, ...]:
    """GPU pools of all schedulable nodes.

    ``nodes`` is a ``v1 List`` dict (``kubectl get nodes -o yaml``), a single Node or an iterable of
    Node dicts. Nodes without GPUs produce no pool; GPUs of unknown type produce a pool with
    ``gpu_product == ""`` so the planner can say which label it did not recognise. Callers must
    not mutate a Node dict after passing it (a new dict per change, as a watch cache keeps them).

    The same list of Node dicts is read once (see ``_NodeSet``); a call then costs one lookup per
    node in ``gpus_used``, not a walk over every node. With ``held`` (an outage, rare) every node
    is walked (``walk_gpu_pools``).
    """
    items = list(_node_items(nodes))
    if held:
        return walk_gpu_pools(items, gpus_used, held)
    node_set = _node_set(items)
    if not gpus_used:
        return _remember(node_set.available, node_set)
    base, positions = node_set.available, node_set.positions
    pools = list(base)
    for name, node_used in gpus_used.items():
        for at in positions.get(name, ()):
            used = node_used.get(base[at].resource_name)
            if used:  # none used: the pool as read (equal to one with gpus_used=0)
                pools[at] = node_set.pool_with_usage(at, int(used))
    return _remember(tuple(pools), node_set)


def walk_gpu_pools(
    nodes: Iterable[Mapping[str, Any]],
    gpus_used: Mapping[str, Mapping[str, int]] | None = None,
    held: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[GpuPool, ...]:
    """``parse_gpu_pools`` by walking every node (its definition; the tests compare the two)."""
    used = gpus_used or {}
    held = held or {}
    pools: list[GpuPool] = []
    for node in nodes:
        schedulable, node_pools = _node_facts(node)
        if not node_pools:
            continue
        name = node_pools[0].node_name
        node_held = held.get(name) if not schedulable else None
        if not schedulable and node_held is None:
            continue
        node_used = used.get(name)
        if node_used is None and node_held is None:
            pools.extend(node_pools)
            continue
        for pool in node_pools:
            pools.append(
                replace(
                    pool,
                    gpus_used=int((node_used or {}).get(pool.resource_name, 0)),
                    held_gpus=None if node_held is None else int(node_held.get(pool.resource_name, 0)),
                )
            )
    return tuple(pools)


@dataclass(frozen=True)
class PoolGroups:
    """Pools as placement reads them, each part in order of first appearance."""

    groups: tuple[tuple[GroupKey, tuple[GpuPool, ...]], ...]  # pools of a known or estimated type
    unknown: tuple[tuple[tuple[str, str], tuple[str, ...]], ...]  # (label, why) -> node names
    estimated: tuple[tuple[str, GpuType], ...]  # GPU name -> the first node's estimate


@dataclass(frozen=True)
class _GroupLayout:
    positions: tuple[tuple[GroupKey, tuple[int, ...]], ...]
    unknown: tuple[tuple[tuple[str, str], tuple[str, ...]], ...]
    estimated: tuple[tuple[str, GpuType], ...]


def _group_layout(pools: Sequence[GpuPool]) -> _GroupLayout:
    positions: dict[GroupKey, list[int]] = {}
    unknown: dict[tuple[str, str], list[str]] = {}
    estimated: dict[str, GpuType] = {}
    for at, pool in enumerate(pools):
        if not pool.gpu_product:
            label = pool.product_label or "(no GPU product label)"
            unknown.setdefault((label, pool.unknown_reason), []).append(pool.node_name)
            continue
        if pool.estimated is not None:
            estimated.setdefault(pool.gpu_product, pool.estimated)
        positions.setdefault(pool.group_key, []).append(at)
    return _GroupLayout(
        tuple((key, tuple(at)) for key, at in positions.items()),
        tuple((key, tuple(names)) for key, names in unknown.items()),
        tuple(estimated.items()),
    )


def _take(pools: Sequence[GpuPool], positions: tuple[int, ...]) -> tuple[GpuPool, ...]:
    if len(positions) == 1:
        return (pools[positions[0]],)
    picked: tuple[GpuPool, ...] = operator.itemgetter(*positions)(pools)
    return picked


def _known_prefix(pools: tuple[GpuPool, ...]) -> tuple[int, _NodeSet] | None:
    """Length of the start of ``pools`` that a recent parse_gpu_pools result is, and its node set."""
    with _NODE_SETS_LOCK:
        recent = list(reversed(_RESULTS))
    for result, node_set in recent:
        n = len(result)
        if pools is result:
            return n, node_set
        same_ends = n and len(pools) >= n and pools[0] is result[0] and pools[n - 1] is result[n - 1]
        if same_ends and pools[:n] == result:
            return n, node_set
    return None


def group_pools(pools: tuple[GpuPool, ...]) -> PoolGroups:
    """Group pools by ``group_key`` (GPU type, resource, nodeSelector), collect the node names of
    unknown GPU types by (label, reason) and the first estimate of each estimated type.

    A tuple parse_gpu_pools returned (usage overlays keep every pool's group) is grouped from its
    node set's positions, computed once per node set; pools after it (elastic) are walked."""
    known = _known_prefix(pools)
    start, layout = (len(pools), _group_layout(pools)) if known is None else (known[0], known[1].groups)
    groups = {key: _take(pools, at) for key, at in layout.positions}
    unknown = dict(layout.unknown)
    estimated = dict(layout.estimated)
    if start < len(pools):
        rest = _group_layout(pools[start:])
        for key, at in rest.positions:
            groups[key] = groups.get(key, ()) + _take(pools[start:], at)
        for why, names in rest.unknown:
            unknown[why] = unknown.get(why, ()) + names
        for name, gpu in rest.estimated:
            estimated.setdefault(name, gpu)
    return PoolGroups(tuple(groups.items()), tuple(unknown.items()), tuple(estimated.items()))
