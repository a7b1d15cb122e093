"""The GPU pools grouped into candidate variants, filtered and ordered by ``gpu.products`` (pure).

A group is one GPU type behind one resource name and node selector: GPU types are never mixed inside
a replica. A group counts the replicas of a shape its free GPUs hold, with nodes a node autoscaler
can add and nodes in an outage grace period told apart.
"""

from __future__ import annotations

import bisect
import collections
import functools
import operator
from dataclasses import dataclass

from glm_operator.catalog.gpus import GpuType, find_gpu
from glm_operator.planning.placement.product_filter import allowed_products
from glm_operator.planning.placement.request import (
    PlacementRequest,
)
from glm_operator.planning.placement.result import Rejection
from glm_operator.planning.supply.nodes import GpuPool, PoolGroups

_CAPACITY_KEY = operator.attrgetter("capacity_key")

_GPU_COUNT = operator.attrgetter("gpu_count")


@dataclass(frozen=True)
class Group:
    gpu: GpuType
    resource_name: str
    node_selector: tuple[tuple[str, str], ...]
    pools: tuple[GpuPool, ...]

    @property
    def max_gpus_per_node(self) -> int:
        return self._sorted_counts[-1]

    @functools.cached_property
    def _free_counts(self) -> dict[tuple[bool, bool], tuple[tuple[int, int], ...]]:
        """(when_available, existing nodes only) -> (free GPUs, pools with that many) pairs: a
        thousand identical nodes are a handful of pairs, so capacity() need not walk every pool.
        The pools are first counted by their ``capacity_key`` (derived once per pool object, and
        a node set's pools are shared between plans), then the few distinct keys are spread
        over the four kinds."""
        counts: dict[tuple[bool, bool], dict[int, int]] = {
            (a, e): {} for a in (False, True) for e in (False, True)
        }
        for (when_available, now, elastic), n in collections.Counter(map(_CAPACITY_KEY, self.pools)).items():
            kinds = ((False, False), (True, False)) if elastic else tuple(counts)
            for kind in kinds:
                free = when_available if kind[0] else now
                bucket = counts[kind]
                bucket[free] = bucket.get(free, 0) + n
        return {kind: tuple(bucket.items()) for kind, bucket in counts.items()}

    def _replicas(self, tp: int, pp: int, when_available: bool, existing: bool) -> int:
        return sum((f // tp) * n for f, n in self._free_counts[(when_available, existing)]) // max(1, pp)

    def capacity(self, tp: int, pp: int, when_available: bool = False) -> int:
        """Replicas of this shape the free GPUs hold; ``when_available`` counts nodes in an outage
        grace period as if they were back (used for ordering, so a short outage reorders nothing)."""
        return self._replicas(tp, pp, when_available, existing=False)

    def existing_capacity(self, tp: int, pp: int, when_available: bool = False) -> int:
        """Replicas the nodes that exist now can host (without nodes an autoscaler would add)."""
        return self._replicas(tp, pp, when_available, existing=True)

    @property
    def elastic_pools(self) -> tuple[str, ...]:
        return tuple(sorted({p.elastic_pool for p in self.pools if p.elastic_pool}))

    @functools.cached_property
    def _sorted_counts(self) -> tuple[int, ...]:
        return tuple(sorted(map(_GPU_COUNT, self.pools)))

    def nodes_with(self, tp: int) -> int:
        counts = self._sorted_counts
        return len(counts) - bisect.bisect_left(counts, tp)


def groups_of(grouped: PoolGroups, details: list[str], rejected: list[Rejection]) -> list[Group]:
    for (label, why), names in sorted(grouped.unknown):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        reason = why or f"GPU type {label!r} is not in the catalog"
        details.append(f"{reason}; not used: {shown}")
        rejected.append(Rejection(label, f"{reason} (nodes {shown})"))
    for name, gpu in sorted(grouped.estimated):
        details.append(f"{name}: {gpu.memory_source}")
    estimated = dict(grouped.estimated)
    return [
        Group(estimated.get(product) or find_gpu(product), resource, selector, group)
        for (product, resource, selector), group in grouped.groups
    ]


def resolve_products(request: PlacementRequest, grouped: PoolGroups) -> list[str]:
    """``gpu.products`` resolved against the catalog and the estimated GPU types on the nodes."""
    # Both walk every pool, and find something only if grouping found an estimated or unknown GPU
    # type (it files a pool without gpu_product as unknown, one with an estimate and a name as
    # estimated); a cluster of catalog GPUs has neither: skip the two walks then.
    if not (grouped.estimated or grouped.unknown):
        return allowed_products(request.gpu_products, set(), {})
    return allowed_products(
        request.gpu_products,
        {p.gpu_product for p in request.pools if p.estimated is not None},
        {
            p.product_label: p.unknown_reason or f"GPU type {p.product_label!r} is not in the catalog"
            for p in request.pools
            if not p.gpu_product and p.product_label
        },
    )


def filter_by_products(
    allowed: list[str], groups: list[Group], details: list[str], rejected: list[Rejection]
) -> tuple[list[Group], dict[str, int]]:
    """The groups ``gpu.products`` allows and its preference order (empty: any type, no order);
    allowed types no node has are rejected with the fix."""
    if not allowed:
        return groups, {}
    order = {name: i for i, name in enumerate(allowed)}
    present = {g.gpu.name for g in groups}
    for name in allowed:
        if name not in present:
            rejected.append(
                Rejection(
                    name,
                    f"no schedulable node has {name} GPUs. fix: add {name} nodes (or a node pool that "
                    "provides them), or list the GPU types the cluster has in gpu.products",
                )
            )
    skipped = sorted({g.gpu.name for g in groups if g.gpu.name not in order})
    if skipped:
        details.append(f"not in gpu.products, not used: {', '.join(skipped)}")
    return [g for g in groups if g.gpu.name in order], order
