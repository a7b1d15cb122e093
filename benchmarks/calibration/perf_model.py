"""The performance model (glm_operator/planning/speed/performance.py) against the GPU load tests.

Usage: .venv/bin/python benchmarks/calibration/perf_model.py [--refit | --held-out]

Reads benchmarks/gpu_truth/perf/CASE.SHAPE.json (``glm-operator loadtest -o json`` run on the device
against the case's vLLM, see benchmarks/gpu_truth/README.md), plans each case with the fit model on the
case's GPU (``Case.gpu``) and prints, per (case, shape, concurrency), measured and predicted output
tokens/s, ITL p50 and TTFT p50 with the error. Points of CALIBRATION fit the constants (``--refit`` fits
them again and prints them: what ``PerfConstants`` ships); every other point is a prediction, summarised
apart. ``--held-out`` refits the constants without each model family's points (``Case.family``) and
predicts them, then without each load test (a case's shape: one server configuration and prompt length),
then the same per GPU (``Case.gpu``) when the load tests come from more than one: how the model does on a
model, a configuration or a GPU it was not fitted on.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from benchmarks.calibration.fitting import least_squares  # noqa: E402
from benchmarks.gpu_truth.cases import BY_NAME, Case  # noqa: E402
from glm_operator.catalog.gpus import GpuType, find_gpu  # noqa: E402
from glm_operator.planning.memory.constants import GIB  # noqa: E402
from glm_operator.planning.memory.fit import estimate_fit  # noqa: E402
from glm_operator.planning.memory.instance import FitInput, FitResult  # noqa: E402
from glm_operator.planning.speed.performance import (  # noqa: E402
    BYTES_PER_PARAM,
    DEFAULT_PERF,
    PerfConstants,
    PrefillTerms,
    StepTerms,
    Workload,
    model_weights,
    prefill_terms,
    queueing,
    speed_of_fit,
    step_terms_of_fit,
)

PERF = REPO / "benchmarks" / "gpu_truth" / "perf"
# the points the constants are fitted on: GLM-4.7-Flash bf16 at max-num-seqs 64 (both shapes) and 256
# (chat), on-the-fly fp8 at 256 (chat), and the dense Qwen3-8B (chat): per-layer overheads differ between
# MoE and dense layers, the per-sequence cost shows at large batches, fp8 GEMMs only in fp8 runs
CALIBRATION = {
    ("flash-s64-perf", "chat"),
    ("flash-s64-perf", "long"),
    ("flash-c32k-perf", "chat"),
    ("flash-fp8online", "chat"),
    ("qwen3-8b-s16-b2k", "chat"),
    # MTP: the speculative step's overhead only (refit_speculative); its long shape is held out
    ("flash-mtp1-s64-perf", "chat"),
}
# a level at concurrency 1 whose TTFT p95 is this many times its p50 was disturbed (a lone prompt takes the
# same time every time): left out of the TTFT fit, still reported
DISTURBED_LONE_TTFT = 3.0
# the targets (issue 50): |error| median and worst per metric; None: no bar
TARGETS = {"ITL p50": (0.07, 0.15), "TTFT p50": (0.25, None), "tokens/s": (0.10, 0.20)}


@dataclass(frozen=True)
class Point:
    case: Case
    shape: str
    concurrency: int
    input_tokens: int
    output_tokens: int
    tokens_per_s: float
    itl_s: float
    ttft_s: float
    ttft_p95_s: float
    # tokens/s over the steady window (loadtest's warm-up and window, since 2026-12-07); False: over the
    # whole level, whose first wave and tail pull it down
    steady: bool = False

    @property
    def calibration(self) -> bool:
        return (self.case.name, self.shape) in CALIBRATION

    @property
    def gpu(self) -> GpuType:
        return gpu_of(self.case)

    @property
    def disturbed(self) -> bool:
        return self.concurrency == 1 and self.ttft_p95_s > DISTURBED_LONE_TTFT * self.ttft_s


def load_points() -> list[Point]:
    points = []
    for path in sorted(PERF.glob("*.json")):
        name, shape = path.name.removesuffix(".json").rsplit(".", 1)
        data = json.loads(path.read_text(encoding="utf-8"))
        for level in data["levels"]:
            if level["errors"] or not level["output_tokens_per_s"]:
                continue
            points.append(
                Point(
                    BY_NAME[name], shape, int(level["concurrency"]), int(data["input_tokens"]),
                    int(data["output_tokens"]), float(level["output_tokens_per_s"]),
                    float(level["itl_p50_s"]), float(level["ttft_p50_s"]), float(level["ttft_p95_s"]),
                    level.get("steady_s") is not None,
                )
            )  # fmt: skip
    return points


def gpu_of(case: Case) -> GpuType:
    """The catalog's GPU type of the card the case ran on."""
    return find_gpu(case.device.product)


