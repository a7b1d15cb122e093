"""Autoscaling on the real control plane: real Prometheus scraping vLLM metrics on loopback.

The vLLM replicas are KWOK pods (no process behind them), so their metrics come from the in-repo
emulator on 127.0.0.1, scraped by a real Prometheus with a static target labelled with the
test's namespace, exactly as a real ServiceMonitor would label them. The operator queries
Prometheus, decides, and writes status.desiredReplicas; the child Deployment follows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.operator import RunningOperator
from tests.harness.prometheus import PrometheusServer
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster
from .test_controller import ONE_L4, apply, children, condition, glmd, manifest, small, wait_for

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


def test_replicas_follow_the_vllm_queue_and_hold_when_prometheus_is_gone(
    cluster: E2ECluster,
    scaling_operator: RunningOperator,
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


def cluster_events(cluster: E2ECluster, ns: str, name: str) -> list[dict[str, Any]]:
    from .test_controller import get

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
