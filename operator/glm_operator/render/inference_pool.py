"""The InferencePool of a GLMDeployment and its endpoint picker (pure: dicts out).

For gateways that implement the Gateway API Inference Extension (Envoy Gateway, kgateway, Istio,
GKE): an ``InferencePool`` (inference.networking.k8s.io/v1) selects the GLMDeployment's serving
pods (all variants: the selector of its Service) on the vLLM port, and names the endpoint picker
(EPP) the gateway asks, through Envoy's ext_proc gRPC API, which pod serves each request. The EPP
reads the pool and its pods from the apiserver and scrapes each pod's vLLM metrics (queue, KV-cache
use, cache block size) on the same port; its scheduler profile (``EPP_CONFIG``) is upstream's
default, written out: queue depth (weight 2), KV-cache utilization (2) and approximate prefix-cache
affinity (3), the highest score wins.

Objects, all owned by the GLMDeployment and labelled with it (so the operator's child watches see
them): the InferencePool (named like the GLMDeployment's Service), and ``<name>-epp``: the EPP's
Deployment (one replica, Recreate: the prefix index lives in its memory), its Service (ext_proc
9002, metrics 9090), ServiceAccount, and a Role and RoleBinding letting it read pods and
InferencePools (and the extension's optional InferenceObjectives and InferenceModelRewrites) in the
namespace. The EPP's pods carry no GLMDeployment label: they are not vLLM pods.
"""

from __future__ import annotations

from typing import Any

import yaml

from glm_operator.api.v1alpha1 import InferencePoolSpec
from glm_operator.render import names
from glm_operator.render.context import WorkloadContext
from glm_operator.render.objects import owner_references

INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/v1"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_PLURAL = "inferencepools"
#: The experimental kinds the EPP watches when their CRDs are installed.
INFERENCE_OBJECTIVE_GROUP = "inference.networking.x-k8s.io"

EPP_GRPC_PORT = 9002  # ext_proc
EPP_HEALTH_PORT = 9003  # gRPC health (service "inference-extension")
EPP_METRICS_PORT = 9090
EPP_APP_NAME = "endpoint-picker"
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
READ = ["get", "list", "watch"]

#: Kinds of the objects rendered here (the operator watches each, labelled, to prune them).
INFERENCE_POOL_KINDS = frozenset(
    {INFERENCE_POOL_KIND, "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"}
)

#: Upstream's default scheduling profile (cmd/epp's loadDefaultConfig in v1.5.0), written out so
#: the object says what the picker does. The picker adds the approximate prefix-cache producer the
#: prefix scorer needs, the max-score picker and the OpenAI parser itself.
EPP_CONFIG: dict[str, Any] = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        {"type": "metrics-data-source"},
        {"type": "core-metrics-extractor"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "prefix-cache-scorer", "weight": 3},
            ],
        }
    ],
}


def inference_pool_name(deployment_name: str) -> str:
    """The InferencePool of a GLMDeployment: the name of its Service."""
    return names.service_name(deployment_name)


def endpoint_picker_name(deployment_name: str) -> str:
    """The EPP's Deployment, Service, ServiceAccount, Role and RoleBinding."""
    return names.dns_label(f"{deployment_name}-epp")


def endpoint_picker_selector(deployment_name: str) -> dict[str, str]:
    """The EPP's pod labels (and its Deployment's and Service's selector)."""
    return {
        names.LABEL_NAME: EPP_APP_NAME,
        names.LABEL_INSTANCE: names.label_value(deployment_name),
        names.LABEL_COMPONENT: names.COMPONENT_ENDPOINT_PICKER,
    }


def _labels(ctx: WorkloadContext) -> dict[str, str]:
    return {
        **dict(ctx.labels),
        **endpoint_picker_selector(ctx.deployment_name),
        names.LABEL_PART_OF: names.PART_OF,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_DEPLOYMENT: names.label_value(ctx.deployment_name),
    }


def _metadata(ctx: WorkloadContext, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ctx.namespace,
        "labels": labels,
        "ownerReferences": owner_references(ctx),
    }


