"""Memory fit of one vLLM instance: weights, KV cache and concurrency per GPU (pure).

This module follows vLLM's own start-up accounting (V1 engine), as read in the released
vllm-project/vllm sources 0.8.5-0.33.0 (files and lines cited below):

Budget per GPU rank (``vllm/v1/worker/gpu_worker.py``
``determine_available_memory``; 0.33.0 L641-820)::

    requested  = total_memory x gpu_memory_utilization          # torch total, not marketing GB
    available  = requested - weights - activation_peak - non_torch - cudagraph_estimate

* ``weights`` (``Model loading took X GiB``): parameters counted from the config,
  per rank. Tensor parallel (TP) shards attention heads, MLP/expert intermediate dims and the
  vocabulary (VocabParallelEmbedding pads the vocabulary to a multiple of 64, then splits it);
  MLA's down-projections (q_a, kv_a), the DSA indexer, the MoE router and norms are replicated.
  GQA K/V projections hold ``max(1, kv_heads/TP)`` heads per rank (glm4_moe.py
  L241-254). Pipeline parallel (PP) splits the layers like vLLM's ``get_pp_indices`` (extra layers
  go to the later stages) with the embeddings on the first and lm_head on the last stage. Quantized
  checkpoints store linear layers in fp8/int8/int4 plus their scales; embeddings, lm_head, router and
  norms stay bf16 (the checkpoint's ``quantization_config`` decides; FP8 checkpoints are *not* one
  byte per parameter). Where vLLM's own figure is known and larger (catalog ``loaded_weights``: GLM-5.x
  FP8 loads 94.46 GiB per rank at TP8 where the config counts 88.18, vllm-project/recipes#893), the
  count is scaled up to it at every TP/PP.
* ``activation_peak``, ``non_torch`` and ``cudagraph_estimate``: modelled and fitted on public
  start-up logs in :mod:`glm_operator.planning.memory.budget` (formulas, constants and sources there).
  ``max_num_batched_tokens`` defaults to vLLM's OpenAI-server default (8192 on >= 70 GiB GPUs other
  than the A100, else 2048: ``vllm/engine/arg_utils.py``); ``max_num_seqs`` to 256, the most the
  operator renders. The CUDA-graph estimate is subtracted only for vLLM >= 0.21 (the default image,
  0.33.0, does); older engines capture the graphs after the KV cache, in the
  ``1 - gpu_memory_utilization`` headroom, which is checked instead. ``FitInput.vllm_version`` picks
  the rule (:mod:`glm_operator.planning.releases` lists the release-dependent rules);
  ``cudagraph_estimate`` overrides it (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
* ``available_kv_cache_gib`` overrides the whole budget (what ``Available KV cache memory: X GiB``
  logs), to compare the token math against real logs.

KV bytes per token per rank (``vllm/v1/kv_cache_interface.py`` ``page_size_bytes``)::

    GQA layer : 2 x max(1, kv_heads // TP) x head_dim x kv_dtype_bytes
    MLA layer : (kv_lora_rank + qk_rope_head_dim) x kv_dtype_bytes, on every TP rank (not split)
                fp8 on MLA+DSA = fp8_ds_mla record: kv_lora + kv_lora/128 x 4 + rope x 2 = 656 B
                (mla_attention.py L1371-1390)
    DSA index : + index_head_dim + index_head_dim/128 x 4 = 132 B per indexer-cache layer
                (deepseek_v2.py L731-736); GLM-5.2/5.3 share the indexer: 21 of 78 layers
    MTP/draft : ``extra_kv_layers`` more layers on the last stage (a public GLM-5.1 log fits 79 layers)

``kv_cache_dtype='auto'`` is the model dtype (bf16), fp8 is one byte. PP splits the layers; the
engine forces every rank to the smallest block count (``get_kv_cache_configs``). Block size
(``vllm/platforms/cuda.py``): 16, 64 for MLA on Hopper (FlashMLA) and for every DSA model, 128 for
plain MLA on Blackwell (CUTLASS MLA), 16 for MLA on Ampere/Ada (Triton MLA).

Tokens and concurrency (``vllm/v1/core/kv_cache_utils.py``)::

    num_blocks  = floor(available / (block_size x bytes_per_token))      (min over PP stages)
    kv_tokens   = num_blocks x block_size x DCP                           (pool capacity)
    concurrency = num_blocks / ceil(ceil(max_model_len / DCP) / block_size)   (>= 0.21 formula)

Hybrid models (GLM-5.3-Flash: linear-attention KDA layers + sparse MLA layers) hold a fixed state
per request in the linear layers [inferred: fp32 recurrent state heads/TP x d x d plus the conv
state]; concurrency = available / (state + blocks_per_request x page), and kv_tokens is reported the
>= 0.21 way (concurrency x max_model_len). This is marked uncertain in the output.

A configuration fits when ``concurrency >= min_concurrency`` (with ``guarantee_min_concurrency``:
when ``concurrency x (1 - KV_TOKEN_ERROR) >= min_concurrency``; close calls are noted otherwise).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from glm_operator.catalog.models import (
    WEIGHT_PRECISIONS,
    CheckpointQuantization,
    ModelArchitecture,
    ResolvedModel,
)
from glm_operator.catalog.vllm import Version, format_version
from glm_operator.planning.memory.activation import activation_peak_bytes, compile_transient_bytes
from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, BudgetConstants
from glm_operator.planning.memory.cuda_graphs import MODEL_MAX_CAPTURE_SIZE, cudagraph_bytes
from glm_operator.planning.memory.load import (
    DEEP_GEMM_WORKSPACE_BYTES,
    allocator_waste_bytes,
    rope_cache_bytes,
    router_fp32_extra_bytes,
    weight_tensor_sizes,
)
from glm_operator.planning.memory.non_torch import fusion_workspace_bytes, non_torch_bytes
from glm_operator.planning.memory.settings import BudgetSettings, query_width_per_rank
from glm_operator.planning.memory.workspaces import (
    DSA_WORKSPACE_FACTOR_LONG,
    DSA_WORKSPACE_FACTOR_SHORT,
    DSA_WORKSPACE_FACTOR_SWITCH,
    dsa_workspace_bytes_per_context_token,
    dsa_workspace_factor,
    flashmla_sparse_load_workspace_bytes,
)
from glm_operator.planning.releases import (
    DEFAULT_VERSION,
    LARGEST_BATCH_GPU_GIB,
    VllmEngine,
    budget_generation,
    cublas_before_snapshot,
    cudagraph_in_budget,
    deep_gemm_pdl,
    default_gpu_memory_utilization,
    dsa_shared_workspace,
    flash_attn_version,
    flashinfer_sampler_default,
    fusion_workspace_rounded,
    large_gpu_batch_tier,
    load_max_split,
    model_runner_v2,
    v2_graph_estimate,
)

GIB = 1024**3
VOCAB_PADDING = 64
DEFAULT_MAX_NUM_SEQS = 256
# The budget model's stated error on KV-cache tokens, from its leave-one-model-out errors on the start-ups in
# tests/fixtures/vllm-startups.csv (benchmarks/fit_errors.py prints them): the worst over-promise of a
# held-out model (ours above the log) is 9.2 % on vLLM < 0.18 (Qwen3-235B-FP8, whose fused-MoE workspace only
# GLM-4.6 pins once it is held out; median 0.35 %), 1.0 % on 0.18-0.19 (28 rows) and 1.65 % on >= 0.20 (51
# predicted rows, 47 of them H200 start-ups each within 0.5 %: median 0.10 %; the 1.65 % is Qwen2.5-7B on an
# RTX 4090, whose V1 graph estimate, 0.53 GiB, is above the H200's 0.39 with the same FlashAttention 2, and
# the next, 0.8 %, Qwen3-Coder-30B on L40S). Kept global at 10 %: the operator's vLLM 0.33 profiles every
# model with Model Runner V2, whose forward and sampler are measured (H200) but whose CUDA-graph estimate
# rests on the 0.27.1 Qwen3-32B and GLM-5.2 rows and is not pinned at TP > 1 (budget.py: if it does not shrink
# with TP as the V1 runner's does, GLM at TP 8 plans 1.1-1.4 GiB per GPU too much, 4-5 % of a GLM-5.x FP8
# budget on H200, inside this margin). A plan whose concurrency is within this of minConcurrency may start
# below it.
KV_TOKEN_ERROR = 0.10
FP8_BLOCK = 128


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
    quantization: str = "auto"
    kv_cache_dtype: str = "auto"
    # None: the release's own default (planning.engine.default_gpu_memory_utilization: 0.92 from vLLM 0.26)
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    min_concurrency: float = 1.0
    available_kv_cache_gib: float | None = None
    extra_kv_layers: int = 0
    cudagraph_estimate: bool | None = None
    compute_capability: float = 9.0
    block_size: int | None = None
    # None: the release's default (planning.engine.flashinfer_sampler_default: FlashInfer from vLLM 0.22)
    flashinfer_sampler: bool | None = None
    custom_all_reduce: bool = True
    enforce_eager: bool = False
    # vLLM found its torch.compile artifacts in its cache (no compile in the profiling run, see
    # budget.compile_transient_bytes); the operator's pods keep no compile cache, so False for every plan
    compile_cache_warm: bool = False
    constants: BudgetConstants = DEFAULT_CONSTANTS
    weights_gib: float | None = None
    guarantee_min_concurrency: bool = False
    vllm_version: Version = DEFAULT_VERSION
    # which model runner profiles the model (vLLM >= 0.20): None is the release's choice for the architecture
    # (planning.engine.model_runner_v2); True/False is what VLLM_USE_V2_MODEL_RUNNER=1/0 forces
    model_runner_v2: bool | None = None
    # the FlashAttention generation (planning.engine.flash_attn_version): None is vLLM's choice for the GPU;
    # 2/3 is what --attention-config.flash_attn_version forces
    flash_attn_version: int | None = None

    @property
    def cudagraphs_in_budget(self) -> bool:
        if self.cudagraph_estimate is not None:
            return self.cudagraph_estimate
        return cudagraph_in_budget(self.vllm_version)


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
        }


# --------------------------------------------------------------------------------------------
# validation


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
    if arch.linear_attention_layers and arch.linear_num_heads % tp:
        return f"TP={tp} does not divide the {arch.linear_num_heads} linear-attention heads"
    if pp > arch.num_layers:
        return f"PP={pp} is larger than the {arch.num_layers} layers"
    if tp % dcp:
        return f"decode context parallel {dcp} must divide TP={tp}"
    return None


def resolve_weight_precision(
    model: ResolvedModel, quantization: str
) -> tuple[str, CheckpointQuantization | None]:
    """Weights precision for ``quantization`` ('auto' follows the checkpoint) and its storage layout."""
    ckpt = model.checkpoint_quantization
    q = quantization.lower()
    if q == "auto":
        if ckpt is not None:
            return ckpt.precision, ckpt
        return ("fp16" if model.architecture.dtype == "fp16" else "bf16"), None
    if q not in WEIGHT_PRECISIONS:
        raise FitInputError(f"quantization {quantization!r}: use auto, {', '.join(WEIGHT_PRECISIONS)}")
    if ckpt is not None and q in ("bf16", "fp16"):
        raise FitInputError(
            f"quantization {q}: checkpoint {model.model_id} is already {ckpt.precision} ({ckpt.method}); "
            "use quantization auto or a bf16 checkpoint"
        )
    if ckpt is not None and ckpt.precision == q:
        return q, ckpt
    if q == "fp8":
        # vLLM quantizes a bf16 checkpoint on the fly (--quantization fp8): per-channel scales
        return q, CheckpointQuantization("fp8-dynamic", "fp8", 0, 4.0)
    if q in ("int8", "int4", "nvfp4"):
        bits = 8 if q == "int8" else 4
        if q == "nvfp4":
            return q, CheckpointQuantization("modelopt", "nvfp4", 16, 1.0)
        # a pre-quantized GPTQ/AWQ-style checkpoint: group 128, fp16 scales (+ zero points for int4)
        return q, CheckpointQuantization("gptq", q, 128, 2.0, bits if bits == 4 else 0)
    return q, None


# --------------------------------------------------------------------------------------------
# weights


@dataclass(frozen=True)
class _Elements:
    """Parameter elements on one rank: quantizable linear weights vs. always-bf16 parameters."""

    linear: float = 0.0
    other: float = 0.0

    def __add__(self, o: _Elements) -> _Elements:
        return _Elements(self.linear + o.linear, self.other + o.other)

    def scale(self, k: float) -> _Elements:
        return _Elements(self.linear * k, self.other * k)


def _attention_elements(arch: ModelArchitecture, tp: int, with_indexer: bool) -> _Elements:
    h = arch.hidden_size
    heads = arch.num_attention_heads / tp
    if arch.is_mla:
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        linear = 0.0
        other = 2.0 * h  # input + post-attention layernorm
        if arch.q_lora_rank:
            linear += h * arch.q_lora_rank + arch.q_lora_rank * heads * qk
            other += arch.q_lora_rank
        else:
            linear += h * heads * qk
        linear += h * (arch.kv_lora_rank + arch.qk_rope_head_dim)  # kv_a_proj_with_mqa (replicated)
        linear += arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim)
        linear += heads * arch.v_head_dim * h
        other += arch.kv_lora_rank
        if with_indexer and arch.index_n_heads:
            q_in = arch.q_lora_rank or h
            linear += q_in * arch.index_n_heads * arch.index_head_dim + h * arch.index_head_dim
            other += h * arch.index_n_heads + 2 * arch.index_head_dim
        return _Elements(linear, other)
    kv_rank = max(1.0, arch.num_kv_heads / tp) * arch.head_dim
    q_rank = heads * arch.head_dim
    linear = h * (q_rank + 2 * kv_rank) + q_rank * h
    other = 2.0 * h
    if arch.attention_bias:
        other += q_rank + 2 * kv_rank
    if arch.qk_norm:
        other += 2 * arch.head_dim
    return _Elements(linear, other)


def _linear_attention_elements(arch: ModelArchitecture, tp: int) -> _Elements:
    """KDA (gated delta) layer [inferred]: q/k/v/o projections, gates, short convolution."""
    h = arch.hidden_size
    inner = arch.linear_num_heads * arch.linear_head_dim / tp
    heads = arch.linear_num_heads / tp
    linear = 4 * h * inner + 2 * h * heads + 2 * h * arch.linear_head_dim
    other = 3 * inner * arch.linear_conv_kernel_dim + 2.0 * h + heads
    return _Elements(linear, other)


def _mlp_elements(arch: ModelArchitecture, tp: int, layer: int) -> _Elements:
    h = arch.hidden_size
    if not arch.is_moe or layer < arch.first_k_dense_replace:
        return _Elements(3.0 * h * arch.intermediate_size / tp, 0.0)
    experts = arch.n_routed_experts * 3.0 * h * arch.moe_intermediate_size / tp
    shared = 3.0 * h * arch.shared_expert_intermediate_size / tp
    router = arch.n_routed_experts * h + arch.n_routed_experts
    return _Elements(experts + shared, float(router))


@functools.lru_cache(maxsize=4096)
def _layer_kinds(arch: ModelArchitecture) -> tuple[tuple[bool, bool], ...]:
    """Per layer: (is_linear_attention, has_indexer_cache), spread evenly where config lists are absent."""
    n = arch.num_layers
    linear = arch.linear_attention_layers
    attn = n - linear
    kinds = []
    attn_seen = 0
    idx_seen = 0
    for i in range(n):
        is_attn = linear == 0 or (i + 1) * attn // n > i * attn // n
        has_idx = False
        if is_attn and arch.indexer_cache_layers:
            has_idx = (
                attn_seen + 1
            ) * arch.indexer_cache_layers // attn > attn_seen * arch.indexer_cache_layers // attn
            idx_seen += has_idx
        attn_seen += is_attn
        kinds.append((not is_attn, has_idx))
    return tuple(kinds)


@functools.lru_cache(maxsize=4096)
def pp_layer_ranges(num_layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """vLLM ``get_pp_indices``: equal split, remainder layers on the stages before the last."""
    per = num_layers // pp
    parts = [per] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    ranges, start = [], 0
    for count in parts:
        ranges.append((start, start + count))
        start += count
    return tuple(ranges)


def count_parameters(arch: ModelArchitecture) -> float:
    """Total parameters (embeddings and lm_head included, MTP layers excluded)."""
    total = _stage_elements(arch, 1, 0, arch.num_layers, first=True, last=True)
    return total.linear + total.other


def _stage_elements(
    arch: ModelArchitecture, tp: int, start: int, end: int, first: bool, last: bool
) -> _Elements:
    kinds = _layer_kinds(arch)
    total = _Elements()
    for layer in range(start, end):
        is_linear, has_idx = kinds[layer]
        if is_linear:
            total = total + _linear_attention_elements(arch, tp)
        else:
            total = total + _attention_elements(arch, tp, has_idx)
        total = total + _mlp_elements(arch, tp, layer)
    vocab_rank = math.ceil(math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING / tp)
    if first:
        total = total + _Elements(0.0, float(vocab_rank * arch.hidden_size))
    if last:
        if not arch.tie_word_embeddings or not first:
            total = total + _Elements(0.0, float(vocab_rank * arch.hidden_size))
        total = total + _Elements(0.0, float(arch.hidden_size))
    return total


@functools.lru_cache(maxsize=4096)
def weights_bytes_per_stage(
    arch: ModelArchitecture, tp: int, pp: int, precision: str, layout: CheckpointQuantization | None
) -> tuple[float, ...]:
    """Weight bytes held by one rank of each pipeline stage."""
    other_bytes, linear_bytes = _element_bytes(arch, precision, layout)
    layout = _stored_layout(precision, layout)
    kept = layout.unquantized if layout is not None else ()
    out = []
    ranges = pp_layer_ranges(arch.num_layers, pp)
    for stage, (start, end) in enumerate(ranges):
        el = _stage_elements(arch, tp, start, end, first=stage == 0, last=stage == pp - 1)
        k = _unquantized_linear(arch, tp, start, end, kept) if kept else 0.0
        copies = 0.0
        if precision not in ("bf16", "fp16") and "self_attn" not in kept:
            copies = _mla_dequantized_copies(arch, tp, start, end)
        out.append((el.linear - k) * linear_bytes + el.other * other_bytes + (k + copies) * 2.0)
    return tuple(out)


def _element_bytes(
    arch: ModelArchitecture, precision: str, layout: CheckpointQuantization | None
) -> tuple[float, float]:
    """(bytes per norm/embedding element, bytes per linear weight) in ``precision``."""
    other_bytes = 4.0 if arch.dtype == "fp32" and precision not in ("bf16", "fp16") else 2.0
    stored = _stored_layout(precision, layout)
    return other_bytes, (stored.bytes_per_weight if stored else 2.0)


def _stored_layout(precision: str, layout: CheckpointQuantization | None) -> CheckpointQuantization | None:
    """How the linear weights are stored in ``precision``: the checkpoint's layout, vLLM's online
    quantization where the checkpoint is 16-bit, or None for 16-bit weights."""
    if precision in ("bf16", "fp16"):
        return None
    return layout or CheckpointQuantization.dynamic(precision)


@functools.lru_cache(maxsize=4096)
def load_extra_bytes_per_stage(
    arch: ModelArchitecture,
    tp: int,
    pp: int,
    precision: str,
    layout: CheckpointQuantization | None,
    scoped_max_split: bool,
) -> tuple[float, ...]:
    """What "Model loading took" counts beyond the weights on one rank of each pipeline stage: the RoPE
    cache, glm4_moe's fp32 router and the caching allocator's rounding of the weight tensors
    (:mod:`glm_operator.planning.memory.load`; DeepGEMM's workspace is added by the caller)."""
    other_bytes, _ = _element_bytes(arch, precision, layout)
    # the weight tensors alone (their scales are tensors apart, too small to round)
    stored = _stored_layout(precision, layout)
    tensor_bytes = stored.weight_bits / 8 if stored else 2.0
    kinds = _layer_kinds(arch)
    out = []
    for stage, (start, end) in enumerate(pp_layer_ranges(arch.num_layers, pp)):
        first, last = stage == 0, stage == pp - 1
        moe_layers = sum(1 for n in range(start, end) if arch.is_moe and n >= arch.first_k_dense_replace)
        sizes = weight_tensor_sizes(arch, tp, kinds[start:end], start, first, last, tensor_bytes)
        out.append(
            rope_cache_bytes(arch, other_bytes)
            + router_fp32_extra_bytes(arch, moe_layers, other_bytes)
            + allocator_waste_bytes(sizes, scoped_max_split)
        )
    return tuple(out)


def _mla_dequantized_copies(arch: ModelArchitecture, tp: int, start: int, end: int) -> float:
    """16-bit elements MLA keeps beside a quantized ``kv_b_proj`` in layers [start, end).

    vLLM's MLA attention (``MLACommonImpl.process_weights_after_loading``,
    ``vllm/v1/attention/backends/mla/common.py``, 0.8-0.33) dequantizes ``kv_b_proj`` into ``W_UK_T`` and
    ``W_UV`` ("we currently do not have quantized bmm's ... we just store fp16/bf16 copies") and keeps
    them next to the quantized weight; with a bf16 ``kv_b_proj`` they are views of it. They count in
    "Model loading took": GLM-4.7-Flash with --quantization fp8 loads 29.02 GiB on the H200 where its
    parameters count 28.48 (47 layers x 512 x 20 x 448 x 2 B = 0.40 GiB of copies), GLM-5-FP8 cut to 10
    layers 69.48 where they count 69.09 (0.27 GiB) (benchmarks/gpu_truth logs).
    """
    if not arch.is_mla:
        return 0.0
    kinds = _layer_kinds(arch)
    attention_layers = sum(1 for layer in range(start, end) if not kinds[layer][0])
    heads = arch.num_attention_heads / tp
    per_layer = arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim)
    return attention_layers * per_layer


