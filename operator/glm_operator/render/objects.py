"""Render the child objects of a GLMDeployment from ``WorkloadContext``s (pure: no I/O).

Python computes every value (argument lists, merged resources, env, volumes, labels) into a
view; the jinja2 templates in ``templates/`` only lay the objects out, one kind per template,
with ``StrictUndefined`` so that a missing value is an error and never an empty string.
The result is parsed back with ``yaml.safe_load``: callers get plain dicts ready for
server-side apply.

Decisions (users see them in the pod spec):
- vLLM arguments are always explicit (``build_vllm_args``); the API key is never an argument:
  vLLM reads ``VLLM_API_KEY``, which comes from a ``secretKeyRef``;
- ``/dev/shm`` is a memory emptyDir when TP > 1 and on every multi-node pod (NCCL and vLLM's
  shared-memory message queues); Docker's 64 MiB default breaks them;
- startup probe on ``/health``: ``startup_timeout_seconds`` (20 minutes by default) before the
  kubelet gives up on a cold start; readiness and liveness on ``/health`` afterwards;
- RollingUpdate with maxSurge 0 / maxUnavailable 1: a rollout never needs spare GPUs (a surge pod
  would stay Pending on a full cluster and stall the rollout); the cost is one replica less during
  the rollout (with one replica, a short outage, as with Recreate);
- ``enableServiceLinks: false``: a Service named ``vllm`` would otherwise inject ``VLLM_PORT=tcp://...``
  into the pod, which vLLM reads as its own setting and fails on.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2
import yaml

from glm_operator.api.v1alpha1 import HF_CACHE_MOUNT_PATH
from glm_operator.api.vllm_args import sets_flag
from glm_operator.catalog.gpus import GPU_RESOURCE
from glm_operator.render import names
from glm_operator.render.context import (
    MODELS_MOUNT_PATH,
    NodeSelectorTerm,
    WorkloadContext,
)

# GPU node pools (GKE, EKS, AKS) taint their nodes with the GPU resource name
GPU_TAINT_TOLERATION: dict[str, str] = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
#: apiVersion of the LeaderWorkerSets rendered for multi-node variants (leaderworkerset.yaml.j2)
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
VLLM_CONTAINER_NAME = "vllm"
WORKER_CONTAINER_NAME = "vllm-worker"
STARTUP_PROBE_PERIOD_SECONDS = 10
# uvicorn lets in-flight (streaming) requests finish on SIGTERM; give them two minutes.
TERMINATION_GRACE_PERIOD_SECONDS = 120
# preStop sleep: time for the endpoints/EndpointSlice update to reach every proxy before SIGTERM.
PRE_STOP_SLEEP_SECONDS = 10
# Slack on top of the startup budget for scheduling and the image pull before the Deployment
# controller reports ProgressDeadlineExceeded.
PROGRESS_DEADLINE_SLACK_SECONDS = 10 * 60

# Multi-node replicas use vLLM's own multi-node mode (no Ray): every pod of a LeaderWorkerSet
# group runs `vllm serve` with the same model arguments plus --nnodes/--node-rank/--master-addr;
# the leader (rank 0) serves the API, the workers run --headless. LWS's pod webhook injects
# LWS_LEADER_ADDRESS (the leader's DNS name) and LWS_WORKER_INDEX (0 for the leader) into every
# container; Kubernetes expands $(VAR) in args from the container's environment.
LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
LWS_WORKER_INDEX = "$(LWS_WORKER_INDEX)"


@dataclass(frozen=True)
class PodView:
    """What ``_pod.yaml.j2`` needs to lay out one pod spec."""

    container_name: str
    image: str
    command: list[str]
    args: list[str]
    serves_http: bool
    port: int
    env: list[dict[str, Any]]
    resources: dict[str, dict[str, str]]
    volume_mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    tolerations: list[dict[str, Any]]
    affinity: dict[str, Any] | None
    node_selector: dict[str, str]
    image_pull_secrets: list[dict[str, str]]
    service_account_name: str | None
    termination_grace_period_seconds: int
    startup_period_seconds: int
    startup_failure_threshold: int
    pre_stop_sleep_seconds: int = 0


# Characters YAML does not accept raw in a double-quoted scalar (outside its printable set), plus
# NEL and the Unicode line/paragraph separators, which it folds as line breaks: escaped as \uXXXX.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
# json.dumps(value, ensure_ascii=False) builds a JSONEncoder per call (a third of the `q` filter,
# which is called ~25 times per Deployment); the encoder keeps no state between calls.
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False)


# While a template renders its shape (see _Shapes), the `q` filter writes a placeholder token
# instead of each value and records the value here (per thread: planning runs in threads).
_RECORDING = threading.local()
_TOKEN_MARK = "\ue000"  # Unicode private use: a value holding it is rendered the plain way
_TOKEN = re.compile('"\ue000([0-9]+)\ue000"')


def _to_json(value: object) -> str:
    """JSON is YAML: quoting everything through json.dumps keeps strings strings."""
    if isinstance(value, jinja2.Undefined):
        # Filters receive Undefined without touching it; str() makes StrictUndefined raise
        # UndefinedError naming the missing value.
        str(value)
    recorded: list[object] | None = getattr(_RECORDING, "values", None)
    if recorded is not None:
        recorded.append(value)
        return f'"{_TOKEN_MARK}{len(recorded) - 1}{_TOKEN_MARK}"'
    text = _JSON_ENCODER.encode(value)
    if _YAML_UNSAFE.search(text) is None:  # nearly always: no substitution to run
        return text
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@cache
def template_environment() -> jinja2.Environment:
    """The jinja2 environment: package templates, ``StrictUndefined``, the ``q`` filter."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("glm_operator.render", "templates"),
        auto_reload=False,  # templates ship with the package: no stat of each file on every render
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML; values are quoted with the `q` filter instead
        keep_trailing_newline=True,
    )
    env.filters["q"] = _to_json
    # No default globals (range, dict, lipsum, cycler, joiner, namespace): the templates use none,
    # every render copied them into its context (a third of Template.new_context), and a missing
    # ``namespace`` value is now StrictUndefined's error instead of jinja's Namespace class.
    env.globals.clear()
    return env


