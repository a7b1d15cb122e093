"""Which layer is which, and which pipeline stage holds it (pure).

``layer_kinds`` says per layer whether it is a linear-attention layer and whether it keeps its own DSA
indexer cache; ``pp_layer_ranges`` splits the layers over pipeline stages as vLLM's ``get_pp_indices``
does (remainder layers on the stages before the last).
"""

from __future__ import annotations

import functools

from glm_operator.catalog.models import ModelArchitecture


def builds_indexer(arch: ModelArchitecture, layer: int) -> bool:
    """Whether backbone ``layer`` of a DSA model builds its own indexer, and so keeps an indexer cache.

    vLLM's ``DeepseekV2MLAAttention.__init__`` (``vllm/model_executor/models/deepseek_v2.py``, 0.33.0
    L1139-1168, IndexShare): with ``index_topk_pattern`` a layer shares the previous indexer where its
    entry is ``S``; otherwise it shares unless ``max(layer - index_skip_topk_offset + 1, 0)`` is a multiple
    of ``index_topk_freq`` (offset 2 by default). GLM-5.2 (78 layers, frequency 4): layers 0, 1, 5, 9, ...
    77, 21 indexers. MTP layers always build one (``memory.kv_cache`` counts them apart).
    """
    if arch.attention == "hybrid":
        return True  # GLM-5.3-Flash: every sparse-attention layer keeps its pooled indexer keys
    if arch.attention != "mla+dsa":
        return False
    pattern = arch.index_topk_pattern
    if pattern:
        return not (layer < len(pattern) and pattern[layer] == "S")
    return max(layer - arch.index_skip_topk_offset + 1, 0) % arch.index_topk_freq == 0


@functools.lru_cache(maxsize=4096)
def layer_kinds(arch: ModelArchitecture) -> tuple[tuple[bool, bool], ...]:
    """Per layer: (is_linear_attention, has_indexer_cache). Linear-attention layers are spread evenly
    among the attention layers (their count is all the config gives)."""
    n = arch.num_layers
    linear = arch.linear_attention_layers
    attn = n - linear
    kinds = []
    for i in range(n):
        is_attn = linear == 0 or (i + 1) * attn // n > i * attn // n
        kinds.append((not is_attn, is_attn and builds_indexer(arch, i)))
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
