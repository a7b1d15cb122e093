"""The torch peak of vLLM's profiling run on one rank: forward, sampler pass, cold compile (pure).

``activation_peak_bytes`` is the larger of the profiling run's peak (the dummy forward of
``max_num_batched_tokens`` tokens with the MLA and DSA stand-ins, or the dummy sampler pass on the last
pipeline stage, plus the fused-MoE and DSA workspaces of ``memory.workspaces``) and what a cold
``torch.compile`` holds. docs/memory-model.md ("Activation peak") has the formulas and the start-ups
that pin them.
"""

from __future__ import annotations

import functools

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, BudgetConstants
from glm_operator.planning.memory.settings import (
    BudgetSettings,
    ProfilingRun,
    padded_vocab,
    query_width_per_rank,
)
from glm_operator.planning.memory.workspaces import (
    DSA_INDEX_TOPK,
    DSA_MAX_LOGITS_BYTES,
    dsa_workspace_bytes,
    flashmla_sparse_load_workspace_bytes,
    moe_workspace_bytes,
    v1_dsa_indexer_workspace_bytes,
    v1_dsa_shared_workspace,
)
from glm_operator.planning.releases import Generation

# MLA's profile-run stand-in for the chunked-context up-projection (mla_profile_upprojection_bytes)
MLA_CHUNKED_CONTEXT_MAX_ROWS = 64 * 1024

#: query-width bf16 buffers a GQA/MHA attention piece holds per token (attention_piece_bytes_per_token)
ATTENTION_PIECE_Q_BUFFERS = 5

#: tokens per profiling request from which 257-512 requests held two attention-piece sets (Air, 0.26; one
#: set at 768 and 1024 requests: attention_piece_bytes_per_token)
ATTENTION_PIECE_TWO_SETS_TOKENS_PER_REQUEST = 32

ATTENTION_PIECE_TWO_SETS_MAX_REQUESTS = 512

#: The V1 runner's dummy sampler pass per row and vocabulary entry (vLLM 0.22-0.28 read): the bf16 logits,
#: their fp32 copy (``Sampler.forward``), the probabilities and the exponential noise (``random_sample``),
#: 2 + 4 + 4 + 4
V1_SAMPLER_BYTES_PER_ENTRY = 14

#: ``apply_top_k_top_p_triton`` (``vllm/v1/sample/ops/topk_topp_triton.py``) runs from 8 rows on; below that
#: PyTorch's sort path (``sampler_bytes_native``)
TOPK_TOPP_TRITON_MIN_ROWS = 8

#: its cached fp32 scratch has one vocabulary row per program, min(next power of 2 >= rows, SMs): the SMs of
#: an H100/H200 (132); a GPU with fewer keeps up to 0.04 GiB less at a 152K vocabulary
TOPK_TOPP_TRITON_PROGRAMS = 132

MLA_BLOCK_SIZE = 16  # vLLM's default KV block size: the rows' lower bounds (4 and 1 pages per request)


@functools.lru_cache(maxsize=4096)
def activation_bytes_per_token(arch: ModelArchitecture, tp: int) -> float:
    """Live bytes per scheduled token in one layer on one rank (structural estimate, see docstring)."""
    h = arch.hidden_size
    heads = arch.num_attention_heads / tp
    residual = 4.0 * h * 2
    if arch.is_mla:
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        attn = (
            heads * qk
            + arch.kv_lora_rank
            + arch.qk_rope_head_dim
            + heads * (arch.qk_nope_head_dim + arch.v_head_dim)
            + heads * arch.v_head_dim
            + arch.q_lora_rank
        ) * 2.0
    else:
        q = heads * arch.head_dim
        kv = max(1.0, arch.num_kv_heads / tp) * arch.head_dim
        attn = (2 * q + 2 * kv) * 2.0
    if arch.linear_attention_layers:
        attn = max(attn, 5.0 * arch.linear_num_heads * arch.linear_head_dim / tp * 2)
    mlp = 3.0 * arch.intermediate_size / tp * 2
    if arch.is_moe:
        k = arch.num_experts_per_tok or 1
        moe = k * (3.0 * arch.moe_intermediate_size / tp + h) * 2 + arch.n_routed_experts * 4.0
        mlp = max(mlp if arch.first_k_dense_replace else 0.0, moe)
    return residual + max(attn, mlp)


