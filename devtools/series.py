"""The metric names and join expressions the alerts and dashboards share.

vLLM labels its series with ``model_name`` (the served model name); the PodMonitor adds
``namespace`` and ``pod`` (``glm_operator.render.monitoring``). The operator's series carry the
GLMDeployment's ``namespace`` and ``name``; ``glm_operator_glmdeployment_info`` joins the two on
``namespace, model_name``. The operator's ServiceMonitor keeps the series' own ``namespace``
(``honorLabels``). Every replica of the operator serves metrics, the standby with what it held
last: ``max by`` keeps one series per GLMDeployment.

DCGM exporter (NVIDIA's GPU metrics) with Kubernetes pod attribution labels a GPU's series with the
``namespace`` and ``pod`` using it; HAProxy's built-in exporter labels by ``proxy`` (a backend per
model) and ``code`` class.
"""

from __future__ import annotations

import re

# vLLM (the names as exposed: counters with _total, histograms with _bucket).
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
VLLM_ITL_BUCKET = "vllm:inter_token_latency_seconds_bucket"
#: An info gauge (always 1): vLLM's cache configuration as labels, its KV-cache size among them
#: (read by the operator, ``glm_operator.monitoring.kv_cache``; PromQL cannot turn a label into a value).
VLLM_CACHE_CONFIG_INFO = "vllm:cache_config_info"

# DCGM exporter.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
DCGM_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # degrees C

# HAProxy's prometheus-exporter and the gateway sync's per-key counters.
HAPROXY_BACKEND_RESPONSES = "haproxy_backend_http_responses_total"
HAPROXY_FRONTEND_RESPONSES = "haproxy_frontend_http_responses_total"
HAPROXY_SERVER_SESSIONS = "haproxy_server_sessions_total"
GATEWAY_CLIENT_REQUESTS = "glm_gateway_client_requests_total"
GATEWAY_CLIENT_REJECTED = "glm_gateway_client_rejected_requests_total"

# The operator.
OP_INFO = "glm_operator_glmdeployment_info"
OP_PHASE = "glm_operator_glmdeployment_phase"
OP_DESIRED = "glm_operator_desired_replicas"
OP_READY = "glm_operator_ready_replicas"
OP_MAX = "glm_operator_max_replicas"
OP_PLANNED_REPLICAS = "glm_operator_planned_replicas"
OP_PLANNED_KV = "glm_operator_planned_kv_cache_tokens"
OP_REPORTED_KV = "glm_operator_reported_kv_cache_tokens"
OP_PLANNED_GPUS = "glm_operator_planned_gpus"
OP_PLANNED_GPU_MEMORY = "glm_operator_planned_gpu_memory_bytes"
OP_LEADER = "glm_operator_leader"
OP_RECONCILES = "glm_operator_reconciles_total"
OP_RECONCILE_SECONDS_BUCKET = "glm_operator_reconcile_duration_seconds_bucket"
OP_QUEUE_WAIT_BUCKET = "glm_operator_queue_wait_seconds_bucket"
OP_AUTOSCALER_DECISIONS = "glm_operator_autoscaler_decisions_total"
OP_OBSERVED_WAITING = "glm_operator_observed_waiting_requests"
OP_ENQUEUED = "glm_operator_enqueued_total"
OP_API_REQUESTS = "glm_operator_api_requests_total"

#: One series per GLMDeployment: namespace, name, model_name.
DEPLOYMENT_OF_MODEL = f"max by (namespace, name, model_name) ({OP_INFO})"


#: Spaces in a GPU model name that ``with_gpu_product`` turns into dashes ("NVIDIA RTX PRO 6000
#: Blackwell Server Edition" has six).
MAX_GPU_NAME_SPACES = 6


def with_gpu_product(dcgm_expr: str) -> str:
    """``dcgm_expr`` with a ``gpu_product`` label: DCGM's ``modelName`` ("NVIDIA H100 80GB HBM3")
    as GPU feature discovery writes it into the node label the operator plans by
    ("NVIDIA-H100-80GB-HBM3": spaces become dashes). PromQL replaces one match per label_replace,
    so each nested call turns the last remaining space into a dash."""
    expr = f'label_replace({dcgm_expr}, "gpu_product", "$1", "modelName", "(.*)")'
    for _ in range(MAX_GPU_NAME_SPACES):
        expr = f'label_replace({expr}, "gpu_product", "$1-$2", "gpu_product", "(.*) (.*)")'
    return expr


def by_deployment(vllm_expr: str) -> str:
    """``vllm_expr`` (labelled namespace, model_name) with the GLMDeployment's ``name`` added."""
    return f"({vllm_expr}) * on (namespace, model_name) group_left (name) {DEPLOYMENT_OF_MODEL}"


_METRIC = re.compile(r"\b(?:vllm:[a-z0-9_:]+|DCGM_FI_[A-Z0-9_]+|haproxy_[a-z0-9_]+|glm_[a-z0-9_]+)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression of ours selects: every name here has one of the
    prefixes vllm:, DCGM_FI_, haproxy_, glm_ (a test checks no other selector is used)."""
    return set(_METRIC.findall(expr))


def vllm_names(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in metric_names(expr) if name.startswith("vllm:")}
