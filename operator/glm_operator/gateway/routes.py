"""The gateway's routing table: which served model name goes to which pods, with what weight.

Pure: plain mappings in (GLMDeployments and their vLLM Pods as the apiserver returns them), a
frozen :class:`RoutingTable` out. ``glm_operator.gateway.sync`` feeds it from watches and applies
the result to the proxy.

Rules:
- A GLMDeployment serves one name: ``status.model`` (what the operator passed to vLLM as
  ``--served-model-name``), else ``spec.model.servedModelName``. A long-context copy of a model
  (``glm-5.3-flash[1m]``) is a second GLMDeployment with its own name and so its own backend.
  Two GLMDeployments that serve the same name share one backend.
- Members are the serving pods (component ``inference``; multi-node workers serve no HTTP) with
  a pod IP. A pod is *ready* when its Ready condition is True and it is not terminating, which is
  what an EndpointSlice calls ``ready``; other pods keep their slot but get no new requests.
- Weight of a pod = the planned concurrency of its variant (``status.plan.variants[].maxConcurrency``,
  matched on the pod's GPU-product label), rounded, at least 1; when the largest weight of a
  backend is above the proxy's maximum (256) all of them are scaled down together. So under
  least-connections an H100 replica holding 13 sequences gets ~4x the requests of an L4 replica
  holding 3: the proxy picks the server with the fewest outstanding requests per unit of weight.
- Each backend has a fixed number of server slots; a pod keeps its slot as long as it exists
  (:func:`assign_slots`), so a pod joining or leaving changes one slot, not the others.
- A backend carries the expected wake-up of its model (``status.autoscaler.wakeUpSeconds``: the
  measured cold start plus the autoscaler's reaction; the smallest when several GLMDeployments
  serve the name): the ``Retry-After`` of the proxy's 503 while no replica of it is ready.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.v1alpha1 import DEFAULT_SERVING_PORT
from glm_operator.render import names

#: Largest server weight HAProxy accepts.
MAX_WEIGHT = 256


@dataclass(frozen=True)
class ServingPod:
    """One vLLM pod as the gateway sees it."""

    name: str
    deployment: str  # GLMDeployment name (label value)
    gpu_product: str  # GPU-product label value
    address: str
    port: int
    ready: bool


@dataclass(frozen=True)
class ModelSource:
    """One GLMDeployment as the gateway sees it: the name it serves and its capacity per GPU type."""

    deployment: str
    served_name: str
    port: int
    concurrency_by_gpu: Mapping[str, float]  # GPU-product label value -> planned max concurrency
    wake_up_seconds: float | None = None  # status.autoscaler.wakeUpSeconds (absent until measured)


@dataclass(frozen=True)
class Member:
    """A pod placed in a backend slot, with its weight."""

    slot: int  # 1-based, matches the proxy's server-template numbering
    pod: str
    address: str
    port: int
    weight: int
    ready: bool


@dataclass(frozen=True)
class Backend:
    """All pods serving one model name."""

    model: str
    name: str  # proxy backend id, derived from the model name
    members: tuple[Member, ...]
    #: How long a request is expected to wait for a first ready replica (None: not measured yet).
    wake_up_seconds: float | None = None

    def member(self, slot: int) -> Member | None:
        return next((m for m in self.members if m.slot == slot), None)


@dataclass(frozen=True)
class RoutingTable:
    backends: tuple[Backend, ...]
    details: tuple[str, ...] = field(default=())

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(b.model for b in self.backends)

    def backend(self, model: str) -> Backend | None:
        return next((b for b in self.backends if b.model == model), None)

    def slots(self) -> dict[str, dict[str, int]]:
        """``{model: {pod: slot}}``: the slot assignment to carry over to the next computation."""
        return {b.model: {m.pod: m.slot for m in b.members} for b in self.backends}


_BACKEND_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def backend_name(model: str) -> str:
    """A proxy identifier for a model name: readable, unique (hash of the exact name), ≤ 60 chars."""
    readable = _BACKEND_UNSAFE.sub("_", model)[:40].strip("_") or "model"
    return f"m_{readable}_{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def model_source(glmd: Mapping[str, Any]) -> ModelSource | None:
    """The routing facts of a GLMDeployment object; None when it serves no name yet."""
    metadata = glmd.get("metadata") or {}
    spec = glmd.get("spec") or {}
    status = glmd.get("status") or {}
    served = status.get("model") or (spec.get("model") or {}).get("servedModelName")
    if not served:
        return None
    concurrency: dict[str, float] = {}
    for variant in (status.get("plan") or {}).get("variants") or []:
        product = variant.get("gpuProduct")
        if product:
            concurrency[names.label_value(str(product))] = float(variant.get("maxConcurrency") or 0)
    return ModelSource(
        deployment=names.label_value(str(metadata.get("name", ""))),
        served_name=str(served),
        port=int((spec.get("serving") or {}).get("port") or DEFAULT_SERVING_PORT),
        concurrency_by_gpu=concurrency,
        wake_up_seconds=_seconds((status.get("autoscaler") or {}).get("wakeUpSeconds")),
    )


def _seconds(value: Any) -> float | None:
    """A non-negative number of seconds from status, or None."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def serving_pod(pod: Mapping[str, Any], port: int) -> ServingPod | None:
    """A vLLM pod that serves HTTP and has an address; None for anything else."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(names.LABEL_COMPONENT) != names.COMPONENT_INFERENCE:
        return None
    deployment = labels.get(names.LABEL_DEPLOYMENT)
    address = (pod.get("status") or {}).get("podIP")
    if not deployment or not address:
        return None
    return ServingPod(
        name=str(metadata.get("name", "")),
        deployment=str(deployment),
        gpu_product=str(labels.get(names.LABEL_GPU_PRODUCT, "")),
        address=str(address),
        port=port,
        ready=_pod_ready(pod),
    )


def capacity_weights(concurrency: Mapping[str, float]) -> dict[str, int]:
    """Proxy weights from planned concurrency per key: proportional, 1..MAX_WEIGHT."""
    if not concurrency:
        return {}
    top = max(concurrency.values())
    scale = min(1.0, MAX_WEIGHT / top) if top > 0 else 1.0
    return {key: max(1, min(MAX_WEIGHT, round(value * scale))) for key, value in concurrency.items()}


def assign_slots(
    previous: Mapping[str, int], pods: Iterable[str], slots: int
) -> tuple[dict[str, int], list[str]]:
    """Keep each pod's previous slot; give new pods the lowest free slots. Returns (slots, left out)."""
    wanted = sorted(set(pods))
    taken = {pod: slot for pod, slot in previous.items() if pod in wanted and 1 <= slot <= slots}
    free = sorted(set(range(1, slots + 1)) - set(taken.values()))
    left_out = []
    for pod in wanted:
        if pod in taken:
            continue
        if free:
            taken[pod] = free.pop(0)
        else:
            left_out.append(pod)
    return taken, left_out