def mla_attention_live_bytes(arch: ModelArchitecture, tp: int) -> float:
    """Bytes per scheduled token an MLA layer holds at the V1 runner's profiling peak, on one rank.

    The peak of an MLA model's dummy forward is inside its attention op, where ``MLAAttention.forward_impl``
    allocates the chunked-context stand-in (:func:`mla_profile_upprojection_bytes`) beside the op's inputs and
    output (``vllm/model_executor/layers/attention/mla_attention.py`` 0.26.0 L661 and L706-716): the
    queries, heads/TP x (qk_nope + qk_rope), the output, heads/TP x v_head, the compressed KV and its rope
    part, kv_lora + qk_rope, and the layer's hidden states, all bf16. The fused-MoE intermediates live in the
    workspace manager's buffer, counted apart (:func:`moe_workspace_bytes`). GLM-5 (64 heads of 192 + 64
    and 256, kv_lora 512, hidden 6144): 78,976 B per token; memtrace on the H200 (vLLM 0.26.0) holds six
    blocks of 649 MiB at 8192 tokens and 1266 MiB at 16384 (83,072 and 81,024 B per token, block rounding
    included), where ``v1_forward_scale`` x the structural estimate gave 114 KB per token (0.5 GiB over at
    16384).
    """
    heads = arch.num_attention_heads / max(1, tp)
    per_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim
    return (heads * per_head + arch.kv_lora_rank + arch.qk_rope_head_dim + arch.hidden_size) * 2.0


def forward_peak_bytes(
    arch: ModelArchitecture, tp: int, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS
) -> float:
    """The dummy forward's live activations: a scale per profiling run x the structural bytes per token.

    A dense GQA model's forward is the same compiled layer piece under either model runner of vLLM >= 0.20,
    so the V1 runner takes Model Runner V2's measured ``v2.forward_scale`` for it: memtrace of Qwen3-8B on
    the V1 runner at 8192 tokens with a warm compile cache (``benchmarks/gpu_truth/logs/repeats/
    qwen3-8b-v1-b8k-s7call11-warm.log.gz``) holds gate/up 384 + SiLU 192 + 3 x 64 + 32 MiB = 800 MiB at the
    peak, V2 at 16384 tokens 1628 MiB of the same blocks. ``v1.forward_scale`` stays for MoE and MLA
    models; an MLA model's peak on the V1 runner is its attention layer (:func:`mla_attention_live_bytes`).
    The other way round, a GQA MoE model under Model Runner V2 takes ``v1.forward_scale``: GLM-4.7's shapes
    and GLM-4.5-Air forced onto V2 (vLLM 0.26, memtrace) peak at the same blocks as on V1, the workspace
    manager's buffer and the attention piece's nine (1009 / 977 MiB at 8192 tokens), where
    ``v2.forward_scale`` x the structural bytes came to 0.5 / 0.3 GiB more."""
    run = settings.profiling_run
    if run == ProfilingRun.V1 and arch.is_mla:
        return mla_attention_live_bytes(arch, tp) * settings.max_num_batched_tokens
    scale = c.profiling(run).forward_scale
    dense = not (arch.is_moe or arch.is_mla or arch.linear_attention_layers)
    if run == ProfilingRun.V1 and dense:
        scale = c.v2.forward_scale  # the same compiled layer piece as on Model Runner V2
    gqa_moe = arch.is_moe and not (arch.is_mla or arch.linear_attention_layers)
    if run == ProfilingRun.V2 and gqa_moe:
        scale = c.v1.forward_scale  # the same blocks as on the V1 runner (memtrace)
    per_token = scale * activation_bytes_per_token(arch, tp)
    if settings.generation == Generation.NEWER:
        piece = attention_piece_bytes_per_token(
            arch, tp, settings.max_num_seqs, settings.max_num_batched_tokens
        )
        per_token = max(per_token, piece)
    return per_token * settings.max_num_batched_tokens


