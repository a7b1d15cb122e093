"""Real vLLM start-ups (tests/fixtures/vllm-startups.csv) against our own memory budget.

Shared by tests/unit/test_fit_truth.py (per-row tolerance) and benchmarks/calibration/fit_errors.py
(median / p90 / worst by family, leave-one-model-out refits). Every row's settings come from the CSV;
models outside the catalog use the public ``config.json`` values below (Hugging Face model cards of the
named repositories).

End to end means: our weights (unless the row says the checkpoint layout is not modelled, then the
logged "Model loading took"), our activation / non-torch / CUDA-graph budget, our KV bytes per token.
The compared figure is the KV-cache token count (or the concurrency, for rows that log only that); for
rows without a token figure, or with sliding-window layers whose token count we do not model, it is
the KV budget ("Available KV cache memory"), to which the token count is proportional.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.calibration.fitting import least_squares
from glm_operator.catalog.models import ResolvedModel, resolve_model
from glm_operator.catalog.vllm import Version
from glm_operator.planning.memory.constants import (
    DEFAULT_CONSTANTS,
    BudgetConstants,
    constant,
    with_constants,
)
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import FitResult, GpuFigures, fit_input
from glm_operator.planning.releases import DEFAULT_VERSION, Generation, VllmEngine, release_rules

CSV_PATH = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm-startups.csv"
REPO = Path(__file__).resolve().parents[2]
# the H200 rows of benchmarks/gpu_truth name the config.json they started from in their notes
_CONFIG_NOTE = re.compile(r"config (benchmarks/gpu_truth/configs/[\w.-]+)")
GIB = 1024**3

# KV budget below this share of the GPU: any budget error dominates the token error; reported apart.
SMALL_BUDGET_SHARE = 0.05

_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128}
CONFIGS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 28672,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}
            },
        },
    },
    "Qwen/Qwen3-0.6B": {
        **_QWEN3,
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-32B": {
        **_QWEN3,
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 25600,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-8B": {
        **_QWEN3,
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2-7B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "attention_bias": True,  # Qwen2 always has q/k/v biases (not a config key there)
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-235B-A22B-FP8": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 4096,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    },
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    },
    # MXFP4 experts and a vision tower are not modelled: these rows use the logged weights.
    "openai/gpt-oss-20b": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 24,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "openai/gpt-oss-120b": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 32768,
        "vocab_size": 131072,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
}
# Qwen2.5-7B has the shapes of Qwen2-7B
CONFIGS["Qwen/Qwen2.5-7B-Instruct"] = CONFIGS["Qwen/Qwen2-7B-Instruct"]
CONFIGS["Qwen/Qwen2.5-72B-Instruct"] = {
    **CONFIGS["Qwen/Qwen2-7B-Instruct"],
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 29568,
}
CONFIGS["moonshotai/Kimi-Dev-72B"] = CONFIGS["Qwen/Qwen2.5-72B-Instruct"]
CONFIGS["Qwen/Qwen2.5-0.5B-Instruct"] = {
    **CONFIGS["Qwen/Qwen2-7B-Instruct"],
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
CONFIGS["Qwen/Qwen3-30B-A3B"] = {
    **CONFIGS["Qwen/Qwen3-Coder-30B-A3B-Instruct"],
    "max_position_embeddings": 40960,
}
# Mixtral-8x7B: Llama-3-8B's attention and expert shapes, 8 experts top-2, a 32k vocabulary
CONFIGS["mistralai/Mixtral-8x7B-Instruct-v0.1"] = {
    **CONFIGS["meta-llama/Llama-3.1-8B-Instruct"],
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
}
# plain MLA without a q LoRA (DeepSeek-V2-Lite); 2 shared experts of 1408, the first layer dense
CONFIGS["deepseek-ai/DeepSeek-V2-Lite-Chat"] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
}
# microsoft/phi-4 (Phi3ForCausalLM; fused qkv and gate_up, the same element counts as Llama's)
CONFIGS["microsoft/phi-4"] = {
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 5120,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 10,
    "head_dim": 128,
    "intermediate_size": 17920,
    "vocab_size": 100352,
    "max_position_embeddings": 16384,
    "torch_dtype": "bfloat16",
}
# Leave-one-model-out holds out whole architectures: re-releases with the same shapes go together.
SAME_ARCHITECTURE = {
    "moonshotai/Kimi-Dev-72B": "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen/Qwen2-7B-Instruct",  # the same shapes as Qwen2-7B
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "Qwen/Qwen3-235B-A22B-FP8",
    "zai-org/GLM-4.7-FP8": "zai-org/GLM-4.6",  # glm4_moe, the same 92 layers and shapes
    "zai-org/GLM-4.7": "zai-org/GLM-4.6",  # the H200 start-ups of 12 of its layers
    # glm_moe_dsa: the H200 start-ups of GLM-5-FP8 (10 of its 78 layers) and bf16 GLM-5 (6 layers) share the
    # architecture and every shape but the layer count with GLM-5.2/5.3
    "zai-org/GLM-5-FP8": "zai-org/GLM-5.2-FP8",
    "zai-org/GLM-5": "zai-org/GLM-5.2-FP8",
    "zai-org/GLM-5.3-FP8": "zai-org/GLM-5.2-FP8",
}
# the 2507 re-release: same architecture and FP8 layout, 256K context
CONFIGS["Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"] = {
    **CONFIGS["Qwen/Qwen3-235B-A22B-FP8"],
    "max_position_embeddings": 262144,
}
LOGGED_WEIGHTS = {
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
}
# sliding-window layers (gpt-oss) make vLLM's token figure a hybrid-group quantity we do not model
BUDGET_ONLY_FAMILIES = {"moe-gqa-swa"}
COMPUTE_CAPABILITY = {
    "A100": 8.0,
    "RTX A5000": 8.6,
    "L40S": 8.9,
    "H100": 9.0,
    "H200": 9.0,
    "RTX PRO 6000 Blackwell": 12.0,
    "RTX PRO 4500 Blackwell": 12.0,
    "RTX 4090": 8.9,
}
# vLLM >= 0.20 subtracts its CUDA-graph estimate from the budget (ReleaseRules.graphs_in_budget);
# rows from such engines are fitted apart (see newer_engine).


def _lead_int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


def _version(text: str) -> Version | None:
    """The release in the version column: '0.10.1.1' -> (0, 10, 1), '~0.9.2 (July 2025)' -> (0, 9, 2),
    'vllm/vllm-openai:latest (Oct 2025; 0.11.x)' -> (0, 11, 0)."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _float(text: str) -> float | None:
    text = text.strip()
    return float(text) if text else None


