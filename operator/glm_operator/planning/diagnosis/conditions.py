"""Status conditions and phase of a GLMDeployment (pure, kstatus-consistent).

``summarize`` derives Planned, Available, Progressing, Degraded and MetricsAvailable, and the phase,
from what the controller observed, so that Ready means exactly kstatus' "Current" and a stalled rollout
reads as stalled, not as in progress forever. ``set_condition`` moves ``lastTransitionTime`` only when a
status flips, as LeaderWorkerSet's ``setCondition`` does. docs/planning.md ("Status: conditions and
phase") has the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glm_operator.api.v1alpha1 import Phase
from glm_operator.planning.diagnosis.pods import CAPACITY_REASONS, Diagnosis

PLANNED = "Planned"
AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
METRICS_AVAILABLE = "MetricsAvailable"
CONDITION_ORDER: tuple[str, ...] = (PLANNED, AVAILABLE, PROGRESSING, DEGRADED, METRICS_AVAILABLE)

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"
_STATUSES = frozenset({TRUE, FALSE, UNKNOWN})

# metav1.Condition: reason matches this and is at most 1024 characters; message at most 32768.
_REASON_PATTERN = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
MAX_MESSAGE_LENGTH = 32768


@dataclass(frozen=True)
class MetricsStatus:
    """The autoscaler's metric source, as the controller saw it this round."""

    available: bool
    reason: str
    message: str = ""


def get_condition(conditions: Sequence[Mapping[str, Any]], type: str) -> dict[str, Any] | None:
    """A copy of the condition of ``type``, or None."""
    for condition in conditions:
        if condition.get("type") == type:
            return dict(condition)
    return None


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """A new list with the condition of ``type`` set; the input is not modified.

    ``lastTransitionTime`` is ``now`` for a new condition or a status flip and is kept otherwise
    (a changed reason or message alone is not a transition). A new type is appended.
    """
    if status not in _STATUSES:
        raise ValueError(f"condition status must be True, False or Unknown, got {status!r}")
    if not _REASON_PATTERN.match(reason) or len(reason) > 1024:
        raise ValueError(f"condition reason must be CamelCase ({_REASON_PATTERN.pattern}), got {reason!r}")
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 1] + "…"
    result: list[dict[str, Any]] = []
    found = False
    for existing in conditions:
        if existing.get("type") != type:
            result.append(dict(existing))
            continue
        found = True
        same_status = existing.get("status") == status and existing.get("lastTransitionTime")
        result.append(
            _condition(
                type,
                status,
                reason,
                message,
                observed_generation,
                str(existing["lastTransitionTime"]) if same_status else now,
            )
        )
    if not found:
        result.append(_condition(type, status, reason, message, observed_generation, now))
    return result


def _condition(
    type: str, status: str, reason: str, message: str, observed_generation: int, last_transition_time: str
) -> dict[str, Any]:
    return {
        "type": type,
        "status": status,
        "observedGeneration": observed_generation,
        "lastTransitionTime": last_transition_time,
        "reason": reason,
        "message": message,
    }


def remove_condition(conditions: Sequence[Mapping[str, Any]], type: str) -> list[dict[str, Any]]:
    return [dict(condition) for condition in conditions if condition.get("type") != type]


def is_ready(conditions: Sequence[Mapping[str, Any]], generation: int) -> bool:
    """kstatus "Current": Available True, Progressing False, Degraded False, all up to date."""
    wanted = {AVAILABLE: TRUE, PROGRESSING: FALSE, DEGRADED: FALSE}
    for type, status in wanted.items():
        condition = get_condition(conditions, type)
        if condition is None or condition.get("status") != status:
            return False
        if condition.get("observedGeneration") != generation:
            return False
    return True


