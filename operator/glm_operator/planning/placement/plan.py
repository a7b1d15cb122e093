"""Placement: which GPU types, TP/PP, quantization and how many replicas (pure).

``plan_placement(request) -> Plan`` takes a :class:`~.request.PlacementRequest` (spec values and the GPU
pools of the nodes) and returns a frozen :class:`~.result.Plan` whose ``details`` say why each decision
was taken: candidate variants one GPU type each, the first shape that holds ``minConcurrency`` on each,
compared for goodput, replicas filling the preferred variant first, and the cheapest fixes when nothing
fits. docs/planning.md ("Placement, step by step") has the steps and the rules with their reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from glm_operator.catalog.estimated_gpus import NOT_IN_CATALOG
from glm_operator.catalog.gpus import GFD_PRODUCT_LABEL, GPU_RESOURCE, GpuType
from glm_operator.catalog.models import ResolvedModel
from glm_operator.planning.memory.instance import (
    parallelism_error,
)
from glm_operator.planning.memory.parallel import mtp_layers, supports_data_parallel_attention
from glm_operator.planning.placement.candidates import (
    MAX_PIPELINE_PARALLEL,
    PRECISION_RANK,
    Candidate,
    Evaluated,
    allowed_by_spec,
    best_failure,
    candidates_for,
    checkpoint_for,
    describe_failure,
    evaluate,
    evaluate_all,
    fits,
    has_checkpoint,
    pinned_precisions,
    resolve_request_model,
    shape_text,
)
from glm_operator.planning.placement.fixes import all_fixes, shown_fixes
from glm_operator.planning.placement.groups import Group, filter_by_products, groups_of, resolve_products
from glm_operator.planning.placement.ranking import (
    goodput_reason,
    max_num_seqs_by_kv,
    planned_seqs,
    rank,
    rank_speed,
    slo_note,
)
from glm_operator.planning.placement.rejections import (
    explain_nothing_planned,
    needs_newer_gpu,
    reject_group,
    with_cheapest_fix,
)
from glm_operator.planning.placement.request import (
    DEFAULT_CONTEXT_LENGTH,
    PlacementRequest,
    PlanningInputError,
)
from glm_operator.planning.placement.result import Considered, Plan, Rejection, Variant
from glm_operator.planning.speed.performance import (
    modelled_knee,
)
from glm_operator.planning.supply.nodes import group_pools


def _fp8_note(gpu: GpuType, quantization: str) -> str | None:
    if quantization != "fp8":
        return None
    if gpu.native_fp8:
        return None
    return (
        f"{gpu.name} (compute capability {gpu.compute_capability:g}) has no FP8 tensor cores: vLLM runs FP8 "
        "weights as weight-only W8A16 through Marlin kernels (memory saving, slower than native FP8)"
    )


@dataclass(frozen=True, eq=False)
class _Chosen:
    """A group's winning candidate and the candidates tried before it."""

    group: Group
    pick: Evaluated
    tried: list[Evaluated]
    considered: tuple[Considered, ...] = ()  # rule 3's goodput comparison; () when there was none

    def capacity(self, when_available: bool = False) -> int:
        """Replicas of the chosen shape the group's free GPUs hold (nodes autoscalers add included)."""
        cand = self.pick.candidate
        return self.group.capacity(cand.tp * cand.dp, cand.pp, when_available)

    def existing_capacity(self, when_available: bool = False) -> int:
        """Replicas of the chosen shape the nodes that exist now hold."""
        cand = self.pick.candidate
        return self.group.existing_capacity(cand.tp * cand.dp, cand.pp, when_available)


def _context_length(request: PlacementRequest, base: ResolvedModel) -> int:
    """The max_model_len to plan: spec.contextLength, else the default up to the model's limit."""
    context = request.context_length or min(DEFAULT_CONTEXT_LENGTH, base.max_context)
    if context > base.max_context:
        raise PlanningInputError(
            f"spec.contextLength {context} exceeds {base.name}'s limit of {base.max_context} tokens; "
            f"set contextLength <= {base.max_context}"
        )
    return context


