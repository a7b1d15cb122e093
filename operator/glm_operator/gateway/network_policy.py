"""The NetworkPolicy of a GLMGateway: only the gateway reaches the vLLM pods (pure).

Without it any pod of the cluster can call a vLLM pod's port directly, around the gateway's API
keys and limits. ``<name>-gateway-vllm`` selects the vLLM pods of the gateway's namespace (the
operator's ``component`` ``inference`` and ``worker`` labels) and allows ingress from:

- this gateway's pods (its selector labels);
- the vLLM pods of the namespace themselves (a multi-node replica's leader and workers talk to each
  other: Ray, NCCL);
- the metrics scraper (``metricsFrom``: NetworkPolicy peers; by default pods labelled
  ``app.kubernetes.io/name=prometheus`` in any namespace, as the prometheus-operator labels them).

NetworkPolicies add up, so a second GLMGateway of the namespace adds its own pods. The CNI enforces
the policy (Calico, Cilium, ...); without one it has no effect. Probes from the kubelet come from
the node, which those CNIs allow by default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_operator.render import names

#: The chart value the peers come from, named in errors.
METRICS_FROM_VALUE = "gateway.networkPolicy.metricsFrom"
_PEER_KEYS = frozenset({"namespaceSelector", "podSelector", "ipBlock"})
_SELECTOR_KEYS = frozenset({"matchLabels", "matchExpressions"})


def default_metrics_from() -> tuple[dict[str, Any], ...]:
    return ({"namespaceSelector": {}, "podSelector": {"matchLabels": {names.LABEL_NAME: "prometheus"}}},)


@dataclass(frozen=True)
class NetworkPolicySettings:
    """The chart's ``gateway.networkPolicy`` values."""

    enabled: bool = True
    metrics_from: tuple[dict[str, Any], ...] = field(default_factory=default_metrics_from)


def parse_metrics_from(text: str) -> tuple[dict[str, Any], ...]:
    """``metricsFrom`` as JSON (the chart passes it so): a list of NetworkPolicy peers.

    Raises ValueError naming the chart value and the fix."""
    fix = f"set {METRICS_FROM_VALUE} to a list of NetworkPolicy peers (namespaceSelector/podSelector/ipBlock)"
    try:
        peers = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{METRICS_FROM_VALUE}: not JSON ({err}); {fix}") from None
    if not isinstance(peers, list):
        raise ValueError(f"{METRICS_FROM_VALUE}: a {type(peers).__name__}, not a list; {fix}")
    for i, peer in enumerate(peers):
        if not isinstance(peer, dict) or not peer or set(peer) - _PEER_KEYS:
            raise ValueError(f"{METRICS_FROM_VALUE}[{i}]: {peer!r} is not a peer; {fix}")
        for key in ("namespaceSelector", "podSelector"):
            selector = peer.get(key)
            if selector is not None and (not isinstance(selector, dict) or set(selector) - _SELECTOR_KEYS):
                raise ValueError(
                    f"{METRICS_FROM_VALUE}[{i}].{key}: {selector!r}; a label selector has only "
                    "matchLabels and matchExpressions"
                )
    return tuple(peers)


def network_policy_settings(enabled: str, metrics_from: str | None) -> NetworkPolicySettings:
    """The chart's ``gateway.networkPolicy`` values as the operator gets them (``true``/``false``,
    and ``metricsFrom`` as JSON; None: the default peers). Raises ValueError naming the chart value."""
    enabled = enabled.strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"gateway.networkPolicy.enabled: {enabled!r}; set true or false")
    if metrics_from is None:
        return NetworkPolicySettings(enabled=enabled == "true")
    return NetworkPolicySettings(enabled=enabled == "true", metrics_from=parse_metrics_from(metrics_from))


def network_policy_name(gateway: str) -> str:
    return names.dns_label(f"{gateway}-gateway-vllm")


def vllm_pod_selector() -> dict[str, Any]:
    """Every vLLM pod the operator runs in the namespace: serving pods and multi-node workers."""
    return {
        "matchLabels": {names.LABEL_PART_OF: names.PART_OF},
        "matchExpressions": [
            {
                "key": names.LABEL_COMPONENT,
                "operator": "In",
                "values": [names.COMPONENT_INFERENCE, names.COMPONENT_WORKER],
            }
        ],
    }


def network_policy_spec(gateway_pods: Mapping[str, str], settings: NetworkPolicySettings) -> dict[str, Any]:
    """The policy's spec: vLLM pods take ingress from ``gateway_pods`` (labels), each other and the
    metrics scraper only."""
    peers: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": dict(gateway_pods)}},
        {"podSelector": vllm_pod_selector()},
        *(dict(peer) for peer in settings.metrics_from),
    ]
    return {"podSelector": vllm_pod_selector(), "policyTypes": ["Ingress"], "ingress": [{"from": peers}]}
