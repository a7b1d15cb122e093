"""From what was observed to what should be: the desired-state pipeline (pure).

``compute_desired(observed) -> Desired`` is a purely computational function with no side effects.
The GLMDeployment reconciler gathers ``Observed`` from its caches, calls this in a thread, and only
then does I/O (apply, prune, status, Events). Tests call it on whole scenarios without a cluster.

The steps, one module each:

1. ``plan``: the spec (validated once, by the API models) and the GPU supply -> a plan, or a
   failure naming the field and the fix. A plan that does not fit creates nothing; children of an
   earlier, fitting generation keep running (a bad edit must not take down a serving model).
   ``measured_speed``: a recorded load test on the shape served replaces the modelled knee.
2. ``children``: the plan's variants -> Deployments / LeaderWorkerSets, Service, PDB, PodMonitor.
   Replicas the free GPUs cannot host (the plan's shortfall) still go to the preferred GPU type:
   their pods stay Pending and Degraded says how many and why. ``inference_pool``: with
   ``spec.inferencePool``, an InferencePool and its endpoint picker.
3. ``prune``: children the plan no longer wants, make before break.
4. ``findings``: why replicas do not serve (with ``planning.diagnosis`` for the pods).
5. ``status`` and ``events``: the typed status, and Events for what changed since the last one.
6. ``scaling``: with ``spec.autoscaling``, what the autoscaler scales on (the plan's capacity up to
   maxReplicas, its knee); the autoscaler also turns its decisions into status there.
"""

from __future__ import annotations

import dataclasses

from pydantic import ValidationError

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.desired import events as events_step
from glm_operator.desired import status as status_step
from glm_operator.desired.children import (
    render_children,
    replica_sum,
    served_model_name,
    updated_replicas,
    workload_context,
)
from glm_operator.desired.findings import (
    LWS_MISSING,
    outage_findings,
    pods_waiting_for_nodes,
    shortfall_finding,
)
from glm_operator.desired.inference_pool import (
    inference_pool_objects,
    inference_pool_prune,
    inference_pool_status,
)
from glm_operator.desired.inference_pool import wire_status as with_inference_pool
from glm_operator.desired.measured_speed import speed_source_events, use_recording
from glm_operator.desired.model import (
    WORKLOAD_KIND_NAMES,
    WORKLOAD_KINDS,
    Desired,
    Event,
    Observed,
    ScalingTargets,
)
from glm_operator.desired.plan import PlanStep, placed_variants, plan_step, plan_summary
from glm_operator.desired.prune import children_to_prune, kept_children
from glm_operator.desired.scaling import scaling_targets
from glm_operator.planning.diagnosis.pods import diagnose_pods
from glm_operator.planning.placement.compatibility import request_model
from glm_operator.planning.supply.capacity import pool_limits_note
from glm_operator.planning.supply.outages import next_expiry

__all__ = ["WORKLOAD_KINDS", "WORKLOAD_KIND_NAMES", "Desired", "Event", "Observed", "compute_desired"]


def _failed(
    observed: Observed,
    reason: str,
    message: str,
    step: PlanStep | None = None,
    scaling: ScalingTargets | None = None,
) -> Desired:
    plan = step.plan if step is not None else None
    replicas = step.replicas if step is not None else None
    status = status_step.failed_status(observed, reason, message, plan, replicas)
    return Desired(
        plan=plan,
        objects=(),
        prune=(),
        status=status_step.wire(status),
        events=events_step.failure_events(observed.previous_status, reason, message),
        scaling=scaling,
    )


def compute_desired(observed: Observed) -> Desired:
    try:
        spec = spec_from_dict(observed.body.get("spec") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.get("loc", ()))
        return _failed(observed, "InvalidSpec", f"{where}: {first.get('msg')}")

    step = plan_step(observed, spec)
    image = spec.serving.image or observed.default_image
    scaling = scaling_targets(spec, step, observed.default_image, observed.load_test)
    if step.failure is not None:
        return _failed(observed, step.failure.reason, step.failure.message, step, scaling)
    assert step.plan is not None and step.request is not None and step.capacity is not None
    capacity, request = step.capacity, step.request
    plan, speed = use_recording(step.plan, observed.load_test, spec, image)
    step = dataclasses.replace(step, plan=plan)

    placed = placed_variants(plan)
    findings = outage_findings([step.outages[n] for n in sorted(step.held)], observed.node_grace_seconds)
    if not observed.lws_available and any(v.nodes_per_replica > 1 for v in placed):
        findings.append(LWS_MISSING)
        placed = [v for v in placed if v.nodes_per_replica == 1]
    limits = pool_limits_note(capacity.elastic, [v.gpu_product for v in plan.variants])
    findings += shortfall_finding(plan.shortfall_replicas, step.replicas, limits)

    model = request_model(request)
    defaults = model.serving_defaults if model is not None else None
    summary = plan_summary(plan)
    contexts = [
        workload_context(observed.body, spec, v, observed.default_image, summary, defaults) for v in placed
    ]
    objects = render_children(contexts, spec, observed.pod_monitor)
    pool_objects = inference_pool_objects(contexts, spec, observed.inference_pool_api)

    kept = kept_children(observed.children, objects)
    planned = sum(v.replicas for v in placed)
    prune = children_to_prune(
        observed.children,
        observed.pod_monitors,
        objects,
        spec_unchanged=observed.previous_status.get("observedGeneration") == observed.generation,
        replacements_ready=replica_sum(kept, "readyReplicas") >= planned,
    ) + inference_pool_prune(observed.inference_pool_children, pool_objects)
    waiting = pods_waiting_for_nodes(observed, placed, {w.name for w in capacity.waiting})
    degraded = findings + diagnose_pods(
        [p for p in observed.pods if str((p.get("metadata") or {}).get("name", "")) not in waiting]
    )
    status = status_step.planned_status(
        observed,
        plan=plan,
        placed=placed,
        kept=kept,
        updated=updated_replicas(kept, objects),
        degraded=degraded,
        replicas=step.replicas,
        served_model_name=served_model_name(spec),
        image=image,
        speed=speed,
    )
    expiry = next_expiry((step.outages[n] for n in step.held), step.now, step.held)
    pool_status = inference_pool_status(observed, spec, pool_objects)
    return Desired(
        plan=plan,
        objects=(*objects, *pool_objects),
        prune=prune,
        status=with_inference_pool(observed, status_step.wire(status), pool_status),
        events=events_step.plan_events(observed.previous_status, step, placed, degraded, limits)
        + speed_source_events(observed.previous_status.get("plan") or {}, speed),
        requeue_after=None if expiry is None else expiry + 1.0,
        scaling=scaling,
    )
