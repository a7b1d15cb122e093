"""The shapes tried on one group, in order of simplicity, and their memory fits (pure).

A candidate is one way to serve the model on one GPU type: the weights' precision (from the spec, the
checkpoint or ``auto``: bf16 > fp8 > int8 > int4 among ``allowedQuantizations``), TP dividing the attention
heads within one node, PP over nodes where allowed, decode context parallelism (DCP: each rank keeps
1/DCP of an MLA model's tokens instead of all of them), data-parallel attention with expert parallelism
(DP ranks serving their own requests, the experts spread over every GPU), MTP speculative tokens, and the
engine knob of a higher ``gpu_memory_utilization``. They are sorted by simplicity (precision, then PP, GPUs,
then the extra dimensions; TP > 2 over PCIe counts as the next lower precision): the first that holds
``minConcurrency`` is what a pure fit check would pick, and ``ranking`` compares it with the others.
Fits of catalog models are remembered across plans (a fit does not depend on the nodes).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from glm_operator.catalog.gpus import GpuType
from glm_operator.catalog.models import CatalogError, ResolvedModel, parse_quantization_config, resolve_model
from glm_operator.planning.memory.fit import default_max_num_batched_tokens, estimate_fit
from glm_operator.planning.memory.instance import (
    FitInput,
    FitInputError,
    FitResult,
    fit_input,
    parallelism_error,
)
from glm_operator.planning.memory.parallel import (
    MAX_SPECULATIVE_TOKENS,
    decode_context_parallel_error,
    mtp_layers,
    supports_data_parallel_attention,
)
from glm_operator.planning.placement.groups import Group
from glm_operator.planning.placement.request import (
    PlacementRequest,
    PlanningInputError,
)
from glm_operator.planning.placement.result import layout_text

PRECISION_RANK = {"bf16": 0, "fp16": 0, "fp8": 1, "int8": 2, "int4": 3, "nvfp4": 3}

AUTO_PRECISIONS = ("bf16", "fp8", "int8", "int4")

PCIE_TP_PENALTY = 1.5

MAX_PIPELINE_PARALLEL = 8  # nodes per replica the planner considers when choosing PP

FP8_LOAD_PEAK_FRACTION = 0.95  # of a GPU's memory: room for the CUDA context while loading

#: The ``gpu_memory_utilization`` a knob candidate raises vLLM's default to, where the spec sets none: more
#: KV cache for less headroom beyond vLLM's own accounting (NCCL, fragmentation, a graph estimate that
#: falls short). vLLM's default is 0.92 from 0.26; its recipes use up to 0.95.
KNOB_UTILIZATION = 0.95
#: The ``max_num_batched_tokens`` a knob candidate lowers vLLM's default to: the profiling run's batch, so the
#: activation peak and the MoE workspace (of every data-parallel rank's tokens), shrink with it; prefill then
#: takes more steps (a longer time to first token under load)
KNOB_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class Candidate:
    quantization: str
    tp: int
    pp: int
    penalised: bool
    dcp: int = 1  # decode context parallel ranks within the TP group
    dp: int = 1  # data-parallel attention ranks, experts spread over dp x tp GPUs (expert parallel)
    mtp: int = 0  # MTP speculative tokens
    utilization: float | None = None  # a knob: gpu_memory_utilization above the release's default
    batched_tokens: int | None = None  # a knob: max_num_batched_tokens below vLLM's default

    @property
    def gpus(self) -> int:
        """GPUs one replica uses."""
        return self.tp * self.pp * self.dp

    @property
    def sort_key(self) -> tuple[float, int, int, int, int, int, int]:
        """Simplicity: precision first (the quality floor), then fewer nodes and GPUs, then the extra
        dimensions, the knob last."""
        return (
            PRECISION_RANK[self.quantization] + (PCIE_TP_PENALTY if self.penalised else 0.0),
            self.pp,
            self.gpus,
            self.dp,
            self.dcp,
            self.mtp,
            int(self.utilization is not None) + int(self.batched_tokens is not None),
        )

    @property
    def plain(self) -> Candidate:
        """The same shape at vLLM's own utilization and token budget."""
        return replace(self, utilization=None, batched_tokens=None)


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    model: ResolvedModel
    fit: FitResult | None
    error: str | None = None