def attention_piece_bytes_per_token(
    arch: ModelArchitecture, tp: int, max_num_seqs: int = 256, max_num_batched_tokens: int = 0
) -> float:
    """What the compiled layer piece around a GQA/MHA attention holds per token at the profiling run's peak,
    on one rank (vLLM >= 0.20; 0 for MLA, :func:`mla_attention_live_bytes`): ``ATTENTION_PIECE_Q_BUFFERS``
    bf16 buffers of the query width (heads / TP x head_dim), and that set twice with two hidden-size outputs
    for 257-512 requests of at least ``ATTENTION_PIECE_TWO_SETS_TOKENS_PER_REQUEST`` tokens each.
    docs/memory-model.md, 4.2 ("Attention piece") has the memtrace measurements and the open question.
    """
    if arch.is_mla:
        return 0.0
    piece = ATTENTION_PIECE_Q_BUFFERS * query_width_per_rank(arch, tp) * 2.0
    if (
        256 < max_num_seqs <= ATTENTION_PIECE_TWO_SETS_MAX_REQUESTS
        and max_num_batched_tokens >= ATTENTION_PIECE_TWO_SETS_TOKENS_PER_REQUEST * max_num_seqs
    ):
        return 2 * piece + 2 * arch.hidden_size * 2.0
    return piece


def sampler_peak_bytes(
    arch: ModelArchitecture, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS, tp: int = 1
) -> float:
    """The profiling run's dummy sampler pass over min(max_num_seqs, max_num_batched_tokens) rows.

    Model Runner V2: the rows' bf16 logits (``v2.sampler_bytes`` per entry, plus the all-gathered copy at
    TP > 1); the V1 runner: :func:`v1_sampler_pass_bytes`; both beside the forward's hidden states and the
    rows picked from them. Before 0.20 a fitted rate per row and vocabulary entry. docs/memory-model.md,
    4.4 ("Sampler pass") has the vLLM source and the measurements.
    """
    rows = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    run = settings.profiling_run
    # the forward's hidden states stay alive through the pass, beside the rows picked from them
    hidden = (rows + settings.max_num_batched_tokens) * arch.hidden_size * 2.0
    if run == ProfilingRun.V2:
        gather = 2.0 + 2.0 / tp if tp > 1 else 0.0
        return (c.v2.sampler_bytes + gather) * rows * padded_vocab(arch) + hidden
    if run == ProfilingRun.V1:
        return v1_sampler_pass_bytes(rows, padded_vocab(arch), c) + hidden
    per = c.profiling(run).sampler_bytes
    if run == ProfilingRun.OLDER and settings.flashinfer_sampler:
        per = c.older_flashinfer_sampler_bytes
    return per * rows * padded_vocab(arch)


def v1_sampler_pass_bytes(rows: int, vocab: int, c: BudgetConstants = DEFAULT_CONSTANTS) -> float:
    """The V1 runner's ``_dummy_sampler_run`` over ``rows`` rows (read in vLLM 0.22.0, 0.24.0, 0.26.0, 0.28.0,
    ``vllm/v1/worker/gpu_model_runner.py``): one sampler pass with the release's top-k/top-p sampler, then
    ("Also warm forward_native") one with PyTorch's, whatever ``VLLM_USE_FLASHINFER_SAMPLER`` says. The
    peak is the PyTorch pass: the bf16 logits, their fp32 copy (``Sampler.forward``), the probabilities and
    the exponential noise of ``random_sample``, ``V1_SAMPLER_BYTES_PER_ENTRY`` = 14 B per row and vocabulary
    entry (FlashInfer's pass holds the same: its masked logits in place of the noise), plus from 8 rows on
    the fp32 scratch of the Triton top-k/top-p kernel, min(next power of 2 >= rows, SMs) vocabulary rows,
    which it caches. Measured (``gpu_truth memtrace``, vLLM 0.26.0 on the H200, 1024 rows of 151,936
    entries): 296.8 + 3 x 593.5 + 76.5 = 2153.8 MiB for Qwen2.5-0.5B with either sampler and for
    Qwen3-30B-A3B-FP8. Below 8 rows PyTorch sorts the logits (``older.sampler_bytes``). It replaces a rate of
    16.04 B per entry (0.18-0.19's, fitted), which is this at 256 rows and 14 % over it at 1024, and the sort
    path's 38.8 B for ``VLLM_USE_FLASHINFER_SAMPLER=0``, which the Triton kernel ended in 0.22."""
    if rows < TOPK_TOPP_TRITON_MIN_ROWS:
        return c.older.sampler_bytes * rows * vocab  # PyTorch's sort path
    programs = min(1 << (rows - 1).bit_length(), TOPK_TOPP_TRITON_PROGRAMS)
    return float((V1_SAMPLER_BYTES_PER_ENTRY * rows + 4 * programs) * vocab)


