"""GLMDeployment v1alpha1: pydantic models of ``spec`` and ``status``.

These models are the only definition of the API. The CustomResourceDefinition in
``crds/glmdeployments.inference.glm.dev.yaml`` is generated from them (``devtools.crd``),
so every field carries a description (``kubectl explain`` is the manual), its default and its
bounds. Cross-field rules are written twice, on purpose: once as a pydantic validator (so offline
commands such as ``glm-operator plan`` reject the same specs) and once as a CEL rule in
``x-kubernetes-validations`` (so the apiserver rejects them); ``tests/integration/test_api_crd.py``
checks that both reject the same table of bad specs.

Python attributes are snake_case; the wire format (aliases) is camelCase. Both names are accepted
on input (``populate_by_name``); dump with ``by_alias=True, exclude_none=True`` for Kubernetes.
Unknown fields are rejected (``extra="forbid"``); in the CRD they are pruned by the structural
schema and reported as errors by strict field validation (``kubectl apply``'s default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict, JsonValue

from glm_operator.api import kube_validation as kv
from glm_operator.api import vllm_args, vllm_flags
from glm_operator.api.inline_config import MAX_LAYERS, InlineModelConfig
from glm_operator.api.safe_text import CelRule, SafeLine, SafeText

#: ``apiVersion`` of the operator's kinds and ``kind`` of this one, as types: a Literal must spell its
#: value out, so these are the one spelling and the names below derive from them.
ApiVersion = Literal["inference.glm.dev/v1alpha1"]
GLMDeploymentKind = Literal["GLMDeployment"]
API_VERSION: ApiVersion = get_args(ApiVersion)[0]
GROUP, VERSION = API_VERSION.split("/")
KIND: GLMDeploymentKind = get_args(GLMDeploymentKind)[0]
#: Pod label naming the GPU type a pod was planned for; defined here (not in render.names, which
#: builds the label sets) because the planner reads it back from pods and cannot import render.
LABEL_GPU_PRODUCT = f"{GROUP}/gpu-product"
LIST_KIND = "GLMDeploymentList"
PLURAL = "glmdeployments"
SINGULAR = "glmdeployment"
SHORT_NAMES = ("glmd",)
CRD_NAME = f"{PLURAL}.{GROUP}"

Quantization = Literal["auto", "bf16", "fp16", "fp8", "int8", "int4"]
WeightPrecision = Literal["bf16", "fp16", "fp8", "int8", "int4"]
KVCacheDtype = Literal["auto", "fp8"]
ConditionStatus = Literal["True", "False", "Unknown"]

QUANTIZATIONS: tuple[str, ...] = ("auto", "bf16", "fp16", "fp8", "int8", "int4")
ALLOWED_QUANTIZATIONS_MESSAGE = (
    "quantization must be auto or one of allowedQuantizations: add it to allowedQuantizations or set "
    "quantization: auto"
)
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp8")


class Phase(StrEnum):
    """``status.phase``, the summary of the conditions (``planning.diagnosis.conditions`` derives it)."""

    PENDING = "Pending"
    PLANNING = "Planning"
    DEPLOYING = "Deploying"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


PHASES: tuple[str, ...] = tuple(phase.value for phase in Phase)

#: Allowed values of ``spec.gpu.tensorParallelSize``: 0 (let the planner choose) or a power of two.
TENSOR_PARALLEL_SIZES: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32)
MAX_CONTEXT_LENGTH = 4 * 1024 * 1024
#: Longest GLMDeployment name: child objects are named ``<name>-<variant>`` and must stay DNS labels
#: (``render.names.MAX_DNS_LABEL_LENGTH``, 63 characters).
MAX_GLMDEPLOYMENT_NAME_LENGTH = 40
#: Default ``spec.serving.port``: vLLM's OpenAI server port.
DEFAULT_SERVING_PORT = 8000
#: The Hugging Face cache of the vLLM image (HF_HOME): default ``mountPath`` of ``spec.modelCache``
#: and where the default cache volume is mounted.
HF_CACHE_MOUNT_PATH = "/root/.cache/huggingface"
#: Where the operator mounts a ``pvc://`` model source (read-only) and vLLM's shared memory.
MODELS_MOUNT_PATH = "/models"
SHM_MOUNT_PATH = "/dev/shm"
#: Directories of the container's own system that no volume may be mounted at or below: the kernel's
#: (/proc, /sys, /dev: the operator's /dev/shm is there), the image's programs, libraries and
#: configuration, the runtime's sockets. A claim mounted there hides what vLLM needs to start (or,
#: for /dev/shm, collides with the operator's own mount: the apiserver refuses the pod).
SYSTEM_MOUNT_TREES: tuple[str, ...] = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
    "/sys", "/usr", "/var/run", MODELS_MOUNT_PATH,
)  # fmt: skip
#: Directories a claim may be mounted below but not at: mounted over, they hide the image's whole
#: home, optional software or variable data (vLLM's own caches live under /root).
NO_MOUNT_AT: tuple[str, ...] = ("/", "/opt", "/root", "/tmp", "/var")
MOUNT_PATH_ABSOLUTE_MESSAGE = "mountPath must be an absolute path (starting with /)"
MOUNT_PATH_SEGMENTS_MESSAGE = (
    "mountPath must not contain empty ('//'), '.' or '..' segments: write the path as the container sees it"
)
MOUNT_PATH_RESERVED_MESSAGE = (
    f"mountPath must not be {', '.join(NO_MOUNT_AT)}, nor at or below {', '.join(SYSTEM_MOUNT_TREES[:-1])} "
    f"(the container's system directories) or {MODELS_MOUNT_PATH} (where the operator mounts pvc:// "
    f"sources): a claim mounted there hides files vLLM needs to start or collides with the operator's own "
    f"mounts ({SHM_MOUNT_PATH}); mount it on a directory of its own, such as {HF_CACHE_MOUNT_PATH} (the "
    "default) or /data/hf-cache"
)
_PATH_SEGMENT_FAULT = r"//|(^|/)\.\.?(/|$)"


def reserved_mount_path(path: str) -> bool:
    """True when a volume mounted at ``path`` would hide system files or collide with the operator's."""
    path = path[:-1] if len(path) > 1 and path.endswith("/") else path
    return path in NO_MOUNT_AT or any(path == t or path.startswith(t + "/") for t in SYSTEM_MOUNT_TREES)


def check_mount_path(path: str) -> str:
    """``path`` if a claim may be mounted there, else ValueError saying why (the CEL rules' messages)."""
    if not path.startswith("/"):
        raise ValueError(f"{path[:80]!r}: {MOUNT_PATH_ABSOLUTE_MESSAGE}")
    if re.search(_PATH_SEGMENT_FAULT, path):
        raise ValueError(f"{path[:80]!r}: {MOUNT_PATH_SEGMENTS_MESSAGE}")
    if reserved_mount_path(path):
        raise ValueError(f"{path[:80]!r}: {MOUNT_PATH_RESERVED_MESSAGE}")
    return path


_MOUNT_PATH_NORMALISED = "(self.size() > 1 && self.endsWith('/') ? self.substring(0, self.size() - 1) : self)"

MountPath = Annotated[
    SafeLine,
    AfterValidator(check_mount_path),
    CelRule("self.startsWith('/')", MOUNT_PATH_ABSOLUTE_MESSAGE),
    CelRule(f"!self.matches({kv.cel_string(_PATH_SEGMENT_FAULT)})", MOUNT_PATH_SEGMENTS_MESSAGE),
    CelRule(
        f"[{_MOUNT_PATH_NORMALISED}].all(p, !(p in {kv.cel_list(NO_MOUNT_AT)}) && "
        f"!{kv.cel_list(SYSTEM_MOUNT_TREES)}.exists(t, p == t || p.startsWith(t + '/')))",
        MOUNT_PATH_RESERVED_MESSAGE,
    ),
]
"""Where a volume of the user's is mounted in the vLLM container."""

