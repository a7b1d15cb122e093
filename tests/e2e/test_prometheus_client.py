"""PrometheusQueueClient against a real Prometheus (Debian's, via hack/prometheus.sh) scraping the
vLLM metrics emulator on 127.0.0.1 with a static target. No Kubernetes cluster needed."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from glm_operator.clients.prometheus import MetricsUnavailable, PrometheusQueueClient, QueueSample
from glm_operator.testing.vllm_emulator import VLLMMetricsEmulator

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
MODEL = "glm-4.5-air"
NAMESPACE = "llm"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _prometheus_binary() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "hack" / "prometheus.sh")], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        message = f"hack/prometheus.sh failed: {done.stderr.strip()[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return done.stdout.strip().splitlines()[-1]


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
def prometheus(
    emulator: VLLMMetricsEmulator, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    binary = _prometheus_binary()
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: vllm\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{emulator.port}']\n"
        f"        labels: {{namespace: {NAMESPACE}}}\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        _wait_until(ready, 60, "Prometheus to be ready")
        yield url, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        log.close()


def test_client_reads_queue_from_real_prometheus(
    emulator: VLLMMetricsEmulator, prometheus: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, process = prometheus
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
    process.terminate()
    process.wait(timeout=15)
    with pytest.raises(MetricsUnavailable, match="unreachable"):
        client.fetch(namespace=NAMESPACE, model=MODEL)
