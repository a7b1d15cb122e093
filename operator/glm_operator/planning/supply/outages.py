"""Node outages and the grace period that keeps running replicas where they are (pure).

A node that is briefly ``NotReady``/``Unknown`` or cordoned is held for the replicas already on it, since
moving a model costs a cold start of many minutes; it is given up once the outage outlasts the grace
period (as the node lifecycle controller waits before it evicts), the node is deleted or its pods are
gone. ``node_outage(node, now, grace)`` is the one decision; ``held_gpus`` and ``next_expiry`` derive from
it. Nothing here reads a clock. docs/planning.md ("Node outages").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from glm_operator.catalog.gpus import NVIDIA_RESOURCE_PREFIX
from glm_operator.planning.supply.nodes import unavailable_nodes

DEFAULT_NODE_GRACE_SECONDS = 300.0

NOT_READY = "NotReady"
UNKNOWN = "Unknown"
CORDONED = "Cordoned"


@dataclass(frozen=True)
class NodeOutage:
    """Why a node is not available for new pods, since when, and until when it is held."""

    node_name: str
    reason: str  # NotReady | Unknown | Cordoned
    since: dt.datetime | None  # None: the node gives no timestamp (a cordon)
    expires: dt.datetime | None  # None: held as long as the deployment's pods run there

    def held(self, now: dt.datetime) -> bool:
        return self.expires is None or now < self.expires

    def describe(self) -> str:
        """Stable text (absolute times, not "for N s"): a status that changes on every reconcile
        would trigger the next one through its own watch event."""
        if self.since is None:
            return f"{self.node_name} ({self.reason})"
        return f"{self.node_name} ({self.reason} since {format_time(self.since)})"


def parse_time(value: Any) -> dt.datetime | None:
    """RFC 3339 timestamp as Kubernetes writes it ("2026-11-30T11:00:00Z"); None if absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def format_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_condition(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond
    return None


def node_outage(node: Mapping[str, Any], now: dt.datetime, grace_seconds: float) -> NodeOutage | None:
    """The node's outage, or None when it is Ready and schedulable (see the module docstring)."""
    name = str((node.get("metadata") or {}).get("name", ""))
    ready = _ready_condition(node)
    status = str(ready.get("status")) if ready is not None else "True"
    if status != "True":
        assert ready is not None
        since = parse_time(ready.get("lastTransitionTime")) or now  # no timestamp: the grace starts now
        reason = UNKNOWN if status == "Unknown" else NOT_READY
        return NodeOutage(name, reason, since, since + dt.timedelta(seconds=grace_seconds))
    if (node.get("spec") or {}).get("unschedulable"):
        return NodeOutage(name, CORDONED, None, None)
    return None


def node_outages(
    nodes: Iterable[Mapping[str, Any]], now: dt.datetime, grace_seconds: float
) -> dict[str, NodeOutage]:
    """node name -> outage, for every node that is not Ready and schedulable."""
    out: dict[str, NodeOutage] = {}
    for node in unavailable_nodes(nodes):  # found once per node set: healthy nodes cost nothing
        outage = node_outage(node, now, grace_seconds)
        if outage is not None:
            out[outage.node_name] = outage
    return out


def pod_gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPUs a pod holds, per extended resource name (limits, else requests, summed over containers)."""
    out: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for resource, raw in amounts.items():
            if not str(resource).startswith(NVIDIA_RESOURCE_PREFIX):
                continue
            try:
                count = int(str(raw))
            except ValueError:
                continue
            out[resource] = out.get(resource, 0) + count
    return out


def _is_live(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def held_gpus(
    outages: Mapping[str, NodeOutage], pods: Iterable[Mapping[str, Any]], now: dt.datetime
) -> dict[str, dict[str, int]]:
    """node -> resource -> GPUs the given (own) pods hold on nodes that are still in their grace."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        outage = outages.get(node)
        if outage is None or not outage.held(now) or not _is_live(pod):
            continue
        per_node = out.setdefault(node, {})
        for resource, count in pod_gpu_requests(pod).items():
            per_node[resource] = per_node.get(resource, 0) + count
    return {node: gpus for node, gpus in out.items() if any(gpus.values())}


def next_expiry(outages: Iterable[NodeOutage], now: dt.datetime, nodes: Iterable[str]) -> float | None:
    """Seconds until the first grace period among ``nodes`` ends (re-plan then); None if none will."""
    wanted = set(nodes)
    left = [
        (o.expires - now).total_seconds()
        for o in outages
        if o.node_name in wanted and o.expires is not None and o.held(now)
    ]
    return max(0.0, min(left)) if left else None
