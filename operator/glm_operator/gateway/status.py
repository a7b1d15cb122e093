"""Status of a GLMGateway: conditions, the Events of their transitions, counts (pure).

``gateway_status(observed, previous, now)`` derives everything from what the operator saw; it reads
no API and the operator never reads the API-key Secret. Conditions (``set_condition`` semantics:
``lastTransitionTime`` moves only when the status flips, each carries ``observedGeneration``):

- Ready: True when a gateway pod is ready (it serves). Else InvalidSpec, Deploying (no Deployment
  seen yet), PodsStarting, or NoReadyPods once the Deployment's rollout passed its progress deadline.
- KeysLoaded: True when a gateway pod is ready: the kubelet mounted the Secret's key and HAProxy,
  which does not start without the file, loaded it. Else InvalidSpec, or Unknown SecretNotMounted
  while no pod is ready (a missing Secret or key keeps the pods in ContainerCreating).
- RoutesResolved: True when some GLMDeployment of the namespace serves a name and every model of
  the clients' allow-lists is served. Else InvalidSpec, NoServedModels, or UnknownModel naming
  ``spec.clients[i].models[j]``.

Without a pod's own report the operator cannot tell a missing Secret from a slow image pull: while
no pod is ready KeysLoaded is Unknown and its message says how to check the Secret.

Events: a Warning when a condition turns to a reason that needs a fix (``WARNING_REASONS``: not for
a gateway whose pods are still starting), a Normal ``Ready`` when Ready becomes True; none when
nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.desired.model import Event
from glm_operator.planning.diagnosis.conditions import FALSE, TRUE, UNKNOWN, get_condition, set_condition

READY = "Ready"
KEYS_LOADED = "KeysLoaded"
ROUTES_RESOLVED = "RoutesResolved"
GATEWAY_CONDITIONS: tuple[str, ...] = (READY, KEYS_LOADED, ROUTES_RESOLVED)
#: At most this many served names are listed in a message (all are in ``status.models``).
MAX_LISTED_MODELS = 20
#: Reasons that need someone to act; turning to one posts a Warning Event.
WARNING_REASONS = frozenset({"InvalidSpec", "NoReadyPods", "NoServedModels", "UnknownModel"})


@dataclass(frozen=True)
class GatewayObserved:
    """What the operator saw of one GLMGateway and its namespace this round."""

    namespace: str
    name: str
    generation: int
    deployment: str  # the gateway Deployment's (and Service's) name
    secret_name: str
    secret_key: str
    spec_error: str | None = None  # the spec failed validation: "spec.x: why"
    replicas: int = 1  # gateway pods wanted
    deployment_seen: bool = False  # the Deployment exists (an event of it was seen)
    ready_replicas: int = 0
    rollout_stalled: bool = False  # the Deployment's Progressing condition: ProgressDeadlineExceeded
    served: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # served name -> GLMDeployments
    allow_lists: tuple[tuple[str, tuple[str, ...]], ...] = ()  # spec.clients: (name, models)


@dataclass(frozen=True)
class GatewayStatus:
    """``status`` (conditions and counts; the operator adds observedGeneration and service) and the
    Events to post."""

    conditions: list[dict[str, Any]]
    fields: dict[str, Any]
    events: tuple[Event, ...]


def _ready(o: GatewayObserved) -> tuple[str, str, str]:
    if o.spec_error is not None:
        return FALSE, "InvalidSpec", f"not applied: {o.spec_error}; fix the GLMGateway's spec"
    if not o.deployment_seen:
        return FALSE, "Deploying", f"Deployment {o.deployment} is being created"
    if o.ready_replicas >= 1:
        return (
            TRUE,
            "PodsReady",
            f"{o.ready_replicas}/{o.replicas} gateway pods ready behind Service {o.deployment}",
        )
    if not o.rollout_stalled:
        return FALSE, "PodsStarting", f"0/{o.replicas} gateway pods of Deployment {o.deployment} ready yet"
    return (
        FALSE,
        "NoReadyPods",
        f"0/{o.replicas} gateway pods of Deployment {o.deployment} ready; "
        f"the rollout passed its progress deadline; see the events of its pods "
        f"(kubectl -n {o.namespace} describe pods -l app.kubernetes.io/instance={o.name}): FailedMount "
        f"means Secret {o.secret_name} or its key {o.secret_key!r} is missing (spec.apiKeys)",
    )


def _keys(o: GatewayObserved) -> tuple[str, str, str]:
    secret = f"Secret {o.secret_name} key {o.secret_key!r} (spec.apiKeys.secretName, spec.apiKeys.key)"
    if o.spec_error is not None:
        return FALSE, "InvalidSpec", f"not applied: {o.spec_error}"
    if o.ready_replicas >= 1:
        return TRUE, "SecretMounted", f"{o.ready_replicas} ready gateway pods loaded {secret}"
    return (
        UNKNOWN,
        "SecretNotMounted",
        f"no gateway pod is ready yet, so {secret} is not known to be loaded. If the pods stay in "
        f"ContainerCreating with FailedMount events, the Secret or its key is missing: "
        f"kubectl -n {o.namespace} create secret generic {o.secret_name} "
        f"--from-literal={o.secret_key}=\"$(printf '<api-key> <client-name>\\n')\", "
        f"or point spec.apiKeys at an existing Secret",
    )


def _routes(o: GatewayObserved) -> tuple[str, str, str]:
    if o.spec_error is not None:
        return FALSE, "InvalidSpec", f"not applied: {o.spec_error}"
    if not o.served:
        return (
            FALSE,
            "NoServedModels",
            f"no GLMDeployment in namespace {o.namespace} serves a model yet, so every request answers "
            f"404 model_not_found; create a GLMDeployment in {o.namespace} (its served name is "
            f"spec.model.servedModelName, else the model id)",
        )
    listed = sorted(o.served)[:MAX_LISTED_MODELS]
    unknown = [
        f"spec.clients[{i}].models[{j}] ({model!r}, client {client})"
        for i, (client, models) in enumerate(o.allow_lists)
        for j, model in enumerate(models)
        if model not in o.served
    ]
    if unknown:
        return (
            FALSE,
            "UnknownModel",
            f"{'; '.join(unknown[:MAX_LISTED_MODELS])}: served by no GLMDeployment of namespace "
            f"{o.namespace}, so those requests answer 404; fix the name or create the GLMDeployment "
            f"(served names: {', '.join(listed)})",
        )
    more = f" and {len(o.served) - len(listed)} more" if len(o.served) > len(listed) else ""
    shared = sorted(m for m, deployments in o.served.items() if len(deployments) > 1)
    note = f"; served by several GLMDeployments (one backend each): {', '.join(shared)}" if shared else ""
    return TRUE, "ModelsRouted", f"{len(o.served)} served names routed: {', '.join(listed)}{more}{note}"


def gateway_status(
    observed: GatewayObserved, previous: Sequence[Mapping[str, Any]], now: str
) -> GatewayStatus:
    """Conditions, counts and transition Events of one GLMGateway (see the module docstring)."""
    conditions = [dict(c) for c in previous if c.get("type") in GATEWAY_CONDITIONS]
    events: list[Event] = []
    for type_, (status, reason, message) in (
        (READY, _ready(observed)),
        (KEYS_LOADED, _keys(observed)),
        (ROUTES_RESOLVED, _routes(observed)),
    ):
        before = get_condition(conditions, type_)
        conditions = set_condition(conditions, type_, status, reason, message, observed.generation, now)
        flipped = before is None or before.get("status") != status or before.get("reason") != reason
        if flipped and status != TRUE and reason in WARNING_REASONS:
            events.append(Event("Warning", reason, f"{type_} {status}: {message}"))
        elif flipped and status == TRUE and type_ == READY:
            events.append(Event("Normal", READY, message))
    conditions.sort(key=lambda c: GATEWAY_CONDITIONS.index(str(c["type"])))
    models = sorted(observed.served)
    fields: dict[str, Any] = {
        "replicas": observed.replicas,
        "readyReplicas": observed.ready_replicas,
        "models": models,
        "modelCount": len(models),
    }
    return GatewayStatus(conditions=conditions, fields=fields, events=tuple(events))
