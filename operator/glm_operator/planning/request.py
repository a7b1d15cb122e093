"""The planner's input: :class:`PlacementRequest`, and its construction from a GLMDeployment spec.

``placement_request_from_spec(spec, pools)`` maps the ``spec`` dict (field names as in DESIGN.md:
``model.id``, ``model.config``, ``quantization``, ``kvCacheDtype``, ``contextLength``,
``minConcurrency``, ``gpu.products``, ``gpu.memoryUtilization``, ``gpu.tensorParallelSize``,
``gpu.pipelineParallelSize``, ``gpu.allowMultiNode``, ``replicas``, ``serving.maxNumSeqs``,
``serving.image``: the vLLM release, see :mod:`glm_operator.planning.engine`) to a frozen request,
applying DESIGN's defaults. Bad values raise :class:`PlanningInputError` with one
line naming the field and the fix. Pure: no Kubernetes imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.planning.engine import DEFAULT_ENGINE, VllmEngine, engine_for_image
from glm_operator.planning.nodes import GpuPool

QUANTIZATIONS = ("auto", "bf16", "fp16", "fp8", "int8", "int4")
KV_CACHE_DTYPES = ("auto", "fp8")
DEFAULT_CONTEXT_LENGTH = 32768
DEFAULT_MEMORY_UTILIZATION = 0.9


class PlanningInputError(ValueError):
    """A spec value no cluster could satisfy or that is malformed; the message names field and fix."""


@dataclass(frozen=True)
class PlacementRequest:
    """What to place. ``model`` is a catalog id/alias; ``model_config`` an inline HF config.json.

    ``context_length=None`` means min(32768, the model's limit). ``tensor_parallel_size`` and
    ``pipeline_parallel_size`` 0 mean "choose". ``gpu_products`` is the preference order ([] = any).
    ``engine`` is the vLLM release the pods run (its memory-budget rules).
    """

    model: str = ""
    model_config: Mapping[str, Any] | None = None
    quantization: str = "auto"
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    min_concurrency: float = 1.0
    guarantee_min_concurrency: bool = False
    gpu_products: tuple[str, ...] = ()
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    tensor_parallel_size: int = 0
    pipeline_parallel_size: int = 0
    allow_multi_node: bool = False
    replicas: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    pools: tuple[GpuPool, ...] = field(default=())
    engine: VllmEngine = DEFAULT_ENGINE


def _section(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = spec.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanningInputError(f"spec.{name} must be a mapping")
    return value


def _number(value: Any, name: str, kind: type[int] | type[float], lo: float | None, hi: float | None) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise PlanningInputError(f"{name} must be a number, got {value!r}") from None
        else:
            raise PlanningInputError(f"{name} must be a number, got {value!r}")
    if kind is int and value != int(value):
        raise PlanningInputError(f"{name} must be a whole number, got {value!r}")
    value = kind(value)
    if lo is not None and value < lo:
        raise PlanningInputError(f"{name} must be >= {lo:g}, got {value}")
    if hi is not None and value > hi:
        raise PlanningInputError(f"{name} must be <= {hi:g}, got {value}")
    return value


def placement_request_from_spec(
    spec: Mapping[str, Any], pools: Sequence[GpuPool] = (), default_image: str = DEFAULT_VLLM_IMAGE
) -> PlacementRequest:
    """Map a GLMDeployment ``spec`` dict (validated, dumped with camelCase aliases) to a request;
    ``default_image`` is the operator's vLLM image, used when ``spec.serving.image`` is not set."""
    if not isinstance(spec, Mapping):
        raise PlanningInputError("spec must be a mapping")
    model = _section(spec, "model")
    gpu = _section(spec, "gpu")
    serving = _section(spec, "serving")
    model_id = str(model.get("id") or "")
    config = model.get("config") or None
    if config is not None and not isinstance(config, Mapping):
        raise PlanningInputError("spec.model.config must be the model's config.json as a mapping")
    if not model_id and not config:
        raise PlanningInputError(
            "spec.model.id is required (a catalog id such as zai-org/GLM-4.5-Air) or give spec.model.config"
        )
    quantization = str(spec.get("quantization", "auto")).lower()
    if quantization not in QUANTIZATIONS:
        raise PlanningInputError(f"spec.quantization {quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    kv = str(spec.get("kvCacheDtype", "auto")).lower()
    if kv not in KV_CACHE_DTYPES:
        raise PlanningInputError(f"spec.kvCacheDtype {kv!r}: use one of {', '.join(KV_CACHE_DTYPES)}")
    context = spec.get("contextLength")
    products = gpu.get("products") or []
    if isinstance(products, str) or not isinstance(products, Sequence):
        raise PlanningInputError("spec.gpu.products must be a list of GPU type names")
    max_num_seqs = serving.get("maxNumSeqs")
    image = serving.get("image")
    if image is not None and not isinstance(image, str):
        raise PlanningInputError(f"spec.serving.image {image!r}: give an image reference as a string")
    guarantee = spec.get("guaranteeMinConcurrency", False)
    if not isinstance(guarantee, bool):
        raise PlanningInputError(f"spec.guaranteeMinConcurrency {guarantee!r}: use true or false")
    return PlacementRequest(
        model=model_id,
        model_config=dict(config) if config else None,
        quantization=quantization,
        kv_cache_dtype=kv,
        context_length=None if context is None else _number(context, "spec.contextLength", int, 1, None),
        min_concurrency=_number(spec.get("minConcurrency", 1), "spec.minConcurrency", float, 0, None),
        guarantee_min_concurrency=guarantee,
        gpu_products=tuple(str(p) for p in products),
        memory_utilization=_number(
            gpu.get("memoryUtilization", DEFAULT_MEMORY_UTILIZATION),
            "spec.gpu.memoryUtilization",
            float,
            0.05,
            1.0,
        ),
        tensor_parallel_size=_number(
            gpu.get("tensorParallelSize", 0), "spec.gpu.tensorParallelSize", int, 0, None
        ),
        pipeline_parallel_size=_number(
            gpu.get("pipelineParallelSize", 0), "spec.gpu.pipelineParallelSize", int, 0, None
        ),
        allow_multi_node=bool(gpu.get("allowMultiNode", False)),
        replicas=_number(spec.get("replicas", 1), "spec.replicas", int, 0, None),
        max_num_seqs=None
        if max_num_seqs is None
        else _number(max_num_seqs, "spec.serving.maxNumSeqs", int, 1, None),
        pools=tuple(pools),
        engine=engine_for_image(image, default_image),
    )
