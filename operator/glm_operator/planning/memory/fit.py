"""The memory fit of one vLLM instance, in vLLM's own start-up accounting (pure).

:func:`estimate_fit` reproduces ``Worker.determine_available_memory`` per rank and pipeline stage:
requested memory minus weights, activation peak, non-torch memory and CUDA graphs is the KV cache, in
blocks, tokens and sequences of the context, and the verdict against ``minConcurrency``. Each term is a
module of ``memory``; docs/memory-model.md ("The budget equation", then a section per term) explains
every term, the vLLM source it follows and the start-ups that pin it.
"""

from __future__ import annotations

import math

from glm_operator.catalog.models import CheckpointQuantization
from glm_operator.catalog.vllm import Version, format_version
from glm_operator.planning.memory.activation import (
    activation_peak_bytes,
    compile_transient_bytes,
    draft_capture_standin_bytes,
)
from glm_operator.planning.memory.constants import GIB
from glm_operator.planning.memory.cuda_graphs import MODEL_MAX_CAPTURE_SIZE, cudagraph_bytes
from glm_operator.planning.memory.explain import fit_notes, fit_reasons, fit_uncertainties
from glm_operator.planning.memory.instance import (
    DEFAULT_MAX_NUM_SEQS,
    KV_TOKEN_ERROR,
    FitInput,
    FitInputError,
    FitResult,
    KvCapacity,
    MemoryBudget,
    Verdict,
    parallelism_error,
)
from glm_operator.planning.memory.kv_cache import (
    default_block_size,
    kv_bytes_per_token_per_stage,
    kv_dtype_bytes,
    per_request_state_bytes,
)
from glm_operator.planning.memory.layers import pp_layer_ranges
from glm_operator.planning.memory.load import DEEP_GEMM_WORKSPACE_BYTES
from glm_operator.planning.memory.non_torch import fusion_workspace_bytes, non_torch_bytes
from glm_operator.planning.memory.parallel import decode_context_parallel_error, mtp_layers
from glm_operator.planning.memory.settings import BudgetSettings, query_width_per_rank
from glm_operator.planning.memory.weights import (
    load_extra_bytes_per_stage,
    logged_weights,
    mtp_weights_bytes,
    resolve_weight_precision,
    weights_bytes_per_stage,
)
from glm_operator.planning.memory.workspaces import (
    dsa_workspace_bytes_per_context_token,
    flashmla_sparse_load_workspace_bytes,
)
from glm_operator.planning.releases import (
    DEFAULT_VERSION,
    LARGEST_BATCH_GPU_GIB,
    flash_attn_version,
    release_rules,
)


def default_max_num_batched_tokens(
    gpu_memory_gib: float, compute_capability: float = 9.0, vllm_version: Version = DEFAULT_VERSION
) -> int:
    """vLLM's OpenAI-server default (``get_batch_defaults`` in ``vllm/engine/arg_utils.py``): 8192 on
    GPUs with >= 70 GiB except the A100 (compute capability 8.0), else 2048; from 0.33 16384 on GPUs
    with >= 160 GiB (B200, B300)."""
    if gpu_memory_gib >= LARGEST_BATCH_GPU_GIB and release_rules(vllm_version).large_gpu_batch:
        return 16384
    return 8192 if gpu_memory_gib >= 70 and compute_capability != 8.0 else 2048


def _check_fit_input(inp: FitInput) -> float:
    """Raise :class:`FitInputError` where vLLM would refuse the input; return the memory utilization."""
    model = inp.model
    error = parallelism_error(
        model.architecture,
        inp.tensor_parallel_size,
        inp.pipeline_parallel_size,
        inp.decode_context_parallel_size,
    )
    if error:
        raise FitInputError(error)
    dcp = decode_context_parallel_error(
        model.architecture,
        inp.tensor_parallel_size,
        inp.decode_context_parallel_size,
        inp.compute_capability,
        inp.vllm_version,
    )
    if dcp:
        raise FitInputError(dcp)
    if inp.max_model_len < 1:
        raise FitInputError("max_model_len must be >= 1")
    if inp.max_model_len > model.max_context:
        raise FitInputError(
            f"max_model_len {inp.max_model_len} exceeds {model.name}'s limit of {model.max_context} tokens; "
            f"use at most {model.max_context}"
        )
    util = (
        inp.gpu_memory_utilization
        if inp.gpu_memory_utilization is not None
        else release_rules(inp.vllm_version).gpu_memory_utilization
    )
    if not 0 < util <= 1:
        raise FitInputError("gpu_memory_utilization must be in (0, 1]")
    return util


