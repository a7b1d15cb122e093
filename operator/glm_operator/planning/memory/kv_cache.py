"""KV-cache bytes per token and block size on one rank, as vLLM's page sizes count them (pure).

GQA layers keep ``2 x max(1, kv_heads // TP) x head_dim`` elements per token, MLA layers their latent
``kv_lora_rank + qk_rope_head_dim`` on every rank (fp8 on MLA+DSA is the 656-byte ``fp8_ds_mla``
record), DSA indexer-cache layers 132 more bytes, hybrid models a fixed state per request in their
linear-attention layers. docs/memory-model.md ("KV cache").
"""

from __future__ import annotations

import functools
import math

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.memory.layers import layer_kinds, pp_layer_ranges


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
    kinds = layer_kinds(arch)
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
    kinds = layer_kinds(arch)
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
