"""In-memory views the watch streams keep current: GPU nodes and GPUs requested per node.

Reconciles read these instead of listing 1,000 nodes and every pod for each GLMDeployment.
They are caches, not state: the operator fills them from a full list at start-up, then from
watch events, and a restart rebuilds them from the apiserver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from glm_operator.planning.outages import pod_gpu_requests

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def node_fingerprint(node: Mapping[str, Any]) -> str:
    """What placement reads from a node: labels, allocatable, taints, schedulability, readiness."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return json.dumps(
        [
            meta.get("labels") or {},
            status.get("allocatable") or {},
            spec.get("taints") or [],
            bool(spec.get("unschedulable")),
            ready,
        ],
        sort_keys=True,
    )


class ClusterCache:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self._fingerprints: dict[str, str] = {}
        # pod uid -> (node, owner GLMDeployment key or None, {resource: count})
        self._pods: dict[str, tuple[str, tuple[str, str] | None, dict[str, int]]] = {}

    # -- nodes -------------------------------------------------------------------------------
    def set_node(self, node: Mapping[str, Any]) -> bool:
        """Store a node; True when something placement reads changed."""
        name = str((node.get("metadata") or {}).get("name", ""))
        fp = node_fingerprint(node)
        changed = self._fingerprints.get(name) != fp
        self.nodes[name] = dict(node)
        self._fingerprints[name] = fp
        return changed

    def delete_node(self, name: str) -> bool:
        existed = name in self.nodes
        self.nodes.pop(name, None)
        self._fingerprints.pop(name, None)
        return existed

    def replace_nodes(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes.clear()
        self._fingerprints.clear()
        for node in nodes:
            self.set_node(node)

    # -- GPU usage by pods -------------------------------------------------------------------
    def set_pod(self, pod: Mapping[str, Any], owner: tuple[str, str] | None) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        gpus = pod_gpu_requests(pod)
        if not node or not gpus or phase in TERMINAL_PHASES or meta.get("deletionTimestamp"):
            self._pods.pop(uid, None)
            return
        self._pods[uid] = (str(node), owner, gpus)

    def delete_pod(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def replace_pods(self, pods: list[tuple[dict[str, Any], tuple[str, str] | None]]) -> None:
        self._pods.clear()
        for pod, owner in pods:
            self.set_pod(pod, owner)

    def gpus_used(self, exclude_owner: tuple[str, str] | None = None) -> dict[str, dict[str, int]]:
        """GPUs held on each node by pods other than ``exclude_owner``'s own."""
        used: dict[str, dict[str, int]] = {}
        for node, owner, gpus in self._pods.values():
            if exclude_owner is not None and owner == exclude_owner:
                continue
            per_node = used.setdefault(node, {})
            for name, count in gpus.items():
                per_node[name] = per_node.get(name, 0) + count
        return used
