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