@functools.cache
def plan(case: Case) -> FitResult:
    return estimate_fit(
        FitInput(
            model=case.resolved(),
            gpu_memory_gib=case.device.memory_gib,
            vllm_version=(0, 26, 0),
            max_model_len=case.context_length,
            gpu_memory_utilization=case.gpu_memory_utilization,
            max_num_seqs=case.max_num_seqs,
            kv_cache_dtype=case.kv_cache_dtype,
            quantization=case.quantization,
            max_num_batched_tokens=case.max_num_batched_tokens,
            num_speculative_tokens=case.speculative_tokens,
        )
    )


def acceptance_rate(case: Case) -> float | None:
    """The per-draft rate ``a`` (``p_i = a^i``, planning/speed/speculative.py) whose mean tokens per step
    equal the case's ``synthetic_acceptance_length``, the mean vLLM's synthetic sampler accepts exactly
    (``SpeculativeConfig._acceptance_length_to_rates``); None without MTP."""
    k, length = case.speculative_tokens, case.synthetic_acceptance_length
    if not k or length is None:
        return None
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: 1 + a + ... + a^k rises with a
        mid = (low + high) / 2
        low, high = (mid, high) if 1 + sum(mid**i for i in range(1, k + 1)) < length else (low, mid)
    return (low + high) / 2


def same_experts(case: Case) -> bool:
    # dummy weights route every token of a GLM model to the same experts (performance.predict_speed)
    return case.family.startswith("glm") and not case.spread_router


@dataclass(frozen=True)
class Errors:
    """A point's predictions and their relative errors (prediction / measurement - 1)."""

    tokens_per_s: float
    itl_s: float
    ttft_s: float
    tokens_per_s_error: float
    itl_error: float
    ttft_error: float


def errors(p: Point, c: PerfConstants) -> Errors:
    fit = plan(p.case)
    arch = p.case.resolved().architecture
    workload = Workload(p.concurrency, p.input_tokens, p.output_tokens)
    speed = speed_of_fit(
        fit,
        arch,
        p.gpu,
        workload,
        c,
        same_experts=same_experts(p.case),
        acceptance_rate=acceptance_rate(p.case),
        max_num_seqs=fit.max_num_seqs,
    )
    assert speed is not None
    # the model's ITL is the step over the tokens it emits on average; the load test's p50 is the step of
    # the median token over its tokens (median_token_step)
    itl = speed.itl_s
    if p.case.speculative_tokens and p.case.synthetic_acceptance_length:
        itl *= p.case.synthetic_acceptance_length / median_token_step(p.case)
    return Errors(
        speed.output_tokens_per_s,
        itl,
        speed.ttft_s,
        speed.output_tokens_per_s / p.tokens_per_s - 1,
        itl / p.itl_s - 1,
        speed.ttft_s / p.ttft_s - 1,
    )


@functools.cache
def step_terms(p: Point) -> StepTerms:
    """The decode step at the running batch (the clients beyond max-num-seqs wait for a slot)."""
    fit = plan(p.case)
    workload = Workload(min(p.concurrency, fit.max_num_seqs), p.input_tokens, p.output_tokens)
    arch = p.case.resolved().architecture
    return step_terms_of_fit(fit, arch, p.gpu, workload, same_experts=same_experts(p.case))