SUB_PATH_MESSAGE = "subPath must be a relative path without '..'"


def _check_sub_path(value: str) -> str:
    if value.startswith("/") or re.search(kv.PARENT_SEGMENT_PATTERN, value):
        raise ValueError(f"{value[:80]!r}: {SUB_PATH_MESSAGE}")
    return value


SubPath = Annotated[
    SafeLine,
    AfterValidator(_check_sub_path),
    CelRule(f"!self.startsWith('/') && {kv.SUB_PATH_NO_PARENT_CEL}", SUB_PATH_MESSAGE),
]
"""A directory inside a volume: relative, without '..'."""

EXTRA_ARGS_STRUCTURE_MESSAGE = (
    "every entry of extraArgs must be a flag or the value of the flag right before it (a flag taking "
    "several values takes the entries up to the next flag), and a flag that needs a value must have one"
)
KNOWN_FLAGS_MESSAGE = (
    f"every flag in extraArgs must be a vllm serve option of vLLM {vllm_flags.VLLM_VERSION} (the default "
    "image's release), spelled out in full; switches take no value; only JSON options take .field"
)

# Regular expressions shared by pydantic and the CRD (Go RE2 and Python re both accept them).
HF_REPO_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"
# A Hub repo name: letters, digits and '_', with single '.' or '-' between them (the Hub refuses
# '..', '--' and a leading or trailing '.' or '-'); a revision: such segments (a leading '-' would
# read as a vLLM flag) separated by '/' (main, v1.0, refs/pr/1, a commit hash); a path inside a
# claim or bucket: segments without whitespace or control characters, no empty segment ('//'), a
# trailing '/' allowed. A '..' segment (path traversal) is refused by a second rule.
_HF_NAME = r"[A-Za-z0-9_]+([.-][A-Za-z0-9_]+)*"
_REVISION_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"
_PATH = r"(/[^\x00-\x20\x7f-\x9f/]+)*/?"
MODEL_SOURCE_PATTERN = (
    rf"^(hf://{_HF_NAME}(/{_HF_NAME})?(@{_REVISION_SEGMENT}(/{_REVISION_SEGMENT})*)?"
    rf"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?{_PATH}"
    rf"|s3://[a-z0-9][a-z0-9.-]{{1,61}}[a-z0-9]{_PATH})$"
)
MODEL_SOURCE_MESSAGE = (
    "source must be hf://<org>/<repo>[@<revision>], pvc://<claim>[/<path>] or s3://<bucket>[/<prefix>]: "
    "repo names of letters, digits and '_' with single '.' or '-' between them, a revision (branch, tag "
    "or commit) of such names separated by '/', paths without whitespace, control characters or empty "
    "segments ('//')"
)
MODEL_SOURCE_PARENT_MESSAGE = (
    "source must not contain a '..' segment (path traversal): give the path inside the claim or bucket"
)
# Brackets allow a long-context copy's name such as glm-5.3-flash[1m]; no spaces (the gateway's
# name -> backend map is whitespace separated).
SERVED_MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/\[\]-]*$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


def _quantity(value: int | str) -> int | str:
    kv.quantity_value(value)
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_quantity),
    Field(json_schema_extra={"pattern": kv.QUANTITY_PATTERN, "maxLength": kv.MAX_QUANTITY_LENGTH}),
]
"""A non-negative Kubernetes resource quantity (``"500m"``, ``"16Gi"``, ``4``): int-or-string on the wire."""


def _cel(rule: str, message: str, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    """One ``x-kubernetes-validations`` entry (a CEL rule evaluated by the apiserver)."""
    return CelRule(rule, message, field_path=field_path, reason=reason).entry()


ImageReference = Annotated[
    str,
    AfterValidator(kv.check_image),
    Field(
        min_length=1,
        max_length=512,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(f"self.matches({kv.cel_string(kv.IMAGE_PATTERN)})", "image " + kv.IMAGE_MESSAGE)
            ]
        },
    ),
]
"""A container image reference the kubelet can pull (``docker.io/vllm/vllm-openai:v0.11.0``)."""

ExtraArg = Annotated[
    SafeText,
    AfterValidator(vllm_args.check_extra_arg),
    AfterValidator(vllm_args.check_not_managed),
    *(CelRule(rule, message) for rule, message in vllm_args.EXTRA_ARG_CEL_RULES),
    CelRule(vllm_args.managed_flag_cel_rule(), vllm_args.MANAGED_FLAG_MESSAGE),
    Field(max_length=1024),
]
"""One vLLM command-line argument: a flag spelled as vLLM spells it, or a value."""

_STRUCTURE_RULE, _STRUCTURE_MESSAGE = vllm_args.structure_cel_rule()
_KNOWN_FLAGS_RULE, _KNOWN_FLAGS_MESSAGE = vllm_args.known_flags_cel_rule()


class _APIModel(BaseModel):
    """Common configuration: camelCase on the wire, snake_case in Python, no unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        protected_namespaces=(),
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys, unset optional fields omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --------------------------------------------------------------------------------------------
# spec
# --------------------------------------------------------------------------------------------


class ModelSpec(_APIModel):
    """Which model to serve: a catalog id (Hugging Face repo id), or an inline config.json."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.id) || has(self.config)",
                    "model.id or model.config is required",
                    reason="FieldValueRequired",
                )
            ]
        }
    )

    id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=HF_REPO_ID_PATTERN,
        description=(
            "Catalog id of the model, the Hugging Face repo id (for example zai-org/GLM-4.5-Air). "
            "Required unless config is given."
        ),
    )
    source: (
        Annotated[
            SafeText,
            CelRule(f"self.matches({kv.cel_string(MODEL_SOURCE_PATTERN)})", MODEL_SOURCE_MESSAGE),
            CelRule(kv.SUB_PATH_NO_PARENT_CEL, MODEL_SOURCE_PARENT_MESSAGE),
        ]
        | None
    ) = Field(
        None,
        max_length=1024,
        description=(
            "Where the weights come from: hf://<org>/<repo>[@<revision>], pvc://<claim>[/<path>] or "
            "s3://<bucket>[/<prefix>]. Default: hf://<id>."
        ),
    )
    served_model_name: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=SERVED_MODEL_NAME_PATTERN,
        description=(
            "Model name clients send in OpenAI API requests (vLLM --served-model-name). Default: the "
            "last path segment of id, lower-cased. Always passed to vLLM explicitly."
        ),
    )
    config: InlineModelConfig | None = Field(
        None,
        description=(
            "Inline Hugging Face config.json for a model that is not in the catalog; the planner reads "
            "the architecture (layers, heads, MLA ranks, experts, max_position_embeddings) from it. "
            f"Stored as given; the keys the planner reads are bounded (at most {MAX_LAYERS} layers)."
        ),
    )

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None) -> str | None:
        if value is not None and re.search(kv.PARENT_SEGMENT_PATTERN, value):
            raise ValueError(f"{value[:80]!r}: {MODEL_SOURCE_PARENT_MESSAGE}")
        if value is not None and not re.fullmatch(MODEL_SOURCE_PATTERN, value):
            raise ValueError(f"{value[:80]!r}: {MODEL_SOURCE_MESSAGE}")
        return value

    @model_validator(mode="after")
    def _id_or_config(self) -> ModelSpec:
        if self.id is None and self.config is None:
            raise ValueError("model.id or model.config is required")
        return self


