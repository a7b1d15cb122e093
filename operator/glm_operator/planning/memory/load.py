"""What vLLM's "Model loading took" counts beyond the parameters (pure).

The figure is what ``load_model`` left allocated: beside the parameters, the RoPE cos/sin cache,
DeepGEMM's workspace, glm4_moe's fp32 router and the CUDA caching allocator's rounding of large weights
(:func:`allocator_waste_bytes`), each measured on the H200 by the memtrace load trace.
docs/memory-model.md, 3.3 ("What loading adds beyond the parameters") has the formulas, vLLM's source
lines and the measurements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.memory.parallel import routed_experts_per_rank

MIB = 2**20
#: ``deep_gemm._lazy_init`` -> ``_apply_pdl`` on SM90+ (read in 0.26.0; measured 32.0 MiB on the H200)
DEEP_GEMM_WORKSPACE_BYTES = 32 * MIB
#: architectures whose MoE router is an fp32 nn.Linear (``glm4_moe.py`` L138-146, 0.26.0)
FP32_ROUTER_ARCHITECTURES = frozenset({"Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM"})
# the CUDA caching allocator's sizes (c10/cuda/CUDACachingAllocator.cpp: kSmallSize, kMinLargeAlloc,
# kLargeBuffer, kRoundLarge) and vLLM's max_split_size_mb while it loads
SMALL_SIZE = 1 * MIB
MIN_LARGE_ALLOC = 10 * MIB
LARGE_BUFFER = 20 * MIB
ROUND_LARGE = 2 * MIB
LOAD_MAX_SPLIT = 20 * MIB
#: an oversize free block serves a request at most this much smaller (max_non_split_rounding_size)
MAX_NON_SPLIT_ROUNDING = 20 * MIB


def rope_cache_bytes(arch: ModelArchitecture, dtype_bytes: float) -> float:
    """The shared cos/sin cache of one stage: max positions x rotary dim (MLA: the RoPE part of a head)."""
    rotary = arch.qk_rope_head_dim if arch.is_mla else arch.head_dim * arch.partial_rotary_factor
    return arch.max_position_embeddings * rotary * dtype_bytes


def router_fp32_extra_bytes(arch: ModelArchitecture, moe_layers: int, router_bytes: float) -> float:
    """What an fp32 router holds beyond ``router_bytes`` per weight (glm4_moe only)."""
    if arch.architecture not in FP32_ROUTER_ARCHITECTURES:
        return 0.0
    return moe_layers * arch.n_routed_experts * arch.hidden_size * (4.0 - router_bytes)


def _round_up(size: int, unit: int) -> int:
    return -(-size // unit) * unit


def allocator_waste_bytes(sizes: Iterable[float], scoped_max_split: bool) -> int:
    """Bytes the CUDA caching allocator counts as allocated beyond ``sizes`` (tensors allocated in this
    order, none freed, as while a model is built).

    Requests above 1 MiB come from the large pool: the smallest cached free block that fits (an oversize
    request takes a block at most ``MAX_NON_SPLIT_ROUNDING`` larger), else a new segment (20 MiB below
    10 MiB, else the size rounded up to 2 MiB). The block is split when the rest exceeds 1 MiB and the
    request is below max_split_size (``should_split``); otherwise the whole block is allocated.
    Requests of 1 MiB or less are packed in 2 MiB segments and waste nothing worth counting.
    """
    free: list[int] = []
    waste = 0
    for raw in sizes:
        size = _round_up(int(raw), 512)
        if size <= SMALL_SIZE:
            continue
        oversize = scoped_max_split and size >= LOAD_MAX_SPLIT
        fits = [
            b
            for b in free
            if b >= size
            and not (scoped_max_split and size < LOAD_MAX_SPLIT and b >= LOAD_MAX_SPLIT)
            and not (oversize and b >= size + MAX_NON_SPLIT_ROUNDING)
        ]
        if fits:
            block = min(fits)
            free.remove(block)
        else:
            block = LARGE_BUFFER if size < MIN_LARGE_ALLOC else _round_up(size, ROUND_LARGE)
        if not oversize and block - size > SMALL_SIZE:
            free.append(block - size)
        else:
            waste += block - size
    return waste


def weight_tensor_sizes(
    arch: ModelArchitecture,
    tp: int,
    layers: Sequence[tuple[bool, bool]],
    start: int,
    first: bool,
    last: bool,
    linear_bytes: float,
    ep: int = 1,
) -> list[float]:
    """Bytes of the large weight tensors of one rank, in the order vLLM builds them: the embedding,
    then per layer the attention projections (fused as vLLM fuses them) and the MLP or fused experts,
    then the LM head. ``layers`` is the stage's (is_linear_attention, has_indexer) per layer from layer
    ``start`` on; linear-attention layers are left out (not modelled tensor by tensor). The embedding and
    LM head are 16-bit, the projections ``linear_bytes`` per weight."""
    h = arch.hidden_size
    vocab = -(-_round_up(arch.vocab_size, 64) // tp) * h * 2.0
    out: list[float] = []
    heads = arch.num_attention_heads / tp
    for index, (is_linear, has_indexer) in enumerate(layers):
        if is_linear:
            continue
        if arch.is_mla:
            qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
            if arch.q_lora_rank:
                out.append((arch.q_lora_rank + arch.kv_lora_rank + arch.qk_rope_head_dim) * h)
                out.append(heads * qk * arch.q_lora_rank)
            else:
                out.append(heads * qk * h)
                out.append((arch.kv_lora_rank + arch.qk_rope_head_dim) * h)
            out.append(heads * (arch.qk_nope_head_dim + arch.v_head_dim) * arch.kv_lora_rank)
            out.append(h * heads * arch.v_head_dim)
            if has_indexer and arch.index_n_heads:
                out.append(arch.index_n_heads * arch.index_head_dim * (arch.q_lora_rank or h))
        else:
            q = heads * arch.head_dim
            kv = max(1.0, arch.num_kv_heads / tp) * arch.head_dim
            out += [(q + 2 * kv) * h, q * h]
        if arch.is_moe and start + index >= arch.first_k_dense_replace:
            count, inter = routed_experts_per_rank(arch, tp, ep)
            out += [count * 2 * inter * h, count * h * inter]
            if arch.shared_expert_intermediate_size:
                shared = arch.shared_expert_intermediate_size / tp
                out += [2 * shared * h, h * shared]
        else:
            inter = arch.intermediate_size / tp
            out += [2 * inter * h, h * inter]
    sized = [vocab] if first else []
    sized += [x * linear_bytes for x in out]
    if last and (not arch.tie_word_embeddings or not first):
        sized.append(vocab)
    return sized
