"""A memory fit in words: its reasons, what it cannot promise, hints, and the longest context (pure)."""

from __future__ import annotations

from glm_operator.catalog.models import CheckpointQuantization
from glm_operator.catalog.vllm import format_version
from glm_operator.planning.memory.constants import GIB
from glm_operator.planning.memory.instance import (
    KV_TOKEN_ERROR,
    FitInput,
    FitResult,
    KvCapacity,
    MemoryBudget,
    Verdict,
)
from glm_operator.planning.memory.workspaces import (
    DSA_WORKSPACE_FACTOR_LONG,
    DSA_WORKSPACE_FACTOR_SHORT,
    DSA_WORKSPACE_FACTOR_SWITCH,
    dsa_workspace_factor,
)

FP8_BLOCK = 128


def _budget_reason(inp: FitInput, budget: MemoryBudget, stage: int) -> str:
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


def _activation_source(budget: MemoryBudget, stage: int) -> str:
    """What sets a stage's activation peak: the profiling run's batch, or the cold torch.compile inside it."""
    batch = f"max_num_batched_tokens {budget.max_num_batched_tokens}"
    if budget.compile_transient and budget.compile_transient >= budget.activations[stage]:
        return f"a cold torch.compile, about the embedding table; {batch}"
    return batch


def _margin(inp: FitInput, kv: KvCapacity, verdict: Verdict) -> str:
    return (
        f"concurrency {kv.concurrency:.2f} is within the budget model's {KV_TOKEN_ERROR:.0%} KV-token error "
        f"of minConcurrency {inp.min_concurrency:g} (worst case {verdict.guaranteed:.2f})"
    )


def fit_reasons(
    inp: FitInput, precision: str, kv_dtype: str, budget: MemoryBudget, kv: KvCapacity, verdict: Verdict
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


def fit_uncertainties(inp: FitInput, budget: MemoryBudget, kv: KvCapacity, verdict: Verdict) -> list[str]:
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


def fit_notes(inp: FitInput, layout: CheckpointQuantization | None) -> list[str]:
    """Hints for serving: the KV budget given, expert parallelism for FP8 block-quantized experts."""
    notes = []
    if inp.available_kv_cache_gib is not None:
        notes.append(
            f"available KV cache memory given as {inp.available_kv_cache_gib:.2f} GiB (budget not computed)"
        )
    arch, tp = inp.model.architecture, inp.tensor_parallel_size
    if inp.data_parallel_size > 1:
        notes.append(
            f"data-parallel attention (DP={inp.data_parallel_size}, experts spread over "
            f"{inp.data_parallel_size * tp} GPUs): the figures are one rank's; its copies of the non-expert "
            "weights and the MoE workspace of every rank's tokens are modelled from vLLM 0.33's code, not "
            "measured on a multi-GPU machine"
        )
    if inp.decode_context_parallel_size > 1:
        notes.append(
            f"decode context parallelism (DCP={inp.decode_context_parallel_size}): each rank keeps 1/"
            f"{inp.decode_context_parallel_size} of every sequence's KV cache as vLLM 0.33's code does; the "
            "ranks' exchange at each decode step is modelled, not measured on a multi-GPU machine"
        )
    block_quantized = layout is not None and layout.group_size == FP8_BLOCK * FP8_BLOCK
    if arch.is_moe and block_quantized and tp > 1 and (arch.moe_intermediate_size // tp) % FP8_BLOCK:
        notes.append(
            f"FP8 block-quantized experts: moe_intermediate_size/TP = {arch.moe_intermediate_size // tp} "
            "is not a multiple of 128; serve with --enable-expert-parallel"
        )
    return notes


def max_context_for(result: FitResult, concurrency: float = 1.0) -> int:
    """Largest max_model_len that still gives ``concurrency`` sequences.

    Activation and weights do not depend on max_model_len in the V1 engine (chunked prefill), so the
    pool is fixed, except for DSA models, whose profiling run reserves prefill workspaces that grow by
    ``dsa_workspace_bytes_per_context_token`` per token of max_model_len (memory.workspaces): there the
    pool at context L is ``available + k x (max_model_len - L)``, solved for L. The answer is rounded
    down to whole blocks.
    """
    if result.kv_cache_tokens <= 0 or concurrency <= 0:
        return 0
    block = result.block_size * result.decode_context_parallel_size
    k = result.dsa_workspace_bytes_per_context_token
    if k and not result.per_request_state_bytes_per_gpu:
        # L x concurrency x bpt / DCP = available + k x max_model_len - k(L) x L, where the workspace
        # factor in k(L) is 5 up to 256K tokens and 2 above (workspaces.dsa_workspace_factor): solved per side
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
