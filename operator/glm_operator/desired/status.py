"""The GLMDeployment's status, built here and nowhere else (pure).

Every status the operator writes is a ``GLMDeploymentStatus`` (the API model) turned into its wire
form: after a plan (``planned_status``), when nothing could be planned (``failed_status``), when the
apiserver refused a child (``with_rejections``), and the autoscaler's two fields
(``autoscaler_fields``). One writer per field: with ``spec.autoscaling`` and a running autoscaler,
``desiredReplicas`` and ``autoscaler`` belong to the autoscaler and the reconciler leaves them out
(``own_fields``), so a reconcile working from an older read never reverts a decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.api.v1alpha1 import (
    AutoscalerStatus,
    Condition,
    ConsideredShape,
    GLMDeploymentStatus,
    Phase,
    PlanStatus,
    PlanVariant,
    PredictedSpeed,
    RejectedVariant,
)
from glm_operator.desired.children import replica_sum
from glm_operator.desired.model import Observed, SpeedChoice
from glm_operator.desired.plan import plan_summary
from glm_operator.planning.diagnosis.conditions import set_condition, summarize
from glm_operator.planning.diagnosis.pods import Diagnosis, diagnose_pods
from glm_operator.planning.placement.result import Plan, Variant
from glm_operator.render import names

AUTOSCALER_FIELDS = frozenset({"desiredReplicas", "autoscaler"})
MAX_EVENT_MESSAGE = 1000


def plan_status(plan: Plan, image: str | None = None, speed: SpeedChoice | None = None) -> PlanStatus:
    """``status.plan``; ``image`` and ``speed`` (source, reason) once the plan fits."""
    return PlanStatus(
        image=image,
        speed_source=speed.source if speed else None,
        speed_source_reason=speed.reason if speed else None,
        variants=[plan_variant(v) for v in plan.variants],
        rejected=[RejectedVariant(gpu_product=r.gpu_product, reason=r.reason) for r in plan.rejected],
        summary=plan_summary(plan),
        fixes=[f.describe() for f in plan.fixes],
        license=plan.license or None,
    )


def plan_variant(v: Variant) -> PlanVariant:
    """One ``status.plan.variants[]`` entry."""
    return PlanVariant(
        gpu_product=v.gpu_product,
        tensor_parallel_size=v.tensor_parallel_size,
        pipeline_parallel_size=v.pipeline_parallel_size,
        decode_context_parallel_size=v.decode_context_parallel_size,
        data_parallel_size=v.data_parallel_size,
        speculative_tokens=v.speculative_tokens,
        max_num_batched_tokens=v.max_num_batched_tokens,
        gpus_per_replica=v.gpus_per_replica,
        nodes_per_replica=v.nodes_per_replica,
        quantization=v.quantization,
        kv_cache_dtype=v.kv_cache_dtype,
        weights_gib_per_gpu=round(v.weights_gib_per_gpu, 2),
        kv_cache_tokens=v.kv_cache_tokens,
        max_concurrency=round(v.max_concurrency, 2),
        max_num_seqs=v.max_num_seqs,
        replicas=v.replicas,
        new_node_replicas=v.new_node_replicas,
        node_pools=list(v.node_pools),
        reason=v.reason,
        checkpoint=v.model_id + (f" --quantization {v.quantization_flag}" if v.quantization_flag else ""),
        notes=list(v.notes),
        predicted=_predicted(v),
        measured_knee_concurrency=v.measured_knee_concurrency or None,
        considered=[
            ConsideredShape(
                shape=c.shape,
                quantization=c.quantization,
                tensor_parallel_size=c.tensor_parallel_size,
                pipeline_parallel_size=c.pipeline_parallel_size,
                decode_context_parallel_size=c.decode_context_parallel_size,
                data_parallel_size=c.data_parallel_size,
                speculative_tokens=c.speculative_tokens,
                gpu_memory_utilization=c.gpu_memory_utilization,
                max_num_batched_tokens=c.max_num_batched_tokens,
                gpus=c.gpus,
                max_concurrency=round(c.max_concurrency, 2),
                max_num_seqs=c.max_num_seqs,
                output_tokens_per_second_per_gpu=round(c.tokens_per_s_per_gpu, 1),
                meets_slo=c.meets_slo,
                first_fit=c.first_fit,
                chosen=c.chosen,
                lost=c.lost or None,
            )
            for c in v.considered
        ],
    )


def _predicted(v: Variant) -> PredictedSpeed | None:
    if v.speed is None:
        return None
    workload = v.speed.workload
    return PredictedSpeed(
        concurrency=workload.concurrency,
        input_tokens=workload.input_tokens,
        output_tokens=workload.output_tokens,
        output_tokens_per_second=round(v.speed.output_tokens_per_s, 1),
        output_tokens_per_second_per_gpu=round(v.speed.output_tokens_per_s_per_gpu, 1),
        itl_milliseconds=round(v.speed.itl_s * 1000, 2),
        ttft_milliseconds=round(v.speed.ttft_s * 1000, 1),
        knee_concurrency=v.knee_concurrency or None,
    )


def _conditions(conditions: Sequence[Mapping[str, Any]]) -> list[Condition]:
    return [Condition.model_validate(c) for c in conditions]


def _counts(observed: Observed, children: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "observed_generation": observed.generation,
        "replicas": replica_sum(children, "replicas"),
        "ready_replicas": replica_sum(children, "readyReplicas"),
        "selector": names.selector_string(names.service_selector(str(observed.body["metadata"]["name"]))),
    }


def failed_status(
    observed: Observed, reason: str, message: str, plan: Plan | None, replicas: int | None
) -> GLMDeploymentStatus:
    """Nothing could be planned: create nothing, keep what runs, say why (Planned=False)."""
    phase, conditions = summarize(
        False, reason, 0, replica_sum(observed.children, "readyReplicas"), 0, diagnose_pods(observed.pods),
        observed.generation, list(observed.previous_status.get("conditions") or []), observed.now,
        plan_message=message, metrics=observed.metrics,
    )  # fmt: skip
    return GLMDeploymentStatus(
        **_counts(observed, observed.children),
        phase=phase,
        conditions=_conditions(conditions),
        plan=plan_status(plan) if plan is not None else None,
        desired_replicas=replicas if plan is not None else None,
    )


def planned_status(
    observed: Observed,
    *,
    plan: Plan,
    placed: Sequence[Variant],
    kept: Sequence[Mapping[str, Any]],
    updated: int,
    degraded: Sequence[Diagnosis],
    replicas: int,
    served_model_name: str,
    image: str | None = None,
    speed: SpeedChoice | None = None,
) -> GLMDeploymentStatus:
    """After a fitting plan: replica counts of the children that remain, conditions, the plan."""
    ready = replica_sum(kept, "readyReplicas")
    planned = sum(v.replicas for v in placed)
    phase, conditions = summarize(
        True, "Planned", planned, ready, updated, degraded, observed.generation,
        list(observed.previous_status.get("conditions") or []), observed.now,
        plan_message=plan_summary(plan), metrics=observed.metrics,
    )  # fmt: skip
    return GLMDeploymentStatus(
        **{**_counts(observed, observed.children), "ready_replicas": ready},
        phase=phase,
        conditions=_conditions(conditions),
        plan=plan_status(plan, image, speed),
        desired_replicas=replicas,
        model=served_model_name,
        gpu=", ".join(f"{v.replicas}x {v.gpu_product}" for v in placed) or "-",
        tensor_parallel_size=",".join(str(v.tensor_parallel_size) for v in placed) or "-",
        quantization=",".join(sorted({v.quantization for v in placed})) or "-",
    )


def wire(status: GLMDeploymentStatus) -> dict[str, Any]:
    """The status as the apiserver stores it (camelCase, unset fields left out)."""
    return status.to_wire()


def own_fields(
    body: Mapping[str, Any], status: Mapping[str, Any], autoscaler_running: bool
) -> dict[str, Any]:
    """The fields the reconciler writes: not the autoscaler's while it runs for this object."""
    if autoscaler_running and (body.get("spec") or {}).get("autoscaling"):
        return {k: v for k, v in status.items() if k not in AUTOSCALER_FIELDS}
    return dict(status)