def _weights_per_gpu(
    inp: FitInput, precision: str, layout: CheckpointQuantization | None
) -> tuple[float, ...]:
    """Weight bytes on one rank of each pipeline stage: counted from the config, scaled up to vLLM's
    logged figure where the catalog has one, or the ``weights_gib`` given."""
    model, arch = inp.model, inp.model.architecture
    rules = release_rules(inp.vllm_version)
    scoped = rules.load_max_split
    # DeepGEMM's PDL workspace: the first MoE or FP8 layer allocates it on SM90+ (memory.load)
    deep_gemm = rules.deep_gemm_pdl and inp.compute_capability >= 9.0
    workspace = DEEP_GEMM_WORKSPACE_BYTES if deep_gemm and (arch.is_moe or precision == "fp8") else 0.0

    def loaded(tp: int, pp: int, ep: int = 1) -> tuple[float, ...]:
        params = weights_bytes_per_stage(arch, tp, pp, precision, layout, ep)
        extra = load_extra_bytes_per_stage(arch, tp, pp, precision, layout, scoped, ep)
        return tuple(p + e + workspace for p, e in zip(params, extra, strict=True))

    tp, dp, pp = inp.tensor_parallel_size, inp.data_parallel_size, inp.pipeline_parallel_size
    ep = dp * tp if dp > 1 else 1  # data-parallel attention runs with expert parallelism over the replica
    weights = loaded(tp, pp, ep)
    if inp.num_speculative_tokens:  # the MTP drafter lives on the last pipeline stage
        draft = mtp_weights_bytes(arch, tp, precision, layout, ep, own_embedding=pp > 1)
        weights = (*weights[:-1], weights[-1] + draft)
    logged = logged_weights(model, precision)
    if logged is not None:
        # vLLM loads more than the config counts (weights.LOGGED_WEIGHTS): scale up to its own
        # "Model loading took" figure, assuming the difference shards with TP like the rest
        counted = loaded(logged.tensor_parallel_size, 1)[0]
        scale = logged.gib_per_gpu * GIB / counted
        if scale > 1:
            weights = tuple(w * scale for w in weights)
    if inp.weights_gib is not None:
        # a checkpoint layout we do not model (MXFP4, vision towers): the logged "Model loading took"
        weights = tuple(inp.weights_gib * GIB for _ in weights)
    return weights


def _budget_settings(inp: FitInput, precision: str) -> BudgetSettings:
    """The engine settings vLLM's profiling run depends on (batch sizes, sampler, runner, release)."""
    arch = inp.model.architecture
    rules = release_rules(inp.vllm_version)
    hybrid = arch.linear_attention_layers > 0
    runner_v2 = (
        rules.uses_model_runner_v2(arch.architecture, arch.is_moe, hybrid)
        if inp.model_runner_v2 is None
        else inp.model_runner_v2
    )
    q_width = 0 if arch.is_mla else query_width_per_rank(arch, inp.tensor_parallel_size)
    fa_version = inp.flash_attn_version or flash_attn_version(inp.compute_capability)
    return BudgetSettings(
        max_num_batched_tokens=inp.max_num_batched_tokens
        or default_max_num_batched_tokens(inp.gpu_memory_gib, inp.compute_capability, inp.vllm_version),
        max_num_seqs=inp.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
        flashinfer_sampler=(
            inp.flashinfer_sampler if inp.flashinfer_sampler is not None else rules.flashinfer_sampler
        ),
        custom_all_reduce=inp.custom_all_reduce,
        enforce_eager=inp.enforce_eager,
        compile_cache_warm=inp.compile_cache_warm,
        max_model_len=inp.max_model_len,
        compute_capability=inp.compute_capability,
        decode_context_parallel_size=inp.decode_context_parallel_size,
        data_parallel_size=inp.data_parallel_size,
        num_speculative_tokens=inp.num_speculative_tokens,
        draft_layers=mtp_layers(arch) if inp.num_speculative_tokens else 0,
        generation=rules.generation,
        fusion_workspace_rounded=rules.fusion_workspace_rounded,
        fp8_experts=precision == "fp8",
        unquantized_experts=precision in ("bf16", "fp16"),
        fp8_online_mla=precision == "fp8" and inp.model.checkpoint_quantization is None and arch.is_mla,
        model_runner_v1=rules.graphs_in_budget and not runner_v2,
        v2_graph_estimate=rules.v2_graph_estimate,
        cublas_before_snapshot=rules.cublas_before_snapshot,
        kv_cache_fp8=inp.kv_cache_dtype.lower() == "fp8",
        dsa_shared_workspace=rules.dsa_shared_workspace,
        max_cudagraph_capture_size=MODEL_MAX_CAPTURE_SIZE.get(arch.architecture, 0),
        mla=arch.is_mla,
        # FlashAttention 2 pre-allocates no split-KV accumulators for FULL graphs (see cudagraph_bytes)
        graph_q_width=0 if fa_version == 2 else q_width,
        qk_norm_q_width=q_width if arch.qk_norm else 0,
        dsa_graph_index_heads=(
            arch.index_n_heads if arch.attention == "mla+dsa" and inp.kv_cache_dtype.lower() != "fp8" else 0
        ),
    )


