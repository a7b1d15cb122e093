"""The built-in autoscaler: query Prometheus, ``decide`` (pure), write status, re-reconcile.

For every GLMDeployment with ``spec.autoscaling``, once per ``intervalSeconds`` on the leader:
read the vLLM queue of its served model, call ``planning.scaling.autoscale.decide`` with the scaler state
kept in status, and write ``status.desiredReplicas`` and ``status.autoscaler`` (never ``spec``;
the autoscaler is those fields' only writer). The reconcile that follows spreads the new total over
the GPU pools and scales the children.

Prometheus unreachable or returning nothing: the decision holds the current replicas, and
``MetricsAvailable=False`` says why; nothing scales in either direction.

Scale to zero (``autoscaling.minReplicas: 0``): ``decide`` takes an idle model to zero; at zero
there is no vLLM metric, so only a wake-up brings it back: ``wake(key, requested_at)``, called
when a gateway got a request for the model (``GatewayReconciler``, from the GLMGateway's
``status.wake``), runs the key's decision at once with ``wake_requested``. A wake-up requested
before the model last went to zero is stale and ignored. The measured cold start is kept in
``status.autoscaler`` across zero, and with it the expected wake-up time.

Each tick also runs the ``KVCacheReader`` (``controller.kv_cache``): the KV-cache tokens vLLM
reports, for every GLMDeployment, from the same Prometheus.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec, spec_from_dict
from glm_operator.clients.kube import KubeClient
from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.clock import Clock, rfc3339
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.kv_cache import KVCacheReader
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.retry import bounded_step
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.desired.children import served_model_name
from glm_operator.desired.model import Event
from glm_operator.desired.status import autoscaler_fields
from glm_operator.planning.diagnosis.conditions import MetricsStatus
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request
from glm_operator.planning.scaling.autoscale import (
    AutoscalePolicy,
    ObservedReplicas,
    QueueSample,
    ScalerState,
    decide,
)
from glm_operator.planning.scaling.coldstart import median_cold_start
from glm_operator.planning.supply.capacity import ElasticCapacityInput, observed_capacity
from glm_operator.planning.supply.nodes import parse_gpu_pools
from glm_operator.planning.supply.outages import parse_time

log = logging.getLogger(__name__)
CONCURRENCY = 8  # Prometheus queries in flight at once
TICK_SECONDS = 1.0
#: What a wake-up adds to the measured cold start: the autoscaler's decision and the reconcile.
WAKE_REACTION_SECONDS = 2.0
SCALED_TO_ZERO = "ScaledToZero"


def capacity_and_concurrency(
    spec: GLMDeploymentSpec,
    nodes: list[Mapping[str, Any]],
    gpus_used: Mapping[str, Mapping[str, int]],
    elastic: ElasticCapacityInput,
    pods: list[dict[str, Any]],
    now: str,
    default_image: str,
) -> tuple[int, float, float, tuple[str, bool, tuple[str, ...]] | None]:
    """Replicas the GPU pools and what node autoscalers can add host (the planner asked for
    ``maxReplicas``), one replica's target concurrency (the plan's predicted knee, at most max-num-seqs),
    its max-num-seqs, and where a first replica goes. CPU-heavy at 1,000
    nodes: run in a thread."""
    assert spec.autoscaling is not None
    max_replicas = spec.autoscaling.max_replicas
    capacity = observed_capacity(
        parse_gpu_pools(nodes, gpus_used), nodes, elastic, pods, now, max_replicas, spec.gpu.allow_multi_node
    )
    plan = plan_placement(placement_request(spec, capacity.pools, default_image, replicas=max_replicas))
    placed = [v for v in plan.variants if v.replicas > 0] or list(plan.variants)
    # aim each replica at the predicted knee (past it more requests buy latency, not throughput)
    concurrency = max((float(v.knee_concurrency or v.max_num_seqs) for v in placed), default=1.0)
    capacity_seqs = max((float(v.max_num_seqs) for v in placed), default=1.0)
    return plan.replicas_planned, concurrency, capacity_seqs, _first_replica(placed)


def _first_replica(placed: list[Any]) -> tuple[str, bool, tuple[str, ...]] | None:
    """Where the first replica goes: (GPU type, on a node to be launched, node pools), or None."""
    if not placed:
        return None
    first = placed[0]
    on_new_node = first.new_node_replicas >= first.replicas > 0
    return first.gpu_product, on_new_node, tuple(first.node_pools)


def cold_start_fields(measured: float | None, kept: Any, to_zero: bool) -> tuple[float | None, float | None]:
    """``status.autoscaler``'s coldStartSeconds and wakeUpSeconds: the pods' measured cold start,
    else the one kept in status (at zero no pod is left to measure). 0 s is a measure (a replica
    Ready within its first second), not a missing one. The wake-up, only with minReplicas 0, adds
    the autoscaler's reaction."""
    if measured is None and isinstance(kept, (int, float)) and not isinstance(kept, bool) and kept >= 0:
        measured = float(kept)
    if measured is None:
        return None, None
    return round(measured, 1), round(measured + WAKE_REACTION_SECONDS, 1) if to_zero else None


