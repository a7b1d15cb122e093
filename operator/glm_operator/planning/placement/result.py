"""What the planner answers: the plan, its variants, the GPU types it rejected, the shapes it compared
(pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_operator.planning.placement.fixes import Fix
from glm_operator.planning.speed.performance import (
    Speed,
)


def layout_text(
    tp: int,
    pp: int = 1,
    dcp: int = 1,
    dp: int = 1,
    mtp: int = 0,
    utilization: float | None = None,
    batched_tokens: int | None = None,
) -> str:
    """A serving shape in words: ``TP=8 DCP=8``, ``TP=1 x DP=8 (EP)``, ``TP=4 x PP=2``, ``+ MTP=1``, and
    the engine knobs it needs."""
    text = f"TP={tp}"
    if dp > 1:
        text += f" x DP={dp} (EP)"
    if dcp > 1:
        text += f" DCP={dcp}"
    if pp > 1:
        text += f" x PP={pp}"
    if mtp:
        text += f" + MTP={mtp}"
    if utilization is not None:
        text += f" at utilization {utilization:g}"
    if batched_tokens is not None:
        text += f" with {batched_tokens} batched tokens"
    return text


@dataclass(frozen=True)
class Considered:
    """A shape that fits, compared for goodput: its max-num-seqs and predicted speed there."""

    quantization: str
    tensor_parallel_size: int
    max_num_seqs: int
    speed: Speed | None
    meets_slo: bool
    chosen: bool = False
    first_fit: bool = False  # the simplest shape that fits (what a pure fit check picks)
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_size: int = 1
    speculative_tokens: int = 0
    gpu_memory_utilization: float | None = None  # the knob, where it raised vLLM's default
    max_num_batched_tokens: int | None = None  # the knob, where it lowered vLLM's default
    max_concurrency: float = 0.0  # full-context sequences one replica holds
    lost: str = ""  # why it is not the shape served

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.speed.output_tokens_per_s_per_gpu if self.speed else 0.0

    @property
    def shape(self) -> str:
        layout = layout_text(
            self.tensor_parallel_size,
            self.pipeline_parallel_size,
            self.decode_context_parallel_size,
            self.data_parallel_size,
            self.speculative_tokens,
            self.gpu_memory_utilization,
            self.max_num_batched_tokens,
        )
        return f"{self.quantization} {layout}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "decode_context_parallel_size": self.decode_context_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "speculative_tokens": self.speculative_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpus": self.gpus,
            "max_concurrency": round(self.max_concurrency, 2),
            "max_num_seqs": self.max_num_seqs,
            "predicted": self.speed.to_dict() if self.speed else None,
            "meets_slo": self.meets_slo,
            "chosen": self.chosen,
            "first_fit": self.first_fit,
            "lost": self.lost,
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
    node_pools: tuple[str, ...] = ()  # the autoscaler pools (supply.pools) this variant can grow into
    # The memory budget of one GPU (the limiting pipeline stage), GiB: the GPU's memory, and what
    # vLLM takes out of gpu_memory_utilization of it before the KV cache (CUDA graphs: only when the
    # release counts them in the budget; otherwise they are captured in the headroom).
    gpu_memory_gib: float = 0.0
    activation_gib: float = 0.0
    non_torch_gib: float = 0.0
    cudagraph_gib: float = 0.0
    # predicted speed of one replica at max_num_seqs concurrent chat-like requests (speed.performance)
    speed: Speed | None = None
    # the predicted knee (speed.performance.modelled_knee), max_num_seqs when not reached: the
    # autoscaler's target of running requests per replica
    knee_concurrency: int = 0
    # the knee of a load test recorded on this shape (speed.measured), 0 when none is used: it replaces
    # the predicted knee as the autoscaler's target (``target_concurrency``)
    measured_knee_concurrency: int = 0
    # the shapes that fit, compared for goodput (``ranking``), the chosen one marked
    considered: tuple[Considered, ...] = ()
    decode_context_parallel_size: int = 1
    data_parallel_size: int = 1  # attention ranks of a replica (max_num_seqs is each rank's)
    speculative_tokens: int = 0  # MTP draft tokens per step
    max_num_batched_tokens: int | None = None  # the knob's token budget; None: vLLM's default

    @property
    def target_concurrency(self) -> int:
        """Running requests the autoscaler aims one replica at: the measured knee, else the predicted
        one, else max-num-seqs."""
        return self.measured_knee_concurrency or self.knee_concurrency or self.max_num_seqs

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
            "measured_knee_concurrency": self.measured_knee_concurrency,
            "considered": [c.to_dict() for c in self.considered],
            "decode_context_parallel_size": self.decode_context_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "speculative_tokens": self.speculative_tokens,
            "max_num_batched_tokens": self.max_num_batched_tokens,
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
    fixes: tuple[Fix, ...] = ()  # when nothing fits: changes that would fit, cheapest first (placement.fixes)
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