def _check_pinned(request: PlacementRequest, base: ResolvedModel) -> None:
    """Refuse a pinned quantization or TP the model cannot be served with on any GPU."""
    if request.quantization in ("int8", "int4") and not has_checkpoint(base, request.quantization):
        raise PlanningInputError(
            f"spec.quantization {request.quantization}: no {request.quantization} checkpoint of {base.name} "
            f"is known and vLLM cannot quantize to {request.quantization} at load time; use fp8 (quantized "
            "on the fly) or auto, or point model.source at an AWQ/GPTQ checkpoint and give its config.json "
            "(with its quantization_config) as model.config"
        )
    ckpt = base.checkpoint_quantization
    if request.quantization == "auto" and ckpt is not None and not allowed_by_spec(request, ckpt.precision):
        raise PlanningInputError(
            f"spec.allowedQuantizations [{', '.join(request.allowed_quantizations)}]: the checkpoint "
            f"{base.model_id} is stored in {ckpt.precision}; add {ckpt.precision} to allowedQuantizations "
            "or serve the model's 16-bit checkpoint"
        )
    if request.tensor_parallel_size:
        err = parallelism_error(base.architecture, request.tensor_parallel_size)
        if err:
            raise PlanningInputError(f"spec.gpu.tensorParallelSize: {err}; use 0 to let the planner choose")
    _check_pinned_shape(request, base)


def _check_pinned_shape(request: PlacementRequest, base: ResolvedModel) -> None:
    """Refuse a pinned layout, drafter or precision the model or its pinned weights cannot be served with."""
    arch = base.architecture
    if request.data_parallel_size > 1 and not supports_data_parallel_attention(arch):
        raise PlanningInputError(
            f"spec.gpu.dataParallelSize {request.data_parallel_size}: {base.name} ({arch.attention} "
            f"attention{', MoE' if arch.is_moe else ', dense'}) has no data-parallel attention with expert "
            "parallelism in vLLM (MLA MoE models only); use 0 (the planner chooses) or 1, and replicas for "
            "more throughput"
        )
    if request.data_parallel_size > 1 and request.decode_context_parallel_size > 1:
        raise PlanningInputError(
            "spec.gpu.dataParallelSize and spec.gpu.decodeContextParallelSize are both > 1: the planner "
            "serves one or the other; set one of them to 0 or 1"
        )
    if request.speculative_mode == "On" and not mtp_layers(arch):
        raise PlanningInputError(
            f"spec.speculativeDecoding.mode On: {base.name} has no MTP layers (num_nextn_predict_layers 0"
            f"{' or a hybrid model' if arch.attention == 'hybrid' else ''}); use mode Off or Auto"
        )
    pinned = pinned_precisions(request, base)
    if pinned is not None and request.quantization != "auto" and request.quantization not in pinned:
        raise PlanningInputError(
            f"spec.quantization {request.quantization}: spec.model.source hf://{request.pinned_repo} holds "
            f"{' / '.join(sorted(pinned))} weights; use quantization {sorted(pinned)[-1]} or auto, or a "
            f"source with {request.quantization} weights"
        )


def _choose_shape(
    request: PlacementRequest, base: ResolvedModel, group: Group, context: int, details: list[str]
) -> _Chosen | Rejection:
    """The best-ranked shape that fits on one group (one node per replica first, then several where
    allowed or PP is pinned), or the group's rejection with the smallest fix."""
    gpu = group.gpu
    if needs_newer_gpu(base, gpu):
        return reject_group(request, base, group, context, [], [])
    multi_only = request.pipeline_parallel_size > 1
    evaluated, notes = ([], []) if multi_only else evaluate_all(request, base, group, context, False)
    fitting = fits(evaluated)
    if not fitting and (request.allow_multi_node or multi_only):
        more, more_notes = evaluate_all(request, base, group, context, True)
        evaluated += more
        notes += more_notes
        fitting = fits(more)
        if fitting and not multi_only:
            details.append(f"{gpu.name}: no single node fits, using several nodes per replica")
    if not fitting:
        return reject_group(request, base, group, context, evaluated, notes)
    first = next(i for i, ev in enumerate(evaluated) if ev is fitting[0])
    best, considered = rank(request, base, group, context, fitting)
    return _Chosen(group, best, evaluated[: first + 1], considered)


