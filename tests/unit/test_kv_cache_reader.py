"""The operator's reading of vLLM's KV-cache size (controller.kv_cache.KVCacheReader, run by the
autoscaler's tick): its query against a canned Prometheus on loopback, the gauge
``glm_operator_reported_kv_cache_tokens`` it sets per GPU type, its interval on the controller's
clock, and nothing exported when Prometheus fails or the GLMDeployment is gone.

The same against a real Prometheus scraping the vLLM emulator: tests/integration/test_monitoring_live.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT
from glm_operator.clients.prometheus import PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.autoscaler import Autoscaler
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.kv_cache import INTERVAL_SECONDS, KVCacheReader
from tests.harness.clock import ManualClock
from tests.harness.scenarios import BODY

from .test_prometheus_client import FakePrometheus, Responder, prometheus  # noqa: F401 (fixture)

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
KEY = ("llm", "kv-read")
GAUGE = "glm_operator_reported_kv_cache_tokens"
QUERY = (
    'vllm:cache_config_info{namespace="llm"} and on (namespace, pod) '
    'vllm:num_requests_running{namespace="llm",model_name="glm-4.5-air"}'
)


def reported() -> dict[str, float]:
    return {
        s.labels["gpu_product"]: s.value
        for family in metrics.REGISTRY.collect()
        for s in family.samples
        if s.name == GAUGE and (s.labels["namespace"], s.labels["name"]) == KEY
    }


def vector(*label_sets: dict[str, str]) -> dict[str, Any]:
    result = [{"metric": labels, "value": [1700000000.0, "1"]} for labels in label_sets]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def info(pod: str, blocks: str, block_size: str = "16", engine: str = "0") -> dict[str, str]:
    return {"__name__": "vllm:cache_config_info", "namespace": "llm", "pod": pod, "job": "vllm",
            "num_gpu_blocks": blocks, "block_size": block_size, "engine": engine}  # fmt: skip


def cache_with_pods() -> ClusterCache:
    cache = ClusterCache()
    body = copy.deepcopy(BODY)
    body["metadata"]["name"] = KEY[1]
    cache.owned.set_glmdeployment(body)
    for uid, (name, product) in enumerate(
        [("kv-read-h100-a", H100), ("kv-read-h100-b", H100), ("kv-read-a100-a", A100)]
    ):
        meta = {"name": name, "namespace": "llm", "uid": f"u{uid}", "labels": {LABEL_GPU_PRODUCT: product}}
        cache.owned.set_pod(KEY, {"metadata": meta})
    return cache


def test_the_reader_exports_the_fewest_tokens_per_gpu_type_once_per_interval(
    prometheus: Callable[[Responder], FakePrometheus],  # noqa: F811
) -> None:
    answer: dict[str, Any] = {"body": vector(
        info("kv-read-h100-a", "9000"), info("kv-read-h100-b", "8000"),
        info("kv-read-a100-a", "5000"), info("kv-read-a100-a", "None", engine="1"),
        info("someone-elses-pod", "10"),
    )}  # fmt: skip
    fake = prometheus(lambda query: (200, answer["body"]))
    clock = ManualClock()
    cache = cache_with_pods()
    reader = KVCacheReader(
        prometheus=PrometheusQueueClient(fake.url, retries=0),
        cache=cache,
        clock=clock,
        concurrency=asyncio.Semaphore(2),
    )
    try:
        asyncio.run(reader.tick())
        assert fake.queries == [QUERY]
        assert reported() == {H100: 8000 * 16, A100: 5000 * 16}

        # Not again before the interval is over, whatever the answer would be.
        answer["body"] = vector(info("kv-read-h100-a", "7000"))
        clock.advance(INTERVAL_SECONDS - 1)
        asyncio.run(reader.tick())
        assert len(fake.queries) == 1 and reported() == {H100: 8000 * 16, A100: 5000 * 16}

        # Then only what Prometheus reports now: the A100 pod reports nothing, its series goes.
        clock.advance(1)
        asyncio.run(reader.tick())
        assert len(fake.queries) == 2 and reported() == {H100: 7000 * 16}

        # Prometheus failing: nothing is exported, nothing raised.
        answer["body"] = {"status": "error", "error": "boom"}
        clock.advance(INTERVAL_SECONDS)
        asyncio.run(reader.tick())
        assert len(fake.queries) == 3 and reported() == {}

        # Deleted GLMDeployment: its series go at the next tick, with no query for it.
        answer["body"] = vector(info("kv-read-h100-a", "7000"))
        clock.advance(INTERVAL_SECONDS)
        asyncio.run(reader.tick())
        assert reported() == {H100: 7000 * 16}
        cache.owned.delete_glmdeployment(KEY)
        clock.advance(INTERVAL_SECONDS)
        asyncio.run(reader.tick())
        assert len(fake.queries) == 4 and reported() == {}
    finally:
        metrics.forget(*KEY)


def test_the_autoscalers_tick_reads_the_kv_cache_of_glmdeployments_without_autoscaling(
    prometheus: Callable[[Responder], FakePrometheus],  # noqa: F811
) -> None:
    fake = prometheus(lambda query: (200, vector(info("kv-read-h100-a", "4096"))))
    clock = ManualClock()
    autoscaler = Autoscaler(
        prometheus=PrometheusQueueClient(fake.url, retries=0),
        api=None,  # type: ignore[arg-type]  # no autoscaled GLMDeployment: never written
        cache=cache_with_pods(),
        recorder=None,  # type: ignore[arg-type]
        queue=None,  # type: ignore[arg-type]
        clock=clock,
        is_leader=lambda: True,
    )
    try:
        asyncio.run(autoscaler.tick())
        assert fake.queries == [QUERY]  # no queue query: it does not autoscale
        assert reported() == {H100: 4096 * 16}
    finally:
        metrics.forget(*KEY)
