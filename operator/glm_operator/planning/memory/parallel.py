"""Which parallel layouts and speculative decoding vLLM serves a model with (pure).

Facts of vLLM's code the planner's candidates follow: decode context parallelism (DCP) where the attention
backend vLLM picks can return the softmax LSE during decode, data-parallel attention with expert
parallelism for MLA mixture-of-experts models, MTP drafts from the model's own next-token layers.
docs/memory-model.md ("Parallel layouts") has the sources and the memory each takes per rank.
"""

from __future__ import annotations

import math

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.catalog.vllm import Version

#: The longest MTP draft the planner tries: GLM's one MTP layer is run again for every further position
#: (vLLM warns of the lower acceptance), whose acceptance falls with each (``speed.speculative``)
MAX_SPECULATIVE_TOKENS = 3
#: FlashMLA-sparse, the one DSA backend on Hopper that takes DCP, needs fewer than 32 query heads per rank
#: (vLLM 0.33 ``flashmla_sparse.py`` L454-461: "only supported on the mixed-batch fp8 path")
FLASHMLA_SPARSE_DCP_MAX_HEADS = 31
#: the first release read whose FlashMLA-sparse returns the LSE DCP needs (0.26 does not; 0.27-0.32 unread)
DSA_DCP_ON_HOPPER_SINCE: Version = (0, 33, 0)


def supports_decode_context_parallel(arch: ModelArchitecture) -> bool:
    """Whether vLLM can split this model's KV cache over decode-context-parallel ranks at all: MLA and
    GQA attention; not hybrid models, whose linear-attention state is not split."""
    return arch.attention in ("gqa", "mla", "mla+dsa")


def decode_context_parallel_error(
    arch: ModelArchitecture, tp: int, dcp: int, compute_capability: float, version: Version
) -> str | None:
    """Why vLLM refuses DCP ``dcp`` at TP ``tp`` for this model on this GPU and release, or None.

    vLLM 0.33: ``tp % dcp == 0`` (``config/parallel.py`` L594-609); GQA needs TP above the KV heads,
    ``dcp <= TP / kv_heads`` and ``(heads / kv_heads) % dcp == 0`` (``config/model.py`` L1578-1607), so
    GLM-4.5/4.6/4.7 (8 KV heads) need TP 16; a DSA model on Hopper runs DCP only on FlashMLA-sparse, with
    fewer than 32 heads per rank (GLM-5.x: TP >= 4), and not before 0.33 (0.26's lacks the LSE)."""
    if dcp <= 1:
        return None
    if not supports_decode_context_parallel(arch):
        return f"{arch.attention} attention does not split its KV cache over decode-context-parallel ranks"
    if tp % dcp:
        return f"decode context parallel {dcp} must divide TP={tp}"
    if arch.attention == "gqa":
        kv = arch.num_kv_heads
        if tp <= kv or dcp > tp // kv or (arch.num_attention_heads // kv) % dcp:
            return (
                f"DCP={dcp} on a GQA model with {kv} KV heads needs TP above {kv}, DCP <= TP / {kv} and DCP "
                f"dividing {arch.num_attention_heads // kv} query heads per KV head"
            )
    if arch.attention == "mla+dsa" and 9 <= compute_capability < 10:
        if arch.num_attention_heads // tp > FLASHMLA_SPARSE_DCP_MAX_HEADS:
            return (
                f"DCP on a DSA model on Hopper runs on FlashMLA-sparse, which needs fewer than 32 heads per "
                f"rank ({arch.num_attention_heads // tp} at TP={tp})"
            )
        if version < DSA_DCP_ON_HOPPER_SINCE:
            return "DCP on a DSA model on Hopper needs vLLM 0.33 (0.26's FlashMLA-sparse returns no LSE)"
    return None


def supports_data_parallel_attention(arch: ModelArchitecture) -> bool:
    """Whether the planner serves this model with data-parallel attention and expert parallelism: MoE
    models with MLA attention, whose latent KV tensor parallelism keeps on every rank (GQA models with 8
    KV heads gain no KV room from it)."""
    return arch.is_moe and arch.attention in ("mla", "mla+dsa")


def routed_experts_per_rank(arch: ModelArchitecture, tp: int, ep: int = 1) -> tuple[float, float]:
    """(routed experts one rank holds, intermediate size of each there). Tensor parallelism shards every
    expert's intermediate size; expert parallelism over ``ep`` ranks (data x tensor parallel) gives each rank
    whole experts, the first E % ep ranks one more (vLLM 0.33 ``expert_map_manager.py`` L66-79): the fuller
    rank is planned."""
    if ep <= 1:
        return float(arch.n_routed_experts), arch.moe_intermediate_size / max(1, tp)
    return float(math.ceil(arch.n_routed_experts / ep)), float(arch.moe_intermediate_size)


def mtp_layers(arch: ModelArchitecture) -> int:
    """The model's MTP (next-token prediction) layers the planner can draft with, its
    ``num_nextn_predict_layers`` (one for GLM-4.5/4.6/4.7, GLM-4.7-Flash and GLM-5.x); 0: none. Hybrid models
    are left out (their drafter is another model class, with state the planner does not model)."""
    if arch.attention == "hybrid":
        return 0
    return arch.num_nextn_predict_layers