def _order_by_preference(chosen: list[_Chosen], order: dict[str, int], running_on: tuple[str, ...]) -> None:
    """Sort in place: the ``gpu.products`` order, else the types the replicas run on now (a spec change,
    or GPUs freed for a moment by another workload's rollout, does not move running replicas to whichever
    type has the most free GPUs at that instant), then nodes that exist first, then what autoscalers can
    add, then memory (free capacity counts nodes in an outage grace period as back)."""
    if order:
        chosen.sort(key=lambda c: (order[c.group.gpu.name], -c.capacity(True)))
    else:
        chosen.sort(
            key=lambda c: (
                c.group.gpu.name not in running_on,
                -c.existing_capacity(True),
                -c.capacity(True),
                -c.group.gpu.memory_gib,
                c.group.gpu.name,
            )
        )


def _variant(
    request: PlacementRequest,
    base: ResolvedModel,
    chosen: _Chosen,
    context: int,
    replicas: int,
    reason: str,
    notes: list[str],
) -> Variant:
    """The Variant of a chosen shape given ``replicas`` of it."""
    group, ev = chosen.group, chosen.pick
    assert ev.fit is not None
    fit, cand = ev.fit, ev.candidate
    _, flag = checkpoint_for(base, cand.quantization, request.pinned_repo)
    arch, gpu = ev.model.architecture, group.gpu

    speed_at = rank_speed(fit, arch, gpu, context, request.acceptance_rate)
    max_num_seqs, met = planned_seqs(request, fit, context, speed_at)
    if (request.slo_itl_ms or request.slo_ttft_ms) and not request.max_num_seqs:
        notes = [
            *notes,
            slo_note(request, max_num_seqs_by_kv(request, fit, context), max_num_seqs, met, speed_at),
        ]
    # spec.slo is ignored where serving.maxNumSeqs is set (the API's word), the knee's TTFT cap too
    knee = modelled_knee(speed_at, max_num_seqs, None if request.max_num_seqs else request.slo_ttft_ms)
    return Variant(
        gpu_product=group.gpu.name,
        resource_name=group.resource_name,
        node_selector=dict(group.node_selector),
        model_id=ev.model.model_id,
        tensor_parallel_size=cand.tp,
        pipeline_parallel_size=cand.pp,
        gpus_per_replica=cand.gpus,
        nodes_per_replica=cand.pp,
        quantization=fit.quantization,
        quantization_flag=flag,
        kv_cache_dtype=request.kv_cache_dtype,
        gpu_memory_utilization=fit.gpu_memory_utilization,
        weights_gib_per_gpu=fit.weights_gib_per_gpu,
        available_kv_cache_gib_per_gpu=fit.available_kv_cache_gib_per_gpu,
        kv_cache_bytes_per_token_per_gpu=fit.kv_cache_bytes_per_token_per_gpu,
        kv_cache_tokens=fit.kv_cache_tokens * cand.dp,
        max_concurrency=fit.max_concurrency * cand.dp,
        max_num_seqs=max_num_seqs,
        max_model_len=context,
        replicas=replicas,
        capacity_replicas=chosen.capacity(),
        enable_expert_parallel=any("expert-parallel" in n for n in fit.notes),
        reason=reason,
        notes=tuple(notes),
        new_node_replicas=max(0, replicas - chosen.existing_capacity()),
        node_pools=group.elastic_pools,
        gpu_memory_gib=fit.gpu_memory_gib,
        activation_gib=fit.activation_gib,
        non_torch_gib=fit.non_torch_gib,
        cudagraph_gib=fit.cudagraph_gib,
        speed=speed_at(max_num_seqs),
        knee_concurrency=(knee.concurrency or max_num_seqs) * cand.dp,
        considered=chosen.considered,
        decode_context_parallel_size=cand.dcp,
        data_parallel_size=cand.dp,
        speculative_tokens=cand.mtp,
        max_num_batched_tokens=cand.batched_tokens,
    )