def mla_profile_upprojection_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """The tensor MLA allocates in the profiling run in place of the chunked-context up-projection.

    With no attention metadata (the profiling run skips attention), ``MLAAttention.forward_impl``
    (``vllm/model_executor/layers/attention/mla_attention.py``: 0.26.0 L706-716, 0.33.0 L936-948; since
    vllm-project/vllm#12639) allocates what ``kv_b_proj(kv_c)`` of ``_compute_prefill_context`` would
    produce at its largest, ``(chunked_prefill_workspace_size, heads / TP, qk_nope + v_head)`` in the model
    dtype, so the peak holds it beside the layer's other activations. The rows
    (``MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size``) are
    ``min(max(8 x max_model_len, 4 x max_num_seqs x block), 64K)``, at least one block per request: 64K
    from max_model_len 8192 on, whatever max_num_batched_tokens. GLM-4.7-Flash: 65536 x 20 x 448 x 2 B =
    1.09 GiB (its H200 start-ups peak at 1.63 GiB at max-num-seqs 64 and 256 alike); GLM-5.x at TP 1:
    3.50 GiB, at TP 8 0.44 GiB.
    """
    if not arch.is_mla:
        return 0.0
    context = settings.max_model_len or MLA_CHUNKED_CONTEXT_MAX_ROWS
    rows = min(max(8 * context, 4 * settings.max_num_seqs * MLA_BLOCK_SIZE), MLA_CHUNKED_CONTEXT_MAX_ROWS)
    rows = max(rows, settings.max_num_seqs * MLA_BLOCK_SIZE)
    heads = arch.num_attention_heads / max(1, tp)
    return rows * heads * (arch.qk_nope_head_dim + arch.v_head_dim) * 2.0


def draft_capture_standin_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """What the MTP drafter adds to the first CUDA-graph capture vLLM's estimate samples, on one rank.

    While the target captures, the drafter runs ``dummy_run`` under ``set_forward_context(None, ...)``
    (0.26.0 ``v1/spec_decode/llm_base_proposer.py`` L1621-1673, called from ``_dummy_run`` L6100-6139): with
    no attention metadata its MLA layer allocates the profiling stand-in of the chunked-context
    up-projection (:func:`mla_profile_upprojection_bytes`) and a DSA layer the indexer's logits stand-in
    (``DSA_MAX_LOGITS_BYTES``), inside the capture window, so ``profile_cudagraph_memory`` counts them in
    that mode's first capture (L6576-6743). H200 logs (``Estimated ... first-capture``): GLM-4.7-Flash MTP 1,
    PIECEWISE first capture 1,298 MiB against 104 MiB without MTP (stand-in 1,120 MiB); GLM-5 (6 layers)
    MTP 3, FULL first capture 4,588 MiB against ~470 MiB (stand-ins 3,584 + 512 MiB).
    """
    if not settings.draft_layers:
        return 0.0
    dsa = float(DSA_MAX_LOGITS_BYTES) if arch.index_head_dim else 0.0
    return mla_profile_upprojection_bytes(arch, tp, settings) + dsa


