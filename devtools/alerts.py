"""The chart's Prometheus alerts: one rule group, each alert with a runbook line that names the fix.

``rule_file()`` is a Prometheus rule file (``groups:``), written to the chart's
``monitoring/alerts.yaml`` by ``python -m devtools monitoring alerts`` (hack/generate.sh). The chart's
PrometheusRule embeds that file; promtool checks and unit-tests the same file. Each alert also
names its ``signal``: the expression without its threshold, which returns a series whenever the
metrics it reads are scraped (the live Prometheus test queries it).

Pure: builds dicts, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from devtools import series as s

GROUP_NAME = "glm-operator"


@dataclass(frozen=True)
class Alert:
    name: str
    signal: str  # the measured quantity; returns series whenever its inputs are scraped
    condition: str  # appended to the signal: the threshold (and any further `and` clause)
    for_: str
    severity: str
    summary: str
    description: str
    runbook: str

    @property
    def expr(self) -> str:
        return f"{self.signal} {self.condition}"


_WAITING_GROWTH = f"sum by (namespace, name) ({s.by_deployment(f'deriv({s.VLLM_WAITING}[10m])')})"
_WAITING = f"sum by (namespace, name) ({s.by_deployment(s.VLLM_WAITING)})"
_AT_MAX = f"max by (namespace, name) ({s.OP_DESIRED}) >= max by (namespace, name) ({s.OP_MAX})"
_MIB = 1048576
_PLANNED_KV = f"max by (namespace, name, gpu_product) ({s.OP_PLANNED_KV})"
_REPORTED_KV = f"max by (namespace, name, gpu_product) ({s.OP_REPORTED_KV})"
#: (reported - planned) / planned per GLMDeployment and GPU type: negative = fewer tokens than planned.
_KV_OFF_PLAN = f"({_REPORTED_KV} - {_PLANNED_KV}) / ({_PLANNED_KV} > 0)"

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GLMDeploymentQueueGrowingAtMaxReplicas",
        signal=_WAITING_GROWTH,
        condition=f"> 0 and on (namespace, name) {_WAITING} > 0 and on (namespace, name) {_AT_MAX}",
        for_="10m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.name }}: requests queue up and it runs its most replicas",
        description="vLLM's waiting requests have grown for 10 minutes while the GLMDeployment has "
        "as many replicas as it may have (spec.autoscaling.maxReplicas, or spec.replicas).",
        runbook="Raise spec.autoscaling.maxReplicas (or spec.replicas) and make room for the replicas "
        "(more GPUs of a type in spec.gpu.products, or a node autoscaler); status.plan says how many "
        "replicas fit per GPU type. Or limit the clients (GLMGateway spec.limits).",
    ),
    Alert(
        name="GLMDeploymentKVCacheFull",
        signal=f"max by (namespace, pod, model_name) ({s.VLLM_KV_CACHE_USAGE})",
        condition="> 0.95",
        for_="5m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.pod }}: the KV cache is over 95 % full",
        description="vLLM's KV cache has been over 95 % used for 5 minutes: new requests wait for "
        "blocks and running ones get preempted.",
        runbook="Add replicas (spec.replicas or spec.autoscaling), or give each replica more KV cache: "
        "spec.kvCacheDtype fp8, a GPU type with more memory first in spec.gpu.products, or a shorter "
        "spec.contextLength; `glm-operator plan` shows the KV tokens each choice gives.",
    ),
    Alert(
        name="GLMDeploymentPreempting",
        signal=f"sum by (namespace, model_name) (rate({s.VLLM_PREEMPTIONS}[5m]))",
        condition="> 0",
        for_="10m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.model_name }}: vLLM preempts requests",
        description="vLLM has preempted running requests for 10 minutes (the KV cache ran out of "
        "blocks); their work is recomputed, so latency grows.",
        runbook="Same fix as a full KV cache: more replicas, spec.kvCacheDtype fp8, a larger GPU, or "
        "fewer concurrent sequences (spec.serving.maxNumSeqs).",
    ),
    Alert(
        name="GLMDeploymentDegraded",
        signal=f'max by (namespace, name, phase) ({s.OP_PHASE}{{phase=~"Degraded|Failed"}})',
        condition="== 1",
        for_="10m",
        severity="critical",
        summary="{{ $labels.namespace }}/{{ $labels.name }} is {{ $labels.phase }}",
        description="The GLMDeployment's status.phase has been Degraded or Failed for 10 minutes.",
        runbook="`kubectl describe glmdeployment -n {{ $labels.namespace }} {{ $labels.name }}`: the "
        "conditions' messages name the cause and the fix (plan does not fit, image pull, OOM at "
        "start, crash loop with its last log line).",
    ),
    Alert(
        name="GLMDeploymentReplicasNotReady",
        signal=f"max by (namespace, name) ({s.OP_DESIRED}) - max by (namespace, name) ({s.OP_READY})",
        condition="> 0",
        for_="15m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.name }}: replicas are not ready",
        description="Fewer replicas have been ready than desired for 15 minutes: pods crash-loop, "
        "wait for GPUs, or load the model slowly.",
        runbook="`kubectl describe glmdeployment`: its Degraded condition names each failing pod's "
        "reason (CrashLoop, OOMKilled, GPUOutOfMemory, KVCacheTooSmall, ImagePullFailed, "
        "InsufficientGPU, ...) from its status and vLLM's last log lines, and the fix.",
    ),
    Alert(
        name="GLMGPUMemoryAbovePlan",
        signal=f"max by (namespace, pod, gpu_product) ({s.with_gpu_product(s.DCGM_FB_USED)}) * {_MIB}",
        condition="> on (namespace, gpu_product) group_left () "
        f"max by (namespace, gpu_product) ({s.OP_PLANNED_GPU_MEMORY}) * 1.05",
        for_="10m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.pod }} uses more GPU memory than planned",
        description="A GPU used by a pod of this namespace holds more than 105 % of what the plan "
        "lets vLLM take on that GPU type (GPU memory x spec.gpu.memoryUtilization).",
        runbook="Another process shares the GPU: keep other workloads off the planned GPUs (a taint "
        "on the GPU nodes). If it is vLLM itself, lower spec.gpu.memoryUtilization, which the plan "
        "and the pods both use.",
    ),
    Alert(
        name="GLMKVCacheTokensOffPlan",
        signal=_KV_OFF_PLAN,
        condition=f"> 0.1 or {_KV_OFF_PLAN} < -0.1",
        for_="15m",
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.name }} on {{ $labels.gpu_product }}: vLLM's KV cache "
        "is {{ $value | humanizePercentage }} off the plan",
        description="For 15 minutes the KV-cache tokens vLLM reports for a replica (the fewest over "
        "the pods of this GPU type, from vllm:cache_config_info) have differed from the plan's "
        "(status.plan kvCacheTokens) by more than 10 %: {{ if lt $value 0.0 }}fewer than planned, so "
        "the plan over-promises: a replica may not hold spec.minConcurrency full-length sequences, and "
        "requests queue or are preempted{{ else }}more than planned: the plan under-uses these GPUs "
        "(it would give each replica more concurrency){{ end }}.",
        runbook="Compare `glm-operator estimate` (the model, GPU type, tensor-parallel size and "
        "contextLength of status.plan, with --image set to the pods' image) with the pod's log line "
        "'GPU KV cache size'. Usual causes: spec.serving.image runs another vLLM release than the "
        "plan assumed (its memory rules and default gpu-memory-utilization differ: pin "
        "spec.gpu.memoryUtilization so plan and pods use one value), spec.serving.extraArgs that "
        "change vLLM's memory and that the plan does not read (--max-num-batched-tokens, "
        "--enforce-eager, --compilation-config, --block-size), or another process on the GPU. "
        "Fewer tokens than planned: until fixed, lower spec.minConcurrency or spec.contextLength.",
    ),
    Alert(
        name="GLMGatewayErrors",
        signal=f'sum by (proxy) (rate({s.HAPROXY_BACKEND_RESPONSES}{{code="5xx"}}[5m])) '
        f"/ sum by (proxy) (rate({s.HAPROXY_BACKEND_RESPONSES}[5m]))",
        condition="> 0.05",
        for_="5m",
        severity="critical",
        summary="Gateway backend {{ $labels.proxy }}: more than 5 % of answers are 5xx",
        description="More than 5 % of the gateway's answers from this model's backend have been "
        "server errors for 5 minutes.",
        runbook="Look at the GLMDeployment serving this model (its phase and conditions) and its vLLM "
        "pods' logs; a backend whose members are all down answers 503: make replicas ready first.",
    ),
    Alert(
        name="GLMGatewayKeyThrottled",
        signal=f"sum by (client) (rate({s.GATEWAY_CLIENT_REJECTED}[5m])) "
        f"/ sum by (client) (rate({s.GATEWAY_CLIENT_REQUESTS}[5m]))",
        condition="> 0.1",
        for_="10m",
        severity="info",
        summary="API client {{ $labels.client }}: more than 10 % of its requests get 429",
        description="The gateway has refused more than 10 % of this key's requests with 429 for 10 minutes.",
        runbook="The client sends more than the GLMGateway's spec.limits (requestsPerMinute, "
        "concurrentRequests, tokensPerMinute): raise the limits, or have the client honour Retry-After.",
    ),
    Alert(
        name="GLMOperatorNotLeading",
        signal=f"max({s.OP_LEADER})",
        condition=f"< 1 or absent({s.OP_LEADER})",
        for_="5m",
        severity="critical",
        summary="No glm-operator replica holds the Lease: nothing is reconciled",
        description="For 5 minutes no operator replica has led (or none is scraped).",
        runbook="Check the operator's pods and logs in its namespace; the ServiceAccount needs "
        "get/create/update on coordination.k8s.io leases (the chart's Role grants it).",
    ),
    Alert(
        name="GLMOperatorReconcileErrors",
        signal=f'sum(rate({s.OP_RECONCILES}{{result="error"}}[10m])) / sum(rate({s.OP_RECONCILES}[10m]))',
        condition="> 0.1",
        for_="15m",
        severity="warning",
        summary="glm-operator: more than 10 % of reconciles fail",
        description="More than 10 % of the operator's reconciles have failed for 15 minutes.",
        runbook="The operator's log names the failing request; usually RBAC (a verb missing from its "
        "Role) or an admission webhook refusing a child. `kubectl get events "
        "--field-selector involvedObject.kind=GLMDeployment` shows what was refused.",
    ),
)


def rule(alert: Alert) -> dict[str, Any]:
    return {
        "alert": alert.name,
        "expr": alert.expr,
        "for": alert.for_,
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": alert.summary,
            "description": alert.description,
            "runbook": alert.runbook,
        },
    }


def rule_groups(alerts: tuple[Alert, ...] = ALERTS) -> dict[str, Any]:
    return {"groups": [{"name": GROUP_NAME, "rules": [rule(a) for a in alerts]}]}


def rule_file(alerts: tuple[Alert, ...] = ALERTS) -> str:
    """The rule file (YAML), as the chart embeds it and promtool reads it."""
    header = "# Generated from devtools.alerts by `python -m devtools monitoring alerts`.\n"
    return header + yaml.safe_dump(rule_groups(alerts), sort_keys=False, width=100)
