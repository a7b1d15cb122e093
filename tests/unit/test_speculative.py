"""MTP speculative decoding: what the drafter costs in memory, what it buys in speed, and what the planner
serves (planning/memory, planning/speed/speculative.py, planning/placement)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import resolve_model
from glm_operator.planning.memory.constants import GIB
from glm_operator.planning.memory.cuda_graphs import newer_cudagraph_capture_sizes
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import FitInput, FitResult
from glm_operator.planning.memory.parallel import mtp_layers
from glm_operator.planning.memory.weights import mtp_weights_bytes
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Variant
from glm_operator.planning.speed.performance import DEFAULT_PERF, Workload, speed_of_fit
from glm_operator.planning.speed.speculative import PUBLISHED_ACCEPTANCE, Acceptance, acceptance_for
from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools

H200 = find_gpu("NVIDIA-H200")
FLASH = resolve_model("zai-org/GLM-4.7-Flash")


def flash_fit(tokens: int, version: str = "0.33.0") -> FitResult:
    return estimate_fit(
        FitInput(
            model=FLASH,
            gpu_memory_gib=H200.memory_gib,
            max_model_len=32768,
            max_num_seqs=64,
            num_speculative_tokens=tokens,
            vllm_version=tuple(int(x) for x in version.split(".")),  # type: ignore[arg-type]
        )
    )


def nodes(product: str, gpus: int = 8) -> tuple[GpuPool, ...]:
    return parse_gpu_pools(
        [
            {
                "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": product}},
                "status": {
                    "allocatable": {"nvidia.com/gpu": str(gpus)},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        ]
    )


def served(spec: dict[str, Any], product: str = "NVIDIA-H200") -> Variant:
    p = plan_placement(placement_request_from_spec(spec, nodes(product)))
    assert p.fits, p.reason
    return p.variants[0]


# --- acceptance -------------------------------------------------------------------------------------------


def test_tokens_per_step_add_the_per_position_acceptance() -> None:
    glm4 = PUBLISHED_ACCEPTANCE["glm4_moe_lite"]
    assert glm4.expected_tokens(0) == 1.0
    assert glm4.expected_tokens(1) == pytest.approx(1.80)
    assert glm4.expected_tokens(3) == pytest.approx(1.85)  # positions past the table accept nothing
    assert glm4.rate(1) == pytest.approx(0.80)
    assert Acceptance((0.9, 0.6), "x").rate(2) == pytest.approx(0.75)


def test_a_measured_rate_holds_at_every_position() -> None:
    arch = FLASH.architecture
    measured = acceptance_for(arch, 3, 0.8)
    assert measured.per_position == pytest.approx((0.8, 0.64, 0.512))
    assert measured.expected_tokens(3) == pytest.approx(2.952)
    assert acceptance_for(arch, 3, None) is PUBLISHED_ACCEPTANCE["glm4_moe_lite"]


# --- memory -----------------------------------------------------------------------------------------------


def test_the_drafter_takes_its_layer_its_kv_layer_and_capture_sizes_of_its_queries() -> None:
    arch = FLASH.architecture
    assert mtp_layers(arch) == 1
    plain, one = flash_fit(0), flash_fit(1)
    draft = mtp_weights_bytes(arch, 1, "bf16", None)
    # one MoE decoder layer (64 experts of 3 x 2048 x 1536 bf16 = 1.13 GiB) plus the bf16 eh_proj
    assert 1.1 * GIB < draft < 1.3 * GIB
    assert one.weights_gib_per_gpu - plain.weights_gib_per_gpu == pytest.approx(draft / GIB, abs=0.02)
    # its KV pages ride in the target's: one layer more per token of 47
    assert one.kv_cache_bytes_per_token_per_gpu == pytest.approx(
        plain.kv_cache_bytes_per_token_per_gpu * 48 / 47, rel=0.01
    )
    assert one.kv_cache_tokens < plain.kv_cache_tokens
    # V2 (0.33) captures request counts times the query length as well; V1 (0.26) rounds to multiples of it
    v2 = newer_cudagraph_capture_sizes(64, 8192, 9.0, decode_query_len=2)
    assert 256 in v2 and max(v2) == 256
    v1 = newer_cudagraph_capture_sizes(64, 8192, 9.0, decode_query_len=4, round_to_query=True)
    assert all(s % 4 == 0 for s in v1)


def test_no_drafter_for_a_model_without_mtp_layers() -> None:
    dense = resolve_model("zai-org/GLM-4-9B-0414")
    assert mtp_layers(dense.architecture) == 0
    assert mtp_weights_bytes(dense.architecture, 1, "bf16", None) == 0.0
    spec = {
        "model": {"id": "zai-org/GLM-4-9B-0414"},
        "contextLength": 8192,
        "speculativeDecoding": {"mode": "Auto"},
    }
    assert served(spec).speculative_tokens == 0


# --- speed ------------------------------------------------------------------------------------------------


def test_one_draft_on_flash_gains_little_on_one_h200_as_measured() -> None:
    """GLM-4.7-Flash at one client on the H200 (vLLM 0.26, benchmarks/gpu_truth/perf/flash-s64-perf and
    flash-mtp1-s64-perf, chat): ITL p50 5.13 ms plain, 5.18 ms with one draft at acceptance length 1.8 --
    the speculative step's CPU overhead eats what 1.8 tokens a step buy on a 3B-active model."""
    arch = FLASH.architecture
    one = Workload(1, 512, 128)
    plain = speed_of_fit(flash_fit(0), arch, H200, one)
    mtp1 = speed_of_fit(flash_fit(1), arch, H200, one, acceptance_rate=0.8)
    assert plain is not None and mtp1 is not None
    assert 0.85 < plain.itl_s / mtp1.itl_s < 1.25
    # without that overhead the model would promise most of 1.8x
    free = speed_of_fit(
        flash_fit(1),
        arch,
        H200,
        one,
        replace(DEFAULT_PERF, speculative_step_overhead_s=0.0),
        acceptance_rate=0.8,
    )
    assert free is not None and plain.itl_s / free.itl_s > 1.4


