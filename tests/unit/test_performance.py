"""The performance model (planning/speed/performance.py) against the H200 load tests and on its own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from statistics import median

import pytest
import yaml
from benchmarks.calibration.perf_model import DEFAULT_PERF, errors, held_out, load_points, refit
from pydantic import ValidationError

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import resolve_model
from glm_operator.planning.memory.constants import GIB
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import FitInput
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.speed.performance import (
    Speed,
    Workload,
    allreduce_s,
    concurrency_within,
    experts_touched,
    modelled_knee,
    plan_workload,
    predict_speed,
    speed_of_fit,
)
from glm_operator.planning.supply.nodes import parse_gpu_pools

POINTS = load_points()
H200 = find_gpu("NVIDIA-H200")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"
POOLS = tuple(parse_gpu_pools(yaml.safe_load(FIXTURE.read_text())))


def plan(spec: dict) -> Plan:  # type: ignore[type-arg]
    return plan_placement(placement_request_from_spec(spec, POOLS))


def test_the_shipped_constants_are_the_calibration_fit() -> None:
    assert refit(POINTS) == DEFAULT_PERF


def test_held_out_points_against_the_h200() -> None:
    """The load-test points not used for calibration (GLM-4.7-Flash fp8 at 64 and its long prompts, bf16
    at 16 and long prompts at 256's start-up, Qwen3-8B long prompts): ITL p50 median error within 10 %
    and none beyond 25 %; at least six points with both tokens/s and ITL p50 within 15 % (issue 32's
    bar; benchmarks/calibration/perf_model.py prints them all)."""
    held = [errors(p, DEFAULT_PERF) for p in POINTS if not p.calibration and not p.case.speculative_tokens]
    assert len(held) >= 18
    itl = sorted(abs(e.itl_error) for e in held)
    assert itl[len(itl) // 2] <= 0.10 and itl[-1] <= 0.25
    assert sum(1 for e in held if abs(e.tokens_per_s_error) <= 0.15 and abs(e.itl_error) <= 0.15) >= 6


def test_mtp_long_prompts_held_out_against_the_h200() -> None:
    """GLM-4.7-Flash with one MTP draft (synthetic acceptance length 1.8): the speculative step's overhead
    is fitted on the chat shape only; the 4k-prompt shape, held out, has its ITL p50 within 10 % at the
    median (measured 6.1 %) and 30 % at worst (18.6 % at 64 clients). The load test's p50 is the step
    of the median token over its tokens (perf_model.median_token_step)."""
    held = [errors(p, DEFAULT_PERF) for p in POINTS if not p.calibration and p.case.speculative_tokens]
    assert len(held) >= 4
    assert median(abs(e.itl_error) for e in held) <= 0.10
    assert max(abs(e.itl_error) for e in held) <= 0.30


def test_ttft_under_load_against_the_h200() -> None:
    """TTFT p50 (issue 50: 0.35-2.1 s measured at 64-256 clients, 47-70 ms predicted before the queue was
    modelled): the points outside the calibration within 25 % at the median (measured 19.3 %); every point
    at 64 clients or more within 35 % (worst measured 28 %); and refitted without each load test in turn,
    the held-out TTFT median within 33 % (measured 31.1 %), ITL p50 median within 7 % (5.5 %), tokens/s
    median within 14 % (13.2 %). (Before the decode GEMMs took the longer of reads and FLOPs rather than
    their sum: 27.6 %, 6.4 % and 11.4 %; the H100 point of the test below went from +51 % to +13 %.)"""
    held = [errors(p, DEFAULT_PERF) for p in POINTS if not p.calibration]
    assert median(abs(e.ttft_error) for e in held) <= 0.25
    loaded = [errors(p, DEFAULT_PERF) for p in POINTS if p.concurrency >= 64]
    assert len(loaded) >= 10 and max(abs(e.ttft_error) for e in loaded) <= 0.35
    out = [e for _, _, errs in held_out(POINTS, lambda p: f"{p.case.name}.{p.shape}") for e in errs]
    assert len(out) == len(POINTS)
    assert median(abs(e.ttft_error) for e in out) <= 0.33
    assert median(abs(e.itl_error) for e in out) <= 0.07
    assert median(abs(e.tokens_per_s_error) for e in out) <= 0.14


def test_a_dense_decode_at_128_on_the_h100_is_bound_by_its_weight_reads_not_reads_plus_flops() -> None:
    """Issue 50's held-out H100 point: GLM-4-9B-0414 bf16, vLLM 0.26, dummy weights, 128 clients of
    512 -> 128 tokens, ITL p50 10.1 ms measured (its filer's table; no log of it is kept here). Adding
    the GEMMs' FLOP time to the weight reads predicted 14.7 ms (15.3 with the constants of 2026-12-06);
    a GEMM streams the weights while it multiplies, so the step takes the longer of the two: within
    15 % now (11.4 ms), and one sequence is still bound by the 18.8 GB of weights (~7.6 ms)."""
    model = resolve_model("zai-org/GLM-4-9B-0414")
    h100 = find_gpu("H100")
    fit = estimate_fit(
        FitInput(model=model, gpu_memory_gib=h100.memory_gib, max_model_len=8192, max_num_seqs=256)
    )
    busy = speed_of_fit(fit, model.architecture, h100, Workload(128, 512, 128))
    lone = speed_of_fit(fit, model.architecture, h100, Workload(1, 512, 128))
    assert busy and lone
    assert busy.itl_s == pytest.approx(0.0101, rel=0.15)
    assert lone.itl_s == pytest.approx(0.0076, rel=0.05)


def test_ttft_grows_with_the_clients_and_the_prompt_and_falls_with_the_token_budget() -> None:
    arch, fit = _flash_fit(seqs=256, batched_tokens=8192)

    def ttft(clients: int, prompt: int, budget_fit=fit) -> float:  # type: ignore[no-untyped-def]
        speed = speed_of_fit(budget_fit, arch, H200, Workload(clients, prompt, 128))
        assert speed is not None
        return speed.ttft_s

    by_clients = [ttft(n, 512) for n in (1, 4, 16, 64, 256)]
    assert by_clients == sorted(by_clients) and by_clients[-1] > 10 * by_clients[0]
    by_prompt = [ttft(16, n) for n in (512, 4096, 16384)]
    assert by_prompt == sorted(by_prompt) and by_prompt[-1] > 4 * by_prompt[0]
    # a larger budget prefills more of the queued prompts a step: fewer steps of decodes in between
    _, small = _flash_fit(seqs=256, batched_tokens=2048)
    _, large = _flash_fit(seqs=256, batched_tokens=16384)
    assert ttft(16, 4096, small) > ttft(16, 4096, fit) > ttft(16, 4096, large)
    assert ttft(1, 16384, small) > ttft(1, 16384, large)  # a lone long prompt in chunks


def test_clients_beyond_max_num_seqs_wait_for_a_slot() -> None:
    arch, fit = _flash_fit(seqs=256, batched_tokens=8192)
    at = {n: speed_of_fit(fit, arch, H200, Workload(n, 512, 128), max_num_seqs=16) for n in (16, 32)}
    assert at[16] is not None and at[32] is not None
    assert at[32].output_tokens_per_s == pytest.approx(at[16].output_tokens_per_s)  # no more running
    # each waits for a whole request of another client: its TTFT and decode
    assert at[32].ttft_s > 2 * at[16].ttft_s + 100 * at[16].itl_s


def test_the_knee_respects_a_ttft_target() -> None:
    arch, fit = _flash_fit(seqs=256, batched_tokens=8192)

    def speed_at(n: int):  # type: ignore[no-untyped-def]
        return speed_of_fit(fit, arch, H200, plan_workload(n, 32768))

    free = modelled_knee(speed_at, 256)
    top = free.concurrency or 256
    target = 0.5 * 1000 * speed_at(top).ttft_s
    held = modelled_knee(speed_at, 256, ttft_ms=target)
    assert held.concurrency is not None and held.concurrency < top
    assert 1000 * speed_at(held.concurrency).ttft_s <= target < 1000 * speed_at(held.concurrency + 1).ttft_s
    assert "spec.slo's" in held.reason
    assert modelled_knee(speed_at, 256, ttft_ms=10**6) == free  # a target every level meets changes nothing


def _flash_fit(quantization: str = "auto", seqs: int = 64, batched_tokens: int | None = None):  # type: ignore[no-untyped-def]
    model = resolve_model("zai-org/GLM-4.7-Flash")
    fit = estimate_fit(
        FitInput(
            model=model,
            gpu_memory_gib=H200.memory_gib,
            max_model_len=32768,
            max_num_seqs=seqs,
            quantization=quantization,
            max_num_batched_tokens=batched_tokens,
        )
    )
    return model.architecture, fit


def test_uniform_routing_reads_more_experts_as_the_batch_grows() -> None:
    arch, fit = _flash_fit()
    assert experts_touched(arch, 1) == pytest.approx(4 / 64)
    assert experts_touched(arch, 64) > 0.97
    assert experts_touched(arch, 64, same_experts=True) == pytest.approx(4 / 64)
    one = speed_of_fit(fit, arch, H200, Workload(1, 512, 128))
    many = speed_of_fit(fit, arch, H200, Workload(64, 512, 128))
    alike = speed_of_fit(fit, arch, H200, Workload(64, 512, 128), same_experts=True)
    assert one and many and alike
    assert many.itl_s > 2 * alike.itl_s > 2 * one.itl_s  # the experts dominate a real batch of 64
    assert many.output_tokens_per_s > 10 * one.output_tokens_per_s


def test_fp8_gemms_run_at_the_measured_fp8_rate_only_on_fp8_tensor_cores_and_no_figures_give_none() -> None:
    # the H200 runs (dummy weights: every token to the same experts, so the GEMMs outlast the reads at a
    # batch of 256): on-the-fly fp8 decodes slower than bf16 (19.1 vs 16.6 ms ITL), so the calibrated fp8
    # rate (fp8_compute_efficiency x FP8 TFLOPS) is below the bf16 one; a GPU without FP8 tensor cores runs
    # the fp8 weights' GEMMs at its bf16 rate (Marlin W8A16)
    arch, fit = _flash_fit("fp8")
    big_batch = Workload(256, 512, 128)
    assert (
        H200.fp8_tflops * DEFAULT_PERF.fp8_compute_efficiency
        < H200.bf16_tflops * DEFAULT_PERF.compute_efficiency
    )
    h200 = speed_of_fit(fit, arch, H200, big_batch, same_experts=True)
    marlin = speed_of_fit(fit, arch, replace(H200, fp8=False), big_batch, same_experts=True)
    assert h200 is not None and marlin is not None and marlin.itl_s < h200.itl_s
    # with real routing a batch of 256 reads every expert: the step is bound by the reads either way
    spread = speed_of_fit(fit, arch, H200, big_batch)
    spread_marlin = speed_of_fit(fit, arch, replace(H200, fp8=False), big_batch)
    assert spread is not None and spread_marlin is not None
    assert spread.itl_s == pytest.approx(spread_marlin.itl_s) and spread.itl_s > h200.itl_s
    # prefill too: on-the-fly FP8 prefills 4k prompts ~1.6x slower on the H200 (benchmarks/gpu_truth/perf),
    # so FP8 GEMMs prefill at the share of the bf16 rate that decode measures; Marlin at the bf16 rate
    one = Workload(1, 4096, 16)
    a, b = speed_of_fit(fit, arch, H200, one), speed_of_fit(fit, arch, replace(H200, fp8=False), one)
    assert a is not None and b is not None
    assert a.ttft_s - a.itl_s > b.ttft_s - b.itl_s
    assert speed_of_fit(fit, arch, replace(H200, memory_bandwidth_gbs=0.0), big_batch) is None


def test_the_plan_workload_fits_the_context() -> None:
    assert plan_workload(64, 32768) == Workload(64, 512, 128)
    assert plan_workload(8, 300) == Workload(8, 172, 128)


def test_concurrency_within_finds_the_largest_batch_that_meets_the_targets() -> None:
    arch, fit = _flash_fit()

    def speed_at(n: int):  # type: ignore[no-untyped-def]
        return speed_of_fit(fit, arch, H200, plan_workload(n, 32768))

    itl_at_16 = 1000 * speed_at(16).itl_s
    seqs, met = concurrency_within(1, 256, speed_at, itl_at_16, None)
    assert met and seqs >= 16
    assert 1000 * speed_at(seqs + 1).itl_s > itl_at_16  # the next one misses
    assert concurrency_within(4, 256, speed_at, 0.001, None) == (4, False)
    assert concurrency_within(1, 8, speed_at, None, 10**6) == (8, True)


AIR = {
    "model": {"id": "zai-org/GLM-4.5-Air"},
    "quantization": "bf16",
    "contextLength": 32768,
    "minConcurrency": 4,
}


def _h100(plan):  # type: ignore[no-untyped-def]
    return next(v for v in plan.variants if v.gpu_product == "NVIDIA-H100-80GB-HBM3")


def test_spec_slo_lowers_max_num_seqs_until_the_prediction_meets_it_and_says_so() -> None:
    # TP 4 pinned: with a free TP an ITL target may pick TP 8 at the full batch instead (ranking rule 3)
    tp4 = {**AIR, "gpu": {"tensorParallelSize": 4}}
    free = _h100(plan(tp4))
    assert free.speed is not None and free.max_num_seqs > 16
    target = round(0.8 * 1000 * free.speed.itl_s, 1)  # tighter than what the KV-sized batch gives
    held = _h100(plan({**tp4, "slo": {"itlMilliseconds": target}}))
    assert 4 <= held.max_num_seqs < free.max_num_seqs
    assert held.speed is not None and 1000 * held.speed.itl_s <= target
    assert any(n.startswith("spec.slo: max-num-seqs") for n in held.notes)
    impossible = _h100(plan({**AIR, "slo": {"itlMilliseconds": 0.5, "ttftMilliseconds": 100000}}))
    assert impossible.max_num_seqs == 4  # minConcurrency is kept
    note = next(n for n in impossible.notes if n.startswith("spec.slo not met"))
    assert "ITL 0.5 ms" in note and "TTFT" not in note.split("miss")[1] and "fix:" in note
    pinned = _h100(plan({**AIR, "slo": {"itlMilliseconds": 0.5}, "serving": {"maxNumSeqs": 64}}))
    assert pinned.max_num_seqs == 64 and not any("spec.slo" in n for n in pinned.notes)


def test_a_ttft_target_lowers_max_num_seqs_and_the_knee_now_that_prompts_queue() -> None:
    tp4 = {**AIR, "gpu": {"tensorParallelSize": 4}}
    free = _h100(plan(tp4))
    assert free.speed is not None
    target = round(0.5 * 1000 * free.speed.ttft_s)  # half what the KV-sized batch's queue gives
    held = _h100(plan({**tp4, "slo": {"ttftMilliseconds": target}}))
    assert held.speed is not None and 1000 * held.speed.ttft_s <= target
    assert 4 <= held.max_num_seqs < free.max_num_seqs
    assert 1 <= held.knee_concurrency <= held.max_num_seqs
    # serving.maxNumSeqs pinned: spec.slo is ignored, the knee's TTFT cap too
    pinned = _h100(plan({**tp4, "slo": {"ttftMilliseconds": 1}, "serving": {"maxNumSeqs": 64}}))
    unpinned_knee = _h100(plan({**tp4, "serving": {"maxNumSeqs": 64}})).knee_concurrency
    assert pinned.max_num_seqs == 64 and pinned.knee_concurrency == unpinned_knee


def test_spec_slo_values_are_checked_by_the_schema() -> None:
    with pytest.raises(ValidationError, match=r"itlMilliseconds|itl_milliseconds"):
        plan({**AIR, "slo": {"itlMilliseconds": 0}})


def test_the_precisions_are_ranked_by_predicted_tokens_per_gpu() -> None:
    """GLM-4.5-Air on the fixture's H100s: auto plans bf16 TP4; the ranking also lists fp8 TP2 and the
    int4 checkpoint, best predicted tokens/s per GPU first, each planned like the pinned precision."""
    from glm_operator.planning.placement.alternatives import rank_precisions

    request = placement_request_from_spec({**AIR, "quantization": "auto"}, POOLS)
    ranked = rank_precisions(request)
    assert {a.quantization for a in ranked} >= {"bf16", "fp8"}
    per_gpu = [a.tokens_per_s_per_gpu for a in ranked]
    assert per_gpu == sorted(per_gpu, reverse=True) and per_gpu[-1] > 0
    by_precision = {a.quantization: a.variant for a in ranked}
    # each planned like the pinned precision: the same GPU type and shape as that plan's first variant
    for precision in ("bf16", "fp8"):
        pinned = plan({**AIR, "quantization": precision}).variants[0]
        shape = (pinned.gpu_product, pinned.tensor_parallel_size, pinned.decode_context_parallel_size)
        got = by_precision[precision]
        assert (got.gpu_product, got.tensor_parallel_size, got.decode_context_parallel_size) == shape


def test_the_modelled_knee_follows_the_load_test_rule_and_caps_at_max_num_seqs() -> None:
    # GLM-4-9B bf16 on an A100 at max-num-seqs 256: the KV and GEMM time of the batch outgrow the
    # weights read, so throughput flattens before 256.
    a100 = find_gpu("NVIDIA-A100-SXM4-80GB")
    p = plan({"model": {"id": "zai-org/glm-4-9b-chat"}, "gpu": {"products": [a100.name]}})
    (v,) = p.variants
    assert v.max_num_seqs == 256 and 1 < v.knee_concurrency < v.max_num_seqs
    arch = resolve_model("zai-org/glm-4-9b-chat").architecture

    def speed_at(n: int) -> Speed:
        speed = predict_speed(
            arch, 1, 1, v.weights_gib_per_gpu * GIB, 2.0, v.kv_cache_bytes_per_token_per_gpu,
            plan_workload(n, v.max_model_len), a100, fp8=False,
        )  # fmt: skip
        assert speed is not None
        return speed

    k = v.knee_concurrency
    low, high = speed_at(k), speed_at(2 * k)
    assert high.output_tokens_per_s / low.output_tokens_per_s - 1 < 0.10  # doubling past it buys < 10 %
    assert high.itl_s / low.itl_s - 1 > 0.20  # and costs > 20 % ITL
    before = speed_at(k // 2)
    assert low.output_tokens_per_s / before.output_tokens_per_s - 1 >= 0.10  # the step before it still paid
    assert modelled_knee(speed_at, k).concurrency is None  # not reached up to the knee itself
    assert modelled_knee(speed_at, 1).concurrency is None  # one level is not a sweep
    assert modelled_knee(lambda n: None, 256).concurrency is None  # a GPU without speed figures
    # every variant of the fixture's plans: the knee is within [1, max-num-seqs]
    for model in ("GLM-4.5-Air", "GLM-4.7-Flash", "GLM-4-32B-0414"):
        for variant in plan({"model": {"id": model}}).variants:
            assert 1 <= variant.knee_concurrency <= variant.max_num_seqs * variant.data_parallel_size


def test_tensor_parallel_steps_pay_the_all_reduce_and_pcie_pays_more() -> None:
    air = resolve_model("zai-org/GLM-4.5-Air").architecture
    h100, l40s = find_gpu("H100"), find_gpu("L40S")
    assert allreduce_s(air, 64, 1, h100, DEFAULT_PERF) == 0.0
    nvlink = allreduce_s(air, 64, 4, h100, DEFAULT_PERF)
    # 2 all-reduces per layer, each at least the latency
    assert nvlink >= 2 * air.num_layers * DEFAULT_PERF.allreduce_latency_s
    assert allreduce_s(air, 64, 4, l40s, DEFAULT_PERF) > nvlink  # PCIe
    assert allreduce_s(air, 4096, 4, h100, DEFAULT_PERF) > nvlink  # a prefill's tokens move more bytes
