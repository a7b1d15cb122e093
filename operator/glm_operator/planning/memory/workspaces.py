"""Scratch buffers vLLM's profiling run keeps: the fused-MoE workspace and the DSA workspaces (pure).

The fused-MoE kernels take their buffers from the worker's workspace manager, which keeps its
high-water mark; DSA models (GLM-5.x) reserve prefill workspaces sized by ``max_model_len``. Formulas,
vLLM source lines and measurements: docs/memory-model.md ("Workspaces").
"""

from __future__ import annotations

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, GIB, BudgetConstants
from glm_operator.planning.memory.settings import BudgetSettings, ProfilingRun, is_hopper
from glm_operator.planning.releases import Generation

# DSA prefill workspaces (vLLM 0.33.0, sources in the module docstring)
DSA_WORKSPACE_FACTOR_SHORT = 5  # max_model_len <= DSA_WORKSPACE_FACTOR_SWITCH

DSA_WORKSPACE_FACTOR_LONG = 2

DSA_WORKSPACE_FACTOR_SWITCH = 256 * 1024

DSA_INDEXER_ROWS_PER_FACTOR = 576 * 2 // 132  # 8

DSA_INDEXER_ROW_BYTES = 132  # fp8 key 128 + fp32 scale

DSA_PREFILL_ROW_BYTES = 576 * 2  # bf16 MLA latent + rope

DSA_MAX_LOGITS_BYTES = 512 * 2**20  # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB default

DSA_RADIX_TOPK_WORKSPACE_BYTES = 2**20  # RADIX_TOPK_WORKSPACE_SIZE, vLLM 0.26 sparse_attn_indexer.py L42

# vLLM 0.26 get_max_prefill_buffer_size (v1/attention/backends/mla/indexer.py L231-241): 40 x max_model_len
V1_DSA_GATHER_ROWS_PER_CONTEXT_TOKEN = 40

# vLLM 0.26 flashmla_sparse.py get_prefill_workspace_size (L222-229): 5 x max_model_len
FLASHMLA_SPARSE_PREFILL_ROWS_PER_CONTEXT_TOKEN = 5

DSA_INDEX_TOPK = 2048  # config index_topk of GLM-5.x and DeepSeek-V3.2 (not in ModelArchitecture)

FLASHMLA_SPARSE_CAPABILITIES = (9, 10)  # FlashMLA's sparse kernels: Hopper and datacenter Blackwell

# the fitted vLLM < 0.18 fused-MoE residual only on these GPUs (empirical, see the module docstring)
MOE_WORKSPACE_MIN_COMPUTE_CAPABILITY = 9.0