DCP_DIVIDES_TP_MESSAGE = (
    "decodeContextParallelSize must divide tensorParallelSize (its ranks split the tensor-parallel group); "
    "set tensorParallelSize 0 to let the planner choose it"
)


class GPUSpec(_APIModel):
    """Which GPUs may be used and how one replica is split across them."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    # has() guards: the apiserver also checks the CRD default `gpu: {}` against it.
                    "!has(self.pipelineParallelSize) || self.pipelineParallelSize <= 1 || "
                    "(has(self.allowMultiNode) && self.allowMultiNode)",
                    "pipelineParallelSize > 1 spreads one replica over several nodes and requires "
                    "allowMultiNode: true",
                    field_path=".pipelineParallelSize",
                ),
                _cel(
                    "!has(self.decodeContextParallelSize) || !has(self.tensorParallelSize) || "
                    "self.tensorParallelSize == 0 || self.decodeContextParallelSize == 0 || "
                    "self.tensorParallelSize % self.decodeContextParallelSize == 0",
                    DCP_DIVIDES_TP_MESSAGE,
                    field_path=".decodeContextParallelSize",
                ),
            ]
        }
    )

    products: list[Annotated[SafeLine, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=16,
        description=(
            "Allowed GPU types in order of preference: GPU Feature Discovery product names as in the "
            "catalog (NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-80GB, NVIDIA-L4) or their catalog aliases "
            "(H100, A100-80GB, L4), or the nvidia.com/gpu.product label of GPU nodes the catalog does not "
            "know (planned from their memory and compute-capability labels; such a name must be on a node "
            "in the cluster). A name that is neither gives Planned=False naming this field. Empty: any GPU "
            "type in the cluster."
        ),
    )
    memory_utilization: float | None = Field(
        None,
        ge=0.5,
        le=0.95,
        description=(
            "Fraction of each GPU's memory vLLM may use for weights, activations and KV cache "
            "(vLLM --gpu-memory-utilization), 0.5 to 0.95. Default: the default of the vLLM release "
            "the pods run (0.92 from vLLM 0.26, 0.9 before); the plan and the pods always use the same value."
        ),
    )
    tensor_parallel_size: int = Field(
        0,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self in [0, 1, 2, 4, 8, 16, 32]",
                    "tensorParallelSize must be 0 (let the planner choose) or a power of two up to 32",
                )
            ]
        },
        description=(
            "GPUs one vLLM instance shards the model over (vLLM --tensor-parallel-size). 0: the planner "
            "picks the smallest size that fits; a power of two pins it (the plan still checks it fits "
            "and divides the attention heads)."
        ),
    )
    pipeline_parallel_size: int = Field(
        0,
        ge=0,
        le=16,
        description=(
            "Pipeline stages, one per node (vLLM --pipeline-parallel-size). 0: the planner chooses, and "
            "uses more than 1 only when no single node can hold a replica and allowMultiNode is true."
        ),
    )
    allow_multi_node: bool = Field(
        False,
        description=(
            "Allow one replica to span several nodes (pipeline parallelism through a LeaderWorkerSet). "
            "Off: a model that fits on no single node is reported as not plannable."
        ),
    )
    decode_context_parallel_size: int = Field(
        0,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self in [0, 1, 2, 4, 8, 16, 32]",
                    "decodeContextParallelSize must be 0 (let the planner choose), 1 (off) or a power of two "
                    "up to 32",
                )
            ]
        },
        description=(
            "Decode context parallelism (vLLM --decode-context-parallel-size): each of that many ranks of "
            "the tensor-parallel group keeps 1/N of every sequence's KV cache, instead of every rank "
            "keeping all of it (what MLA models do under TP). 0: the planner chooses where vLLM supports "
            "it (MLA models); 1: off; N pins it (it must divide the tensor-parallel size)."
        ),
    )
    data_parallel_size: int = Field(
        0,
        ge=0,
        le=64,
        description=(
            "Data-parallel attention ranks of one replica, each serving its own requests with the MoE "
            "experts spread over all of the replica's GPUs (vLLM --data-parallel-size with "
            "--enable-expert-parallel; MoE models, one node). 0: the planner chooses; 1: off; N pins it."
        ),
    )

    @field_validator("tensor_parallel_size")
    @classmethod
    def _tp_power_of_two(cls, value: int) -> int:
        if value not in TENSOR_PARALLEL_SIZES:
            raise ValueError(
                "tensorParallelSize must be 0 (let the planner choose) or a power of two up to 32"
            )
        return value

    @field_validator("decode_context_parallel_size")
    @classmethod
    def _dcp_power_of_two(cls, value: int) -> int:
        if value not in TENSOR_PARALLEL_SIZES:
            raise ValueError(
                "decodeContextParallelSize must be 0 (let the planner choose), 1 (off) or a power of two up "
                "to 32"
            )
        return value

    @model_validator(mode="after")
    def _dcp_divides_tp(self) -> GPUSpec:
        tp, dcp = self.tensor_parallel_size, self.decode_context_parallel_size
        if tp and dcp and tp % dcp:
            raise ValueError(DCP_DIVIDES_TP_MESSAGE)
        return self

    @model_validator(mode="after")
    def _pp_needs_multi_node(self) -> GPUSpec:
        if self.pipeline_parallel_size > 1 and not self.allow_multi_node:
            raise ValueError(
                "pipelineParallelSize > 1 spreads one replica over several nodes and requires "
                "allowMultiNode: true"
            )
        return self


#: Idle seconds before a model with ``autoscaling.minReplicas: 0`` goes to zero, when not given.
DEFAULT_IDLE_SECONDS = 900


class AutoscalingSpec(_APIModel):
    """Built-in autoscaling from vLLM's request queue (vllm:num_requests_waiting in Prometheus)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.minReplicas <= self.maxReplicas",
                    "minReplicas must be less than or equal to maxReplicas",
                    field_path=".minReplicas",
                ),
                _cel(
                    "!has(self.idleSeconds) || self.minReplicas == 0",
                    "idleSeconds applies to scale to zero only: set minReplicas: 0, or remove idleSeconds",
                    field_path=".idleSeconds",
                ),
            ]
        }
    )

    min_replicas: int = Field(
        1,
        ge=0,
        le=1000,
        description=(
            "Fewest replicas kept running. 0: scale to zero after idleSeconds without a request; a "
            "request meanwhile through a GLMGateway of the namespace wakes the model at once and is held "
            "until the first replica is ready (bounded; past the bound: 503 with Retry-After). Without "
            "a GLMGateway nothing wakes it."
        ),
    )
    max_replicas: int = Field(
        8, ge=1, le=1000, description="Most replicas the autoscaler creates; at least minReplicas."
    )
    target_queue_length: int = Field(
        4,
        ge=1,
        le=10000,
        description=(
            "Waiting requests per replica accepted on top of its target concurrency (the plan's predicted "
            "knee, status.plan.variants[].predicted.kneeConcurrency, else maxNumSeqs): replicas are added "
            "once the running plus waiting requests per replica pass target + targetQueueLength, to "
            "ceil(load / (target + targetQueueLength)), within minReplicas..maxReplicas."
        ),
    )
    scale_up_stabilization_seconds: int = Field(
        0,
        ge=0,
        le=3600,
        description=(
            "Scale up only to the lowest recommendation of this many past seconds (0: scale up at once)."
        ),
    )
    scale_down_stabilization_seconds: int = Field(
        300,
        ge=0,
        le=3600,
        description=(
            "Scale down only to the highest recommendation of this many past seconds, so a short lull "
            "does not drop replicas that take minutes to start again."
        ),
    )
    interval_seconds: int = Field(
        15, ge=5, le=600, description="Seconds between two queue-length samples and scaling decisions."
    )
    idle_seconds: int | None = Field(
        None,
        ge=30,
        le=604800,
        description=(
            "With minReplicas: 0, seconds without a running or waiting request (every sample of vLLM's "
            "queue zero) before the model goes to zero replicas; absent: 900. Only with minReplicas: 0."
        ),
    )

    @model_validator(mode="after")
    def _min_le_max(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be less than or equal to maxReplicas")
        if self.idle_seconds is not None and self.min_replicas != 0:
            raise ValueError(
                "idleSeconds applies to scale to zero only: set minReplicas: 0, or remove idleSeconds"
            )
        return self


class SecretKeyRef(_APIModel):
    """A key of a Secret in the GLMDeployment's namespace."""

    name: str = Field(
        ...,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of the Secret, in the namespace of the GLMDeployment.",
    )
    key: str = Field(
        "api-key",
        min_length=1,
        max_length=253,
        pattern=kv.CONFIG_KEY_PATTERN,
        description="Key in the Secret whose value is used.",
    )


class ConfigMapKeyRef(_APIModel):
    """A key of a ConfigMap in the GLMDeployment's namespace."""

    name: str = Field(
        ..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the ConfigMap."
    )
    key: str = Field(
        ..., min_length=1, max_length=253, pattern=kv.CONFIG_KEY_PATTERN, description="Key in the ConfigMap."
    )
    optional: bool | None = Field(None, description="Start the container even if the key is missing.")


class EnvSecretKeyRef(_APIModel):
    """A key of a Secret, as in a Pod's env[].valueFrom.secretKeyRef."""

    name: str = Field(
        ..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the Secret."
    )
    key: str = Field(
        ..., min_length=1, max_length=253, pattern=kv.CONFIG_KEY_PATTERN, description="Key in the Secret."
    )
    optional: bool | None = Field(None, description="Start the container even if the key is missing.")


class ObjectFieldSelector(_APIModel):
    """A field of the Pod, as in env[].valueFrom.fieldRef."""

    field_path: str = Field(
        ...,
        min_length=1,
        max_length=512,
        pattern=kv.ENV_FIELD_PATH_PATTERN,
        description=(
            "Path of the field: metadata.name, metadata.namespace, metadata.uid, metadata.labels['<key>'], "
            "metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName, status.hostIP(s) or "
            "status.podIP(s)."
        ),
    )
    api_version: str | None = Field(
        None, pattern=r"^v1$", description="Version of the schema fieldPath is written in: v1."
    )


class ResourceFieldSelector(_APIModel):
    """A container resource, as in env[].valueFrom.resourceFieldRef."""

    resource: str = Field(
        ...,
        min_length=1,
        max_length=128,
        pattern=kv.ENV_RESOURCE_PATTERN,
        description=("Resource to select: limits or requests of cpu, memory or ephemeral-storage."),
    )
    container_name: str | None = Field(
        None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Container name; default the vLLM container.",
    )
    divisor: Quantity | None = Field(None, description="Output format of the exposed resource, default 1.")


class EnvVarSource(_APIModel):
    """Where an environment variable's value comes from (exactly one source)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), "
                    "has(self.resourceFieldRef)].filter(x, x).size() == 1",
                    "exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef is required",
                )
            ]
        }
    )

    secret_key_ref: EnvSecretKeyRef | None = Field(None, description="A key of a Secret.")
    config_map_key_ref: ConfigMapKeyRef | None = Field(None, description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = Field(None, description="A field of the Pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(None, description="A container resource.")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        given = [self.secret_key_ref, self.config_map_key_ref, self.field_ref, self.resource_field_ref]
        if sum(source is not None for source in given) != 1:
            raise ValueError(
                "exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef is required"
            )
        return self


class EnvVar(_APIModel):
    """An environment variable of the vLLM container (a subset of the Pod's EnvVar)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!(has(self.value) && has(self.valueFrom))", "value and valueFrom are mutually exclusive"
                )
            ]
        }
    )

    name: str = Field(
        ..., min_length=1, max_length=256, pattern=ENV_NAME_PATTERN, description="Variable name."
    )
    value: SafeText | None = Field(
        None,
        max_length=32768,
        description=(
            "Literal value. Tabs, newlines and carriage returns are allowed; other control characters "
            "(NUL, ESC, DEL, ...) and invisible format characters (bidirectional overrides, zero-width "
            "characters) are not: a NUL cannot be passed to a process at all, the others hide what the "
            "value says."
        ),
    )
    value_from: EnvVarSource | None = Field(
        None, description="Take the value from a Secret, ConfigMap or field."
    )

    @model_validator(mode="after")
    def _value_xor_value_from(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("value and valueFrom are mutually exclusive")
        return self


_RESOURCE_NAMES_MESSAGE = "resource names are cpu, memory or ephemeral-storage (GPUs come from the plan)"


_RESOURCE_RULES: list[JsonValue] = [
    *(
        _cel(
            f"!has(self.{side}) || self.{side}.all(k, k.matches({kv.cel_string(kv.RESOURCE_NAME_PATTERN)}))",
            _RESOURCE_NAMES_MESSAGE,
            field_path=f".{side}",
        )
        for side in ("limits", "requests")
    ),
    *(
        _cel(
            f"!has(self.{side}) || self.{side}.all(k, string(self.{side}[k]).matches("
            f"{kv.cel_string(kv.QUANTITY_PATTERN)}))",
            "quantities must be non-negative, for example 500m, 16 or 64Gi",
            field_path=f".{side}",
        )
        for side in ("limits", "requests")
    ),
    _cel(
        "!has(self.limits) || !has(self.requests) || self.requests.all(k, !(k in self.limits) || "
        "!isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k])) || "
        "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
        "each request must be less than or equal to its limit",
        field_path=".requests",
    ),
]


class ResourceRequirements(_APIModel):
    """CPU and memory of each vLLM container. GPUs are not set here: the plan decides them."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _RESOURCE_RULES})

    limits: dict[str, Quantity] | None = Field(
        None,
        max_length=16,
        description="Most of each resource the container may use, for example memory: 256Gi.",
    )
    requests: dict[str, Quantity] | None = Field(
        None, max_length=16, description="Resources reserved for the container, for example cpu: '16'."
    )

    @model_validator(mode="after")
    def _names_and_request_within_limit(self) -> ResourceRequirements:
        limits, requests = self.limits or {}, self.requests or {}
        for name in [*limits, *requests]:
            if not re.match(kv.RESOURCE_NAME_PATTERN, name):
                raise ValueError(f"{name!r}: {_RESOURCE_NAMES_MESSAGE}")
        for name, request in requests.items():
            if name in limits and kv.quantity_value(request) > kv.quantity_value(limits[name]):
                raise ValueError(
                    f"requests.{name} {request} must be less than or equal to limits.{name} {limits[name]}"
                )
        return self


_TOLERATION_RULES = (
    (
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "tolerationSeconds is only allowed with effect NoExecute",
        ".tolerationSeconds",
    ),
    (
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "value must be empty when operator is Exists",
        ".value",
    ),
    (
        "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "an empty key (every taint) requires operator Exists",
        ".key",
    ),
)


class Toleration(_APIModel):
    """A toleration added to the vLLM pods (the nvidia.com/gpu taint is tolerated already)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(rule, message, field_path=path) for rule, message, path in _TOLERATION_RULES
            ]
        }
    )

    key: str | None = Field(
        None,
        max_length=kv.MAX_QUALIFIED_NAME_LENGTH,
        pattern=kv.QUALIFIED_NAME_PATTERN,
        description="Taint key; empty with Exists: every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (default Equal).")
    value: str | None = Field(
        None,
        max_length=kv.MAX_LABEL_VALUE_LENGTH,
        pattern=kv.LABEL_VALUE_PATTERN,
        description="Taint value for operator Equal.",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; empty: all effects."
    )
    toleration_seconds: int | None = Field(
        None, description="For NoExecute: seconds the pod stays bound after the taint appears."
    )

    @model_validator(mode="after")
    def _pod_rules(self) -> Toleration:
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds is only allowed with effect NoExecute")
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise ValueError("an empty key (every taint) requires operator Exists")
        return self


