"""Typed, frozen inputs of the renderer: one ``WorkloadContext`` per plan variant.

The controller maps each planned variant (one GPU type with its TP/PP, quantization and replica
count) into a ``WorkloadContext``; everything a template needs is either a field here or derived
from the fields by a property, so templates never compute anything and ``StrictUndefined``
catches a misspelt field.

Rules encoded here (documented because users see their effect in the pod spec):
- ``quantization`` is the value of vLLM's ``--quantization`` flag, not the precision the plan
  chose: the plan's ``Variant.quantization_flag`` (the planner decides it with the checkpoint: an
  already quantized one carries a ``quantization_config`` vLLM detects by itself, so no flag;
  ``fp8`` only for a 16-bit checkpoint quantized at load time).
- ``kv_cache_dtype`` is None for ``auto`` (no flag), else ``--kv-cache-dtype <value>``.
- ``model_source`` decides where the model comes from (see ``resolve_model_location``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION, DEFAULT_SERVING_PORT, HF_CACHE_MOUNT_PATH, KIND
from glm_operator.catalog.gpus import GPU_RESOURCE
from glm_operator.render import names

MODELS_MOUNT_PATH = "/models"


@dataclass(frozen=True)
class OwnerReference:
    """The GLMDeployment that owns every child object (garbage collection, ``kubectl tree``)."""

    name: str
    uid: str
    api_version: str = API_VERSION
    kind: str = KIND


@dataclass(frozen=True)
class SecretKeyRef:
    """A key of a Secret in the GLMDeployment's namespace."""

    name: str
    key: str


