"""Why nothing fits on a GPU type, with the smallest fix: a shorter context, another shape, more nodes
(pure)."""

from __future__ import annotations

import math
from dataclasses import replace

from glm_operator.catalog.gpus import GFD_PRODUCT_LABEL, GpuType, load_gpus
from glm_operator.catalog.models import ResolvedModel
from glm_operator.planning.memory.explain import max_context_for
from glm_operator.planning.memory.instance import (
    FitResult,
)
from glm_operator.planning.placement.candidates import (
    Evaluated,
    best_failure,
    choose_first_fit,
    describe_failure,
    shape_text,
)
from glm_operator.planning.placement.fixes import Fix, cheapest_on
from glm_operator.planning.placement.groups import Group
from glm_operator.planning.placement.request import (
    PlacementRequest,
)
from glm_operator.planning.placement.result import Rejection


def _newer_gpu_rejection(base: ResolvedModel, gpu: GpuType) -> Rejection:
    """A DSA/hybrid model on a GPU older than its kernels need, with the GPU types that have them."""
    newer = [g.name for g in load_gpus() if g.compute_capability >= base.min_compute_capability]
    return Rejection(
        gpu.name,
        f"{base.name} needs vLLM's sparse-MLA (DSA) kernels, available from compute capability "
        f"{base.min_compute_capability:.1f}; {gpu.name} is {gpu.compute_capability:.1f}. fix: "
        f"gpu.products with GPU types of compute capability {base.min_compute_capability:.1f} or newer "
        f"({', '.join(newer[:4])})",
    )


def _context_fixes(
    request: PlacementRequest, base: ResolvedModel, fit: FitResult, context: int
) -> tuple[list[str], int | None]:
    """The context (or minConcurrency) the best failed shape would hold, and the longest sequence
    it holds once (None when its weights leave no KV cache)."""
    fixes: list[str] = []
    if fit.available_kv_cache_gib_per_gpu <= 0:
        return fixes, None
    once = min(max_context_for(fit, 1.0), base.max_context)
    at_min = min(max_context_for(fit, max(request.min_concurrency, 1e-9)), base.max_context)
    if once < context:
        fixes.append(f"contextLength <= {once} (the longest sequence it holds even once)")
    if request.min_concurrency > 1 and at_min >= 1:
        fixes.append(f"contextLength <= {at_min} for minConcurrency {request.min_concurrency:g}")
    if fit.max_concurrency >= 1 and request.min_concurrency > fit.max_concurrency:
        fixes.append(f"or minConcurrency <= {math.floor(fit.max_concurrency * 100) / 100:g}")
    return fixes, once


def _shape_fixes(request: PlacementRequest, base: ResolvedModel, group: Group, context: int) -> list[str]:
    """The multi-node shape or the quantization that would fit where the request rules them out."""
    fixes: list[str] = []
    if not (request.allow_multi_node or request.pipeline_parallel_size > 1) and len(group.pools) > 1:
        multi, _, _ = choose_first_fit(request, base, group, context, multi_node=True)
        if multi is not None:
            c = multi.candidate
            fixes.append(
                f"gpu.allowMultiNode: true would fit with {shape_text(c)} {c.quantization} over {c.pp} nodes"
            )
    if request.quantization != "auto":
        auto_req = _replace_quantization(request, "auto")
        alt, _, _ = choose_first_fit(auto_req, base, group, context, multi_node=False)
        if alt is not None and alt.candidate.quantization != request.quantization:
            fixes.append(
                f"quantization {alt.candidate.quantization} would fit at {shape_text(alt.candidate)}"
            )
    return fixes