def wake_up_note(first: tuple[str, bool, tuple[str, ...]] | None) -> str:
    """``status.autoscaler.wakeUp``: where the first replica goes and what its wait includes."""
    if first is None:
        return "no GPU can host a replica now: a wake-up waits for GPUs (see the Planned condition)"
    gpu, on_new_node, pools = first
    if on_new_node:
        return (
            f"first replica on {gpu} from a node launched for it ({', '.join(pools) or 'node autoscaler'}): "
            "the wake-up includes the node's start; no GPU is held while at zero"
        )
    return f"first replica on free {gpu} GPUs of a running node (no node start); none is held while at zero"


class Autoscaler:
    def __init__(
        self,
        *,
        prometheus: PrometheusQueueClient,
        api: KubeClient,
        cache: ClusterCache,
        nodepools: NodePoolCache,
        recorder: EventRecorder,
        queue: WorkQueue[Key],
        config: OperatorConfig,
        clock: Clock,
        is_leader: Callable[[], bool],
    ) -> None:
        self.prometheus = prometheus
        self.api = api
        self.cache = cache
        self.nodepools = nodepools
        self.recorder = recorder
        self.queue = queue
        self.config = config
        self.clock = clock
        self.is_leader = is_leader
        self._status: dict[Key, MetricsStatus] = {}
        self._next_run: dict[Key, float] = {}
        self._wake: dict[Key, float] = {}  # key -> unix time of the newest wake-up request not yet acted on
        self._concurrency = asyncio.Semaphore(CONCURRENCY)
        self.kv_cache = KVCacheReader(
            prometheus=prometheus, cache=cache, clock=clock, concurrency=self._concurrency
        )

    def wake(self, key: Key, requested_at: float) -> bool:
        """A gateway got a request for this model: decide for it at the next tick (within 1 s).
        False when the GLMDeployment cannot go to zero (nothing to wake) or the request is stale."""
        body = self.cache.owned.glmdeployments.get(key)
        autoscaling = ((body or {}).get("spec") or {}).get("autoscaling") or {}
        if body is None or int(autoscaling.get("minReplicas", 1)) != 0:
            return False
        auto_status = (body.get("status") or {}).get("autoscaler") or {}
        went_to_zero = parse_time(auto_status.get("lastScaleTime"))
        if went_to_zero is not None and requested_at < went_to_zero.timestamp():
            return False  # asked before the model last scaled (to zero): already answered
        if requested_at <= self._wake.get(key, 0.0):
            return False
        self._wake[key] = requested_at
        self._next_run[key] = 0.0  # due now
        return True

    def metrics_status(self, key: Key) -> MetricsStatus | None:
        """What the last decision saw of Prometheus (the reconciler's MetricsAvailable condition)."""
        return self._status.get(key)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            if self.is_leader():
                await self.tick()

    async def tick(self) -> None:
        """Decide for every GLMDeployment whose interval is due (Prometheus queried at once, at
        most CONCURRENCY at a time, decisions first), and the KV-cache sizes that are due."""
        now = self.clock.monotonic()
        glmdeployments = self.cache.owned.glmdeployments
        due = []
        for key, obj in list(glmdeployments.items()):
            autoscaling = (obj.get("spec") or {}).get("autoscaling")
            if not autoscaling or self._next_run.get(key, 0.0) > now:
                continue
            self._next_run[key] = now + float(autoscaling.get("intervalSeconds") or 15)
            due.append(key)
        await asyncio.gather(*(self._bounded_step(key) for key in due), self.kv_cache.tick())
        for key in set(self._next_run) - set(glmdeployments):
            self._next_run.pop(key, None)
            self._status.pop(key, None)
            self._wake.pop(key, None)

    async def _bounded_step(self, key: Key) -> None:
        await bounded_step(self._concurrency, self.step, key, "autoscaler step", log)

    async def _read_queue(
        self, key: Key, model: str, *, scaled_to_zero: bool, current: int
    ) -> QueueSample | None:
        """vLLM's queue of ``model`` from Prometheus (None when unavailable); records what was seen
        for the MetricsAvailable condition."""
        namespace, name = key
        try:
            sample = await self.prometheus.fetch_async(namespace=namespace, model=model)
        except MetricsUnavailable as exc:
            if scaled_to_zero:
                self._status[key] = MetricsStatus(
                    True, SCALED_TO_ZERO, "no replica runs, so vLLM reports no queue; a request through the "
                    "namespace's GLMGateway wakes the model",
                )  # fmt: skip
            else:
                self._status[key] = MetricsStatus(
                    False, "MetricsUnavailable", f"{exc.reason}; holding {current} replicas, no scaling"
                )
            return None
        self._status[key] = MetricsStatus(True, "QueueMetricsFound", f"vllm queue of model {model} read")
        metrics.QUEUE_DEPTH.labels(namespace, name).set(sample.waiting)
        return sample

    async def step(self, key: Key) -> None:
        namespace, name = key
        body = self.cache.owned.glmdeployments.get(key)
        if body is None or not (body.get("spec") or {}).get("autoscaling"):
            return
        spec = spec_from_dict(body["spec"])
        assert spec.autoscaling is not None
        status = dict(body.get("status") or {})
        pods = self.cache.owned.pods_of(key)  # those waiting for a launching node keep their GPUs
        capacity, concurrency, max_num_seqs, first_replica = await asyncio.to_thread(
            capacity_and_concurrency,
            spec,
            list(self.cache.nodes.values()),
            self.cache.gpus_used(exclude_owner=key),
            self.nodepools.elastic_input(self.config),
            pods,
            rfc3339(self.clock.now()),
            self.config.default_image,
        )
        policy = AutoscalePolicy.from_spec(
            spec.autoscaling.model_dump(by_alias=True),
            replica_concurrency=concurrency,
            cold_start_seconds=median_cold_start(pods) or 0.0,
            replica_capacity=max_num_seqs,
        )
        auto_status = dict(status.get("autoscaler") or {})
        try:
            state = ScalerState.from_dict(json.loads(auto_status.get("state") or "{}"))
        except ValueError:
            state = ScalerState()
        current = status.get("desiredReplicas")
        current = int(current) if isinstance(current, int) else spec.autoscaling.min_replicas
        ready = int(status.get("readyReplicas") or 0)
        model = served_model_name(spec)
        wake = key in self._wake
        sample = await self._read_queue(
            key, model, scaled_to_zero=current == 0 and ready == 0, current=current
        )
        decision = decide(
            sample,
            policy,
            state,
            self.clock.now().timestamp(),
            ObservedReplicas(
                current=current, ready=min(ready, current), capacity=capacity, wake_requested=wake
            ),
        )
        if decision.replicas > 0 or current > 0:
            self._wake.pop(key, None)  # answered (or nothing to wake)
        direction = (
            "unavailable" if sample is None
            else "up" if decision.replicas > current
            else "down" if decision.replicas < current
            else "hold"
        )  # fmt: skip
        metrics.count_autoscaler_decision(namespace, name, direction)
        to_zero = spec.autoscaling.min_replicas == 0
        cold_start, wake_up = cold_start_fields(
            median_cold_start(pods), auto_status.get("coldStartSeconds"), to_zero
        )
        patch = autoscaler_fields(
            desired_replicas=decision.replicas,
            queue_length=sample.waiting if sample is not None else auto_status.get("queueLength"),
            reason=decision.reason,
            state=json.dumps(decision.state.to_dict(), separators=(",", ":")),
            last_scale_time=rfc3339(self.clock.now())
            if decision.replicas != current
            else auto_status.get("lastScaleTime"),
            cold_start_seconds=cold_start,
            wake_up_seconds=wake_up,
            wake_up=wake_up_note(first_replica) if to_zero else None,
        )
        written = await asyncio.to_thread(self.api.patch_status, namespace, name, patch)
        self.cache.owned.set_glmdeployment(written)
        if decision.replicas != current:
            reason = "ScaledUp" if decision.replicas > current else "ScaledDown"
            message = f"{current} -> {decision.replicas} replicas: {decision.reason}"[:1000]
            self.recorder.post(body, [Event("Normal", reason, message)])
        self.queue.add(key)  # apply the replica total and refresh MetricsAvailable