@cache
def _template(name: str) -> jinja2.Template:
    return template_environment().get_template(name)


# libyaml's safe loader parses the rendered objects ~10x faster than the pure-Python one (it was
# two thirds of a reconcile's CPU); both build the same plain dicts.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _ParsedTexts:
    """Rendered YAML text -> the same object as compact JSON, for the last ``size`` texts.

    A GLMDeployment is reconciled several times with the same plan (pod and child events), so
    it renders the same text again; building the dicts from YAML (PyYAML's constructor is Python
    even with libyaml) was a fifth of the operator's CPU, json.loads of the remembered JSON is
    ~10x cheaper and hands every caller its own dicts. Keyed by a 16-byte digest of the text;
    thread-safe (planning runs in a thread pool)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def get(self, key: bytes) -> Any:
        """The object of a remembered text (the caller's own copy), or None."""
        with self._lock:
            cached = self._items.get(key)
            if cached is not None:
                self._items.move_to_end(key)
        return None if cached is None else json.loads(cached)

    def put(self, key: bytes, encoded: str) -> None:
        with self._lock:
            self._items[key] = encoded
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def load(self, text: str) -> Any:
        key = self.key(text)
        cached = self.get(key)
        if cached is not None:
            return cached
        obj = yaml.load(text, Loader=_SAFE_LOADER)
        try:
            encoded = json.dumps(obj, separators=(",", ":"))
        except (TypeError, ValueError):
            return obj  # a value JSON cannot carry (a YAML timestamp): parse it every time
        if json.loads(encoded) != obj:
            return obj  # e.g. a non-string key: the JSON copy would differ
        self.put(key, encoded)
        return obj


# ~3 objects per GLMDeployment, a few KB each: a few MB for 1,000 GLMDeployments.
_PARSED = _ParsedTexts(size=3072)


def _plain(value: object) -> bool:
    """A value whose JSON, read as YAML, is the value itself (lists for tuples): strings (without
    the token mark), ints, bools, None, and lists and string-keyed dicts of them. Not floats:
    YAML 1.1 reads JSON's ``1e-05`` as a string."""
    if isinstance(value, str):
        return _TOKEN_MARK not in value
    if value is None or isinstance(value, int):  # bool is an int
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _TOKEN_MARK not in k and _plain(v) for k, v in value.items())
    return False


