"""Step 4 of the pipeline: why replicas do not serve, besides what the pods say (pure).

The pods' own diagnoses come from ``planning.diagnosis``; these come from the plan: replicas kept
on unavailable nodes, multi-node replicas without the LeaderWorkerSet API, replicas that fit
neither on free GPUs nor on nodes the node pools can still add. Pods that wait for a node a node
autoscaler is launching are not degraded (within the provisioning grace).
"""

from __future__ import annotations

from collections.abc import Sequence

from glm_operator.desired.children import variant_slug
from glm_operator.desired.model import Observed
from glm_operator.planning.diagnosis.pods import Diagnosis, Reason
from glm_operator.planning.placement.result import Variant
from glm_operator.planning.supply.capacity import is_waiting_for_node
from glm_operator.planning.supply.outages import NodeOutage, format_time
from glm_operator.render import names

LWS_MISSING = Diagnosis(
    reason="LeaderWorkerSetMissing",
    message="the plan needs replicas spanning several nodes, run as a LeaderWorkerSet, "
    "but the LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1) is not installed.",
    fix="install LeaderWorkerSet (kubernetes-sigs/lws), or give GPUs that fit one node "
    "(gpu.products), a lower quantization, a shorter contextLength or a lower minConcurrency.",
    pods=(),
)


def outage_findings(held: Sequence[NodeOutage], grace: float) -> list[Diagnosis]:
    """Degraded GPUNodesUnavailable for replicas kept on NotReady/Unknown nodes (a cordon is not)."""
    down = [o for o in held if o.expires is not None]
    if not down:
        return []
    until = min(o.expires for o in down if o.expires is not None)
    return [
        Diagnosis(
            reason=Reason.GPU_NODES_UNAVAILABLE,
            message=f"GPU nodes {', '.join(o.describe() for o in down)} are unavailable; the replicas "
            f"on them keep their place for the node grace period of {grace:g} s (until "
            f"{format_time(until)}), then they are re-planned onto available GPUs.",
            fix="nothing, if the nodes come back; otherwise check them (kubectl describe node) or delete "
            "them to re-plan at once.",
            pods=(),
        )
    ]


def shortfall_finding(shortfall: int, replicas: int, limits: str) -> list[Diagnosis]:
    """Replicas that fit neither on free GPUs nor on what the node pools can still add."""
    if not (shortfall and limits):
        return []
    return [
        Diagnosis(
            reason="InsufficientGPU",
            message=f"{shortfall} of {replicas} replicas fit neither on free GPUs nor on the nodes the "
            f"node pools can still add: {limits}.",
            fix="raise the node pool's limits (NodePool spec.limits), allow more gpu.products, "
            "or lower replicas / autoscaling.maxReplicas.",
            pods=(),
        )
    ]


def pods_waiting_for_nodes(observed: Observed, placed: Sequence[Variant], waiting: set[str]) -> set[str]:
    """Pods that wait for a node a node autoscaler launches (not a degradation, within the grace
    period): those the capacity kept for a launching node, and per variant as many Pending pods
    as it has replicas planned on new nodes."""
    out = set(waiting)
    for v in placed:
        label = names.label_value(variant_slug(v.key))
        pending = sorted(
            str(p["metadata"]["name"])
            for p in observed.pods
            if (p.get("metadata", {}).get("labels") or {}).get(names.LABEL_VARIANT) == label
            and is_waiting_for_node(p, observed.now, observed.elastic.grace_seconds)
        )
        out.update(pending[: v.new_node_replicas])
    return out