@dataclass(frozen=True)
class Startup:
    """One CSV row: the settings and what the log says."""

    id: str
    model_id: str
    family: str
    gpu: str
    gpu_memory_gib: float
    tp: int
    pp: int
    kv_cache_dtype: str
    utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool
    flashinfer_sampler: bool
    custom_all_reduce: bool
    block_size: int | None
    logged_weights_gib: float | None
    logged_activation_gib: float | None
    logged_non_torch_gib: float | None
    logged_graph_gib: float | None
    logged_available_gib: float | None
    logged_tokens: int | None
    logged_concurrency: float | None
    use: bool
    why_not: str
    source: str
    vllm_version: Version | None = None
    quantization: str = "auto"  # "fp8" for vLLM's online --quantization fp8 on a bf16 config
    # the log (or its budget) shows torch.compile artifacts loaded from a cache: "compile cache warm" in notes
    compile_cache_warm: bool = False
    # the model runner the start-up forced ("VLLM_USE_V2_MODEL_RUNNER=0|1" in notes); None: the default
    model_runner_v2: bool | None = None
    # the FlashAttention generation the start-up forced ("--attention-config.flash_attn_version=N" in notes)
    flash_attn_version: int | None = None
    # what the captured graphs took ("Actual usage ... GiB for CUDAGraph memory"; graph_actual_gib)
    logged_graph_actual_gib: float | None = None
    # MTP draft tokens the start-up ran with ("--speculative-config {...num_speculative_tokens...}" in notes)
    num_speculative_tokens: int = 0
    config_file: str = (
        ""  # a config directory in this repository (benchmarks/gpu_truth/configs), from the notes
    )

    @property
    def model_name(self) -> str:
        return self.model_id

    def resolved(self) -> ResolvedModel:
        if self.config_file and self.model_id not in LOGGED_WEIGHTS:
            config = json.loads((REPO / self.config_file / "config.json").read_text(encoding="utf-8"))
            return resolve_model(config, self.model_id)
        config = CONFIGS.get(self.model_id)
        return resolve_model(config, self.model_id) if config else resolve_model(self.model_id)

    @property
    def model_group(self) -> str:
        """The architecture leave-one-model-out holds out with this row."""
        return SAME_ARCHITECTURE.get(self.model_id, self.model_id)

    @property
    def generation(self) -> int:
        """The budget constant set of this row's vLLM (ReleaseRules.generation); rows without a
        version are planned as the operator's default release."""
        return release_rules(self.vllm_version or DEFAULT_VERSION).generation

    @property
    def newer_engine(self) -> bool:
        """vLLM >= 0.20: the CUDA-graph estimate is subtracted and the profiling run differs."""
        return self.generation == Generation.NEWER

    @property
    def runner_v2(self) -> bool:
        """Whether Model Runner V2 profiled this start-up: the one it forced, else its release's choice."""
        if self.model_runner_v2 is not None:
            return self.model_runner_v2
        arch = self.resolved().architecture
        return release_rules(self.vllm_version or DEFAULT_VERSION).uses_model_runner_v2(
            arch.architecture, arch.is_moe
        )

    @property
    def weights_logged_only(self) -> bool:
        return self.model_id in LOGGED_WEIGHTS

    @property
    def small_budget(self) -> bool:
        avail = self.logged_available_gib
        if avail is None:
            return False
        return avail < SMALL_BUDGET_SHARE * self.gpu_memory_gib

    def fit(self, constants: BudgetConstants = DEFAULT_CONSTANTS) -> FitResult:
        """Our own end-to-end budget for this start-up."""
        cc = next((v for k, v in COMPUTE_CAPABILITY.items() if k in self.gpu), 9.0)
        return estimate_fit(
            fit_input(
                self.resolved(),
                GpuFigures(self.gpu_memory_gib, cc),
                VllmEngine(self.vllm_version or DEFAULT_VERSION),
                max_model_len=self.max_model_len,
                tensor_parallel_size=self.tp,
                pipeline_parallel_size=self.pp,
                kv_cache_dtype=self.kv_cache_dtype,
                quantization=self.quantization,
                gpu_memory_utilization=self.utilization,
                max_num_batched_tokens=self.max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs,
                block_size=self.block_size,
                flashinfer_sampler=self.flashinfer_sampler,
                custom_all_reduce=self.custom_all_reduce,
                enforce_eager=self.enforce_eager,
                compile_cache_warm=self.compile_cache_warm,
                cudagraph_estimate=self.newer_engine,
                weights_gib=self.logged_weights_gib if self.weights_logged_only else None,
                constants=constants,
                model_runner_v2=self.model_runner_v2,
                flash_attn_version=self.flash_attn_version,
                num_speculative_tokens=self.num_speculative_tokens,
            )
        )