class ModelCacheSpec(_APIModel):
    """A PersistentVolumeClaim mounted as the Hugging Face cache, so restarts skip the download."""

    claim_name: str = Field(
        ...,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of an existing PersistentVolumeClaim in the namespace of the GLMDeployment.",
    )
    mount_path: MountPath = Field(
        HF_CACHE_MOUNT_PATH,
        min_length=1,
        max_length=1024,
        description=(
            "Where the claim is mounted in the vLLM container; HF_HOME points there: an absolute path, "
            f"not / and not a system directory ({', '.join(SYSTEM_MOUNT_TREES[:-1])} and below; "
            f"{', '.join(NO_MOUNT_AT[1:])} themselves), not {MODELS_MOUNT_PATH} (the operator's mount of "
            "pvc:// sources)."
        ),
    )
    sub_path: SubPath | None = Field(
        None,
        max_length=1024,
        description="Sub-directory of the volume to mount: a relative path without '..'.",
    )

    read_only: bool = Field(
        False, description="Mount read-only (weights must already be on the volume; nothing is downloaded)."
    )


class HFTokenSecretRef(SecretKeyRef):
    """A key of a Secret holding a Hugging Face access token."""

    key: str = Field(
        "token",
        min_length=1,
        max_length=253,
        pattern=kv.CONFIG_KEY_PATTERN,
        description="Key in the Secret holding the token.",
    )


