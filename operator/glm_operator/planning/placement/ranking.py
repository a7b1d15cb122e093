"""Shapes ranked by predicted goodput, and the max-num-seqs each is served with (pure).

``max-num-seqs`` is what the KV cache holds at a typical 4k-token occupancy, clamped to
[minConcurrency, 256], and lowered for ``spec.slo`` until the predicted latency meets it. Under
``quantization: auto`` a 16-bit pick is compared with native fp8 at its smallest TP that fits, by
predicted output tokens/s per GPU (``planning.speed``); another shape replaces the pick only when it
meets the SLO where the pick does not, or gains ``GOODPUT_MARGIN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from glm_operator.catalog.gpus import GpuType
from glm_operator.catalog.models import ResolvedModel
from glm_operator.planning.memory.instance import (
    FitResult,
)
from glm_operator.planning.placement.candidates import (
    PRECISION_RANK,
    Candidate,
    Evaluated,
    candidates_for,
    checkpoint_for,
    evaluate,
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


def max_num_seqs_by_kv(request: PlacementRequest, fit: FitResult, context: int) -> int:
    if request.max_num_seqs:
        return request.max_num_seqs
    typical = max(1, min(context, TYPICAL_SEQUENCE_TOKENS))
    by_kv = fit.kv_cache_tokens // typical
    floor = max(1, math.ceil(request.min_concurrency))
    return max(floor, min(MAX_NUM_SEQS_CAP, by_kv))


def _goodput_rivals(
    request: PlacementRequest, base: ResolvedModel, group: Group, first: Candidate
) -> list[Candidate]:
    """The shapes compared with the first that fits (rule 3): native fp8 for a 16-bit pick under auto, in
    TP order (the smallest that fits is taken); none over PCIe at TP > 2 unless the pick is, none that
    loads another checkpoint than the one spec.model.source names."""
    if PRECISION_RANK[first.quantization] != 0 or not group.gpu.native_fp8:
        return []
    if request.checkpoint_pinned and checkpoint_for(base, "fp8")[0] is not base:
        return []
    return [
        c
        for c in candidates_for(request, base, group, False)[0]
        if c.quantization == "fp8" and (not c.penalised or first.penalised)
    ]


def by_goodput(
    request: PlacementRequest, base: ResolvedModel, group: Group, context: int, first: Evaluated
) -> tuple[Evaluated, tuple[Considered, ...]]:
    """The first fit, or the rival of best predicted throughput per GPU when it wins (rule 3)."""
    fits = [first]
    for cand in _goodput_rivals(request, base, group, first.candidate):
        ev = evaluate(request, base, group.gpu, cand, context)
        if ev.fit is not None and ev.fit.fits:
            fits.append(ev)
            break  # the smallest TP of that precision that fits: replicas before TP
    if len(fits) == 1:
        return first, ()
    scored = [(ev, _considered(request, ev, group.gpu, context, first=ev is first)) for ev in fits]
    best, best_c = scored[0]
    for ev, c in scored[1:]:
        if (c.meets_slo and not best_c.meets_slo) or (
            c.meets_slo == best_c.meets_slo
            and c.tokens_per_s_per_gpu > best_c.tokens_per_s_per_gpu * (1 + GOODPUT_MARGIN)
        ):
            best, best_c = ev, c
    ranked = sorted((c for _, c in scored), key=lambda c: (not c.meets_slo, -c.tokens_per_s_per_gpu))
    return best, tuple(replace(c, chosen=c is best_c) for c in ranked)


def _considered(
    request: PlacementRequest, ev: Evaluated, gpu: GpuType, context: int, first: bool
) -> Considered:
    assert ev.fit is not None
    fit, arch = ev.fit, ev.model.architecture

    def speed_at(n: int) -> Speed | None:
        return speed_of_fit(fit, arch, gpu, plan_workload(n, context))

    seqs, met = planned_seqs(request, fit, context, speed_at)
    return Considered(fit.quantization, ev.candidate.tp, seqs, speed_at(seqs), met, first_fit=first)


def planned_seqs(
    request: PlacementRequest, fit: FitResult, context: int, speed_at: Callable[[int], Speed | None]
) -> tuple[int, bool]:
    """max-num-seqs (rule 6) lowered for spec.slo, and whether the SLO is met there (True without one)."""
    by_kv = max_num_seqs_by_kv(request, fit, context)
    if not (request.slo_itl_ms or request.slo_ttft_ms) or request.max_num_seqs:
        return by_kv, True
    floor = min(by_kv, max(1, math.ceil(request.min_concurrency)))
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
    if not considered:
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
        f"(a shape must gain {GOODPUT_MARGIN * 100:g} % to replace the first that fits)"
    )