def reject_group(
    request: PlacementRequest,
    base: ResolvedModel,
    group: Group,
    context: int,
    tried: list[Evaluated],
    notes: list[str],
) -> Rejection:
    """Why nothing fits on a group, from its best failed candidate, with the smallest fixes."""
    gpu = group.gpu
    if needs_newer_gpu(base, gpu):
        return _newer_gpu_rejection(base, gpu)
    if not tried:
        why = "; ".join(notes) or _no_shape(request, gpu)
        return Rejection(gpu.name, f"no valid shape on {gpu.name}: {why}")
    best = best_failure(tried)
    if best is None or best.fit is None:
        errors = sorted({t.error or "" for t in tried})
        fix = (
            "fix: quantization auto and gpu.tensorParallelSize 0 (the planner chooses), or gpu.products "
            f"with more memory per GPU than {gpu.name}'s {gpu.memory_gib:g} GiB"
        )
        return Rejection(gpu.name, f"no valid shape on {gpu.name}: {'; '.join(errors)}. {fix}")
    fixes, max_ctx = _context_fixes(request, base, best.fit, context)
    fixes += _shape_fixes(request, base, group, context)
    if not fixes:  # the weights alone do not fit, at every precision and split tried
        fixes.append(
            f"gpu.products with more GPU memory per node than {group.max_gpus_per_node} x "
            f"{gpu.memory_gib:g} GiB of {gpu.name}"
            + ("" if request.quantization == "auto" else ", quantization auto (a lower precision)")
            + ("" if request.allow_multi_node else ", or gpu.allowMultiNode: true with more nodes")
        )
    parts = [f"nothing fits on {gpu.name}; best is {describe_failure(best, context)}"]
    parts.append("fix: " + "; ".join(fixes))
    return Rejection(gpu.name, ". ".join(parts), max_ctx)


def _no_shape(request: PlacementRequest, gpu: GpuType) -> str:
    """Why no candidate shape was tried on ``gpu`` (no notes), and the fix."""
    if request.pipeline_parallel_size > 1:
        return (
            f"gpu.pipelineParallelSize {request.pipeline_parallel_size} needs as many {gpu.name} nodes with "
            f"room for a stage. fix: a smaller gpu.pipelineParallelSize (0 lets the planner choose), or "
            f"more {gpu.name} nodes"
        )
    return (
        f"no tensor-parallel size or quantization {request.quantization} runs on {gpu.name} within one node. "
        "fix: quantization auto and gpu.tensorParallelSize 0 (the planner chooses), or gpu.products with "
        "another GPU type"
    )


def _replace_quantization(request: PlacementRequest, quantization: str) -> PlacementRequest:
    return replace(request, quantization=quantization)


def needs_newer_gpu(base: ResolvedModel, gpu: GpuType) -> bool:
    """Sparse-MLA (DSA) and hybrid models need kernels a GPU older than the model's minimum lacks."""
    return (
        base.architecture.attention in ("mla+dsa", "hybrid")
        and gpu.compute_capability < base.min_compute_capability
    )


def explain_nothing_planned(
    context: int, groups: list[Group], rejected: list[Rejection], details: list[str]
) -> None:
    """Details for a plan without variants: no GPU nodes, a context no type holds, every rejection."""
    if not groups and not rejected:
        details.append(
            "no schedulable GPU nodes of a known type. fix: add GPU nodes labelled by GPU Feature "
            f"Discovery ({GFD_PRODUCT_LABEL}) of a type gpu.products allows (any catalog type when "
            "it is empty), or a node pool that provides them"
        )
    holds = [r.max_context_length for r in rejected if r.max_context_length is not None]
    if holds and max(holds) < context:
        details.append(
            f"contextLength {context} cannot be held even once by any allowed GPU type. fix: "
            f"contextLength <= {max(holds)}"
        )
    if rejected:
        details.append("not planned: " + "; ".join(f"{r.gpu_product}: {r.reason}" for r in rejected))


def with_cheapest_fix(rejection: Rejection, fixes: tuple[Fix, ...]) -> Rejection:
    """A rejected type's reason, ending with the cheapest change that plans on that type."""
    fix = cheapest_on(fixes, rejection.gpu_product)
    if fix is None:
        return rejection
    return replace(
        rejection, reason=f"{rejection.reason}. Cheapest on {rejection.gpu_product}: {fix.short()}"
    )