class ServingSpec(_APIModel):
    """How the vLLM pods are run: image, port, API key, extra arguments and pod settings."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                CelRule(
                    _KNOWN_FLAGS_RULE,
                    KNOWN_FLAGS_MESSAGE,
                    field_path=".extraArgs",
                    message_expression=_KNOWN_FLAGS_MESSAGE,
                ).entry()
            ]
        }
    )

    image: ImageReference | None = Field(
        None,
        description=(
            "vLLM OpenAI-server image. Default: the operator's configured image (Helm value vllm.image)."
        ),
    )
    port: int = Field(
        DEFAULT_SERVING_PORT, ge=1, le=65535, description="Port of the OpenAI-compatible API (vLLM --port)."
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        None,
        description=(
            "Secret key holding the API key clients must send; passed to vLLM as VLLM_API_KEY through "
            "a secretKeyRef, so the operator itself never reads it."
        ),
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=4096,
        description=(
            "Most sequences one replica runs at once (vLLM --max-num-seqs). Default: from the plan. "
            "Must be at least minConcurrency."
        ),
    )
    extra_args: Annotated[
        list[ExtraArg],
        CelRule(_STRUCTURE_RULE, EXTRA_ARGS_STRUCTURE_MESSAGE, message_expression=_STRUCTURE_MESSAGE),
    ] = Field(
        default_factory=list,
        max_length=vllm_args.MAX_EXTRA_ARGS,
        description=(
            "Additional vLLM command-line arguments, appended as given (for example "
            "--enable-prefix-caching, or --max-num-batched-tokens and 8192 as two entries). Read as vLLM's "
            "parser reads them: every entry is a flag or the value of the flag before it (there is no "
            "shell: nothing is expanded). With the default image (or an image tagged with its release, "
            f"vLLM {vllm_flags.VLLM_VERSION}) every flag must be one of that release's vllm serve options, "
            "spelled out in full. Flags the operator derives from the spec are rejected."
        ),
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=128, description="Extra environment variables of the vLLM container."
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="CPU and memory requests and limits of each vLLM container; GPUs come from the plan.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64, description="Extra tolerations for the vLLM pods."
    )
    node_selector: dict[
        str,
        Annotated[str, Field(max_length=kv.MAX_LABEL_VALUE_LENGTH, pattern=kv.LABEL_VALUE_PATTERN)],
    ] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    f"self.all(k, k.size() <= {kv.MAX_QUALIFIED_NAME_LENGTH} && "
                    f"k.matches({kv.cel_string(kv.QUALIFIED_NAME_PATTERN)}))",
                    "nodeSelector keys must be label keys: an optional DNS prefix and '/', then a name of "
                    "letters, digits, '-', '_' or '.'",
                )
            ]
        },
        description="Extra node labels the vLLM pods require, on top of the GPU-type affinity from the plan.",
    )
    model_cache: ModelCacheSpec | None = Field(
        None,
        description=(
            "PersistentVolumeClaim used as the model cache (HF_HOME). Absent, for hf:// sources: an "
            "emptyDir sized to the checkpoint (with a matching ephemeral-storage request), so a container "
            "restart does not download again."
        ),
    )
    hf_token_secret_ref: HFTokenSecretRef | None = Field(
        None,
        description=(
            "Secret key holding a Hugging Face token (gated or private repositories); passed to vLLM as "
            "HF_TOKEN through a secretKeyRef."
        ),
    )
    service_account_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "Service account of the vLLM pods, for example one bound to a cloud role (IRSA, Workload "
            "Identity) that can read an s3:// source. Default: the namespace's default account."
        ),
    )
    image_pull_secrets: list[
        Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    ] = Field(
        default_factory=list,
        max_length=16,
        description="Names of Secrets used to pull the vLLM image from a private registry.",
    )
    startup_timeout_seconds: int | None = Field(
        None,
        ge=60,
        le=86400,
        description=(
            "Seconds a vLLM pod may take from container start to a healthy server (download, load, "
            "compilation) before the kubelet restarts it. Default: 10 minutes plus 10 seconds per GiB of "
            "weights the pod loads (a download at about 100 MiB/s), at least 20 minutes."
        ),
    )

    @field_validator("node_selector")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            kv.check_qualified_name(key, "nodeSelector key")
        return value

    @field_validator("extra_args")
    @classmethod
    def _read_as_vllm_reads_them(cls, value: list[str], info: ValidationInfo) -> list[str]:
        problem = vllm_args.structure_error(value)
        if problem is None and vllm_args.checks_known_flags(info.data.get("image")):
            problem = vllm_args.first_unknown_flag(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class SpeculativeDecodingSpec(_APIModel):
    """Multi-token-prediction (MTP) speculative decoding with the model's own next-token layers."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.numSpeculativeTokens) || self.mode == 'On'",
                    "numSpeculativeTokens pins the draft length and needs mode: On",
                    field_path=".numSpeculativeTokens",
                )
            ]
        }
    )

    mode: Literal["Auto", "On", "Off"] = Field(
        "Off",
        description=(
            "Off: no speculative decoding. Auto: the planner serves MTP where the performance model "
            "predicts more output tokens per second per GPU at the plan's concurrency. On: always (the "
            "model must have MTP layers, num_nextn_predict_layers > 0)."
        ),
    )
    num_speculative_tokens: int | None = Field(
        None,
        ge=1,
        le=8,
        description=(
            "Draft tokens per step (vLLM --speculative-config num_speculative_tokens) with mode: On. "
            "Absent: the planner chooses."
        ),
    )
    acceptance_rate: float | None = Field(
        None,
        gt=0,
        lt=1,
        description=(
            "The chance a draft token is accepted when the drafts before it were: with one draft token, "
            "vLLM's 'Avg Draft acceptance rate' (vllm:spec_decode_num_accepted_tokens / "
            "vllm:spec_decode_num_draft_tokens). The planner takes it as the same at every position "
            "(position i accepted with rate^i). Absent: the published figures for the model family."
        ),
    )

    @model_validator(mode="after")
    def _tokens_need_on(self) -> SpeculativeDecodingSpec:
        if self.num_speculative_tokens is not None and self.mode != "On":
            raise ValueError("numSpeculativeTokens pins the draft length and needs mode: On")
        return self