_FORCED_RUNNER = re.compile(r"VLLM_USE_V2_MODEL_RUNNER=([01])")
_FORCED_FLASH_ATTN = re.compile(r"flash_attn_version=(\d)")
_SPECULATIVE_TOKENS = re.compile(r'"num_speculative_tokens":\s*(\d+)')


def load_startups(path: Path = CSV_PATH) -> list[Startup]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            notes = row["notes"]
            block = 128 if re.search(r"block(-size)? 128", notes) else None
            mnbt = _lead_int(row["max_num_batched_tokens"])
            mns = _lead_int(row["max_num_seqs"])
            assert mnbt and mns, row["id"]
            out.append(
                Startup(
                    id=row["id"],
                    model_id=row["model"],
                    family=row["family"],
                    gpu=row["gpu"],
                    gpu_memory_gib=float(row["gpu_memory_gib"]),
                    tp=int(row["tp"]),
                    pp=int(row["pp"]),
                    kv_cache_dtype=row["kv_cache_dtype"],
                    utilization=_float(row["gpu_memory_utilization"]) or 0.0,
                    max_model_len=_lead_int(row["max_model_len"]) or 0,
                    max_num_batched_tokens=mnbt,
                    max_num_seqs=mns,
                    enforce_eager=row["cudagraphs"].startswith("none"),
                    flashinfer_sampler=row["sampler"] == "flashinfer",
                    custom_all_reduce=row["custom_all_reduce"] != "off",
                    block_size=block,
                    logged_weights_gib=_float(row["weights_gib"]),
                    logged_activation_gib=_float(row["activation_gib"]),
                    logged_non_torch_gib=_float(row["non_torch_gib"]),
                    logged_graph_gib=_float(row["graph_gib"]),
                    logged_available_gib=_float(row["available_kv_gib"]),
                    logged_tokens=_lead_int(row["kv_cache_tokens"].replace(",", "")),
                    logged_concurrency=_float(row["max_concurrency"]),
                    use=row["use"] == "yes",
                    why_not=row["use"],
                    source=row["source_url"],
                    vllm_version=_version(row["vllm_version"]),
                    quantization="fp8" if row["quantization"].startswith("fp8 (online") else "auto",
                    config_file=config.group(1) if (config := _CONFIG_NOTE.search(notes)) else "",
                    compile_cache_warm="compile cache warm" in notes,
                    model_runner_v2=(
                        runner.group(1) == "1" if (runner := _FORCED_RUNNER.search(notes)) else None
                    ),
                    num_speculative_tokens=(
                        int(st.group(1)) if (st := _SPECULATIVE_TOKENS.search(notes)) else 0
                    ),
                    flash_attn_version=(
                        int(fa.group(1)) if (fa := _FORCED_FLASH_ATTN.search(notes)) else None
                    ),
                    logged_graph_actual_gib=_float(row.get("graph_actual_gib") or ""),
                )
            )
    return out


