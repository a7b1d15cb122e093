"""decide() on whole traces (exact replica sequences), plus edge cases and state handling."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest

from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    Decision,
    ObservedReplicas,
    QueueSample,
    Recommendation,
    ScalerState,
    decide,
)

INTERVAL = 15.0


def make_policy(**overrides: object) -> AutoscalePolicy:
    values: dict[str, object] = {
        "min_replicas": 1,
        "max_replicas": 8,
        "target_queue_length": 4,
        "replica_concurrency": 16,
        "scale_up_stabilization_seconds": 0,
        "scale_down_stabilization_seconds": 300,
        "interval_seconds": INTERVAL,
    }
    values.update(overrides)
    return AutoscalePolicy(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Step:
    """One timer tick: the queue, and optionally how many replicas are ready (default: all)."""

    waiting: float | None  # None: metrics unavailable
    running: float = 0.0
    ready: int | None = None
    capacity: int | None = None


def run_trace(policy: AutoscalePolicy, steps: list[Step], start: int) -> list[Decision]:
    """Apply each decision immediately, as the operator does, one interval apart."""
    state = ScalerState()
    current = start
    decisions = []
    for index, step in enumerate(steps):
        now = 1000.0 + index * INTERVAL
        sample = None if step.waiting is None else QueueSample(step.waiting, step.running, now)
        ready = current if step.ready is None else step.ready
        decision = decide(sample, policy, state, now, ObservedReplicas(current, ready, step.capacity))
        # The state must survive the trip through an annotation.
        state = ScalerState.from_dict(json.loads(json.dumps(decision.state.to_dict())))
        current = decision.replicas
        decisions.append(decision)
    return decisions


def replicas(decisions: list[Decision]) -> list[int]:
    return [d.replicas for d in decisions]


def saturated(replica_count: int, waiting: float) -> Step:
    return Step(waiting=waiting, running=16.0 * replica_count)


# --- whole traces -------------------------------------------------------------------------------


def test_rising_queue_scales_up_within_one_interval_then_by_rate_limit() -> None:
    # 56 requests want ceil(56 / (16 + 4)) = 3 replicas; up by max(1, 100 %) per interval.
    steps = [Step(waiting=40, running=16), Step(waiting=40, running=16, ready=1), Step(40, 16, ready=1)]
    decisions = run_trace(make_policy(), steps, start=1)
    assert replicas(decisions) == [2, 3, 3]
    assert decisions[0].recommended == 3
    assert decisions[0].constraint == "rate-limit"
    assert decisions[0].reason.startswith("scale up 1→2")


def test_up_stabilization_window_delays_scale_up_to_lowest_recommendation() -> None:
    policy = make_policy(scale_up_stabilization_seconds=30)
    steps = [saturated(2, 0), saturated(2, 0), saturated(2, 40), saturated(2, 40), saturated(2, 40)]
    decisions = run_trace(policy, steps, start=2)
    # the spike at t=30 is acted on only once it has lasted the whole 30 s window.
    assert replicas(decisions) == [2, 2, 2, 2, 4]
    assert decisions[2].constraint == "stabilization"
    assert "up-stabilization" in decisions[2].reason


def test_drain_scales_down_only_after_down_window_one_step_per_interval() -> None:
    busy = [saturated(4, 0)]  # 64 running on 4: hold
    idle = [Step(waiting=0, running=10)] * 25  # 10 running want ceil(10 / 14.4) = 1
    decisions = run_trace(make_policy(), busy + idle, start=4)
    # The recommendation of 4 at t=0 stays in the 300 s window until t=315 (step 21).
    assert replicas(decisions) == [4] * 21 + [3, 2, 1, 1, 1]
    assert all(d.constraint == "stabilization" for d in decisions[1:21])
    assert decisions[21].constraint == "rate-limit"


def test_busy_replicas_with_empty_queue_are_kept() -> None:
    # HPA on the waiting queue alone would go to 1 here; 60 running need 60 / 14.4 -> 5 > 4.
    decisions = run_trace(make_policy(), [Step(waiting=0, running=60)] * 30, start=4)
    assert set(replicas(decisions)) == {4}


def test_flapping_queue_never_reverses_inside_down_window() -> None:
    high, low = Step(waiting=30, running=48), Step(waiting=0, running=20)
    steps = [high, low] * 10 + [low] * 25
    decisions = run_trace(make_policy(), steps, start=3)
    counts = replicas(decisions)
    assert counts[0] == 4  # 78 requests want 4
    # No reversal while the flapping lasts, and after it a single monotone descent.
    first_down = next(i for i, c in enumerate(counts) if c < 4)
    assert first_down * INTERVAL > 300 + 18 * INTERVAL
    assert counts[first_down:] == sorted(counts[first_down:], reverse=True)
    assert _reversals(counts) == 0


def test_starting_replicas_absorb_the_queue() -> None:
    # 2 ready (saturated, 30 waiting) + 2 starting: 62 requests on 4 replicas is within target.
    steps = [Step(waiting=30, running=32, ready=2)] * 5
    decisions = run_trace(make_policy(), steps, start=4)
    assert replicas(decisions) == [4] * 5
    assert "2 starting" in decisions[0].reason


def test_without_starting_replicas_the_same_queue_scales_up() -> None:
    decisions = run_trace(make_policy(), [Step(waiting=30, running=32)], start=2)
    assert replicas(decisions) == [4]


def test_capacity_caps_and_reports_shortfall() -> None:
    steps = [Step(waiting=100, running=48, capacity=4)] * 4
    decisions = run_trace(make_policy(), steps, start=3)
    assert replicas(decisions) == [4, 4, 4, 4]
    last = decisions[-1]
    assert last.constraint == "capacity"
    assert last.shortfall == 4  # 148 requests want 8 (= maxReplicas)
    assert "short by 4" in last.reason


def test_capacity_wins_over_min_replicas() -> None:
    decisions = run_trace(make_policy(min_replicas=3), [Step(waiting=0, running=0, capacity=2)], start=3)
    assert replicas(decisions) == [2]
    assert decisions[0].shortfall == 1


def test_metrics_missing_holds_and_keeps_state() -> None:
    steps = [saturated(2, 40), Step(waiting=None), Step(waiting=None), Step(waiting=0, running=40)]
    decisions = run_trace(make_policy(), steps, start=2)
    assert replicas(decisions) == [4, 4, 4, 4]
    assert decisions[1].constraint == "metrics-unavailable"
    assert decisions[1].reason.startswith("metrics unavailable (no sample): holding 4")
    assert decisions[2].state == decisions[0].state


def test_bounds() -> None:
    assert replicas(run_trace(make_policy(max_replicas=5), [saturated(4, 200)] * 3, start=4)) == [5, 5, 5]
    low = run_trace(make_policy(min_replicas=2), [Step(waiting=0, running=0)] * 25, start=2)
    assert set(replicas(low)) == {2}
    # Bounds override the rate limit and apply even without metrics.
    raised = run_trace(make_policy(min_replicas=4), [Step(waiting=None)], start=1)
    assert replicas(raised) == [4]
    assert raised[0].constraint == "metrics-unavailable"


def test_scale_up_percent_and_step() -> None:
    policy = make_policy(max_replicas=20, max_scale_up_percent=50, max_scale_up_step=1)
    steps = [Step(waiting=400, running=64)] * 4
    # from 4: +max(1, 50 % of 4)=+2 per interval
    assert replicas(run_trace(policy, steps, start=4)) == [6, 9, 14, 20]


# --- single decisions ---------------------------------------------------------------------------


def test_stale_sample_is_unavailable() -> None:
    policy = make_policy()
    sample = QueueSample(waiting=100, running=16, timestamp=0.0)
    decision = decide(sample, policy, ScalerState(), now=1000.0, observed=ObservedReplicas(1, 1))
    assert decision.replicas == 1
    assert decision.constraint == "metrics-unavailable"
    assert "stale" in decision.reason


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_invalid_sample_is_unavailable(bad: float) -> None:
    decision = decide(QueueSample(bad, 0, 10.0), make_policy(), ScalerState(), 10.0, ObservedReplicas(2, 2))
    assert (decision.replicas, decision.constraint) == (2, "metrics-unavailable")


def test_running_above_planned_concurrency_raises_replica_capacity() -> None:
    # Replicas run 40 sequences each (maxNumSeqs above the plan's 16): 80 running on 2 is fine.
    decision = decide(QueueSample(0, 80, 0.0), make_policy(), ScalerState(), 0.0, ObservedReplicas(2, 2))
    assert decision.recommended == 2


def test_zero_replicas_and_zero_load() -> None:
    policy = make_policy(min_replicas=0)
    decision = decide(QueueSample(0, 0, 0.0), policy, ScalerState(), 0.0, ObservedReplicas(0, 0))
    assert decision.replicas == 0
    decision = decide(QueueSample(10, 0, 0.0), policy, ScalerState(), 0.0, ObservedReplicas(0, 0))
    assert decision.replicas == 1


def test_state_is_bounded_and_pruned() -> None:
    policy = make_policy(max_replicas=8)
    state = ScalerState()
    for i in range(500):
        waiting = (i * 37) % 200
        decision = decide(QueueSample(waiting, 64, i * 15.0), policy, state, i * 15.0, ObservedReplicas(4, 4))
        state = decision.state
        assert len(state.recommendations) <= policy.max_replicas - policy.min_replicas + 1
        assert all(i * 15.0 - r.time <= 300 for r in state.recommendations)
        assert all(i * 15.0 - e.time < 15 for e in state.scale_events)


def test_state_round_trip_and_malformed() -> None:
    state = ScalerState(recommendations=(Recommendation(1.5, 3),))
    assert ScalerState.from_dict(state.to_dict()) == state
    assert ScalerState.from_dict({}) == ScalerState()
    with pytest.raises(ValueError):
        ScalerState.from_dict({"recommendations": [["x", 1]]})
    with pytest.raises(ValueError):
        ScalerState.from_dict({"recommendations": [1]})


def test_policy_validation_and_from_spec() -> None:
    with pytest.raises(ValueError, match="max_replicas"):
        make_policy(min_replicas=5, max_replicas=2)
    with pytest.raises(ValueError, match="replica_concurrency"):
        make_policy(replica_concurrency=0)
    policy = AutoscalePolicy.from_spec(
        {"minReplicas": 2, "maxReplicas": 6, "targetQueueLength": 8, "scaleDownStabilizationSeconds": 600},
        replica_concurrency=32,
    )
    assert policy == replace(
        make_policy(min_replicas=2, max_replicas=6, target_queue_length=8.0, replica_concurrency=32),
        scale_down_stabilization_seconds=600.0,
    )
    assert AutoscalePolicy.from_spec({}, replica_concurrency=8).max_replicas == 8


def test_planning_module_is_pure() -> None:
    import ast
    import inspect

    import glm_operator.planning.scaling.autoscale as module

    tree = ast.parse(inspect.getsource(module))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "math", "collections", "dataclasses", "typing"}


def _reversals(counts: list[int]) -> int:
    directions = [b - a for a, b in itertools.pairwise(counts) if b != a]
    return sum(1 for a, b in itertools.pairwise(directions) if (a > 0) != (b > 0))


def test_measured_cold_start_lengthens_the_scale_down_window() -> None:
    policy = AutoscalePolicy(
        min_replicas=1, max_replicas=8, target_queue_length=4, replica_concurrency=16, cold_start_seconds=400
    )
    assert policy.down_window_seconds == 6 * 400
    state = ScalerState()
    for now in (0.0, 15.0):  # a burst wants 4 replicas
        decision = decide(QueueSample(100, 64, now), policy, state, now, ObservedReplicas(4, 4))
        state = decision.state
    # ten minutes later the queue is gone: the plain 300 s window would allow a scale-down
    idle = decide(QueueSample(0, 0, 615.0), policy, state, 615.0, ObservedReplicas(4, 4))
    assert idle.replicas == 4 and "2400s down-stabilization window" in idle.reason
    unmeasured = replace(policy, cold_start_seconds=0.0)
    assert decide(QueueSample(0, 0, 615.0), unmeasured, state, 615.0, ObservedReplicas(4, 4)).replicas == 3


def test_cold_start_is_the_median_from_pod_creation_to_ready() -> None:
    from glm_operator.planning.scaling.coldstart import measured_cold_start

    def pod(created: str, ready: str | None) -> dict[str, Any]:
        conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
        return {"metadata": {"creationTimestamp": created}, "status": {"conditions": conditions}}

    pods = [
        pod("2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z"),
        pod("2026-11-30T10:00:00Z", "2026-11-30T10:07:00Z"),
        pod("2026-11-30T10:00:00Z", "2026-11-30T10:20:00Z"),
        pod("2026-11-30T10:00:00Z", None),  # still starting: not a sample
    ]
    assert measured_cold_start(pods) == 420.0
    assert measured_cold_start([]) == 0.0


def test_a_knee_below_max_num_seqs_is_the_target_and_running_past_it_does_not_raise_it() -> None:
    # Two replicas of max-num-seqs 256 whose predicted knee is 128: vLLM admits up to 256 each, so
    # 400 running on two replicas is 200 each, past the knee: scale up to ceil(400 / (128 + 4)) = 4.
    knee = make_policy(replica_concurrency=128, replica_capacity=256, max_replicas=8)
    decision = decide(QueueSample(0, 400, 0.0), knee, ScalerState(), 0.0, ObservedReplicas(2, 2))
    assert decision.recommended == 4 and decision.replicas > 2
    # the same load with the target at max-num-seqs (no knee below it): replicas observed running
    # 200 each hold that many, no queue: hold 2
    capacity = make_policy(replica_concurrency=256, max_replicas=8)
    assert (
        decide(QueueSample(0, 400, 0.0), capacity, ScalerState(), 0.0, ObservedReplicas(2, 2)).recommended
        == 2
    )
    # from_spec keeps the capacity only where it differs from the target; a capacity below it is refused
    assert (
        AutoscalePolicy.from_spec({}, replica_concurrency=128, replica_capacity=256).replica_capacity == 256
    )
    assert (
        AutoscalePolicy.from_spec({}, replica_concurrency=256, replica_capacity=256).replica_capacity is None
    )
    with pytest.raises(ValueError, match="replica_capacity must be >= replica_concurrency"):
        make_policy(replica_concurrency=128, replica_capacity=64)