#: The Gateway API Inference Extension's endpoint picker: upstream's image of the release whose
#: InferencePool CRD and picker the tests build from tools/inference-extension/go.mod (the same
#: version; tests/unit/test_inference_pool.py holds them together). v1.5.0 is the last release of
#: the extension with the full picker (later ones moved it to llm-d).
DEFAULT_EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"


class EndpointPickerSpec(_APIModel):
    """The endpoint picker (EPP) the operator runs for the pool: one replica of upstream's image."""

    image: ImageReference = Field(
        DEFAULT_EPP_IMAGE,
        description=(
            "Endpoint picker image (the Gateway API Inference Extension's cmd/epp, v1.x, serving the "
            "inference.networking.k8s.io/v1 InferencePool). Pinned by default; set a mirror here."
        ),
    )
    failure_mode: Literal["FailClose", "FailOpen"] = Field(
        "FailClose",
        description=(
            "What the gateway does when the picker does not answer: FailClose refuses the request, "
            "FailOpen sends it to a pod of the pool the gateway picks itself."
        ),
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="CPU and memory of the picker (default: requests of 200m CPU and 256Mi memory).",
    )


class InferencePoolSpec(_APIModel):
    """An InferencePool (inference.networking.k8s.io/v1) over this GLMDeployment's vLLM pods, with
    the endpoint picker it names, for gateways that implement the Gateway API Inference Extension
    (Envoy Gateway, kgateway, Istio, GKE): an HTTPRoute's backendRef names the pool."""

    endpoint_picker: EndpointPickerSpec = Field(
        default_factory=EndpointPickerSpec,
        json_schema_extra={"default": {}},
        description="The endpoint picker's image, failure mode and resources.",
    )


class ServiceLevelObjective(_APIModel):
    """Latency targets the planner sizes max-num-seqs for (planning/speed/performance.py predicts them)."""

    itl_milliseconds: float | None = Field(
        None, gt=0, le=10000, description="Inter-token latency target (a decode step), milliseconds."
    )
    ttft_milliseconds: float | None = Field(
        None, gt=0, le=600000, description="Time-to-first-token target, milliseconds."
    )


class GLMDeploymentSpec(_APIModel):
    """Desired state: which GLM model to serve, at what precision and context, on which GPUs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.serving) || !has(self.serving.maxNumSeqs) || "
                    "self.serving.maxNumSeqs >= self.minConcurrency",
                    "serving.maxNumSeqs must be at least minConcurrency",
                    field_path=".serving.maxNumSeqs",
                ),
                _cel(
                    "!has(self.allowedQuantizations) || !has(self.quantization) || "
                    "self.quantization == 'auto' || self.quantization in self.allowedQuantizations",
                    ALLOWED_QUANTIZATIONS_MESSAGE,
                    field_path=".allowedQuantizations",
                ),
            ]
        }
    )

    model: ModelSpec = Field(..., description="The model to serve.")
    quantization: Quantization = Field(
        "auto",
        description=(
            "Weight precision: auto, bf16, fp16, fp8, int8 or int4. auto serves bf16 or fp8, whichever "
            "the performance model predicts more output tokens/s per GPU for (fp8 only on GPUs with FP8 "
            "tensor cores, and only when it wins by 5 % or more); int8/int4 only when neither fits. fp8 "
            "runs natively (W8A8) on compute capability 8.9 or newer."
        ),
    )
    allowed_quantizations: list[WeightPrecision] | None = Field(
        None,
        min_length=1,
        max_length=5,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description=(
            "The weight precisions quantization: auto may choose (a quality floor), e.g. [bf16] to never "
            "serve fp8. Absent: any. A pinned quantization must be in the list."
        ),
    )
    kv_cache_dtype: KVCacheDtype = Field(
        "auto",
        description=(
            "KV cache precision (vLLM --kv-cache-dtype): auto (the model dtype) or fp8 (half the memory)."
        ),
    )
    context_length: int = Field(
        32768,
        ge=256,
        le=MAX_CONTEXT_LENGTH,
        description=(
            "Longest sequence, prompt plus output, in tokens (vLLM --max-model-len). Checked against the "
            "model's max_position_embeddings by the planner."
        ),
    )
    min_concurrency: int = Field(
        1,
        ge=1,
        le=4096,
        description=(
            "Full-context sequences one replica must hold in its KV cache at once; a GPU configuration "
            "fits only if it reaches this."
        ),
    )
    guarantee_min_concurrency: bool = Field(
        False,
        description=(
            "Plan a safety margin for the memory model's error: a GPU configuration then fits only if its "
            "predicted concurrency minus the model's stated KV-token error (10 %) still reaches "
            "minConcurrency, so the next larger configuration is chosen when the prediction is close. "
            "Without it such plans are kept and marked uncertain in status."
        ),
    )
    gpu: GPUSpec = Field(
        default_factory=GPUSpec,
        json_schema_extra={"default": {}},
        description="GPU types, memory utilisation and parallelism.",
    )
    speculative_decoding: SpeculativeDecodingSpec | None = Field(
        None,
        description="MTP speculative decoding (vLLM --speculative-config). Absent: off.",
    )
    slo: ServiceLevelObjective | None = Field(
        None,
        description=(
            "Latency targets per replica. The planner lowers max-num-seqs (never below minConcurrency) "
            "until the predicted ITL and TTFT of chat-like requests (512 prompt, 128 output tokens) at "
            "that concurrency meet them, and says in status.plan when even minConcurrency does not. "
            "Ignored where serving.maxNumSeqs is set."
        ),
    )
    replicas: int = Field(
        1,
        ge=0,
        le=1000,
        description=(
            "Number of vLLM replicas when autoscaling is not set; the target of kubectl scale, HPA and "
            "KEDA through the scale subresource. With autoscaling set it is only the starting point "
            "(clamped to minReplicas..maxReplicas) and the autoscaler decides status.desiredReplicas."
        ),
    )
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Scale replicas from vLLM's queue length. Absent: replicas is fixed."
    )
    serving: ServingSpec = Field(
        default_factory=ServingSpec,
        json_schema_extra={"default": {}},
        description="vLLM image, port, API key, extra arguments and pod settings.",
    )
    inference_pool: InferencePoolSpec | None = Field(
        None,
        description=(
            "Set (even as {}): the operator also renders an InferencePool named like the GLMDeployment "
            "selecting its vLLM pods and port, and the endpoint picker the pool names (Deployment, "
            "Service <name>-epp, ServiceAccount, Role, RoleBinding), all owned by the GLMDeployment; "
            "status.inferencePool says where they stand. Needs the InferencePool CRD "
            "(inference.networking.k8s.io/v1). Absent: none, and those made before are deleted."
        ),
    )

    @model_validator(mode="after")
    def _max_num_seqs_holds_min_concurrency(self) -> GLMDeploymentSpec:
        if self.serving.max_num_seqs is not None and self.serving.max_num_seqs < self.min_concurrency:
            raise ValueError("serving.maxNumSeqs must be at least minConcurrency")
        return self

    @model_validator(mode="after")
    def _pinned_quantization_allowed(self) -> GLMDeploymentSpec:
        allowed = self.allowed_quantizations
        if allowed is not None and self.quantization != "auto" and self.quantization not in allowed:
            raise ValueError(ALLOWED_QUANTIZATIONS_MESSAGE)
        return self

    @property
    def effective_source(self) -> str | None:
        """``model.source``, or ``hf://<model.id>`` when only the id is given."""
        if self.model.source is not None:
            return self.model.source
        return f"hf://{self.model.id}" if self.model.id is not None else None


