"""What the desired-state pipeline reads and returns: ``Observed`` in, ``Desired`` out.

Both are frozen snapshots: the reconciler gathers ``Observed`` from its caches on the event loop and
hands it to ``compute_desired`` in a thread; nothing in either is changed afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.v1alpha1 import SpeedSource
from glm_operator.planning.diagnosis.conditions import MetricsStatus
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.supply.capacity import ElasticCapacityInput
from glm_operator.planning.supply.outages import DEFAULT_NODE_GRACE_SECONDS
from glm_operator.render.objects import LWS_API_VERSION

WORKLOAD_KINDS = (("apps/v1", "Deployment"), (LWS_API_VERSION, "LeaderWorkerSet"))
WORKLOAD_KIND_NAMES = frozenset(kind for _, kind in WORKLOAD_KINDS)

ChildRef = tuple[str, str, str]  # (apiVersion, kind, name) of a child object


@dataclass(frozen=True)
class Observed:
    """One GLMDeployment and what its plan depends on, as the watches last saw them."""

    body: Mapping[str, Any]  # the GLMDeployment as read from the apiserver
    nodes: Sequence[Mapping[str, Any]]
    gpus_used: Mapping[str, Mapping[str, int]]  # GPUs held by other workloads, node -> resource -> n
    children: Sequence[Mapping[str, Any]]  # its Deployments / LeaderWorkerSets
    pods: Sequence[Mapping[str, Any]]  # its vLLM pods
    default_image: str
    now: str  # RFC 3339
    metrics: MetricsStatus | None = None  # the autoscaler's view of Prometheus, when autoscaling is on
    lws_available: bool = True  # LeaderWorkerSet API served (multi-node variants)
    node_grace_seconds: float = DEFAULT_NODE_GRACE_SECONDS  # outage a running replica waits out
    elastic: ElasticCapacityInput = field(default_factory=ElasticCapacityInput)  # node autoscalers
    # Render a PodMonitor (the operator decides from --pod-monitor and API discovery), and the
    # PodMonitors of this GLMDeployment that exist now (pruned when not wanted).
    pod_monitor: bool = False
    pod_monitors: Sequence[Mapping[str, Any]] = ()
    # The InferencePool API is served (discovery), and the objects of spec.inferencePool that exist
    # now (the InferencePool and its endpoint picker's: pruned when not wanted).
    inference_pool_api: bool = False
    inference_pool_children: Sequence[Mapping[str, Any]] = ()
    # The load test recorded for this GLMDeployment (glm-operator loadtest --record): its ConfigMap,
    # owned by it, or None (desired.measured_speed).
    load_test: Mapping[str, Any] | None = None

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation") or 0)

    @property
    def previous_status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}


@dataclass(frozen=True)
class SpeedChoice:
    """``status.plan.speedSource`` and ``speedSourceReason`` (``desired.measured_speed``);
    ``recorded``: a load-test recording was read."""

    source: SpeedSource
    reason: str
    recorded: bool = False


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about the GLMDeployment."""

    type: str  # Normal | Warning
    reason: str
    message: str


#: Where a first replica goes: (GPU type, on a node to be launched, the node pools it grows into).
FirstReplica = tuple[str, bool, tuple[str, ...]]


@dataclass(frozen=True)
class ScalingTargets:
    """What the autoscaler scales on, from the plan (``desired.scaling``)."""

    capacity: int  # replicas the GPU pools and node autoscalers can host, up to maxReplicas
    replica_concurrency: float  # running requests one replica aims at: the predicted knee
    replica_capacity: float  # one replica's max-num-seqs
    first_replica: FirstReplica | None  # None: no GPU can host one


@dataclass(frozen=True)
class Desired:
    """The outcome of one pass of the pipeline: what to apply, prune, write to status, announce."""

    plan: Plan | None
    objects: tuple[dict[str, Any], ...]  # children to server-side apply, workloads first
    prune: tuple[ChildRef, ...]  # children to delete
    status: dict[str, Any]  # the status this pass computed (wire form; see desired.status)
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None  # seconds: reconcile again then (a node grace period ends)
    scaling: ScalingTargets | None = None  # with spec.autoscaling: what the autoscaler scales on
