"""What each watch event does: update a cache, then enqueue the keys whose reconcile reads it.

Every method runs on the operator's event loop (``watches`` hands the events over from kopf's
thread), so the caches and queues are only touched from that loop. None blocks, none does I/O.
The mapping from events to reconcile keys, as controller-runtime's event handlers:

- a GLMDeployment: its own key (not the echo of this process's own status write);
- a child (Deployment, LeaderWorkerSet, Service, PodDisruptionBudget, PodMonitor) or a vLLM pod:
  its owner's key, from the operator's labels (a child event that changes nothing a reconcile
  reads enqueues nothing: ``predicates``);
- any pod: the GPUs it holds on its node (every plan reads them);
- a node or a Karpenter NodePool: a debounced re-plan of every GLMDeployment when something the
  planner reads changed (``replan``);
- a namespace being deleted: its objects are forgotten at once;
- the PodMonitor CRD: API discovery is asked again (``discovery``);
- a GLMGateway or its Deployment, or a GLMDeployment's served name: the gateway's key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from glm_operator.controller import metrics
from glm_operator.controller.cache import ClusterCache, is_known
from glm_operator.controller.config import namespace_matches
from glm_operator.controller.discovery import ApiDiscovery
from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.replan import Replanner
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.render import names

log = logging.getLogger(__name__)

# A pod going Pending -> scheduled -> Running -> Ready sends four events in a second, and its
# workload's status follows: the events of a child or pod run the owner's reconcile this much
# later, once for all of them (a spec change runs at once).
ROUTINE_DELAY = 0.5


def owner_key(obj: Mapping[str, Any]) -> Key | None:
    """The GLMDeployment a child object or pod belongs to, from the operator's labels."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
        return None
    owner = labels.get(names.LABEL_DEPLOYMENT)
    ns = meta.get("namespace")
    return (str(ns), str(owner)) if owner and ns else None


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace")), str(meta.get("name")))


class EventHandlers:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        nodepools: NodePoolCache,
        queue: WorkQueue[Key],
        gateways: GatewayReconciler,
        replanner: Replanner,
        discovery: ApiDiscovery,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self.cache = cache
        self.nodepools = nodepools
        self.queue = queue
        self.gateways = gateways
        self.replanner = replanner
        self.discovery = discovery
        self.namespaces = namespaces

    def watches_namespace(self, namespace: str) -> bool:
        """A namespace the operator serves (``--namespace`` patterns), and not being deleted."""
        return namespace not in self.cache.owned.terminating and namespace_matches(self.namespaces, namespace)

    def _enqueue(self, key: Key, cause: str, delay: float = 0.0) -> None:
        metrics.ENQUEUED.labels(cause=cause).inc()
        self.queue.add_after(key, delay)

    # -- GLMDeployments ------------------------------------------------------------------------
    def on_glmdeployment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if not self.watches_namespace(key[0]):
            return
        self.gateways.on_glmdeployment(event_type, obj)
        if event_type == "DELETED":
            self.forget_glmdeployment(key)
            return
        if is_known(obj, self.cache.owned.glmdeployments.get(key)):
            return  # the echo of this process's own status write: nothing to reconcile
        self.cache.owned.set_glmdeployment(obj)
        self._enqueue(key, "glmdeployment")

    def forget_glmdeployment(self, key: Key) -> None:
        self.cache.owned.delete_glmdeployment(key)
        self.queue.remove(key)
        self.queue.add(key)  # one last run finds it gone and drops what the operator kept of it

    # -- children and pods ---------------------------------------------------------------------
    def on_child(self, api_version: str, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        if key is None or not self.watches_namespace(key[0]):
            return
        obj = {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}
        name = str(obj["metadata"].get("name"))
        if event_type == "DELETED":
            self.cache.owned.delete_child(key, api_version, kind, name)
        elif is_known(obj, self.cache.owned.child(key, api_version, kind, name)):
            return  # the echo of this process's own apply
        else:
            self.cache.owned.set_child(key, obj)
            if not self.cache.owned.changed_since_read(key, obj):
                # nothing a reconcile reads changed (predicates): a status field such as
                # availableReplicas or a condition, a PodDisruptionBudget's counters
                metrics.FILTERED.labels(kind=kind).inc()
                return
        self._enqueue(key, "child", ROUTINE_DELAY)

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if event_type == "DELETED":
            self.cache.delete_pod(uid)
        else:
            self.cache.set_pod(obj, key)
        if key is not None and self.watches_namespace(key[0]):
            if event_type == "DELETED":
                self.cache.owned.delete_pod(key, uid)
            else:
                self.cache.owned.set_pod(key, obj)
            self._enqueue(key, "pod", ROUTINE_DELAY)

    # -- GPU supply ----------------------------------------------------------------------------
    def on_node(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        changed = self.cache.delete_node(name) if event_type == "DELETED" else self.cache.set_node(obj)
        if changed:
            self.replanner.supply_changed("node " + ("deleted" if event_type == "DELETED" else "changed"))

    def on_nodepool(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        changed = self.nodepools.delete(name) if event_type == "DELETED" else self.nodepools.set(obj)
        if changed:
            self.replanner.supply_changed("NodePool changed")

    # -- namespaces ----------------------------------------------------------------------------
    def on_namespace(self, event_type: str | None, obj: dict[str, Any]) -> None:
        """A namespace being deleted takes its GLMDeployments, children and pods with it. kopf stops
        a namespace pattern's watch streams in it as soon as the namespace controller reports on
        its deletion, before those objects' DELETED events: without this, they stayed in the caches
        for good, reconciled (404) at every resync and holding their pods' GPUs in every plan.
        Its objects are forgotten once, and their later events ignored, until the namespace is gone
        (or made again)."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("name", ""))
        if event_type != "DELETED" and not meta.get("deletionTimestamp"):
            self.cache.owned.reopen(namespace)  # made again under the same name
            return
        if event_type != "DELETED" and namespace in self.cache.owned.terminating:
            return  # forgotten already
        keys = self.cache.forget_namespace(namespace)
        self.gateways.forget_namespace(namespace)
        if event_type == "DELETED":
            self.cache.owned.reopen(namespace)
        for key in keys:
            self.queue.remove(key)
            self.queue.add(key)  # one last run finds it gone and drops what the operator kept of it
        if keys:
            log.info("namespace %s is being deleted: %d GLMDeployments forgotten", namespace, len(keys))

    def on_crd(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self.discovery.on_crd(event_type, obj)

    # -- GLMGateways -----------------------------------------------------------------------------
    def on_gateway(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if self.watches_namespace(object_key(obj)[0]):
            self.gateways.on_gateway(event_type, obj)

    def on_gateway_deployment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self.gateways.on_gateway_deployment(event_type, obj)