@functools.cache
def lone_prefill_terms(p: Point, c: PerfConstants) -> PrefillTerms:
    fit = plan(p.case)
    arch = p.case.resolved().architecture
    precision = fit.quantization
    w = model_weights(arch, 1, fit.weights_gib_per_gpu * GIB, BYTES_PER_PARAM.get(precision, 2.0))
    fp8 = precision == "fp8" and p.gpu.native_fp8
    return prefill_terms(arch, w, p.input_tokens, 1, p.gpu, fp8, c)


def fit_independent(
    rows: Sequence[Sequence[float]],
    rhs: Sequence[float],
    floors: Sequence[float] | None = None,
    tolerance: float = 0.02,
) -> list[float | None]:
    """Least squares over the columns the rows tell apart: a column that is zero in every row, or
    proportional (within ``tolerance``) to an earlier column, is left out (None); a value below its floor
    (0 unless ``floors`` names one) is held at the floor, or left out at a floor of 0, and the rest fitted
    again. A held-out refit meets this: without the MoE model no row has MoE layers; with the MoE model
    alone its layer and MoE-layer counts are proportional, and its prefill FLOPs and per-token MoE work
    nearly so (a prefill efficiency above the datasheet's 1 is held at 1)."""
    width = len(rows[0])
    lows = list(floors or [0.0] * width)
    keep: list[int] = []
    for j in range(width):
        col = [r[j] for r in rows]
        if not any(col):
            continue
        if any(_proportional(col, [r[k] for r in rows], tolerance) for k in keep):
            continue
        keep.append(j)
    held: dict[int, float] = {}
    while keep:
        target = [y - sum(r[j] * v for j, v in held.items()) for r, y in zip(rows, rhs, strict=True)]
        solved = least_squares([[r[j] for j in keep] for r in rows], target)
        low = [j for j, x in zip(keep, solved, strict=True) if x < lows[j]]
        if not low:
            out: list[float | None] = [None] * width
            for j, x in zip(keep, solved, strict=True):
                out[j] = x
            for j, v in held.items():
                out[j] = v
            return out
        j = low[-1]
        keep.remove(j)
        if lows[j] > 0:
            held[j] = lows[j]
    return [held.get(j) for j in range(width)]


def _proportional(a: Sequence[float], b: Sequence[float], tolerance: float) -> bool:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x or y]
    if not pairs or any(x == 0 or y == 0 for x, y in pairs):
        return False
    ratios = [x / y for x, y in pairs]
    return max(ratios) - min(ratios) <= tolerance * abs(statistics.median(ratios))


def refit_decode(points: Sequence[Point]) -> PerfConstants:
    """The step's constants: for a given FP8 GEMM efficiency ITL p50 is linear in the overheads
    (``StepTerms``), so a least-squares fit of the points' ITL, each row weighted by 1 / its measured ITL
    (relative errors), at each efficiency of ``FP8_EFFICIENCIES``, keeping the one with the least squared
    relative error (the GEMMs take the longer of their reads and their FLOPs, not linear in it). The
    bandwidth efficiency is fixed at 0.9 (a decode GEMV reaches ~90 % of HBM peak at most; the read time
    and the per-layer overheads are otherwise hard to tell apart at the small batches where reads
    dominate) and the decode GEMMs' bf16 efficiency at 0.4. A constant the points do not show (no MoE
    layer, no FP8 run: a held-out refit) is 0 for an overhead, and FP8 GEMMs run at the bf16 rate.
    Rounded: overheads to 0.1 us, efficiencies to 0.01."""
    gpu = points[0].gpu
    if any(step_terms(p).gemm8_s for p in points):
        grid = FP8_EFFICIENCIES
    else:  # no FP8 run: FP8 GEMMs at the bf16 rate
        bf16_rate = DEFAULT_PERF.compute_efficiency * gpu.bf16_tflops
        grid = (round(bf16_rate / max(gpu.fp8_tflops, gpu.bf16_tflops), 2),)
    best: tuple[float, PerfConstants] | None = None
    for fp8_eff in grid:
        c = replace(DEFAULT_PERF, fp8_compute_efficiency=fp8_eff)
        rows, rhs = [], []
        for p in points:
            t = step_terms(p)
            rows.append([v / p.itl_s for v in (t.layers, t.moe_layers, t.sequences)])
            rhs.append((p.itl_s - t.gemm_seconds(c) - t.kv_read_s / c.bandwidth_efficiency) / p.itl_s)
        layer, moe, seq = fit_independent(rows, rhs)
        c = replace(
            c,
            layer_overhead_s=round(layer or 0.0, 7),
            moe_layer_overhead_s=round(moe or 0.0, 7),
            sequence_overhead_s=round(seq or 0.0, 7),
        )
        loss = sum((step_terms(p).seconds(c) / p.itl_s - 1) ** 2 for p in points)
        if best is None or loss < best[0] - 1e-12:
            best = (loss, c)
    assert best is not None
    return best[1]