def test_drafts_that_are_never_accepted_only_cost() -> None:
    arch = FLASH.architecture
    one = Workload(1, 512, 128)
    plain = speed_of_fit(flash_fit(0), arch, H200, one)
    useless = speed_of_fit(flash_fit(3), arch, H200, one, acceptance_rate=0.01)
    published = speed_of_fit(flash_fit(3), arch, H200, one)
    one_draft = speed_of_fit(flash_fit(1), arch, H200, one)
    assert plain and useless and published and one_draft
    assert useless.itl_s > plain.itl_s
    # GLM-4.x's second and third drafts are rarely accepted: three drafts are slower than one
    assert published.itl_s > one_draft.itl_s


def test_a_high_measured_rate_makes_more_drafts_pay() -> None:
    arch = FLASH.architecture
    one = Workload(1, 512, 128)
    k1 = speed_of_fit(flash_fit(1), arch, H200, one, acceptance_rate=0.9)
    k3 = speed_of_fit(flash_fit(3), arch, H200, one, acceptance_rate=0.9)
    assert k1 and k3 and k3.itl_s < k1.itl_s


# --- the planner --------------------------------------------------------------------------------------------

FLASH_SPEC: dict[str, Any] = {
    "model": {"id": "zai-org/GLM-4.7-Flash"},
    "contextLength": 32768,
    "minConcurrency": 8,
}


def test_off_serves_no_drafter() -> None:
    v = served(FLASH_SPEC)
    assert v.speculative_tokens == 0
    assert all(c.speculative_tokens == 0 for c in v.considered)


def test_auto_drafts_one_token_on_glm4_as_the_published_recipes_do() -> None:
    v = served({**FLASH_SPEC, "speculativeDecoding": {"mode": "Auto"}})
    assert v.speculative_tokens == 1
    by_shape = {c.shape: c for c in v.considered}
    plain, mtp = by_shape["bf16 TP=1"], by_shape["bf16 TP=1 + MTP=1"]
    assert mtp.chosen and not plain.chosen
    assert mtp.speed and plain.speed and mtp.speed.itl_s < plain.speed.itl_s
    assert "fewer output tokens/s per GPU" in plain.lost


def test_auto_with_a_high_measured_rate_drafts_more() -> None:
    v = served({**FLASH_SPEC, "speculativeDecoding": {"mode": "Auto", "acceptanceRate": 0.9}})
    assert v.speculative_tokens >= 2


def test_on_with_pinned_tokens_serves_them() -> None:
    v = served({**FLASH_SPEC, "speculativeDecoding": {"mode": "On", "numSpeculativeTokens": 2}})
    assert v.speculative_tokens == 2
    assert {c.speculative_tokens for c in v.considered} == {2}