def _spread_replicas(
    request: PlacementRequest,
    base: ResolvedModel,
    chosen: list[_Chosen],
    context: int,
    details: list[str],
    uncertain: list[str],
) -> tuple[list[Variant], int]:
    """Fill the preferred variant up to its free capacity, then the next; the variants (those left
    without replicas kept as ready alternatives) and the replicas none can host."""
    variants: list[Variant] = []
    remaining = request.replicas
    for item in chosen:
        assert item.pick.fit is not None
        take = min(remaining, item.capacity())
        remaining -= take
        reason, notes = _variant_reason(request, base, item, context)
        uncertain.extend(item.pick.fit.uncertain)
        variant = _variant(request, base, item, context, take, reason, notes)
        variants.append(variant)
        new_nodes = variant.new_node_replicas
        pools = ", ".join(item.group.elastic_pools)
        waiting = f" ({new_nodes} wait for new nodes from {pools})" if new_nodes else ""
        details.append(f"{reason} Replicas: {take} of capacity {variant.capacity_replicas}{waiting}.")
    return _with_unique_keys(variants), max(0, remaining)


def plan_placement(request: PlacementRequest) -> Plan:
    """Choose variants (GPU type, TP, PP, quantization, replicas) for a request; see module docstring.
    A plan without variants carries the cheapest changes that would fit (rule 7)."""
    plan = _plan(request)
    if plan.fits:
        return plan
    allowed = frozenset(resolve_products(request, group_pools(request.pools)))
    found = all_fixes(request, allowed, lambda r: _plan(r).variants, MAX_PIPELINE_PARALLEL)
    if not found:
        return plan
    rejected = tuple(with_cheapest_fix(r, found) for r in plan.rejected)
    return replace(plan, fixes=shown_fixes(found), rejected=rejected)


def _plan(request: PlacementRequest) -> Plan:
    """``plan_placement`` without the search for fixes."""
    base = resolve_request_model(request)  # rule 1
    context = _context_length(request, base)
    _check_pinned(request, base)
    grouped = group_pools(request.pools)  # rule 2
    allowed = resolve_products(request, grouped)
    details: list[str] = [
        f"model {base.model_id}: {base.architecture.attention} attention, context {context} "
        f"(limit {base.max_context}), minConcurrency {request.min_concurrency:g}",
        request.engine.describe(),
    ]
    rejected: list[Rejection] = []
    groups, order = filter_by_products(allowed, groups_of(grouped, details, rejected), details, rejected)
    chosen: list[_Chosen] = []
    for group in groups:  # rules 3 and 4
        shape = _choose_shape(request, base, group, context, details)
        if isinstance(shape, Rejection):
            rejected.append(shape)
        else:
            chosen.append(shape)
    _order_by_preference(chosen, order, request.running_on)  # rule 5
    uncertain: list[str] = list(base.notes)
    variants, shortfall = _spread_replicas(request, base, chosen, context, details, uncertain)
    if variants and shortfall:
        details.append(
            f"shortfall: {shortfall} of {request.replicas} replicas do not fit in the free GPUs "
            "of the allowed types"
        )
    if not variants:
        explain_nothing_planned(context, groups, rejected, details)
    return Plan(
        fits=bool(variants),
        model_id=base.model_id,
        context_length=context,
        variants=tuple(variants),
        rejected=tuple(rejected),
        details=tuple(details),
        replicas_requested=request.replicas,
        shortfall_replicas=shortfall,
        uncertain=tuple(dict.fromkeys(uncertain)),
        vllm_version=request.engine.version_text,
        license=base.entry.license if base.entry is not None else "",
    )