# --------------------------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------------------------


class Condition(_APIModel):
    """A kstatus-style condition: Planned, Available, Progressing, Degraded, MetricsAvailable."""

    type: str = Field(..., min_length=1, max_length=316, description="Condition type, for example Available.")
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str | None = Field(None, max_length=1024, description="CamelCase reason for the last transition.")
    message: str | None = Field(None, max_length=32768, description="Human-readable details.")
    last_transition_time: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this condition was computed from."
    )


class PlanVariant(_APIModel):
    """One GPU type the model is deployed on, with the configuration the planner chose for it."""

    gpu_product: str = Field(..., description="GPU type (catalog name) of this variant.")
    tensor_parallel_size: int = Field(..., ge=1, description="GPUs per pipeline stage (vLLM TP).")
    pipeline_parallel_size: int = Field(1, ge=1, description="Pipeline stages (nodes) per replica.")
    decode_context_parallel_size: int = Field(
        1, ge=1, description="Decode-context-parallel ranks of the TP group (vLLM DCP): 1/N of the KV each."
    )
    data_parallel_size: int = Field(
        1, ge=1, description="Data-parallel attention ranks of one replica, experts spread over all its GPUs."
    )
    speculative_tokens: int = Field(
        0, ge=0, description="MTP draft tokens per step (0: no speculative decoding)."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="vLLM --max-num-batched-tokens where the plan lowers its default to fit."
    )
    gpus_per_replica: int = Field(..., ge=1, description="GPUs one replica uses: TP x PP x DP.")
    nodes_per_replica: int = Field(1, ge=1, description="Nodes one replica spans.")
    quantization: str = Field(..., description="Weight precision chosen for this variant.")
    kv_cache_dtype: str = Field(..., description="KV cache precision chosen for this variant.")
    weights_gib_per_gpu: float = Field(
        ..., alias="weightsGiBPerGPU", ge=0, description="Model weights per GPU, GiB."
    )
    kv_cache_tokens: int = Field(..., ge=0, description="Tokens the KV cache of one replica holds.")
    max_concurrency: float = Field(
        ..., ge=0, description="Full-context sequences one replica holds: kvCacheTokens / contextLength."
    )
    max_num_seqs: int = Field(..., ge=1, description="vLLM --max-num-seqs of this variant.")
    replicas: int = Field(0, ge=0, description="Replicas placed on this GPU type.")
    new_node_replicas: int = Field(
        0,
        ge=0,
        description="Of replicas, those that wait for nodes a node autoscaler adds (Karpenter NodePool, "
        "declared node group): their pods stay Pending until the node is up.",
    )
    node_pools: list[str] = Field(
        default_factory=list,
        description="Node autoscaler pools this variant can grow into, e.g. 'NodePool gpu-h100'.",
    )
    reason: str | None = Field(None, description="Why this configuration was chosen.")
    checkpoint: str | None = Field(
        None,
        description=(
            "The checkpoint this variant loads (Hugging Face repo id), and the vLLM --quantization it is "
            "loaded with when vLLM quantizes at load time."
        ),
    )
    notes: list[str] = Field(
        default_factory=list,
        description="What to know about this variant: checkpoint caveats, kernels, expert parallelism.",
    )
    predicted: PredictedSpeed | None = Field(
        None,
        description=(
            "Predicted speed of one replica with maxNumSeqs clients sending chat-like requests (512 prompt "
            "tokens, 128 output tokens): a model calibrated on H200 load tests, not a measurement."
        ),
    )
    measured_knee_concurrency: int | None = Field(
        None,
        ge=1,
        description=(
            "The knee of the load test recorded for this shape (glm-operator loadtest --record; plan "
            "speedSource: measured): running requests per replica the autoscaler aims at instead of "
            "predicted.kneeConcurrency. Absent when the modelled knee is used."
        ),
    )
    considered: list[ConsideredShape] = Field(
        default_factory=list,
        description=(
            "The shapes quantization: auto compared by predicted tokens/s per GPU, best first (bf16 and "
            "fp8 on GPUs with FP8 tensor cores; fp8 replaces the first fit only with a 5 % lead). Empty "
            "when there was nothing to compare."
        ),
    )


class ConsideredShape(_APIModel):
    """A shape that fits, compared for goodput: precision, parallel layout, MTP and engine knobs."""

    shape: str | None = Field(
        None, max_length=256, description="The shape in words (fp8 TP=8 DCP=8 + MTP=1)."
    )
    quantization: str = Field(..., description="Weight precision of the shape.")
    tensor_parallel_size: int = Field(..., ge=1, description="Its tensor-parallel size.")
    pipeline_parallel_size: int = Field(1, ge=1, description="Its pipeline stages (nodes).")
    decode_context_parallel_size: int = Field(1, ge=1, description="Its decode-context-parallel size.")
    data_parallel_size: int = Field(
        1, ge=1, description="Its data-parallel attention ranks (expert parallel)."
    )
    speculative_tokens: int = Field(0, ge=0, description="Its MTP draft tokens per step.")
    gpu_memory_utilization: float | None = Field(
        None, description="The raised gpu-memory-utilization it needs (absent: vLLM's default)."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="The lowered max-num-batched-tokens it needs (absent: vLLM's default)."
    )
    gpus: int = Field(1, ge=1, description="GPUs one replica of it uses.")
    max_concurrency: float = Field(0, ge=0, description="Full-context sequences one replica of it holds.")
    max_num_seqs: int = Field(..., ge=1, description="The max-num-seqs it would get (spec.slo included).")
    output_tokens_per_second_per_gpu: float = Field(
        ...,
        alias="outputTokensPerSecondPerGPU",
        ge=0,
        description="Predicted output tokens/s per GPU at that max-num-seqs (chat-like requests).",
    )
    meets_slo: bool = Field(True, alias="meetsSLO", description="Whether the prediction meets spec.slo.")
    first_fit: bool = Field(False, description="The simplest shape that fits (what a fit check alone picks).")
    chosen: bool = Field(False, description="The shape this variant serves.")
    lost: str | None = Field(None, max_length=512, description="Why it is not the shape served.")