def resolve_request_model(request: PlacementRequest) -> ResolvedModel:
    try:
        if request.model_config:
            return resolve_model(request.model_config, request.model or None)
        return resolve_model(request.model)
    except CatalogError as exc:
        raise PlanningInputError(f"spec.model{'.config' if request.model_config else ''}: {exc}") from None
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, ArithmeticError) as exc:
        # An inline config.json of an unexpected shape (a list where a number belongs, ...).
        raise PlanningInputError(
            f"{_inline_config_field(request.model_config)}: {_unreadable(exc)}"
        ) from None


def _inline_config_field(config: Mapping[str, Any] | None) -> str:
    """The part of an inline config.json the planner failed on (the quantization block is apart)."""
    if config is None:
        return "spec.model.id"
    quantization = config.get("quantization_config")
    text = config.get("text_config")
    if quantization is None and isinstance(text, Mapping):
        quantization = text.get("quantization_config")
    if quantization is not None:
        try:
            parse_quantization_config(quantization)
        except Exception:
            return "spec.model.config.quantization_config"
    return "spec.model.config"


def _unreadable(exc: Exception) -> str:
    return (
        f"the planner cannot read this config ({type(exc).__name__}: {str(exc)[:200]}); give the values "
        "of the model's config.json as they are published (numbers as numbers, lists as lists)"
    )


def checkpoint_for(
    base: ResolvedModel, quantization: str, pinned_repo: str = ""
) -> tuple[ResolvedModel, str | None]:
    """Checkpoint to load for a weights precision, and the vLLM --quantization flag (None = auto). With
    ``pinned_repo`` naming the model's own 16-bit repository (spec.model.source), fp8 is vLLM's load-time
    quantization of those weights, not the FP8 sibling."""
    ckpt = base.checkpoint_quantization
    if ckpt is not None:
        return base, None
    if quantization == "fp8" and base.fp8_checkpoint and pinned_repo != base.model_id.lower():
        return resolve_model(base.fp8_checkpoint), None
    if quantization == "fp8":
        return base, "fp8"
    quantized = base.quantized_checkpoint(quantization)
    if quantized is not None:
        # vLLM reads the method from the checkpoint's quantization_config (AWQ/GPTQ pick their Marlin
        # kernels themselves): no --quantization flag
        return resolve_model(quantized.id), None
    return base, None


def has_checkpoint(model: ResolvedModel, precision: str) -> bool:
    """Whether vLLM can serve ``precision`` for this model: a checkpoint stored in it, the catalog's
    pre-quantized int4/int8 checkpoint of it, or fp8, which vLLM quantizes a 16-bit checkpoint to at
    load time. vLLM has no load-time int8/int4 quantization."""
    if model.checkpoint_quantization is not None:
        return model.checkpoint_quantization.precision == precision
    return precision in ("bf16", "fp16", "fp8") or model.quantized_checkpoint(precision) is not None


def _precisions(request: PlacementRequest, model: ResolvedModel, gpu: GpuType) -> list[str]:
    pinned = pinned_precisions(request, model)
    if request.quantization == "auto":
        if model.checkpoint_quantization is not None:
            return [model.checkpoint_quantization.precision]
        first = "bf16" if gpu.bf16 and model.architecture.dtype != "fp16" else "fp16"
        found = [first, *(p for p in AUTO_PRECISIONS[1:] if has_checkpoint(model, p))]
        return [p for p in found if allowed_by_spec(request, p) and (pinned is None or p in pinned)]
    return [request.quantization]


def pinned_precisions(request: PlacementRequest, model: ResolvedModel) -> set[str] | None:
    """The precisions the weights an hf:// ``spec.model.source`` names can be served in, when it names one of
    the catalog's checkpoints of the model: its 16-bit repository (16-bit, or fp8 quantized at load), its
    FP8 sibling (fp8) or a pre-quantized one (that precision). None: no such restriction (no source, or one
    the catalog does not know)."""
    repo = request.pinned_repo
    if not repo or model.checkpoint_quantization is not None:
        return None
    if repo == model.model_id.lower():
        return {"bf16", "fp16", "fp8"}
    if model.fp8_checkpoint and repo == model.fp8_checkpoint.lower():
        return {"fp8"}
    for precision in ("int8", "int4"):
        quantized = model.quantized_checkpoint(precision)
        if quantized is not None and repo == quantized.id.lower():
            return {precision}
    return None


def allowed_by_spec(request: PlacementRequest, precision: str) -> bool:
    """Whether spec.allowedQuantizations lets auto choose ``precision`` (bf16 and fp16 are one
    16-bit class)."""
    allowed = request.allowed_quantizations
    if not allowed:
        return True
    if PRECISION_RANK[precision] == 0:
        return any(PRECISION_RANK.get(a) == 0 for a in allowed)
    return precision in allowed


