"""The KV-cache tokens vLLM reports, exported next to the planned ones (``KVCacheReader``).

Run by the autoscaler's loop (``Autoscaler.tick``: only with Prometheus configured, only on the
leader), for every GLMDeployment, autoscaled or not, once per ``INTERVAL_SECONDS`` of the
controller's clock: read the label sets of ``vllm:cache_config_info`` of the pods serving its
model (``PrometheusQueueClient.fetch_kv_cache_info``), turn them into tokens per GPU type with the
GLMDeployment's pods from the cache (``monitoring.kv_cache``, pure), and set
``glm_operator_reported_kv_cache_tokens``. What Prometheus no longer reports (no pod, a failed
query) is removed, never kept from an earlier read; the chart's ``GLMKVCacheTokensOffPlan`` alert
compares the gauge with ``glm_operator_planned_kv_cache_tokens``.
"""

from __future__ import annotations

import asyncio
import logging

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.clock import Clock
from glm_operator.controller.retry import bounded_step
from glm_operator.controller.workqueue import Key
from glm_operator.desired.children import served_model_name
from glm_operator.monitoring.kv_cache import pod_gpu_products, reported_kv_tokens

log = logging.getLogger(__name__)
#: vLLM's cache size changes only when a pod starts; the alert waits 15 minutes.
INTERVAL_SECONDS = 60.0


class KVCacheReader:
    def __init__(
        self,
        *,
        prometheus: PrometheusQueueClient,
        cache: ClusterCache,
        clock: Clock,
        concurrency: asyncio.Semaphore,
    ) -> None:
        self.prometheus = prometheus
        self.cache = cache
        self.clock = clock
        self._concurrency = concurrency  # shared with the autoscaler's queries
        self._next_run: dict[Key, float] = {}

    async def tick(self) -> None:
        """Read every GLMDeployment whose interval is due; forget deleted ones."""
        now = self.clock.monotonic()
        glmdeployments = self.cache.owned.glmdeployments
        due = [key for key in list(glmdeployments) if self._next_run.get(key, 0.0) <= now]
        for key in due:
            self._next_run[key] = now + INTERVAL_SECONDS
        await asyncio.gather(*(self._bounded_step(key) for key in due))
        for key in set(self._next_run) - set(glmdeployments):
            self._next_run.pop(key, None)
            metrics.forget_reported_kv_tokens(*key)

    async def _bounded_step(self, key: Key) -> None:
        await bounded_step(self._concurrency, self.step, key, "KV-cache read", log)

    async def step(self, key: Key) -> None:
        namespace, name = key
        body = self.cache.owned.glmdeployments.get(key)
        if body is None:
            return
        try:
            model = served_model_name(spec_from_dict(body.get("spec") or {}))
        except ValueError:  # an invalid spec: its Planned condition says so, it runs nothing new
            metrics.record_reported_kv_tokens(key, {})
            return
        try:
            series = await self.prometheus.fetch_kv_cache_info_async(namespace=namespace, model=model)
        except MetricsUnavailable as exc:
            log.debug("KV-cache info of %s/%s unavailable: %s", namespace, name, exc.reason)
            series = []
        if key not in self.cache.owned.glmdeployments:
            return  # deleted while the query ran
        tokens = reported_kv_tokens(series, pod_gpu_products(self.cache.owned.pods_of(key)))
        metrics.record_reported_kv_tokens(key, tokens)