def rejection_message(kind: str, name: str, error: str) -> str:
    return f"the apiserver rejected {kind} {name}: {error}"[:MAX_EVENT_MESSAGE]


def with_rejections(
    observed: Observed,
    status: Mapping[str, Any],
    rejected: Sequence[tuple[str, str, str]],
    pod_monitor_kind: str,
) -> dict[str, Any]:
    """Degraded=True, reason ChildRejected, with the apiserver's own message and field.
    ``rejected``: (kind, name, the apiserver's one-line error) of each refused child."""
    fixes = []
    if any(kind != pod_monitor_kind for kind, _, _ in rejected):
        fixes.append(
            "Fix the spec field that renders into it (spec.serving: env, resources, tolerations, "
            "nodeSelector, image)."
        )
    if any(kind == pod_monitor_kind for kind, _, _ in rejected):
        fixes.append(
            "PodMonitor: install the prometheus-operator CRDs (monitoring.coreos.com/v1), or run the "
            "operator with --pod-monitor=auto or off (chart value prometheus.podMonitor)."
        )
    message = "; ".join(rejection_message(*r) for r in rejected) + ". " + " ".join(fixes)
    conditions = set_condition(
        status.get("conditions") or [], "Degraded", "True", "ChildRejected", message, observed.generation,
        observed.now,
    )  # fmt: skip
    return {**status, "phase": str(Phase.FAILED), "conditions": conditions}


def autoscaler_fields(
    desired_replicas: int,
    queue_length: float | None,
    reason: str,
    state: str,
    last_scale_time: str | None,
    cold_start_seconds: float | None = None,
    wake_up_seconds: float | None = None,
    wake_up: str | None = None,
) -> dict[str, Any]:
    """The autoscaler's part of the status (it is their only writer)."""
    status = GLMDeploymentStatus(
        desired_replicas=desired_replicas,
        autoscaler=AutoscalerStatus(
            queue_length=queue_length,
            reason=reason[:MAX_EVENT_MESSAGE],
            state=state,
            last_scale_time=last_scale_time,
            cold_start_seconds=cold_start_seconds,
            wake_up_seconds=wake_up_seconds,
            wake_up=wake_up,
        ),
    )
    return {k: v for k, v in status.to_wire().items() if k in AUTOSCALER_FIELDS}


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` would change any field of ``old``."""
    return any(old.get(k) != v for k, v in new.items())