# the FP8 GEMMs' efficiency is searched on this grid: the step takes the longer of the reads and the GEMMs,
# so it is not linear in it
FP8_EFFICIENCIES = tuple(round(0.01 * i, 2) for i in range(5, 81))


# the wave limit is searched on this grid (decode phases): the fit is linear in the other constants once
# it says which points' waits it sets
WAVE_LIMITS = tuple(round(0.05 * i, 2) for i in range(2, 41))


def _ttft_rows(
    points: Sequence[Point], c: PerfConstants, limit: float
) -> tuple[list[list[float]], list[float]]:
    """TTFT p50 (performance.ttft_under_load_s) and the round time of the closed loop (running clients x
    output tokens / tokens/s, performance.predict_speed) as rows linear in (request overhead, 1 / prefill
    efficiency, MoE prefill cost per token and layer), with the wave ``limit`` and the decode constants of
    ``c`` fixed; each row weighted by 1 / its measurement."""
    rows, rhs = [], []
    for p in points:
        fit = plan(p.case)
        q = queueing(p.concurrency, fit.max_num_seqs, fit.max_num_batched_tokens, p.input_tokens)
        step = step_terms(p).seconds(c)
        pre = lone_prefill_terms(p, c)
        phase = (p.output_tokens - 1) * step
        capped = q.prompts_ahead * pre.seconds(c) + q.steps_ahead * step > limit * phase
        ahead, steps = (0.0, 0) if capped else (q.prompts_ahead, q.steps_ahead)
        scale = 1 + q.slot_rounds
        own = q.prompt_steps + steps
        known = (own * step + (1 + ahead) * pre.comms_s + (limit * phase if capped else 0.0)) * scale
        known += q.slot_rounds * phase
        row = [scale, (1 + ahead) * pre.flops_s * scale, (1 + ahead) * pre.moe_token_layers * scale]
        rows.append([v / p.ttft_s for v in row])
        rhs.append((p.ttft_s - known) / p.ttft_s)
        round_s = q.running * p.output_tokens / p.tokens_per_s
        known = p.output_tokens * step + q.running * pre.comms_s
        row = [1.0, q.running * pre.flops_s, q.running * pre.moe_token_layers]
        rows.append([v / round_s for v in row])
        rhs.append((round_s - known) / round_s)
    return rows, rhs


def refit_ttft(points: Sequence[Point], c: PerfConstants) -> PerfConstants:
    """The prefill and queueing constants on top of the decode ones: for each wave limit of the grid a
    least-squares fit of the request overhead, the prefill efficiency and the MoE prefill cost on TTFT p50
    and the round time (``_ttft_rows``; each point's regime from the constants being tried, fitted three
    times over), and the limit whose fit leaves the smallest squared relative error. Disturbed lone levels
    (``DISTURBED_LONE_TTFT``) are left out. Rounded: the overhead to 0.1 ms, the efficiency to 0.01, the
    MoE cost to 1 ns."""
    usable = [p for p in points if not p.disturbed]
    best: tuple[float, PerfConstants] | None = None
    for limit in WAVE_LIMITS:
        trial = replace(c, wave_wait_limit=limit)
        for _ in range(3):
            rows, rhs = _ttft_rows(usable, trial, limit)
            h, inv_eff, moe = fit_independent(rows, rhs, floors=(0.0, 1.0, 0.0))
            trial = replace(
                trial,
                request_overhead_s=h or 0.0,
                prefill_compute_efficiency=1 / inv_eff if inv_eff else c.prefill_compute_efficiency,
                moe_prefill_token_s=moe or 0.0,
            )
        rows, rhs = _ttft_rows(usable, trial, limit)
        x = (trial.request_overhead_s, 1 / trial.prefill_compute_efficiency, trial.moe_prefill_token_s)
        sse = sum(
            (sum(a * b for a, b in zip(r, x, strict=True)) - y) ** 2 for r, y in zip(rows, rhs, strict=True)
        )
        if best is None or sse < best[0] - 1e-12:
            best = (sse, trial)
    assert best is not None
    t = best[1]
    return replace(
        t,
        request_overhead_s=round(t.request_overhead_s, 4),
        prefill_compute_efficiency=round(t.prefill_compute_efficiency, 2),
        moe_prefill_token_s=round(t.moe_prefill_token_s, 9),
    )


