"""What "Model loading took" counts beyond the parameters (planning/memory/load.py), against the H200 loads.

The load traces of benchmarks/gpu_truth (the memtrace plugin's ``load_model left`` lines, committed in
``logs/loads/`` and in the Qwen2.5 / Qwen3-8B V1 logs) list every block the load left allocated by site;
the planner's weights must match vLLM's logged figure on every H200 start-up."""

from __future__ import annotations

import json
import re

import pytest
from benchmarks.calibration.fit_truth import newer_engine_startups
from benchmarks.gpu_truth.cases import BY_NAME, LOGS
from benchmarks.gpu_truth.logparse import read_log

from glm_operator.catalog.models import resolve_model
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import GpuFigures, fit_input
from glm_operator.planning.memory.layers import layer_kinds
from glm_operator.planning.memory.load import (
    DEEP_GEMM_WORKSPACE_BYTES,
    MIB,
    allocator_waste_bytes,
    rope_cache_bytes,
    router_fp32_extra_bytes,
    weight_tensor_sizes,
)
from glm_operator.planning.memory.weights import weights_bytes_per_stage
from glm_operator.planning.releases import VllmEngine

QWEN25_7B = BY_NAME["qwen25-7b-v1-b2k"]


def _sizes(case_name: str) -> list[float]:
    arch = BY_NAME[case_name].resolved().architecture
    return weight_tensor_sizes(arch, 1, layer_kinds(arch), 0, True, True, 2.0)


def test_the_allocator_rounds_qwen25_7b_weights_as_its_loads_show() -> None:
    """Qwen2.5-7B's 14,533.6 MiB of tensors load as 14.29 GiB under max_split_size_mb:20 (0.22+: each
    block of 20 MiB or more whole, rounded to 2 MiB) and as 14.25 GiB on 0.19 (rests above 1 MiB split)."""
    sizes = _sizes("qwen25-7b-v1-b2k")
    assert (
        allocator_waste_bytes(sizes, scoped_max_split=True) == 99 * MIB
    )  # 28 x (1 + 0.5 + 0.5 + 1.5) + 2 x 0.5
    assert allocator_waste_bytes(sizes, scoped_max_split=False) == 57 * MIB  # 28 x (1 + 0.5 + 0.5) + 2 x 0.5
    # Qwen3-8B's tensors are whole 2 MiB multiples but for the 1187 MiB embedding and LM head
    assert allocator_waste_bytes(_sizes("qwen3-8b-v1-b8k"), scoped_max_split=True) == 2 * MIB
    arch = QWEN25_7B.resolved().architecture

    def loaded(version: tuple[int, int, int]) -> str:
        fit = estimate_fit(
            fit_input(QWEN25_7B.resolved(), GpuFigures(139.8), VllmEngine(version), max_model_len=2048)
        )
        return f"{fit.weights_gib_per_gpu:.2f}"

    assert loaded((0, 26, 0)) == "14.29" and loaded((0, 24, 0)) == "14.29"  # the H200 and the RTX 4090 logs
    assert loaded((0, 19, 0)) == "14.25"  # llmdp-qwen25-7b-tp1 (H100)
    # the trace's parameters: 14,525.6 MiB, the q/k/v biases (0.25 MiB) included
    assert weights_bytes_per_stage(arch, 1, 1, "bf16", None)[0] / MIB == pytest.approx(14525.6, abs=0.1)


def test_small_tensors_are_packed_and_a_request_takes_a_cached_rest() -> None:
    # three 6 MiB tensors share one 20 MiB segment: the last takes the 8 MiB rest, which is split (2 MiB left)
    assert allocator_waste_bytes([6 * MIB] * 3, scoped_max_split=True) == 0
    # a 19.5 MiB request (below max_split) gets a 20 MiB segment whose 0.5 MiB rest is not split off
    assert allocator_waste_bytes([19.5 * MIB], scoped_max_split=True) == MIB // 2
    # 1 MiB or less: the small pool, nothing counted
    assert allocator_waste_bytes([0.75 * MIB] * 10, scoped_max_split=True) == 0


LOAD_LINE = re.compile(r"gpu_truth memtrace:\s+(?:buffer\s+)?([\d.]+) MiB\s+(.*)")


def _load_lines(path_name: str) -> list[tuple[float, str]]:
    path = LOGS / "loads" / f"{path_name}.log.gz"
    if not path.exists():
        path = LOGS / f"{path_name}.log.gz"
    text = read_log(path)
    start = text.index("load_model left")
    block = text[start : text.index("profile_run peak") if "profile_run peak" in text else len(text)]
    return [(float(m.group(1)), m.group(2)) for m in LOAD_LINE.finditer(block)]


@pytest.mark.parametrize(
    "case_name,deep_gemm",
    [
        ("flash-s8-b1k", True),
        ("glm5-b2k", True),
        ("glm5fp8-b2k", True),
        ("qwen3moe-fp8-s32-b2k", True),
        ("qwen25-7b-v1-b2k", False),
        ("qwen25-05b-v1-b2k", False),
        ("qwen3-8b-v1-b8k", False),
    ],
)
def test_the_load_traces_hold_the_rope_cache_and_deep_gemm_workspace_we_count(
    case_name: str, deep_gemm: bool
) -> None:
    case = BY_NAME[case_name]
    arch = case.resolved().architecture
    lines = _load_lines(case_name)
    rope = [mib for mib, site in lines if "cos_sin_cache" in site]
    assert rope and rope[0] * MIB == pytest.approx(rope_cache_bytes(arch, 2.0)), case_name
    workspace = [mib for mib, site in lines if "deep_gemm.py" in site and "_lazy_init" in site]
    assert (workspace == [DEEP_GEMM_WORKSPACE_BYTES / MIB]) == deep_gemm, case_name


def test_glm4_moe_routers_are_fp32() -> None:
    """GLM-4.7-Flash's load trace: 23.0 MiB at glm4_moe.py L141 over 46 MoE layers, 64 x 2048 x 4 B each."""
    arch = BY_NAME["flash-s8-b1k"].resolved().architecture
    traced = [mib for mib, site in _load_lines("flash-s8-b1k") if "models/glm4_moe.py:141" in site]
    assert traced == [23.0]
    assert router_fp32_extra_bytes(arch, 46, 2.0) == 46 * 64 * 2048 * 2  # beyond the 2 B counted as "other"
    glm5 = resolve_model(json.loads(BY_NAME["glm5-b2k"].config_path.read_text()), "zai-org/GLM-5")
    assert router_fp32_extra_bytes(glm5.architecture, 3, 2.0) == 0  # GateLinear: bf16 weight, fp32 out


def test_planned_weights_match_every_h200_load() -> None:
    """Within 0.05 GiB of "Model loading took" on every H200 start-up but GLM-4.7-Flash quantized to FP8 at
    load (its bf16 blocks are freed and their cached segments reused whole: -0.06 to -0.11 GiB)."""
    rows = [s for s in newer_engine_startups() if s.id.startswith("h200-") and s.logged_weights_gib]
    assert len(rows) >= 30
    for row in rows:
        if row.weights_logged_only:
            continue
        error = row.fit().weights_gib_per_gpu - (row.logged_weights_gib or 0.0)
        limit = 0.12 if row.quantization == "fp8" and row.resolved().architecture.is_mla else 0.05
        assert abs(error) <= limit, (row.id, error)
