"""Placement: which GPU types, TP/PP, quantization and how many replicas (pure).

``plan_placement(request) -> Plan`` is a purely computational function with no side effects: it
takes a :class:`~glm_operator.planning.request.PlacementRequest` (spec values + GPU pools parsed from
the Node list) and returns a frozen :class:`Plan` whose ``details`` say, in words, why each
decision was taken. The rules (docs/DESIGN.md and README "What you write, what you get"):

1. Resolve the model (catalog id/alias or inline config.json). A contextLength above the model's
   limit is an input error naming the limit.
2. Group the pools by (GPU type, resource name, nodeSelector): every group is one candidate
   *variant* - GPU types are never mixed inside one replica, and a type advertised through a per-type
   resource on a mixed machine is its own variant. ``gpu.products`` filters and orders the groups
   (preference order); with ``[]`` any known type is allowed: the types the deployment's workloads
   run on now first (a spec change, or GPUs freed for a moment by another workload's rollout, does
   not move running replicas to whichever type has the most free GPUs at that instant: with many
   deployments re-planned at once, that chase moved replicas back and forth), then by free capacity.
3. Per group, candidates ``(quantization, TP)`` are tried in this order and the first that fits
   (``estimate_fit`` under the budget rules of the request's vLLM release, ``request.engine``:
   concurrency >= minConcurrency) wins:
   - quantization ``auto`` = the highest precision that fits: bf16 > fp8 > int8 > int4 (a quantized
     checkpoint - the official -FP8 id or a config with ``quantization_config`` - fixes the precision),
     among ``allowedQuantizations`` when given. FP8 is native (W8A8) only at compute capability >= 8.9;
     older GPUs run FP8 weights as weight-only W8A16 through Marlin, which is said in the reason;
   - the smallest TP that fits (replicas before TP: the seeds' "DP first"); TP must divide the
     attention heads (GQA: KV heads and TP divide each other) and be <= the GPUs of that type on one
     node;
   - TP > 2 on PCIe-only GPUs is penalised: it is tried only after the next lower precision at
     TP <= 2 (sort key: precision rank + 1.5 when penalised, then TP), and the reason says so;
   - a pinned TP/PP/quantization is still checked, never silently changed;
   - **goodput**: a 16-bit pick under ``auto`` on a GPU with FP8 tensor cores is compared with native
     fp8 at its smallest TP that fits (single node), each at its own max-num-seqs (rule 6, spec.slo
     included), by predicted output tokens/s per GPU (:mod:`glm_operator.planning.performance`). fp8
     replaces the pick when it meets spec.slo where the pick does not, or gives ``GOODPUT_MARGIN``
     (5 %) more; the variant's ``considered`` lists both and the reason says why. Not compared: larger
     TPs (replicas before TP; the model's all-reduce term is not calibrated on more than one GPU),
     int8/int4 and Marlin fp8 (ways to fit, never chosen for speed: quality), fp8 that needs another
     checkpoint than the one ``model.source`` names, and ``allowedQuantizations`` without fp8.
4. PP > 1 (one replica over several nodes, TP inside each node, PP <= 8 when chosen) only when no
   single-node candidate fits and ``allowMultiNode``; otherwise the group is *rejected* with the
   reason and the smallest fix (the multi-node shape that would fit, the quantization that would
   fit, or the largest context that would fit at the best shape: the context with concurrency 1 /
   minConcurrency).
5. Replicas fill the preferred variant first (by its free capacity: sum over nodes of
   floor(free GPUs / GPUs per replica)), then the next; ``shortfall_replicas`` is what no variant
   can host. Variants that receive no replica are kept (replicas 0) as ready alternatives.
6. ``max_num_seqs`` (unless ``serving.maxNumSeqs`` pins it) = clamp(floor(kv_tokens / min(context,
   4096)), minConcurrency, 256): as many sequences as the KV pool holds at a typical 4k-token
   occupancy, never above vLLM's default 256 nor below the requested concurrency.
7. When no variant is left, the request is planned again with what the spec rules out relaxed (a
   GPU type the cluster has outside ``gpu.products``, ``allowMultiNode`` and how many nodes, a
   lower pinned quantization): ``Plan.fixes`` are those that fit, cheapest first
   (:mod:`glm_operator.planning.fixes`).

The fit of a (type, quantization, TP, PP) does not depend on the node, so per-node work is
O(nodes) grouping and capacity counting; the fits are computed once per group.
"""

from __future__ import annotations

import bisect
import collections
import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from glm_operator.catalog.estimated_gpus import NOT_IN_CATALOG
from glm_operator.catalog.gpus import GFD_PRODUCT_LABEL, GPU_RESOURCE, GpuType, find_gpu, load_gpus
from glm_operator.catalog.models import CatalogError, ResolvedModel, parse_quantization_config, resolve_model
from glm_operator.planning.fit import (
    FitInput,
    FitInputError,
    FitResult,
    estimate_fit,
    fit_input,
    max_context_for,
    parallelism_error,
)
from glm_operator.planning.fixes import Fix, all_fixes, cheapest_on, shown_fixes
from glm_operator.planning.nodes import GpuPool, PoolGroups, group_pools
from glm_operator.planning.performance import (
    Speed,
    concurrency_within,
    modelled_knee,
    plan_workload,
    speed_of_fit,
)
from glm_operator.planning.product_filter import allowed_products
from glm_operator.planning.request import DEFAULT_CONTEXT_LENGTH, PlacementRequest, PlanningInputError

PRECISION_RANK = {"bf16": 0, "fp16": 0, "fp8": 1, "int8": 2, "int4": 3, "nvfp4": 3}
AUTO_PRECISIONS = ("bf16", "fp8", "int8", "int4")
PCIE_TP_PENALTY = 1.5
TYPICAL_SEQUENCE_TOKENS = 4096
MAX_NUM_SEQS_CAP = 256
MAX_PIPELINE_PARALLEL = 8  # nodes per replica the planner considers when choosing PP
# Another shape replaces the first that fits only when predicted to give this much more throughput per
# GPU: below it the choice is within the performance model's error between shapes, not worth a change.
GOODPUT_MARGIN = 0.05
FP8_LOAD_PEAK_FRACTION = 0.95  # of a GPU's memory: room for the CUDA context while loading
_CAPACITY_KEY = operator.attrgetter("capacity_key")
_GPU_COUNT = operator.attrgetter("gpu_count")


@dataclass(frozen=True)
class Considered:
    """A single-node shape compared for goodput: its max-num-seqs and predicted speed there."""

    quantization: str
    tensor_parallel_size: int
    max_num_seqs: int
    speed: Speed | None
    meets_slo: bool
    chosen: bool = False
    first_fit: bool = False  # the first shape that fits in rule 3's order (what a pure fit check picks)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.speed.output_tokens_per_s_per_gpu if self.speed else 0.0

    @property
    def shape(self) -> str:
        return f"{self.quantization} TP={self.tensor_parallel_size}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_num_seqs": self.max_num_seqs,
            "predicted": self.speed.to_dict() if self.speed else None,
            "meets_slo": self.meets_slo,
            "chosen": self.chosen,
            "first_fit": self.first_fit,
        }


