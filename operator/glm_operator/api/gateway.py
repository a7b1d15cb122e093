"""GLMGateway v1alpha1: one OpenAI endpoint for every GLMDeployment of a namespace.

A separate kind rather than a ``spec.gateway`` block on GLMDeployment: one gateway serves all
the models of a namespace (a long-context copy such as ``glm-5.3-flash[1m]`` is a second
GLMDeployment behind the same address), so its settings (API keys, limits, Service) belong to no
single GLMDeployment, and a block repeated on each would have to agree with the others. Creating
a GLMGateway is the opt-in; deleting it removes the proxy and leaves the models running.

The operator renders the gateway's Deployment (HAProxy plus a ``glm-operator gateway sync``
sidecar), Service and RBAC from it. It never reads the API-key Secret: the pod mounts it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from glm_operator.api.safe_text import VISIBLE_WORD_PATTERN, SafeLine
from glm_operator.api.v1alpha1 import (
    API_VERSION,
    DNS_SUBDOMAIN_PATTERN,
    ApiVersion,
    Condition,
    ImageReference,
    _APIModel,
)

GLMGatewayKind = Literal["GLMGateway"]
GATEWAY_KIND: GLMGatewayKind = get_args(GLMGatewayKind)[0]
GATEWAY_LIST_KIND = "GLMGatewayList"
GATEWAY_PLURAL = "glmgateways"
GATEWAY_SINGULAR = "glmgateway"
GATEWAY_SHORT_NAMES = ("glmgw",)
#: Longest GLMGateway name: its children are named ``<name>-gateway`` and must stay ≤ 63.
MAX_GATEWAY_NAME_LENGTH = 50

DEFAULT_PROXY_IMAGE = "docker.io/library/haproxy:2.6"
LoadBalancing = Literal["LeastRequests", "RoundRobin", "PrefixAffinity"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]


class APIKeysSpec(_APIModel):
    """Where the accepted API keys are: a key of a Secret the user owns, mounted into the gateway pod."""

    secret_name: str = Field(
        ...,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "Secret in the gateway's namespace. The operator never reads it; the gateway pod mounts "
            "it, and picks up changes (the proxy reloads gracefully)."
        ),
    )
    key: SafeLine = Field(
        "keys",
        min_length=1,
        max_length=253,
        description=(
            "Key of the Secret holding one '<api-key> <client-name>' pair per line ('#' starts a "
            "comment). Clients send 'Authorization: Bearer <api-key>'; limits and metrics are per "
            "client name."
        ),
    )


class GatewayLimits(_APIModel):
    """Per-client limits (client = the name next to its key); absent: unlimited."""

    requests_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description=(
            "Requests one client may start per minute (sliding window); over it: 429 with Retry-After."
        ),
    )
    concurrent_requests: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Requests one client may have in flight at once; over it: 429 with Retry-After: 1.",
    )
    tokens_per_minute: int | None = Field(
        None,
        ge=1,
        le=1_000_000_000,
        description=(
            "Tokens (prompt + completion, from the usage of its answers) one client may use per minute "
            "(sliding window, over every gateway replica); at or over it: 429 rate_limit_exceeded with "
            "Retry-After, before the request reaches a model. An answer's tokens count when it ends, so "
            "requests in flight can overshoot the limit. A stream without stream_options.include_usage "
            "is estimated: one token per streamed chunk plus its request body's bytes / 4 for the prompt."
        ),
    )


class GatewayServiceSpec(_APIModel):
    """The Service in front of the gateway pods."""

    type: ServiceType = Field(
        "ClusterIP",
        description=(
            "ClusterIP (put an Ingress or a Gateway API HTTPRoute in front), NodePort or LoadBalancer."
        ),
    )
    port: int = Field(80, ge=1, le=65535, description="Port of the OpenAI endpoint on the Service.")
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations of the Service (for example for a cloud load balancer).",
    )


#: A client name from the keys file (the second word of a line): what limits and metrics are kept by.
CLIENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: A served model name in an allow-list: one word of visible characters (the proxy's map files are
#: whitespace-separated; the shared rule against hidden characters, as a pattern: see
#: glm_operator.api.safe_text.VISIBLE_WORD_PATTERN).
ServedName = Annotated[str, Field(min_length=1, max_length=256, pattern=VISIBLE_WORD_PATTERN)]


class GatewayClient(_APIModel):
    """Settings of one client (the name next to its keys in the keys Secret)."""

    name: str = Field(
        ...,
        min_length=1,
        max_length=128,
        pattern=CLIENT_NAME_PATTERN,
        description="Client name, as in the keys Secret.",
    )
    models: list[ServedName] = Field(
        ...,
        min_length=1,
        max_length=256,
        description=(
            "Served model names this client may call (allow-list); a request for another model answers 403 "
            "model_not_allowed. Clients not listed in spec.clients may call every model."
        ),
    )


class ScaleFromZeroSpec(_APIModel):
    """How requests for a model without a ready replica (scaled to zero, or starting) are held."""

    max_queued_requests: int = Field(
        100,
        ge=0,
        le=100_000,
        description=(
            "Requests held per model on each gateway replica while no replica of it is ready; more answer "
            "503 with Retry-After at once. 0: never hold (503 at once)."
        ),
    )
    max_wait_seconds: int = Field(
        300,
        ge=1,
        le=3600,
        description="Longest a request is held for the first ready replica; then 503 with Retry-After.",
    )
    retry_after_seconds: int = Field(
        30,
        ge=1,
        le=3600,
        description=(
            "Retry-After of those 503 answers (queue full, wait expired) for a model whose wake-up was never "
            "measured; once it was, the Retry-After is its expected wake-up (status.autoscaler.wakeUpSeconds "
            "of the GLMDeployment serving it, rounded up)."
        ),
    )


class GLMGatewaySpec(_APIModel):
    """How the namespace's OpenAI endpoint is run."""

    api_keys: APIKeysSpec = Field(..., description="API keys clients must send (401 otherwise).")
    limits: GatewayLimits = Field(
        default_factory=GatewayLimits,
        json_schema_extra={"default": {}},
        description="Per-client request-rate, concurrency and tokens-per-minute limits.",
    )
    load_balancing: LoadBalancing = Field(
        "LeastRequests",
        description=(
            "LeastRequests: each request goes to the pod with the fewest outstanding requests per "
            "unit of planned capacity (one request may take 0.5 s and the next 2 minutes). "
            "RoundRobin: in turn, by capacity weight. PrefixAffinity: cache-aware; each request goes "
            "to the pod that already served the longest run of its prompt's leading blocks (vLLM's "
            "16-token blocks of the chat-templated prompt, or of a completion's prompt tokens), so "
            "vLLM's prefix cache holds them, while that pod's load stays within 1.5x its share; ties "
            "and new prompts go to the fewest outstanding requests per unit of capacity."
        ),
    )
    read_timeout_seconds: int = Field(
        600,
        ge=1,
        le=86400,
        description="Longest wait for the model's answer (or between two streamed chunks).",
    )
    connect_timeout_seconds: int = Field(5, ge=1, le=300, description="Longest wait to connect to a pod.")
    max_body_bytes: int = Field(
        20 * 1024 * 1024, ge=1024, le=1024**3, description="Largest request body; larger ones get 413."
    )
    max_pods_per_model: int = Field(
        64,
        ge=1,
        le=1024,
        description="Pods of one served model the proxy can route to at once (server slots per backend).",
    )
    replicas: int = Field(2, ge=1, le=100, description="Gateway pods.")
    image: ImageReference = Field(DEFAULT_PROXY_IMAGE, description="HAProxy image (2.6 or newer).")
    service: GatewayServiceSpec = Field(
        default_factory=GatewayServiceSpec,
        json_schema_extra={"default": {}},
        description="The Service clients (or an Ingress/HTTPRoute) connect to.",
    )
    scale_from_zero: ScaleFromZeroSpec = Field(
        default_factory=ScaleFromZeroSpec,
        json_schema_extra={"default": {}},
        description=(
            "Requests for a model without a ready replica are held (bounded queue, bounded wait) while "
            "the operator wakes it (autoscaling.minReplicas: 0)."
        ),
    )
    clients: list[GatewayClient] = Field(
        default_factory=list,
        max_length=1000,
        description="Per-client settings (model allow-lists), by the client names of the keys Secret.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class WakeRequest(_APIModel):
    """A model a gateway pod got a request for while no replica of it was ready."""

    model: str = Field(..., min_length=1, max_length=256, description="Served model name.")
    requested_at: str = Field(
        ..., json_schema_extra={"format": "date-time"}, description="When the pod last saw such a request."
    )


class GLMGatewayStatus(_APIModel):
    """Observed state, written by the operator (``glm_operator.gateway.status``), but ``wake``."""

    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation of the spec the gateway objects were rendered from."
    )
    service: str | None = Field(None, description="Name of the gateway's Service.")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description=(
            "Ready (a gateway pod serves), KeysLoaded (the API-key Secret is mounted and loaded), "
            "RoutesResolved (some GLMDeployment of the namespace serves a model); a reason that is not "
            "True comes with a message naming the field and the fix."
        ),
    )
    replicas: int | None = Field(None, ge=0, description="Gateway pods wanted.")
    ready_replicas: int | None = Field(None, ge=0, description="Gateway pods ready.")
    models: list[str] = Field(
        default_factory=list,
        max_length=10_000,
        description="Served model names routed (from the GLMDeployments of the namespace).",
    )
    model_count: int | None = Field(None, ge=0, description="len(models), for kubectl get.")
    wake: list[WakeRequest] = Field(
        default_factory=list,
        max_length=1000,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["model"]},
        description=(
            "Written by the gateway pods' sync sidecars (server-side apply): models requested while none "
            "of their replicas was ready; the operator wakes those at zero replicas "
            "(autoscaling.minReplicas: 0) at once."
        ),
    )


class GLMGateway(_APIModel):
    """One OpenAI-compatible endpoint for every GLMDeployment of its namespace."""

    api_version: ApiVersion = Field(API_VERSION, description=API_VERSION)
    kind: GLMGatewayKind = Field(GATEWAY_KIND, description=GATEWAY_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: GLMGatewaySpec = Field(..., description="Desired state.")
    status: GLMGatewayStatus | None = Field(None, description="Observed state, written by the operator.")