def refit(points: Sequence[Point], use: Callable[[Point], bool] = lambda p: p.calibration) -> PerfConstants:
    """The constants fitted on the points ``use`` picks (the CALIBRATION set by default): the decode step's
    on ITL p50 (``refit_decode``), then the prefill and queueing ones on TTFT p50 (``refit_ttft``)."""
    chosen = [p for p in points if use(p)]
    plain = [p for p in chosen if not p.case.speculative_tokens]
    return refit_speculative(chosen, refit_ttft(plain, refit_decode(plain)))


def refit_speculative(points: Sequence[Point], c: PerfConstants) -> PerfConstants:
    """``speculative_step_overhead_s`` on top of the other constants: the median over the chosen MTP points
    of the step they measure (ITL p50 x the tokens a step emits) less the step predicted without it; the
    shipped value where no MTP point is chosen. Rounded to 0.1 ms."""
    mtp = [p for p in points if p.case.speculative_tokens]
    if not mtp:
        return c
    base = replace(c, speculative_step_overhead_s=0.0)
    gaps = [(p.itl_s - errors(p, base).itl_s) * median_token_step(p.case) for p in mtp]
    return replace(c, speculative_step_overhead_s=round(max(0.0, statistics.median(gaps)), 4))


def median_token_step(case: Case) -> int:
    """The tokens of the step that emits the median token, 1 without MTP. ``loadtest`` splits a streamed
    chunk's interval over its tokens, so with MTP its ITL p50 is that step over its tokens, not the step over
    the mean: vLLM's synthetic sampler accepts ``[1] * n + [f] + [0] * ...`` per position (the
    minimum-variance schedule, ``SpeculativeConfig._acceptance_length_to_rates``), so a step emits n + 1
    tokens (share 1 - f) or n + 2 (share f), and the median token sits in the larger step when
    f (n + 2) >= (1 - f)(n + 1)."""
    length = case.synthetic_acceptance_length
    if not case.speculative_tokens or length is None:
        return 1
    full = int(length - 1)
    frac = length - 1 - full
    return full + 2 if frac * (full + 2) >= (1 - frac) * (full + 1) else full + 1


def summary(name: str, errs: Sequence[float]) -> str:
    """``name``: |error| median and worst, against the issue's targets."""
    if not errs:
        return f"{name}: no points"
    med, worst = statistics.median(abs(e) for e in errs), max(abs(e) for e in errs)
    median_bar, worst_bar = TARGETS[name]
    bars = f"target median <= {100 * median_bar:.0f} %" + (
        f", worst <= {100 * worst_bar:.0f} %" if worst_bar is not None else ""
    )
    met = med <= median_bar and (worst_bar is None or worst <= worst_bar)
    return (
        f"{name:9} |err| median {100 * med:5.1f} %  worst {100 * worst:6.1f} %  "
        f"({bars}: {'met' if met else 'NOT met'})"
    )


def print_summaries(title: str, errs: Sequence[Errors]) -> None:
    print(f"{title}: {len(errs)} points")
    print("  " + summary("ITL p50", [e.itl_error for e in errs]))
    print("  " + summary("TTFT p50", [e.ttft_error for e in errs]))
    print("  " + summary("tokens/s", [e.tokens_per_s_error for e in errs]))


