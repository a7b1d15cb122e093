"""Prometheus queries for the autoscaler: the vLLM queue of one GLMDeployment, and the label sets of
vLLM's ``vllm:cache_config_info`` (its KV-cache size; ``monitoring.kv_cache`` reads them). Only
queries.

The PromQL is a template with two placeholders, ``{namespace}`` and ``{model}`` (the served model
name), substituted as escaped PromQL string contents. Only these two exact placeholders are
replaced, so PromQL's own braces need no escaping. Defaults::

    sum(vllm:num_requests_waiting{namespace="{namespace}",model_name="{model}"})
    sum(vllm:num_requests_running{namespace="{namespace}",model_name="{model}"})

The KV-cache query (same placeholders) returns the info series themselves, one per pod and engine::

    vllm:cache_config_info{namespace="{namespace}"}
      and on (namespace, pod) vllm:num_requests_running{namespace="{namespace}",model_name="{model}"}

vLLM labels that info gauge without ``model_name``; the ``and`` keeps the pods whose queue gauge
carries the served model name, as the queue queries select them. An empty answer is no pods
reporting (an empty list), not an error.

Do not append ``or vector(0)``: that turns "no data" into zero load. The ``namespace`` label is
the one Prometheus' Kubernetes service discovery (or a static target label) attaches; vLLM
itself labels with ``model_name``. A template should return one series; if it returns several,
their values are added (so ``vllm:num_requests_waiting{...}`` without ``sum`` works too).

Errors are never read as zero: an unreachable Prometheus, an HTTP or query error, an empty result
(no series: the replicas are not scraped yet, or the model name is wrong), or a NaN value raise
:class:`MetricsUnavailable` with the reason. The decision code turns that into "hold replicas".

The client is synchronous (``requests`` underneath); async callers use :meth:`fetch_async`, which
runs it in a worker thread.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, cast

import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.util.retry import Retry

from glm_operator.planning.scaling.autoscale import QueueSample

__all__ = [
    "DEFAULT_KV_CACHE_QUERY",
    "DEFAULT_RUNNING_QUERY",
    "DEFAULT_WAITING_QUERY",
    "MetricsUnavailable",
    "PrometheusQueueClient",
    "QueueSample",
    "render_query",
]

DEFAULT_WAITING_QUERY = 'sum(vllm:num_requests_waiting{namespace="{namespace}",model_name="{model}"})'
DEFAULT_RUNNING_QUERY = 'sum(vllm:num_requests_running{namespace="{namespace}",model_name="{model}"})'
DEFAULT_KV_CACHE_QUERY = (
    'vllm:cache_config_info{namespace="{namespace}"} and on (namespace, pod) '
    'vllm:num_requests_running{namespace="{namespace}",model_name="{model}"}'
)


class MetricsUnavailable(Exception):
    """No usable queue metric; ``reason`` says why (for the MetricsAvailable condition)."""

    def __init__(self, reason: str, query: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.query = query


def escape_label_value(value: str) -> str:
    """Escape for a PromQL double-quoted string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_query(template: str, *, namespace: str, model: str) -> str:
    """Fill ``{namespace}`` and ``{model}`` in ``template`` (other braces are left alone)."""
    return template.replace("{namespace}", escape_label_value(namespace)).replace(
        "{model}", escape_label_value(model)
    )


@dataclass(frozen=True)
class _Value:
    value: float
    timestamp: float