@dataclass(frozen=True)
class NodeSelectorRequirement:
    """One ``matchExpressions`` entry, e.g. ``nvidia.com/gpu.product In [NVIDIA-H100-80GB-HBM3]``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """Requirements that must all hold (terms of a required node affinity are ORed)."""

    match_expressions: tuple[NodeSelectorRequirement, ...]


@dataclass(frozen=True)
class ModelLocation:
    """How the vLLM container reaches the weights."""

    model_arg: str  # the positional argument of ``vllm serve``
    pvc_claim: str | None = None  # mounted read-only at /models when set
    load_format: str | None = None  # ``--load-format`` when not the default
    revision: str | None = None  # ``--revision``: a branch, tag or commit of the Hub repository


def resolve_model_location(model_source: str, model_id: str) -> ModelLocation:
    """Map ``spec.model.source`` to what vLLM gets.

    - ``hf://<repo id>[@<revision>]`` (default ``hf://<model id>``): vLLM downloads from the Hub
      into HF_HOME; ``@<revision>`` becomes ``--revision`` (the positional stays the repo id);
    - ``pvc://<claim>/<path>``: the claim is mounted read-only at ``/models``, vLLM serves
      ``/models/<path>``;
    - ``s3://<bucket>/<path>``: vLLM streams the safetensors from S3 with the Run:ai Model Streamer
      (``--load-format runai_streamer``, bundled with the vllm-openai image); credentials come
      from the user's ``serving.env`` or the service account (IRSA).
    """
    source = model_source or f"hf://{model_id}"
    scheme, sep, rest = source.partition("://")
    if not sep or not rest.strip("/"):
        raise ValueError(f"model source {source!r} is not <scheme>://<location>")
    if scheme == "hf":
        repo, at, revision = rest.partition("@")
        return ModelLocation(model_arg=repo.strip("/"), revision=revision if at and revision else None)
    if scheme == "pvc":
        claim, _, path = rest.partition("/")
        path = path.strip("/")
        model_path = f"{MODELS_MOUNT_PATH}/{path}" if path else MODELS_MOUNT_PATH
        return ModelLocation(model_arg=model_path, pvc_claim=claim)
    if scheme == "s3":
        return ModelLocation(model_arg=source, load_format="runai_streamer")
    raise ValueError(f"model source scheme {scheme!r} is not supported (hf://, pvc://, s3://)")


@dataclass(frozen=True)
class WorkloadContext:
    """Everything needed to render the workload of one variant of a GLMDeployment.

    A variant with ``nodes_per_replica == 1`` becomes a Deployment, otherwise a LeaderWorkerSet
    whose groups have ``nodes_per_replica`` pods with ``gpus_per_pod`` GPUs each.
    """

    namespace: str
    deployment_name: str  # the GLMDeployment's name
    variant_name: str  # short slug of the GPU type, e.g. "h100-80gb"
    owner: OwnerReference
    image: str
    model_id: str
    served_model_name: str
    gpu_product: str  # catalog/label value of the GPU type, e.g. NVIDIA-H100-80GB-HBM3
    tensor_parallel_size: int
    gpus_per_replica: int
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    replicas: int
    model_source: str = ""  # "" = hf://<model_id>
    pipeline_parallel_size: int = 1
    nodes_per_replica: int = 1
    port: int = DEFAULT_SERVING_PORT
    quantization: str | None = None  # value of --quantization (the plan's Variant.quantization_flag)
    kv_cache_dtype: str | None = None  # None = auto
    dtype: str | None = None  # --dtype, e.g. "float16" on GPUs without bf16
    extra_args: tuple[str, ...] = ()  # appended last, verbatim
    enable_expert_parallel: bool = False  # --enable-expert-parallel (the plan shards MoE experts)
    decode_context_parallel_size: int = 1  # --decode-context-parallel-size
    data_parallel_size: int = 1  # --data-parallel-size: attention ranks of one replica (with expert parallel)
    speculative_config: str | None = None  # --speculative-config JSON (MTP)
    max_num_batched_tokens: int | None = None  # --max-num-batched-tokens where the plan lowers vLLM's default
    trust_remote_code: bool = False  # --trust-remote-code (checkpoints with their own modelling code)
    tool_call_parser: str | None = None  # default --tool-call-parser; extraArgs can override it
    reasoning_parser: str | None = None  # default --reasoning-parser; extraArgs can override it
    env: tuple[Mapping[str, Any], ...] = ()  # Kubernetes EnvVar dicts; override ours by name
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # user requests/limits
    resource_name: str = GPU_RESOURCE  # or a per-type name such as nvidia.com/a100-80gb
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()  # required node affinity; () = none
    tolerations: tuple[Mapping[str, Any], ...] = ()  # user tolerations, after the GPU taint's
    node_selector: Mapping[str, str] = field(default_factory=dict)
    api_key_secret: SecretKeyRef | None = None
    hf_token_secret: SecretKeyRef | None = None  # HF_TOKEN (gated or private Hub repositories)
    model_cache_claim: str | None = None  # PVC mounted at HF_HOME
    model_cache_mount_path: str = HF_CACHE_MOUNT_PATH  # where the claim is mounted; HF_HOME
    model_cache_sub_path: str | None = None  # sub-directory of the claim's volume
    model_cache_read_only: bool = False  # weights already on the claim: mount read-only, no download
    default_cache_size: str | None = None  # no claim: an emptyDir of this size as HF_HOME (None: none)
    default_requests: Mapping[str, str] = field(default_factory=dict)  # used where the user set none
    image_pull_secrets: tuple[str, ...] = ()
    service_account_name: str | None = None
    shm_size: str = "16Gi"
    startup_timeout_seconds: int = 20 * 60  # cold start budget of the startup probe
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels (ours win on conflict)
    annotations: Mapping[str, str] = field(default_factory=dict)  # object annotations, e.g. the plan

    def __post_init__(self) -> None:
        positive = {
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpus_per_replica": self.gpus_per_replica,
            "nodes_per_replica": self.nodes_per_replica,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "decode_context_parallel_size": self.decode_context_parallel_size,
            "data_parallel_size": self.data_parallel_size,
        }
        for field_name, value in positive.items():
            if value < 1:
                raise ValueError(f"{field_name} must be >= 1, got {value}")
        if self.startup_timeout_seconds < 60:
            raise ValueError(f"startup_timeout_seconds must be >= 60, got {self.startup_timeout_seconds}")
        if self.replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {self.replicas}")
        parallel = self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size
        if self.gpus_per_replica != parallel:
            raise ValueError(
                f"gpus_per_replica ({self.gpus_per_replica}) must equal tensor_parallel_size"
                f" x pipeline_parallel_size x data_parallel_size ({self.tensor_parallel_size} x "
                f"{self.pipeline_parallel_size} x {self.data_parallel_size})"
            )
        if self.tensor_parallel_size % self.decode_context_parallel_size:
            raise ValueError(
                f"decode_context_parallel_size ({self.decode_context_parallel_size}) must divide"
                f" tensor_parallel_size ({self.tensor_parallel_size})"
            )
        if self.gpus_per_replica % self.nodes_per_replica:
            raise ValueError(
                f"gpus_per_replica ({self.gpus_per_replica}) must split evenly over"
                f" nodes_per_replica ({self.nodes_per_replica})"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        resolve_model_location(self.model_source, self.model_id)  # validates the source

    @property
    def multi_node(self) -> bool:
        """True when one replica spans several nodes (rendered as a LeaderWorkerSet)."""
        return self.nodes_per_replica > 1

    @property
    def gpus_per_pod(self) -> int:
        """GPUs requested by each pod: all of the replica's GPUs, or one node's share of them."""
        return self.gpus_per_replica // self.nodes_per_replica

    @property
    def model_location(self) -> ModelLocation:
        return resolve_model_location(self.model_source, self.model_id)

    @property
    def workload_name(self) -> str:
        return names.workload_name(self.deployment_name, self.variant_name, multi_node=self.multi_node)

    @cached_property
    def spec_hash(self) -> str:
        """Hash of every field that shapes the pods.

        Excludes ``replicas`` (scaling must not roll pods), ``annotations`` (object metadata only)
        and ``owner`` (object metadata only). The JSON hashed is the one of ``dataclasses.asdict``
        without those three keys (a different text would roll every pod on an operator upgrade),
        built without asdict's deep copy: json.dumps turns nested dataclasses into their fields.
        Cached: the context is frozen, and a LeaderWorkerSet reads it for its leader and workers.
        """
        data = {
            name: getattr(self, name)
            for name in _HASHED_FIELDS
            if _ADDED_FIELDS.get(name, _KEEP) != getattr(self, name)
        }
        return names.compute_spec_hash(data, default=_dataclass_fields)


_HASHED_FIELDS = tuple(
    f.name for f in dataclasses.fields(WorkloadContext) if f.name not in ("replicas", "annotations", "owner")
)
#: fields added after the first release, hashed only where they differ from their default: an operator
#: upgrade must not change the hash of (and so roll) every workload that does not use them
_ADDED_FIELDS: dict[str, object] = {
    "decode_context_parallel_size": 1,
    "data_parallel_size": 1,
    "speculative_config": None,
    "max_num_batched_tokens": None,
}
_KEEP = object()


def _dataclass_fields(value: object) -> dict[str, Any]:
    """json.dumps ``default``: a nested dataclass (SecretKeyRef, NodeSelectorTerm...) as its fields,
    as ``dataclasses.asdict`` has it; anything else JSON cannot encode stays an error."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def speculative_config(tokens: int) -> str | None:
    """vLLM's ``--speculative-config`` for ``tokens`` MTP draft tokens (the model's own next-token
    layers), None for none."""
    if tokens <= 0:
        return None
    return json.dumps({"method": "mtp", "num_speculative_tokens": tokens}, separators=(",", ":"))