@dataclass(frozen=True)
class RowError:
    """Our figure against the logged one for one start-up."""

    startup: Startup
    figure: str  # "tokens", "concurrency" or "budget"
    ours: float
    logged: float
    budget_error_gib: float | None  # ours - logged "Available KV cache memory" (when logged)
    # held out: free constants this row depends on that no training row informs (see leave_one_model_out)
    uninformed: tuple[str, ...] = ()

    @property
    def relative(self) -> float:
        return (self.ours - self.logged) / abs(self.logged)


def row_error(s: Startup, constants: BudgetConstants = DEFAULT_CONSTANTS) -> RowError:
    f = s.fit(constants)
    budget_err = (
        f.available_kv_cache_gib_per_gpu - s.logged_available_gib
        if s.logged_available_gib is not None
        else None
    )
    if s.family not in BUDGET_ONLY_FAMILIES and s.logged_tokens:
        return RowError(s, "tokens", f.kv_cache_tokens, s.logged_tokens, budget_err)
    if s.family not in BUDGET_ONLY_FAMILIES and s.logged_concurrency is not None and s.logged_tokens is None:
        return RowError(s, "concurrency", f.max_concurrency, s.logged_concurrency, budget_err)
    assert s.logged_available_gib is not None, s.id
    return RowError(s, "budget", f.available_kv_cache_gib_per_gpu, s.logged_available_gib, budget_err)


def used_startups() -> list[Startup]:
    """The rows the vLLM < 0.18 constants are fitted and asserted on."""
    return [s for s in load_startups() if s.use and s.generation == Generation.OLDER]


def mid_engine_startups() -> list[Startup]:
    """Used rows from vLLM 0.18-0.19: fitted on their own constants (mid_*)."""
    return [s for s in load_startups() if s.use and s.generation == Generation.MID]


def newer_engine_startups() -> list[Startup]:
    """Used rows from vLLM >= 0.20: fitted on their own constants (newer_*)."""
    return [s for s in load_startups() if s.use and s.newer_engine]


# ------------------------------------------------------------------------------------------------
# fitting the free constants (coordinate descent over bounded grids; no numpy needed)