class PrometheusQueueClient:
    """Reads ``QueueSample``s from Prometheus' instant-query API.

    ``url`` is Prometheus' base URL (e.g. ``http://prometheus.monitoring:9090``). ``timeout_seconds``
    bounds every HTTP request; ``retries`` is the number of retries on connection errors and 5xx
    (kept small: the next timer tick is the real retry).
    """

    def __init__(
        self,
        url: str,
        *,
        waiting_query: str = DEFAULT_WAITING_QUERY,
        running_query: str = DEFAULT_RUNNING_QUERY,
        kv_cache_query: str = DEFAULT_KV_CACHE_QUERY,
        timeout_seconds: float = 5.0,
        retries: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.waiting_query = waiting_query
        self.running_query = running_query
        self.kv_cache_query = kv_cache_query
        self.timeout_seconds = timeout_seconds
        retry = Retry(
            total=retries,
            backoff_factor=0.2,
            status_forcelist=[429, 500, 502, 503, 504],
            raise_on_status=False,
        )
        self._connection = PrometheusConnect(url=self.url, headers=dict(headers or {}), retry=retry)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PrometheusQueueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fetch(self, *, namespace: str, model: str) -> QueueSample:
        """Waiting and running requests of ``model`` in ``namespace``; raises MetricsUnavailable."""
        waiting = self._query_value(render_query(self.waiting_query, namespace=namespace, model=model))
        running = self._query_value(render_query(self.running_query, namespace=namespace, model=model))
        return QueueSample(
            waiting=waiting.value,
            running=running.value,
            timestamp=min(waiting.timestamp, running.timestamp),
        )

    async def fetch_async(self, *, namespace: str, model: str) -> QueueSample:
        """:meth:`fetch` in a worker thread, for kopf handlers."""
        return await asyncio.to_thread(self.fetch, namespace=namespace, model=model)

    def fetch_kv_cache_info(self, *, namespace: str, model: str) -> list[dict[str, str]]:
        """The label sets of ``vllm:cache_config_info`` of the pods serving ``model`` in
        ``namespace`` ([] when none reports); raises MetricsUnavailable when Prometheus fails."""
        query = render_query(self.kv_cache_query, namespace=namespace, model=model)
        return _parse_label_sets(self._query(query), query)

    async def fetch_kv_cache_info_async(self, *, namespace: str, model: str) -> list[dict[str, str]]:
        """:meth:`fetch_kv_cache_info` in a worker thread."""
        return await asyncio.to_thread(self.fetch_kv_cache_info, namespace=namespace, model=model)

    def _query_value(self, query: str) -> _Value:
        return _parse_vector(self._query(query), query)

    def _query(self, query: str) -> Any:
        try:
            result: Any = self._connection.custom_query(
                query,
                timeout=cast(int, self.timeout_seconds),  # annotated int; requests takes a float
            )
        except (requests.exceptions.JSONDecodeError, KeyError, TypeError) as err:
            # A body that is not Prometheus' JSON (e.g. a proxy's error page).
            raise MetricsUnavailable(
                f"Prometheus answered with an unreadable body: {_short(err)}", query
            ) from err
        except requests.RequestException as err:
            raise MetricsUnavailable(f"Prometheus at {self.url} unreachable: {_short(err)}", query) from err
        except PrometheusApiClientException as err:
            raise MetricsUnavailable(f"Prometheus query failed: {_short(err)}", query) from err
        return result


def _parse_vector(result: Any, query: str) -> _Value:
    if not isinstance(result, list):
        raise MetricsUnavailable(f"query did not return an instant vector: {str(result)[:200]}", query)
    if not result:
        raise MetricsUnavailable(
            "query returned no series (replicas not scraped yet, or wrong labels)", query
        )
    total = 0.0
    timestamp = math.inf
    for series in result:
        try:
            sample_time, text = series["value"]
            value = float(text)
            timestamp = min(timestamp, float(sample_time))
        except (KeyError, TypeError, ValueError) as err:
            raise MetricsUnavailable(
                f"unexpected series in query result: {str(series)[:200]}", query
            ) from err
        if not math.isfinite(value):
            raise MetricsUnavailable(f"query returned {text}", query)
        total += value
    return _Value(value=total, timestamp=timestamp)


def _parse_label_sets(result: Any, query: str) -> list[dict[str, str]]:
    if not isinstance(result, list):
        raise MetricsUnavailable(f"query did not return an instant vector: {str(result)[:200]}", query)
    label_sets = []
    for series in result:
        labels = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(labels, dict):
            raise MetricsUnavailable(f"unexpected series in query result: {str(series)[:200]}", query)
        label_sets.append({str(k): str(v) for k, v in labels.items()})
    return label_sets


def _short(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."