def _unquantized_linear(
    arch: ModelArchitecture, tp: int, start: int, end: int, kept: tuple[str, ...]
) -> float:
    """Linear elements of layers [start, end) a quantized checkpoint keeps in 16 bits
    (``CheckpointQuantization.unquantized``: shared experts, attention projections)."""
    total = 0.0
    kinds = _layer_kinds(arch)
    for layer in range(start, end):
        if "shared_experts" in kept and arch.is_moe and layer >= arch.first_k_dense_replace:
            total += 3.0 * arch.hidden_size * arch.shared_expert_intermediate_size / tp
        if "self_attn" in kept:
            is_linear, has_idx = kinds[layer]
            el = _linear_attention_elements(arch, tp) if is_linear else _attention_elements(arch, tp, has_idx)
            total += el.linear
    return total


# --------------------------------------------------------------------------------------------
# KV cache


def kv_dtype_bytes(arch: ModelArchitecture, kv_cache_dtype: str) -> int:
    d = kv_cache_dtype.lower()
    if d == "auto":
        return 4 if arch.dtype == "fp32" else 2
    if d.startswith("fp8"):
        return 1
    if d in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return 2
    raise FitInputError(f"kv_cache_dtype {kv_cache_dtype!r}: use auto or fp8")


def attention_layer_kv_bytes(arch: ModelArchitecture, tp: int, kv_cache_dtype: str) -> int:
    """KV bytes per token for one attention layer on one rank (indexer not included)."""
    b = kv_dtype_bytes(arch, kv_cache_dtype)
    if arch.is_mla:
        if b == 1 and arch.attention in ("mla+dsa", "hybrid"):
            # fp8_ds_mla: fp8 NoPE latent + fp32 scale per 128 + bf16 RoPE part (656 B for GLM-5)
            return arch.kv_lora_rank + arch.kv_lora_rank // 128 * 4 + arch.qk_rope_head_dim * 2
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * b
    return 2 * max(1, arch.num_kv_heads // tp) * arch.head_dim * b


def indexer_layer_kv_bytes(arch: ModelArchitecture) -> float:
    """DSA indexer K cache: fp8 key + fp32 scale per 128 (132 B for index_head_dim 128)."""
    if not arch.index_head_dim:
        return 0.0
    return (arch.index_head_dim + arch.index_head_dim // 128 * 4) / arch.indexer_key_pool


@functools.lru_cache(maxsize=4096)
def kv_bytes_per_token_per_stage(
    arch: ModelArchitecture, tp: int, pp: int, kv_cache_dtype: str, extra_kv_layers: int = 0
) -> tuple[int, ...]:
    """KV bytes per token on one rank of each pipeline stage (MTP/draft layers on the last stage)."""
    per_attn = attention_layer_kv_bytes(arch, tp, kv_cache_dtype)
    per_idx = indexer_layer_kv_bytes(arch)
    kinds = _layer_kinds(arch)
    out = []
    ranges = pp_layer_ranges(arch.num_layers, pp)
    for stage, (start, end) in enumerate(ranges):
        total = 0.0
        for layer in range(start, end):
            is_linear, has_idx = kinds[layer]
            if not is_linear:
                total += per_attn + (per_idx if has_idx else 0.0)
        if stage == pp - 1 and extra_kv_layers:
            total += extra_kv_layers * (per_attn + per_idx)
        out.append(math.ceil(total))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def per_request_state_bytes(arch: ModelArchitecture, tp: int, pp: int) -> tuple[int, ...]:
    """Fixed per-request state of linear-attention layers per rank and stage [inferred, uncertain]."""
    if not arch.linear_attention_layers:
        return (0,) * pp
    heads = arch.linear_num_heads // tp
    d = arch.linear_head_dim
    per_layer = heads * d * d * 4 + (arch.linear_conv_kernel_dim - 1) * 3 * heads * d * 2
    kinds = _layer_kinds(arch)
    return tuple(
        per_layer * sum(1 for layer in range(s, e) if kinds[layer][0])
        for s, e in pp_layer_ranges(arch.num_layers, pp)
    )


def default_block_size(arch: ModelArchitecture, compute_capability: float) -> int:
    if arch.attention in ("mla+dsa", "hybrid"):
        return 64
    if arch.attention == "mla":
        if compute_capability >= 10.0:
            return 128
        if compute_capability >= 9.0:
            return 64
    return 16


# --------------------------------------------------------------------------------------------
# activation / overheads


def default_max_num_batched_tokens(
    gpu_memory_gib: float, compute_capability: float = 9.0, vllm_version: Version = DEFAULT_VERSION
) -> int:
    """vLLM's OpenAI-server default (``vllm/engine/arg_utils.py``, see ``planning.engine``): 8192 on
    GPUs with >= 70 GiB except the A100 (compute capability 8.0), else 2048; from 0.33 16384 on GPUs
    with >= 160 GiB (B200, B300)."""
    if gpu_memory_gib >= LARGEST_BATCH_GPU_GIB and large_gpu_batch_tier(vllm_version):
        return 16384
    return 8192 if gpu_memory_gib >= 70 and compute_capability != 8.0 else 2048


# --------------------------------------------------------------------------------------------
# the fit, in steps: check the input, weights per GPU, the memory budget, KV capacity, the verdict


class _MemoryBudget(NamedTuple):
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


class _KvCapacity(NamedTuple):
    """The KV cache of the pipeline stage that holds the fewest sequences (vLLM's block count)."""

    stage: int
    bytes_per_token: int
    request_state: int
    block_size: int
    blocks: int
    concurrency: float
    tokens: int


class _Verdict(NamedTuple):
    """Whether the concurrency meets minConcurrency, and whether it does so within the model's error."""

    fits: bool
    guaranteed: float
    within_error: bool


def _check_fit_input(inp: FitInput) -> float:
    """Raise :class:`FitInputError` where vLLM would refuse the input; return the memory utilization."""
    model = inp.model
    error = parallelism_error(
        model.architecture,
        inp.tensor_parallel_size,
        inp.pipeline_parallel_size,
        inp.decode_context_parallel_size,
    )
    if error:
        raise FitInputError(error)
    if inp.max_model_len < 1:
        raise FitInputError("max_model_len must be >= 1")
    if inp.max_model_len > model.max_context:
        raise FitInputError(
            f"max_model_len {inp.max_model_len} exceeds {model.name}'s limit of {model.max_context} tokens; "
            f"use at most {model.max_context}"
        )
    util = (
        inp.gpu_memory_utilization
        if inp.gpu_memory_utilization is not None
        else default_gpu_memory_utilization(inp.vllm_version)
    )
    if not 0 < util <= 1:
        raise FitInputError("gpu_memory_utilization must be in (0, 1]")
    return util


def _weights_per_gpu(
    inp: FitInput, precision: str, layout: CheckpointQuantization | None
) -> tuple[float, ...]:
    """Weight bytes on one rank of each pipeline stage: counted from the config, scaled up to vLLM's
    logged figure where the catalog has one, or the ``weights_gib`` given."""
    model, arch = inp.model, inp.model.architecture
    scoped = load_max_split(inp.vllm_version)
    # DeepGEMM's PDL workspace: the first MoE or FP8 layer allocates it on SM90+ (planning.load_memory)
    deep_gemm = deep_gemm_pdl(inp.vllm_version) and inp.compute_capability >= 9.0
    workspace = DEEP_GEMM_WORKSPACE_BYTES if deep_gemm and (arch.is_moe or precision == "fp8") else 0.0

    def loaded(tp: int, pp: int) -> tuple[float, ...]:
        params = weights_bytes_per_stage(arch, tp, pp, precision, layout)
        extra = load_extra_bytes_per_stage(arch, tp, pp, precision, layout, scoped)
        return tuple(p + e + workspace for p, e in zip(params, extra, strict=True))

    weights = loaded(inp.tensor_parallel_size, inp.pipeline_parallel_size)
    logged = model.loaded_weights(precision)
    if logged is not None:
        # vLLM loads more than the config counts (catalog ``loaded_weights``): scale up to its own
        # "Model loading took" figure, assuming the difference shards with TP like the rest
        counted = loaded(logged[0], 1)[0]
        scale = logged[1] * GIB / counted
        if scale > 1:
            weights = tuple(w * scale for w in weights)
    if inp.weights_gib is not None:
        # a checkpoint layout we do not model (MXFP4, vision towers): the logged "Model loading took"
        weights = tuple(inp.weights_gib * GIB for _ in weights)
    return weights


def _budget_settings(inp: FitInput, precision: str) -> BudgetSettings:
    """The engine settings vLLM's profiling run depends on (batch sizes, sampler, runner, release)."""
    arch = inp.model.architecture
    hybrid = arch.linear_attention_layers > 0
    runner_v2 = (
        model_runner_v2(inp.vllm_version, arch.architecture, arch.is_moe, hybrid)
        if inp.model_runner_v2 is None
        else inp.model_runner_v2
    )
    q_width = 0 if arch.is_mla else query_width_per_rank(arch, inp.tensor_parallel_size)
    fa_version = inp.flash_attn_version or flash_attn_version(inp.compute_capability)
    return BudgetSettings(
        max_num_batched_tokens=inp.max_num_batched_tokens
        or default_max_num_batched_tokens(inp.gpu_memory_gib, inp.compute_capability, inp.vllm_version),
        max_num_seqs=inp.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        flashinfer_sampler=(
            inp.flashinfer_sampler
            if inp.flashinfer_sampler is not None
            else flashinfer_sampler_default(inp.vllm_version)
        ),
        custom_all_reduce=inp.custom_all_reduce,
        enforce_eager=inp.enforce_eager,
        compile_cache_warm=inp.compile_cache_warm,
        max_model_len=inp.max_model_len,
        compute_capability=inp.compute_capability,
        decode_context_parallel_size=inp.decode_context_parallel_size,
        generation=budget_generation(inp.vllm_version),  # the release's profiling run
        fusion_workspace_rounded=fusion_workspace_rounded(inp.vllm_version),
        fp8_experts=precision == "fp8",
        unquantized_experts=precision in ("bf16", "fp16"),
        fp8_online_mla=precision == "fp8" and inp.model.checkpoint_quantization is None and arch.is_mla,
        model_runner_v1=cudagraph_in_budget(inp.vllm_version) and not runner_v2,
        v2_graph_estimate=v2_graph_estimate(inp.vllm_version),
        cublas_before_snapshot=cublas_before_snapshot(inp.vllm_version),
        kv_cache_fp8=inp.kv_cache_dtype.lower() == "fp8",
        dsa_shared_workspace=dsa_shared_workspace(inp.vllm_version),
        max_cudagraph_capture_size=MODEL_MAX_CAPTURE_SIZE.get(arch.architecture, 0),
        mla=arch.is_mla,
        # FlashAttention 2 pre-allocates no split-KV accumulators for FULL graphs (see cudagraph_bytes)
        graph_q_width=0 if fa_version == 2 else q_width,
        qk_norm_q_width=q_width if arch.qk_norm else 0,
        dsa_graph_index_heads=(
            arch.index_n_heads if arch.attention == "mla+dsa" and inp.kv_cache_dtype.lower() != "fp8" else 0
        ),
    )


def _memory_budget(
    inp: FitInput, util: float, weights: tuple[float, ...], settings: BudgetSettings
) -> _MemoryBudget:
    """requested - weights - activation peak - non-torch - CUDA graphs, per pipeline stage (or the
    ``available_kv_cache_gib`` given)."""
    arch = inp.model.architecture
    tp, pp = inp.tensor_parallel_size, inp.pipeline_parallel_size
    requested = inp.gpu_memory_gib * GIB * util
    # only the last PP stage runs the profiling run's sampler
    acts = [
        activation_peak_bytes(arch, tp, settings, inp.constants, last_stage=s == pp - 1) for s in range(pp)
    ]
    non_torch = non_torch_bytes(tp, pp, settings, inp.constants, arch.hidden_size)
    stage_layers = max(end - start for start, end in pp_layer_ranges(arch.num_layers, pp))
    graphs = cudagraph_bytes(stage_layers, settings, inp.constants, tp)
    in_budget = inp.cudagraphs_in_budget
    cg = graphs if in_budget else 0.0
    if inp.available_kv_cache_gib is not None:
        available = [inp.available_kv_cache_gib * GIB] * pp
    else:
        available = [requested - w - a - non_torch - cg for w, a in zip(weights, acts, strict=True)]
    return _MemoryBudget(
        utilization=util,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        requested=requested,
        weights=weights,
        activations=acts,
        non_torch=non_torch,
        fusion_workspace=fusion_workspace_bytes(arch.hidden_size, tp, pp, settings),
        cudagraph_estimate=graphs,
        cudagraphs_in_budget=in_budget,
        available=available,
        compile_transient=compile_transient_bytes(arch, tp, settings),
    )


def _stage_blocks_and_concurrency(
    available: float, bytes_per_token: int, request_state: int, block: int, blocks_per_request: int
) -> tuple[int, float]:
    """KV blocks and concurrent sequences one pipeline stage's pool holds (hybrid models: each
    sequence also holds its fixed linear-attention state)."""
    page = block * bytes_per_token
    if available <= 0 or page <= 0:
        return 0, 0.0
    if request_state:
        concurrency = available / (request_state + blocks_per_request * page)
        return int(concurrency * blocks_per_request), concurrency
    blocks = int(available // page)
    return blocks, blocks / blocks_per_request


def _kv_capacity(inp: FitInput, available: list[float], kv_dtype: str) -> _KvCapacity:
    """Blocks, tokens and concurrency of the KV cache: the smallest over the pipeline stages."""
    arch = inp.model.architecture
    tp, pp, dcp = inp.tensor_parallel_size, inp.pipeline_parallel_size, inp.decode_context_parallel_size
    bpt = kv_bytes_per_token_per_stage(arch, tp, pp, kv_dtype, inp.extra_kv_layers)
    state = per_request_state_bytes(arch, tp, pp)
    block = inp.block_size or default_block_size(arch, inp.compute_capability)
    blocks_per_request = math.ceil(math.ceil(inp.max_model_len / dcp) / block)
    stages = [
        _stage_blocks_and_concurrency(avail, per_token, st, block, blocks_per_request)
        for avail, per_token, st in zip(available, bpt, state, strict=True)
    ]
    worst = min(range(pp), key=lambda s: stages[s][1])
    blocks, concurrency = stages[worst]
    # hybrid models: reported the >= 0.21 way, sequences x max_model_len
    hybrid = arch.linear_attention_layers > 0
    tokens = int(concurrency * inp.max_model_len) if hybrid else blocks * block * dcp
    return _KvCapacity(worst, bpt[worst], state[worst], block, blocks, concurrency, tokens)


def _verdict(inp: FitInput, concurrency: float) -> _Verdict:
    """Fits when concurrency >= minConcurrency; with ``guarantee_min_concurrency`` also after the
    budget model's KV-token error."""
    fits = concurrency >= inp.min_concurrency and concurrency > 0
    guaranteed = concurrency * (1 - KV_TOKEN_ERROR)
    within_error = fits and guaranteed < inp.min_concurrency and inp.available_kv_cache_gib is None
    if inp.guarantee_min_concurrency and within_error:
        fits = False
    return _Verdict(fits, guaranteed, within_error)


def _budget_reason(inp: FitInput, budget: _MemoryBudget, stage: int) -> str:
    """The budget's subtraction for one stage, in GiB."""
    fusion = budget.fusion_workspace
    return (
        f"budget {budget.requested / GIB:.2f} GiB ({inp.gpu_memory_gib:.2f} GiB x "
        f"{budget.utilization}) - "
        f"weights - activation {budget.activations[stage] / GIB:.2f} GiB "
        f"({_activation_source(budget, stage)}) - "
        f"non-torch {budget.non_torch / GIB:.2f} GiB"
        + (f" (of it {fusion / GIB:.2f} GiB FlashInfer all-reduce fusion workspace)" if fusion else "")
        + f" - CUDA graphs {budget.cudagraphs_counted / GIB:.2f} GiB "
        f"({'counted' if budget.cudagraphs_in_budget else 'not counted'} by vLLM "
        f"{format_version(inp.vllm_version)}) = "
        f"{budget.available[stage] / GIB:.2f} GiB for the KV cache"
    )


def _activation_source(budget: _MemoryBudget, stage: int) -> str:
    """What sets a stage's activation peak: the profiling run's batch, or the cold torch.compile inside it."""
    batch = f"max_num_batched_tokens {budget.max_num_batched_tokens}"
    if budget.compile_transient and budget.compile_transient >= budget.activations[stage]:
        return f"a cold torch.compile, about the embedding table; {batch}"
    return batch


def _margin(inp: FitInput, kv: _KvCapacity, verdict: _Verdict) -> str:
    return (
        f"concurrency {kv.concurrency:.2f} is within the budget model's {KV_TOKEN_ERROR:.0%} KV-token error "
        f"of minConcurrency {inp.min_concurrency:g} (worst case {verdict.guaranteed:.2f})"
    )


def _reasons(
    inp: FitInput, precision: str, kv_dtype: str, budget: _MemoryBudget, kv: _KvCapacity, verdict: _Verdict
) -> list[str]:
    """The fit in words: weights, the budget, the KV cache and the verdict, at the limiting stage."""
    tp, pp, dcp = inp.tensor_parallel_size, inp.pipeline_parallel_size, inp.decode_context_parallel_size
    worst = kv.stage
    reasons = [
        f"weights {budget.weights[worst] / GIB:.2f} GiB per GPU ({precision}, TP={tp}"
        + (f", PP={pp}, stage {worst + 1} of {pp}" if pp > 1 else "")
        + ")",
    ]
    if inp.available_kv_cache_gib is None:
        reasons.append(_budget_reason(inp, budget, worst))
    available = budget.available[worst]
    if available <= 0:
        reasons.append(
            f"no memory left for the KV cache: short by {-available / GIB:.2f} GiB per GPU "
            "(more GPUs, a lower precision or a higher gpu memory utilization)"
        )
    else:
        reasons.append(
            f"KV cache {kv.bytes_per_token} bytes per token per GPU ({kv_dtype} KV, block {kv.block_size}"
            + (f", DCP={dcp}" if dcp > 1 else "")
            + f"): {kv.tokens} tokens, {kv.concurrency:.2f} concurrent {inp.max_model_len}-token sequences"
        )
    arch = inp.model.architecture
    if arch.linear_attention_layers:
        reasons.append(
            f"hybrid model: {kv.request_state / 2**20:.1f} MiB fixed state per request in "
            f"{arch.linear_attention_layers} linear-attention layers counted per sequence"
        )
    verdict_word = "fits" if verdict.fits else "does not fit"
    reasons.append(
        f"{verdict_word}: concurrency {kv.concurrency:.2f} vs minConcurrency {inp.min_concurrency:g}"
    )
    if verdict.within_error and inp.guarantee_min_concurrency:
        reasons.append(f"{_margin(inp, kv, verdict)}: not a guaranteed fit")
    return reasons


# GLM-5.x (DSA) start-ups measured up to this many batched tokens within 1 % (benchmarks/gpu_truth: GLM-5 and
# GLM-5-FP8 at 2048, 8192 and 16384)
DSA_MEASURED_BATCHED_TOKENS = 16384


def _uncertainties(inp: FitInput, budget: _MemoryBudget, kv: _KvCapacity, verdict: _Verdict) -> list[str]:
    """What the figures cannot promise: the model's own notes, hybrid state, graphs outside the
    budget, a concurrency within the model's error."""
    uncertain = list(inp.model.notes)
    if inp.model.architecture.linear_attention_layers:
        uncertain.append(
            "hybrid linear-attention model: per-request state size and vLLM's hybrid page padding are "
            "approximations; token capacity is uncertain"
        )
    graphs = budget.cudagraph_estimate
    headroom = inp.gpu_memory_gib * GIB * (1 - budget.utilization)
    if inp.available_kv_cache_gib is None and not budget.cudagraphs_in_budget and graphs > headroom:
        uncertain.append(
            f"CUDA graphs (~{graphs / GIB:.2f} GiB) are captured after the KV cache, outside "
            f"gpu_memory_utilization, and the {headroom / GIB:.2f} GiB left may not hold them: lower the "
            "utilization or serve with --enforce-eager"
        )
    if (
        inp.model.architecture.attention == "mla+dsa"
        and budget.max_num_batched_tokens > DSA_MEASURED_BATCHED_TOKENS
    ):
        uncertain.append(
            f"max-num-batched-tokens {budget.max_num_batched_tokens} on a DSA model (GLM-5.x): start-ups "
            f"were measured up to {DSA_MEASURED_BATCHED_TOKENS} (within 1 % of vLLM 0.26's KV tokens); above "
            "that the profiling run's peak is extrapolated; set guaranteeMinConcurrency for a margin"
        )
    if verdict.within_error and not inp.guarantee_min_concurrency:
        uncertain.append(
            f"{_margin(inp, kv, verdict)}: vLLM may start with fewer; ask for a guarantee to plan a margin"
        )
    return uncertain


def _notes(inp: FitInput, layout: CheckpointQuantization | None) -> list[str]:
    """Hints for serving: the KV budget given, expert parallelism for FP8 block-quantized experts."""
    notes = []
    if inp.available_kv_cache_gib is not None:
        notes.append(
            f"available KV cache memory given as {inp.available_kv_cache_gib:.2f} GiB (budget not computed)"
        )
    arch, tp = inp.model.architecture, inp.tensor_parallel_size
    block_quantized = layout is not None and layout.group_size == FP8_BLOCK * FP8_BLOCK
    if arch.is_moe and block_quantized and tp > 1 and (arch.moe_intermediate_size // tp) % FP8_BLOCK:
        notes.append(
            f"FP8 block-quantized experts: moe_intermediate_size/TP = {arch.moe_intermediate_size // tp} "
            "is not a multiple of 128; serve with --enable-expert-parallel"
        )
    return notes


def estimate_fit(inp: FitInput) -> FitResult:
    """Weights, KV cache and concurrency per GPU for one instance; see the module docstring."""
    util = _check_fit_input(inp)
    precision, layout = resolve_weight_precision(inp.model, inp.quantization)
    kv_dtype = inp.kv_cache_dtype.lower()
    kv_dtype_bytes(inp.model.architecture, kv_dtype)  # validates
    settings = _budget_settings(inp, precision)
    # vLLM's "Model loading took" also holds what FlashMLA-sparse reserves while the model is built (unless
    # the weights are already a logged "Model loading took" figure: the catalog's or the one given)
    logged = inp.weights_gib is not None or inp.model.loaded_weights(precision) is not None
    load_workspace = (
        0.0
        if logged
        else flashmla_sparse_load_workspace_bytes(inp.model.architecture, inp.tensor_parallel_size, settings)
    )
    weights = tuple(w + load_workspace for w in _weights_per_gpu(inp, precision, layout))
    budget = _memory_budget(inp, util, weights, settings)
    kv = _kv_capacity(inp, budget.available, kv_dtype)
    verdict = _verdict(inp, kv.concurrency)
    worst = kv.stage
    return FitResult(
        tensor_parallel_size=inp.tensor_parallel_size,
        pipeline_parallel_size=inp.pipeline_parallel_size,
        decode_context_parallel_size=inp.decode_context_parallel_size,
        quantization=precision,
        kv_cache_dtype=kv_dtype,
        max_model_len=inp.max_model_len,
        gpu_memory_gib=inp.gpu_memory_gib,
        gpu_memory_utilization=util,
        requested_gib=budget.requested / GIB,
        weights_gib_per_gpu=max(budget.weights) / GIB,
        weights_gib_per_stage=tuple(w / GIB for w in budget.weights),
        activation_gib=budget.activations[worst] / GIB,
        non_torch_gib=budget.non_torch / GIB,
        cudagraph_gib=budget.cudagraphs_counted / GIB,
        available_kv_cache_gib_per_gpu=budget.available[worst] / GIB,
        kv_cache_bytes_per_token_per_gpu=kv.bytes_per_token,
        per_request_state_bytes_per_gpu=kv.request_state,
        block_size=kv.block_size,
        kv_cache_blocks=kv.blocks,
        kv_cache_tokens=kv.tokens,
        max_concurrency=kv.concurrency,
        min_concurrency=inp.min_concurrency,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        fits=verdict.fits,
        reasons=tuple(_reasons(inp, precision, kv_dtype, budget, kv, verdict)),
        uncertain=tuple(dict.fromkeys(_uncertainties(inp, budget, kv, verdict))),
        notes=tuple(_notes(inp, layout)),
        cudagraph_capture_gib=budget.cudagraph_estimate / GIB,
        dsa_workspace_bytes_per_context_token=dsa_workspace_bytes_per_context_token(
            inp.model.architecture, settings
        ),
        vllm_version=format_version(inp.vllm_version),
    )


def max_context_for(result: FitResult, concurrency: float = 1.0) -> int:
    """Largest max_model_len that still gives ``concurrency`` sequences.

    Activation and weights do not depend on max_model_len in the V1 engine (chunked prefill), so the
    pool is fixed, except for DSA models, whose profiling run reserves prefill workspaces that grow by
    ``dsa_workspace_bytes_per_context_token`` per token of max_model_len (planning/budget.py): there the
    pool at context L is ``available + k x (max_model_len - L)``, solved for L. The answer is rounded
    down to whole blocks.
    """
    if result.kv_cache_tokens <= 0 or concurrency <= 0:
        return 0
    block = result.block_size * result.decode_context_parallel_size
    k = result.dsa_workspace_bytes_per_context_token
    if k and not result.per_request_state_bytes_per_gpu:
        # L x concurrency x bpt / DCP = available + k x max_model_len - k(L) x L, where the workspace
        # factor in k(L) is 5 up to 256K tokens and 2 above (budget.dsa_workspace_factor): solved per side
        per_token = result.kv_cache_bytes_per_token_per_gpu / result.decode_context_parallel_size
        pool = result.available_kv_cache_gib_per_gpu * GIB + k * result.max_model_len
        per_factor = k / dsa_workspace_factor(result.max_model_len)
        long = pool / (concurrency * per_token + DSA_WORKSPACE_FACTOR_LONG * per_factor)
        short = pool / (concurrency * per_token + DSA_WORKSPACE_FACTOR_SHORT * per_factor)
        tokens = long if long > DSA_WORKSPACE_FACTOR_SWITCH else min(short, DSA_WORKSPACE_FACTOR_SWITCH)
        return max(0, int(tokens // block) * block)
    if result.per_request_state_bytes_per_gpu:
        avail = result.available_kv_cache_gib_per_gpu * GIB
        per_seq_budget = avail / concurrency - result.per_request_state_bytes_per_gpu
        tokens = (
            per_seq_budget / result.kv_cache_bytes_per_token_per_gpu * result.decode_context_parallel_size
        )
    else:
        tokens = result.kv_cache_tokens / concurrency
    return max(0, int(tokens // block) * block)
