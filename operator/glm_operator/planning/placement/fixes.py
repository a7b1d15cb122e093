"""The cheapest changes that would make a rejected plan fit (pure).

When nothing fits, ``all_fixes`` plans the request again with what the user ruled out relaxed (another
GPU type, multi-node and more nodes, a lower precision), alone and combined, and keeps those that fit,
cheapest first and one per kind of change. A fix is never text alone: it is a plan that succeeded, with
the shape it gets. docs/planning.md ("When nothing fits") has the relaxations, the order and the cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Protocol

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import CatalogError
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.placement.request import PlacementRequest, PlanningInputError
from glm_operator.planning.supply.nodes import GpuPool

MAX_FIXES = 5
LOWER_PRECISIONS = {
    "bf16": ("fp8", "int8", "int4"),
    "fp16": ("fp8", "int8", "int4"),
    "fp8": ("int8", "int4"),
    "int8": ("int4",),
}
HYPOTHETICAL_NODE = "(hypothetical node "  # node names of the extra nodes a fix counts


@dataclass(frozen=True)
class Fix:
    """A change to the spec (and, where ``extra_nodes``, to the cluster) that makes the plan fit,
    with the variant it would get."""

    changes: tuple[str, ...]  # in words, one per changed field
    spec_patch: Mapping[str, Any]  # the changed spec fields, camelCase (``gpu`` is a nested mapping)
    gpu_product: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    nodes_per_replica: int
    quantization: str
    model_id: str
    max_concurrency: float
    context_length: int
    capacity_replicas: int  # replicas of this shape the free GPUs hold (0 when nodes must be added)
    gpu_memory_gib: float  # of one GPU of this type
    extra_nodes: int = 0  # nodes of gpu_product to add to the cluster, like its largest one
    gpus_per_node: int = 0  # of those nodes
    keys: frozenset[str] = field(default=frozenset(), compare=False)  # which relaxations, for pruning

    @property
    def cost(self) -> tuple[bool, int, int, float, int]:
        return (
            self.extra_nodes > 0,
            self.gpus_per_replica,
            self.nodes_per_replica,
            self.gpus_per_replica * self.gpu_memory_gib,
            len(self.keys),
        )

    @property
    def kinds(self) -> frozenset[str]:
        """Which fields change: ``products`` (whichever type), ``multinode``, ``nodes`` and the precision
        (``quantization:fp8``: fp8 and int4 are different trade-offs, both worth naming)."""
        return frozenset(k if k.startswith("quantization:") else k.split(":")[0] for k in self.keys)

    def describe(self) -> str:
        shape = f"TP={self.tensor_parallel_size}" + (
            f" x PP={self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else ""
        )
        where = f"{self.gpus_per_replica} {self.gpu_product}" + (
            f" over {self.nodes_per_replica} nodes" if self.nodes_per_replica > 1 else ""
        )
        room = (
            f"the cluster has room for {self.capacity_replicas} replica(s)"
            if self.capacity_replicas
            else "no free GPUs for it now"
        )
        return (
            f"{' and '.join(self.changes)}: {shape} {self.quantization} on {where} per replica, "
            f"{self.max_concurrency:.2f} concurrent {self.context_length}-token sequences, serving "
            f"{self.model_id}; {room}"
        )

    def short(self) -> str:
        """The changes and the shape they give, without the figures of ``describe``."""
        nodes = f" over {self.nodes_per_replica} nodes" if self.nodes_per_replica > 1 else ""
        return (
            f"{' and '.join(self.changes)} plans TP={self.tensor_parallel_size}"
            + (f" x PP={self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else "")
            + f" {self.quantization} on {self.gpus_per_replica} {self.gpu_product}{nodes}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": list(self.changes),
            "spec_patch": _plain(self.spec_patch),
            "gpu_product": self.gpu_product,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpus_per_replica": self.gpus_per_replica,
            "nodes_per_replica": self.nodes_per_replica,
            "quantization": self.quantization,
            "model_id": self.model_id,
            "max_concurrency": round(self.max_concurrency, 2),
            "capacity_replicas": self.capacity_replicas,
            "extra_nodes": self.extra_nodes,
            "gpus_per_node": self.gpus_per_node,
            "description": self.describe(),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class _Relaxation:
    key: str  # "" for the request as it is
    words: str
    patch: Mapping[str, Any]  # of the spec
    request_changes: Mapping[str, Any]  # of the PlacementRequest
    hypothetical_nodes: bool = False


_AS_IS = _Relaxation("", "", {}, {})


def _known_type(pool: GpuPool) -> str | None:
    return pool.gpu_product or None


def _product_relaxations(request: PlacementRequest, allowed: frozenset[str]) -> list[_Relaxation]:
    """One per GPU type the pools have that ``gpu.products`` leaves out (none when it is empty)."""
    if not request.gpu_products:
        return []
    excluded = sorted({p for pool in request.pools if (p := _known_type(pool)) and p not in allowed})
    out = []
    for name in excluded:
        products = (*request.gpu_products, name)
        out.append(
            _Relaxation(
                f"products:{name}",
                f"gpu.products: [{', '.join(products)}]",
                {"gpu": {"products": list(products)}},
                {"gpu_products": products},
            )
        )
    return out


def _multi_node_relaxations(request: PlacementRequest) -> list[_Relaxation]:
    if request.allow_multi_node or request.pipeline_parallel_size > 1:
        return []
    words, patch = "gpu.allowMultiNode: true", {"gpu": {"allowMultiNode": True}}
    changes = {"allow_multi_node": True}
    return [
        _Relaxation("multinode", words, patch, changes),
        _Relaxation("multinode", words, patch, changes, hypothetical_nodes=True),
    ]


def _precision_relaxations(request: PlacementRequest) -> list[_Relaxation]:
    if request.quantization == "auto" and request.allowed_quantizations:
        # auto under spec.allowedQuantizations: name the precision that would fit, added to the list
        out = []
        for q in ("fp8", "int8", "int4"):
            if q in request.allowed_quantizations:
                continue
            allowed = (*request.allowed_quantizations, q)
            out.append(
                _Relaxation(
                    f"quantization:{q}",
                    f"allowedQuantizations: [{', '.join(allowed)}]",
                    {"allowedQuantizations": list(allowed)},
                    {"allowed_quantizations": allowed},
                )
            )
        return out
    return [
        _Relaxation(
            f"quantization:{q}",
            f"quantization: {q}",
            {"quantization": q},
            {"quantization": q},
        )
        for q in LOWER_PRECISIONS.get(request.quantization, ())
    ]


def _with_hypothetical_nodes(pools: tuple[GpuPool, ...], max_nodes: int) -> tuple[GpuPool, ...]:
    """The pools plus, per GPU type and resource, empty nodes like its largest one, so that each type
    has ``max_nodes`` nodes: the plan then says how many one replica needs."""
    largest: dict[tuple[str, str], GpuPool] = {}
    counts: dict[tuple[str, str], int] = {}
    for pool in pools:
        if not pool.gpu_product or pool.elastic_pool:
            continue
        key = (pool.gpu_product, pool.resource_name)
        counts[key] = counts.get(key, 0) + 1
        if key not in largest or pool.gpu_count > largest[key].gpu_count:
            largest[key] = pool
    extra = []
    for key, pool in sorted(largest.items()):
        for i in range(max(0, max_nodes - counts[key])):
            extra.append(
                dataclasses.replace(
                    pool, node_name=f"{HYPOTHETICAL_NODE}{i + 1})", gpus_used=0, held_gpus=None
                )
            )
    return (*pools, *extra)


def _merge(patches: list[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for patch in patches:
        for k, v in patch.items():
            if isinstance(v, Mapping):
                out[k] = {**out.get(k, {}), **v}
            else:
                out[k] = v
    return out


class PlannedVariant(Protocol):
    """What a fix reads of a variant the planner chose (``placement.Variant``; a protocol, so this
    module does not import the planner that calls it)."""

    @property
    def gpu_product(self) -> str: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def pipeline_parallel_size(self) -> int: ...
    @property
    def gpus_per_replica(self) -> int: ...
    @property
    def nodes_per_replica(self) -> int: ...
    @property
    def quantization(self) -> str: ...
    @property
    def model_id(self) -> str: ...
    @property
    def max_concurrency(self) -> float: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def capacity_replicas(self) -> int: ...


def _fixes_from(
    variants: Sequence[PlannedVariant],
    request: PlacementRequest,
    relaxations: tuple[_Relaxation, ...],
    hypothetical: bool,
) -> list[Fix]:
    """The fixes a plan of a relaxed request stands for: one per variant it got (with another GPU
    type allowed, only that type's: the others would fit without it)."""
    added = {
        r.request_changes["gpu_products"][-1] for r in relaxations if "gpu_products" in r.request_changes
    }
    return [
        fix
        for v in variants
        if not added or v.gpu_product in added
        if (fix := _fix_for(v, request, relaxations, hypothetical)) is not None
    ]


def _fix_for(
    v: PlannedVariant, request: PlacementRequest, relaxations: tuple[_Relaxation, ...], hypothetical: bool
) -> Fix | None:
    try:
        memory = find_gpu(v.gpu_product).memory_gib
    except CatalogError:
        memory = 0.0
    per_node = max((p.gpu_count for p in request.pools if p.gpu_product == v.gpu_product), default=0)
    real_nodes = len(
        {
            p.node_name
            for p in request.pools
            if p.gpu_product == v.gpu_product and not p.node_name.startswith(HYPOTHETICAL_NODE)
        }
    )
    extra = max(0, v.nodes_per_replica - real_nodes) if hypothetical else 0
    if hypothetical and extra == 0:
        return None  # the nodes there are would do: the plain multi-node relaxation says so
    changes = [r.words for r in relaxations if r.key]
    if extra:
        changes.append(
            f"{extra} more {v.gpu_product} node(s) of {per_node} GPUs ({v.nodes_per_replica} in all, "
            f"the cluster has {real_nodes})"
        )
    return Fix(
        changes=tuple(changes),
        spec_patch=_merge([r.patch for r in relaxations]),
        gpu_product=v.gpu_product,
        tensor_parallel_size=v.tensor_parallel_size,
        pipeline_parallel_size=v.pipeline_parallel_size,
        gpus_per_replica=v.gpus_per_replica,
        nodes_per_replica=v.nodes_per_replica,
        quantization=v.quantization,
        model_id=v.model_id,
        max_concurrency=v.max_concurrency,
        context_length=v.max_model_len,
        capacity_replicas=0 if extra else v.capacity_replicas,
        gpu_memory_gib=memory,
        extra_nodes=extra,
        gpus_per_node=per_node if extra else 0,
        keys=frozenset(r.key for r in relaxations if r.key) | ({"nodes"} if extra else set()),
    )


def _relaxed(request: PlacementRequest, combo: tuple[_Relaxation, ...], max_nodes: int) -> PlacementRequest:
    changes: dict[str, Any] = {}
    for r in combo:
        changes.update(r.request_changes)
    relaxed = dataclasses.replace(request, **changes)
    if any(r.hypothetical_nodes for r in combo):
        relaxed = dataclasses.replace(relaxed, pools=_with_hypothetical_nodes(relaxed.pools, max_nodes))
    return relaxed


def all_fixes(
    request: PlacementRequest,
    allowed: frozenset[str],
    plan_fn: Callable[[PlacementRequest], Sequence[PlannedVariant]],
    max_nodes: int,
) -> tuple[Fix, ...]:
    """Every relaxation that plans, cheapest first (see the module docstring).

    ``allowed``: the GPU types ``gpu.products`` resolved to; ``plan_fn``: the variants the planner
    chooses without fixes; ``max_nodes``: the most nodes per replica the planner considers."""
    fixes: list[Fix] = []
    for combo in product(
        [_AS_IS, *_product_relaxations(request, allowed)],
        [_AS_IS, *_multi_node_relaxations(request)],
        [_AS_IS, *_precision_relaxations(request)],
    ):
        if all(not r.key for r in combo):
            continue
        if any(r.hypothetical_nodes for r in combo):
            fixes += _fewest_nodes_added(request, combo, plan_fn, max_nodes)
            continue
        relaxed = _relaxed(request, combo, max_nodes)
        try:
            variants = plan_fn(relaxed)
        except (PlanningInputError, FitInputError, CatalogError):
            continue  # e.g. a pinned int4 with no int4 checkpoint of the model
        fixes += _fixes_from(variants, relaxed, combo, hypothetical=False)
    return tuple(sorted(fixes, key=lambda f: (f.cost, f.changes)))


def _fewest_nodes_added(
    request: PlacementRequest,
    combo: tuple[_Relaxation, ...],
    plan_fn: Callable[[PlacementRequest], Sequence[PlannedVariant]],
    max_nodes: int,
) -> list[Fix]:
    """Per GPU type, the fix that adds the fewest nodes. Given room, the planner spreads a replica over as
    many nodes as raise its tokens/s per GPU (more KV cache per GPU); a fix is the least that fits, so the
    cluster is grown one node per type at a time and each type keeps the first plan that needs nodes added."""
    found: dict[str, Fix] = {}
    for nodes in range(2, max_nodes + 1):
        relaxed = _relaxed(request, combo, nodes)
        try:
            variants = plan_fn(relaxed)
        except (PlanningInputError, FitInputError, CatalogError):
            return []
        for fix in _fixes_from(variants, relaxed, combo, hypothetical=True):
            found.setdefault(fix.gpu_product, fix)
    return list(found.values())


def cheapest_on(fixes: Sequence[Fix], gpu_product: str) -> Fix | None:
    """The cheapest fix that serves on ``gpu_product`` (for that type's rejection)."""
    return min(
        (f for f in fixes if f.gpu_product == gpu_product), key=lambda f: (f.cost, f.changes), default=None
    )


def shown_fixes(fixes: Sequence[Fix]) -> tuple[Fix, ...]:
    """The cheapest fix of each kind (which fields change: another GPU type, multi-node, more nodes,
    a lower precision), without a kind that a subset of its changes does as cheaply, cheapest first."""
    best: dict[frozenset[str], Fix] = {}
    for f in sorted(fixes, key=lambda f: (f.cost, f.changes)):
        best.setdefault(f.kinds, f)
    kept = [
        f
        for kinds, f in best.items()
        if not any(other < kinds and g.cost[:4] <= f.cost[:4] for other, g in best.items())
    ]
    return tuple(sorted(kept, key=lambda f: (f.cost, f.changes)))[:MAX_FIXES]