def moe_workspace_bytes(
    arch: ModelArchitecture,
    tp: int,
    c: BudgetConstants = DEFAULT_CONSTANTS,
    compute_capability: float = 9.0,
    settings: BudgetSettings | None = None,
) -> float:
    """Fused-MoE workspace held through the profiling run.

    vLLM >= 0.18 (``settings.generation`` mid or newer): the fused-MoE kernels take their scratch buffers
    from the worker's workspace manager, which keeps the high-water mark for the whole process (0.33
    ``vllm/model_executor/layers/fused_moe/modular_kernel.py``: ``current_workspace_manager()
    .get_simultaneous`` of workspace13 (tokens, top-k, max(2 x I/TP, hidden)) and workspace2 (tokens,
    top-k, I/TP)), on every GPU; sized at max_num_batched_tokens, scaled by the fitted
    ``v2.moe_workspace_scale`` for FP8 experts and under Model Runner V2 (bf16 experts on Hopper aside,
    which take TritonExperts' buffers under either runner; no V2 row with other experts: kept
    conservative), else the run's own (``mid.moe_workspace_scale``) (the
    block-scaled FP8 grouped GEMMs add quantized copies, scales and per-expert padding: GLM-5.2-FP8 on
    H200 and GLM-5.3-FP8 on vLLM 0.28 need the larger scale, bf16 Qwen3-MoE on 0.24 and MXFP4 gpt-oss on
    0.28 the 0.19 one). Older releases: a fixed fitted workspace on Hopper or newer with TP > 1 (see the
    module docstring).
    """
    if not arch.is_moe:
        return 0.0
    if settings is not None and settings.generation != Generation.OLDER:
        # the workspace manager exists from 0.18 on (0.19 ``Worker.init_device``: init_workspace_manager)
        # With data-parallel attention (expert parallel), the fused-MoE kernel runs on the tokens every DP
        # rank gathered (allgather_reducescatter, vLLM's default all-to-all: nothing splits the MoE work over
        # DP), top-k of all experts, on whole experts: M = DP x max_num_batched_tokens, I per expert unsplit
        # (vLLM 0.33 ``fused_moe/modular_kernel.py`` L1354-1368) [inferred from the code; not measured]
        dp = max(1, settings.data_parallel_size)
        expert_tp = 1 if dp > 1 else tp
        inter = arch.moe_intermediate_size / expert_tp
        k = arch.num_experts_per_tok or 1
        per_token = k * (max(2 * inter, arch.hidden_size) + inter) * 2
        tokens = settings.max_num_batched_tokens * dp
        gathered = dp * settings.max_num_batched_tokens * arch.hidden_size * 2.0 if dp > 1 else 0.0
        # the workspace manager is the fused-MoE layer's, whichever model runner profiles; its size follows
        # the expert kernels: FP8 block-scaled grouped GEMMs (GLM-5.x FP8 on H200 with vLLM 0.28 and 0.33)
        # hold far more than the bf16 / MXFP4 kernels (0.19 sweep; Qwen3-MoE bf16 on 0.24, gpt-oss on 0.28)
        # (no Model Runner V2 row has MXFP4/NVFP4 experts, nor bf16 ones off Hopper: V2 keeps the larger
        # scale for them)
        # bf16 experts on Hopper run through TritonExperts whichever runner profiles: the unquantized MoE
        # oracle puts Triton first on compute capability 9.x (``_get_priority_backends`` in
        # ``fused_moe/oracle/unquantized.py``, read in 0.26.0 and 0.33.0, the same workspace shapes in both);
        # GLM-4.7's shapes and GLM-4.5-Air on Model Runner V2 (0.26, forced) peak at 2.24 / 1.95 GiB as on V1
        hopper_bf16 = settings.unquantized_experts and is_hopper(compute_capability)
        run = settings.profiling_run
        # expert parallel: the modular kernel's buffers for whole experts at M gathered tokens, as read (the
        # fitted scales below belong to TP-sharded experts)
        if run == ProfilingRun.V1 or (run == ProfilingRun.V2 and hopper_bf16) or dp > 1:
            # the V1 runner of vLLM >= 0.20 (H200, 0.26: the Triton fused-MoE backend for bf16 and FP8 experts
            # alike, "Using TRITON Fp8 MoE backend" in the GLM-5-FP8 and Qwen3-30B-A3B-FP8 logs): the
            # TritonExperts buffers as vLLM 0.26 requests them (triton_experts_workspace_bytes)
            triton = triton_experts_workspace_bytes(arch, expert_tp, tokens)
            return c.v1.moe_workspace_scale * triton + gathered
        # FP8 block-scaled experts take Model Runner V2's larger scale under either runner
        scale = c.v2.moe_workspace_scale if settings.fp8_experts else c.profiling(run).moe_workspace_scale
        return scale * per_token * tokens + gathered
    if tp <= 1 or compute_capability < MOE_WORKSPACE_MIN_COMPUTE_CAPABILITY:
        return 0.0
    return c.older_moe_workspace_gib * GIB


def triton_experts_workspace_bytes(arch: ModelArchitecture, tp: int, tokens: int) -> float:
    """The fused-MoE workspace vLLM 0.26's modular Triton experts take from the workspace manager.

    One bf16 buffer of max(workspace13, output) and one of workspace2 in ``TritonExperts.workspace_shapes``'
    shapes, at M = max_num_batched_tokens; it stays at its high-water mark. GLM-5: 192 KiB per token, 3.0 GiB
    at 16384 tokens. docs/memory-model.md, 5.1 ("Fused-MoE workspace") has the source lines.
    """
    if not arch.is_moe:
        return 0.0
    m, k, h = tokens, arch.num_experts_per_tok or 1, arch.hidden_size
    inter = arch.moe_intermediate_size / tp
    workspace13 = max(m * k * max(inter, h), m * h)
    workspace2 = m * k * max(2 * inter, h)
    return float((workspace13 + workspace2) * 2)