FREE: dict[str, tuple[float, float]] = {
    "older.sampler_bytes": (20.0, 50.0),
    "older_flashinfer_sampler_bytes": (0.0, 30.0),
    "older.forward_scale": (0.2, 3.0),
    "older_moe_workspace_gib": (0.0, 4.0),
    "non_torch.nccl_gib": (0.0, 0.6),
}
# vLLM >= 0.20 rows are fitted on their own constants (a different profiling run and graph estimate)
FREE_NEWER: dict[str, tuple[float, float]] = {
    "non_torch.cublas_before_snapshot_gib": (0.0, 2.0),
    "graphs_v2.bytes_per_piece": (0.0, 2.0 * 2**20),
    "v2.moe_workspace_scale": (0.0, 8.0),
    # not v1_moe_workspace_scale: the V1 runner's fused-MoE workspace is vLLM 0.26's TritonExperts shapes
    # (memory.workspaces.triton_experts_workspace_bytes), kept at 1.0; fitted it came out at 0.92 on these
    # rows without h200-glm5fp8-b16k and at 1.88 with it (that row's unexplained ~2.7 GiB, see
    # benchmarks/gpu_truth/README.md)
}
# vLLM 0.18-0.19 rows: their own profiling run (the CUDA graphs profiled, not subtracted)
FREE_MID: dict[str, tuple[float, float]] = {
    "mid.forward_scale": (0.2, 3.0),
    "mid.sampler_bytes": (0.0, 40.0),
    "mid.moe_workspace_scale": (0.0, 8.0),
    "non_torch.tp_gib": (0.0, 1.0),
}
# non_torch_gib (0.13) and non_torch_custom_all_reduce_gib (0.41) are not free: the llm-d DEBUG logs
# measure them directly ("non-torch forward increase memory" 0.13-0.14 GiB at TP 1, 0.54-0.55 at TP 2).


# Rows predicted and asserted but never fitted on: their profiling run holds memory the budget does not
# model, so fitting the text-model constants to them would move those constants for every other model.
NOT_FITTED = {
    # vLLM 0.11.0's multimodal profile_run encodes 8192 // 3080 = 2 maximum-size images with the Pixtral
    # encoder first and keeps their embeddings, padded to the 8192-token encoder budget (0.16 GiB), alive
    # through the text forward and the sampler; the planner has no vision-encoder shapes. Fitted on, it
    # raised forward_scale and took GLM-4.6's leave-one-model-out error from -1 % to -6.6 %.
    "llmd-mistral-small-3.2-24b",
}


def _loss(rows: Sequence[Startup], c: BudgetConstants) -> float:
    """Sum of squared relative KV errors; rows with a small budget count by their GiB error instead.
    Rows in NOT_FITTED do not count."""
    total = 0.0
    for s in rows:
        if s.id in NOT_FITTED:
            continue
        e = row_error(s, c)
        if s.small_budget and e.budget_error_gib is not None:
            total += (e.budget_error_gib / s.gpu_memory_gib) ** 2
        else:
            total += e.relative**2
    return total


def free_constants(rows: Sequence[Startup]) -> dict[str, tuple[float, float]]:
    """The constants fitted on ``rows``: those of their engine generation (all rows share one)."""
    generations = {s.generation for s in rows}
    assert len(generations) <= 1, "fit one engine generation at a time"
    generation = generations.pop() if generations else Generation.OLDER
    return {Generation.NEWER: FREE_NEWER, Generation.MID: FREE_MID}.get(generation, FREE)


def fit_constants(
    rows: Sequence[Startup], start: BudgetConstants = DEFAULT_CONSTANTS, rounds: int = 4, steps: int = 24
) -> BudgetConstants:
    """Minimise the squared relative KV errors of ``rows`` over their free constants (FREE or FREE_NEWER)."""
    best = start
    best_loss = _loss(rows, best)
    for r in range(rounds):
        for name, (lo, hi) in free_constants(rows).items():
            here = constant(best, name)
            span = (hi - lo) / (2**r)
            a, b = max(lo, here - span / 2), min(hi, here + span / 2)
            for i in range(steps + 1):
                cand = with_constants(best, {name: a + (b - a) * i / steps})
                loss = _loss(rows, cand)
                if loss < best_loss - 1e-15:
                    best, best_loss = cand, loss
    return best


