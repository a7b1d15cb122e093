"""Every shape that fits ranked by predicted goodput, and the max-num-seqs each is served with (pure).

``max-num-seqs`` is what the KV cache holds at a typical 4k-token occupancy, clamped to
[minConcurrency, 256], and lowered for ``spec.slo`` until the predicted latency meets it. The shapes that
hold minConcurrency (every precision, TP, DCP, DP, PP, MTP draft and engine knob the candidates tried) are
scored by predicted output tokens/s per GPU (``planning.speed``); walking from the simplest, a shape
replaces the one kept only when it meets the SLO where that one does not, or gains ``GOODPUT_MARGIN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from glm_operator.catalog.gpus import GpuType
from glm_operator.catalog.models import ModelArchitecture, ResolvedModel
from glm_operator.planning.memory.instance import (
    FitResult,
)
from glm_operator.planning.placement.candidates import (
    PRECISION_RANK,
    Evaluated,
    checkpoint_for,
)
from glm_operator.planning.placement.groups import Group
from glm_operator.planning.placement.request import (
    PlacementRequest,
)
from glm_operator.planning.placement.result import Considered
from glm_operator.planning.speed.performance import (
    Speed,
    concurrency_within,
    plan_workload,
    speed_of_fit,
)

TYPICAL_SEQUENCE_TOKENS = 4096

MAX_NUM_SEQS_CAP = 256

# Another shape replaces the first that fits only when predicted to give this much more throughput per
# GPU: below it the choice is within the performance model's error between shapes, not worth a change.
GOODPUT_MARGIN = 0.05

#: Shapes a variant lists as compared (status.plan, the plan page): the best ones, and the simplest
SHOWN_SHAPES = 8


def max_num_seqs_by_kv(request: PlacementRequest, fit: FitResult, context: int) -> int:
    if request.max_num_seqs:
        return request.max_num_seqs
    typical = max(1, min(context, TYPICAL_SEQUENCE_TOKENS))
    by_kv = fit.kv_cache_tokens // typical
    floor = max(1, math.ceil(request.min_concurrency / fit.data_parallel_size))  # per data-parallel rank
    return max(floor, min(MAX_NUM_SEQS_CAP, by_kv))


def _rankable(
    request: PlacementRequest, base: ResolvedModel, group: Group, ev: Evaluated, first: Evaluated
) -> bool:
    """Whether a fit competes for goodput with the first that fits. Not: int8/int4 unless
    ``allowedQuantizations`` names them (quality, not speed, is what rules them out), FP8 on GPUs without
    FP8 tensor cores (W8A16 Marlin, a way to fit), a precision that loads another checkpoint than the one
    ``model.source`` names (the first fit's), TP > 2 over PCIe unless the first fit needs it."""
    cand = ev.candidate
    if ev is first:
        return True
    if PRECISION_RANK[cand.quantization] >= 2 and cand.quantization not in request.allowed_quantizations:
        return False
    if cand.quantization == "fp8" and not group.gpu.native_fp8:
        return False
    if request.checkpoint_pinned and cand.quantization != first.candidate.quantization:
        pinned = request.pinned_repo
        if (
            checkpoint_for(base, cand.quantization, pinned)[0]
            is not checkpoint_for(base, first.candidate.quantization, pinned)[0]
        ):
            return False
    return not cand.penalised or first.candidate.penalised


def rank(
    request: PlacementRequest, base: ResolvedModel, group: Group, context: int, fits: list[Evaluated]
) -> tuple[Evaluated, tuple[Considered, ...]]:
    """The shape to serve among ``fits`` (candidates that hold minConcurrency, in order of simplicity),
    and every one compared, best first.

    The replicas asked come first: only shapes whose replicas the group's GPUs hold as many of as any
    rankable shape does (up to spec.replicas) can be served (GLM-4.5-Air x 4 on two 8-GPU nodes: TP 4 x 4,
    not TP 8 x 2 and two short). Among them each is scored at its own max-num-seqs (``planned_seqs``,
    spec.slo included) by predicted output tokens/s per GPU (``planning.speed``). Walking from the simplest,
    a shape replaces the one kept when it meets spec.slo where that one does not, or gives
    ``GOODPUT_MARGIN`` more: within the margin the model cannot tell two shapes apart, and the simpler one
    is the safer bet."""
    first = fits[0]
    scored = [
        (ev, _considered(request, ev, group.gpu, context, first=ev is first))
        for ev in fits
        if _rankable(request, base, group, ev, first)
    ]
    held = {
        id(ev): group.capacity(ev.candidate.tp * ev.candidate.dp, ev.candidate.pp, True) for ev, _ in scored
    }
    target = min(max(1, request.replicas), max(held.values()))
    best, best_c = next((ev, c) for ev, c in scored if held[id(ev)] >= target)
    for ev, c in scored:
        if held[id(ev)] < target or ev is best:
            continue
        if (c.meets_slo and not best_c.meets_slo) or (
            c.meets_slo == best_c.meets_slo
            and c.tokens_per_s_per_gpu > best_c.tokens_per_s_per_gpu * (1 + GOODPUT_MARGIN)
        ):
            best, best_c = ev, c
    short = {id(c): held[id(ev)] for ev, c in scored if held[id(ev)] < target}
    ranked = sorted(
        (c for _, c in scored),
        key=lambda c: (c is not best_c, id(c) in short, not c.meets_slo, -c.tokens_per_s_per_gpu),
    )
    ranked = [
        replace(c, lost=f"holds {short[id(c)]} of the {request.replicas} replicas asked")
        if id(c) in short
        else c
        for c in ranked
    ]
    shown = ranked[:SHOWN_SHAPES]
    shown += [c for c in ranked[SHOWN_SHAPES:] if c.first_fit]  # the simplest shape stays in view
    return best, tuple(replace(c, chosen=c is best_c, lost=c.lost or _why_lost(c, best_c)) for c in shown)


def _why_lost(c: Considered, best: Considered) -> str:
    """Why a compared shape is not the one served ('' for the one that is)."""
    if c is best:
        return ""
    if best.meets_slo and not c.meets_slo:
        return "misses spec.slo"
    if c.tokens_per_s_per_gpu <= best.tokens_per_s_per_gpu:
        gap = 1 - c.tokens_per_s_per_gpu / max(best.tokens_per_s_per_gpu, 1e-9)
        return f"{gap * 100:.0f} % fewer output tokens/s per GPU"
    gain = c.tokens_per_s_per_gpu / max(best.tokens_per_s_per_gpu, 1e-9) - 1
    margin = f"{GOODPUT_MARGIN:.0%}"
    return f"{gain * 100:.0f} % more tokens/s per GPU than a simpler shape, within the {margin} margin"


def _considered(
    request: PlacementRequest, ev: Evaluated, gpu: GpuType, context: int, first: bool
) -> Considered:
    assert ev.fit is not None
    fit, arch, cand = ev.fit, ev.model.architecture, ev.candidate

    speed_at = rank_speed(fit, arch, gpu, context, request.acceptance_rate)
    seqs, met = planned_seqs(request, fit, context, speed_at)
    return Considered(
        quantization=fit.quantization,
        tensor_parallel_size=cand.tp,
        max_num_seqs=seqs,
        speed=speed_at(seqs),
        meets_slo=met,
        first_fit=first,
        pipeline_parallel_size=cand.pp,
        decode_context_parallel_size=cand.dcp,
        data_parallel_size=cand.dp,
        speculative_tokens=cand.mtp,
        gpu_memory_utilization=fit.gpu_memory_utilization if cand.utilization is not None else None,
        max_num_batched_tokens=cand.batched_tokens,
        max_concurrency=fit.max_concurrency * cand.dp,
    )


def rank_speed(
    fit: FitResult, arch: ModelArchitecture, gpu: GpuType, context: int, acceptance_rate: float | None = None
) -> Callable[[int], Speed | None]:
    """The predicted speed of a replica whose every engine (data-parallel rank) holds ``n`` sequences: the
    unit of max-num-seqs, which vLLM applies per data-parallel rank (``acceptance_rate``: the spec's
    measured MTP draft acceptance)."""

    def speed_at(n: int) -> Speed | None:
        workload = plan_workload(n * fit.data_parallel_size, context)
        return speed_of_fit(fit, arch, gpu, workload, acceptance_rate=acceptance_rate)

    return speed_at


def planned_seqs(
    request: PlacementRequest, fit: FitResult, context: int, speed_at: Callable[[int], Speed | None]
) -> tuple[int, bool]:
    """max-num-seqs (rule 6) lowered for spec.slo, and whether the SLO is met there (True without one)."""
    by_kv = max_num_seqs_by_kv(request, fit, context)
    if not (request.slo_itl_ms or request.slo_ttft_ms) or request.max_num_seqs:
        return by_kv, True
    floor = min(by_kv, max(1, math.ceil(request.min_concurrency / fit.data_parallel_size)))
    if speed_at(floor) is None:
        return by_kv, False  # no speed figures for the GPU type: the KV cache decides (the note says so)
    return concurrency_within(floor, by_kv, speed_at, request.slo_itl_ms, request.slo_ttft_ms)


def slo_note(
    request: PlacementRequest, by_kv: int, seqs: int, met: bool, speed_at: Callable[[int], Speed | None]
) -> str:
    """The note that says which max-num-seqs spec.slo left (``planned_seqs``: the largest up to what the
    KV cache holds whose predicted latency meets the targets, never below minConcurrency) and why."""
    speed = speed_at(seqs)
    targets = " and ".join(
        f"{name} {value:g} ms"
        for name, value in (("ITL", request.slo_itl_ms), ("TTFT", request.slo_ttft_ms))
        if value
    )
    if speed is None:
        return f"spec.slo: no speed figures for this GPU type; max-num-seqs {by_kv} from the KV cache"
    predicted = f"ITL {1000 * speed.itl_s:.1f} ms, TTFT {1000 * speed.ttft_s:.0f} ms"
    if not met:
        missed = " and ".join(
            f"{name} {value:g} ms"
            for name, value, got in (
                ("ITL", request.slo_itl_ms, speed.itl_s),
                ("TTFT", request.slo_ttft_ms, speed.ttft_s),
            )
            if value and got * 1000 > value
        )
        return (
            f"spec.slo not met: at minConcurrency {seqs} the predicted {predicted} miss {missed}; fix: a GPU "
            "type with more memory bandwidth, quantization fp8, or a larger gpu.tensorParallelSize"
        )
    return (
        f"spec.slo: max-num-seqs {seqs} (the KV cache holds {by_kv}) keeps the predicted {predicted} "
        f"within {targets}"
    )


def goodput_reason(considered: tuple[Considered, ...]) -> str:
    """Rule 3's comparison in words: what the chosen shape gives next to the first that fit, or next to
    the best other shape when it is the first."""
    if len(considered) < 2:
        return ""
    pick = next(c for c in considered if c.chosen)
    others = [c for c in considered if not c.chosen]
    mine = (
        f"{pick.tokens_per_s_per_gpu:.0f} output tokens/s per GPU predicted at {pick.max_num_seqs} sequences"
    )
    if not pick.first_fit:
        base = next(c for c in others if c.first_fit)
        if pick.meets_slo and not base.meets_slo:
            return f"; chosen over {base.shape} (the first shape that fits), which misses spec.slo: {mine}"
        gain = pick.tokens_per_s_per_gpu / max(base.tokens_per_s_per_gpu, 1e-9) - 1
        return (
            f"; chosen over {base.shape} (the first shape that fits) for throughput: {mine}, "
            f"{gain * 100:+.0f} % over its {base.tokens_per_s_per_gpu:.0f}"
        )
    runner = others[0]
    return (
        f"; {mine}; best other shape {runner.shape}: {runner.tokens_per_s_per_gpu:.0f} "
        f"(a shape must gain {GOODPUT_MARGIN * 100:g} % to replace a simpler one)"
    )
