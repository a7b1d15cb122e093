"""Step 5 of the pipeline: the Events of a pass (pure). Only what changed since the previous status
is announced, so a resync or a pod event posts nothing new."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.desired.model import Event
from glm_operator.desired.plan import PlanStep, plan_summary
from glm_operator.planning.diagnosis.conditions import DEGRADED, PLANNED, get_condition
from glm_operator.planning.diagnosis.pods import Diagnosis
from glm_operator.planning.placement.result import Variant


def failure_events(previous_status: Mapping[str, Any], reason: str, message: str) -> tuple[Event, ...]:
    previous = get_condition(previous_status.get("conditions") or [], PLANNED) or {}
    if previous.get("status") != "False" or previous.get("message") != message:
        return (Event("Warning", reason, message),)
    return ()


def plan_events(
    previous_status: Mapping[str, Any],
    step: PlanStep,
    placed: Sequence[Variant],
    degraded: Sequence[Diagnosis],
    limits: str,
) -> tuple[Event, ...]:
    assert step.plan is not None
    plan = step.plan
    summary = plan_summary(plan)
    events: list[Event] = []
    if (previous_status.get("plan") or {}).get("summary") != summary:
        detail = " ".join(v.reason + "".join(f" Note: {n}." for n in v.notes) for v in placed)
        events.append(Event("Normal", "Planned", f"{summary}. {detail}"[:1000]))
        if step.image_check.warning is not None:
            events.append(Event("Warning", "VLLMImageUnchecked", step.image_check.warning))
        if plan.shortfall_replicas:
            events.append(
                Event(
                    "Warning",
                    "InsufficientGPU",
                    f"{plan.shortfall_replicas} of {step.replicas} replicas cannot be placed on free GPUs"
                    + (f" ({limits})" if limits else "")
                    + "; their pods stay Pending. Add GPU nodes, allow more gpu.products, or lower replicas.",
                )
            )
        new_nodes = [v for v in placed if v.new_node_replicas]
        if new_nodes:
            events.append(
                Event(
                    "Normal",
                    "WaitingForNodes",
                    "; ".join(
                        f"{v.new_node_replicas} {v.gpu_product} replica(s) wait for new nodes from "
                        f"{', '.join(v.node_pools)}"
                        for v in new_nodes
                    ),
                )
            )
    previous_degraded = get_condition(previous_status.get("conditions") or [], DEGRADED) or {}
    for d in degraded:
        if previous_degraded.get("reason") != d.reason or previous_degraded.get("status") != "True":
            events.append(Event("Warning", d.reason, f"{d.message} Fix: {d.fix}"))
    return tuple(events)
