"""``glm-operator loadtest --record`` closes the loop: a measured knee replaces the modelled one.

The vLLM replicas are KWOK pods (nothing runs behind their 10.x IPs), so the load test drives the
in-repo vLLM emulator on 127.0.0.1, whose decode stops scaling at ``BATCH_KNEE`` requests in flight,
and Prometheus scrapes the same emulator (labelled with the test's namespace) so the autoscaler runs.
The CLI records the sweep into the GLMDeployment's ConfigMap through the real apiserver; the operator
(under the chart's RBAC, production resync) sees it through its watch, switches status.plan to the
measured source and aims the autoscaler at the measured knee; a recording of another shape is ignored
with the reason in status, and the target goes back to the model's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from glm_operator.clients.load_tests import load_test_config_map
from glm_operator.planning.speed.measured import Measurement, measurement_to_data, shape_from_status
from tests.harness.load_levels import SATURATING
from tests.harness.operator import RunningOperator
from tests.harness.vllm_emulator import LatencyModel, VLLMMetricsEmulator

from .conftest import E2ECluster
from .test_autoscaling import (  # noqa: F401 - fixtures: prometheus scrapes this module's emulator
    autoscaled,
    cluster_events,
    prometheus,
    scaling_operator,
)
from .test_controller import apply, condition, get, glmd, phase_is, small, wait_for

pytestmark = pytest.mark.e2e
MODEL = "auto-glm"  # autoscaled()'s served name
BATCH_KNEE = 8
# 64 tokens of 8 ms: ~0.5 s a request below the knee (as tests/integration/test_loadtest.py, whose
# timing notes apply), so a sweep of 1..16 with 2 requests per worker takes about 6 s.
LATENCY = LatencyModel(seconds_per_output_token=0.008, batch_knee=BATCH_KNEE, past_knee_power=2.0)
TARGET_QUEUE = 4  # autoscaled()'s targetQueueLength


@pytest.fixture
def emulator() -> Iterator[VLLMMetricsEmulator]:
    with VLLMMetricsEmulator({MODEL: (0.0, 0.0)}, latency=LATENCY) as running:
        yield running


def loadtest(cluster: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with the admin kubeconfig."""
    env = {**os.environ, "KUBECONFIG": str(cluster.local.kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "glm_operator.cli", "loadtest", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def aimed_at(knee: int) -> str:
    """What the autoscaler's reason says for a replica aimed at ``knee`` running requests."""
    return f"per replica up above {knee + TARGET_QUEUE * 1.1:g}, down below {knee * 0.9:g}"


def autoscaler_reason(cluster: E2ECluster, ns: str, name: str) -> str:
    return str(glmd(cluster, ns, name).get("status", {}).get("autoscaler", {}).get("reason", ""))


def plan_from(cluster: E2ECluster, ns: str, name: str, source: str) -> dict[str, Any] | None:
    """status.plan once its speedSource is ``source``."""
    plan = dict(glmd(cluster, ns, name).get("status", {}).get("plan") or {})
    return plan if plan.get("speedSource") == source else None


def metrics_available(cluster: E2ECluster, ns: str, name: str) -> dict[str, Any] | None:
    obj = glmd(cluster, ns, name)
    return obj if condition(obj, "MetricsAvailable").get("status") == "True" else None


@pytest.mark.usefixtures("scaling_operator")
def test_a_recorded_load_test_moves_the_knee_and_a_stale_one_is_ignored(
    cluster: E2ECluster, emulator: VLLMMetricsEmulator, ns: str
) -> None:
    name = "rec"
    sweep = [
        "--url", emulator.url, "--model", MODEL, "--concurrency", "1,2,4,8,16", "--input-tokens", "256",
        "--output-tokens", "64", "--requests-per-worker", "2",
    ]  # fmt: skip

    # refused before any request: no such GLMDeployment
    missing = loadtest(cluster, *sweep, "--record", f"{ns}/nope")
    assert missing.returncode == 2, missing.stderr
    assert f"--record {ns}/nope: no GLMDeployment nope in namespace {ns}" in missing.stderr
    assert emulator.stats()["requests"] == 0

    apply(cluster, ns, autoscaled(name))
    obj = wait_for(lambda: metrics_available(cluster, ns, name), 60, "MetricsAvailable=True")
    plan = obj["status"]["plan"]
    assert plan["speedSource"] == "modelled" and "no load test recorded" in plan["speedSourceReason"]
    variant = plan["variants"][0]
    modelled = int(variant["predicted"]["kneeConcurrency"])
    expected = min(BATCH_KNEE, int(variant["maxNumSeqs"]) * int(variant.get("dataParallelSize", 1)))
    assert modelled != expected, (
        "the modelled knee must differ from the emulator's for the test to show a move"
    )
    wait_for(
        lambda: aimed_at(modelled) in autoscaler_reason(cluster, ns, name), 30, "aimed at the modelled knee"
    )

    # refused after the sweep: every level failed (a wrong served name), nothing written
    wrong = loadtest(cluster, "--url", emulator.url, "--model", "no-such-model", "--concurrency", "1",
                     "--requests-per-worker", "1", "--record", f"{ns}/{name}")  # fmt: skip
    assert wrong.returncode == 2 and "--record" in wrong.stderr and "every level had failed" in wrong.stderr
    assert get(cluster, ns, "configmaps", selector="app.kubernetes.io/component=load-test")["items"] == []

    recorded = loadtest(cluster, *sweep, "-o", "json", "--record", f"{ns}/{name}")
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout)["knee"]["concurrency"] == BATCH_KNEE, recorded.stdout
    assert f"recorded in ConfigMap {ns}/{name}-loadtest" in recorded.stderr
    cm = get(cluster, ns, "configmaps", f"{name}-loadtest")
    assert cm["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]

    measured = wait_for(
        lambda: plan_from(cluster, ns, name, "measured"),
        30,
        "status.plan.speedSource: measured",
    )
    assert measured["variants"][0]["measuredKneeConcurrency"] == expected, measured["speedSourceReason"]
    assert f"knee {expected} running requests per replica" in measured["speedSourceReason"]
    wait_for(
        lambda: aimed_at(expected) in autoscaler_reason(cluster, ns, name), 30, "aimed at the measured knee"
    )
    assert "MeasuredSpeed" in [e["reason"] for e in cluster_events(cluster, ns, name)]

    # the same record, as if taken on another tensor-parallel size: ignored, the reason in status
    doc = json.loads(cm["data"]["measurement.json"])
    tp = int(doc["shape"]["tensor_parallel_size"])
    doc["shape"]["tensor_parallel_size"] = tp * 2
    cm["data"]["measurement.json"] = json.dumps(doc)
    cluster.kubectl("replace", "-n", ns, "-f", "-", input=json.dumps(cm))
    stale = wait_for(
        lambda: plan_from(cluster, ns, name, "modelled"),
        30,
        "status.plan.speedSource back to modelled",
    )
    assert f"tensor_parallel_size {tp * 2} -> {tp}" in stale["speedSourceReason"]
    assert "measuredKneeConcurrency" not in stale["variants"][0]
    wait_for(
        lambda: aimed_at(modelled) in autoscaler_reason(cluster, ns, name),
        30,
        "aimed at the modelled knee again",
    )
    assert "ModelledSpeed" in [e["reason"] for e in cluster_events(cluster, ns, name)]


def test_an_edited_recording_replans_through_the_watch_alone(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    """Without spec.autoscaling nothing else reconciles the GLMDeployment every few seconds (the
    autoscaler's writes do), and the resync is the production one (600 s): only the ConfigMap's watch
    events can move status.plan.speedSource, both ways."""
    name = "plain"
    apply(cluster, ns, small(name))
    obj = wait_for(phase_is(cluster, ns, name, "Ready"), 60, "Ready")
    plan = obj["status"]["plan"]
    assert plan["speedSource"] == "modelled"
    m = Measurement(
        SATURATING, 512, 128, shape_from_status(plan["variants"][0], plan["image"]), "2026-12-07T00:00:00Z"
    )
    cm = load_test_config_map(obj, measurement_to_data(m))
    cluster.kubectl("create", "-f", "-", input=json.dumps(cm))
    measured = wait_for(lambda: plan_from(cluster, ns, name, "measured"), 20, "speedSource: measured")
    assert measured["variants"][0]["measuredKneeConcurrency"] == min(8, measured["variants"][0]["maxNumSeqs"])

    doc = json.loads(cm["data"]["measurement.json"])
    doc["input_tokens"] = 8192  # a workload far from the plan's
    cm["data"]["measurement.json"] = json.dumps(doc)
    cluster.kubectl("replace", "-f", "-", input=json.dumps(cm))
    stale = wait_for(lambda: plan_from(cluster, ns, name, "modelled"), 20, "speedSource back to modelled")
    assert "prompts of 8192 tokens (the plan's workload: 512" in stale["speedSourceReason"]
    assert operator.resync_seconds >= 600