def triton_fused_moe_bytes(
    arch: ModelArchitecture,
    tp: int,
    tokens: int,
    *,
    expert_parallel: bool = False,
    fp8_block: int | None = None,
    out_of_place: bool = False,
    chunk_size: int = 32768,
) -> float:
    """Scratch one call of vLLM < 0.18's Triton ``fused_experts_impl`` allocates (module docstring:
    the formula and its source lines; the moe_align_block_size ids, < 1 MiB, left out).

    Not part of the budget: it documents why ``moe_workspace_gib`` is a fitted residual.
    ``fp8_block``: the activation group size of FP8 w8a8 block-quantised experts (128), None for bf16.
    """
    if not arch.is_moe:
        return 0.0
    m = min(tokens, chunk_size)
    k = arch.num_experts_per_tok or 1
    h = arch.hidden_size
    inter = arch.moe_intermediate_size if expert_parallel else arch.moe_intermediate_size / tp
    total = m * k * max(2 * inter, h) * 2 + m * k * inter * 2
    if out_of_place:
        total += m * h * 2
    if fp8_block:
        total += m * h * (1 + 4 / fp8_block) + m * k * inter * (1 + 4 / fp8_block)
    return float(total)


def dsa_workspace_factor(max_model_len: int) -> int:
    """vLLM 0.33's ``sparse_mla_prefill_workspace_factor`` default: 5 up to 256K tokens, 2 above."""
    return (
        DSA_WORKSPACE_FACTOR_SHORT
        if max_model_len <= DSA_WORKSPACE_FACTOR_SWITCH
        else DSA_WORKSPACE_FACTOR_LONG
    )


