"""vLLM's CUDA-graph memory on one rank: capture sizes and the estimate it takes off the budget (pure).

From vLLM 0.20 the profiling run estimates the graphs' memory and subtracts it; before, the graphs are
captured after the KV cache, in the ``1 - gpu_memory_utilization`` headroom. ``cudagraph_bytes`` models
the estimate of each model runner (PIECEWISE graphs per layer and capture size, FULL decode graphs per
request and query element). docs/memory-model.md ("CUDA graphs").
"""

from __future__ import annotations

import functools
import math

from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, BudgetConstants
from glm_operator.planning.memory.settings import BudgetSettings, ProfilingRun, is_hopper
from glm_operator.planning.releases import Generation

MAX_CAPTURE_SIZE = 512

#: models whose vLLM config raises the largest CUDA-graph capture size whatever max_num_seqs (vLLM 0.26
#: ``GptOssForCausalLMConfig.verify_and_update_config``, ``vllm/model_executor/models/config.py``
#: L366-379, 0.33 L549-559: "Increase the max capture size from 512 to 1024 for performance"; the H200
#: logs of gpt-oss-20b at 64 and 128 sequences both say "PIECEWISE=83 (largest=1024)")
MODEL_MAX_CAPTURE_SIZE = {"GptOssForCausalLM": 1024}

#: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): an allocation of kMinLargeAlloc or
#: more gets a segment of its own, rounded up to kRoundLarge; smaller ones share 2 / 20 MiB segments
ALLOCATOR_MIN_LARGE_ALLOC = 10 * 2**20

ALLOCATOR_ROUND_LARGE = 2 * 2**20

#: bf16 query buffers a query-normed glm4_moe piecewise graph keeps per capture once they are large
#: allocations (qk_norm_graph_bytes_per_capture): GLM-4.7's 24 MiB per graph is two of 12 MiB
QK_NORM_GRAPH_QUERY_BUFFERS = 2


