"""The planner's input: :class:`PlacementRequest`, built from a validated GLMDeployment spec.

``placement_request(spec, pools)`` maps the API model (``glm_operator.api.v1alpha1``, which has
checked every value) to a frozen request: the spec is validated once, by the API models, and the
planner reads the result. ``serving.image`` picks the vLLM release whose memory-budget rules apply
(:mod:`glm_operator.planning.releases`). What only the planner can find wrong (a context above the
model's limit, a GPU type nobody has) raises :class:`PlanningInputError` with one line naming the
field and the fix. Pure: no Kubernetes imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec, spec_from_dict
from glm_operator.api.vllm_args import flag_value
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.planning.releases import (
    DEFAULT_ENGINE,
    VllmEngine,
    engine_for_image,
)
from glm_operator.planning.supply.nodes import GpuPool

DEFAULT_CONTEXT_LENGTH = 32768


class PlanningInputError(ValueError):
    """A spec value no cluster could satisfy or that is malformed; the message names field and fix."""


@dataclass(frozen=True)
class PlacementRequest:
    """What to place. ``model`` is a catalog id/alias; ``model_config`` an inline HF config.json.

    ``context_length=None`` means min(32768, the model's limit). ``tensor_parallel_size``,
    ``pipeline_parallel_size``, ``decode_context_parallel_size`` and ``data_parallel_size`` 0 mean "choose".
    ``gpu_products`` is the preference order ([] = any).
    ``engine`` is the vLLM release the pods run (its memory-budget rules). ``running_on``: the GPU
    types the deployment's replicas run on now (with ``gpu_products`` empty they come first).
    """

    model: str = ""
    model_config: Mapping[str, Any] | None = None
    checkpoint_pinned: bool = False  # spec.model.source names the weights: no switch to another checkpoint
    # the Hugging Face repository an hf:// spec.model.source names (lower case, no revision); "" otherwise
    pinned_repo: str = ""
    quantization: str = "auto"
    allowed_quantizations: tuple[str, ...] = ()  # spec.allowedQuantizations: what auto may choose (() = any)
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    min_concurrency: float = 1.0
    guarantee_min_concurrency: bool = False
    gpu_products: tuple[str, ...] = ()
    memory_utilization: float | None = None  # None: the default of ``engine``'s vLLM release
    tensor_parallel_size: int = 0
    pipeline_parallel_size: int = 0
    allow_multi_node: bool = False
    decode_context_parallel_size: int = 0  # 0: choose; 1: off
    data_parallel_size: int = 0  # 0: choose; 1: off
    speculative_mode: str = "Off"  # spec.speculativeDecoding.mode: Off, Auto or On
    speculative_tokens: int = 0  # its numSpeculativeTokens (0: the planner chooses)
    acceptance_rate: float | None = None  # its acceptanceRate (None: the published figure)
    replicas: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    slo_itl_ms: float | None = None  # spec.slo: latency targets max-num-seqs is sized for
    slo_ttft_ms: float | None = None
    pools: tuple[GpuPool, ...] = field(default=())
    engine: VllmEngine = DEFAULT_ENGINE
    running_on: tuple[str, ...] = ()

    @property
    def gpu_memory_utilization(self) -> float:
        """vLLM --gpu-memory-utilization: the spec's, else the release's own default."""
        if self.memory_utilization is not None:
            return self.memory_utilization
        return self.engine.rules.gpu_memory_utilization


def placement_request(
    spec: GLMDeploymentSpec,
    pools: Sequence[GpuPool] = (),
    default_image: str = DEFAULT_VLLM_IMAGE,
    replicas: int | None = None,
) -> PlacementRequest:
    """The planner's request for a validated spec (the API models have checked every value).

    ``replicas`` overrides ``spec.replicas`` (the autoscaler's total); ``default_image`` is the
    operator's vLLM image, used when ``spec.serving.image`` is not set (its release picks the
    memory-budget rules)."""
    config = spec.model.config
    return PlacementRequest(
        model=spec.model.id or "",
        model_config=config.model_dump(exclude_none=True) if config is not None else None,
        checkpoint_pinned=spec.model.source is not None,
        pinned_repo=hf_repo(spec.model.source),
        quantization=spec.quantization,
        allowed_quantizations=tuple(spec.allowed_quantizations or ()),
        kv_cache_dtype=spec.kv_cache_dtype,
        context_length=spec.context_length,
        min_concurrency=float(spec.min_concurrency),
        guarantee_min_concurrency=spec.guarantee_min_concurrency,
        gpu_products=tuple(spec.gpu.products),
        memory_utilization=spec.gpu.memory_utilization,
        tensor_parallel_size=spec.gpu.tensor_parallel_size,
        pipeline_parallel_size=spec.gpu.pipeline_parallel_size,
        allow_multi_node=spec.gpu.allow_multi_node,
        decode_context_parallel_size=spec.gpu.decode_context_parallel_size,
        data_parallel_size=spec.gpu.data_parallel_size,
        speculative_mode=spec.speculative_decoding.mode if spec.speculative_decoding else "Off",
        speculative_tokens=(spec.speculative_decoding.num_speculative_tokens or 0)
        if spec.speculative_decoding
        else 0,
        acceptance_rate=spec.speculative_decoding.acceptance_rate if spec.speculative_decoding else None,
        replicas=spec.replicas if replicas is None else replicas,
        max_num_seqs=spec.serving.max_num_seqs,
        max_num_batched_tokens=_batched_tokens(spec.serving.extra_args),
        slo_itl_ms=spec.slo.itl_milliseconds if spec.slo else None,
        slo_ttft_ms=spec.slo.ttft_milliseconds if spec.slo else None,
        pools=tuple(pools),
        engine=engine_for_image(spec.serving.image, default_image),
    )


def _batched_tokens(extra_args: Sequence[str]) -> int | None:
    """``--max-num-batched-tokens`` from serving.extraArgs: it sizes vLLM's profile run (activation, the
    MoE workspace), so the plan must use what the pods will run with; None (vLLM's default) otherwise."""
    value = flag_value(extra_args, "--max-num-batched-tokens")
    if value is None:
        return None
    try:
        tokens = int(value)
    except ValueError:
        raise PlanningInputError(
            f"spec.serving.extraArgs: --max-num-batched-tokens {value!r} is not a whole number of tokens; "
            "give an integer such as --max-num-batched-tokens=8192"
        ) from None
    if tokens < 1:
        raise PlanningInputError(
            f"spec.serving.extraArgs: --max-num-batched-tokens {tokens} must be at least 1"
        )
    return tokens


def placement_request_from_spec(
    spec: Mapping[str, Any], pools: Sequence[GpuPool] = (), default_image: str = DEFAULT_VLLM_IMAGE
) -> PlacementRequest:
    """``placement_request`` for a spec mapping (a manifest's ``spec``, camelCase), validated by the
    API models first: raises ``pydantic.ValidationError`` naming the field."""
    return placement_request(spec_from_dict(spec), pools, default_image)


def hf_repo(source: str | None) -> str:
    """The repository of an ``hf://owner/name[@revision]`` source, lower case; "" for other sources."""
    if not source or not source.startswith("hf://"):
        return ""
    return source[len("hf://") :].split("@", 1)[0].strip("/").lower()