def dsa_workspace_bytes_per_context_token(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """How much the DSA prefill workspaces grow per token of max_model_len at ``settings.max_model_len``'s
    factor (0 for other models)."""
    if not arch.index_head_dim:
        return 0.0
    per_row = float(DSA_INDEXER_ROWS_PER_FACTOR * DSA_INDEXER_ROW_BYTES)
    if int(settings.compute_capability) in FLASHMLA_SPARSE_CAPABILITIES:
        per_row += DSA_PREFILL_ROW_BYTES / max(1, settings.decode_context_parallel_size)
    return dsa_workspace_factor(settings.max_model_len) * per_row


def dsa_workspace_bytes(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """Sparse-attention (DSA) prefill workspaces reserved by the profiling run, on every rank."""
    if not arch.index_head_dim or settings.max_model_len <= 0:
        return 0.0
    per_token = dsa_workspace_bytes_per_context_token(arch, settings)
    return per_token * settings.max_model_len + DSA_MAX_LOGITS_BYTES


def v1_dsa_shared_workspace(settings: BudgetSettings) -> bool:
    """vLLM 0.26's V1 runner (the release whose DSA profiling run was read)."""
    return settings.dsa_shared_workspace and settings.profiling_run == ProfilingRun.V1


def v1_flashmla_sparse(arch: ModelArchitecture, settings: BudgetSettings) -> bool:
    """Whether vLLM 0.26's V1 runner serves this DSA model with FlashMLA-sparse (``FlashMLASparseImpl``).

    0.26 tries ``FLASH_ATTN_MLA_SPARSE`` first, which takes compute capability 9.x only, a bf16 KV cache and
    no decode context parallel (``vllm/v1/attention/backends/mla/flashattn_mla_sparse.py`` L70-104); the H200
    logs show it for GLM-5 and GLM-5-FP8 with ``auto`` KV and ``FLASHMLA_SPARSE`` with fp8 KV.
    """
    if not arch.index_head_dim or not v1_dsa_shared_workspace(settings):
        return False
    hopper = int(settings.compute_capability) == 9
    return settings.kv_cache_fp8 or settings.decode_context_parallel_size > 1 or not hopper


def flashmla_sparse_load_workspace_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """What a DSA model reserves while it is built beyond its weights, so inside "Model loading took": the
    indexer's top-k buffer, and with FlashMLA-sparse its workspace (vLLM 0.26, the V1 runner).

    ``FlashMLASparseImpl.__init__`` (``vllm/v1/attention/backends/mla/flashmla_sparse.py`` L559-583, 0.26.0)
    takes from the workspace manager a q_concat buffer of (max_num_batched_tokens, heads / TP, 576) bf16 and,
    with the fp8_ds_mla KV cache, a bf16 prefill workspace of ``get_prefill_workspace_size`` = 5 x
    max_model_len rows of 576 (L222-229); every layer asks the same shapes, so one buffer. GLM-5 at 8192
    tokens and 131,072 of context with fp8 KV: 604 + 720 MiB = 1.29 GiB, what its H200 start-up loads above
    the same config with bf16 KV at 2048 tokens (62.37 against 61.08 GiB). The layers keep views of that
    buffer, so when the profiling run's fused-MoE layers grow the workspace past it the new buffer is
    allocated beside it (:func:`activation_peak_bytes`).
    """
    if not arch.index_head_dim or not v1_dsa_shared_workspace(settings):
        return 0.0
    # DeepseekV2Model.__init__ (vllm/model_executor/models/deepseek_v2.py L1359-1366): the indexer's top-k
    # output, (max_num_batched_tokens, index_topk) int32, for every backend (GLM-5-FP8's H200 start-ups load
    # 0.05 and 0.06 GiB more at 8192 and 16384 tokens than at 2048)
    topk = settings.max_num_batched_tokens * DSA_INDEX_TOPK * 4
    if not v1_flashmla_sparse(arch, settings):
        return float(topk)
    row = (arch.kv_lora_rank + arch.qk_rope_head_dim) * 2
    heads = arch.num_attention_heads / max(1, tp)
    q_concat = settings.max_num_batched_tokens * heads * row
    prefill = FLASHMLA_SPARSE_PREFILL_ROWS_PER_CONTEXT_TOKEN * settings.max_model_len * row
    return float(topk + q_concat + (prefill if settings.kv_cache_fp8 else 0))


def v1_dsa_indexer_workspace_bytes(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """The DSA indexer's share of the workspace manager in vLLM 0.26's profiling run (0 for other models).

    With no attention metadata, ``sparse_attn_indexer`` (``vllm/model_executor/layers/sparse_attn_indexer.py``
    L325-345, 0.26.0) reserves through ``current_workspace_manager().get_simultaneous`` the K-gather rows,
    (max_total_seq_len, 128) fp8 + (max_total_seq_len, 4) scale bytes, and ``RADIX_TOPK_WORKSPACE_SIZE``
    (1 MiB, L42), where max_total_seq_len = 40 x max_model_len (``get_max_prefill_buffer_size``,
    ``vllm/v1/attention/backends/mla/indexer.py`` L231-241). That is the same single buffer the fused-MoE
    layers grow (``vllm/v1/worker/workspace.py`` ``get_simultaneous``/``_ensure_workspace_size``), so
    the profiling run holds the larger of the two, not their sum. Then ``_ = torch.empty(
    VLLM_SPARSE_INDEXER_MAX_LOGITS_MB MiB)`` (L337-341) is freed when the op returns; the FlashMLA-sparse
    prefill workspace belongs to the attention metadata builder, which the V1 runner builds with the KV cache,
    after the profiling run ("DSA indexer decode path" is logged just before "Profiling CUDA graph memory").
    """
    if not arch.index_head_dim or settings.max_model_len <= 0:
        return 0.0
    rows = V1_DSA_GATHER_ROWS_PER_CONTEXT_TOKEN * settings.max_model_len
    return float(rows * DSA_INDEXER_ROW_BYTES + DSA_RADIX_TOPK_WORKSPACE_BYTES)
