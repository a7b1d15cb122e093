"""The KV-cache tokens vLLM reports, per variant, from the labels of ``vllm:cache_config_info``.

vLLM exposes its cache configuration only as the labels of an info gauge whose value is 1, one
series per engine (``CacheConfig.metrics_info()``: every field of vLLM's CacheConfig as a string,
and ``engine``)::

    vllm:cache_config_info{block_size="16",num_gpu_blocks="2271",kv_cache_size_tokens="36336",...} 1

PromQL cannot turn a label into a number, so the operator reads the label sets from Prometheus
(``clients.prometheus``, from the autoscaler's loop: ``controller.kv_cache``) and this module turns
them into tokens; the operator exports the result as ``glm_operator_reported_kv_cache_tokens``
next to the planned ``glm_operator_planned_kv_cache_tokens``, and an alert compares the two.

Tokens of one series:

- ``kv_cache_size_tokens`` when it is a positive integer: the capacity vLLM logs at start-up as
  "GPU KV cache size: N tokens", which is what the planner computes (vLLM 0.33 reports it; its
  CacheConfig notes that ``num_gpu_blocks * block_size`` "can be wrong for hybrid models", and with
  data parallelism ``num_gpu_blocks`` is summed over the engines while this is per engine);
- else ``num_gpu_blocks`` x ``block_size`` (releases without that field);
- else nothing: a series whose labels are missing, ``None`` (before the engine is initialised),
  not a plain positive integer, or too large for a float gauge to hold exactly is ignored.

Per variant (a pod's ``inference.glm.dev/gpu-product`` label, the ``gpu_product`` of the planned
gauge) the smallest over its pods: the replica with the fewest tokens is the one that cannot hold
``spec.minConcurrency``. A series whose ``pod`` is not one of the GLMDeployment's pods is ignored.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT

__all__ = ["MAX_TOKENS", "pod_gpu_products", "reported_kv_tokens", "tokens_of"]

#: Larger counts are read as garbled: a float gauge holds integers exactly only up to 2**53.
MAX_TOKENS = 2**53
_DIGITS = re.compile(r"[0-9]{1,16}")


def _positive_int(value: object) -> int | None:
    if not isinstance(value, str) or not _DIGITS.fullmatch(value):
        return None
    number = int(value)
    return number if 0 < number <= MAX_TOKENS else None


def tokens_of(labels: Mapping[str, Any]) -> int | None:
    """KV-cache tokens one ``vllm:cache_config_info`` series reports, or None when it says none."""
    tokens = _positive_int(labels.get("kv_cache_size_tokens"))
    if tokens is not None:
        return tokens
    blocks = _positive_int(labels.get("num_gpu_blocks"))
    block_size = _positive_int(labels.get("block_size"))
    if blocks is None or block_size is None or blocks * block_size > MAX_TOKENS:
        return None
    return blocks * block_size


def pod_gpu_products(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> the GPU type it was planned for (its gpu-product label); pods without one left out."""
    products: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = meta.get("name")
        product = (meta.get("labels") or {}).get(LABEL_GPU_PRODUCT)
        if isinstance(name, str) and name and isinstance(product, str) and product:
            products[name] = product
    return products


def reported_kv_tokens(series: Iterable[Mapping[str, Any]], products: Mapping[str, str]) -> dict[str, int]:
    """GPU type -> the fewest KV-cache tokens any of its pods reports. ``series``: the label sets of
    ``vllm:cache_config_info`` (each with the scrape's ``pod``); ``products``: ``pod_gpu_products``."""
    fewest: dict[str, int] = {}
    for labels in series:
        product = products.get(str(labels.get("pod") or ""))
        tokens = tokens_of(labels)
        if product is None or tokens is None:
            continue
        fewest[product] = min(tokens, fewest.get(product, tokens))
    return fewest
