"""Operator settings, read from the command line (the chart passes them as args)."""

from __future__ import annotations

import fnmatch
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE as DEFAULT_VLLM_IMAGE
from glm_operator.clients.prometheus import (
    DEFAULT_KV_CACHE_QUERY,
    DEFAULT_RUNNING_QUERY,
    DEFAULT_WAITING_QUERY,
)
from glm_operator.controller.pod_monitors import PodMonitorMode
from glm_operator.gateway.network_policy import NetworkPolicySettings
from glm_operator.planning.supply.outages import DEFAULT_NODE_GRACE_SECONDS

DEFAULT_SYNC_IMAGE = "ghcr.io/glm-operator/glm-operator:latest"


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class OperatorConfig:
    default_image: str = DEFAULT_VLLM_IMAGE
    namespaces: tuple[str, ...] = ()  # () = all namespaces
    prometheus_url: str | None = None
    waiting_query: str = DEFAULT_WAITING_QUERY
    running_query: str = DEFAULT_RUNNING_QUERY
    kv_cache_query: str = DEFAULT_KV_CACHE_QUERY  # vllm:cache_config_info of a model's pods
    pod_monitor: PodMonitorMode = PodMonitorMode.AUTO  # PodMonitor per GLMDeployment (--pod-monitor)
    resync_seconds: float = 600.0
    workers: int = 32
    # Replicas on NotReady/Unknown GPU nodes keep their place this long (planning.supply.outages).
    node_grace_seconds: float = DEFAULT_NODE_GRACE_SECONDS
    planning_timeout_seconds: float = 30.0  # one GLMDeployment's plan; past it: retried with backoff
    leader_election: bool = True
    lease_namespace: str = field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "default"))
    lease_name: str = "glm-operator"
    identity: str = field(default_factory=default_identity)
    metrics_port: int | None = None  # operator's own /metrics; None = off
    metrics_host: str = "0.0.0.0"
    # Node groups of autoscalers other than Karpenter (--node-groups-file; planning.supply.pools), and how
    # long a pod waiting for a new node keeps its place in the plan (planning.supply.capacity).
    node_groups: Mapping[str, Any] | None = None
    node_provisioning_grace_seconds: float = 600.0
    # GLMGateways: their sync sidecar's image (the operator's own; the chart sets it) and the
    # chart's gateway.networkPolicy values.
    gateway_sync_image: str = DEFAULT_SYNC_IMAGE
    gateway_network_policy: NetworkPolicySettings = field(default_factory=NetworkPolicySettings)


def namespace_matches(patterns: tuple[str, ...], namespace: str) -> bool:
    """kopf-style namespace patterns (``--namespace``): globs, ``!`` negations, comma-separated
    lists, the rightmost match wins; no patterns: every namespace."""
    if not patterns:
        return True
    matched = patterns[0].startswith("!")
    for pattern in patterns:
        for glob in pattern.split(","):
            negated = glob.startswith("!")
            if fnmatch.fnmatchcase(namespace, glob.lstrip("!")):
                matched = not negated
    return matched


def plain_namespaces(patterns: tuple[str, ...]) -> list[str] | None:
    """The watched namespaces when all are plain names (a namespaced install), else None."""
    if not patterns:
        return None
    found = [n for pattern in patterns for n in pattern.split(",")]
    if any(c in n for n in found for c in "*?[!"):
        return None
    return found