class _Shapes:
    """A template rendered with a placeholder token for each ``q`` value -> its parse, as compact
    JSON with the tokens in it; for the last ``size`` shapes.

    Every value a template takes from the view goes through ``q`` as one whole YAML scalar or
    flow collection; what else varies (which ``if`` branches render, the few unquoted ints such as
    ``replicas``) stays in the shape text. GLMDeployments of the same kind of spec share a shape,
    so a new GLMDeployment no longer needs a YAML parse (PyYAML's constructor is Python: about
    half of a new GLMDeployment's plan): its objects are the shape's JSON with each token replaced
    by its value's JSON, read by json.loads. Identical to parsing the rendered text: a shape is
    used only when each token is a whole JSON string in its parse, once, and every value is
    ``_plain``; otherwise ``render`` returns None and the caller parses the text."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[bytes, str | None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def render(self, template: jinja2.Template, values: Mapping[str, Any]) -> str | None:
        """The object as compact JSON, or None: parse the rendered text instead."""
        recorded: list[object] = []
        _RECORDING.values = recorded
        try:
            shape = template.render(values)
        finally:
            _RECORDING.values = None
        if not all(_plain(v) for v in recorded):
            return None
        key = _ParsedTexts.key(shape)
        with self._lock:
            known = key in self._items
            parsed = self._items.get(key)
            if known:
                self._items.move_to_end(key)
        if not known:
            parsed = self._parse(shape, len(recorded))
            with self._lock:
                self._items[key] = parsed
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        if parsed is None:
            return None
        texts = [json.dumps(v, separators=(",", ":")) for v in recorded]
        # Not valid JSON when a token was a mapping key and its value is not a string: the
        # caller's json.loads fails and it parses the text.
        return _TOKEN.sub(lambda m: texts[int(m.group(1))], parsed)

    @staticmethod
    def _parse(shape: str, tokens: int) -> str | None:
        try:
            encoded = json.dumps(
                yaml.load(shape, Loader=_SAFE_LOADER), separators=(",", ":"), ensure_ascii=False
            )
        except (yaml.YAMLError, TypeError, ValueError):
            return None
        found = [int(m.group(1)) for m in _TOKEN.finditer(encoded)]
        if sorted(found) != list(range(tokens)) or encoded.count(_TOKEN_MARK) != 2 * tokens:
            return None  # a token inside a longer scalar, or dropped: parse the real text
        return encoded


_SHAPES = _Shapes(size=256)


def _render(template_name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Render the text and parse it as YAML; a text seen before is not parsed again (``_PARSED``),
    a new one is filled into its shape when it can be (``_SHAPES``)."""
    template = _template(template_name)
    text = template.render(values)
    key = _PARSED.key(text)
    obj = _PARSED.get(key)
    if obj is None:
        encoded = _SHAPES.render(template, values)
        if encoded is not None:
            try:
                obj = json.loads(encoded)
            except ValueError:  # see _Shapes.render
                encoded = None
        if encoded is not None:
            _PARSED.put(key, encoded)
        else:
            obj = _PARSED.load(text)
    if not isinstance(obj, dict):
        raise ValueError(f"{template_name} did not render to a mapping")
    return obj


# --- values computed from the context ---------------------------------------------------------


def _format_float(value: float) -> str:
    return repr(float(value))


def _parser_defaults(ctx: WorkloadContext) -> list[str]:
    """The model's tool-call and reasoning parsers, unless extraArgs chooses its own."""
    args: list[str] = []
    if ctx.tool_call_parser and not sets_flag(ctx.extra_args, "--tool-call-parser"):
        args += ["--enable-auto-tool-choice", "--tool-call-parser", ctx.tool_call_parser]
    if ctx.reasoning_parser and not sets_flag(ctx.extra_args, "--reasoning-parser"):
        args += ["--reasoning-parser", ctx.reasoning_parser]
    return args