def _why_not_smaller_or_higher(
    request: PlacementRequest, ev: Evaluated, tried: list[Evaluated], context: int
) -> str:
    """What the candidates tried before the pick gave: a smaller TP, a higher precision."""
    assert ev.fit is not None
    cand, fit = ev.candidate, ev.fit
    out = ""
    # plain shapes only: the extra dimensions and the knob are ways the ranking adds, not smaller shapes
    failed = [
        t
        for t in tried
        if t is not ev
        and t.candidate.dp == 1
        and t.candidate.dcp == 1
        and t.candidate.mtp == 0
        and t.candidate.plain == t.candidate
    ]
    smaller = [
        t for t in failed if t.candidate.quantization == cand.quantization and t.candidate.tp < cand.tp
    ]
    if smaller:
        out += f"; {describe_failure(smaller[-1], context)}"
    higher = [
        t for t in failed if PRECISION_RANK[t.candidate.quantization] < PRECISION_RANK[fit.quantization]
    ]
    if higher and request.quantization == "auto":
        best = best_failure(higher)
        if best is not None:
            out += f"; higher precision does not fit ({describe_failure(best, context)})"
    return out


def _pcie_reason(
    request: PlacementRequest,
    base: ResolvedModel,
    group: Group,
    ev: Evaluated,
    tried: list[Evaluated],
    context: int,
) -> str:
    """On GPUs without NVLink: that the pick runs TP > 2 over PCIe, or that a higher precision would
    have needed it."""
    assert ev.fit is not None
    gpu, cand, fit = group.gpu, ev.candidate, ev.fit
    if cand.penalised:
        return f"; {_pcie_shape(cand)} over PCIe (no NVLink) is slow, chosen because no shape on 2 GPUs fits"
    if gpu.nvlink or request.quantization != "auto" or PRECISION_RANK[fit.quantization] == 0:
        return ""
    # did a higher precision fit only with TP > 2 over PCIe?
    rank = PRECISION_RANK[fit.quantization]
    if any(t.candidate.penalised and PRECISION_RANK[t.candidate.quantization] < rank for t in tried):
        return ""
    for c in candidates_for(request, base, group, False)[0]:
        if c.penalised and PRECISION_RANK[c.quantization] < rank:
            alt = evaluate(request, base, gpu, c, context)
            if alt.fit is not None and alt.fit.fits:
                return (
                    f"; {c.quantization} would need TP={c.tp} over PCIe, so {fit.quantization} at "
                    f"TP={cand.tp} was preferred (set quantization: {c.quantization} to force it)"
                )
    return ""


def _knob_notes(request: PlacementRequest, ev: Evaluated) -> list[str]:
    """What an engine knob the shape needs buys and costs."""
    cand, fit = ev.candidate, ev.fit
    assert fit is not None
    notes = []
    if cand.utilization is not None:
        notes.append(
            f"--gpu-memory-utilization {cand.utilization:g} (vLLM's default "
            f"{request.gpu_memory_utilization:g}) to hold minConcurrency: less headroom for what vLLM's "
            "profiling does not count (NCCL buffers, allocator fragmentation); set gpu.memoryUtilization "
            "to choose it yourself"
        )
    if cand.batched_tokens is not None:
        notes.append(
            f"--max-num-batched-tokens {cand.batched_tokens} (vLLM's default would not hold minConcurrency): "
            "a smaller profiling batch, so prefill takes more steps and the time to first token rises under "
            "load; set --max-num-batched-tokens in serving.extraArgs to choose it yourself"
        )
    return notes


def _pcie_shape(cand: Candidate) -> str:
    """The shape that crosses PCIe, in words: TP=4, or 4 GPUs in TP=1 x DP=4."""
    return f"TP={cand.tp}" if cand.dp == 1 else f"{cand.gpus} GPUs in {shape_text(cand)}"