@functools.lru_cache(maxsize=256)
def cudagraph_capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default capture sizes (0.10-0.12): 1, 2, 4, then every 8 up to min(2 x seqs, 512)."""
    largest = min(MAX_CAPTURE_SIZE, 2 * max_num_seqs)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, largest + 1, 8))
    return tuple(sizes)


@functools.lru_cache(maxsize=256)  # pure; asked for every candidate of every plan
def newer_cudagraph_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int = 0,
    compute_capability: float = 9.0,
    max_capture_size: int = 0,
    decode_query_len: int = 1,
    round_to_query: bool = False,
) -> tuple[int, ...]:
    """vLLM 0.33's default capture sizes (``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py``;
    0.26.0 L1783-1843 the same but for the Blackwell ceiling).

    1, 2, 4, every 8 below 256, then every 16 up to min(2 x max_num_seqs x decode_query_len, 512) (1024 on
    data-center Blackwell, compute capability 10.x) or the model's own ``max_capture_size``
    (:data:`MODEL_MAX_CAPTURE_SIZE`), at most max_num_batched_tokens, plus max_num_batched_tokens when it is
    below that ceiling. With speculative decoding (``decode_query_len`` = 1 + draft tokens) Model Runner V2
    adds every request count times the query length (0.33 ``config/vllm.py`` L2451-2600); the V1 runner
    (``round_to_query``) rounds every size up to a multiple of it (0.26 ``config/compilation.py`` L1463-1475).
    """
    ceiling = 1024 if int(compute_capability) == 10 else MAX_CAPTURE_SIZE
    q = max(1, decode_query_len)
    largest = max_capture_size or min(2 * max_num_seqs * q, ceiling)
    if max_num_batched_tokens > 0:
        largest = min(largest, max_num_batched_tokens)
    sizes = _size_grid(largest)
    if 0 < max_num_batched_tokens <= largest:
        sizes.add(max_num_batched_tokens)
    if q > 1 and round_to_query:
        sizes = {-(-size // q) * q for size in sizes}
    elif q > 1:
        sizes |= {n * q for n in _size_grid(max_num_seqs) | {max_num_seqs} if n * q <= largest}
    return tuple(sorted(sizes))


def _size_grid(largest: int) -> set[int]:
    """1, 2, 4, every 8 below 256, every 16 from 256, up to ``largest``."""
    sizes = {s for s in (1, 2, 4) if s <= largest}
    sizes |= set(range(8, min(largest + 1, 256), 8))
    sizes |= set(range(256, largest + 1, 16))
    return sizes


def qk_norm_graph_bytes_per_capture(q_width: int, tokens: int) -> float:
    """What each piecewise capture after the first keeps for a query-normed glm4_moe model (GLM-4.5/4.6/4.7,
    ``use_qk_norm``) on one rank of the V1 runner's estimate: ``QK_NORM_GRAPH_QUERY_BUFFERS`` bf16 query
    buffers of ``tokens`` (the sampled capture size) x ``q_width``, each rounded up as PyTorch's caching
    allocator rounds a large allocation, and nothing while one stays under its 10 MiB threshold.
    docs/memory-model.md, 7.4 ("Query-normed glm4_moe") has the measurements.
    """
    buffer = q_width * tokens * 2
    if buffer < ALLOCATOR_MIN_LARGE_ALLOC:
        return 0.0
    rounded = math.ceil(buffer / ALLOCATOR_ROUND_LARGE) * ALLOCATOR_ROUND_LARGE
    return float(QK_NORM_GRAPH_QUERY_BUFFERS * rounded)


def cudagraph_bytes(
    layers_on_rank: int, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS, tp: int = 1
) -> float:
    """Memory of CUDA graphs on one rank (0 with --enforce-eager), as the release estimates it.

    Before vLLM 0.18 a figure per layer and capture size. The V1 runner's estimate (0.18-0.19, and
    0.20-0.32 for models off Model Runner V2's list), not divided by TP: per layer and capture size, plus
    per decode request (MLA, FlashAttention 3's query width, the DSA indexer's logits with a bf16 KV
    cache), the query-normed glm4_moe step (:func:`qk_norm_graph_bytes_per_capture`) and FP8-online MLA
    per layer. Model Runner V2: per layer and capture size, on Hopper plus per query element and decode
    request, elsewhere divided by TP. docs/memory-model.md, 7.2-7.5 ("CUDA graphs") has the formulas, the
    constants and the logged estimates they are fitted on.
    """
    if settings.enforce_eager:
        return 0.0
    if settings.generation == Generation.OLDER:
        pieces = layers_on_rank * len(cudagraph_capture_sizes(settings.max_num_seqs))
        return c.graphs_older.bytes_per_piece * pieces
    q = 1 + settings.num_speculative_tokens  # tokens per request in a decode step
    sizes = newer_cudagraph_capture_sizes(
        settings.max_num_seqs,
        settings.max_num_batched_tokens,
        settings.compute_capability,
        settings.max_cudagraph_capture_size,
        decode_query_len=q,
        round_to_query=settings.profiling_run != ProfilingRun.V2,
    )
    # the largest FULL decode graph's tokens: every request's query (1 + draft tokens each)
    decode = min(settings.max_num_seqs * q, sizes[-1]) if sizes else 0
    if settings.profiling_run == ProfilingRun.V2:
        if not settings.v2_graph_estimate:
            return 0.0  # vLLM 0.26's Model Runner V2: profile_cudagraph_memory returns 0
        if is_hopper(settings.compute_capability):
            hopper = c.graphs_v2_hopper
            piecewise = hopper.bytes_per_piece * layers_on_rank * len(sizes)
            return piecewise + hopper.bytes_per_decode_q_element * settings.graph_q_width * decode
        return c.graphs_v2.bytes_per_piece * layers_on_rank * len(sizes) / max(1, tp)
    # the V1 runner's estimate: 0.18-0.19's constants, or from 0.20 its own
    g = c.graphs_mid if settings.generation == Generation.MID else c.graphs_v1
    per_piece = g.bytes_per_piece
    if settings.generation == Generation.NEWER and settings.compute_capability < 9:
        per_piece = c.pre_hopper_graph_bytes_per_piece
    piecewise = per_piece * layers_on_rank * len(sizes)
    if settings.generation == Generation.NEWER and len(sizes) > 1:
        second = sizes[-2]  # the capture vLLM samples "per-graph" from (after the largest)
        piecewise += qk_norm_graph_bytes_per_capture(settings.qk_norm_q_width, second) * (len(sizes) - 1)
    dsa = c.dsa_graph_bytes_per_index_head_token * settings.dsa_graph_index_heads * settings.max_model_len
    per_request = (
        g.bytes_per_decode_seq
        + (g.mla_bytes_per_decode_seq if settings.mla else 0.0)
        + g.bytes_per_decode_q_element * settings.graph_q_width
    )
    fp8_online = c.fp8_online_mla_graph_bytes_per_layer * layers_on_rank if settings.fp8_online_mla else 0.0
    return piecewise + (per_request + dsa) * decode + fp8_online
