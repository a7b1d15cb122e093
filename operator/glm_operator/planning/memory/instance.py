"""One vLLM instance's memory fit: what it takes (:class:`FitInput`) and gives (:class:`FitResult`) (pure).

Also the intermediate figures of the fit (the budget per stage, the KV capacity, the verdict) that
``memory.fit`` computes and ``memory.explain`` puts into words, and ``KV_TOKEN_ERROR``, the budget
model's stated error on KV-cache tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from glm_operator.catalog.models import (
    ModelArchitecture,
    ResolvedModel,
)
from glm_operator.catalog.vllm import Version
from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, BudgetConstants
from glm_operator.planning.releases import (
    DEFAULT_VERSION,
    VllmEngine,
    release_rules,
)

DEFAULT_MAX_NUM_SEQS = 256

# The budget model's stated error on KV-cache tokens, from its leave-one-model-out errors on the start-ups in
# tests/fixtures/vllm-startups.csv (benchmarks/calibration/fit_errors.py prints them): the worst over-promise
# of a held-out model (ours above the log) is 9.2 % on vLLM < 0.18 (Qwen3-235B-FP8, whose fused-MoE workspace
# only GLM-4.6 pins once it is held out; median 0.35 %), 1.0 % on 0.18-0.19 (28 rows) and 1.65 % on >= 0.20
# (60 predicted rows, 56 of them H200 start-ups each within 0.53 %: median 0.11 %; the 1.65 % is Qwen2.5-7B on
# an RTX 4090, whose V1 graph estimate, 0.53 GiB, is above the H200's 0.39 with the same FlashAttention 2, and
# the next, 0.8 %, Qwen3-Coder-30B on L40S). Kept global at 10 %: the operator's vLLM 0.33 profiles every
# model with Model Runner V2, whose forward and sampler are measured (H200) but whose CUDA-graph estimate
# rests on the 0.27.1 Qwen3-32B and GLM-5.2 rows and is not pinned at TP > 1 (docs/memory-model.md, 7.5: if
# it does not shrink with TP as the V1 runner's does, GLM at TP 8 plans 1.1-1.4 GiB per GPU too much, 4-5 %
# of a GLM-5.x FP8 budget on H200, inside this margin). A plan whose concurrency is within this of
# minConcurrency may start below it.
KV_TOKEN_ERROR = 0.10


class FitInputError(ValueError):
    """Inconsistent fit input (TP not dividing heads, context over the model limit...)."""


@dataclass(frozen=True)
class FitInput:
    """Everything one vLLM instance's memory depends on.

    ``quantization`` is the weights' precision: ``auto`` follows the checkpoint (bf16 for a bf16
    checkpoint), otherwise bf16/fp16/fp8/int8/int4 (nvfp4 only for existing checkpoints).
    ``vllm_version`` is the engine's release (its budget rules); ``cudagraph_estimate`` None follows it.
    Build one with :func:`fit_input` (GPU type and engine in one place).
    """

    model: ResolvedModel
    max_model_len: int
    gpu_memory_gib: float
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    # data-parallel attention ranks of the engine (expert parallel over data x tensor parallel ranks):
    # the fit is one rank's; the replica holds data_parallel_size x its sequences
    data_parallel_size: int = 1
    num_speculative_tokens: int = 0  # MTP draft tokens per step (--speculative-config)
    quantization: str = "auto"
    kv_cache_dtype: str = "auto"
    # None: the release's own default (ReleaseRules.gpu_memory_utilization: 0.92 from vLLM 0.26)
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    min_concurrency: float = 1.0
    available_kv_cache_gib: float | None = None
    extra_kv_layers: int = 0
    cudagraph_estimate: bool | None = None
    compute_capability: float = 9.0
    block_size: int | None = None
    # None: the release's default (ReleaseRules.flashinfer_sampler: FlashInfer from vLLM 0.22)
    flashinfer_sampler: bool | None = None
    custom_all_reduce: bool = True
    enforce_eager: bool = False
    # vLLM found its torch.compile artifacts in its cache (no compile in the profiling run, see
    # memory.activation.compile_transient_bytes); the operator's pods keep no compile cache, so False for
    # every plan
    compile_cache_warm: bool = False
    constants: BudgetConstants = DEFAULT_CONSTANTS
    weights_gib: float | None = None
    guarantee_min_concurrency: bool = False
    vllm_version: Version = DEFAULT_VERSION
    # which model runner profiles the model (vLLM >= 0.20): None is the release's choice for the architecture
    # (ReleaseRules.uses_model_runner_v2); True/False is what VLLM_USE_V2_MODEL_RUNNER=1/0 forces
    model_runner_v2: bool | None = None
    # the FlashAttention generation (releases.flash_attn_version): None is vLLM's choice for the GPU;
    # 2/3 is what --attention-config.flash_attn_version forces
    flash_attn_version: int | None = None

    @property
    def cudagraphs_in_budget(self) -> bool:
        if self.cudagraph_estimate is not None:
            return self.cudagraph_estimate
        return release_rules(self.vllm_version).graphs_in_budget


class GpuMemory(Protocol):
    """What the fit needs of a GPU (a catalog :class:`~glm_operator.catalog.gpus.GpuType` is one)."""

    @property
    def memory_gib(self) -> float: ...

    @property
    def compute_capability(self) -> float: ...


@dataclass(frozen=True)
class GpuFigures:
    """A GPU given by its figures only (a log's GPU, ``--gpu-memory-gib``)."""

    memory_gib: float
    compute_capability: float = 9.0


def fit_input(model: ResolvedModel, gpu: GpuMemory, engine: VllmEngine, **settings: Any) -> FitInput:
    """The fit input of ``model`` on one ``gpu`` type under vLLM ``engine``; ``settings`` are the
    other :class:`FitInput` fields (``max_model_len`` is required)."""
    return FitInput(
        model=model,
        gpu_memory_gib=gpu.memory_gib,
        compute_capability=gpu.compute_capability,
        vllm_version=engine.version,
        **settings,
    )


@dataclass(frozen=True)
class FitResult:
    """Per-GPU memory figures of one instance and whether it holds ``min_concurrency`` sequences."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    decode_context_parallel_size: int
    quantization: str
    kv_cache_dtype: str
    max_model_len: int
    gpu_memory_gib: float
    gpu_memory_utilization: float
    requested_gib: float
    weights_gib_per_gpu: float
    weights_gib_per_stage: tuple[float, ...]
    activation_gib: float
    non_torch_gib: float
    cudagraph_gib: float
    available_kv_cache_gib_per_gpu: float
    kv_cache_bytes_per_token_per_gpu: int
    per_request_state_bytes_per_gpu: int
    block_size: int
    kv_cache_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    min_concurrency: float
    max_num_batched_tokens: int
    max_num_seqs: int
    fits: bool
    reasons: tuple[str, ...]
    uncertain: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    cudagraph_capture_gib: float = 0.0
    dsa_workspace_bytes_per_context_token: float = 0.0
    vllm_version: str = ""
    data_parallel_size: int = 1  # the engine's DP ranks: the figures are one rank's
    num_speculative_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "decode_context_parallel_size": self.decode_context_parallel_size,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "max_model_len": self.max_model_len,
            "gpu_memory_gib": round(self.gpu_memory_gib, 2),
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "requested_gib": round(self.requested_gib, 2),
            "weights_gib_per_gpu": round(self.weights_gib_per_gpu, 2),
            "weights_gib_per_stage": [round(w, 2) for w in self.weights_gib_per_stage],
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cudagraph_gib": round(self.cudagraph_gib, 2),
            "cudagraph_capture_gib": round(self.cudagraph_capture_gib, 2),
            "available_kv_cache_gib_per_gpu": round(self.available_kv_cache_gib_per_gpu, 2),
            "kv_cache_bytes_per_token_per_gpu": self.kv_cache_bytes_per_token_per_gpu,
            "per_request_state_bytes_per_gpu": self.per_request_state_bytes_per_gpu,
            "block_size": self.block_size,
            "kv_cache_blocks": self.kv_cache_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "min_concurrency": self.min_concurrency,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "fits": self.fits,
            "reasons": list(self.reasons),
            "uncertain": list(self.uncertain),
            "notes": list(self.notes),
            "vllm_version": self.vllm_version,
            "data_parallel_size": self.data_parallel_size,
            "num_speculative_tokens": self.num_speculative_tokens,
        }


def parallelism_error(arch: ModelArchitecture, tp: int, pp: int = 1, dcp: int = 1) -> str | None:
    """Why vLLM would refuse this TP/PP/DCP for the model, or None."""
    if tp < 1 or pp < 1 or dcp < 1:
        return "tensor/pipeline/decode-context parallel sizes must be >= 1"
    if arch.num_attention_heads % tp:
        return f"TP={tp} does not divide the {arch.num_attention_heads} attention heads"
    if arch.attention == "gqa":
        kv = arch.num_kv_heads
        if kv % tp and tp % kv:
            return f"TP={tp} and the {kv} KV heads do not divide each other"
    # vLLM shards the MLP's (and each expert's) intermediate dimension over the TP ranks
    dense_mlp = not arch.is_moe or arch.first_k_dense_replace > 0
    if dense_mlp and arch.intermediate_size % tp:
        return f"TP={tp} does not divide the {arch.intermediate_size}-wide MLP"
    if arch.is_moe and arch.moe_intermediate_size and arch.moe_intermediate_size % tp:
        return f"TP={tp} does not divide the experts' {arch.moe_intermediate_size}-wide projections"
    if arch.linear_attention_layers and arch.linear_num_heads % tp:
        return f"TP={tp} does not divide the {arch.linear_num_heads} linear-attention heads"
    if pp > arch.num_layers:
        return f"PP={pp} is larger than the {arch.num_layers} layers"
    if tp % dcp:
        return f"decode context parallel {dcp} must divide TP={tp}"
    return None


class MemoryBudget(NamedTuple):
    """The memory vLLM gives one rank of each pipeline stage and what it takes before the KV cache."""

    utilization: float
    max_num_batched_tokens: int
    requested: float
    weights: tuple[float, ...]
    activations: list[float]
    non_torch: float
    fusion_workspace: float  # part of non_torch
    cudagraph_estimate: float
    cudagraphs_in_budget: bool
    available: list[float]
    # what the cold torch.compile holds (the activation peak where it is the larger)
    compile_transient: float = 0.0

    @property
    def cudagraphs_counted(self) -> float:
        """The CUDA-graph memory subtracted from the budget (0 where vLLM captures them after it)."""
        return self.cudagraph_estimate if self.cudagraphs_in_budget else 0.0


class KvCapacity(NamedTuple):
    """The KV cache of the pipeline stage that holds the fewest sequences (vLLM's block count)."""

    stage: int
    bytes_per_token: int
    request_state: int
    block_size: int
    blocks: int
    concurrency: float
    tokens: int


class Verdict(NamedTuple):
    """Whether the concurrency meets minConcurrency, and whether it does so within the model's error."""

    fits: bool
    guaranteed: float
    within_error: bool
