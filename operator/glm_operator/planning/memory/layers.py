"""Which layer is which, and which pipeline stage holds it (pure).

``layer_kinds`` says per layer whether it is a linear-attention layer and whether it keeps its own DSA
indexer cache; ``pp_layer_ranges`` splits the layers over pipeline stages as vLLM's ``get_pp_indices``
does (remainder layers on the stages before the last).
"""

from __future__ import annotations

import functools

from glm_operator.catalog.models import ModelArchitecture


@functools.lru_cache(maxsize=4096)
def layer_kinds(arch: ModelArchitecture) -> tuple[tuple[bool, bool], ...]:
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