def leave_one_model_out(
    rows: Sequence[Startup], fitter: Callable[[Sequence[Startup]], BudgetConstants] = fit_constants
) -> list[RowError]:
    """Refit without each model in turn and predict that model's rows."""
    out = []
    for model in sorted({s.model_group for s in rows}):
        train = [s for s in rows if s.model_group != model]
        held = [s for s in rows if s.model_group == model]
        constants = fitter(train)
        # row by row: a model group can hold rows of both model runners (GLM-5.x: the V1-runner H200 rows
        # depend on no fitted constant the V2 row of GLM-5.2 pins alone)
        out.extend(
            replace(row_error(s, constants), uninformed=uninformed_constants(train, [s], constants))
            for s in held
        )
    return out


def uninformed_constants(
    train: Sequence[Startup], held: Sequence[Startup], constants: BudgetConstants
) -> tuple[str, ...]:
    """Free constants the held-out rows depend on that the training rows cannot pin down.

    Either no training row depends on the constant, or fewer training rows depend on any of the held-out
    rows' constants than there are constants those rows depend on (the refit is then underdetermined and
    keeps values fitted with the held-out rows). Such held-out errors are not predictions:
    ``benchmarks/calibration/fit_errors.py`` reports those rows apart.
    """

    def moves(rows: Sequence[Startup], name: str) -> bool:
        lo, hi = free_constants([*train, *held])[name]
        return _loss(rows, with_constants(constants, {name: lo})) != _loss(
            rows, with_constants(constants, {name: hi})
        )

    names = list(free_constants([*train, *held]))
    needed = [name for name in names if moves(held, name)]
    informative = [s for s in train if any(moves([s], name) for name in needed)]
    # every constant those rows depend on has to be pinned with the needed ones
    involved = {name for name in names if name in needed or moves(informative, name)}
    if len(informative) < len(involved):
        return tuple(needed)
    return tuple(name for name in needed if not moves(train, name))


def graph_estimate_startups() -> list[Startup]:
    """Used rows from vLLM >= 0.18 that log the V1 model runner's "Estimated CUDA graph memory", but those
    with MTP: the drafter's attention stand-ins dominate their first capture
    (``activation.draft_capture_standin_bytes``, derived from vLLM's source, not fitted)."""
    return [
        s
        for s in load_startups()
        if s.use and s.generation != Generation.OLDER and s.logged_graph_gib and not s.num_speculative_tokens
    ]


def is_fp8_online(s: Startup) -> bool:
    """An MLA model's bf16 checkpoint quantized to FP8 at load (--quantization fp8)."""
    resolved = s.resolved()
    return (
        s.quantization == "fp8" and resolved.checkpoint_quantization is None and resolved.architecture.is_mla
    )


#: the graph constants each generation fits (vLLM 0.18-0.19 and >= 0.20 apart; DSA rows are all >= 0.20)
GRAPH_CONSTANTS = {
    Generation.MID: (
        "graphs_mid.bytes_per_piece",
        "graphs_mid.bytes_per_decode_seq",
        "graphs_mid.mla_bytes_per_decode_seq",
        "graphs_mid.bytes_per_decode_q_element",
    ),
    Generation.NEWER: (
        "graphs_v1.bytes_per_piece",
        "graphs_v1.bytes_per_decode_seq",
        "graphs_v1.mla_bytes_per_decode_seq",
        "dsa_graph_bytes_per_index_head_token",
        "graphs_v1.bytes_per_decode_q_element",
        "pre_hopper_graph_bytes_per_piece",
    ),
}


def fit_graph_constants(rows: Sequence[Startup]) -> BudgetConstants:
    """Least squares (GiB) of the V1 runner's graph estimate, per engine generation (0.18-0.19 and >= 0.20
    apart): bytes per piece x layers x sizes + bytes per decode request (more for MLA) x decode requests +
    ``dsa_graph_bytes_per_index_head_token`` x index heads x max_model_len x decode requests (DSA with a
    bf16 KV cache), on the rows' logged estimates (a component fit); FP8-online rows are left to
    :func:`fit_fp8_online_graph_bytes`."""
    rows = [s for s in rows if not is_fp8_online(s)]
    fitted = DEFAULT_CONSTANTS
    for generation, names in GRAPH_CONSTANTS.items():
        chosen = [s for s in rows if s.generation == generation]
        targets = [s.logged_graph_gib or 0.0 for s in chosen]
        fitted = with_constants(fitted, _graph_least_squares(chosen, targets, names))
    return fitted