def build_vllm_args(ctx: WorkloadContext) -> list[str]:
    """Arguments after ``vllm serve``: the model, then every setting explicitly, extra args last."""
    location = ctx.model_location
    args = [location.model_arg]
    if location.revision is not None:
        args += ["--revision", location.revision]
    args += [
        "--served-model-name",
        ctx.served_model_name,
        "--host",
        "0.0.0.0",
        "--port",
        str(ctx.port),
        "--tensor-parallel-size",
        str(ctx.tensor_parallel_size),
    ]
    if ctx.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(ctx.pipeline_parallel_size)]
    if ctx.data_parallel_size > 1:
        args += ["--data-parallel-size", str(ctx.data_parallel_size)]
    if ctx.decode_context_parallel_size > 1:
        args += ["--decode-context-parallel-size", str(ctx.decode_context_parallel_size)]
    if ctx.multi_node:
        args += ["--distributed-executor-backend", "mp"]
    args += [
        "--max-model-len",
        str(ctx.max_model_len),
        "--gpu-memory-utilization",
        _format_float(ctx.gpu_memory_utilization),
        "--max-num-seqs",
        str(ctx.max_num_seqs),
    ]
    if ctx.quantization is not None:
        args += ["--quantization", ctx.quantization]
    if ctx.kv_cache_dtype is not None:
        args += ["--kv-cache-dtype", ctx.kv_cache_dtype]
    if ctx.dtype is not None:
        args += ["--dtype", ctx.dtype]
    if location.load_format is not None:
        args += ["--load-format", location.load_format]
    expert_parallel = ctx.enable_expert_parallel or ctx.data_parallel_size > 1
    if expert_parallel and not sets_flag(ctx.extra_args, "--enable-expert-parallel"):
        args.append("--enable-expert-parallel")
    if ctx.speculative_config is not None:
        args += ["--speculative-config", ctx.speculative_config]
    if ctx.max_num_batched_tokens is not None and not sets_flag(ctx.extra_args, "--max-num-batched-tokens"):
        args += ["--max-num-batched-tokens", str(ctx.max_num_batched_tokens)]
    if ctx.trust_remote_code and not sets_flag(ctx.extra_args, "--trust-remote-code"):
        args.append("--trust-remote-code")
    return args + _parser_defaults(ctx) + list(ctx.extra_args)


def multi_node_args(ctx: WorkloadContext, *, leader: bool) -> list[str]:
    """vLLM's multi-node arguments for one pod of a LeaderWorkerSet group (after the model args).

    Pipeline stages are spread over the group's nodes (``--nnodes``); the leader is rank 0 and
    serves the API, each worker takes its rank from LWS and runs without an API server.
    """
    args = ["--nnodes", str(ctx.nodes_per_replica)]
    args += ["--node-rank", "0" if leader else LWS_WORKER_INDEX]
    args += ["--master-addr", LWS_LEADER_ADDRESS]
    return args if leader else [*args, "--headless"]


def pod_resources(ctx: WorkloadContext) -> dict[str, dict[str, str]]:
    """User requests/limits plus the GPUs of one pod (requests == limits, as extended resources need).

    CPU, memory and ephemeral-storage requests the user did not set (nor limited) come from
    ``ctx.default_requests`` (sized from the model by the controller), so a pod loading hundreds of
    GiB is never BestEffort.

    Any GPU count the user wrote under ``nvidia.com/gpu`` or the variant's resource name is
    replaced: the GPU count is the plan's decision.
    """
    gpu_keys = {GPU_RESOURCE, ctx.resource_name}
    merged: dict[str, dict[str, str]] = {}
    for section in ("limits", "requests"):
        user = ctx.resources.get(section, {}) or {}
        values = {key: str(value) for key, value in sorted(user.items()) if key not in gpu_keys}
        if section == "requests":
            user_limits = ctx.resources.get("limits", {}) or {}
            for key, value in ctx.default_requests.items():
                # A default request above the user's limit would make the pod invalid.
                if key not in values and key not in user_limits:
                    values[key] = value
            values = dict(sorted(values.items()))
        values[ctx.resource_name] = str(ctx.gpus_per_pod)
        merged[section] = values
    return merged