def _memory_budget(
    inp: FitInput, util: float, weights: tuple[float, ...], settings: BudgetSettings
) -> MemoryBudget:
    """requested - weights - activation peak - non-torch - CUDA graphs, per pipeline stage (or the
    ``available_kv_cache_gib`` given)."""
    arch = inp.model.architecture
    tp, pp = inp.tensor_parallel_size, inp.pipeline_parallel_size
    requested = inp.gpu_memory_gib * GIB * util
    # only the last PP stage runs the profiling run's sampler
    acts = [
        activation_peak_bytes(arch, tp, settings, inp.constants, last_stage=s == pp - 1) for s in range(pp)
    ]
    non_torch = non_torch_bytes(tp, pp, settings, inp.constants, arch.hidden_size)
    stage_layers = max(end - start for start, end in pp_layer_ranges(arch.num_layers, pp))
    graphs = cudagraph_bytes(stage_layers + settings.draft_layers, settings, inp.constants, tp)
    if graphs:  # the drafter's stand-ins ride in the first capture the estimate samples
        graphs += draft_capture_standin_bytes(arch, tp, settings)
    in_budget = inp.cudagraphs_in_budget
    cg = graphs if in_budget else 0.0
    if inp.available_kv_cache_gib is not None:
        available = [inp.available_kv_cache_gib * GIB] * pp
    else:
        available = [requested - w - a - non_torch - cg for w, a in zip(weights, acts, strict=True)]
    return MemoryBudget(
        utilization=util,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        requested=requested,
        weights=weights,
        activations=acts,
        non_torch=non_torch,
        fusion_workspace=fusion_workspace_bytes(arch.hidden_size, tp, pp, settings),
        cudagraph_estimate=graphs,
        cudagraphs_in_budget=in_budget,
        available=available,
        compile_transient=compile_transient_bytes(arch, tp, settings),
    )