def _graph_least_squares(
    rows: Sequence[Startup], targets: Sequence[float], names: Sequence[str]
) -> dict[str, float]:
    """The graph constants ``names`` (bytes) whose planned CUDA-graph estimate best matches ``targets``
    (GiB) on ``rows``, the other constants kept; what no fitted constant moves (the query-normed models'
    buffers) is taken off both sides."""
    zero = with_constants(DEFAULT_CONSTANTS, dict.fromkeys(names, 0.0))
    columns = [with_constants(zero, {name: GIB}) for name in names]
    base = [s.fit(zero).cudagraph_capture_gib for s in rows]
    xs = [[s.fit(c).cudagraph_capture_gib - b for c in columns] for s, b in zip(rows, base, strict=True)]
    ys = [t - b for t, b in zip(targets, base, strict=True)]
    return {name: x * GIB for name, x in zip(names, least_squares(xs, ys), strict=True)}


#: Model Runner V2's Hopper graph constants (fit_hopper_v2_graph_constants)
HOPPER_V2_GRAPH_CONSTANTS = (
    "graphs_v2_hopper.bytes_per_piece",
    "graphs_v2_hopper.bytes_per_decode_q_element",
)


def hopper_v2_graph_rows(rows: Sequence[Startup]) -> list[Startup]:
    """H200 start-ups on vLLM 0.26's Model Runner V2 that log what their graph capture took (an MLA model
    quantized at load is left out, as in :func:`fit_graph_constants`; none is on V2 today)."""
    return [
        s
        for s in rows
        if s.gpu == "H200" and s.runner_v2 and s.logged_graph_actual_gib is not None and not is_fp8_online(s)
    ]


def fit_hopper_v2_graph_constants(rows: Sequence[Startup]) -> BudgetConstants:
    """Least squares (GiB) of Model Runner V2's Hopper graph estimate (as vLLM 0.33 plans it, so the rows are
    evaluated as a release that estimates) on the graph memory vLLM 0.26's V2 runner took: what 0.33's
    ``profile_cudagraph_memory`` measures by capturing the same graphs (see memory/cuda_graphs.py)."""
    chosen = hopper_v2_graph_rows(rows)
    as_033 = [replace(s, vllm_version=(0, 33, 0)) for s in chosen]
    targets = [s.logged_graph_actual_gib or 0.0 for s in chosen]
    return with_constants(DEFAULT_CONSTANTS, _graph_least_squares(as_033, targets, HOPPER_V2_GRAPH_CONSTANTS))


def fit_fp8_online_graph_bytes(rows: Sequence[Startup], c: BudgetConstants = DEFAULT_CONSTANTS) -> float:
    """``fp8_online_mla_graph_bytes_per_layer``: the FP8-online rows' logged estimate above the bf16 model
    (``c``'s other graph constants), per layer, averaged (least squares through 0)."""
    without = with_constants(c, {"fp8_online_mla_graph_bytes_per_layer": 0.0})
    per_layer = with_constants(
        without,
        {
            "graphs_v1.bytes_per_piece": 0.0,
            "graphs_v1.bytes_per_decode_seq": 0.0,
            "graphs_v1.mla_bytes_per_decode_seq": 0.0,
            "dsa_graph_bytes_per_index_head_token": 0.0,
            "graphs_v1.bytes_per_decode_q_element": 0.0,
        },
    )
    per_layer = with_constants(per_layer, {"fp8_online_mla_graph_bytes_per_layer": 1.0})
    xs, ys = [], []
    for s in rows:
        if is_fp8_online(s) and s.logged_graph_gib is not None:
            xs.append(s.fit(per_layer).cudagraph_capture_gib * GIB)
            ys.append((s.logged_graph_gib - s.fit(without).cudagraph_capture_gib) * GIB)
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)


def percentile(values: Iterable[float], q: float) -> float:
    vals = sorted(values)
    if not vals:
        return math.nan
    if len(vals) == 1:
        return vals[0]
    k = (len(vals) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def summary(errors: Sequence[float]) -> tuple[float, float, float]:
    """(median, p90, worst) of absolute relative errors."""
    a = [abs(e) for e in errors]
    return statistics.median(a), percentile(a, 0.9), max(a)
