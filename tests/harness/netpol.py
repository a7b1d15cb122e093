"""A small NetworkPolicy evaluator for ingress (pure): would a CNI that implements the
networking.k8s.io/v1 semantics let ``source`` reach ``target``?

The rules, from the API reference (NetworkPolicySpec, NetworkPolicyPeer):
- a pod selected by no policy with policyType Ingress takes any ingress;
- a selected pod takes ingress a rule of some selecting policy allows (policies add up);
- a rule without ``from`` allows every source, one without ``ports`` every port;
- a peer with only ``podSelector`` means pods of the policy's namespace; only
  ``namespaceSelector``: every pod of the matching namespaces; both: pods matching the pod selector
  in the matching namespaces; ``ipBlock``: source addresses in ``cidr`` and not in ``except``.
KWOK runs no CNI, so this is what shows the rendered policy's meaning in tests; enforcement itself
needs a cluster with Calico, Cilium or similar.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str = "10.0.0.1"


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector ({} selects everything)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def _peer_allows(
    peer: Mapping[str, Any], policy_namespace: str, source: Pod, namespaces: Mapping[str, Mapping[str, str]]
) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(source.ip)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], namespaces.get(source.namespace, {}))
    else:
        in_namespace = source.namespace == policy_namespace
    return in_namespace and selects(peer.get("podSelector"), source.labels)


def _port_allows(ports: list[Mapping[str, Any]] | None, port: int) -> bool:
    """Numeric ports only (named ports would need the target's container ports)."""
    if not ports:
        return True
    for entry in ports:
        start = entry.get("port")
        if start is None:
            return True
        if isinstance(start, int) and start <= port <= int(entry.get("endPort") or start):
            return True
    return False


def _ingress_policy(policy: Mapping[str, Any]) -> bool:
    types = policy["spec"].get("policyTypes")
    return "Ingress" in types if types else True


def allows_ingress(
    policies: Iterable[Mapping[str, Any]],
    target: Pod,
    source: Pod,
    port: int,
    namespaces: Mapping[str, Mapping[str, str]],
) -> bool:
    """``namespaces``: each namespace's labels (kubernetes.io/metadata.name is added as the API does)."""
    ns_labels = {ns: {"kubernetes.io/metadata.name": ns, **labels} for ns, labels in namespaces.items()}
    for ns in (target.namespace, source.namespace):
        ns_labels.setdefault(ns, {"kubernetes.io/metadata.name": ns})
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and _ingress_policy(p)
        and selects(p["spec"].get("podSelector"), target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from") or []
            from_ok = not peers or any(
                _peer_allows(peer, policy["metadata"]["namespace"], source, ns_labels) for peer in peers
            )
            if from_ok and _port_allows(rule.get("ports"), port):
                return True
    return False