def _fit_input(
    request: PlacementRequest, model: ResolvedModel, gpu: GpuType, cand: Candidate, **settings: Any
) -> FitInput:
    """One candidate shape on one GPU type, under the request's vLLM release and utilization."""
    return fit_input(
        model,
        gpu,
        request.engine,
        tensor_parallel_size=cand.tp,
        pipeline_parallel_size=cand.pp,
        decode_context_parallel_size=cand.dcp,
        data_parallel_size=cand.dp,
        num_speculative_tokens=cand.mtp,
        gpu_memory_utilization=cand.utilization or request.gpu_memory_utilization,
        **settings,
    )


def _fp8_load_peak_error(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: Candidate
) -> str | None:
    """On-the-fly FP8 (``--quantization fp8`` on a 16-bit checkpoint) loads the 16-bit weights
    before quantizing them, so at load time each GPU holds about its bf16 shard: that must fit in the
    GPU's memory even though the FP8 weights that remain are half of it."""
    try:
        bf16 = estimate_fit(
            _fit_input(
                request, base, gpu, cand, max_model_len=256, quantization="bf16", kv_cache_dtype="auto"
            )
        )
    except FitInputError:
        return None
    if bf16.weights_gib_per_gpu <= gpu.memory_gib * FP8_LOAD_PEAK_FRACTION:
        return None
    return (
        f"on-the-fly FP8 loads the bf16 checkpoint first: {bf16.weights_gib_per_gpu:.1f} GiB per GPU at load "
        f"exceeds {gpu.memory_gib * FP8_LOAD_PEAK_FRACTION:.1f} GiB of {gpu.name}"
    )


def _tp_options(request: PlacementRequest, model: ResolvedModel, limit: int) -> list[int]:
    if request.tensor_parallel_size:
        return [request.tensor_parallel_size]
    arch = model.architecture
    return [tp for tp in range(1, limit + 1) if parallelism_error(arch, tp) is None]


# Candidate fits of catalog models, remembered across plans: a GLMDeployment is re-planned on
# every node or GPU-usage change and every resync, and a fit depends on neither. Keyed by the request
# without its pools and replicas; inline configs (model_config) are not kept.
# Bounded: emptied when full.
_EVALUATIONS: dict[tuple[Any, ...], Evaluated] = {}

#: ~2 KiB each: a GLM-5.x plan on 8-GPU nodes tries about a hundred shapes per GPU type
_EVALUATIONS_KEPT = 4096


def evaluate(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: Candidate, context: int
) -> Evaluated:
    if request.model_config is not None or not _EVALUATIONS_KEPT:
        return _evaluate_fit(request, base, gpu, cand, context)
    # the whole request but what changes from one reconcile to the next and no fit reads (the pools, the
    # replicas): a field added to the request is in the key without anyone having to remember it
    key = (replace(request, pools=(), replicas=1, running_on=()), base.model_id, gpu, cand, context)
    found = _EVALUATIONS.get(key)
    if found is None:
        found = _evaluate_fit(request, base, gpu, cand, context)
        if len(_EVALUATIONS) >= _EVALUATIONS_KEPT:
            _EVALUATIONS.clear()
        _EVALUATIONS[key] = found
    return found


def _evaluate_fit(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: Candidate, context: int
) -> Evaluated:
    model, flag = checkpoint_for(base, cand.quantization, request.pinned_repo)
    quant = "auto" if model.checkpoint_quantization is not None else cand.quantization
    if flag == "fp8":
        peak = _fp8_load_peak_error(request, base, gpu, cand)
        if peak is not None:
            return Evaluated(cand, model, None, peak)
    try:
        fit = estimate_fit(
            _fit_input(
                request,
                model,
                gpu,
                cand,
                max_model_len=context,
                quantization=quant,
                kv_cache_dtype=request.kv_cache_dtype,
                max_num_batched_tokens=cand.batched_tokens or request.max_num_batched_tokens,
                max_num_seqs=request.max_num_seqs,
                # every data-parallel rank is an engine with its own KV cache and requests
                min_concurrency=request.min_concurrency / cand.dp,
                guarantee_min_concurrency=request.guarantee_min_concurrency,
            )
        )
    except FitInputError as exc:
        return Evaluated(cand, model, None, str(exc))
    return Evaluated(cand, model, fit)


