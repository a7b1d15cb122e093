"""decide() with minReplicas 0: to zero only after idleSeconds of no load, back to one on a wake-up."""

from __future__ import annotations

import json

import pytest

from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    Decision,
    ObservedReplicas,
    QueueSample,
    ScalerState,
    decide,
)
from tests.unit.test_autoscale import make_policy

INTERVAL = 15.0


def policy(**overrides: object) -> AutoscalePolicy:
    zero: dict[str, object] = {"min_replicas": 0, "max_replicas": 4, "idle_seconds": 120.0}
    return make_policy(**{"scale_down_stabilization_seconds": 60, **zero, **overrides})


def run(
    p: AutoscalePolicy, loads: list[float | None], start: int, wake_at: frozenset[int] = frozenset()
) -> list[Decision]:
    """One decision per interval; ``None``: no sample (as at zero, where no replica reports)."""
    state, current, out = ScalerState(), start, []
    for i, load in enumerate(loads):
        now = 1000.0 + i * INTERVAL
        sample = None if load is None else QueueSample(0.0, load, now)
        observed = ObservedReplicas(current, current, wake_requested=i in wake_at)
        decision = decide(sample, p, state, now, observed)
        state = ScalerState.from_dict(json.loads(json.dumps(decision.state.to_dict())))
        current = decision.replicas
        out.append(decision)
    return out


def test_idle_for_idle_seconds_goes_to_zero_and_load_resets_the_idle_clock() -> None:
    # 120 s idle = 8 intervals: load at step 3 restarts the count, zero at the 9th idle sample.
    loads: list[float | None] = [5, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, None]
    decisions = run(policy(), loads, start=1)
    replicas = [d.replicas for d in decisions]
    assert replicas == [1] * 12 + [0, 0, 0], replicas
    zero = decisions[12]
    assert zero.constraint == "idle" and "idleSeconds 120" in zero.reason and "scale down 1→0" in zero.reason


def test_without_idleness_the_load_rule_never_goes_below_one() -> None:
    decisions = run(policy(idle_seconds=10_000.0), [0.0] * 40, start=3)
    assert min(d.replicas for d in decisions) == 1
    assert decisions[-1].replicas == 1 and "at least 1 until idle" in decisions[-1].reason


def test_idleness_goes_to_zero_whatever_the_count() -> None:
    decisions = run(policy(idle_seconds=30.0), [0.0] * 4, start=3)
    # the load rule steps down one per interval meanwhile; idleness then goes to zero at once
    assert [d.replicas for d in decisions][:4] == [2, 1, 0, 0]
    assert decisions[2].constraint == "idle"


def test_at_zero_no_metrics_hold_zero_and_a_wake_up_gives_one_replica() -> None:
    decisions = run(policy(), [None, None, None, None, 0.0], start=0, wake_at=frozenset({2}))
    assert [d.replicas for d in decisions] == [0, 0, 1, 1, 1]
    assert decisions[2].constraint == "wake-up" and "waits at the gateway" in decisions[2].reason
    assert decisions[0].constraint == "metrics-unavailable"


def test_a_wake_up_with_no_gpu_capacity_stays_at_zero_and_says_why() -> None:
    d = decide(None, policy(), ScalerState(), 1000.0, ObservedReplicas(0, 0, capacity=0, wake_requested=True))
    assert d.replicas == 0 and d.shortfall == 1 and "short by 1" in d.reason


def test_a_wake_up_while_serving_changes_nothing_and_resets_idleness() -> None:
    state = ScalerState(idle_since=900.0)
    d = decide(
        QueueSample(0, 0, 1000.0), policy(), state, 1000.0, ObservedReplicas(1, 1, wake_requested=True)
    )
    assert d.replicas == 1 and d.state.idle_since is None


def test_idle_seconds_needs_min_replicas_zero() -> None:
    with pytest.raises(ValueError, match="idle_seconds"):
        policy(min_replicas=1)
    assert AutoscalePolicy.from_spec({"minReplicas": 0}, replica_concurrency=4).idle_seconds == 900.0
    assert AutoscalePolicy.from_spec({"minReplicas": 1}, replica_concurrency=4).idle_seconds is None


def test_a_cold_start_under_a_second_is_measured_and_kept_at_zero() -> None:
    """Timestamps have whole seconds: a replica Ready in its first second measures 0 s, which is a
    measure (wakeUpSeconds = 0 + the reaction), not a missing one; at zero the kept one is used."""
    from glm_operator.desired.scaling import WAKE_REACTION_SECONDS, cold_start_fields
    from glm_operator.planning.scaling.coldstart import median_cold_start

    ready_at_once = {
        "metadata": {"creationTimestamp": "2026-12-03T10:00:00Z"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-03T10:00:00Z"}]
        },
    }
    assert median_cold_start([ready_at_once]) == 0.0 and median_cold_start([]) is None
    assert cold_start_fields(0.0, None, True) == (0.0, WAKE_REACTION_SECONDS)
    assert cold_start_fields(None, 41.25, True) == (41.2, 43.2), "kept across zero"
    assert cold_start_fields(0.0, 41.25, True) == (0.0, WAKE_REACTION_SECONDS), "the pods' measure wins"
    assert cold_start_fields(None, None, True) == (None, None)
    assert cold_start_fields(None, "soon", True) == (None, None)
    assert cold_start_fields(12.0, None, False) == (12.0, None), "no wake-up without minReplicas 0"
