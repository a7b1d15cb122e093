"""The autoscaler's part of the pipeline (pure): its targets from the plan, its status from a decision.

``scaling_targets`` (a step of ``compute_desired``, with ``spec.autoscaling``): the replicas the GPU
pools and node autoscalers can host, one replica's target concurrency (the knee of a recorded load
test on the shape served, else the predicted knee; at most max-num-seqs), its max-num-seqs and
where a first replica goes. The capacity needs the plan for ``maxReplicas`` (a node autoscaler's
pool offers as many new nodes as the replicas planned): where the reconcile plans fewer, the plan is
made once more on the same GPU supply. ``scale``: the GLMDeployment, its targets and the vLLM queue
(None: unavailable) -> ``planning.scaling.autoscale.decide``
-> the status fields the autoscaler owns (the measured cold start kept across zero) and its Event.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec
from glm_operator.desired.measured_speed import use_recording
from glm_operator.desired.model import Event, FirstReplica, ScalingTargets
from glm_operator.desired.plan import PlanStep
from glm_operator.desired.status import MAX_EVENT_MESSAGE, autoscaler_fields
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request
from glm_operator.planning.placement.result import Variant
from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    ObservedReplicas,
    QueueSample,
    ScalerState,
    decide,
)
from glm_operator.planning.scaling.coldstart import median_cold_start
from glm_operator.planning.supply.capacity import capacity_pools
from glm_operator.planning.supply.outages import format_time

#: What a wake-up adds to the measured cold start: the autoscaler's decision and the reconcile.
WAKE_REACTION_SECONDS = 2.0


def scaling_targets(
    spec: GLMDeploymentSpec, step: PlanStep, default_image: str, load_test: Mapping[str, Any] | None = None
) -> ScalingTargets | None:
    """The targets of ``step``'s plan (made for ``maxReplicas`` when it was not), with the knee of the
    recorded ``load_test`` where it applies; None without ``spec.autoscaling`` or a plan."""
    if spec.autoscaling is None or step.plan is None or step.capacity is None:
        return None
    max_replicas = spec.autoscaling.max_replicas
    plan = step.plan
    if step.replicas != max_replicas and plan.fits:  # one that does not fit for one replica fits for none
        supply = step.capacity
        nodes = [p for p in supply.pools if not p.elastic_pool]  # the nodes that exist
        pools = capacity_pools(nodes, supply.elastic, supply.waiting, max_replicas, spec.gpu.allow_multi_node)
        plan = plan_placement(placement_request(spec, pools, default_image, replicas=max_replicas))
    if plan.fits:
        plan, _ = use_recording(plan, load_test, spec, spec.serving.image or default_image)
    placed = [v for v in plan.variants if v.replicas > 0] or list(plan.variants)
    return ScalingTargets(
        capacity=plan.replicas_planned,
        replica_concurrency=max((float(v.target_concurrency) for v in placed), default=1.0),
        replica_capacity=max((float(v.max_num_seqs) for v in placed), default=1.0),
        first_replica=_first_replica(placed),
    )


def _first_replica(placed: Sequence[Variant]) -> FirstReplica | None:
    if not placed:
        return None
    first = placed[0]
    on_new_node = first.new_node_replicas >= first.replicas > 0
    return first.gpu_product, on_new_node, tuple(first.node_pools)


def cold_start_fields(measured: float | None, kept: Any, to_zero: bool) -> tuple[float | None, float | None]:
    """``status.autoscaler``'s coldStartSeconds and wakeUpSeconds: the pods' measured cold start,
    else the one kept in status (at zero no pod is left to measure). 0 s is a measure (a replica
    Ready within its first second), not a missing one. The wake-up, only with minReplicas 0, adds
    the autoscaler's reaction."""
    if measured is None and isinstance(kept, (int, float)) and not isinstance(kept, bool) and kept >= 0:
        measured = float(kept)
    if measured is None:
        return None, None
    return round(measured, 1), round(measured + WAKE_REACTION_SECONDS, 1) if to_zero else None