def _data_parallel_sizes(
    request: PlacementRequest, model: ResolvedModel, tp: int, per_node: int
) -> list[int]:
    """Data-parallel attention ranks to try at ``tp``: the spec's, else 1 and, for MoE models vLLM serves
    that way, each power of two whose GPUs fit on one node."""
    if request.data_parallel_size:  # pinned: at TPs whose DP x TP GPUs fit one node (checked in plan)
        return [request.data_parallel_size] if request.data_parallel_size * tp <= per_node else []
    if not supports_data_parallel_attention(model.architecture):
        return [1]
    return [1, *(dp for dp in (2, 4, 8, 16, 32, 64) if dp * tp <= per_node)]


def _decode_context_sizes(
    request: PlacementRequest, model: ResolvedModel, tp: int, gpu: GpuType
) -> list[int]:
    """DCP sizes to try at ``tp``: the spec's, else 1 and each vLLM takes for the model, GPU and release."""
    if request.decode_context_parallel_size:
        return [request.decode_context_parallel_size]
    arch, version = model.architecture, request.engine.version
    return [1] + [
        d
        for d in (2, 4, 8, 16, 32)
        if decode_context_parallel_error(arch, tp, d, gpu.compute_capability, version) is None
    ]


def _speculative_tokens(request: PlacementRequest, model: ResolvedModel) -> list[int]:
    """MTP draft lengths to try: none with mode Off or a model without MTP layers, the pinned one with On,
    else 0 (Auto only) and 1 to MAX_SPECULATIVE_TOKENS."""
    if request.speculative_mode == "Off" or not mtp_layers(model.architecture):
        return [0]
    if request.speculative_tokens:
        return [request.speculative_tokens]
    tried = list(range(1, MAX_SPECULATIVE_TOKENS + 1))
    return tried if request.speculative_mode == "On" else [0, *tried]


def _knobs(request: PlacementRequest, gpu: GpuType) -> list[tuple[float | None, int | None]]:
    """(utilization, batched tokens): vLLM's own, and each knob (and both) the spec leaves to vLLM where it
    changes vLLM's default."""
    utils: list[float | None] = [None]
    if request.memory_utilization is None and request.gpu_memory_utilization < KNOB_UTILIZATION:
        utils.append(KNOB_UTILIZATION)
    batches: list[int | None] = [None]
    default = default_max_num_batched_tokens(gpu.memory_gib, gpu.compute_capability, request.engine.version)
    if request.max_num_batched_tokens is None and default > KNOB_BATCHED_TOKENS:
        batches.append(KNOB_BATCHED_TOKENS)
    return list(itertools.product(utils, batches))


def candidates_for(
    request: PlacementRequest, model: ResolvedModel, group: Group, multi_node: bool
) -> tuple[list[Candidate], list[str]]:
    """Candidates for one group in order of simplicity, and the reasons some shapes were not considered."""
    notes: list[str] = []
    gpu = group.gpu
    per_node = group.max_gpus_per_node
    if multi_node:
        tps = _tp_options(request, model, per_node)
        max_nodes = max((group.nodes_with(tp) for tp in tps), default=0)
        if request.pipeline_parallel_size > 1:
            pps = [request.pipeline_parallel_size]
        else:
            pps = list(range(2, min(max_nodes, MAX_PIPELINE_PARALLEL, model.architecture.num_layers) + 1))
    else:
        if request.tensor_parallel_size > per_node:
            notes.append(
                f"gpu.tensorParallelSize {request.tensor_parallel_size} exceeds the {per_node} {gpu.name} "
                f"GPUs on one node. fix: gpu.tensorParallelSize {per_node} or less (0 lets the planner "
                f"choose), or gpu.products with nodes of {request.tensor_parallel_size} or more GPUs"
            )
            return [], notes
        tps = _tp_options(request, model, per_node)
        pps = [1]
    mtps = _speculative_tokens(request, model)
    knobs = _knobs(request, gpu)
    out = []
    for q in _precisions(request, model, gpu):
        if q == "fp8" and not gpu.fp8 and gpu.compute_capability < 8.0:
            continue
        for tp in tps:
            # data-parallel attention stays on one node (vLLM's multi-node DP is not rendered)
            dps = [1] if multi_node else _data_parallel_sizes(request, model, tp, per_node)
            # a pinned DP (or DCP) > 1 is the layout served; DP and DCP are not combined
            layouts = []
            if request.data_parallel_size <= 1:
                layouts += [(dcp, 1) for dcp in _decode_context_sizes(request, model, tp, gpu)]
            if request.decode_context_parallel_size <= 1:
                layouts += [(1, dp) for dp in dps if dp > 1]
            for pp in pps:
                if pp > 1 and group.nodes_with(tp) < pp:
                    continue
                for (dcp, dp), mtp, (util, batch) in itertools.product(layouts, mtps, knobs):
                    penalised = tp * dp > 2 and not gpu.nvlink
                    out.append(
                        Candidate(q, tp, pp, penalised, dcp, dp, mtp, utilization=util, batched_tokens=batch)
                    )
    out.sort(key=lambda c: c.sort_key)
    return out, notes


