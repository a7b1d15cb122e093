"""Watch-fed view of the node autoscalers' pools (Karpenter NodePools) for capacity planning.

Kept apart from the node/pod cache: filled from a full list when the ``karpenter.sh/v1`` API is
served, then by the NodePool watch (``glm_operator.handlers.nodepools``). A change to what the
planner reads from a NodePool (template labels and requirements, limits, resources in use)
re-plans every GLMDeployment, as a node change does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from glm_operator.clients.kube import KubeClient
from glm_operator.controller.config import OperatorConfig
from glm_operator.planning.supply.capacity import ElasticCapacityInput

NODEPOOL_API = "karpenter.sh/v1"


def nodepool_fingerprint(nodepool: Mapping[str, Any]) -> str:
    spec = nodepool.get("spec") or {}
    template = spec.get("template") or {}
    return json.dumps(
        [
            (template.get("metadata") or {}).get("labels") or {},
            (template.get("spec") or {}).get("requirements") or [],
            spec.get("limits") or {},
            (nodepool.get("status") or {}).get("resources") or {},
            bool((nodepool.get("metadata") or {}).get("deletionTimestamp")),
        ],
        sort_keys=True,
    )


class NodePoolCache:
    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self._fingerprints: dict[str, str] = {}

    def set(self, nodepool: Mapping[str, Any]) -> bool:
        """Store a NodePool; True when something the planner reads changed."""
        name = str((nodepool.get("metadata") or {}).get("name", ""))
        fp = nodepool_fingerprint(nodepool)
        changed = self._fingerprints.get(name) != fp
        self.items[name] = dict(nodepool)
        self._fingerprints[name] = fp
        return changed

    def delete(self, name: str) -> bool:
        self._fingerprints.pop(name, None)
        return self.items.pop(name, None) is not None

    def refresh(self, api: KubeClient) -> None:
        """Full list (blocking: run it in a thread); empty when Karpenter's API is not served."""
        items = api.list(NODEPOOL_API, "NodePool") if api.api_available(NODEPOOL_API) else []
        self.items.clear()
        self._fingerprints.clear()
        for item in items:
            self.set(item)

    def elastic_input(self, config: OperatorConfig) -> ElasticCapacityInput:
        return ElasticCapacityInput(
            nodepools=list(self.items.values()),
            node_groups=config.node_groups,
            grace_seconds=config.node_provisioning_grace_seconds,
        )