def wake_up_note(first: FirstReplica | None) -> str:
    """``status.autoscaler.wakeUp``: where the first replica goes and what its wait includes."""
    if first is None:
        return "no GPU can host a replica now: a wake-up waits for GPUs (see the Planned condition)"
    gpu, on_new_node, pools = first
    if on_new_node:
        return (
            f"first replica on {gpu} from a node launched for it ({', '.join(pools) or 'node autoscaler'}): "
            "the wake-up includes the node's start; no GPU is held while at zero"
        )
    return f"first replica on free {gpu} GPUs of a running node (no node start); none is held while at zero"


def current_replicas(spec: GLMDeploymentSpec, status: Mapping[str, Any]) -> tuple[int, int]:
    """The replicas decided last (``status.desiredReplicas``, else minReplicas) and those ready."""
    assert spec.autoscaling is not None
    current = status.get("desiredReplicas")
    current = int(current) if isinstance(current, int) else spec.autoscaling.min_replicas
    return current, int(status.get("readyReplicas") or 0)


@dataclass(frozen=True)
class Scaled:
    """One decision of the autoscaler, as it is written and announced."""

    replicas: int
    current: int  # the replicas decided before
    status: dict[str, Any]  # status.desiredReplicas and status.autoscaler
    events: tuple[Event, ...]
    direction: str  # up, down, hold, or unavailable (no sample): the decisions metric


def scale(
    body: Mapping[str, Any],
    spec: GLMDeploymentSpec,
    targets: ScalingTargets,
    sample: QueueSample | None,
    pods: Sequence[Mapping[str, Any]],
    now: dt.datetime,
    wake_requested: bool = False,
) -> Scaled:
    """Decide for one GLMDeployment (see the module docstring); ``wake_requested``: a gateway got a
    request for its model."""
    assert spec.autoscaling is not None
    status = body.get("status") or {}
    auto_status = status.get("autoscaler") or {}
    measured = median_cold_start(pods)
    policy = AutoscalePolicy.from_spec(
        spec.autoscaling.model_dump(by_alias=True),
        replica_concurrency=targets.replica_concurrency,
        cold_start_seconds=measured or 0.0,
        replica_capacity=targets.replica_capacity,
    )
    try:
        state = ScalerState.from_dict(json.loads(auto_status.get("state") or "{}"))
    except ValueError:
        state = ScalerState()
    current, ready = current_replicas(spec, status)
    observed = ObservedReplicas(
        current=current, ready=min(ready, current), capacity=targets.capacity, wake_requested=wake_requested
    )
    decision = decide(sample, policy, state, now.timestamp(), observed)
    direction = (
        "unavailable" if sample is None
        else "up" if decision.replicas > current
        else "down" if decision.replicas < current
        else "hold"
    )  # fmt: skip
    to_zero = spec.autoscaling.min_replicas == 0
    cold_start, wake_up = cold_start_fields(measured, auto_status.get("coldStartSeconds"), to_zero)
    scaled_now = decision.replicas != current
    fields = autoscaler_fields(
        desired_replicas=decision.replicas,
        queue_length=sample.waiting if sample is not None else auto_status.get("queueLength"),
        reason=decision.reason,
        state=json.dumps(decision.state.to_dict(), separators=(",", ":")),
        last_scale_time=format_time(now) if scaled_now else auto_status.get("lastScaleTime"),
        cold_start_seconds=cold_start,
        wake_up_seconds=wake_up,
        wake_up=wake_up_note(targets.first_replica) if to_zero else None,
    )
    events: tuple[Event, ...] = ()
    if scaled_now:
        reason = "ScaledUp" if decision.replicas > current else "ScaledDown"
        message = f"{current} -> {decision.replicas} replicas: {decision.reason}"
        events = (Event("Normal", reason, message[:MAX_EVENT_MESSAGE]),)
    return Scaled(decision.replicas, current, fields, events, direction)
