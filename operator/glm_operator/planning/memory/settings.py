"""The engine settings vLLM's non-KV memory depends on, beyond the model and TP/PP (pure).

:class:`BudgetSettings` is filled once per fit (``memory.fit``) from the release's rules
(``planning.releases``) and the instance's flags; every term of the budget reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.releases import Generation


class ProfilingRun(IntEnum):
    """Whose profiling run a budget models: each has its row of constants (``memory.constants``)."""

    OLDER = Generation.OLDER  # before vLLM 0.18
    MID = Generation.MID  # 0.18-0.19
    V2 = Generation.NEWER  # 0.20 on, Model Runner V2
    V1 = 3  # 0.20 on, the V1 model runner (0.18-0.19's profiling run with its own fused-MoE and DSA terms)


VOCAB_PADDING = 64


@dataclass(frozen=True)
class BudgetSettings:
    """The engine settings the non-KV memory depends on (beyond the model and TP/PP).

    With data parallelism each DP rank is an engine of its own (its own KV budget and max-num-seqs); the
    budget here is one rank's.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    flashinfer_sampler: bool = False
    custom_all_reduce: bool = True
    enforce_eager: bool = False
    # torch.compile loads its artifacts instead of compiling in the profiling run (compile_transient_bytes)
    compile_cache_warm: bool = False
    # the cuBLAS handles exist before vLLM's first memory snapshot (ReleaseRules.cublas_before_snapshot);
    # before that they are non-torch memory (NonTorchConstants.gib)
    cublas_before_snapshot: bool = True
    max_model_len: int = 0
    compute_capability: float = 9.0
    decode_context_parallel_size: int = 1
    # data-parallel attention ranks, with expert parallelism over data x tensor parallel ranks: every rank's
    # fused-MoE layers run on the tokens all ranks gathered (``memory.workspaces``)
    data_parallel_size: int = 1
    # MTP speculative decoding: draft tokens per step and the drafter's layers (their CUDA graphs, the
    # drafter's buffers: ``memory.cuda_graphs``, ``memory.activation``)
    num_speculative_tokens: int = 0
    draft_layers: int = 0
    # the release's constant family (ReleaseRules.generation)
    generation: Generation = Generation.OLDER
    # FlashInfer <= 0.6.14 (vLLM 0.18-0.26): fusion buffers rounded up to 512 MiB, no fusion with PP
    fusion_workspace_rounded: bool = False
    # vLLM >= 0.20 profiling with the V1 model runner (ReleaseRules.uses_model_runner_v2 is False)
    model_runner_v1: bool = False
    # FP8 expert weights (vLLM >= 0.18: the fused-MoE workspace at the larger scale, workspaces.py)
    fp8_experts: bool = False
    # bf16/fp16 expert weights (unquantized: Model Runner V2 on Hopper runs them through TritonExperts)
    unquantized_experts: bool = False
    # an MLA model's bf16 checkpoint quantized to FP8 at load (--quantization fp8): its graphs take more
    # (V1 runner; see BudgetConstants.fp8_online_mla_graph_bytes_per_layer)
    fp8_online_mla: bool = False
    # Model Runner V2 estimates its CUDA graphs (ReleaseRules.v2_graph_estimate: not in vLLM 0.26)
    v2_graph_estimate: bool = True
    # --kv-cache-dtype fp8 (a DSA model then takes FlashMLA-sparse with fp8_ds_mla on Hopper, see
    # flashmla_sparse_load_workspace_bytes)
    kv_cache_fp8: bool = False
    # vLLM 0.26's DSA profiling run (ReleaseRules.dsa_shared_workspace)
    dsa_shared_workspace: bool = False
    # multi-head latent attention (FULL decode graphs take more per request)
    mla: bool = False
    # a model's own largest capture size (MODEL_MAX_CAPTURE_SIZE; 0: vLLM's default from max_num_seqs)
    max_cudagraph_capture_size: int = 0
    # DSA index heads whose decode logits the V1 runner's FULL graphs hold per request (0: not DSA, or an
    # fp8 KV cache, whose FlashMLA-sparse path the H200 log shows without them)
    dsa_graph_index_heads: int = 0
    # query elements per token on one rank (heads / TP x head_dim) of a GQA/MHA model whose FULL graphs keep
    # FlashAttention 3's split-KV accumulators; 0 for MLA and FlashAttention 2
    graph_q_width: int = 0
    # the same for a query-normed glm4_moe model (use_qk_norm: GLM-4.5/4.6/4.7), whose piecewise graphs
    # can take more (qk_norm_graph_bytes_per_capture); 0 for every other model
    qk_norm_q_width: int = 0

    @property
    def profiling_run(self) -> ProfilingRun:
        """Whose profiling run the budget models: the release's, or from vLLM 0.20 the V1 runner's."""
        if self.generation == Generation.NEWER and self.model_runner_v1:
            return ProfilingRun.V1
        return ProfilingRun(self.generation)


def is_hopper(compute_capability: float) -> bool:
    """Compute capability 9.x (H100, H200, GH200): FlashAttention 3, Triton first for bf16 experts."""
    return 9 <= compute_capability < 10


def padded_vocab(arch: ModelArchitecture) -> int:
    return math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING


def query_width_per_rank(arch: ModelArchitecture, tp: int) -> int:
    """Query elements per token on one rank of a GQA/MHA model: heads / TP x head_dim."""
    return max(1, arch.num_attention_heads // max(1, tp)) * arch.head_dim
