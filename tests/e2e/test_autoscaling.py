"""Autoscaling on the real control plane: real Prometheus scraping vLLM metrics on loopback.

The vLLM replicas are KWOK pods (no process behind them), so their metrics come from the in-repo
emulator on 127.0.0.1, scraped by a real Prometheus with a static target labelled with the
test's namespace, exactly as a real ServiceMonitor would label them. The operator queries
Prometheus, decides, and writes status.desiredReplicas; the child Deployment follows. The same loop
reads vLLM's KV-cache size (vllm:cache_config_info) and serves it on the operator's metrics port.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.cluster import free_port
from tests.harness.operator import RunningOperator
from tests.harness.prometheus import PrometheusServer
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster
from .test_controller import (
    ONE_L4,
    apply,
    children,
    condition,
    get,
    glmd,
    manifest,
    phase_is,
    small,
    wait_for,
)

pytestmark = pytest.mark.e2e
MODEL = "auto-glm"
SCALE_DOWN_WINDOW = 20


@pytest.fixture
def emulator() -> Iterator[VLLMMetricsEmulator]:
    with VLLMMetricsEmulator({MODEL: (0.0, 0.0)}) as running:
        yield running


@pytest.fixture
def prometheus(emulator: VLLMMetricsEmulator, ns: str, tmp_path: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path, [(emulator.port, {"namespace": ns})])
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scaling_operator(operator: RunningOperator, prometheus: PrometheusServer) -> Iterator[RunningOperator]:
    """The session operator, restarted with --prometheus-url for this test."""
    operator.stop()
    operator.start("--prometheus-url", prometheus.url)
    try:
        yield operator
    finally:
        operator.stop()
        operator.start()


def replicas_of(cluster: E2ECluster, ns: str, name: str) -> tuple[int, int]:
    """(status.desiredReplicas, sum of child Deployment spec.replicas)."""
    obj = glmd(cluster, ns, name)
    child_total = sum(int(d["spec"]["replicas"]) for d in children(cluster, ns, name))
    return int(obj.get("status", {}).get("desiredReplicas") or 0), child_total


def autoscaled(name: str) -> dict[str, Any]:
    return manifest(
        name,
        model={"id": "zai-org/glm-4-9b-chat", "servedModelName": MODEL},
        contextLength=8192,
        gpu=ONE_L4,
        autoscaling={
            "minReplicas": 1,
            "maxReplicas": 4,
            "targetQueueLength": 4,
            "scaleUpStabilizationSeconds": 0,
            "scaleDownStabilizationSeconds": SCALE_DOWN_WINDOW,
            "intervalSeconds": 5,
        },
    )


@pytest.mark.usefixtures("scaling_operator")
def test_replicas_follow_the_vllm_queue_and_hold_when_prometheus_is_gone(
    cluster: E2ECluster,
    emulator: VLLMMetricsEmulator,
    prometheus: PrometheusServer,
    ns: str,
) -> None:
    apply(cluster, ns, autoscaled("auto"))

    def metrics_available() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, "auto")
        return obj if condition(obj, "MetricsAvailable").get("status") == "True" else None

    obj = wait_for(metrics_available, 60, "MetricsAvailable=True")
    assert replicas_of(cluster, ns, "auto") == (1, 1)
    per_replica = int(obj["status"]["plan"]["variants"][0]["maxNumSeqs"])
    # each replica is aimed at the plan's predicted knee: scale up above knee + targetQueueLength x 1.1
    knee = int(obj["status"]["plan"]["variants"][0]["predicted"]["kneeConcurrency"])
    assert 1 <= knee <= per_replica
    aimed = f"per replica up above {knee + 4 * 1.1:g}, down below {knee * 0.9:g}"
    wait_for(
        lambda: aimed in str(glmd(cluster, ns, "auto")["status"].get("autoscaler", {}).get("reason", "")),
        30,
        f"the autoscaler's reason says {aimed!r}",
    )

    # Queue rises: every replica full and far more waiting than the target.
    emulator.set(MODEL, waiting=3 * (per_replica + 4), running=per_replica)
    started = time.monotonic()
    wait_for(lambda: replicas_of(cluster, ns, "auto") == (4, 4), 30, "scale-up to 4")
    assert time.monotonic() - started < 30
    events = [e["reason"] for e in cluster_events(cluster, ns, "auto")]
    assert "ScaledUp" in events

    # Queue drains: nothing happens before the scale-down window, then one step per interval.
    emulator.set(MODEL, waiting=0, running=0)
    drained = time.monotonic()
    while time.monotonic() - drained < SCALE_DOWN_WINDOW - 6:
        assert replicas_of(cluster, ns, "auto")[0] == 4, "scaled down inside the stabilization window"
        time.sleep(1)
    wait_for(lambda: replicas_of(cluster, ns, "auto") == (1, 1), 60, "scale-down to 1")
    assert time.monotonic() - drained >= SCALE_DOWN_WINDOW

    # Prometheus gone: replicas held whatever the queue does, condition says why.
    prometheus.stop()
    emulator.set(MODEL, waiting=1000, running=per_replica)

    def metrics_unavailable() -> dict[str, Any] | None:
        o = glmd(cluster, ns, "auto")
        return o if condition(o, "MetricsAvailable").get("status") == "False" else None

    obj = wait_for(metrics_unavailable, 30, "MetricsAvailable=False")
    assert "holding" in condition(obj, "MetricsAvailable")["message"]
    time.sleep(11)  # two intervals without metrics
    assert replicas_of(cluster, ns, "auto") == (1, 1)

    # Prometheus back: scaling resumes on the queue that built up meanwhile.
    prometheus.start()
    wait_for(metrics_available, 60, "MetricsAvailable=True again")
    wait_for(lambda: replicas_of(cluster, ns, "auto")[0] > 1, 30, "scale-up after Prometheus returned")


def test_the_operator_serves_the_kv_tokens_vllm_reports_for_the_glmdeployments_pod(
    cluster: E2ECluster, operator: RunningOperator, ns: str, tmp_path: Path
) -> None:
    """No spec.autoscaling needed: with --prometheus-url the operator reads the
    vllm:cache_config_info of the GLMDeployment's pod (the emulator, scraped with the KWOK pod's
    name as the PodMonitor labels it) and serves blocks x block size, next to the planned tokens."""
    apply(cluster, ns, small("kv"))
    obj = wait_for(phase_is(cluster, ns, "kv", "Ready"), 60, "Ready")
    (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
    (pod,) = get(cluster, ns, "pods", selector="app.kubernetes.io/instance=kv")["items"]
    blocks = 1234
    with VLLMMetricsEmulator({str(obj["status"]["model"]): (0.0, 1.0)}) as emulator:
        emulator.set_cache_config(num_gpu_blocks=blocks, block_size=16)  # no kv_cache_size_tokens
        prometheus = PrometheusServer(
            tmp_path, [(emulator.port, {"namespace": ns, "pod": pod["metadata"]["name"]})]
        )
        prometheus.start()
        metrics_port = free_port()
        operator.stop()
        try:
            scraped = f"{prometheus.url}/api/v1/query?query=vllm:cache_config_info"
            wait_for(lambda: b"num_gpu_blocks" in _get(scraped), 30, "the emulator scraped")
            operator.start(
                *operator.args, "--prometheus-url", prometheus.url,
                "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1", remember=False,
            )  # fmt: skip

            def kv_tokens() -> dict[str, dict[str, float]] | None:
                try:
                    text = _get(f"http://127.0.0.1:{metrics_port}/metrics").decode()
                except OSError:
                    return None
                found: dict[str, dict[str, float]] = {}
                for family in text_string_to_metric_families(text):
                    for s in family.samples:
                        ours = (s.labels.get("namespace"), s.labels.get("name")) == (ns, "kv")
                        if ours and s.name.endswith("_kv_cache_tokens"):
                            found.setdefault(s.name, {})[s.labels["gpu_product"]] = s.value
                return found if "glm_operator_reported_kv_cache_tokens" in found else None

            # The first read may come before the pod is cached: the next one is a minute later.
            found = wait_for(kv_tokens, 90, "glm_operator_reported_kv_cache_tokens")
            assert found["glm_operator_reported_kv_cache_tokens"] == {variant["gpuProduct"]: blocks * 16.0}
            assert (
                found["glm_operator_planned_kv_cache_tokens"][variant["gpuProduct"]]
                == variant["kvCacheTokens"]
            )
        finally:
            operator.stop()
            operator.start()
            prometheus.stop()


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


def cluster_events(cluster: E2ECluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [e for e in get(cluster, ns, "events")["items"] if e["involvedObject"]["name"] == name]


def test_an_hpa_drives_the_glmdeployment_through_the_scale_subresource(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """The real controller-manager's HPA controller scales spec.replicas via /scale.

    No metrics API is served here (an aggregated metrics API would make the apiserver dial a
    Service), so the HPA cannot compute a metric; it still enforces minReplicas through the scale
    subresource, which is the integration under test.
    """
    apply(
        cluster,
        ns,
        small("hpa"),
    )
    wait_for(lambda: glmd(cluster, ns, "hpa").get("status", {}).get("phase") == "Ready", 60, "Ready")
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hpa"},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "inference.glm.dev/v1alpha1",
                "kind": "GLMDeployment",
                "name": "hpa",
            },
            "minReplicas": 3,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }
    apply(cluster, ns, hpa)
    wait_for(lambda: glmd(cluster, ns, "hpa")["spec"]["replicas"] == 3, 60, "HPA scaled spec.replicas to 3")

    def three_ready() -> bool:
        status = glmd(cluster, ns, "hpa").get("status", {})
        return status.get("readyReplicas") == 3 and status.get("replicas") == 3

    wait_for(three_ready, 60, "3 replicas ready")
