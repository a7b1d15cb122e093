"""The performance model (planning/performance.py) against the H200 load tests and on its own."""

from __future__ import annotations

from dataclasses import replace

import pytest
from benchmarks.perf_model import DEFAULT_PERF, errors, load_points, refit

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import resolve_model
from glm_operator.planning.fit import FitInput, estimate_fit
from glm_operator.planning.performance import Workload, experts_touched, plan_workload, speed_of_fit

POINTS = load_points()
H200 = find_gpu("NVIDIA-H200")


def test_the_shipped_constants_are_the_calibration_fit() -> None:
    assert refit(POINTS) == DEFAULT_PERF


@pytest.mark.parametrize(
    "point",
    [p for p in POINTS if not p.calibration],
    ids=lambda p: f"{p.case.name}-{p.shape}-{p.concurrency}",
)
def test_held_out_itl_within_15_percent_of_the_h200(point: object) -> None:
    """ITL p50 of every load-test point not used for calibration (GLM-4.7-Flash fp8 at max-num-seqs 64,
    both shapes) within 15 % of the prediction."""
    _, _, _, itl_error = errors(point, DEFAULT_PERF)  # type: ignore[arg-type]
    assert abs(itl_error) <= 0.15


def _flash_fit(quantization: str = "auto"):  # type: ignore[no-untyped-def]
    model = resolve_model("zai-org/GLM-4.7-Flash")
    fit = estimate_fit(
        FitInput(
            model=model,
            gpu_memory_gib=H200.memory_gib,
            max_model_len=32768,
            max_num_seqs=64,
            quantization=quantization,
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


def test_fp8_gains_only_where_the_gpu_has_fp8_tensor_cores_and_a_gpu_without_figures_gets_none() -> None:
    arch, fit = _flash_fit("fp8")
    long_prompts = Workload(64, 4096, 128)
    h200 = speed_of_fit(fit, arch, H200, long_prompts)
    assert h200 is not None
    no_fp8 = replace(H200, fp8=False)
    slower = speed_of_fit(fit, arch, no_fp8, long_prompts)
    assert slower is not None and slower.output_tokens_per_s < h200.output_tokens_per_s
    assert speed_of_fit(fit, arch, replace(H200, memory_bandwidth_gbs=0.0), long_prompts) is None


def test_the_plan_workload_fits_the_context() -> None:
    assert plan_workload(64, 32768) == Workload(64, 512, 128)
    assert plan_workload(8, 300) == Workload(8, 172, 128)