@dataclass(frozen=True)
class Variant:
    """One GPU type's deployment: the vLLM shape and how many replicas it gets."""

    gpu_product: str
    resource_name: str
    node_selector: Mapping[str, str]
    model_id: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int
    nodes_per_replica: int
    quantization: str
    quantization_flag: str | None  # value for vLLM --quantization, None = from the checkpoint
    kv_cache_dtype: str
    gpu_memory_utilization: float
    weights_gib_per_gpu: float
    available_kv_cache_gib_per_gpu: float
    kv_cache_bytes_per_token_per_gpu: int
    kv_cache_tokens: int
    max_concurrency: float
    max_num_seqs: int
    max_model_len: int
    replicas: int
    capacity_replicas: int
    enable_expert_parallel: bool
    reason: str
    notes: tuple[str, ...] = ()
    key: str = ""  # unique within the plan: gpu_product, + resource / labeller when one type has several
    new_node_replicas: int = 0  # of ``replicas``, those that wait for nodes a node autoscaler adds
    node_pools: tuple[str, ...] = ()  # the autoscaler pools (planning.pools) this variant can grow into
    # The memory budget of one GPU (the limiting pipeline stage), GiB: the GPU's memory, and what
    # vLLM takes out of gpu_memory_utilization of it before the KV cache (CUDA graphs: only when the
    # release counts them in the budget; otherwise they are captured in the headroom).
    gpu_memory_gib: float = 0.0
    activation_gib: float = 0.0
    non_torch_gib: float = 0.0
    cudagraph_gib: float = 0.0
    # predicted speed of one replica at max_num_seqs concurrent chat-like requests (planning.performance)
    speed: Speed | None = None
    # the predicted knee (planning.performance.modelled_knee), max_num_seqs when not reached: the
    # autoscaler's target of running requests per replica
    knee_concurrency: int = 0
    # the shapes compared for goodput (rule 3), the chosen one marked; () when there was no choice
    considered: tuple[Considered, ...] = ()

    @property
    def headroom_gib(self) -> float:
        """What vLLM leaves unused: the GPU's memory beyond gpu_memory_utilization."""
        return self.gpu_memory_gib * (1 - self.gpu_memory_utilization)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "gpu_product": self.gpu_product,
            "resource_name": self.resource_name,
            "node_selector": dict(self.node_selector),
            "model_id": self.model_id,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpus_per_replica": self.gpus_per_replica,
            "nodes_per_replica": self.nodes_per_replica,
            "quantization": self.quantization,
            "quantization_flag": self.quantization_flag,
            "kv_cache_dtype": self.kv_cache_dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "weights_gib_per_gpu": round(self.weights_gib_per_gpu, 2),
            "available_kv_cache_gib_per_gpu": round(self.available_kv_cache_gib_per_gpu, 2),
            "kv_cache_bytes_per_token_per_gpu": self.kv_cache_bytes_per_token_per_gpu,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
            "replicas": self.replicas,
            "capacity_replicas": self.capacity_replicas,
            "enable_expert_parallel": self.enable_expert_parallel,
            "reason": self.reason,
            "notes": list(self.notes),
            "new_node_replicas": self.new_node_replicas,
            "node_pools": list(self.node_pools),
            "gpu_memory_gib": round(self.gpu_memory_gib, 2),
            "activation_gib": round(self.activation_gib, 2),
            "non_torch_gib": round(self.non_torch_gib, 2),
            "cudagraph_gib": round(self.cudagraph_gib, 2),
            "predicted": self.speed.to_dict() if self.speed else None,
            "knee_concurrency": self.knee_concurrency,
            "considered": [c.to_dict() for c in self.considered],
        }


@dataclass(frozen=True)
class Rejection:
    """A GPU type that cannot serve the request, with the number that would fit / the smallest fix."""

    gpu_product: str
    reason: str
    max_context_length: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gpu_product": self.gpu_product, "reason": self.reason}
        if self.max_context_length is not None:
            out["max_context_length"] = self.max_context_length
        return out


@dataclass(frozen=True)
class Plan:
    """The planner's answer; ``details`` are the human-readable decisions (for status and Events)."""

    fits: bool
    model_id: str
    context_length: int
    variants: tuple[Variant, ...]
    rejected: tuple[Rejection, ...]
    details: tuple[str, ...]
    replicas_requested: int
    shortfall_replicas: int
    uncertain: tuple[str, ...] = field(default=())
    vllm_version: str = ""  # the release the memory budget was planned for
    fixes: tuple[Fix, ...] = ()  # when nothing fits: changes that would fit, cheapest first (planning.fixes)
    license: str = ""  # the model's licence as the catalog records it; "" outside the catalog

    @property
    def replicas_planned(self) -> int:
        return sum(v.replicas for v in self.variants)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "model_id": self.model_id,
            "context_length": self.context_length,
            "replicas_requested": self.replicas_requested,
            "replicas_planned": self.replicas_planned,
            "shortfall_replicas": self.shortfall_replicas,
            "variants": [v.to_dict() for v in self.variants],
            "rejected": [r.to_dict() for r in self.rejected],
            "details": list(self.details),
            "uncertain": list(self.uncertain),
            "vllm_version": self.vllm_version,
            "fixes": [f.to_dict() for f in self.fixes],
            "license": self.license,
        }


