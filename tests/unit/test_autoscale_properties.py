"""Property tests for decide(): bounds, capacity, holding without metrics, bounded JSON state."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    ObservedReplicas,
    QueueSample,
    ScalerState,
    decide,
)


@st.composite
def policies(draw: st.DrawFn) -> AutoscalePolicy:
    min_replicas = draw(st.integers(0, 6))
    return AutoscalePolicy(
        min_replicas=min_replicas,
        max_replicas=draw(st.integers(max(min_replicas, 1), 12)),
        target_queue_length=draw(st.floats(0, 50)),
        replica_concurrency=draw(st.floats(0.5, 256)),
        scale_up_stabilization_seconds=draw(st.sampled_from([0.0, 30.0, 120.0])),
        scale_down_stabilization_seconds=draw(st.sampled_from([0.0, 60.0, 300.0])),
        interval_seconds=draw(st.sampled_from([5.0, 15.0, 60.0])),
        tolerance=draw(st.floats(0, 0.5)),
        max_scale_up_step=draw(st.integers(1, 4)),
        max_scale_up_percent=draw(st.floats(0, 200)),
        max_scale_down_step=draw(st.integers(1, 4)),
    )


loads = st.floats(0, 5000, allow_nan=False)
step = st.tuples(
    st.one_of(st.none(), st.tuples(loads, loads)),  # (waiting, running) or missing
    st.integers(0, 16),  # ready
    st.one_of(st.none(), st.integers(0, 16)),  # capacity
    st.floats(0.5, 60),  # seconds since the previous step
)


@settings(max_examples=300, deadline=None)
@given(policy=policies(), steps=st.lists(step, min_size=1, max_size=40), start=st.integers(0, 16))
def test_trace_invariants(policy: AutoscalePolicy, steps: list[tuple], start: int) -> None:  # type: ignore[type-arg]
    state = ScalerState()
    current = start
    now = 0.0
    for values, ready, capacity, delta in steps:
        now += delta
        sample = None if values is None else QueueSample(values[0], values[1], now)
        observed = ObservedReplicas(current, min(ready, current), capacity)
        decision = decide(sample, policy, state, now, observed)

        upper = policy.max_replicas if capacity is None else min(policy.max_replicas, capacity)
        lower = policy.min_replicas if capacity is None else min(policy.min_replicas, capacity)
        assert lower <= decision.replicas <= upper
        if sample is None:
            assert decision.replicas == min(max(current, lower), upper)
            assert decision.state == state
        # bounded, JSON-serialisable state
        assert len(decision.state.recommendations) <= policy.max_replicas - policy.min_replicas + 1
        assert ScalerState.from_dict(json.loads(json.dumps(decision.state.to_dict()))) == decision.state
        state, current = decision.state, decision.replicas


@settings(max_examples=200, deadline=None)
@given(policy=policies(), current=st.integers(0, 16), waiting=loads, running=loads)
def test_no_change_without_sample_inside_bounds(
    policy: AutoscalePolicy, current: int, waiting: float, running: float
) -> None:
    # Warm the state with a real sample, then lose metrics: the count must not move.
    current = min(max(current, policy.min_replicas), policy.max_replicas)
    warm = decide(
        QueueSample(waiting, running, 0.0), policy, ScalerState(), 0.0, ObservedReplicas(current, current)
    )
    held = decide(None, policy, warm.state, 15.0, ObservedReplicas(warm.replicas, warm.replicas))
    assert held.replicas == warm.replicas
    assert held.state == warm.state
    assert held.constraint == "metrics-unavailable"


@settings(max_examples=200, deadline=None)
@given(policy=policies(), replicas=st.integers(1, 12), waiting=loads, running=loads)
def test_recommendation_is_a_fixed_point(
    policy: AutoscalePolicy, replicas: int, waiting: float, running: float
) -> None:
    """After moving to the recommendation, the same load recommends the same count (no flapping)."""
    sample = QueueSample(waiting, running, 0.0)
    first = decide(sample, policy, ScalerState(), 0.0, ObservedReplicas(replicas, replicas))
    target = first.recommended
    assert target is not None
    if target == 0 or running > policy.replica_concurrency * min(replicas, target):
        return  # (running above the planned concurrency raises the per-replica capacity; skip)
    again = decide(sample, policy, ScalerState(), 0.0, ObservedReplicas(target, target))
    assert again.recommended == target