def _stage_blocks_and_concurrency(
    available: float, bytes_per_token: int, request_state: int, block: int, blocks_per_request: int
) -> tuple[int, float]:
    """KV blocks and concurrent sequences one pipeline stage's pool holds (hybrid models: each
    sequence also holds its fixed linear-attention state)."""
    page = block * bytes_per_token
    if available <= 0 or page <= 0:
        return 0, 0.0
    if request_state:
        concurrency = available / (request_state + blocks_per_request * page)
        return int(concurrency * blocks_per_request), concurrency
    blocks = int(available // page)
    return blocks, blocks / blocks_per_request


def draft_kv_layers(inp: FitInput) -> int:
    """Layers the drafter adds to the KV cache's pages: the model's MTP layers when speculative decoding
    is on (vLLM puts them in the target's groups, the same page per token as a target layer, a DSA MTP
    layer with its indexer: research of vLLM 0.33 ``v1/worker/gpu/attn_utils.py`` L139-156), or the extra
    layers given."""
    mtp = mtp_layers(inp.model.architecture) if inp.num_speculative_tokens else 0
    return inp.extra_kv_layers + mtp


def _kv_capacity(inp: FitInput, available: list[float], kv_dtype: str) -> KvCapacity:
    """Blocks, tokens and concurrency of the KV cache: the smallest over the pipeline stages."""
    arch = inp.model.architecture
    tp, pp, dcp = inp.tensor_parallel_size, inp.pipeline_parallel_size, inp.decode_context_parallel_size
    bpt = kv_bytes_per_token_per_stage(arch, tp, pp, kv_dtype, draft_kv_layers(inp))
    state = per_request_state_bytes(arch, tp, pp)
    block = inp.block_size or default_block_size(arch, inp.compute_capability)
    blocks_per_request = math.ceil(math.ceil(inp.max_model_len / dcp) / block)
    stages = [
        _stage_blocks_and_concurrency(avail, per_token, st, block, blocks_per_request)
        for avail, per_token, st in zip(available, bpt, state, strict=True)
    ]
    worst = min(range(pp), key=lambda s: stages[s][1])
    blocks, concurrency = stages[worst]
    # hybrid models: reported the >= 0.21 way, sequences x max_model_len
    hybrid = arch.linear_attention_layers > 0
    tokens = int(concurrency * inp.max_model_len) if hybrid else blocks * block * dcp
    return KvCapacity(worst, bpt[worst], state[worst], block, blocks, concurrency, tokens)


def _verdict(inp: FitInput, concurrency: float) -> Verdict:
    """Fits when concurrency >= minConcurrency; with ``guarantee_min_concurrency`` also after the
    budget model's KV-token error."""
    fits = concurrency >= inp.min_concurrency and concurrency > 0
    guaranteed = concurrency * (1 - KV_TOKEN_ERROR)
    within_error = fits and guaranteed < inp.min_concurrency and inp.available_kv_cache_gib is None
    if inp.guarantee_min_concurrency and within_error:
        fits = False
    return Verdict(fits, guaranteed, within_error)


def estimate_fit(inp: FitInput) -> FitResult:
    """Weights, KV cache and concurrency per GPU for one instance; see the module docstring."""
    util = _check_fit_input(inp)
    precision, layout = resolve_weight_precision(inp.model, inp.quantization)
    kv_dtype = inp.kv_cache_dtype.lower()
    kv_dtype_bytes(inp.model.architecture, kv_dtype)  # validates
    settings = _budget_settings(inp, precision)
    # vLLM's "Model loading took" also holds what FlashMLA-sparse reserves while the model is built (unless
    # the weights are already a logged "Model loading took" figure: the catalog's or the one given)
    logged = inp.weights_gib is not None or logged_weights(inp.model, precision) is not None
    load_workspace = (
        0.0
        if logged
        else flashmla_sparse_load_workspace_bytes(inp.model.architecture, inp.tensor_parallel_size, settings)
    )
    weights = tuple(w + load_workspace for w in _weights_per_gpu(inp, precision, layout))
    budget = _memory_budget(inp, util, weights, settings)
    kv = _kv_capacity(inp, budget.available, kv_dtype)
    verdict = _verdict(inp, kv.concurrency)
    worst = kv.stage
    return FitResult(
        tensor_parallel_size=inp.tensor_parallel_size,
        pipeline_parallel_size=inp.pipeline_parallel_size,
        decode_context_parallel_size=inp.decode_context_parallel_size,
        quantization=precision,
        kv_cache_dtype=kv_dtype,
        max_model_len=inp.max_model_len,
        gpu_memory_gib=inp.gpu_memory_gib,
        gpu_memory_utilization=util,
        requested_gib=budget.requested / GIB,
        weights_gib_per_gpu=max(budget.weights) / GIB,
        weights_gib_per_stage=tuple(w / GIB for w in budget.weights),
        activation_gib=budget.activations[worst] / GIB,
        non_torch_gib=budget.non_torch / GIB,
        cudagraph_gib=budget.cudagraphs_counted / GIB,
        available_kv_cache_gib_per_gpu=budget.available[worst] / GIB,
        kv_cache_bytes_per_token_per_gpu=kv.bytes_per_token,
        per_request_state_bytes_per_gpu=kv.request_state,
        block_size=kv.block_size,
        kv_cache_blocks=kv.blocks,
        kv_cache_tokens=kv.tokens,
        max_concurrency=kv.concurrency,
        min_concurrency=inp.min_concurrency,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        fits=verdict.fits,
        reasons=tuple(fit_reasons(inp, precision, kv_dtype, budget, kv, verdict)),
        uncertain=tuple(dict.fromkeys(fit_uncertainties(inp, budget, kv, verdict))),
        notes=tuple(fit_notes(inp, layout)),
        cudagraph_capture_gib=budget.cudagraph_estimate / GIB,
        dsa_workspace_bytes_per_context_token=dsa_workspace_bytes_per_context_token(
            inp.model.architecture, settings
        ),
        vllm_version=format_version(inp.vllm_version),
        data_parallel_size=inp.data_parallel_size,
        num_speculative_tokens=inp.num_speculative_tokens,
    )