def epp_args(namespace: str, pool: str) -> list[str]:
    """The picker's command line (also what the tests run the built binary with, on loopback)."""
    return [
        "--pool-name",
        pool,
        "--pool-namespace",
        namespace,
        "--pool-group",
        INFERENCE_POOL_GROUP,
        "--grpc-port",
        str(EPP_GRPC_PORT),
        "--grpc-health-port",
        str(EPP_HEALTH_PORT),
        "--metrics-port",
        str(EPP_METRICS_PORT),
        "--config-text",
        yaml.safe_dump(EPP_CONFIG, sort_keys=False),
        "--zap-encoder",
        "json",
        "--tracing=false",
        # Its /metrics answers without a TokenReview (that would take a ClusterRole the operator
        # does not hold); like vLLM's, the NetworkPolicy of a GLMGateway or the cluster's guards it.
        "--metrics-endpoint-auth=false",
    ]


def _deployment(ctx: WorkloadContext, spec: InferencePoolSpec, name: str) -> dict[str, Any]:
    picker = spec.endpoint_picker
    resources = (
        picker.resources.model_dump(by_alias=True, exclude_none=True)
        if picker.resources is not None
        else {"requests": {"cpu": "200m", "memory": "256Mi"}}
    )
    health = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"}}
    selector = endpoint_picker_selector(ctx.deployment_name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(ctx, name, _labels(ctx)),
        "spec": {
            "replicas": 1,
            # One picker at a time: its prefix index is in its memory, and a rolling update would
            # keep two with different views.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": name,
                    "terminationGracePeriodSeconds": 130,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "epp",
                            "image": picker.image,
                            "imagePullPolicy": "IfNotPresent",
                            "args": epp_args(ctx.namespace, inference_pool_name(ctx.deployment_name)),
                            "env": [
                                {
                                    "name": "NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                            ],
                            "ports": [
                                {"name": "grpc", "containerPort": EPP_GRPC_PORT, "protocol": "TCP"},
                                {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
                                {"name": "metrics", "containerPort": EPP_METRICS_PORT, "protocol": "TCP"},
                            ],
                            "livenessProbe": {**health, "initialDelaySeconds": 5, "periodSeconds": 10},
                            "readinessProbe": {**health, "periodSeconds": 2},
                            "resources": resources,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def render_inference_pool(ctx: WorkloadContext, spec: InferencePoolSpec) -> list[dict[str, Any]]:
    """The InferencePool and its endpoint picker's objects. ``ctx``: any variant's context (only
    GLMDeployment-level fields are used, as for the Service)."""
    name = endpoint_picker_name(ctx.deployment_name)
    labels = _labels(ctx)
    pool_labels = {**dict(ctx.labels), **names.service_labels(ctx.deployment_name)}
    pool = {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": _metadata(ctx, inference_pool_name(ctx.deployment_name), pool_labels),
        "spec": {
            "selector": {"matchLabels": names.service_selector(ctx.deployment_name)},
            "targetPorts": [{"number": ctx.port}],
            "appProtocol": "http",
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": name,
                "port": {"number": EPP_GRPC_PORT},
                "failureMode": spec.endpoint_picker.failure_mode,
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(ctx, name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": endpoint_picker_selector(ctx.deployment_name),
            "ports": [
                {"name": "grpc-ext-proc", "port": EPP_GRPC_PORT, "targetPort": "grpc",
                 "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
                {"name": "http-metrics", "port": EPP_METRICS_PORT, "targetPort": "metrics",
                 "protocol": "TCP"},
            ],
        },
    }  # fmt: skip
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(ctx, name, labels)}
    role = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": _metadata(ctx, name, labels),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
            {"apiGroups": [INFERENCE_POOL_GROUP], "resources": [INFERENCE_POOL_PLURAL], "verbs": READ},
            {"apiGroups": [INFERENCE_OBJECTIVE_GROUP],
             "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": READ},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding",
        "metadata": _metadata(ctx, name, labels),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.namespace}],
    }
    return [_deployment(ctx, spec, name), pool, service, account, role, binding]
