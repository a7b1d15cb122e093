"""Autoscaler quality on request traces: glm-operator's decide() against the plain Kubernetes HPA.

A script that prints figures, not a test. Run:  python benchmarks/autoscale_traces.py [--seed 7]

Traces (generated deterministically from the seed; arrival rate in requests/s, Poisson arrivals,
log-normal service times):
  steady   4 h at a constant rate;
  diurnal  24 h, a day/night cosine between a night floor and a daytime peak;
  bursty   6 h of a base rate with spikes of 3-6x lasting 5-15 min at random times.

The cluster is a discrete-time (1 s) queueing model: each replica runs at most ``--concurrency``
sequences at once (the planner's figure); one FIFO queue in front of all ready replicas (what
vLLM's per-replica queues behind a least-request balancer approximate); a new replica serves only
after a cold start drawn uniformly from ``--cold-start`` (model download, load, CUDA graphs). A
scale-down removes starting replicas first, then ready ones; their running requests finish
(graceful drain). Metrics exist only while a replica is ready (no replica, no vLLM metric).

Both controllers run every 15 s on the same queue metric, with the same target (waiting requests
per replica), bounds, tolerance and 300 s scale-down stabilisation:
  hpa   Kubernetes HPA v2 with a Pods metric ``vllm:num_requests_waiting``, averaged over all pods
        with starting pods counted as 0: desired = ceil(current * avg / target) if the ratio is
        outside the 10 % tolerance; scale-down stabilisation 300 s (max of the window); default
        rates: up max(4 pods, 100 %) per 15 s, down 100 % per 15 s.
  ours  glm_operator.planning.scaling.autoscale.decide with its defaults, fed the cold start it measures
        (scale-up -> ready, median of the last 9) as the operator measures pod created -> Ready.

Figures: GPU-hours (replicas alive incl. starting, times GPUs per replica); minutes with the queue
above target (waiting per ready replica > target, or any waiting with none ready); p50/p95 queue
wait of the requests; number of scale reversals (up then down or down then up); scale changes.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    ObservedReplicas,
    QueueSample,
    ScalerState,
    decide,
)

HOUR = 3600.0


@dataclass(frozen=True)
class Trace:
    name: str
    duration: float
    arrivals: list[tuple[float, float]]  # (arrival time, service seconds), sorted by arrival


@dataclass(frozen=True)
class SimConfig:
    concurrency: int
    target_queue_length: float
    min_replicas: int
    max_replicas: int
    interval: float
    scale_down_window: float
    cold_start: tuple[float, float]
    gpus_per_replica: int
    seed: int


@dataclass
class Result:
    gpu_hours: float = 0.0
    queue_minutes: float = 0.0
    waits: list[float] = field(default_factory=list)
    reversals: int = 0
    changes: int = 0
    peak: int = 0


# --- traces ------------------------------------------------------------------------------------


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method; mean per 1 s step is small (< 30).
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def make_trace(
    name: str, duration: float, rate: Callable[[float], float], service_mean: float, seed: int
) -> Trace:
    rng = random.Random(f"{name}-{seed}")
    sigma = 0.6
    mu = math.log(service_mean) - sigma**2 / 2
    arrivals = []
    for second in range(int(duration)):
        for _ in range(_poisson(rng, rate(second))):
            arrivals.append((second + rng.random(), rng.lognormvariate(mu, sigma)))
    arrivals.sort()
    return Trace(name, duration, arrivals)


def make_traces(service_mean: float, concurrency: int, seed: int) -> list[Trace]:
    # Rates in units of "replicas of load": one replica serves concurrency / service_mean req/s.
    replica_rate = concurrency / service_mean
    rng = random.Random(seed)
    spikes = []
    start = rng.uniform(600, 1800)
    while start < 6 * HOUR - 900:
        spikes.append((start, start + rng.uniform(300, 900), rng.uniform(3, 6)))
        start += rng.uniform(1800, 3600)

    def bursty(t: float) -> float:
        factor = next((f for s, e, f in spikes if s <= t < e), 1.0)
        return 1.2 * replica_rate * factor

    def diurnal(t: float) -> float:
        day = (1 - math.cos(2 * math.pi * t / (24 * HOUR))) / 2  # 0 at midnight, 1 at noon
        return replica_rate * (0.4 + 5.6 * day)

    return [
        make_trace("steady", 4 * HOUR, lambda t: 2.6 * replica_rate, service_mean, seed),
        make_trace("diurnal", 24 * HOUR, diurnal, service_mean, seed),
        make_trace("bursty", 6 * HOUR, bursty, service_mean, seed),
    ]


# --- controllers -------------------------------------------------------------------------------

Controller = Callable[[QueueSample | None, int, int, float], int]


def ours(config: SimConfig, measure_cold_start: bool = True) -> Controller:
    """decide() with its defaults; like the operator, it measures the cold start of the replicas it
    started (scale-up -> ready, the median of the last ones) and passes it in the policy."""
    policy = AutoscalePolicy(
        min_replicas=config.min_replicas,
        max_replicas=config.max_replicas,
        target_queue_length=config.target_queue_length,
        replica_concurrency=config.concurrency,
        scale_down_stabilization_seconds=config.scale_down_window,
        interval_seconds=config.interval,
    )
    state = ScalerState()
    starting: deque[float] = deque()  # scale-up times of replicas not ready yet
    measured: deque[float] = deque(maxlen=9)
    last_ready = config.min_replicas

    def control(sample: QueueSample | None, current: int, ready: int, now: float) -> int:
        nonlocal state, last_ready
        for _ in range(max(0, ready - last_ready)):
            if starting:
                measured.append(now - starting.popleft())
        last_ready = ready
        cold = sorted(measured)[len(measured) // 2] if measured and measure_cold_start else 0.0
        decision = decide(
            sample, replace(policy, cold_start_seconds=cold), state, now, ObservedReplicas(current, ready)
        )
        state = decision.state
        if decision.replicas > current:
            starting.extend([now] * (decision.replicas - current))
        elif decision.replicas < current:
            for _ in range(min(current - decision.replicas, len(starting))):
                starting.pop()  # the newest starting replicas go first
        return decision.replicas

    return control


def hpa(config: SimConfig) -> Controller:
    """Kubernetes HPA v2 (pkg/controller/podautoscaler) on the average waiting queue per pod."""
    tolerance = 0.1
    recommendations: list[tuple[float, int]] = []
    events: list[tuple[float, int]] = []

    def control(sample: QueueSample | None, current: int, ready: int, now: float) -> int:
        if sample is None:
            return current  # metrics unavailable: HPA skips the scale
        average = sample.waiting / current  # starting pods count as 0
        ratio = average / config.target_queue_length
        desired = current if abs(ratio - 1) <= tolerance else math.ceil(current * ratio)
        # stabilisation: up window 0, down window = max over the window
        recommendations.append((now, desired))
        recommendations[:] = [(t, r) for t, r in recommendations if now - t <= config.scale_down_window]
        down_limit = max(r for _, r in recommendations)
        stabilized = min(max(current, desired), down_limit)
        # rate policies over 15 s periods
        recent = [(t, c) for t, c in events if now - t < 15]
        events[:] = recent
        if stabilized > current:
            start = current - sum(c for _, c in recent if c > 0)
            limit = max(start + 4, math.ceil(start * 2))
            stabilized = min(stabilized, max(limit, current))
        elif stabilized < current:
            pass  # the default scale-down policy (100 % per 15 s) never binds
        final = min(max(stabilized, config.min_replicas), config.max_replicas)
        if final != current:
            events.append((now, final - current))
        return final

    return control


# --- simulation --------------------------------------------------------------------------------


def simulate(trace: Trace, config: SimConfig, controller: Controller) -> Result:
    rng = random.Random(f"cold-{config.seed}-{trace.name}")
    replicas: list[float] = [0.0] * config.min_replicas  # ready_at times; warm at the start
    queue: deque[tuple[float, float]] = deque()
    running: list[float] = []  # finish times
    result = Result()
    next_arrival = 0
    last_direction = 0
    for second in range(int(trace.duration)):
        now = float(second)
        while next_arrival < len(trace.arrivals) and trace.arrivals[next_arrival][0] < now + 1:
            queue.append(trace.arrivals[next_arrival])
            next_arrival += 1
        while running and running[0] <= now:
            heapq.heappop(running)
        ready = sum(1 for ready_at in replicas if ready_at <= now)
        slots = ready * config.concurrency
        while queue and len(running) < slots:
            arrival, service = queue.popleft()
            start = max(now, arrival)
            result.waits.append(start - arrival)
            heapq.heappush(running, start + service)

        if second % int(config.interval) == 0:
            sample = QueueSample(float(len(queue)), float(len(running)), now) if ready else None
            current = len(replicas)
            desired = controller(sample, current, ready, now)
            if desired != current:
                direction = 1 if desired > current else -1
                result.reversals += int(last_direction not in (0, direction))
                last_direction = direction
                result.changes += 1
            if desired > current:
                replicas += [now + rng.uniform(*config.cold_start) for _ in range(desired - current)]
            elif desired < current:
                replicas.sort()  # ready (earliest) first; drop the newest (starting) ones
                del replicas[desired:]
            result.peak = max(result.peak, len(replicas))

        result.gpu_hours += len(replicas) * config.gpus_per_replica / HOUR
        if queue and (ready == 0 or len(queue) / ready > config.target_queue_length):
            result.queue_minutes += 1 / 60
    end = trace.duration
    result.waits.extend(end - arrival for arrival, _ in queue)  # never started
    return result


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=16, help="sequences per replica")
    parser.add_argument("--service-seconds", type=float, default=30.0, help="mean service time")
    parser.add_argument("--target-queue-length", type=float, default=4.0)
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=12)
    parser.add_argument("--cold-start", type=float, nargs=2, default=(300.0, 480.0), metavar=("MIN", "MAX"))
    parser.add_argument("--gpus-per-replica", type=int, default=1)
    args = parser.parse_args(argv)
    config = SimConfig(
        concurrency=args.concurrency,
        target_queue_length=args.target_queue_length,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        interval=15.0,
        scale_down_window=300.0,
        cold_start=(args.cold_start[0], args.cold_start[1]),
        gpus_per_replica=args.gpus_per_replica,
        seed=args.seed,
    )
    print(
        f"seed {args.seed}; {args.concurrency} sequences/replica, mean service {args.service_seconds:g} s, "
        f"cold start {args.cold_start[0]:g}-{args.cold_start[1]:g} s, "
        f"target queue {args.target_queue_length:g}/replica, "
        f"replicas {args.min_replicas}-{args.max_replicas}, interval 15 s, down window 300 s"
    )
    header = (
        f"{'trace':8} {'policy':6} {'GPU-h':>7} {'queue>target min':>16} {'p50 wait s':>10} "
        f"{'p95 wait s':>10} {'reversals':>9} {'changes':>7} {'peak':>4}"
    )
    for trace in make_traces(args.service_seconds, args.concurrency, args.seed):
        print(f"\n{trace.name}: {len(trace.arrivals)} requests over {trace.duration / HOUR:g} h")
        print(header)
        for name, factory in (("hpa", hpa), ("ours", ours)):
            result = simulate(trace, config, factory(config))
            print(
                f"{trace.name:8} {name:6} {result.gpu_hours:7.1f} {result.queue_minutes:16.1f} "
                f"{percentile(result.waits, 0.5):10.1f} {percentile(result.waits, 0.95):10.1f} "
                f"{result.reversals:9d} {result.changes:7d} {result.peak:4d}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