def _checkpoint_notes(base: ResolvedModel, ev: Evaluated) -> list[str]:
    """Which checkpoint the variant serves where it is not the one named, or one it still needs."""
    assert ev.fit is not None
    fit = ev.fit
    notes = []
    if fit.quantization in ("int8", "int4") and ev.model.checkpoint_quantization is None:
        notes.append(
            f"{fit.quantization} needs a pre-quantized (AWQ/GPTQ) checkpoint of {base.name}: "
            "point model.source at one"
        )
    quantized = base.quantized_checkpoint(fit.quantization)
    if quantized is not None and ev.model.model_id == quantized.id:
        layout = quantized.layout
        kept = f", {'/'.join(layout.unquantized)} kept 16-bit" if layout.unquantized else ""
        notes.append(
            f"serves the {layout.method} {layout.precision} checkpoint {quantized.id} "
            f"(group {layout.group_size}{kept}; {quantized.url})"
        )
    elif ev.model.model_id != base.model_id:
        notes.append(f"serves the official FP8 checkpoint {ev.model.model_id}")
    return notes


def _variant_reason(
    request: PlacementRequest, base: ResolvedModel, chosen: _Chosen, context: int
) -> tuple[str, list[str]]:
    """Why this shape on this group, in one sentence, and the notes that go with it."""
    group, ev, tried = chosen.group, chosen.pick, chosen.tried
    assert ev.fit is not None
    gpu = group.gpu
    fit = ev.fit
    where = f"{shape_text(ev.candidate)} on {gpu.name}" + (
        f" ({group.resource_name})" if group.resource_name != GPU_RESOURCE else ""
    )
    dp = ev.candidate.dp
    held = f"{fit.max_concurrency * dp:.2f} concurrent {context}-token sequences"
    if dp > 1:  # each data-parallel rank is an engine with its own KV cache
        held += f" ({fit.max_concurrency:.2f} on each of {dp} data-parallel ranks)"
    reason = (
        f"{where}, {fit.quantization}: {held} (>= minConcurrency {request.min_concurrency:g}), "
        f"{fit.weights_gib_per_gpu:.1f} GiB weights and "
        f"{fit.available_kv_cache_gib_per_gpu:.1f} GiB KV cache per GPU"
    )
    # why not a smaller TP or a higher precision: what the candidates before the first fit gave
    reason += _why_not_smaller_or_higher(request, tried[-1], tried, context)
    if ev is tried[-1]:
        reason += _pcie_reason(request, base, group, ev, tried, context)
    elif ev.candidate.penalised:
        shape = _pcie_shape(ev.candidate)
        reason += f"; {shape} over PCIe (no NVLink) is slow, chosen because no shape on 2 GPUs fits"
    reason += goodput_reason(chosen.considered)
    notes: list[str] = [*request.engine.notes, *fit.notes]
    if gpu.memory_source.startswith(NOT_IN_CATALOG):
        notes.append(f"{gpu.name} {gpu.memory_source}")
    fp8 = _fp8_note(gpu, fit.quantization)
    if fp8:
        notes.append(fp8)
        reason += "; FP8 runs as W8A16 (Marlin) here"
    notes.extend(_checkpoint_notes(base, ev))
    notes.extend(_knob_notes(request, ev))
    return reason + ".", notes


def _with_unique_keys(variants: list[Variant]) -> list[Variant]:
    """Give every variant a key unique in the plan (a GPU type can appear through several groups:
    ``nvidia.com/gpu`` on whole nodes and a per-type resource on mixed machines, or two labellers)."""
    counts: dict[str, int] = {}
    for v in variants:
        counts[v.gpu_product] = counts.get(v.gpu_product, 0) + 1
    out: list[Variant] = []
    used: set[str] = set()
    for v in variants:
        key = v.gpu_product.lower()
        if counts[v.gpu_product] > 1:
            if v.resource_name != GPU_RESOURCE:
                key += "-" + v.resource_name.split("/")[-1]
            elif v.node_selector and GFD_PRODUCT_LABEL not in v.node_selector:
                label = next(iter(v.node_selector))
                key += "-" + label.split("/")[0].split(".")[0]
        base, n = key, 2
        while key in used:
            key, n = f"{base}-{n}", n + 1
        used.add(key)
        out.append(replace(v, key=key))
    return out