class PredictedSpeed(_APIModel):
    """The performance model's prediction for one replica (glm_operator/planning/speed/performance.py)."""

    concurrency: int = Field(..., ge=1, description="Concurrent requests predicted for: maxNumSeqs.")
    input_tokens: int = Field(..., ge=1, description="Prompt tokens per request.")
    output_tokens: int = Field(..., ge=1, description="Output tokens per request.")
    output_tokens_per_second: float = Field(..., ge=0, description="Output tokens/s of one replica.")
    output_tokens_per_second_per_gpu: float = Field(
        ...,
        alias="outputTokensPerSecondPerGPU",
        ge=0,
        description="outputTokensPerSecond / GPUs per replica.",
    )
    itl_milliseconds: float = Field(..., ge=0, description="Inter-token latency (a decode step), ms.")
    ttft_milliseconds: float = Field(..., ge=0, description="Time to the first token, ms.")
    knee_concurrency: int | None = Field(
        None,
        ge=1,
        description=(
            "The predicted knee: the concurrency beyond which doubling raises output tokens/s by < 10 % "
            "while ITL rises > 20 % (the load-test rule); maxNumSeqs when not reached below it; with "
            "spec.slo.ttftMilliseconds at most the concurrency whose predicted TTFT meets it. The "
            "autoscaler aims each replica at this many running requests."
        ),
    )


class RejectedVariant(_APIModel):
    """A GPU type the planner could not use, and why."""

    gpu_product: str = Field(..., description="GPU type (catalog name).")
    reason: str = Field(
        ..., description="Why it does not fit, and the smallest change that would make it fit."
    )


#: Where the plan's knee comes from (``status.plan.speedSource``).
SpeedSource = Literal["measured", "modelled"]


class PlanStatus(_APIModel):
    """The planner's result: one variant per usable GPU type, and the rejected ones."""

    variants: list[PlanVariant] = Field(
        default_factory=list, description="Chosen configurations, preferred first."
    )
    rejected: list[RejectedVariant] = Field(default_factory=list, description="GPU types that were not used.")
    summary: str | None = Field(None, description="One-line summary of the plan.")
    fixes: list[str] = Field(
        default_factory=list,
        description=(
            "When nothing fits: changes that would fit (another GPU type of the cluster in gpu.products, "
            "gpu.allowMultiNode and how many nodes, a lower quantization), each found by planning again "
            "with it, cheapest first (fewest GPUs per replica), with the shape it would get."
        ),
    )
    image: str | None = Field(
        None, description="The vLLM image the plan's workloads run (spec.serving.image, else the operator's)."
    )
    speed_source: SpeedSource | None = Field(
        None,
        description=(
            "Where the knee the autoscaler aims each replica at comes from: 'measured', the load test "
            "recorded in the GLMDeployment's <name>-loadtest ConfigMap (glm-operator loadtest --record) "
            "when it was taken on the shape served now with a comparable workload; else 'modelled', the "
            "performance model's prediction. speedSourceReason says why."
        ),
    )
    speed_source_reason: str | None = Field(
        None,
        max_length=2048,
        description=(
            "Why speedSource is what it is: the recording and its knee, or why the recording was not used "
            "(none, another shape, another workload, no level meeting spec.slo) and what to do."
        ),
    )
    license: str | None = Field(
        None,
        max_length=256,
        description=(
            "The model's licence as the operator's catalog records it ('unverified' when the catalog "
            "could not check it); absent for a model outside the catalog: read its model card."
        ),
    )


class AutoscalerStatus(_APIModel):
    """What the built-in autoscaler saw and decided last."""

    queue_length: float | None = Field(
        None, ge=0, description="Last observed waiting requests, all replicas."
    )
    last_scale_time: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When desiredReplicas last changed."
    )
    reason: str | None = Field(None, description="Why the last decision was taken.")
    cold_start_seconds: float | None = Field(
        None,
        ge=0,
        description=(
            "Median measured cold start of this model's replicas: pod created -> Ready (scheduling, a "
            "node a node autoscaler launched for it, image pull, model load). Kept while at zero replicas."
        ),
    )
    wake_up_seconds: float | None = Field(
        None,
        ge=0,
        description=(
            "With minReplicas: 0, how long a request held at the gateway is expected to wait for the "
            "first Ready replica: the measured cold start plus the autoscaler's reaction. Absent until "
            "one replica has started."
        ),
    )
    wake_up: str | None = Field(
        None,
        description=(
            "With minReplicas: 0: where the first replica goes when the model wakes (free GPUs now, or a "
            "node a node autoscaler must launch first) and what the wake-up time includes."
        ),
    )
    state: str | None = Field(
        None,
        max_length=16384,
        description=(
            "The autoscaler's memory between decisions (recent recommendations and scale events for the "
            "stabilization windows and the per-interval rate limit), as JSON. Kept here so a restarted or "
            "newly elected operator replica continues with the same windows."
        ),
    )


class InferencePoolStatus(_APIModel):
    """The InferencePool of spec.inferencePool and its endpoint picker."""

    name: str | None = Field(None, description="The InferencePool (an HTTPRoute's backendRef names it).")
    endpoint_picker: str | None = Field(
        None, description="The endpoint picker's Service and ext_proc port, as <service>:<port>."
    )
    ready: bool = Field(False, description="The endpoint picker has a ready replica.")
    message: str | None = Field(None, description="What is missing, with the fix.")


class GLMDeploymentStatus(_APIModel):
    """Observed state, written by the operator only."""

    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation of the spec this status describes."
    )
    phase: Phase | None = Field(
        None,
        description="Pending, Planning, Deploying, Ready, Degraded or Failed (summary of the conditions).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Latest observations: Planned, Available, Progressing, Degraded, MetricsAvailable.",
    )
    plan: PlanStatus | None = Field(
        None, description="The configuration per GPU type, and the rejected ones."
    )
    replicas: int | None = Field(None, ge=0, description="Replicas that exist (scale subresource).")
    ready_replicas: int | None = Field(None, ge=0, description="Replicas whose vLLM server is ready.")
    desired_replicas: int | None = Field(
        None, ge=0, description="Replicas wanted now: spec.replicas, or the autoscaler's decision."
    )
    selector: str | None = Field(
        None, description="Label selector of the vLLM pods, as a string (scale subresource, HPA)."
    )
    model: str | None = Field(None, description="Served model name passed to vLLM.")
    gpu: str | None = Field(
        None, description="GPU summary for kubectl get, for example '2x H100-80GB, 1x A100-80GB'."
    )
    tensor_parallel_size: str | None = Field(
        None, description="Tensor-parallel size per variant for kubectl get, for example '4' or '4,8'."
    )
    quantization: str | None = Field(
        None, description="Chosen weight precision per variant, for example 'fp8'."
    )
    autoscaler: AutoscalerStatus | None = Field(
        None, description="Last observation and decision of the autoscaler."
    )
    inference_pool: InferencePoolStatus | None = Field(
        None, description="The InferencePool and endpoint picker of spec.inferencePool."
    )


class GLMDeployment(_APIModel):
    """A GLM model served with vLLM on the GPUs that fit it."""

    api_version: ApiVersion = Field(API_VERSION, description=API_VERSION)
    kind: GLMDeploymentKind = Field(KIND, description=KIND)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: GLMDeploymentSpec = Field(..., description="Desired state.")
    status: GLMDeploymentStatus | None = Field(None, description="Observed state, written by the operator.")


def spec_from_dict(data: Mapping[str, Any]) -> GLMDeploymentSpec:
    """Validate a ``spec`` mapping (camelCase as stored, or snake_case) into a :class:`GLMDeploymentSpec`.

    Raises :class:`pydantic.ValidationError` (a ``ValueError``) naming the offending fields.
    """
    return GLMDeploymentSpec.model_validate(dict(data))


def status_from_dict(data: Mapping[str, Any] | None) -> GLMDeploymentStatus:
    """Validate a ``status`` mapping; ``None`` or ``{}`` gives an empty status."""
    return GLMDeploymentStatus.model_validate(dict(data or {}))
