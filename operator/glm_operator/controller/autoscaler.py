"""The built-in autoscaler: query Prometheus, decide (pure), write status, re-reconcile.

For every GLMDeployment with ``spec.autoscaling`` and a plan (``planned``: the targets of the
reconciler's last one), once per ``intervalSeconds`` on the leader: read the vLLM queue of its
served model, ``desired.scaling.scale`` (pure, around ``planning.scaling.autoscale.decide``), and write
``status.desiredReplicas`` and ``status.autoscaler`` (their only writer; never ``spec``),
conditional on the version read: a 409 decides again at the next tick. The reconcile that follows
spreads the new total over the GPU pools. Prometheus unreachable: the replicas hold and
``MetricsAvailable=False`` says why. At zero (``minReplicas: 0``) there is no vLLM metric: a
gateway's request for the model (``wake``) runs the key's decision at once, unless it is older
than the last scale. Each tick also runs the ``KVCacheReader``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.clients.kube import KubeClient, summarize_api_error
from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.clock import Clock
from glm_operator.controller.kv_cache import KVCacheReader
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.retry import bounded_step
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.desired.children import served_model_name
from glm_operator.desired.model import ScalingTargets
from glm_operator.desired.scaling import current_replicas, scale
from glm_operator.planning.diagnosis.conditions import MetricsStatus
from glm_operator.planning.scaling.autoscale import QueueSample
from glm_operator.planning.supply.outages import parse_time

log = logging.getLogger(__name__)
CONCURRENCY = 8  # Prometheus queries in flight at once
TICK_SECONDS = 1.0
SCALED_TO_ZERO = "ScaledToZero"


class Autoscaler:
    def __init__(
        self,
        *,
        prometheus: PrometheusQueueClient,
        api: KubeClient,
        cache: ClusterCache,
        recorder: EventRecorder,
        queue: WorkQueue[Key],
        clock: Clock,
        is_leader: Callable[[], bool],
    ) -> None:
        self.prometheus = prometheus
        self.api = api
        self.cache = cache
        self.recorder = recorder
        self.queue = queue
        self.clock = clock
        self.is_leader = is_leader
        self._targets: dict[Key, ScalingTargets] = {}  # from the reconciler's last plan
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

    def planned(self, key: Key, targets: ScalingTargets | None) -> None:
        """The reconciler's last pass over ``key``: what its plan gives to scale on (None: nothing,
        no plan or no spec.autoscaling; the key is not decided for until a plan gives some)."""
        if targets is None:
            self._targets.pop(key, None)
        else:
            self._targets[key] = targets

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
            if not autoscaling or key not in self._targets or self._next_run.get(key, 0.0) > now:
                continue  # not autoscaled, not planned yet, or not due
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
        targets = self._targets.get(key)
        if body is None or targets is None or not (body.get("spec") or {}).get("autoscaling"):
            return
        spec = spec_from_dict(body["spec"])
        current, ready = current_replicas(spec, body.get("status") or {})
        sample = await self._read_queue(
            key, served_model_name(spec), scaled_to_zero=current == 0 and ready == 0, current=current
        )
        pods = self.cache.owned.pods_of(key)
        scaled = scale(body, spec, targets, sample, pods, self.clock.now(), wake_requested=key in self._wake)
        version = str(body["metadata"].get("resourceVersion") or "") or None
        try:
            written = await asyncio.to_thread(self.api.patch_status, namespace, name, scaled.status, version)
        except Exception as exc:
            if summarize_api_error(exc).status != 409:
                raise
            self._next_run[key] = 0.0  # changed since it was read: decide again from the newer version
            log.info("autoscaler %s/%s: status changed since read; deciding again", namespace, name)
            return
        self.cache.owned.set_glmdeployment(written)
        if scaled.replicas > 0 or scaled.current > 0:
            self._wake.pop(key, None)  # answered (or nothing to wake)
        metrics.count_autoscaler_decision(namespace, name, scaled.direction)
        self.recorder.post(body, scaled.events)
        self.queue.add(key)  # apply the replica total and refresh MetricsAvailable
