"""Kubernetes objects of a GLMGateway (pure: the GLMGateway body in, plain dicts out).

- ServiceAccount, Role (read GLMDeployments and Pods of the namespace) and RoleBinding for the
  sync sidecar;
- Deployment: an init container writes the first HAProxy configuration, then HAProxy
  (master-worker, so reloads are graceful) and the ``glm-operator gateway sync`` sidecar share an
  in-memory volume with the configuration and both control sockets. The API-key Secret is
  mounted read-only; the operator never reads it;
- Service of the given type in front of the HAProxy port;
- NetworkPolicy ``<name>-gateway-vllm`` (unless the chart turned it off): the vLLM pods of the
  namespace accept traffic from the gateway and the metrics scraper only (``network_policy``).

Everything carries an owner reference to the GLMGateway, so deleting it removes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm_operator.api.gateway import GATEWAY_KIND, GATEWAY_PLURAL, GLMGatewaySpec
from glm_operator.api.v1alpha1 import API_VERSION, GROUP, PLURAL
from glm_operator.gateway.haproxy_config import HTTP_PORT, PEERS_PORT, PROXY_METRICS_PORT
from glm_operator.gateway.network_policy import (
    NetworkPolicySettings,
    network_policy_name,
    network_policy_spec,
)
from glm_operator.render import names

GATEWAY_APP_NAME = "glm-gateway"
COMPONENT_GATEWAY = "gateway"
RUN_DIR = "/run/glm-gateway"
KEYS_DIR = "/etc/glm-gateway/keys"
KEYS_FILE = "keys.map"
SYNC_METRICS_PORT = 9090
#: Non-root user both containers run as, so they can share the control sockets (mode 600).
GATEWAY_UID = 65532


def gateway_name(name: str) -> str:
    """Name of every child of a GLMGateway (Deployment, Service, ServiceAccount, Role, RoleBinding)."""
    return names.dns_label(f"{name}-gateway")


def selector_labels(name: str) -> dict[str, str]:
    return {names.LABEL_NAME: GATEWAY_APP_NAME, names.LABEL_INSTANCE: names.label_value(name)}


def gateway_labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        names.LABEL_COMPONENT: COMPONENT_GATEWAY,
        names.LABEL_PART_OF: names.PART_OF,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
    }


def _metadata(gateway: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    meta = gateway["metadata"]
    return {
        "name": name or gateway_name(meta["name"]),
        "namespace": meta["namespace"],
        "labels": gateway_labels(meta["name"]),
        "ownerReferences": [
            {
                "apiVersion": gateway.get("apiVersion", API_VERSION),
                "kind": GATEWAY_KIND,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def sync_args(gateway_object_name: str, *, once: bool) -> list[str]:
    """Arguments of ``glm-operator`` in the init container (``once``) and the sidecar."""
    args = [
        "gateway",
        "sync",
        "--namespace=$(POD_NAMESPACE)",
        f"--gateway={gateway_object_name}",
        f"--config-dir={RUN_DIR}",
        f"--keys-file={KEYS_DIR}/{KEYS_FILE}",
        f"--port={HTTP_PORT}",
        f"--proxy-metrics-port={PROXY_METRICS_PORT}",
    ]
    if once:
        return [*args, "--once"]
    return [*args, f"--master-socket={RUN_DIR}/master.sock", f"--metrics-port={SYNC_METRICS_PORT}"]


def _container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": GATEWAY_UID,
        "runAsGroup": GATEWAY_UID,
        "fsGroup": GATEWAY_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _volumes(spec: GLMGatewaySpec) -> list[dict[str, Any]]:
    """The in-memory run directory (config, master socket) and the API keys Secret."""
    return [
        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {
            "name": "api-keys",
            "secret": {
                "secretName": spec.api_keys.secret_name,
                "items": [{"key": spec.api_keys.key, "path": KEYS_FILE}],
            },
        },
    ]


def _sync_container(
    name: str,
    container: str,
    sync_image: str,
    once: bool,
    mounts: list[dict[str, Any]],
    env: list[dict[str, Any]],
) -> dict[str, Any]:
    """The sync program: ``once`` writes the first config (init container), else it follows changes."""
    out: dict[str, Any] = {
        "name": container,
        "image": sync_image,
        "args": sync_args(name, once=once),
        "env": env,
    }
    if not once:
        out["ports"] = [{"name": "sync-metrics", "containerPort": SYNC_METRICS_PORT}]
    out["volumeMounts"] = mounts
    out["securityContext"] = _container_security()
    if not once:
        out["resources"] = {"requests": {"cpu": "50m", "memory": "96Mi"}}
    return out


def _haproxy_container(spec: GLMGatewaySpec, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    health = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5}
    return {
        "name": "haproxy",
        "image": spec.image,
        "command": ["haproxy", "-W", "-db", "-S", f"{RUN_DIR}/master.sock"],
        "args": ["-f", f"{RUN_DIR}/haproxy.cfg"],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT},
            {"name": "proxy-metrics", "containerPort": PROXY_METRICS_PORT},
            {"name": "peers", "containerPort": PEERS_PORT},
        ],
        "readinessProbe": health,
        "livenessProbe": {**health, "failureThreshold": 6},
        "volumeMounts": mounts,
        "securityContext": _container_security(),
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
    }


def _deployment(gateway: Mapping[str, Any], spec: GLMGatewaySpec, sync_image: str) -> dict[str, Any]:
    name = gateway["metadata"]["name"]
    # one list each for every container that has it (safe_dump writes it once, with an anchor)
    mounts: list[dict[str, Any]] = [
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "api-keys", "mountPath": KEYS_DIR, "readOnly": True},
    ]
    # POD_NAME and POD_IP: the sync names this replica in the HAProxy peers section, so the
    # replicas share the per-key limits.
    env = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(gateway),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "template": {
                "metadata": {"labels": gateway_labels(name)},
                "spec": {
                    "serviceAccountName": gateway_name(name),
                    "securityContext": _pod_security(),
                    # In flight requests get the read timeout to finish when a pod is replaced.
                    "terminationGracePeriodSeconds": spec.read_timeout_seconds + 5,
                    "volumes": _volumes(spec),
                    "initContainers": [_sync_container(name, "config", sync_image, True, mounts, env)],
                    "containers": [
                        _haproxy_container(spec, mounts),
                        _sync_container(name, "sync", sync_image, False, mounts, env),
                    ],
                },
            },
        },
    }


def render_gateway(
    gateway: Mapping[str, Any],
    spec: GLMGatewaySpec,
    sync_image: str,
    network_policy: NetworkPolicySettings | None = None,
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, Deployment, Service and (``network_policy`` enabled, the
    default) NetworkPolicy of one GLMGateway."""
    network_policy = network_policy or NetworkPolicySettings()
    name = gateway["metadata"]["name"]
    child = gateway_name(name)
    service_meta = _metadata(gateway)
    if spec.service.annotations:
        service_meta["annotations"] = dict(spec.service.annotations)
    policy = []
    if network_policy.enabled:
        policy.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _metadata(gateway, network_policy_name(name)),
                "spec": network_policy_spec(selector_labels(name), network_policy),
            }
        )
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(gateway)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(gateway),
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": [PLURAL, GATEWAY_PLURAL],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                # status.wake: models requested while none of their replicas was ready
                {"apiGroups": [GROUP], "resources": [f"{GATEWAY_PLURAL}/status"], "verbs": ["get", "patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(gateway),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": child},
            "subjects": [
                {"kind": "ServiceAccount", "name": child, "namespace": gateway["metadata"]["namespace"]}
            ],
        },
        _deployment(gateway, spec, sync_image),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": service_meta,
            "spec": {
                "type": spec.service.type,
                "selector": selector_labels(name),
                "ports": [
                    {"name": "http", "port": spec.service.port, "targetPort": "http", "protocol": "TCP"}
                ],
            },
        },
        *policy,
    ]