@dataclass(frozen=True)
class _Group:
    gpu: GpuType
    resource_name: str
    node_selector: tuple[tuple[str, str], ...]
    pools: tuple[GpuPool, ...]

    @property
    def max_gpus_per_node(self) -> int:
        return self._sorted_counts[-1]

    @functools.cached_property
    def _free_counts(self) -> dict[tuple[bool, bool], tuple[tuple[int, int], ...]]:
        """(when_available, existing nodes only) -> (free GPUs, pools with that many) pairs: a
        thousand identical nodes are a handful of pairs, so capacity() need not walk every pool.
        The pools are first counted by their ``capacity_key`` (derived once per pool object, and
        a node set's pools are shared between plans), then the few distinct keys are spread
        over the four kinds."""
        counts: dict[tuple[bool, bool], dict[int, int]] = {
            (a, e): {} for a in (False, True) for e in (False, True)
        }
        for (when_available, now, elastic), n in collections.Counter(map(_CAPACITY_KEY, self.pools)).items():
            kinds = ((False, False), (True, False)) if elastic else tuple(counts)
            for kind in kinds:
                free = when_available if kind[0] else now
                bucket = counts[kind]
                bucket[free] = bucket.get(free, 0) + n
        return {kind: tuple(bucket.items()) for kind, bucket in counts.items()}

    def _replicas(self, tp: int, pp: int, when_available: bool, existing: bool) -> int:
        return sum((f // tp) * n for f, n in self._free_counts[(when_available, existing)]) // max(1, pp)

    def capacity(self, tp: int, pp: int, when_available: bool = False) -> int:
        """Replicas of this shape the free GPUs hold; ``when_available`` counts nodes in an outage
        grace period as if they were back (used for ordering, so a short outage reorders nothing)."""
        return self._replicas(tp, pp, when_available, existing=False)

    def existing_capacity(self, tp: int, pp: int, when_available: bool = False) -> int:
        """Replicas the nodes that exist now can host (without nodes an autoscaler would add)."""
        return self._replicas(tp, pp, when_available, existing=True)

    @property
    def elastic_pools(self) -> tuple[str, ...]:
        return tuple(sorted({p.elastic_pool for p in self.pools if p.elastic_pool}))

    @functools.cached_property
    def _sorted_counts(self) -> tuple[int, ...]:
        return tuple(sorted(map(_GPU_COUNT, self.pools)))

    def nodes_with(self, tp: int) -> int:
        counts = self._sorted_counts
        return len(counts) - bisect.bisect_left(counts, tp)


@dataclass(frozen=True)
class _Candidate:
    quantization: str
    tp: int
    pp: int
    penalised: bool

    @property
    def sort_key(self) -> tuple[float, int, int]:
        return (
            PRECISION_RANK[self.quantization] + (PCIE_TP_PENALTY if self.penalised else 0.0),
            self.pp,
            self.tp,
        )


@dataclass(frozen=True)
class _Evaluated:
    candidate: _Candidate
    model: ResolvedModel
    fit: FitResult | None
    error: str | None = None


# --------------------------------------------------------------------------------------------


def _resolve(request: PlacementRequest) -> ResolvedModel:
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


def _model_for(base: ResolvedModel, quantization: str) -> tuple[ResolvedModel, str | None]:
    """Checkpoint to load for a weights precision, and the vLLM --quantization flag (None = auto)."""
    ckpt = base.checkpoint_quantization
    if ckpt is not None:
        return base, None
    if quantization == "fp8" and base.fp8_checkpoint:
        return resolve_model(base.fp8_checkpoint), None
    if quantization == "fp8":
        return base, "fp8"
    quantized = base.quantized_checkpoint(quantization)
    if quantized is not None:
        # vLLM reads the method from the checkpoint's quantization_config (AWQ/GPTQ pick their Marlin
        # kernels themselves): no --quantization flag
        return resolve_model(quantized.id), None
    return base, None


def _has_checkpoint(model: ResolvedModel, precision: str) -> bool:
    """Whether vLLM can serve ``precision`` for this model: a checkpoint stored in it, the catalog's
    pre-quantized int4/int8 checkpoint of it, or fp8, which vLLM quantizes a 16-bit checkpoint to at
    load time. vLLM has no load-time int8/int4 quantization."""
    if model.checkpoint_quantization is not None:
        return model.checkpoint_quantization.precision == precision
    return precision in ("bf16", "fp16", "fp8") or model.quantized_checkpoint(precision) is not None


def _precisions(request: PlacementRequest, model: ResolvedModel, gpu: GpuType) -> list[str]:
    if request.quantization == "auto":
        if model.checkpoint_quantization is not None:
            return [model.checkpoint_quantization.precision]
        first = "bf16" if gpu.bf16 and model.architecture.dtype != "fp16" else "fp16"
        found = [first, *(p for p in AUTO_PRECISIONS[1:] if _has_checkpoint(model, p))]
        return [p for p in found if _allowed(request, p)]
    return [request.quantization]


def _allowed(request: PlacementRequest, precision: str) -> bool:
    """Whether spec.allowedQuantizations lets auto choose ``precision`` (bf16 and fp16 are one
    16-bit class)."""
    allowed = request.allowed_quantizations
    if not allowed:
        return True
    if PRECISION_RANK[precision] == 0:
        return any(PRECISION_RANK.get(a) == 0 for a in allowed)
    return precision in allowed


def _fit_input(
    request: PlacementRequest, model: ResolvedModel, gpu: GpuType, cand: _Candidate, **settings: Any
) -> FitInput:
    """One candidate shape on one GPU type, under the request's vLLM release and utilization."""
    return fit_input(
        model,
        gpu,
        request.engine,
        tensor_parallel_size=cand.tp,
        pipeline_parallel_size=cand.pp,
        gpu_memory_utilization=request.gpu_memory_utilization,
        **settings,
    )


def _fp8_load_peak_error(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: _Candidate
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
# every node or GPU-usage change and every resync, and a fit depends on neither. Keyed by every
# request field _evaluate reads (not the pools); inline configs (model_config) are not kept.
# Bounded: emptied when full.
_EVALUATIONS: dict[tuple[Any, ...], _Evaluated] = {}
_EVALUATIONS_KEPT = 512  # ~2 KiB each; the controller bench's 200 GLMDeployments (5 specs) use 25


def _evaluate(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: _Candidate, context: int
) -> _Evaluated:
    if request.model_config is not None or not _EVALUATIONS_KEPT:
        return _evaluate_fit(request, base, gpu, cand, context)
    key = (
        request.model,
        base.model_id,
        request.kv_cache_dtype,
        request.gpu_memory_utilization,
        request.max_num_batched_tokens,
        request.max_num_seqs,
        request.min_concurrency,
        request.guarantee_min_concurrency,
        request.engine,
        gpu,
        cand,
        context,
    )
    found = _EVALUATIONS.get(key)
    if found is None:
        found = _evaluate_fit(request, base, gpu, cand, context)
        if len(_EVALUATIONS) >= _EVALUATIONS_KEPT:
            _EVALUATIONS.clear()
        _EVALUATIONS[key] = found
    return found


def _evaluate_fit(
    request: PlacementRequest, base: ResolvedModel, gpu: GpuType, cand: _Candidate, context: int
) -> _Evaluated:
    model, flag = _model_for(base, cand.quantization)
    quant = "auto" if model.checkpoint_quantization is not None else cand.quantization
    if flag == "fp8":
        peak = _fp8_load_peak_error(request, base, gpu, cand)
        if peak is not None:
            return _Evaluated(cand, model, None, peak)
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
                max_num_batched_tokens=request.max_num_batched_tokens,
                max_num_seqs=request.max_num_seqs,
                min_concurrency=request.min_concurrency,
                guarantee_min_concurrency=request.guarantee_min_concurrency,
            )
        )
    except FitInputError as exc:
        return _Evaluated(cand, model, None, str(exc))
    return _Evaluated(cand, model, fit)


def _candidates(
    request: PlacementRequest, model: ResolvedModel, group: _Group, multi_node: bool
) -> tuple[list[_Candidate], list[str]]:
    """Ordered candidates for one group and the reasons some shapes were not considered."""
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
    out = []
    for q in _precisions(request, model, gpu):
        if q == "fp8" and not gpu.fp8 and gpu.compute_capability < 8.0:
            continue
        for tp in tps:
            for pp in pps:
                if pp > 1 and group.nodes_with(tp) < pp:
                    continue
                out.append(_Candidate(q, tp, pp, penalised=tp > 2 and not gpu.nvlink))
    out.sort(key=lambda c: c.sort_key)
    return out, notes


def _fp8_note(gpu: GpuType, quantization: str) -> str | None:
    if quantization != "fp8":
        return None
    if gpu.native_fp8:
        return None
    return (
        f"{gpu.name} (compute capability {gpu.compute_capability:g}) has no FP8 tensor cores: vLLM runs FP8 "
        "weights as weight-only W8A16 through Marlin kernels (memory saving, slower than native FP8)"
    )


def _max_num_seqs(request: PlacementRequest, fit: FitResult, context: int) -> int:
    if request.max_num_seqs:
        return request.max_num_seqs
    typical = max(1, min(context, TYPICAL_SEQUENCE_TOKENS))
    by_kv = fit.kv_cache_tokens // typical
    floor = max(1, math.ceil(request.min_concurrency))
    return max(floor, min(MAX_NUM_SEQS_CAP, by_kv))


def _shape(c: _Candidate) -> str:
    return f"TP={c.tp}" + (f" x PP={c.pp}" if c.pp > 1 else "")


def _describe_failure(ev: _Evaluated, context: int) -> str:
    if ev.fit is None:
        return f"{_shape(ev.candidate)} {ev.candidate.quantization}: {ev.error}"
    f = ev.fit
    if f.available_kv_cache_gib_per_gpu <= 0:
        return (
            f"{_shape(ev.candidate)} {f.quantization}: weights {f.weights_gib_per_gpu:.1f} GiB per GPU "
            "leave no KV cache "
            f"(short by {-f.available_kv_cache_gib_per_gpu:.1f} GiB)"
        )
    return (
        f"{_shape(ev.candidate)} {f.quantization}: {f.max_concurrency:.2f} concurrent "
        f"{context}-token sequences, "
        f"below minConcurrency {f.min_concurrency:g}"
    )


def _choose(
    request: PlacementRequest, base: ResolvedModel, group: _Group, context: int, multi_node: bool
) -> tuple[_Evaluated | None, list[_Evaluated], list[str]]:
    cands, notes = _candidates(request, base, group, multi_node)
    tried: list[_Evaluated] = []
    for cand in cands:
        ev = _evaluate(request, base, group.gpu, cand, context)
        tried.append(ev)
        if ev.fit is not None and ev.fit.fits:
            return ev, tried, notes
    return None, tried, notes


def _best_failure(tried: list[_Evaluated]) -> _Evaluated | None:
    fits = [t for t in tried if t.fit is not None]
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


def _newer_gpu_rejection(base: ResolvedModel, gpu: GpuType) -> Rejection:
    """A DSA/hybrid model on a GPU older than its kernels need, with the GPU types that have them."""
    newer = [g.name for g in load_gpus() if g.compute_capability >= base.min_compute_capability]
    return Rejection(
        gpu.name,
        f"{base.name} needs vLLM's sparse-MLA (DSA) kernels, available from compute capability "
        f"{base.min_compute_capability:.1f}; {gpu.name} is {gpu.compute_capability:.1f}. fix: "
        f"gpu.products with GPU types of compute capability {base.min_compute_capability:.1f} or newer "
        f"({', '.join(newer[:4])})",
    )


def _context_fixes(
    request: PlacementRequest, base: ResolvedModel, fit: FitResult, context: int
) -> tuple[list[str], int | None]:
    """The context (or minConcurrency) the best failed shape would hold, and the longest sequence
    it holds once (None when its weights leave no KV cache)."""
    fixes: list[str] = []
    if fit.available_kv_cache_gib_per_gpu <= 0:
        return fixes, None
    once = min(max_context_for(fit, 1.0), base.max_context)
    at_min = min(max_context_for(fit, max(request.min_concurrency, 1e-9)), base.max_context)
    if once < context:
        fixes.append(f"contextLength <= {once} (the longest sequence it holds even once)")
    if request.min_concurrency > 1 and at_min >= 1:
        fixes.append(f"contextLength <= {at_min} for minConcurrency {request.min_concurrency:g}")
    if fit.max_concurrency >= 1 and request.min_concurrency > fit.max_concurrency:
        fixes.append(f"or minConcurrency <= {math.floor(fit.max_concurrency * 100) / 100:g}")
    return fixes, once


def _shape_fixes(request: PlacementRequest, base: ResolvedModel, group: _Group, context: int) -> list[str]:
    """The multi-node shape or the quantization that would fit where the request rules them out."""
    fixes: list[str] = []
    if not (request.allow_multi_node or request.pipeline_parallel_size > 1) and len(group.pools) > 1:
        multi, _, _ = _choose(request, base, group, context, multi_node=True)
        if multi is not None:
            c = multi.candidate
            fixes.append(
                f"gpu.allowMultiNode: true would fit with {_shape(c)} {c.quantization} over {c.pp} nodes"
            )
    if request.quantization != "auto":
        auto_req = _replace_quantization(request, "auto")
        alt, _, _ = _choose(auto_req, base, group, context, multi_node=False)
        if alt is not None and alt.candidate.quantization != request.quantization:
            fixes.append(f"quantization {alt.candidate.quantization} would fit at {_shape(alt.candidate)}")
    return fixes


def _rejection(
    request: PlacementRequest,
    base: ResolvedModel,
    group: _Group,
    context: int,
    tried: list[_Evaluated],
    notes: list[str],
) -> Rejection:
    """Why nothing fits on a group, from its best failed candidate, with the smallest fixes."""
    gpu = group.gpu
    if _needs_newer_gpu(base, gpu):
        return _newer_gpu_rejection(base, gpu)
    if not tried:
        why = "; ".join(notes) or _no_shape(request, gpu)
        return Rejection(gpu.name, f"no valid shape on {gpu.name}: {why}")
    best = _best_failure(tried)
    if best is None or best.fit is None:
        errors = sorted({t.error or "" for t in tried})
        fix = (
            "fix: quantization auto and gpu.tensorParallelSize 0 (the planner chooses), or gpu.products "
            f"with more memory per GPU than {gpu.name}'s {gpu.memory_gib:g} GiB"
        )
        return Rejection(gpu.name, f"no valid shape on {gpu.name}: {'; '.join(errors)}. {fix}")
    fixes, max_ctx = _context_fixes(request, base, best.fit, context)
    fixes += _shape_fixes(request, base, group, context)
    if not fixes:  # the weights alone do not fit, at every precision and split tried
        fixes.append(
            f"gpu.products with more GPU memory per node than {group.max_gpus_per_node} x "
            f"{gpu.memory_gib:g} GiB of {gpu.name}"
            + ("" if request.quantization == "auto" else ", quantization auto (a lower precision)")
            + ("" if request.allow_multi_node else ", or gpu.allowMultiNode: true with more nodes")
        )
    parts = [f"nothing fits on {gpu.name}; best is {_describe_failure(best, context)}"]
    parts.append("fix: " + "; ".join(fixes))
    return Rejection(gpu.name, ". ".join(parts), max_ctx)


def _no_shape(request: PlacementRequest, gpu: GpuType) -> str:
    """Why no candidate shape was tried on ``gpu`` (no notes), and the fix."""
    if request.pipeline_parallel_size > 1:
        return (
            f"gpu.pipelineParallelSize {request.pipeline_parallel_size} needs as many {gpu.name} nodes with "
            f"room for a stage. fix: a smaller gpu.pipelineParallelSize (0 lets the planner choose), or "
            f"more {gpu.name} nodes"
        )
    return (
        f"no tensor-parallel size or quantization {request.quantization} runs on {gpu.name} within one node. "
        "fix: quantization auto and gpu.tensorParallelSize 0 (the planner chooses), or gpu.products with "
        "another GPU type"
    )


def _replace_quantization(request: PlacementRequest, quantization: str) -> PlacementRequest:
    return replace(request, quantization=quantization)


def _group_pools(grouped: PoolGroups, details: list[str], rejected: list[Rejection]) -> list[_Group]:
    for (label, why), names in sorted(grouped.unknown):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        reason = why or f"GPU type {label!r} is not in the catalog"
        details.append(f"{reason}; not used: {shown}")
        rejected.append(Rejection(label, f"{reason} (nodes {shown})"))
    for name, gpu in sorted(grouped.estimated):
        details.append(f"{name}: {gpu.memory_source}")
    estimated = dict(grouped.estimated)
    return [
        _Group(estimated.get(product) or find_gpu(product), resource, selector, group)
        for (product, resource, selector), group in grouped.groups
    ]


@dataclass(frozen=True, eq=False)
class _Chosen:
    """A group's winning candidate and the candidates tried before it."""

    group: _Group
    pick: _Evaluated
    tried: list[_Evaluated]
    considered: tuple[Considered, ...] = ()  # rule 3's goodput comparison; () when there was none

    def capacity(self, when_available: bool = False) -> int:
        """Replicas of the chosen shape the group's free GPUs hold (nodes autoscalers add included)."""
        return self.group.capacity(self.pick.candidate.tp, self.pick.candidate.pp, when_available)

    def existing_capacity(self, when_available: bool = False) -> int:
        """Replicas of the chosen shape the nodes that exist now hold."""
        return self.group.existing_capacity(self.pick.candidate.tp, self.pick.candidate.pp, when_available)


def _context_length(request: PlacementRequest, base: ResolvedModel) -> int:
    """The max_model_len to plan: spec.contextLength, else the default up to the model's limit."""
    context = request.context_length or min(DEFAULT_CONTEXT_LENGTH, base.max_context)
    if context > base.max_context:
        raise PlanningInputError(
            f"spec.contextLength {context} exceeds {base.name}'s limit of {base.max_context} tokens; "
            f"set contextLength <= {base.max_context}"
        )
    return context


def _check_pinned(request: PlacementRequest, base: ResolvedModel) -> None:
    """Refuse a pinned quantization or TP the model cannot be served with on any GPU."""
    if request.quantization in ("int8", "int4") and not _has_checkpoint(base, request.quantization):
        raise PlanningInputError(
            f"spec.quantization {request.quantization}: no {request.quantization} checkpoint of {base.name} "
            f"is known and vLLM cannot quantize to {request.quantization} at load time; use fp8 (quantized "
            "on the fly) or auto, or point model.source at an AWQ/GPTQ checkpoint and give its config.json "
            "(with its quantization_config) as model.config"
        )
    ckpt = base.checkpoint_quantization
    if request.quantization == "auto" and ckpt is not None and not _allowed(request, ckpt.precision):
        raise PlanningInputError(
            f"spec.allowedQuantizations [{', '.join(request.allowed_quantizations)}]: the checkpoint "
            f"{base.model_id} is stored in {ckpt.precision}; add {ckpt.precision} to allowedQuantizations "
            "or serve the model's 16-bit checkpoint"
        )
    if request.tensor_parallel_size:
        err = parallelism_error(base.architecture, request.tensor_parallel_size)
        if err:
            raise PlanningInputError(f"spec.gpu.tensorParallelSize: {err}; use 0 to let the planner choose")


def _allowed_products(request: PlacementRequest, grouped: PoolGroups) -> list[str]:
    """``gpu.products`` resolved against the catalog and the estimated GPU types on the nodes."""
    # Both walk every pool, and find something only if grouping found an estimated or unknown GPU
    # type (it files a pool without gpu_product as unknown, one with an estimate and a name as
    # estimated); a cluster of catalog GPUs has neither: skip the two walks then.
    if not (grouped.estimated or grouped.unknown):
        return allowed_products(request.gpu_products, set(), {})
    return allowed_products(
        request.gpu_products,
        {p.gpu_product for p in request.pools if p.estimated is not None},
        {
            p.product_label: p.unknown_reason or f"GPU type {p.product_label!r} is not in the catalog"
            for p in request.pools
            if not p.gpu_product and p.product_label
        },
    )


def _filter_by_products(
    allowed: list[str], groups: list[_Group], details: list[str], rejected: list[Rejection]
) -> tuple[list[_Group], dict[str, int]]:
    """The groups ``gpu.products`` allows and its preference order (empty: any type, no order);
    allowed types no node has are rejected with the fix."""
    if not allowed:
        return groups, {}
    order = {name: i for i, name in enumerate(allowed)}
    present = {g.gpu.name for g in groups}
    for name in allowed:
        if name not in present:
            rejected.append(
                Rejection(
                    name,
                    f"no schedulable node has {name} GPUs. fix: add {name} nodes (or a node pool that "
                    "provides them), or list the GPU types the cluster has in gpu.products",
                )
            )
    skipped = sorted({g.gpu.name for g in groups if g.gpu.name not in order})
    if skipped:
        details.append(f"not in gpu.products, not used: {', '.join(skipped)}")
    return [g for g in groups if g.gpu.name in order], order


def _needs_newer_gpu(base: ResolvedModel, gpu: GpuType) -> bool:
    """Sparse-MLA (DSA) and hybrid models need kernels a GPU older than the model's minimum lacks."""
    return (
        base.architecture.attention in ("mla+dsa", "hybrid")
        and gpu.compute_capability < base.min_compute_capability
    )


def _choose_shape(
    request: PlacementRequest, base: ResolvedModel, group: _Group, context: int, details: list[str]
) -> _Chosen | Rejection:
    """The first fitting candidate on one group (one node per replica first, then several where
    allowed or PP is pinned), or the group's rejection with the smallest fix."""
    gpu = group.gpu
    if _needs_newer_gpu(base, gpu):
        return _rejection(request, base, group, context, [], [])
    multi_only = request.pipeline_parallel_size > 1
    pick, tried, notes = (None, [], []) if multi_only else _choose(request, base, group, context, False)
    if pick is None and (request.allow_multi_node or multi_only):
        mpick, mtried, mnotes = _choose(request, base, group, context, True)
        if mpick is not None:
            if not multi_only:
                details.append(
                    f"{gpu.name}: no single node fits, using {mpick.candidate.pp} nodes per replica"
                )
            pick = mpick
        tried += mtried
        notes += mnotes
    if pick is None:
        return _rejection(request, base, group, context, tried, notes)
    if pick.candidate.pp > 1:
        return _Chosen(group, pick, tried)
    best, considered = _by_goodput(request, base, group, context, pick)
    return _Chosen(group, best, tried, considered)


def _goodput_rivals(
    request: PlacementRequest, base: ResolvedModel, group: _Group, first: _Candidate
) -> list[_Candidate]:
    """The shapes compared with the first that fits (rule 3): native fp8 for a 16-bit pick under auto, in
    TP order (the smallest that fits is taken); none over PCIe at TP > 2 unless the pick is, none that
    loads another checkpoint than the one spec.model.source names."""
    if PRECISION_RANK[first.quantization] != 0 or not group.gpu.native_fp8:
        return []
    if request.checkpoint_pinned and _model_for(base, "fp8")[0] is not base:
        return []
    return [
        c
        for c in _candidates(request, base, group, False)[0]
        if c.quantization == "fp8" and (not c.penalised or first.penalised)
    ]


def _by_goodput(
    request: PlacementRequest, base: ResolvedModel, group: _Group, context: int, first: _Evaluated
) -> tuple[_Evaluated, tuple[Considered, ...]]:
    """The first fit, or the rival of best predicted throughput per GPU when it wins (rule 3)."""
    fits = [first]
    for cand in _goodput_rivals(request, base, group, first.candidate):
        ev = _evaluate(request, base, group.gpu, cand, context)
        if ev.fit is not None and ev.fit.fits:
            fits.append(ev)
            break  # the smallest TP of that precision that fits: replicas before TP
    if len(fits) == 1:
        return first, ()
    scored = [(ev, _considered(request, ev, group.gpu, context, first=ev is first)) for ev in fits]
    best, best_c = scored[0]
    for ev, c in scored[1:]:
        if (c.meets_slo and not best_c.meets_slo) or (
            c.meets_slo == best_c.meets_slo
            and c.tokens_per_s_per_gpu > best_c.tokens_per_s_per_gpu * (1 + GOODPUT_MARGIN)
        ):
            best, best_c = ev, c
    ranked = sorted((c for _, c in scored), key=lambda c: (not c.meets_slo, -c.tokens_per_s_per_gpu))
    return best, tuple(replace(c, chosen=c is best_c) for c in ranked)


def _considered(
    request: PlacementRequest, ev: _Evaluated, gpu: GpuType, context: int, first: bool
) -> Considered:
    assert ev.fit is not None
    fit, arch = ev.fit, ev.model.architecture

    def speed_at(n: int) -> Speed | None:
        return speed_of_fit(fit, arch, gpu, plan_workload(n, context))

    seqs, met = _planned_seqs(request, fit, context, speed_at)
    return Considered(fit.quantization, ev.candidate.tp, seqs, speed_at(seqs), met, first_fit=first)


def _planned_seqs(
    request: PlacementRequest, fit: FitResult, context: int, speed_at: Callable[[int], Speed | None]
) -> tuple[int, bool]:
    """max-num-seqs (rule 6) lowered for spec.slo, and whether the SLO is met there (True without one)."""
    by_kv = _max_num_seqs(request, fit, context)
    if not (request.slo_itl_ms or request.slo_ttft_ms) or request.max_num_seqs:
        return by_kv, True
    floor = min(by_kv, max(1, math.ceil(request.min_concurrency)))
    if speed_at(floor) is None:
        return by_kv, False  # no speed figures for the GPU type: the KV cache decides (the note says so)
    return concurrency_within(floor, by_kv, speed_at, request.slo_itl_ms, request.slo_ttft_ms)


def _order_by_preference(chosen: list[_Chosen], order: dict[str, int], running_on: tuple[str, ...]) -> None:
    """Sort in place: the ``gpu.products`` order, else the types the replicas run on now, then nodes
    that exist first, then what autoscalers can add, then memory (free capacity counts nodes in an
    outage grace period as back)."""
    if order:
        chosen.sort(key=lambda c: (order[c.group.gpu.name], -c.capacity(True)))
    else:
        chosen.sort(
            key=lambda c: (
                c.group.gpu.name not in running_on,
                -c.existing_capacity(True),
                -c.capacity(True),
                -c.group.gpu.memory_gib,
                c.group.gpu.name,
            )
        )


def _variant(
    request: PlacementRequest,
    base: ResolvedModel,
    chosen: _Chosen,
    context: int,
    replicas: int,
    reason: str,
    notes: list[str],
) -> Variant:
    """The Variant of a chosen shape given ``replicas`` of it."""
    group, ev = chosen.group, chosen.pick
    assert ev.fit is not None
    fit, cand = ev.fit, ev.candidate
    _, flag = _model_for(base, cand.quantization)
    arch, gpu = ev.model.architecture, group.gpu

    def speed_at(n: int) -> Speed | None:
        return speed_of_fit(fit, arch, gpu, plan_workload(n, context))

    max_num_seqs, met = _planned_seqs(request, fit, context, speed_at)
    if (request.slo_itl_ms or request.slo_ttft_ms) and not request.max_num_seqs:
        notes = [
            *notes,
            _slo_note(request, _max_num_seqs(request, fit, context), max_num_seqs, met, speed_at),
        ]
    knee = modelled_knee(speed_at, max_num_seqs)
    return Variant(
        gpu_product=group.gpu.name,
        resource_name=group.resource_name,
        node_selector=dict(group.node_selector),
        model_id=ev.model.model_id,
        tensor_parallel_size=cand.tp,
        pipeline_parallel_size=cand.pp,
        gpus_per_replica=cand.tp * cand.pp,
        nodes_per_replica=cand.pp,
        quantization=fit.quantization,
        quantization_flag=flag,
        kv_cache_dtype=request.kv_cache_dtype,
        gpu_memory_utilization=request.gpu_memory_utilization,
        weights_gib_per_gpu=fit.weights_gib_per_gpu,
        available_kv_cache_gib_per_gpu=fit.available_kv_cache_gib_per_gpu,
        kv_cache_bytes_per_token_per_gpu=fit.kv_cache_bytes_per_token_per_gpu,
        kv_cache_tokens=fit.kv_cache_tokens,
        max_concurrency=fit.max_concurrency,
        max_num_seqs=max_num_seqs,
        max_model_len=context,
        replicas=replicas,
        capacity_replicas=chosen.capacity(),
        enable_expert_parallel=any("expert-parallel" in n for n in fit.notes),
        reason=reason,
        notes=tuple(notes),
        new_node_replicas=max(0, replicas - chosen.existing_capacity()),
        node_pools=group.elastic_pools,
        gpu_memory_gib=fit.gpu_memory_gib,
        activation_gib=fit.activation_gib,
        non_torch_gib=fit.non_torch_gib,
        cudagraph_gib=fit.cudagraph_gib,
        speed=speed_at(max_num_seqs),
        knee_concurrency=knee.concurrency or max_num_seqs,
        considered=chosen.considered,
    )


def _slo_note(
    request: PlacementRequest, by_kv: int, seqs: int, met: bool, speed_at: Callable[[int], Speed | None]
) -> str:
    """The note that says which max-num-seqs spec.slo left (``_planned_seqs``: the largest up to what the
    KV cache holds whose predicted latency meets the targets, never below minConcurrency) and why."""
    speed = speed_at(seqs)
    targets = " and ".join(
        f"{name} {value:g} ms"
        for name, value in (("ITL", request.slo_itl_ms), ("TTFT", request.slo_ttft_ms))
        if value
    )
    if speed is None:
        return f"spec.slo: no speed figures for this GPU type; max-num-seqs {by_kv} from the KV cache"
    predicted = f"ITL {1000 * speed.itl_s:.1f} ms, TTFT {1000 * speed.ttft_s:.0f} ms"
    if not met:
        missed = " and ".join(
            f"{name} {value:g} ms"
            for name, value, got in (
                ("ITL", request.slo_itl_ms, speed.itl_s),
                ("TTFT", request.slo_ttft_ms, speed.ttft_s),
            )
            if value and got * 1000 > value
        )
        return (
            f"spec.slo not met: at minConcurrency {seqs} the predicted {predicted} miss {missed}; fix: a GPU "
            "type with more memory bandwidth, quantization fp8, or a larger gpu.tensorParallelSize"
        )
    return (
        f"spec.slo: max-num-seqs {seqs} (the KV cache holds {by_kv}) keeps the predicted {predicted} "
        f"within {targets}"
    )


def _spread_replicas(
    request: PlacementRequest,
    base: ResolvedModel,
    chosen: list[_Chosen],
    context: int,
    details: list[str],
    uncertain: list[str],
) -> tuple[list[Variant], int]:
    """Fill the preferred variant up to its free capacity, then the next; the variants (those left
    without replicas kept as ready alternatives) and the replicas none can host."""
    variants: list[Variant] = []
    remaining = request.replicas
    for item in chosen:
        assert item.pick.fit is not None
        take = min(remaining, item.capacity())
        remaining -= take
        reason, notes = _variant_reason(request, base, item, context)
        uncertain.extend(item.pick.fit.uncertain)
        variant = _variant(request, base, item, context, take, reason, notes)
        variants.append(variant)
        new_nodes = variant.new_node_replicas
        pools = ", ".join(item.group.elastic_pools)
        waiting = f" ({new_nodes} wait for new nodes from {pools})" if new_nodes else ""
        details.append(f"{reason} Replicas: {take} of capacity {variant.capacity_replicas}{waiting}.")
    return _with_unique_keys(variants), max(0, remaining)


def _explain_nothing_planned(
    context: int, groups: list[_Group], rejected: list[Rejection], details: list[str]
) -> None:
    """Details for a plan without variants: no GPU nodes, a context no type holds, every rejection."""
    if not groups and not rejected:
        details.append(
            "no schedulable GPU nodes of a known type. fix: add GPU nodes labelled by GPU Feature "
            f"Discovery ({GFD_PRODUCT_LABEL}) of a type gpu.products allows (any catalog type when "
            "it is empty), or a node pool that provides them"
        )
    holds = [r.max_context_length for r in rejected if r.max_context_length is not None]
    if holds and max(holds) < context:
        details.append(
            f"contextLength {context} cannot be held even once by any allowed GPU type. fix: "
            f"contextLength <= {max(holds)}"
        )
    if rejected:
        details.append("not planned: " + "; ".join(f"{r.gpu_product}: {r.reason}" for r in rejected))


def plan_placement(request: PlacementRequest) -> Plan:
    """Choose variants (GPU type, TP, PP, quantization, replicas) for a request; see module docstring.
    A plan without variants carries the cheapest changes that would fit (rule 7)."""
    plan = _plan(request)
    if plan.fits:
        return plan
    allowed = frozenset(_allowed_products(request, group_pools(request.pools)))
    found = all_fixes(request, allowed, lambda r: _plan(r).variants, MAX_PIPELINE_PARALLEL)
    if not found:
        return plan
    rejected = tuple(_with_cheapest_fix(r, found) for r in plan.rejected)
    return replace(plan, fixes=shown_fixes(found), rejected=rejected)


def _with_cheapest_fix(rejection: Rejection, fixes: tuple[Fix, ...]) -> Rejection:
    """A rejected type's reason, ending with the cheapest change that plans on that type."""
    fix = cheapest_on(fixes, rejection.gpu_product)
    if fix is None:
        return rejection
    return replace(
        rejection, reason=f"{rejection.reason}. Cheapest on {rejection.gpu_product}: {fix.short()}"
    )


def _plan(request: PlacementRequest) -> Plan:
    """``plan_placement`` without the search for fixes."""
    base = _resolve(request)  # rule 1
    context = _context_length(request, base)
    _check_pinned(request, base)
    grouped = group_pools(request.pools)  # rule 2
    allowed = _allowed_products(request, grouped)
    details: list[str] = [
        f"model {base.model_id}: {base.architecture.attention} attention, context {context} "
        f"(limit {base.max_context}), minConcurrency {request.min_concurrency:g}",
        request.engine.describe(),
    ]
    rejected: list[Rejection] = []
    groups, order = _filter_by_products(allowed, _group_pools(grouped, details, rejected), details, rejected)
    chosen: list[_Chosen] = []
    for group in groups:  # rules 3 and 4
        shape = _choose_shape(request, base, group, context, details)
        if isinstance(shape, Rejection):
            rejected.append(shape)
        else:
            chosen.append(shape)
    _order_by_preference(chosen, order, request.running_on)  # rule 5
    uncertain: list[str] = list(base.notes)
    variants, shortfall = _spread_replicas(request, base, chosen, context, details, uncertain)
    if variants and shortfall:
        details.append(
            f"shortfall: {shortfall} of {request.replicas} replicas do not fit in the free GPUs "
            "of the allowed types"
        )
    if not variants:
        _explain_nothing_planned(context, groups, rejected, details)
    return Plan(
        fits=bool(variants),
        model_id=base.model_id,
        context_length=context,
        variants=tuple(variants),
        rejected=tuple(rejected),
        details=tuple(details),
        replicas_requested=request.replicas,
        shortfall_replicas=shortfall,
        uncertain=tuple(dict.fromkeys(uncertain)),
        vllm_version=request.engine.version_text,
        license=base.entry.license if base.entry is not None else "",
    )


def _why_not_smaller_or_higher(
    request: PlacementRequest, ev: _Evaluated, tried: list[_Evaluated], context: int
) -> str:
    """What the candidates tried before the pick gave: a smaller TP, a higher precision."""
    assert ev.fit is not None
    cand, fit = ev.candidate, ev.fit
    out = ""
    failed = [t for t in tried if t is not ev]
    smaller = [
        t for t in failed if t.candidate.quantization == cand.quantization and t.candidate.tp < cand.tp
    ]
    if smaller:
        out += f"; {_describe_failure(smaller[-1], context)}"
    higher = [
        t for t in failed if PRECISION_RANK[t.candidate.quantization] < PRECISION_RANK[fit.quantization]
    ]
    if higher and request.quantization == "auto":
        best = _best_failure(higher)
        if best is not None:
            out += f"; higher precision does not fit ({_describe_failure(best, context)})"
    return out


def _pcie_reason(
    request: PlacementRequest,
    base: ResolvedModel,
    group: _Group,
    ev: _Evaluated,
    tried: list[_Evaluated],
    context: int,
) -> str:
    """On GPUs without NVLink: that the pick runs TP > 2 over PCIe, or that a higher precision would
    have needed it."""
    assert ev.fit is not None
    gpu, cand, fit = group.gpu, ev.candidate, ev.fit
    if cand.penalised:
        return f"; TP={cand.tp} over PCIe (no NVLink) is slow, chosen because no shape with TP <= 2 fits"
    if gpu.nvlink or request.quantization != "auto" or PRECISION_RANK[fit.quantization] == 0:
        return ""
    # did a higher precision fit only with TP > 2 over PCIe?
    rank = PRECISION_RANK[fit.quantization]
    if any(t.candidate.penalised and PRECISION_RANK[t.candidate.quantization] < rank for t in tried):
        return ""
    for c in _candidates(request, base, group, False)[0]:
        if c.penalised and PRECISION_RANK[c.quantization] < rank:
            alt = _evaluate(request, base, gpu, c, context)
            if alt.fit is not None and alt.fit.fits:
                return (
                    f"; {c.quantization} would need TP={c.tp} over PCIe, so {fit.quantization} at "
                    f"TP={cand.tp} was preferred (set quantization: {c.quantization} to force it)"
                )
    return ""


def _checkpoint_notes(base: ResolvedModel, ev: _Evaluated) -> list[str]:
    """Which checkpoint the variant serves where it is not the one named, or one it still needs."""
    assert ev.fit is not None
    fit = ev.fit
    notes = []
    if fit.quantization in ("int8", "int4") and ev.model.checkpoint_quantization is None:
        notes.append(
            f"{fit.quantization} needs a pre-quantized (AWQ/GPTQ) checkpoint of {base.name}: "
            "point model.source at one"
        )
    quantized = base.quantized_checkpoint(fit.quantization)
    if quantized is not None and ev.model.model_id == quantized.id:
        layout = quantized.layout
        kept = f", {'/'.join(layout.unquantized)} kept 16-bit" if layout.unquantized else ""
        notes.append(
            f"serves the {layout.method} {layout.precision} checkpoint {quantized.id} "
            f"(group {layout.group_size}{kept}; {quantized.url})"
        )
    elif ev.model.model_id != base.model_id:
        notes.append(f"serves the official FP8 checkpoint {ev.model.model_id}")
    return notes


def _goodput_reason(chosen: _Chosen) -> str:
    """Rule 3's comparison in words: what the chosen shape gives next to the first that fit, or next to
    the best other shape when it is the first."""
    if not chosen.considered:
        return ""
    pick = next(c for c in chosen.considered if c.chosen)
    others = [c for c in chosen.considered if not c.chosen]
    mine = (
        f"{pick.tokens_per_s_per_gpu:.0f} output tokens/s per GPU predicted at {pick.max_num_seqs} sequences"
    )
    if not pick.first_fit:
        base = next(c for c in others if c.first_fit)
        if pick.meets_slo and not base.meets_slo:
            return f"; chosen over {base.shape} (the first shape that fits), which misses spec.slo: {mine}"
        gain = pick.tokens_per_s_per_gpu / max(base.tokens_per_s_per_gpu, 1e-9) - 1
        return (
            f"; chosen over {base.shape} (the first shape that fits) for throughput: {mine}, "
            f"{gain * 100:+.0f} % over its {base.tokens_per_s_per_gpu:.0f}"
        )
    runner = others[0]
    return (
        f"; {mine}; best other shape {runner.shape}: {runner.tokens_per_s_per_gpu:.0f} "
        f"(a shape must gain {GOODPUT_MARGIN * 100:g} % to replace the first that fits)"
    )


def _variant_reason(
    request: PlacementRequest, base: ResolvedModel, chosen: _Chosen, context: int
) -> tuple[str, list[str]]:
    """Why this shape on this group, in one sentence, and the notes that go with it."""
    group, ev, tried = chosen.group, chosen.pick, chosen.tried
    assert ev.fit is not None
    gpu = group.gpu
    fit = ev.fit
    where = f"{_shape(ev.candidate)} on {gpu.name}" + (
        f" ({group.resource_name})" if group.resource_name != GPU_RESOURCE else ""
    )
    reason = (
        f"{where}, {fit.quantization}: {fit.max_concurrency:.2f} concurrent {context}-token sequences "
        f"(>= minConcurrency {request.min_concurrency:g}), {fit.weights_gib_per_gpu:.1f} GiB weights and "
        f"{fit.available_kv_cache_gib_per_gpu:.1f} GiB KV cache per GPU"
    )
    if ev is tried[-1]:  # the first shape that fits: why not a smaller TP or a higher precision
        reason += _why_not_smaller_or_higher(request, ev, tried, context)
        reason += _pcie_reason(request, base, group, ev, tried, context)
    elif ev.candidate.penalised:
        reason += (
            f"; TP={ev.candidate.tp} over PCIe (no NVLink) is slow, chosen because no shape with TP <= 2 fits"
        )
    reason += _goodput_reason(chosen)
    notes: list[str] = [*request.engine.notes, *fit.notes]
    if gpu.memory_source.startswith(NOT_IN_CATALOG):
        notes.append(f"{gpu.name} {gpu.memory_source}")
    fp8 = _fp8_note(gpu, fit.quantization)
    if fp8:
        notes.append(fp8)
        reason += "; FP8 runs as W8A16 (Marlin) here"
    notes.extend(_checkpoint_notes(base, ev))
    return reason + ".", notes


def _with_unique_keys(variants: list[Variant]) -> list[Variant]:
    """Give every variant a key unique in the plan (a GPU type can appear through several groups:
    ``nvidia.com/gpu`` on whole nodes and a per-type resource on mixed machines, or two labellers)."""
    counts: dict[str, int] = {}
    for v in variants:
        counts[v.gpu_product] = counts.get(v.gpu_product, 0) + 1
    out: list[Variant] = []
    used: set[str] = set()
    for v in variants:
        key = v.gpu_product.lower()
        if counts[v.gpu_product] > 1:
            if v.resource_name != GPU_RESOURCE:
                key += "-" + v.resource_name.split("/")[-1]
            elif v.node_selector and GFD_PRODUCT_LABEL not in v.node_selector:
                label = next(iter(v.node_selector))
                key += "-" + label.split("/")[0].split(".")[0]
        base, n = key, 2
        while key in used:
            key, n = f"{base}-{n}", n + 1
        used.add(key)
        out.append(replace(v, key=key))
    return out
