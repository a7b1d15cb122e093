"""The built-in autoscaler loop: query Prometheus, ``decide`` (pure), write status, re-reconcile.

For every GLMDeployment with ``spec.autoscaling``, once per ``intervalSeconds`` on the leader:
read the vLLM queue of its served model, call ``planning.autoscale.decide`` with the persisted
scaler state, and write ``status.desiredReplicas`` and ``status.autoscaler`` (never ``spec``).
The reconcile that follows spreads the new total over the GPU pools and scales the children.

Prometheus unreachable or returning nothing: the decision holds the current replicas, and
``MetricsAvailable=False`` says why; nothing scales in either direction.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.desired import served_model_name
from glm_operator.controller.reconcile import now_rfc3339
from glm_operator.controller.workqueue import Key
from glm_operator.planning.autoscale import AutoscalePolicy, ObservedReplicas, ScalerState, decide
from glm_operator.planning.capacity import ElasticCapacityInput, observed_capacity
from glm_operator.planning.coldstart import measured_cold_start
from glm_operator.planning.conditions import MetricsStatus
from glm_operator.planning.nodes import parse_gpu_pools
from glm_operator.planning.placement import plan_placement
from glm_operator.planning.request import placement_request_from_spec

if TYPE_CHECKING:
    from glm_operator.controller.runtime import Operator

log = logging.getLogger(__name__)
CONCURRENCY = 8  # Prometheus queries in flight at once


class Autoscaler:
    def __init__(self, op: Operator, tick_seconds: float = 1.0) -> None:
        self.op = op
        assert op.config.prometheus_url
        self.client = PrometheusQueueClient(
            op.config.prometheus_url,
            waiting_query=op.config.waiting_query,
            running_query=op.config.running_query,
        )
        self.tick_seconds = tick_seconds
        self._status: dict[Key, MetricsStatus] = {}
        self._next_run: dict[Key, float] = {}
        self._concurrency = asyncio.Semaphore(CONCURRENCY)

    def metrics_status(self, key: Key) -> MetricsStatus | None:
        return self._status.get(key)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            if not self.op.is_leader:
                continue
            now = time.monotonic()
            glmdeployments = self.op.cache.owned.glmdeployments
            due = []
            for key, obj in list(glmdeployments.items()):
                autoscaling = (obj.get("spec") or {}).get("autoscaling")
                if not autoscaling or self._next_run.get(key, 0.0) > now:
                    continue
                self._next_run[key] = now + float(autoscaling.get("intervalSeconds") or 15)
                due.append(key)
            # Prometheus is queried for all due GLMDeployments at once, at most CONCURRENCY at a time.
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

    @staticmethod
    def _capacity_and_concurrency(
        spec: dict[str, Any],
        max_replicas: int,
        nodes: list[dict[str, Any]],
        gpus_used: Mapping[str, Mapping[str, int]],
        elastic: ElasticCapacityInput,
        pods: list[dict[str, Any]],
        default_image: str,
    ) -> tuple[int, float]:
        """Replicas the GPU pools and what node autoscalers can add host (planner with replicas=max)
        and one replica's concurrency.

        CPU-heavy at 1,000 nodes: runs in a thread, on a snapshot of the caches."""
        capacity = observed_capacity(
            parse_gpu_pools(nodes, gpus_used),
            nodes,
            elastic,
            pods,
            now_rfc3339(),
            max_replicas,
            bool((spec.get("gpu") or {}).get("allowMultiNode")),
        )
        request = placement_request_from_spec(
            {**spec, "replicas": max_replicas}, capacity.pools, default_image
        )
        plan = plan_placement(request)
        placed = [v for v in plan.variants if v.replicas > 0] or list(plan.variants)
        concurrency = max((float(v.max_num_seqs) for v in placed), default=1.0)
        return plan.replicas_planned, concurrency

    async def step(self, key: Key) -> None:
        namespace, name = key
        body = self.op.cache.owned.glmdeployments.get(key)
        if body is None or not (body.get("spec") or {}).get("autoscaling"):
            return
        spec = spec_from_dict(body["spec"])
        assert spec.autoscaling is not None
        spec_dict = spec.model_dump(by_alias=True, exclude_none=True)
        status = dict(body.get("status") or {})
        # its pods: those waiting for a node being launched keep their GPUs in the capacity
        pods = self.op.cache.owned.pods_of(key)
        capacity, concurrency = await asyncio.to_thread(
            self._capacity_and_concurrency,
            spec_dict,
            spec.autoscaling.max_replicas,
            list(self.op.cache.nodes.values()),
            self.op.cache.gpus_used(exclude_owner=key),
            self.op.nodepools.elastic_input(self.op.config),
            pods,
            self.op.config.default_image,
        )
        policy = AutoscalePolicy.from_spec(
            spec_dict["autoscaling"],
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
            sample = await self.client.fetch_async(namespace=namespace, model=model)
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
            time.time(),
            ObservedReplicas(current=current, ready=min(ready, current), capacity=capacity),
        )
        direction = (
            "unavailable"
            if sample is None
            else "up"
            if decision.replicas > current
            else "down"
            if decision.replicas < current
            else "hold"
        )
        metrics.AUTOSCALER_DECISIONS.labels(direction=direction).inc()
        new_auto = {
            "queueLength": sample.waiting if sample is not None else auto_status.get("queueLength"),
            "reason": decision.reason[:1000],
            "state": json.dumps(decision.state.to_dict(), separators=(",", ":")),
            "lastScaleTime": now_rfc3339()
            if decision.replicas != current
            else auto_status.get("lastScaleTime"),
        }
        patch = {
            "desiredReplicas": decision.replicas,
            "autoscaler": {k: v for k, v in new_auto.items() if v is not None},
        }
        written = await asyncio.to_thread(self.op.api.patch_status, namespace, name, patch)
        self.op.cache.owned.set_glmdeployment(written)
        if decision.replicas != current:
            await asyncio.to_thread(
                self.op.api.create_event,
                body,
                reason="ScaledUp" if decision.replicas > current else "ScaledDown",
                message=f"{current} -> {decision.replicas} replicas: {decision.reason}"[:1000],
            )
        self.op.queue.add(key)  # apply the replica total and refresh MetricsAvailable