def held_out(
    points: Sequence[Point], key: Callable[[Point], str]
) -> list[tuple[str, PerfConstants, list[Errors]]]:
    """For each group of ``key``: the constants refitted on every other point, and the group's errors."""
    out = []
    for group in sorted({key(p) for p in points}):
        c = refit([p for p in points if key(p) != group], use=lambda p: True)
        out.append((group, c, [errors(p, c) for p in points if key(p) == group]))
    return out


def print_held_out(points: Sequence[Point], key: Callable[[Point], str], label: str) -> None:
    everything: list[Errors] = []
    for group, c, errs in held_out(points, key):
        print_summaries(f"{label} {group} held out (refit without it: {brief(c)})", errs)
        everything += errs
    print_summaries(f"\nevery {label} held out in turn", everything)
    print()


def brief(c: PerfConstants) -> str:
    return (
        f"layer {1e6 * c.layer_overhead_s:.1f} us, MoE layer {1e6 * c.moe_layer_overhead_s:.1f} us, "
        f"per seq {1e6 * c.sequence_overhead_s:.1f} us, fp8 {c.fp8_compute_efficiency:.2f}, "
        f"overhead {1e3 * c.request_overhead_s:.1f} ms, prefill {c.prefill_compute_efficiency:.2f}, "
        f"MoE prefill {1e9 * c.moe_prefill_token_s:.0f} ns, wave limit {c.wave_wait_limit:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refit", action="store_true")
    parser.add_argument("--held-out", action="store_true")
    args = parser.parse_args(argv)
    points = load_points()
    if args.held_out:
        print_held_out(points, lambda p: p.case.family, "model family")
        # within a family: a server configuration (precision, max-num-seqs, prompt shape) not fitted on
        print_held_out(points, lambda p: f"{p.case.name}.{p.shape}", "load test")
        gpus = {p.case.gpu for p in points}
        if len(gpus) > 1:
            print_held_out(points, lambda p: p.case.gpu, "GPU")
        else:
            print(
                f"leave-one-GPU-out: every load test ran on {gpus.pop()}; it runs once another GPU's arrive"
            )
        return 0
    c = refit(points) if args.refit else DEFAULT_PERF
    if args.refit:
        print(f"constants fitted on {sorted(CALIBRATION)}: {c}")
    head = f"{'case':19} {'shape':5} {'C':>4} | {'tok/s':>6} {'ours':>6} {'err %':>6} | "
    print(head + f"{'ITL ms':>6} {'ours':>6} {'err %':>6} | {'TTFT ms':>7} {'ours':>7} {'err %':>6} | use")
    held: list[Errors] = []
    for p in points:
        e = errors(p, c)
        use = "calibration" if p.calibration else "prediction"
        if not p.calibration:
            held.append(e)
        print(
            f"{p.case.name:19} {p.shape:5} {p.concurrency:>4} | "
            f"{p.tokens_per_s:>6.0f} {e.tokens_per_s:>6.0f} "
            f"{100 * e.tokens_per_s_error:>+6.1f} | {1000 * p.itl_s:>6.2f} {1000 * e.itl_s:>6.2f} "
            f"{100 * e.itl_error:>+6.1f} | {1000 * p.ttft_s:>7.1f} {1000 * e.ttft_s:>7.1f} "
            f"{100 * e.ttft_error:>+6.1f} | {use}{' (disturbed)' if p.disturbed else ''}"
        )
    print()
    print_summaries("predictions (points outside CALIBRATION)", held)
    print_summaries("all points", [errors(p, c) for p in points])
    within = sum(1 for e in held if abs(e.tokens_per_s_error) <= 0.15 and abs(e.itl_error) <= 0.15)
    print(f"tokens/s and ITL p50 both within 15 %: {within} of {len(held)} predictions")
    steady = [errors(p, c) for p in points if p.steady and not p.calibration]
    print(
        f"measured in a steady window (each level's warm-up and tail left out): "
        f"{sum(p.steady for p in points)} of {len(points)} points"
    )
    if steady:
        print_summaries("steady-window predictions", steady)
    return 0


if __name__ == "__main__":
    sys.exit(main())
