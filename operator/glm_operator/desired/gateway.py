"""A GLMGateway's desired state (pure): what the gateway reconciler observed in, what to apply, prune,
write to status and announce out. Tests call it on whole scenarios without a cluster.

The spec is validated once here: a valid one renders the gateway's objects
(``glm_operator.gateway.objects``) and, when the chart turned the NetworkPolicy off, prunes the one
applied before; an invalid one (which the CRD schema normally rejects first) renders nothing and
sets every condition False with reason InvalidSpec naming the field. The status and its Events
come from ``glm_operator.gateway.status`` (only transitions are announced).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.desired.model import ChildRef, Event
from glm_operator.gateway.network_policy import NetworkPolicySettings, network_policy_name
from glm_operator.gateway.objects import gateway_name, render_gateway
from glm_operator.gateway.status import GatewayObserved, gateway_status


@dataclass(frozen=True)
class DeploymentView:
    """What the status reads of a gateway's Deployment."""

    generation: int
    ready_replicas: int
    rollout_stalled: bool

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> DeploymentView:
        status = obj.get("status") or {}
        stalled = any(
            c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions") or []
        )
        return cls(
            generation=int((obj.get("metadata") or {}).get("generation") or 0),
            ready_replicas=int(status.get("readyReplicas") or 0),
            rollout_stalled=stalled,
        )


@dataclass(frozen=True)
class ObservedGateway:
    """One GLMGateway and what its status reads, as the watches last saw them."""

    body: Mapping[str, Any]  # the GLMGateway as read from the apiserver
    image: str  # the sync sidecar's image
    now: str  # RFC 3339
    network_policy: NetworkPolicySettings = field(default_factory=NetworkPolicySettings)
    deployment: DeploymentView | None = None  # its Deployment, once a watch event showed it
    served: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # served name -> GLMDeployments


@dataclass(frozen=True)
class DesiredGateway:
    objects: tuple[dict[str, Any], ...]  # to server-side apply
    prune: tuple[ChildRef, ...]  # to delete
    status: dict[str, Any]  # the status fields the operator writes
    events: tuple[Event, ...]


def _spec_error(err: ValidationError) -> str:
    return "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


def compute_gateway_desired(observed: ObservedGateway) -> DesiredGateway:
    body, deployment = observed.body, observed.deployment
    meta = body["metadata"]
    raw_spec = body.get("spec") or {}
    spec_error = None
    try:
        spec: GLMGatewaySpec | None = GLMGatewaySpec.model_validate(raw_spec)
    except ValidationError as err:
        spec, spec_error = None, _spec_error(err)
    objects: tuple[dict[str, Any], ...] = ()
    prune: tuple[ChildRef, ...] = ()
    if spec is not None:
        objects = tuple(render_gateway(body, spec, observed.image, observed.network_policy))
        if not observed.network_policy.enabled:  # turned off in the chart: the one applied before goes
            prune = (("networking.k8s.io/v1", "NetworkPolicy", network_policy_name(meta["name"])),)
    api_keys = raw_spec.get("apiKeys") or {}
    status_input = GatewayObserved(
        namespace=meta["namespace"],
        name=meta["name"],
        generation=int(meta.get("generation") or 0),
        deployment=gateway_name(meta["name"]),
        secret_name=spec.api_keys.secret_name if spec else str(api_keys.get("secretName", "")),
        secret_key=spec.api_keys.key if spec else str(api_keys.get("key", "")),
        spec_error=spec_error,
        replicas=spec.replicas if spec else 0,
        deployment_seen=deployment is not None,
        ready_replicas=deployment.ready_replicas if deployment else 0,
        rollout_stalled=deployment.rollout_stalled if deployment else False,
        served=observed.served,
        allow_lists=tuple((c.name, tuple(c.models)) for c in spec.clients) if spec else (),
    )
    previous = (body.get("status") or {}).get("conditions") or []
    result = gateway_status(status_input, previous, observed.now)
    status: dict[str, Any] = {
        "observedGeneration": meta.get("generation"),
        "service": gateway_name(meta["name"]),
        "conditions": result.conditions,
        **result.fields,
    }
    return DesiredGateway(objects, prune, status, result.events)
