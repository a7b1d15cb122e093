"""Autoscaling decision: replicas from the vLLM request queue. Pure: state in, state out.

``decide(sample, policy, state, now, observed) -> Decision`` turns one sample of vLLM's running and
waiting requests into a replica count. It scales on the requests in the system per replica against the
plan's knee, not on the queue alone (which drains to zero whenever the replicas keep up, so HPA's
proportional rule on it flaps), counts replicas still starting as capacity, then applies HPA's
stabilisation windows, a rate limit per interval, the replica bounds and the GPU capacity; only idleness
takes a deployment to zero. No clock, no globals, no I/O: the operator's timer persists ``Decision.state``
next to the replicas it writes. docs/planning.md ("Autoscaling") has the rule, its formulas and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "AutoscalePolicy",
    "Constraint",
    "Decision",
    "ObservedReplicas",
    "QueueSample",
    "Recommendation",
    "ScaleEvent",
    "ScalerState",
    "decide",
]

# Idle seconds before zero when spec.autoscaling.idleSeconds is absent (the API's default).
DEFAULT_IDLE_SECONDS = 900.0
# Slack for float division before ceil(): 2.0000000001 replicas is 2, not 3.
_EPSILON = 1e-9
# Scale-down window in measured cold starts (AutoscalePolicy.down_window_seconds). Chosen on
# benchmarks/autoscale_traces.py: 6 keeps the bursty trace's p95 wait below the HPA's at fewer
# GPU-hours for several seeds (5 was above the HPA's GPU-hours on one seed, 4 at its p95).
COLD_START_DOWN_WINDOW_FACTOR = 6.0

Constraint = Literal[
    "none",
    "metrics-unavailable",
    "idle",
    "wake-up",
    "stabilization",
    "rate-limit",
    "min-replicas",
    "max-replicas",
    "capacity",
]


@dataclass(frozen=True)
class QueueSample:
    """Queue of one GLMDeployment, summed over its ready replicas, at ``timestamp`` (unix s)."""

    waiting: float
    running: float
    timestamp: float


@dataclass(frozen=True)
class AutoscalePolicy:
    """``spec.autoscaling`` plus the replica concurrency from the plan and tuning defaults."""

    min_replicas: int
    max_replicas: int
    target_queue_length: float
    # Running requests the autoscaler aims one replica at: the plan's predicted knee (at most
    # --max-num-seqs; --max-num-seqs itself when the knee is not reached below it).
    replica_concurrency: float
    scale_up_stabilization_seconds: float = 0.0
    scale_down_stabilization_seconds: float = 300.0
    interval_seconds: float = 15.0
    tolerance: float = 0.1
    max_scale_up_step: int = 1
    max_scale_up_percent: float = 100.0
    max_scale_down_step: int = 1
    # A sample older than this is treated as missing; None = 4 intervals (at least 60 s).
    max_sample_age_seconds: float | None = None
    # Measured time from a replica's pod creation to Ready (node provisioning and model load
    # included); 0 = not measured yet. Lengthens the scale-down window (see down_window_seconds).
    cold_start_seconds: float = 0.0
    # With min_replicas == 0: seconds of no load before going to zero (None: never to zero).
    idle_seconds: float | None = None
    # --max-num-seqs where the knee lies below it (None: the target is the capacity). Replicas seen
    # running more than the target raise it only when the target is the capacity (see ``K'``).
    replica_capacity: float | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.min_replicas < 0:
            problems.append("min_replicas must be >= 0")
        if self.max_replicas < max(self.min_replicas, 1):
            problems.append("max_replicas must be >= max(min_replicas, 1)")
        if self.target_queue_length < 0:
            problems.append("target_queue_length must be >= 0")
        if self.replica_concurrency <= 0:
            problems.append("replica_concurrency must be > 0")
        if self.replica_capacity is not None and self.replica_capacity < self.replica_concurrency:
            problems.append("replica_capacity must be >= replica_concurrency")
        if self.scale_up_stabilization_seconds < 0 or self.scale_down_stabilization_seconds < 0:
            problems.append("stabilization windows must be >= 0")
        if self.interval_seconds <= 0:
            problems.append("interval_seconds must be > 0")
        if not 0 <= self.tolerance < 1:
            problems.append("tolerance must be in [0, 1)")
        if self.max_scale_up_step < 1 or self.max_scale_down_step < 1 or self.max_scale_up_percent < 0:
            problems.append("scale steps must be >= 1 and the percent >= 0")
        if self.max_sample_age_seconds is not None and self.max_sample_age_seconds <= 0:
            problems.append("max_sample_age_seconds must be > 0")
        if self.cold_start_seconds < 0:
            problems.append("cold_start_seconds must be >= 0")
        if self.idle_seconds is not None and (self.idle_seconds <= 0 or self.min_replicas != 0):
            problems.append("idle_seconds must be > 0 and needs min_replicas == 0")
        if problems:
            raise ValueError("invalid AutoscalePolicy: " + "; ".join(problems))

    @classmethod
    def from_spec(
        cls,
        autoscaling: Mapping[str, Any],
        *,
        replica_concurrency: float,
        cold_start_seconds: float = 0.0,
        replica_capacity: float | None = None,
    ) -> AutoscalePolicy:
        """Build from the camelCase ``spec.autoscaling`` mapping; absent keys take the CRD defaults."""
        min_replicas = int(autoscaling.get("minReplicas", 1))
        idle = autoscaling.get("idleSeconds")
        return cls(
            min_replicas=min_replicas,
            idle_seconds=None
            if min_replicas != 0
            else float(idle if idle is not None else DEFAULT_IDLE_SECONDS),
            max_replicas=int(autoscaling.get("maxReplicas", 8)),
            target_queue_length=float(autoscaling.get("targetQueueLength", 4)),
            replica_concurrency=replica_concurrency,
            scale_up_stabilization_seconds=float(autoscaling.get("scaleUpStabilizationSeconds", 0)),
            scale_down_stabilization_seconds=float(autoscaling.get("scaleDownStabilizationSeconds", 300)),
            interval_seconds=float(autoscaling.get("intervalSeconds", 15)),
            cold_start_seconds=cold_start_seconds,
            replica_capacity=replica_capacity if replica_capacity != replica_concurrency else None,
        )

    @property
    def sample_age_limit_seconds(self) -> float:
        if self.max_sample_age_seconds is not None:
            return self.max_sample_age_seconds
        return max(4 * self.interval_seconds, 60.0)

    @property
    def down_window_seconds(self) -> float:
        """The scale-down stabilisation window: the configured one, or COLD_START_DOWN_WINDOW_FACTOR
        measured cold starts when longer. A replica released and needed again sooner costs a
        whole cold start of queueing; with cold starts of minutes (a new node, then the model)
        bursts that return within that time are served by the replicas kept."""
        return max(
            self.scale_down_stabilization_seconds, COLD_START_DOWN_WINDOW_FACTOR * self.cold_start_seconds
        )

    @property
    def history_seconds(self) -> float:
        return max(self.scale_up_stabilization_seconds, self.down_window_seconds)


@dataclass(frozen=True)
class ObservedReplicas:
    """What the cluster has now.

    ``current``: replicas requested from the workloads (the count the previous Decision set);
    ``ready``: replicas serving; ``capacity``: most replicas the GPU pools can host in total
    (None = unknown, no cap).
    """

    current: int
    ready: int
    capacity: int | None = None
    # A request waits at the gateway for a model without a ready replica (scale from zero).
    wake_requested: bool = False

    def __post_init__(self) -> None:
        if self.current < 0 or self.ready < 0 or (self.capacity is not None and self.capacity < 0):
            raise ValueError("replica counts must be >= 0")

    @property
    def starting(self) -> int:
        return max(self.current - self.ready, 0)

    @property
    def effective(self) -> int:
        """Ready plus starting replicas: the capacity the queue will see."""
        return max(self.current, self.ready)


@dataclass(frozen=True)
class Recommendation:
    time: float
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    time: float
    change: int  # > 0 added, < 0 removed


@dataclass(frozen=True)
class ScalerState:
    """Hysteresis memory, persisted by the caller between decisions (JSON via to_dict/from_dict)."""

    recommendations: tuple[Recommendation, ...] = ()
    scale_events: tuple[ScaleEvent, ...] = ()
    # Since when every sample showed no load (scale to zero); None while there is load.
    idle_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "recommendations": [[r.time, r.replicas] for r in self.recommendations],
            "scaleEvents": [[e.time, e.change] for e in self.scale_events],
        }
        if self.idle_since is not None:
            data["idleSince"] = self.idle_since
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScalerState:
        """Inverse of to_dict. Raises ValueError on malformed input (callers may start afresh)."""
        try:
            recommendations = tuple(
                Recommendation(float(t), int(r)) for t, r in data.get("recommendations", [])
            )
            events = tuple(ScaleEvent(float(t), int(c)) for t, c in data.get("scaleEvents", []))
            idle = data.get("idleSince")
            idle_since = float(idle) if idle is not None else None
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"malformed scaler state: {err}") from err
        return cls(recommendations=recommendations, scale_events=events, idle_since=idle_since)


@dataclass(frozen=True)
class Decision:
    replicas: int
    state: ScalerState
    reason: str
    # The raw recommendation from the load alone (None without a sample).
    recommended: int | None = None
    # What set `replicas` apart from `recommended` (or "metrics-unavailable").
    constraint: Constraint = "none"
    # Replicas wanted beyond what the GPU pools can host.
    shortfall: int = 0
    details: tuple[str, ...] = field(default=())


def decide(
    sample: QueueSample | None,
    policy: AutoscalePolicy,
    state: ScalerState,
    now: float,
    observed: ObservedReplicas,
) -> Decision:
    """Replicas for one GLMDeployment. Pure; see the module docstring for the algorithm."""
    current = observed.current
    if current == 0 and observed.wake_requested:
        return _wake_up(policy, state, now, observed)
    stale = sample is not None and now - sample.timestamp > policy.sample_age_limit_seconds
    if sample is None or stale or not _is_valid(sample):
        why = "stale sample" if stale else ("no sample" if sample is None else "invalid sample")
        held, _, held_shortfall, held_notes = _apply_bounds(current, current, policy, observed)
        reason = f"metrics unavailable ({why}): holding {current} replicas"
        if held != current:
            reason += f"; {held_notes[-1]}"
        return Decision(held, state, reason, None, "metrics-unavailable", held_shortfall, tuple(held_notes))
    if policy.idle_seconds is not None:
        idle = _to_zero_when_idle(sample, policy, state, now, observed)
        if idle is not None:
            return idle
        state = replace(state, idle_since=_idle_since(sample, state, now, observed))

    recommended, load_note = compute_recommendation(sample, policy, observed)
    notes = [load_note]
    history = _record(state.recommendations, Recommendation(now, recommended), policy, now)

    stabilized, stab_note = _stabilize(current, history, policy, now)
    constraint: Constraint = "none"
    if stab_note:
        notes.append(stab_note)
        constraint = "stabilization"

    events = tuple(e for e in state.scale_events if now - policy.interval_seconds < e.time <= now)
    limited, rate_note = _rate_limit(current, stabilized, events, policy)
    if rate_note:
        notes.append(rate_note)
        constraint = "rate-limit"

    final, bound_constraint, shortfall, bound_notes = _apply_bounds(limited, recommended, policy, observed)
    notes.extend(bound_notes)
    if bound_constraint != "none":
        constraint = bound_constraint

    if final != current:
        events += (ScaleEvent(now, final - current),)
    new_state = replace(state, recommendations=history, scale_events=events)
    verb = "scale up" if final > current else "scale down" if final < current else "hold"
    head = f"{verb} {current}→{final}" if final != current else f"hold {current}"
    return Decision(
        final, new_state, f"{head}: " + "; ".join(notes), recommended, constraint, shortfall, tuple(notes)
    )


def _idle_since(
    sample: QueueSample, state: ScalerState, now: float, observed: ObservedReplicas
) -> float | None:
    if sample.waiting + sample.running > 0 or observed.wake_requested:
        return None
    return state.idle_since if state.idle_since is not None else now


def _to_zero_when_idle(
    sample: QueueSample, policy: AutoscalePolicy, state: ScalerState, now: float, observed: ObservedReplicas
) -> Decision | None:
    """Scale to zero: 0 once no load was seen for ``idle_seconds``; None to decide on the load."""
    assert policy.idle_seconds is not None
    since = _idle_since(sample, state, now, observed)
    if since is None or observed.current == 0 or now - since < policy.idle_seconds:
        return None
    events = tuple(e for e in state.scale_events if now - policy.interval_seconds < e.time <= now)
    new_state = replace(state, idle_since=since, scale_events=(*events, ScaleEvent(now, -observed.current)))
    note = f"no running or waiting request for {now - since:g}s (idleSeconds {policy.idle_seconds:g})"
    return Decision(0, new_state, f"scale down {observed.current}→0: {note}", 0, "idle", 0, (note,))


def _wake_up(policy: AutoscalePolicy, state: ScalerState, now: float, observed: ObservedReplicas) -> Decision:
    """A request waits at the gateway for a model at zero: one replica, whatever the metrics."""
    note = "a request waits at the gateway for this model (wake-up)"
    wanted = max(1, policy.min_replicas)
    replicas, shortfall = wanted, 0
    notes = [note]
    if observed.capacity is not None and observed.capacity < wanted:
        replicas, shortfall = observed.capacity, wanted - observed.capacity
        notes.append(f"GPU pools can host only {observed.capacity} replicas: short by {shortfall}")
    new_state = replace(state, idle_since=None)
    if replicas:
        new_state = replace(new_state, scale_events=(*state.scale_events, ScaleEvent(now, replicas)))
    head = f"scale up 0→{replicas}" if replicas else "hold 0"
    constraint: Constraint = "wake-up" if replicas else "capacity"
    return Decision(
        replicas, new_state, f"{head}: " + "; ".join(notes), wanted, constraint, shortfall, tuple(notes)
    )


def compute_recommendation(
    sample: QueueSample, policy: AutoscalePolicy, observed: ObservedReplicas
) -> tuple[int, str]:
    """Raw replicas for the load in ``sample``, before stabilisation, rate limits and bounds."""
    replicas = observed.effective
    load = sample.waiting + sample.running
    concurrency = policy.replica_concurrency
    if observed.ready > 0 and policy.replica_capacity is None:
        concurrency = max(concurrency, sample.running / observed.ready)
    queue = policy.target_queue_length
    up_threshold = concurrency + queue * (1 + policy.tolerance)
    down_threshold = concurrency * (1 - policy.tolerance)
    note = (
        f"load {load:g} ({sample.running:g} running + {sample.waiting:g} waiting) on {replicas} replicas "
        f"({observed.ready} ready, {observed.starting} starting); per replica "
        f"up above {up_threshold:g}, down below {down_threshold:g}"
    )
    if replicas == 0:
        recommended = _ceil(load / (concurrency + queue)) if load > 0 else 0
    elif load > replicas * up_threshold:
        recommended = max(_ceil(load / (concurrency + queue)), replicas)
    elif load < replicas * down_threshold:
        recommended = min(_ceil(load / down_threshold), replicas)
    else:
        recommended = replicas
    return recommended, f"{note}: recommend {recommended}"


def _is_valid(sample: QueueSample) -> bool:
    values = (sample.waiting, sample.running, sample.timestamp)
    return all(math.isfinite(v) for v in values) and sample.waiting >= 0 and sample.running >= 0


def _ceil(value: float) -> int:
    return max(math.ceil(value - _EPSILON), 0)


def _record(
    history: tuple[Recommendation, ...], new: Recommendation, policy: AutoscalePolicy, now: float
) -> tuple[Recommendation, ...]:
    """Append ``new`` (clamped to bounds), prune by age and keep only the newest per value."""
    clamped = Recommendation(new.time, min(max(new.replicas, policy.min_replicas), policy.max_replicas))
    kept = [
        r
        for r in history
        if now - r.time <= policy.history_seconds and r.time <= now and r.replicas != clamped.replicas
    ]
    kept.append(clamped)
    return tuple(sorted(kept, key=lambda r: r.time))


def _stabilize(
    current: int, history: tuple[Recommendation, ...], policy: AutoscalePolicy, now: float
) -> tuple[int, str]:
    newest = history[-1].replicas
    up_window = [r.replicas for r in history if now - r.time <= policy.scale_up_stabilization_seconds]
    down_window = [r.replicas for r in history if now - r.time <= policy.down_window_seconds]
    up_limit = min([*up_window, newest])
    down_limit = max([*down_window, newest])
    stabilized = current
    if stabilized < up_limit:
        stabilized = up_limit
    if stabilized > down_limit:
        stabilized = down_limit
    if stabilized == newest:
        return stabilized, ""
    if newest > stabilized:
        return stabilized, (
            f"scale-up to {newest} held at {stabilized} by the "
            f"{policy.scale_up_stabilization_seconds:g}s up-stabilization window (lowest recommendation)"
        )
    return stabilized, (
        f"scale-down to {newest} held at {stabilized} by the "
        f"{policy.down_window_seconds:g}s down-stabilization window (highest recommendation)"
    )


def _rate_limit(
    current: int, desired: int, events: tuple[ScaleEvent, ...], policy: AutoscalePolicy
) -> tuple[int, str]:
    if desired > current:
        added = sum(e.change for e in events if e.change > 0)
        start = max(current - added, 0)
        step = max(policy.max_scale_up_step, math.ceil(start * policy.max_scale_up_percent / 100))
        limit = max(start + step, current)
        if desired > limit:
            return limit, f"up at most {step} per {policy.interval_seconds:g}s interval, to {limit}"
    elif desired < current:
        removed = -sum(e.change for e in events if e.change < 0)
        limit = min(current + removed - policy.max_scale_down_step, current)
        if desired < limit:
            return limit, (
                f"down at most {policy.max_scale_down_step} per {policy.interval_seconds:g}s interval, "
                f"to {limit}"
            )
    return desired, ""


def _apply_bounds(
    replicas: int, wanted: int, policy: AutoscalePolicy, observed: ObservedReplicas
) -> tuple[int, Constraint, int, list[str]]:
    """Clamp to [min, max], then to GPU capacity; report the shortfall against ``wanted``."""
    constraint: Constraint = "none"
    notes: list[str] = []
    bounded = replicas
    if policy.min_replicas == 0 and bounded < 1 <= observed.current:
        bounded = 1  # only idleness takes a model to zero (_to_zero_when_idle)
        notes.append("at least 1 until idle for idleSeconds")
    elif bounded < policy.min_replicas:
        bounded = policy.min_replicas
        constraint = "min-replicas"
        notes.append(f"raised to minReplicas {policy.min_replicas}")
    elif bounded > policy.max_replicas:
        bounded = policy.max_replicas
        constraint = "max-replicas"
        notes.append(f"capped at maxReplicas {policy.max_replicas}")
    shortfall = 0
    capacity = observed.capacity
    if capacity is not None:
        wanted_in_bounds = min(max(wanted, bounded, policy.min_replicas), policy.max_replicas)
        shortfall = max(wanted_in_bounds - capacity, 0)
        if bounded > capacity:
            bounded = capacity
            constraint = "capacity"
            notes.append(
                f"GPU pools can host only {capacity} replicas: short by {shortfall} "
                f"(wanted {wanted_in_bounds})"
            )
        elif shortfall:
            notes.append(f"GPU pools can host {capacity} replicas; the load wants {wanted_in_bounds}")
    return bounded, constraint, shortfall, notes
