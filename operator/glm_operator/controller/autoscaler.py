"""The built-in autoscaler: query Prometheus, ``decide`` (pure), write status, re-reconcile.

For every GLMDeployment with ``spec.autoscaling``, once per ``intervalSeconds`` on the leader:
read the vLLM queue of its served model, call ``planning.autoscale.decide`` with the scaler state
kept in status, and write ``status.desiredReplicas`` and ``status.autoscaler`` (never ``spec``;
the autoscaler is those fields' only writer). The reconcile that follows spreads the new total over
the GPU pools and scales the children.

Prometheus unreachable or returning nothing: the decision holds the current replicas, and
``MetricsAvailable=False`` says why; nothing scales in either direction.
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
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.desired.children import served_model_name
from glm_operator.desired.model import Event
from glm_operator.desired.status import autoscaler_fields
from glm_operator.planning.autoscale import AutoscalePolicy, ObservedReplicas, ScalerState, decide
from glm_operator.planning.capacity import ElasticCapacityInput, observed_capacity
from glm_operator.planning.coldstart import measured_cold_start
from glm_operator.planning.conditions import MetricsStatus
from glm_operator.planning.nodes import parse_gpu_pools
from glm_operator.planning.placement import plan_placement
from glm_operator.planning.request import placement_request

log = logging.getLogger(__name__)
CONCURRENCY = 8  # Prometheus queries in flight at once
TICK_SECONDS = 1.0


def capacity_and_concurrency(
    spec: GLMDeploymentSpec,
    nodes: list[Mapping[str, Any]],
    gpus_used: Mapping[str, Mapping[str, int]],
    elastic: ElasticCapacityInput,
    pods: list[dict[str, Any]],
    now: str,
    default_image: str,
) -> tuple[int, float]:
    """Replicas the GPU pools and what node autoscalers can add host (the planner asked for
    ``maxReplicas``), and one replica's concurrency. CPU-heavy at 1,000 nodes: run in a thread."""
    assert spec.autoscaling is not None
    max_replicas = spec.autoscaling.max_replicas
    capacity = observed_capacity(
        parse_gpu_pools(nodes, gpus_used), nodes, elastic, pods, now, max_replicas, spec.gpu.allow_multi_node
    )
    plan = plan_placement(placement_request(spec, capacity.pools, default_image, replicas=max_replicas))
    placed = [v for v in plan.variants if v.replicas > 0] or list(plan.variants)
    concurrency = max((float(v.max_num_seqs) for v in placed), default=1.0)
    return plan.replicas_planned, concurrency


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
        self._concurrency = asyncio.Semaphore(CONCURRENCY)

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
        most CONCURRENCY at a time)."""
        now = self.clock.monotonic()
        glmdeployments = self.cache.owned.glmdeployments
        due = []
        for key, obj in list(glmdeployments.items()):
            autoscaling = (obj.get("spec") or {}).get("autoscaling")
            if not autoscaling or self._next_run.get(key, 0.0) > now:
                continue
            self._next_run[key] = now + float(autoscaling.get("intervalSeconds") or 15)
            due.append(key)
        await asyncio.gather(*(self._bounded_step(key) for key in due))
        for key in set(self._next_run) - set(glmdeployments):
            self._next_run.pop(key, None)
            self._status.pop(key, None)

    async def _bounded_step(self, key: Key) -> None:
        async with self._concurrency:
            try:
                await self.step(key)
            except Exception as exc:
                log.warning("autoscaler step for %s/%s failed: %s", *key, exc)
                log.debug("autoscaler step for %s/%s failed", *key, exc_info=True)

    async def step(self, key: Key) -> None:
        namespace, name = key
        body = self.cache.owned.glmdeployments.get(key)
        if body is None or not (body.get("spec") or {}).get("autoscaling"):
            return
        spec = spec_from_dict(body["spec"])
        assert spec.autoscaling is not None
        status = dict(body.get("status") or {})
        pods = self.cache.owned.pods_of(key)  # those waiting for a launching node keep their GPUs
        capacity, concurrency = await asyncio.to_thread(
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
            cold_start_seconds=measured_cold_start(pods),
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
        try:
            sample = await self.prometheus.fetch_async(namespace=namespace, model=model)
            self._status[key] = MetricsStatus(True, "QueueMetricsFound", f"vllm queue of model {model} read")
            metrics.QUEUE_DEPTH.labels(namespace, name).set(sample.waiting)
        except MetricsUnavailable as exc:
            sample = None
            self._status[key] = MetricsStatus(
                False, "MetricsUnavailable", f"{exc.reason}; holding {current} replicas, no scaling"
            )
        decision = decide(
            sample,
            policy,
            state,
            self.clock.now().timestamp(),
            ObservedReplicas(current=current, ready=min(ready, current), capacity=capacity),
        )
        direction = (
            "unavailable" if sample is None
            else "up" if decision.replicas > current
            else "down" if decision.replicas < current
            else "hold"
        )  # fmt: skip
        metrics.count_autoscaler_decision(namespace, name, direction)
        patch = autoscaler_fields(
            desired_replicas=decision.replicas,
            queue_length=sample.waiting if sample is not None else auto_status.get("queueLength"),
            reason=decision.reason,
            state=json.dumps(decision.state.to_dict(), separators=(",", ":")),
            last_scale_time=rfc3339(self.clock.now())
            if decision.replicas != current
            else auto_status.get("lastScaleTime"),
        )
        written = await asyncio.to_thread(self.api.patch_status, namespace, name, patch)
        self.cache.owned.set_glmdeployment(written)
        if decision.replicas != current:
            reason = "ScaledUp" if decision.replicas > current else "ScaledDown"
            message = f"{current} -> {decision.replicas} replicas: {decision.reason}"[:1000]
            self.recorder.post(body, [Event("Normal", reason, message)])
        self.queue.add(key)  # apply the replica total and refresh MetricsAvailable