def _ordered(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ours in CONDITION_ORDER first, then any other type in its previous order (stable status)."""
    rank = {type: index for index, type in enumerate(CONDITION_ORDER)}
    return sorted(conditions, key=lambda c: rank.get(str(c.get("type")), len(rank)))


def _degraded_message(degraded: Sequence[Diagnosis]) -> str:
    parts = []
    for diagnosis in degraded:
        more = ", …" if len(diagnosis.pods) > 3 else ""
        pods = f" [{', '.join(diagnosis.pods[:3])}{more}]" if diagnosis.pods else ""
        parts.append(f"{diagnosis.reason}: {diagnosis.message} Fix: {diagnosis.fix}{pods}")
    return " | ".join(parts)


def summarize(
    plan_ok: bool | None,
    plan_reason: str,
    desired: int,
    ready: int,
    updated: int,
    degraded: Sequence[Diagnosis],
    generation: int,
    previous_conditions: Sequence[Mapping[str, Any]],
    now: str,
    *,
    plan_message: str = "",
    metrics: MetricsStatus | None = None,
) -> tuple[Phase, list[dict[str, Any]]]:
    """Phase and conditions from the plan outcome, replica counts and diagnoses.

    ``plan_ok``: True planned, False rejected, None not planned yet for this generation.
    ``plan_reason``/``plan_message``: the planner's CamelCase reason and explanation.
    ``desired``/``ready``/``updated``: replicas summed over all variants (updated = running the
    current spec hash). ``degraded``: ``diagnose_pods`` output. ``now``: RFC 3339 timestamp.
    """
    ever_planned = get_condition(previous_conditions, PLANNED) is not None
    conditions = [dict(c) for c in previous_conditions]

    def put(type: str, status: str, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(conditions, type, status, reason, message, generation, now)

    put(PLANNED, *_planned(plan_ok, plan_reason, plan_message))
    put(AVAILABLE, *_available(plan_ok, desired, ready))
    put(PROGRESSING, *_progressing(plan_ok, desired, ready, updated, degraded))
    put(DEGRADED, *_degraded(plan_ok, plan_reason, plan_message, degraded))
    if metrics is None:
        conditions = remove_condition(conditions, METRICS_AVAILABLE)
    else:
        put(METRICS_AVAILABLE, TRUE if metrics.available else FALSE, metrics.reason, metrics.message)

    conditions = _ordered(conditions)
    return _phase(plan_ok, ever_planned, desired, ready, degraded, conditions, generation), conditions


# (status, reason, message) of one condition
_Condition = tuple[str, str, str]


def _planned(plan_ok: bool | None, plan_reason: str, plan_message: str) -> _Condition:
    """Planned: Unknown until this generation is planned, then whether the planner found variants."""
    if plan_ok is None:
        return UNKNOWN, plan_reason or "PlanPending", plan_message or "Waiting for a plan."
    if plan_ok:
        return TRUE, plan_reason or "Planned", plan_message
    return FALSE, plan_reason or "PlanFailed", plan_message


def _available(plan_ok: bool | None, desired: int, ready: int) -> _Condition:
    """Available: every desired replica ready (replicas of an earlier plan count while re-planning)."""
    replicas_text = f"{ready}/{desired} replicas ready"
    if plan_ok is not True and ready < max(desired, 1):
        return FALSE, "NotPlanned" if plan_ok is None else "PlanFailed", replicas_text
    if ready >= desired:
        return TRUE, "ScaledToZero" if desired == 0 else "AllReplicasReady", replicas_text
    return FALSE, "ReplicasNotReady", replicas_text


def _progressing(
    plan_ok: bool | None, desired: int, ready: int, updated: int, degraded: Sequence[Diagnosis]
) -> _Condition:
    """Progressing: planning, rolling out, waiting for or scaling down replicas, stalled or complete."""
    if plan_ok is None:
        return TRUE, "Planning", "Computing a plan for this generation."
    if plan_ok is False:
        return FALSE, "PlanFailed", "No rollout until the plan succeeds."
    replicas_text = f"{ready}/{desired} replicas ready"
    moving = updated < desired or ready != desired
    if degraded and moving:
        return FALSE, "RolloutStalled", f"{updated}/{desired} replicas updated, {replicas_text}."
    if updated < desired:
        return TRUE, "RollingOut", f"{updated}/{desired} replicas updated, {replicas_text}."
    if ready < desired:
        return TRUE, "WaitingForReplicas", f"{replicas_text}."
    if ready > desired:
        return TRUE, "ScalingDown", f"{replicas_text}."
    return FALSE, "RolloutComplete", f"{replicas_text}."


def _degraded(
    plan_ok: bool | None, plan_reason: str, plan_message: str, degraded: Sequence[Diagnosis]
) -> _Condition:
    """Degraded: the plan failed, or the first diagnosis (all of them in the message)."""
    if plan_ok is False:
        return TRUE, plan_reason or "PlanFailed", plan_message
    if plan_ok is None or not degraded:
        return FALSE, "AsExpected", ""
    return TRUE, degraded[0].reason, _degraded_message(degraded)


def _phase(
    plan_ok: bool | None,
    ever_planned: bool,
    desired: int,
    ready: int,
    degraded: Sequence[Diagnosis],
    conditions: Sequence[Mapping[str, Any]],
    generation: int,
) -> Phase:
    if plan_ok is None:
        return Phase.PLANNING if ever_planned else Phase.PENDING
    if plan_ok is False:
        return Phase.FAILED
    needs_spec_change = any(d.reason not in CAPACITY_REASONS for d in degraded)
    if degraded and ready == 0 and desired > 0 and needs_spec_change:
        return Phase.FAILED
    if degraded:
        return Phase.DEGRADED
    if is_ready(conditions, generation):
        return Phase.READY
    return Phase.DEPLOYING
