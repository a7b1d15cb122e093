"""The chart's alert rules (charts/glm-operator/monitoring/alerts.yaml) under the real promtool:
``check rules``, and ``test rules`` with a firing and a not-firing case for every alert.

promtool ships in Debian's ``prometheus`` package, which hack/prometheus.sh unpacks into the cache.
Series are synthetic (promtool's expanding notation); the live test (test_monitoring_live.py)
checks the same expressions against what the emulators really expose.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from devtools import alerts

from tests.harness.prometheus import promtool_binary

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "glm-operator" / "monitoring" / "alerts.yaml"

DEPLOYMENT = {"namespace": "llm", "name": "glm"}
VLLM_POD = {"namespace": "llm", "pod": "glm-h100-0", "model_name": "glm-4.7"}
INFO = (
    'glm_operator_glmdeployment_info{namespace="llm",name="glm",model_name="glm-4.7",model="zai-org/GLM-4.7"}'
)

KV = "vllm:kv_cache_usage_perc"
FB_USED = "DCGM_FI_DEV_FB_USED"
PLANNED_MEMORY = "glm_operator_planned_gpu_memory_bytes"
H100 = "NVIDIA-H100-80GB-HBM3"
H100_GPU = {"namespace": "llm", "pod": "glm-h100-0", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
LEADER = "glm_operator_leader"
PLANNED_KV = "glm_operator_planned_kv_cache_tokens"
REPORTED_KV = "glm_operator_reported_kv_cache_tokens"
A100 = "NVIDIA-A100-SXM4-80GB"


def sel(metric: str, /, **labels: str) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass(frozen=True)
class Case:
    alert: str
    series: dict[str, str]
    fires: bool
    labels: dict[str, str] = field(default_factory=dict)  # the alert's labels (besides severity)
    eval_time: str = "25m"
    value: float | None = None  # the alert's $value, for annotations that show it


CASES = [
    # Queue grows while at max replicas; flat queue, or room to scale: quiet.
    Case(
        "GLMDeploymentQueueGrowingAtMaxReplicas",
        {sel("vllm:num_requests_waiting", **VLLM_POD): "0+2x40", INFO: "1x40",
         sel("glm_operator_desired_replicas", **DEPLOYMENT): "4x40",
         sel("glm_operator_max_replicas", **DEPLOYMENT): "4x40"},
        True, DEPLOYMENT,
    ),
    Case(
        "GLMDeploymentQueueGrowingAtMaxReplicas",
        {sel("vllm:num_requests_waiting", **VLLM_POD): "0+2x40", INFO: "1x40",
         sel("glm_operator_desired_replicas", **DEPLOYMENT): "4x40",
         sel("glm_operator_max_replicas", **DEPLOYMENT): "8x40"},
        False,
    ),
    Case(
        "GLMDeploymentQueueGrowingAtMaxReplicas",
        {sel("vllm:num_requests_waiting", **VLLM_POD): "5x40", INFO: "1x40",
         sel("glm_operator_desired_replicas", **DEPLOYMENT): "4x40",
         sel("glm_operator_max_replicas", **DEPLOYMENT): "4x40"},
        False,
    ),
    Case("GLMDeploymentKVCacheFull", {sel(KV, **VLLM_POD): "0.97x30"}, True, VLLM_POD),
    Case("GLMDeploymentKVCacheFull", {sel(KV, **VLLM_POD): "0.90x30"}, False),
    Case(
        "GLMDeploymentPreempting",
        {sel("vllm:num_preemptions_total", **VLLM_POD): "0+5x30"},
        True, {"namespace": "llm", "model_name": "glm-4.7"},
    ),
    Case("GLMDeploymentPreempting", {sel("vllm:num_preemptions_total", **VLLM_POD): "7x30"}, False),
    Case(
        "GLMDeploymentDegraded",
        {sel("glm_operator_glmdeployment_phase", phase="Degraded", **DEPLOYMENT): "1x30",
         sel("glm_operator_glmdeployment_phase", phase="Ready", **DEPLOYMENT): "0x30"},
        True, {**DEPLOYMENT, "phase": "Degraded"},
    ),
    Case(
        "GLMDeploymentDegraded",
        {sel("glm_operator_glmdeployment_phase", phase="Degraded", **DEPLOYMENT): "0x30",
         sel("glm_operator_glmdeployment_phase", phase="Ready", **DEPLOYMENT): "1x30"},
        False,
    ),
    Case(
        "GLMDeploymentReplicasNotReady",
        {sel("glm_operator_desired_replicas", **DEPLOYMENT): "3x30",
         sel("glm_operator_ready_replicas", **DEPLOYMENT): "1x30"},
        True, DEPLOYMENT,
    ),
    Case(
        "GLMDeploymentReplicasNotReady",
        {sel("glm_operator_desired_replicas", **DEPLOYMENT): "3x30",
         sel("glm_operator_ready_replicas", **DEPLOYMENT): "3x30"},
        False,
    ),
    # The H100 pod holds more than the H100 variant's share; the B200 variant's larger share of the
    # same GLMDeployment does not hide it (DCGM's modelName joins the plan's GPU type).
    Case(
        "GLMGPUMemoryAbovePlan",
        {sel(FB_USED, **H100_GPU): "78000x30",
         sel(PLANNED_MEMORY, gpu_product=H100, **DEPLOYMENT): "70000000000x30",
         sel(PLANNED_MEMORY, gpu_product="NVIDIA-B200", **DEPLOYMENT): "165000000000x30"},
        True, {"namespace": "llm", "pod": "glm-h100-0", "gpu_product": H100},
    ),
    Case(
        "GLMGPUMemoryAbovePlan",
        {sel(FB_USED, **H100_GPU): "60000x30",
         sel(PLANNED_MEMORY, gpu_product=H100, **DEPLOYMENT): "70000000000x30"},
        False,
    ),
    # vLLM reports 20 % fewer KV tokens than the H100 variant's plan (an over-promise), or 25 % more;
    # 5 % off, or tokens reported for a GPU type the plan does not have: quiet.
    Case(
        "GLMKVCacheTokensOffPlan",
        {sel(PLANNED_KV, gpu_product=H100, **DEPLOYMENT): "100000x30",
         sel(PLANNED_KV, gpu_product=A100, **DEPLOYMENT): "50000x30",
         sel(REPORTED_KV, gpu_product=H100, **DEPLOYMENT): "80000x30"},
        True, {**DEPLOYMENT, "gpu_product": H100}, value=-0.2,
    ),
    Case(
        "GLMKVCacheTokensOffPlan",
        {sel(PLANNED_KV, gpu_product=H100, **DEPLOYMENT): "100000x30",
         sel(REPORTED_KV, gpu_product=H100, **DEPLOYMENT): "125000x30"},
        True, {**DEPLOYMENT, "gpu_product": H100}, value=0.25,
    ),
    Case(
        "GLMKVCacheTokensOffPlan",
        {sel(PLANNED_KV, gpu_product=H100, **DEPLOYMENT): "100000x30",
         sel(PLANNED_KV, gpu_product=A100, **DEPLOYMENT): "50000x30",
         sel(REPORTED_KV, gpu_product=H100, **DEPLOYMENT): "95000x30",
         sel(REPORTED_KV, gpu_product="NVIDIA-L4", **DEPLOYMENT): "20000x30"},
        False,
    ),
    # 30 % short for 10 minutes only (a rollout's old pods): not yet.
    Case(
        "GLMKVCacheTokensOffPlan",
        {sel(PLANNED_KV, gpu_product=H100, **DEPLOYMENT): "100000x30",
         sel(REPORTED_KV, gpu_product=H100, **DEPLOYMENT): "100000x14 70000x10"},
        False,
    ),
    Case(
        "GLMGatewayErrors",
        {sel("haproxy_backend_http_responses_total", proxy="glm-4.7", code="5xx"): "0+10x30",
         sel("haproxy_backend_http_responses_total", proxy="glm-4.7", code="2xx"): "0+50x30"},
        True, {"proxy": "glm-4.7"},
    ),
    Case(
        "GLMGatewayErrors",
        {sel("haproxy_backend_http_responses_total", proxy="glm-4.7", code="5xx"): "0+1x30",
         sel("haproxy_backend_http_responses_total", proxy="glm-4.7", code="2xx"): "0+100x30"},
        False,
    ),
    Case(
        "GLMGatewayKeyThrottled",
        {sel("glm_gateway_client_rejected_requests_total", client="team-a"): "0+30x30",
         sel("glm_gateway_client_requests_total", client="team-a"): "0+100x30"},
        True, {"client": "team-a"},
    ),
    Case(
        "GLMGatewayKeyThrottled",
        {sel("glm_gateway_client_rejected_requests_total", client="team-a"): "0+1x30",
         sel("glm_gateway_client_requests_total", client="team-a"): "0+100x30"},
        False,
    ),
    Case(
        "GLMOperatorNotLeading",
        {sel(LEADER, instance="op-0"): "0x20", sel(LEADER, instance="op-1"): "0x20"},
        True, eval_time="15m",
    ),
    Case("GLMOperatorNotLeading", {sel("up", job="other"): "1x20"}, True, eval_time="15m"),  # no operator
    Case(
        "GLMOperatorNotLeading",
        {sel(LEADER, instance="op-0"): "1x20", sel(LEADER, instance="op-1"): "0x20"},
        False, eval_time="15m",
    ),
    Case(
        "GLMOperatorReconcileErrors",
        {sel("glm_operator_reconciles_total", result="error"): "0+5x40",
         sel("glm_operator_reconciles_total", result="ok"): "0+10x40"},
        True,
    ),
    Case(
        "GLMOperatorReconcileErrors",
        {sel("glm_operator_reconciles_total", result="error"): "3x40",
         sel("glm_operator_reconciles_total", result="ok"): "0+10x40"},
        False,
    ),
]  # fmt: skip


def expected_annotations(
    alert: alerts.Alert, labels: dict[str, str], value: float | None = None
) -> dict[str, str]:
    """The annotations as Prometheus renders them: labels, and ``$value`` where an alert shows it
    (Go's ``humanizePercentage`` is ``%.4g`` of value x 100, and ``if lt $value 0.0``)."""

    def fill(text: str) -> str:
        if value is not None:
            text = re.sub(
                r"\{\{ if lt \$value 0\.0 \}\}(.*?)\{\{ else \}\}(.*?)\{\{ end \}\}",
                lambda m: m.group(1) if value < 0 else m.group(2),
                text,
                flags=re.S,
            )
            text = text.replace("{{ $value | humanizePercentage }}", f"{value * 100:.4g}%")
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)

    return {key: fill(getattr(alert, key)) for key in ("summary", "description", "runbook")}


def unit_test(case: Case) -> dict[str, Any]:
    (alert,) = [a for a in alerts.ALERTS if a.name == case.alert]
    expected = []
    if case.fires:
        expected = [
            {
                "exp_labels": {**case.labels, "severity": alert.severity},
                "exp_annotations": expected_annotations(alert, case.labels, case.value),
            }
        ]
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in case.series.items()],
        "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": expected}],
    }


@pytest.fixture(scope="module")
def promtool() -> str:
    return promtool_binary()


def test_the_rule_file_is_valid(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in done.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    names = {a.name for a in alerts.ALERTS}
    assert {c.alert for c in CASES if c.fires} == names
    assert {c.alert for c in CASES if not c.fires} == names


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.alert}-{'fires' if c.fires else 'quiet'}")
def test_rules(promtool: str, tmp_path: Path, case: Case) -> None:
    tests = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [unit_test(case)]}
    path = tmp_path / "alerts_test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_committed_rule_file_is_the_generated_one() -> None:
    assert RULES.read_text() == alerts.rule_file(), "run hack/generate.sh and commit"