def _merge_env(ours: list[dict[str, Any]], user: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Our variables, then the user's; a user variable replaces ours of the same name in place.

    Server-side apply rejects duplicate names in ``env`` (a list keyed by name).
    """
    merged: dict[str, dict[str, Any]] = {item["name"]: item for item in ours}
    for item in user:
        merged[str(item["name"])] = dict(item)
    return list(merged.values())


def _env(ctx: WorkloadContext, *, serves_api: bool) -> list[dict[str, Any]]:
    ours: list[dict[str, Any]] = []
    if serves_api and ctx.api_key_secret is not None:
        ours.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": ctx.api_key_secret.name, "key": ctx.api_key_secret.key}
                },
            }
        )
    if ctx.hf_token_secret is not None:  # every pod of a replica loads weights
        ours.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": ctx.hf_token_secret.name, "key": ctx.hf_token_secret.key}
                },
            }
        )
    if ctx.model_cache_claim is not None:
        ours.append({"name": "HF_HOME", "value": ctx.model_cache_mount_path})
        if ctx.model_cache_read_only:
            ours.append({"name": "HF_HUB_OFFLINE", "value": "1"})  # a read-only cache cannot download
    elif ctx.default_cache_size is not None:
        ours.append({"name": "HF_HOME", "value": HF_CACHE_MOUNT_PATH})
    return _merge_env(ours, ctx.env)


def _tolerations(ctx: WorkloadContext) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = [dict(GPU_TAINT_TOLERATION)]
    for toleration in ctx.tolerations:
        item = dict(toleration)
        if item not in result:
            result.append(item)
    return result


def _node_selector_term(term: NodeSelectorTerm) -> dict[str, Any]:
    expressions = []
    for requirement in term.match_expressions:
        expression: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
        if requirement.values:
            expression["values"] = list(requirement.values)
        expressions.append(expression)
    return {"matchExpressions": expressions}


def _affinity(ctx: WorkloadContext) -> dict[str, Any] | None:
    if not ctx.node_selector_terms:
        return None
    terms = [_node_selector_term(term) for term in ctx.node_selector_terms]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _uses_shm(ctx: WorkloadContext) -> bool:
    return ctx.tensor_parallel_size > 1 or ctx.multi_node


def _volumes(ctx: WorkloadContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) of the model, the Hugging Face cache and /dev/shm."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    claim = ctx.model_location.pvc_claim
    if claim is not None:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "models", "mountPath": MODELS_MOUNT_PATH, "readOnly": True})
    if ctx.model_cache_claim is not None:
        claim_source: dict[str, Any] = {"claimName": ctx.model_cache_claim}
        mount: dict[str, Any] = {"name": "model-cache", "mountPath": ctx.model_cache_mount_path}
        if ctx.model_cache_read_only:
            claim_source["readOnly"] = True
            mount["readOnly"] = True
        if ctx.model_cache_sub_path:
            mount["subPath"] = ctx.model_cache_sub_path
        volumes.append({"name": "model-cache", "persistentVolumeClaim": claim_source})
        mounts.append(mount)
    elif ctx.default_cache_size is not None:
        # Downloads survive container restarts; the size limit matches the ephemeral-storage request.
        volumes.append({"name": "model-cache", "emptyDir": {"sizeLimit": ctx.default_cache_size}})
        mounts.append({"name": "model-cache", "mountPath": HF_CACHE_MOUNT_PATH})
    if _uses_shm(ctx):
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _pod_view(ctx: WorkloadContext, *, role: str) -> PodView:
    """``role`` is "server" (Deployment pod), "leader" or "worker" (LeaderWorkerSet pods)."""
    volumes, mounts = _volumes(ctx)
    serves_http = role != "worker"
    command = ["vllm", "serve"]
    args = build_vllm_args(ctx)
    if role != "server":
        args += multi_node_args(ctx, leader=role == "leader")
    return PodView(
        container_name=VLLM_CONTAINER_NAME if serves_http else WORKER_CONTAINER_NAME,
        image=ctx.image,
        command=command,
        args=args,
        serves_http=serves_http,
        port=ctx.port,
        env=_env(ctx, serves_api=serves_http),
        resources=pod_resources(ctx),
        volume_mounts=mounts,
        volumes=volumes,
        tolerations=_tolerations(ctx),
        affinity=_affinity(ctx),
        node_selector=dict(ctx.node_selector),
        image_pull_secrets=[{"name": secret} for secret in ctx.image_pull_secrets],
        service_account_name=ctx.service_account_name,
        termination_grace_period_seconds=TERMINATION_GRACE_PERIOD_SECONDS,
        startup_period_seconds=STARTUP_PROBE_PERIOD_SECONDS,
        startup_failure_threshold=math.ceil(ctx.startup_timeout_seconds / STARTUP_PROBE_PERIOD_SECONDS),
        pre_stop_sleep_seconds=PRE_STOP_SLEEP_SECONDS,
    )


def owner_references(ctx: WorkloadContext) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": ctx.owner.api_version,
            "kind": ctx.owner.kind,
            "name": ctx.owner.name,
            "uid": ctx.owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _labels(ctx: WorkloadContext, *, component: str = names.COMPONENT_INFERENCE) -> dict[str, str]:
    ours = names.common_labels(ctx.deployment_name, ctx.variant_name, ctx.gpu_product, component=component)
    return {**dict(ctx.labels), **ours}


def _pod_labels(ctx: WorkloadContext, *, component: str = names.COMPONENT_INFERENCE) -> dict[str, str]:
    return {**_labels(ctx, component=component), names.LABEL_SPEC_HASH: ctx.spec_hash}


def _metadata_values(ctx: WorkloadContext) -> dict[str, Any]:
    return {
        "name": ctx.workload_name,
        "namespace": ctx.namespace,
        "labels": _labels(ctx),
        "annotations": dict(ctx.annotations),
        "owner_references": owner_references(ctx),
        "replicas": ctx.replicas,
    }


# --- public renderers ------------------------------------------------------------------------


def render_deployment(ctx: WorkloadContext) -> dict[str, Any]:
    """The apps/v1 Deployment of a single-node variant."""
    if ctx.multi_node:
        raise ValueError(
            f"variant {ctx.variant_name!r} spans {ctx.nodes_per_replica} nodes: use a LeaderWorkerSet"
        )
    return _render(
        "deployment.yaml.j2",
        {
            **_metadata_values(ctx),
            "selector": names.selector_labels(ctx.deployment_name, ctx.variant_name),
            "pod_labels": _pod_labels(ctx),
            "progress_deadline_seconds": ctx.startup_timeout_seconds + PROGRESS_DEADLINE_SLACK_SECONDS,
            "pod": _pod_view(ctx, role="server"),
        },
    )


def render_leaderworkerset(ctx: WorkloadContext) -> dict[str, Any]:
    """The LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) of a multi-node variant."""
    if not ctx.multi_node:
        raise ValueError(f"variant {ctx.variant_name!r} fits one node: use a Deployment")
    return _render(
        "leaderworkerset.yaml.j2",
        {
            **_metadata_values(ctx),
            "size": ctx.nodes_per_replica,
            "leader_labels": _pod_labels(ctx),
            "worker_labels": _pod_labels(ctx, component=names.COMPONENT_WORKER),
            "leader": _pod_view(ctx, role="leader"),
            "worker": _pod_view(ctx, role="worker"),
        },
    )


def render_workload(ctx: WorkloadContext) -> dict[str, Any]:
    """Deployment for a single-node variant, LeaderWorkerSet for a multi-node one."""
    return render_leaderworkerset(ctx) if ctx.multi_node else render_deployment(ctx)


def render_service(ctx: WorkloadContext) -> dict[str, Any]:
    """The Service of the whole GLMDeployment.

    Uses only GLMDeployment-level fields of ``ctx`` (namespace, name, owner, port, extra labels),
    so any variant's context renders the same Service.
    """
    return _render(
        "service.yaml.j2",
        {
            "name": names.service_name(ctx.deployment_name),
            "namespace": ctx.namespace,
            "labels": {**dict(ctx.labels), **names.service_labels(ctx.deployment_name)},
            "owner_references": owner_references(ctx),
            "selector": names.service_selector(ctx.deployment_name),
            "port": ctx.port,
        },
    )


def render_pod_disruption_budget(ctx: WorkloadContext) -> dict[str, Any]:
    """The PodDisruptionBudget of the whole GLMDeployment (maxUnavailable 1 over its serving pods).

    Like the Service, it uses only GLMDeployment-level fields of ``ctx``.
    """
    return _render(
        "poddisruptionbudget.yaml.j2",
        {
            "name": names.service_name(ctx.deployment_name),
            "namespace": ctx.namespace,
            "labels": {**dict(ctx.labels), **names.service_labels(ctx.deployment_name)},
            "owner_references": owner_references(ctx),
            "selector": names.service_selector(ctx.deployment_name),
        },
    )


def render_all(variants: WorkloadContext | Sequence[WorkloadContext]) -> list[dict[str, Any]]:
    """Every child object of one GLMDeployment: one workload per variant, the Service, the PDB.

    All variants must belong to the same GLMDeployment (same namespace, name, owner and port).
    """
    contexts = [variants] if isinstance(variants, WorkloadContext) else list(variants)
    if not contexts:
        raise ValueError("render_all needs at least one variant")
    first = contexts[0]
    seen_names: set[str] = set()
    for ctx in contexts:
        shared = (ctx.namespace, ctx.deployment_name, ctx.owner, ctx.port)
        if shared != (first.namespace, first.deployment_name, first.owner, first.port):
            raise ValueError("all variants must belong to one GLMDeployment (namespace, name, owner, port)")
        if ctx.workload_name in seen_names:
            raise ValueError(f"two variants render to the same workload name {ctx.workload_name!r}")
        seen_names.add(ctx.workload_name)
    return [render_workload(ctx) for ctx in contexts] + [
        render_service(first),
        render_pod_disruption_budget(first),
    ]
