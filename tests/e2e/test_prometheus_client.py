"""PrometheusQueueClient against a real Prometheus (Debian's, via hack/prometheus.sh) scraping the
vLLM metrics emulator on 127.0.0.1 with a static target. No Kubernetes cluster needed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient, QueueSample
from tests.harness.prometheus import PrometheusServer
from tests.harness.vllm_emulator import VLLMMetricsEmulator

pytestmark = pytest.mark.prometheus

MODEL = "glm-4.5-air"
NAMESPACE = "llm"


def _wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.fixture
def emulator() -> Iterator[VLLMMetricsEmulator]:
    with VLLMMetricsEmulator({MODEL: (0.0, 0.0)}) as running:
        yield running


@pytest.fixture
def prometheus(emulator: VLLMMetricsEmulator, tmp_path: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path, [(emulator.port, {"namespace": NAMESPACE})])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_client_reads_queue_from_real_prometheus(
    emulator: VLLMMetricsEmulator, prometheus: PrometheusServer
) -> None:
    url = prometheus.url
    emulator.set(MODEL, waiting=7, running=16)
    client = PrometheusQueueClient(url, retries=0, timeout_seconds=2)
    samples: list[QueueSample] = []

    def sees_queue() -> bool:
        try:
            samples.append(client.fetch(namespace=NAMESPACE, model=MODEL))
        except MetricsUnavailable:
            return False
        return (samples[-1].waiting, samples[-1].running) == (7.0, 16.0)

    _wait_until(sees_queue, 30, "the scraped queue")
    assert abs(samples[-1].timestamp - time.time()) < 30

    # An unknown model (or namespace) is unavailable, not zero.
    with pytest.raises(MetricsUnavailable, match="no series"):
        client.fetch(namespace=NAMESPACE, model="no-such-model")
    with pytest.raises(MetricsUnavailable, match="no series"):
        client.fetch(namespace="elsewhere", model=MODEL)

    # Prometheus down: unavailable.
    prometheus.stop()
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        client.fetch(namespace=NAMESPACE, model=MODEL)


def test_client_reads_the_kv_cache_info_of_the_models_pods(tmp_path: Path) -> None:
    """vllm:cache_config_info has no model_name: the default query finds it by the pod whose queue
    gauge has the model's; pods of another model in the namespace are left out."""
    with (
        VLLMMetricsEmulator({MODEL: (0.0, 0.0)}) as ours,
        VLLMMetricsEmulator({"another-model": (0.0, 0.0)}) as theirs,
    ):
        ours.set_cache_config(num_gpu_blocks=1234, block_size=16)
        server = PrometheusServer(
            tmp_path,
            [
                (ours.port, {"namespace": NAMESPACE, "pod": "ours-0"}),
                (theirs.port, {"namespace": NAMESPACE, "pod": "theirs-0"}),
            ],
        )
        server.start()
        try:
            client = PrometheusQueueClient(server.url, retries=0, timeout_seconds=2)
            found: list[list[dict[str, str]]] = []

            def sees_info() -> bool:
                found.append(client.fetch_kv_cache_info(namespace=NAMESPACE, model=MODEL))
                return bool(found[-1])

            _wait_until(sees_info, 30, "the scraped cache_config_info")
            (labels,) = found[-1]
            assert labels["__name__"] == "vllm:cache_config_info" and labels["pod"] == "ours-0"
            assert (labels["num_gpu_blocks"], labels["block_size"]) == ("1234", "16")
            assert client.fetch_kv_cache_info(namespace="elsewhere", model=MODEL) == []
        finally:
            server.stop()
