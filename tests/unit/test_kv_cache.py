"""The KV-cache tokens vLLM reports, from the labels of ``vllm:cache_config_info``
(glm_operator.monitoring.kv_cache): tokens of one series, the fewest per GPU type over its pods,
and labels that say nothing (missing, ``None``, garbled) ignored."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT
from glm_operator.monitoring.kv_cache import MAX_TOKENS, pod_gpu_products, reported_kv_tokens, tokens_of
from tests.harness.vllm_emulator import CacheConfig

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"

#: What vLLM 0.33's PrometheusStatLogger logs for an initialised engine (trimmed; the contract
#: test, tests/contract/test_vllm_metrics.py, reads the full label set from vLLM itself).
VLLM_033 = {
    "block_size": "16",
    "gpu_memory_utilization": "0.92",
    "cache_dtype": "auto",
    "num_gpu_blocks_override": "None",
    "enable_prefix_caching": "True",
    "num_gpu_blocks": "2271",
    "num_cpu_blocks": "None",
    "kv_cache_size_tokens": "36336",
    "kv_cache_max_concurrency": "4.4",
    "engine": "0",
}


def pod(name: str, product: str | None) -> dict[str, Any]:
    labels = {LABEL_GPU_PRODUCT: product} if product else {}
    return {"metadata": {"name": name, "namespace": "llm", "labels": labels}}


def info(pod_name: str, **labels: str) -> dict[str, str]:
    return {"__name__": "vllm:cache_config_info", "namespace": "llm", "pod": pod_name, **labels}


def test_the_size_vllm_logs_is_read_first_then_blocks_times_block_size() -> None:
    assert tokens_of(VLLM_033) == 36336
    assert tokens_of({**VLLM_033, "kv_cache_size_tokens": "None"}) == 2271 * 16
    assert tokens_of({"num_gpu_blocks": "2271", "block_size": "16"}) == 36336  # a release without it
    assert (
        tokens_of(CacheConfig(num_gpu_blocks=100, block_size=32, kv_cache_size_tokens=None).labels()) == 3200
    )


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"engine": "0"},
        {"num_gpu_blocks": "None", "block_size": "16", "kv_cache_size_tokens": "None"},  # not initialised
        {"num_gpu_blocks": "2271"},
        {"block_size": "16"},
        {"num_gpu_blocks": "0", "block_size": "16"},
        {"num_gpu_blocks": "-5", "block_size": "16"},
        {"num_gpu_blocks": "1e3", "block_size": "16"},
        {"num_gpu_blocks": "2271.0", "block_size": "16"},
        {"num_gpu_blocks": " 2271", "block_size": "16"},
        {"num_gpu_blocks": "2271\n", "block_size": "16"},
        {"num_gpu_blocks": "\u0661\u0666", "block_size": "16"},  # digits int() reads, not vLLM's
        {"num_gpu_blocks": "abc", "block_size": "16"},
        {"num_gpu_blocks": "2271", "block_size": ""},
        {"num_gpu_blocks": "99999999999999999999", "block_size": "16"},
        {"num_gpu_blocks": str(MAX_TOKENS), "block_size": "16"},  # past what a float gauge holds
        {"kv_cache_size_tokens": "0"},
        {"kv_cache_size_tokens": "garbled"},
    ],
)
def test_labels_that_give_no_positive_count_are_ignored(labels: dict[str, str]) -> None:
    assert tokens_of(labels) is None


def test_garbled_kv_cache_size_falls_back_to_the_blocks() -> None:
    assert tokens_of({**VLLM_033, "kv_cache_size_tokens": "lots"}) == 36336
    assert tokens_of({**VLLM_033, "kv_cache_size_tokens": "-1", "num_gpu_blocks": "10"}) == 160


def test_the_fewest_tokens_of_each_gpu_types_pods() -> None:
    products = pod_gpu_products(
        [pod("glm-h100-a", H100), pod("glm-h100-b", H100), pod("glm-a100-a", A100), pod("glm-new", None)]
    )
    assert products == {"glm-h100-a": H100, "glm-h100-b": H100, "glm-a100-a": A100}
    series = [
        info("glm-h100-a", num_gpu_blocks="9000", block_size="16"),
        info("glm-h100-b", num_gpu_blocks="8000", block_size="16"),  # the replica that holds least
        info("glm-h100-b", num_gpu_blocks="8000", block_size="16", engine="1"),
        info("glm-a100-a", **VLLM_033),
        info("glm-a100-a", num_gpu_blocks="None", block_size="16", engine="1"),  # ignored, not 0
        info("glm-new", num_gpu_blocks="1", block_size="16"),  # no gpu-product label (yet)
        info("another-deployments-pod", num_gpu_blocks="1", block_size="16"),
        {"__name__": "vllm:cache_config_info", "num_gpu_blocks": "1", "block_size": "16"},  # no pod
    ]
    assert reported_kv_tokens(series, products) == {H100: 8000 * 16, A100: 36336}


def test_no_series_or_no_known_pod_reports_nothing() -> None:
    assert reported_kv_tokens([], {"p": H100}) == {}
    assert reported_kv_tokens([info("p", **VLLM_033)], {}) == {}
    assert reported_kv_tokens([info("p", num_gpu_blocks="None", block_size="None")], {"p": H100}) == {}


def test_pods_without_a_name_or_metadata_are_left_out() -> None:
    assert pod_gpu_products([{}, {"metadata": {"labels": {LABEL_GPU_PRODUCT: H100}}}, pod("", H100)]) == {}