def compute_routing_table(
    glmdeployments: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    slots: int,
    previous: Mapping[str, Mapping[str, int]] | None = None,
) -> RoutingTable:
    """The routing table for the GLMDeployments and pods of one namespace."""
    previous = previous or {}
    sources = [s for s in (model_source(g) for g in glmdeployments) if s is not None]
    by_model: dict[str, list[ModelSource]] = {}
    for source in sources:
        by_model.setdefault(source.served_name, []).append(source)
    details: list[str] = []
    backends = []
    for model in sorted(by_model):
        model_sources = by_model[model]
        if len(model_sources) > 1:
            details.append(f"{model}: served by {len(model_sources)} GLMDeployments, one backend for all")
        members_by_pod: dict[str, tuple[ServingPod, int]] = {}
        for source in model_sources:
            weights = capacity_weights(source.concurrency_by_gpu)
            for raw in pods:
                pod = serving_pod(raw, source.port)
                if pod is not None and pod.deployment == source.deployment:
                    members_by_pod[pod.name] = (pod, weights.get(pod.gpu_product, 1))
        assigned, left_out = assign_slots(previous.get(model, {}), members_by_pod, slots)
        if left_out:
            details.append(f"{model}: {len(left_out)} pods beyond {slots} slots get no traffic")
        members = tuple(
            sorted(
                (
                    Member(slot, pod.name, pod.address, pod.port, weight, pod.ready)
                    for pod_name, (pod, weight) in members_by_pod.items()
                    if (slot := assigned.get(pod_name)) is not None
                ),
                key=lambda m: m.slot,
            )
        )
        estimates = [s.wake_up_seconds for s in model_sources if s.wake_up_seconds is not None]
        backends.append(
            Backend(
                model=model,
                name=backend_name(model),
                members=members,
                wake_up_seconds=min(estimates) if estimates else None,
            )
        )
    return RoutingTable(backends=tuple(backends), details=tuple(details))
