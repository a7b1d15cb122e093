"""The performance model (glm_operator/planning/speed/performance.py) against the H200 load tests.

Usage: .venv/bin/python benchmarks/calibration/perf_model.py [--refit]

Reads benchmarks/gpu_truth/perf/CASE.SHAPE.json (``glm-operator loadtest -o json`` run on the device
against the case's vLLM, see benchmarks/gpu_truth/README.md), plans each case with the fit model and
prints, per (case, shape, concurrency), measured and predicted output tokens/s and ITL p50 with the
error. Points of CALIBRATION fit the constants (``--refit`` fits them again and prints them: what
``PerfConstants`` ships); every other point is a prediction, summarised apart.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from benchmarks.calibration.fitting import least_squares  # noqa: E402
from benchmarks.gpu_truth.cases import BY_NAME, Case  # noqa: E402
from glm_operator.catalog.gpus import find_gpu  # noqa: E402
from glm_operator.planning.memory.fit import estimate_fit  # noqa: E402
from glm_operator.planning.memory.instance import FitInput, FitResult  # noqa: E402
from glm_operator.planning.speed.performance import (  # noqa: E402
    DEFAULT_PERF,
    PerfConstants,
    StepTerms,
    Workload,
    speed_of_fit,
    step_terms_of_fit,
)

PERF = REPO / "benchmarks" / "gpu_truth" / "perf"
GPU = find_gpu("NVIDIA-H200")
# the points the constants are fitted on: GLM-4.7-Flash bf16 at max-num-seqs 64 (both shapes) and 256
# (chat), on-the-fly fp8 at 256 (chat), and the dense Qwen3-8B (chat): per-layer overheads differ between
# MoE and dense layers, the per-sequence cost shows at large batches, fp8 GEMMs only in fp8 runs
CALIBRATION = {
    ("flash-s64-perf", "chat"),
    ("flash-s64-perf", "long"),
    ("flash-c32k-perf", "chat"),
    ("flash-fp8online", "chat"),
    ("qwen3-8b-s16-b2k", "chat"),
}


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

    @property
    def calibration(self) -> bool:
        return (self.case.name, self.shape) in CALIBRATION


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
                    float(level["itl_p50_s"]), float(level["ttft_p50_s"]),
                )
            )  # fmt: skip
    return points


@functools.cache
def plan(case: Case) -> FitResult:
    return estimate_fit(
        FitInput(
            model=case.resolved(),
            gpu_memory_gib=GPU.memory_gib,
            vllm_version=(0, 26, 0),
            max_model_len=case.context_length,
            gpu_memory_utilization=case.gpu_memory_utilization,
            max_num_seqs=case.max_num_seqs,
            kv_cache_dtype=case.kv_cache_dtype,
            quantization=case.quantization,
            max_num_batched_tokens=case.max_num_batched_tokens,
        )
    )


def errors(p: Point, c: PerfConstants) -> tuple[float, float, float, float]:
    fit = plan(p.case)
    arch = p.case.resolved().architecture
    workload = Workload(p.concurrency, p.input_tokens, p.output_tokens)
    # dummy weights route every token of a GLM model to the same experts (performance.predict_speed)
    speed = speed_of_fit(fit, arch, GPU, workload, c, same_experts=p.case.family.startswith("glm"))
    assert speed is not None
    return (
        speed.output_tokens_per_s,
        speed.itl_s,
        (speed.output_tokens_per_s - p.tokens_per_s) / p.tokens_per_s,
        (speed.itl_s - p.itl_s) / p.itl_s,
    )


def refit(points: list[Point]) -> PerfConstants:
    """``request_overhead_s``: the median TTFT p50 of the calibration runs at concurrency 1 (their
    prefill is a few ms). The step's constants: ITL p50 is linear in them (``StepTerms``), so a
    least-squares fit of the calibration points' ITL, each row weighted by 1 / its measured ITL
    (relative errors), with the bandwidth efficiency fixed at 0.9 (a decode GEMV reaches ~90 % of HBM
    peak at most; the read time and the per-layer overheads are otherwise hard to tell apart at the
    small batches where reads dominate). Rounded: overheads to 0.1 us, efficiencies to 0.01."""
    cal = [p for p in points if p.calibration]
    req = round(statistics.median(p.ttft_s for p in cal if p.concurrency == 1), 3)
    bw, comp = DEFAULT_PERF.bandwidth_efficiency, DEFAULT_PERF.compute_efficiency
    rows, rhs = [], []
    for p in cal:
        t = step_terms(p)
        rows.append([v / p.itl_s for v in (t.layers, t.moe_layers, t.gemm8_s, t.sequences)])
        rhs.append((p.itl_s - t.read_s / bw - t.gemm16_s / comp) / p.itl_s)
    layer, moe, k8, seq = least_squares(rows, rhs)
    return replace(
        DEFAULT_PERF,
        layer_overhead_s=round(layer, 7),
        moe_layer_overhead_s=round(moe, 7),
        fp8_compute_efficiency=round(1 / k8, 2),
        sequence_overhead_s=round(seq, 7),
        request_overhead_s=req,
    )


def step_terms(p: Point) -> StepTerms:
    workload = Workload(p.concurrency, p.input_tokens, p.output_tokens)
    arch = p.case.resolved().architecture
    return step_terms_of_fit(plan(p.case), arch, GPU, workload, same_experts=p.case.family.startswith("glm"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--refit", action="store_true")
    args = parser.parse_args(argv)
    points = load_points()
    c = refit(points) if args.refit else DEFAULT_PERF
    if args.refit:
        print(f"constants fitted on {sorted(CALIBRATION)}: {c}")
    head = f"{'case':20} {'shape':5} {'C':>4} | {'tok/s':>7} {'ours':>7} {'err %':>6} | "
    print(head + f"{'ITL ms':>6} {'ours':>6} {'err %':>6} | use")
    held_tok, held_itl = [], []
    for p in points:
        tok, itl, e_tok, e_itl = errors(p, c)
        use = "calibration" if p.calibration else "prediction"
        if not p.calibration:
            held_tok.append(abs(e_tok))
            held_itl.append(abs(e_itl))
        print(
            f"{p.case.name:20} {p.shape:5} {p.concurrency:>4} | {p.tokens_per_s:>7.0f} {tok:>7.0f} "
            f"{100 * e_tok:>+6.1f} | {1000 * p.itl_s:>6.2f} {1000 * itl:>6.2f} {100 * e_itl:>+6.1f} | {use}"
        )
    if held_tok:
        within = sum(1 for a, b in zip(held_tok, held_itl, strict=True) if a <= 0.15 and b <= 0.15)
        tok_text = f"median {100 * statistics.median(held_tok):.1f} % worst {100 * max(held_tok):.1f} %"
        itl_text = f"median {100 * statistics.median(held_itl):.1f} % worst {100 * max(held_itl):.1f} %"
        print(f"\npredictions: {len(held_tok)} points; tokens/s |err| {tok_text}; ITL p50 |err| {itl_text}")
        print(f"both within 15 %: {within} of {len(held_tok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
