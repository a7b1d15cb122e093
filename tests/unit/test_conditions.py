"""Conditions and phase: setCondition semantics and whole reconcile sequences."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glm_operator.planning.diagnosis.conditions import (
    AVAILABLE,
    DEGRADED,
    METRICS_AVAILABLE,
    PLANNED,
    PROGRESSING,
    MetricsStatus,
    Phase,
    get_condition,
    is_ready,
    set_condition,
    summarize,
)
from glm_operator.planning.diagnosis.pods import Diagnosis

T0, T1, T2, T3 = (
    "2026-11-30T10:00:00Z",
    "2026-11-30T10:01:00Z",
    "2026-11-30T10:02:00Z",
    "2026-11-30T10:03:00Z",
)

KV_TOO_SMALL = Diagnosis(
    "KVCacheTooSmall", "No GPU memory is left for the KV cache.", "Raise TP.", ("p1", "p2")
)
NO_GPU = Diagnosis(
    "InsufficientGPU", "Insufficient GPUs of type H100: 1 replica pending", "Add nodes.", ("p3",)
)


def statuses(conditions: list[dict[str, Any]]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in conditions}


def test_set_condition_new_and_returns_new_list() -> None:
    original: list[dict[str, Any]] = []
    result = set_condition(original, "Available", "False", "ReplicasNotReady", "0/1", 1, T0)
    assert original == []
    assert result == [
        {
            "type": "Available",
            "status": "False",
            "observedGeneration": 1,
            "lastTransitionTime": T0,
            "reason": "ReplicasNotReady",
            "message": "0/1",
        }
    ]


def test_set_condition_transition_time_moves_only_on_status_flip() -> None:
    conditions = set_condition([], "Available", "False", "ReplicasNotReady", "0/2", 1, T0)
    same = set_condition(conditions, "Available", "False", "ReplicasNotReady", "1/2", 2, T1)
    assert same[0]["lastTransitionTime"] == T0
    assert same[0]["message"] == "1/2" and same[0]["observedGeneration"] == 2
    flipped = set_condition(same, "Available", "True", "AllReplicasReady", "2/2", 2, T2)
    assert flipped[0]["lastTransitionTime"] == T2
    assert conditions[0]["message"] == "0/2"  # input untouched


def test_set_condition_keeps_other_conditions_and_order() -> None:
    conditions = set_condition([], "A", "True", "X", "", 1, T0)
    conditions = set_condition(conditions, "B", "True", "X", "", 1, T0)
    updated = set_condition(conditions, "A", "False", "Y", "", 1, T1)
    assert [c["type"] for c in updated] == ["A", "B"]
    assert updated[1] == conditions[1]


@pytest.mark.parametrize(
    ("status", "reason"), [("Yes", "Fine"), ("True", "not camel"), ("True", ""), ("True", "Bad-Reason")]
)
def test_set_condition_validates(status: str, reason: str) -> None:
    with pytest.raises(ValueError):
        set_condition([], "Available", status, reason, "", 1, T0)


def test_long_messages_are_truncated() -> None:
    [condition] = set_condition([], "Degraded", "True", "CrashLoop", "x" * 40000, 1, T0)
    assert len(condition["message"]) == 32768


def test_sequence_create_plan_deploy_ready_scale_and_degrade() -> None:
    """A whole life: new object, planned, pods coming up, ready, crash, recovered, new generation."""
    # 1. created, not planned yet
    phase, conds = summarize(None, "", 0, 0, 0, [], 1, [], T0)
    assert phase is Phase.PENDING
    assert statuses(conds) == {PLANNED: "Unknown", AVAILABLE: "False", PROGRESSING: "True", DEGRADED: "False"}

    # 2. planned, 2 replicas requested, none ready
    phase, conds = summarize(True, "Planned", 2, 0, 2, [], 1, conds, T1)
    assert phase is Phase.DEPLOYING
    assert statuses(conds) == {PLANNED: "True", AVAILABLE: "False", PROGRESSING: "True", DEGRADED: "False"}
    assert get_condition(conds, PROGRESSING)["reason"] == "WaitingForReplicas"  # type: ignore[index]
    assert get_condition(conds, PLANNED)["lastTransitionTime"] == T1  # type: ignore[index]

    # 3. all ready: kstatus Current
    phase, conds = summarize(True, "Planned", 2, 2, 2, [], 1, conds, T2)
    assert phase is Phase.READY
    assert statuses(conds) == {PLANNED: "True", AVAILABLE: "True", PROGRESSING: "False", DEGRADED: "False"}
    assert is_ready(conds, 1)
    assert get_condition(conds, PROGRESSING)["reason"] == "RolloutComplete"  # type: ignore[index]
    assert all(c["observedGeneration"] == 1 for c in conds)
    ready_conditions = conds

    # 4. same observation again: nothing moves
    phase, again = summarize(True, "Planned", 2, 2, 2, [], 1, conds, T3)
    assert phase is Phase.READY and again == ready_conditions

    # 5. spec change (generation 2): replanning, then rolling out
    phase, conds = summarize(None, "Replanning", 2, 2, 2, [], 2, conds, T3)
    assert phase is Phase.PLANNING
    assert not is_ready(conds, 2)
    phase, conds = summarize(True, "Planned", 2, 1, 0, [], 2, conds, T3)
    assert phase is Phase.DEPLOYING
    assert get_condition(conds, PROGRESSING)["reason"] == "RollingOut"  # type: ignore[index]

    # 6. new pods crash with a KV cache error while one old replica still serves
    phase, conds = summarize(True, "Planned", 2, 1, 1, [KV_TOO_SMALL], 2, conds, T3)
    assert phase is Phase.DEGRADED
    assert statuses(conds) == {PLANNED: "True", AVAILABLE: "False", PROGRESSING: "False", DEGRADED: "True"}
    degraded = get_condition(conds, DEGRADED)
    assert degraded is not None
    assert degraded["reason"] == "KVCacheTooSmall"
    assert "Raise TP." in degraded["message"] and "[p1, p2]" in degraded["message"]
    assert get_condition(conds, PROGRESSING)["reason"] == "RolloutStalled"  # type: ignore[index]


def test_no_ready_replica_and_config_error_is_failed() -> None:
    phase, conds = summarize(True, "Planned", 1, 0, 1, [KV_TOO_SMALL], 1, [], T0)
    assert phase is Phase.FAILED
    assert statuses(conds)[DEGRADED] == "True"


def test_capacity_only_problem_is_degraded_not_failed() -> None:
    phase, _ = summarize(True, "Planned", 1, 0, 1, [NO_GPU], 1, [], T0)
    assert phase is Phase.DEGRADED


def test_plan_failure() -> None:
    phase, conds = summarize(
        False, "NoGPUTypeFits", 0, 0, 0, [], 3, [], T0, plan_message="contextLength 1048576 fits nowhere"
    )
    assert phase is Phase.FAILED
    assert statuses(conds) == {PLANNED: "False", AVAILABLE: "False", PROGRESSING: "False", DEGRADED: "True"}
    planned = get_condition(conds, PLANNED)
    assert planned is not None and planned["reason"] == "NoGPUTypeFits"
    assert planned["message"] == "contextLength 1048576 fits nowhere"
    assert get_condition(conds, DEGRADED)["reason"] == "NoGPUTypeFits"  # type: ignore[index]
    assert all(c["observedGeneration"] == 3 for c in conds)


def test_scaled_to_zero_is_ready() -> None:
    phase, conds = summarize(True, "Planned", 0, 0, 0, [], 1, [], T0)
    assert phase is Phase.READY
    assert get_condition(conds, AVAILABLE)["reason"] == "ScaledToZero"  # type: ignore[index]


def test_scaling_down_is_progressing() -> None:
    phase, conds = summarize(True, "Planned", 1, 2, 1, [], 1, [], T0)
    assert phase is Phase.DEPLOYING
    assert get_condition(conds, PROGRESSING)["reason"] == "ScalingDown"  # type: ignore[index]
    assert statuses(conds)[AVAILABLE] == "True"


def test_metrics_condition_present_only_with_autoscaling() -> None:
    metrics = MetricsStatus(False, "PrometheusUnreachable", "connection refused")
    _, conds = summarize(True, "Planned", 1, 1, 1, [], 1, [], T0, metrics=metrics)
    assert [c["type"] for c in conds] == [PLANNED, AVAILABLE, PROGRESSING, DEGRADED, METRICS_AVAILABLE]
    assert get_condition(conds, METRICS_AVAILABLE)["status"] == "False"  # type: ignore[index]
    _, conds = summarize(True, "Planned", 1, 1, 1, [], 1, conds, T1)
    assert get_condition(conds, METRICS_AVAILABLE) is None


def test_foreign_conditions_are_kept_after_ours() -> None:
    previous = [{"type": "Custom", "status": "True", "reason": "X", "message": "", "lastTransitionTime": T0}]
    _, conds = summarize(True, "Planned", 1, 1, 1, [], 1, previous, T1)
    assert [c["type"] for c in conds] == [PLANNED, AVAILABLE, PROGRESSING, DEGRADED, "Custom"]


def test_is_ready_requires_current_generation() -> None:
    _, conds = summarize(True, "Planned", 1, 1, 1, [], 1, [], T0)
    assert is_ready(conds, 1)
    assert not is_ready(conds, 2)
    assert not is_ready([], 1)


@given(
    plan_ok=st.sampled_from([True, False, None]),
    desired=st.integers(0, 5),
    ready=st.integers(0, 6),
    updated=st.integers(0, 5),
    diagnosed=st.lists(st.sampled_from([KV_TOO_SMALL, NO_GPU]), max_size=2, unique=True),
    generation=st.integers(1, 9),
)
def test_phase_and_conditions_are_kstatus_consistent(
    plan_ok: bool | None, desired: int, ready: int, updated: int, diagnosed: list[Diagnosis], generation: int
) -> None:
    phase, conds = summarize(plan_ok, "Reason", desired, ready, updated, diagnosed, generation, [], T0)
    s = statuses(conds)
    assert set(s) == {PLANNED, AVAILABLE, PROGRESSING, DEGRADED}
    assert all(c["observedGeneration"] == generation for c in conds)
    # Ready phase <=> kstatus Current
    assert (phase is Phase.READY) == is_ready(conds, generation)
    if phase is Phase.READY:
        assert s == {PLANNED: "True", AVAILABLE: "True", PROGRESSING: "False", DEGRADED: "False"}
    # Degraded/Failed always say why
    if phase in (Phase.DEGRADED, Phase.FAILED):
        assert s[DEGRADED] == "True"
    if s[DEGRADED] == "True":
        assert phase in (Phase.DEGRADED, Phase.FAILED)
    # a stalled rollout is not reported as progressing
    if diagnosed and plan_ok:
        assert not (
            s[PROGRESSING] == "True" and s[DEGRADED] == "True" and (updated < desired or ready != desired)
        )
    if phase is Phase.DEPLOYING:
        assert s[PROGRESSING] == "True"