def shape_text(c: Candidate) -> str:
    """The candidate's layout in words (:func:`glm_operator.planning.placement.result.layout_text`)."""
    return layout_text(c.tp, c.pp, c.dcp, c.dp, c.mtp, c.utilization, c.batched_tokens)


def describe_failure(ev: Evaluated, context: int) -> str:
    if ev.fit is None:
        return f"{shape_text(ev.candidate)} {ev.candidate.quantization}: {ev.error}"
    f = ev.fit
    if f.available_kv_cache_gib_per_gpu <= 0:
        return (
            f"{shape_text(ev.candidate)} {f.quantization}: weights {f.weights_gib_per_gpu:.1f} GiB per GPU "
            "leave no KV cache "
            f"(short by {-f.available_kv_cache_gib_per_gpu:.1f} GiB)"
        )
    return (
        f"{shape_text(ev.candidate)} {f.quantization}: {f.max_concurrency:.2f} concurrent "
        f"{context}-token sequences, "
        f"below minConcurrency {f.min_concurrency:g}"
    )


def evaluate_all(
    request: PlacementRequest, base: ResolvedModel, group: Group, context: int, multi_node: bool
) -> tuple[list[Evaluated], list[str]]:
    """Every candidate of one group evaluated, in order of simplicity, and the shapes' notes. The
    utilization knob is tried only for shapes that do not fit at vLLM's own utilization: it is a way to
    fit, not a few per cent more throughput for less headroom; data-parallel attention only where no
    single GPU holds the model."""
    cands, notes = candidates_for(request, base, group, multi_node)
    out: list[Evaluated] = []
    fitting: set[Candidate] = set()
    for cand in cands:  # a knob candidate sorts after the same shape at vLLM's own settings
        if cand.plain != cand and cand.plain in fitting:
            continue
        # both knobs only where neither alone fits (the one-knob candidates sort before it)
        if (
            cand.utilization is not None
            and cand.batched_tokens is not None
            and (replace(cand, utilization=None) in fitting or replace(cand, batched_tokens=None) in fitting)
        ):
            continue
        # data-parallel attention is for models that need several GPUs: one that fits a GPU is served by
        # independent replicas, with no exchange between them (the candidates come in GPU order)
        if cand.dp > 1 and not request.data_parallel_size and any(c.gpus == 1 for c in fitting):
            continue
        ev = evaluate(request, base, group.gpu, cand, context)
        if ev.fit is not None and ev.fit.fits:
            fitting.add(cand)
        out.append(ev)
    return out, notes


def fits(evaluated: list[Evaluated]) -> list[Evaluated]:
    """The candidates that hold minConcurrency, in order."""
    return [ev for ev in evaluated if ev.fit is not None and ev.fit.fits]


def choose_first_fit(
    request: PlacementRequest, base: ResolvedModel, group: Group, context: int, multi_node: bool
) -> tuple[Evaluated | None, list[Evaluated], list[str]]:
    """The simplest candidate that holds minConcurrency, the candidates tried up to it, and the notes."""
    cands, notes = candidates_for(request, base, group, multi_node)
    tried: list[Evaluated] = []
    for cand in cands:
        ev = evaluate(request, base, group.gpu, cand, context)
        tried.append(ev)
        if ev.fit is not None and ev.fit.fits:
            return ev, tried, notes
    return None, tried, notes


def best_failure(tried: list[Evaluated]) -> Evaluated | None:
    """The failed candidate that came closest, at vLLM's own utilization where one was tried there."""
    fits = [t for t in tried if t.fit is not None]
    at_default = [t for t in fits if t.candidate.plain == t.candidate]
    fits = at_default or fits
    if not fits:
        return None
    return max(
        fits,
        key=lambda t: (
            t.fit.max_concurrency if t.fit else 0.0,
            t.fit.available_kv_cache_gib_per_gpu if t.fit else 0.0,
            -t.candidate.tp,
        ),
    )