def compile_transient_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """What a cold ``torch.compile`` allocates inside vLLM's profiling run, on one rank (vLLM >= 0.20)::

        compile_transient = padded vocab / TP x hidden x 2 B + 2 x max_num_batched_tokens x hidden x 2 B

    0 with ``--enforce-eager`` or a warm compile cache (the operator's pods keep none). docs/memory-model.md,
    4.5 ("Cold torch.compile transient") has the start-ups it is measured on.
    """
    if settings.enforce_eager or settings.compile_cache_warm or settings.generation != Generation.NEWER:
        return 0.0
    hidden = arch.hidden_size
    return (
        padded_vocab(arch) / max(1, tp) * hidden * 2.0 + 2.0 * settings.max_num_batched_tokens * hidden * 2.0
    )


def activation_peak_bytes(
    arch: ModelArchitecture,
    tp: int,
    settings: BudgetSettings,
    c: BudgetConstants = DEFAULT_CONSTANTS,
    last_stage: bool = True,
) -> float:
    """torch peak increase of vLLM's profiling run on one rank: the forward's peak (and the sampler's on the
    last stage) or, when larger, the cold compile's (:func:`compile_transient_bytes`).

    Only the last pipeline stage runs the dummy sampler (``profile_run``: ``if get_pp_group().is_last_rank``
    in ``vllm/v1/worker/gpu_model_runner.py``, ``if self.is_last_pp_rank`` in the 0.33 runner
    ``vllm/v1/worker/gpu/model_runner.py``); earlier stages peak at the forward pass.
    """
    peak = max(
        _run_peak_bytes(arch, tp, settings, c, last_stage), compile_transient_bytes(arch, tp, settings)
    )
    return peak + (draft_buffer_bytes(arch, settings) if last_stage else 0.0)


def draft_buffer_bytes(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """What the MTP drafter keeps allocated beside the target: its hidden-states buffer of
    max_num_batched_tokens rows (vLLM 0.33 ``target_dependent_ar/speculator.py`` L35-37; 0.26's proposer the
    same), and on a DSA model its own indexer top-k buffer of max_num_batched_tokens x index_topk int32,
    which may stay allocated [inferred] (research of 0.33 ``deepseek_v32/nvidia/mtp.py`` L81-86)."""
    if not settings.draft_layers:
        return 0.0
    tokens = settings.max_num_batched_tokens
    topk = tokens * DSA_INDEX_TOPK * 4.0 if arch.index_head_dim else 0.0
    return tokens * arch.hidden_size * 2.0 + topk


def _run_peak_bytes(
    arch: ModelArchitecture, tp: int, settings: BudgetSettings, c: BudgetConstants, last_stage: bool
) -> float:
    mla = mla_profile_upprojection_bytes(arch, tp, settings)
    moe = moe_workspace_bytes(arch, tp, c, settings.compute_capability, settings)
    if arch.index_head_dim and v1_dsa_shared_workspace(settings):
        # vLLM 0.26's V1 runner on a DSA model (read in the 0.26.0 wheel): the indexer's 512 MiB logits
        # stand-in is a transient inside the indexer op, freed before the MLA stand-in of the same layer, and
        # its K-gather rows share the workspace manager's one buffer with the fused-MoE workspace
        forward = forward_peak_bytes(arch, tp, settings, c) + max(mla, float(DSA_MAX_LOGITS_BYTES))
        peak = max(forward, sampler_peak_bytes(arch, settings, c, tp)) if last_stage else forward
        # the workspace grows only past what FlashMLA-sparse reserved at load (counted as weights)
        workspace = max(moe, v1_dsa_indexer_workspace_bytes(arch, settings))
        grows = workspace > flashmla_sparse_load_workspace_bytes(arch, tp, settings)
        return peak + (workspace if grows else 0.0)
    forward = forward_peak_bytes(arch, tp, settings, c) + mla
    peak = max(forward, sampler_peak_bytes(arch, settings, c, tp)) if last_stage else forward
    return peak + moe + dsa_workspace_bytes(arch, settings)
