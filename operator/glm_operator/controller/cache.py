"""In-memory views the watch streams keep current, like client-go's informer caches.

- GPU nodes, slimmed to what placement reads (labels, allocatable, schedulability,
  conditions), and GPUs requested per node by any pod;
- GLMDeployments, and per GLMDeployment its child workloads, Services and vLLM pods.

Reconciles read these instead of live GETs and LISTs. They are caches, not state: the operator
fills them from one list at start-up, then from watch events (only from the event loop), and a
restart rebuilds them. The operator's own writes are folded in from the apiserver's response,
so a reconcile right after a write does not act on the version before it; an older version
arriving later (a slow watch event) never replaces a newer one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from glm_operator.controller.predicates import ChildView, child_view, counts_nothing
from glm_operator.planning.supply.nodes import placement_labels
from glm_operator.planning.supply.outages import pod_gpu_requests

Key = tuple[str, str]  # (namespace, name) of a GLMDeployment
ChildKey = tuple[str, str, str]  # (apiVersion, kind, name)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# A pod holding GPUs: (node, namespace, owner GLMDeployment key or None, {resource: count})
PodGpus = tuple[str, str, tuple[str, str] | None, dict[str, int]]

FINGERPRINT_PARTS = ("labels", "allocatable", "unschedulable", "ready")


def node_fingerprint(node: Mapping[str, Any], label_keys: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """What placement reads from a node: its placement labels (planning.supply.nodes.placement_labels,
    plus ``label_keys``), allocatable, schedulability, readiness. Not taints: the node lifecycle
    controller's come and go with readiness (planning reads the Ready condition, see
    planning.supply.outages), and a re-plan of every GLMDeployment on each of them was most of the
    operator's CPU in the 1,000-node benchmark. Not other labels: the controller-manager adds
    beta.kubernetes.io/os and /arch to every new node, and NFD or topology controllers relabel
    nodes; none of them changes a plan."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    parts = (
        placement_labels(meta.get("labels") or {}, label_keys),
        status.get("allocatable") or {},
        bool(spec.get("unschedulable")),
        ready,
    )
    return tuple(json.dumps(p, sort_keys=True) for p in parts)


def slim_node(node: Mapping[str, Any], label_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Only the fields placement reads: a Node's images, addresses, managedFields and the labels
    placement does not read are dropped (``label_keys``: as in node_fingerprint)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": meta.get("name", ""),
            "labels": placement_labels(meta.get("labels") or {}, label_keys),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {k: spec[k] for k in ("unschedulable",) if k in spec},
        "status": {
            "allocatable": dict(status.get("allocatable") or {}),
            "capacity": dict(status.get("capacity") or {}),
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
        },
    }


def slim_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` (often half of its size)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def child_key(obj: Mapping[str, Any]) -> ChildKey:
    """A child's key in ``OwnedObjects.children``: (apiVersion, kind, name)."""
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str((obj.get("metadata") or {}).get("name")))


def _versions(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """Both resourceVersions as integers when they are two versions of the same object.

    resourceVersions are opaque in the API, but etcd-backed ones are increasing integers; when
    either is not one, None (the candidate is taken, as an informer would)."""
    if current is None:
        return None
    a_meta, b_meta = candidate.get("metadata") or {}, current.get("metadata") or {}
    if a_meta.get("uid") != b_meta.get("uid"):
        return None
    a, b = str(a_meta.get("resourceVersion")), str(b_meta.get("resourceVersion"))
    return (int(a), int(b)) if a.isdigit() and b.isdigit() else None


def is_known(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """True when the cache already holds ``candidate``'s version or a newer one: the watch event
    of a write this process made (and put in the cache from the write's answer), or a replay."""
    versions = _versions(candidate, current)
    return versions is not None and versions[0] <= versions[1]


class OwnedObjects:
    """GLMDeployments and, per GLMDeployment key, its children and vLLM pods.

    A version the cache already holds is not stored again: a write's answer followed by its own
    watch event, or a resync's no-op applies (the same resourceVersion back), would otherwise
    replace every cached object by an equal copy (6.5 MiB of copies for a resync of 200
    GLMDeployments, traced in the controller bench).
    """

    def __init__(self) -> None:
        self.glmdeployments: dict[Key, dict[str, Any]] = {}
        self.children: dict[Key, dict[ChildKey, dict[str, Any]]] = {}
        self.pods: dict[Key, dict[str, dict[str, Any]]] = {}  # by pod uid
        # per GLMDeployment, the view of each child its last reconcile read (controller.predicates)
        self.read_views: dict[Key, dict[ChildKey, ChildView]] = {}
        # namespaces being deleted: nothing of theirs is stored again (a write's answer, an
        # event still on its way) until the namespace is gone or made again (``reopen``)
        self.terminating: set[str] = set()

    def set_glmdeployment(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if key[0] not in self.terminating and not is_known(obj, self.glmdeployments.get(key)):
            self.glmdeployments[key] = slim_object(obj)

    def delete_glmdeployment(self, key: Key) -> None:
        self.glmdeployments.pop(key, None)
        self.read_views.pop(key, None)

    def child(self, key: Key, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.children.get(key, {}).get((api_version, kind, name))

    def set_child(self, key: Key, obj: Mapping[str, Any]) -> None:
        if key[0] in self.terminating:
            return
        child = child_key(obj)
        per_owner = self.children.setdefault(key, {})
        if not is_known(obj, per_owner.get(child)):
            per_owner[child] = slim_object(obj)

    def delete_child(self, key: Key, api_version: str, kind: str, name: str) -> None:
        per_owner = self.children.get(key)
        if per_owner is not None:
            per_owner.pop((api_version, kind, name), None)
            if not per_owner:
                self.children.pop(key, None)
        self.read_views.get(key, {}).pop((api_version, kind, name), None)

    def delete_children_of_kind(self, kind: str) -> None:
        for key in list(self.children):
            for child in [c for c in self.children[key] if c[1] == kind]:
                self.delete_child(key, *child)

    def set_pod(self, key: Key, pod: Mapping[str, Any]) -> None:
        if key[0] in self.terminating:
            return
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        per_owner = self.pods.setdefault(key, {})
        if not is_known(pod, per_owner.get(uid)):
            per_owner[uid] = slim_object(pod)

    def delete_pod(self, key: Key, uid: str) -> None:
        per_owner = self.pods.get(key)
        if per_owner is not None:
            per_owner.pop(uid, None)
            if not per_owner:
                self.pods.pop(key, None)

    def children_of(self, key: Key, kinds: AbstractSet[str]) -> list[dict[str, Any]]:
        """The children of ``kinds``, as a reconcile reads them: their views are remembered."""
        found = [(child, c) for child, c in self.children.get(key, {}).items() if child[1] in kinds]
        if found:
            read = self.read_views.setdefault(key, {})
            for child, c in found:
                read[child] = child_view(c)
        return [c for _, c in found]

    def changed_since_read(self, key: Key, obj: Mapping[str, Any], absent_as_empty: bool = False) -> bool:
        """Whether ``obj`` (a child of ``key``) differs in anything a reconcile reads from the
        version its last reconcile read (controller.predicates); a child it did not read has
        changed, unless ``absent_as_empty`` and it counts no replica yet."""
        read = self.read_views.get(key, {}).get(child_key(obj))
        if read is None:
            return not (absent_as_empty and counts_nothing(obj))
        return child_view(obj) != read

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        return list(self.pods.get(key, {}).values())

    def forget_namespace(self, namespace: str) -> list[Key]:
        """Drop every GLMDeployment of ``namespace`` with its children and pods, and store none
        again until ``reopen``; their keys."""
        self.terminating.add(namespace)
        keys = [key for key in self.glmdeployments if key[0] == namespace]
        for held in (self.glmdeployments, self.children, self.pods, self.read_views):
            for key in [k for k in held if k[0] == namespace]:
                del held[key]
        return keys

    def reopen(self, namespace: str) -> None:
        self.terminating.discard(namespace)


class ClusterCache:
    def __init__(self, node_label_keys: frozenset[str] = frozenset()) -> None:
        """``node_label_keys``: node labels kept beyond planning.supply.nodes.PLACEMENT_LABEL_PREFIXES
        (the node-groups file's nodeSelector keys)."""
        self.node_label_keys = node_label_keys
        self.nodes: dict[str, dict[str, Any]] = {}
        self._fingerprints: dict[str, tuple[str, ...]] = {}
        self.node_changes: dict[str, int] = {}  # fingerprint part -> changes since last taken
        # pod uid -> (node, namespace, owner GLMDeployment key or None, {resource: count})
        self._pods: dict[str, PodGpus] = {}
        # Kept as pods come and go (gpus_used runs in every reconcile; a walk over every pod was
        # a tenth of the event loop's time in a burst). Copy on write: a mapping handed out by
        # gpus_used is a planner's snapshot and is never changed afterwards.
        self._usage: dict[str, Mapping[str, int]] = {}  # node -> resource -> GPUs requested
        self._usage_shared = False
        self._owner_pods: dict[tuple[str, str], set[str]] = {}  # owner -> uids of its GPU pods
        self.owned = OwnedObjects()

    # -- nodes -------------------------------------------------------------------------------
    def set_node(self, node: Mapping[str, Any]) -> bool:
        """Store a node (slimmed); True when something placement reads changed."""
        name = str((node.get("metadata") or {}).get("name", ""))
        fp = node_fingerprint(node, self.node_label_keys)
        if self._fingerprints.get(name) == fp and name in self.nodes:
            # Keep the dict: planning remembers each node's pools by its dict (planning.supply.nodes),
            # and a heartbeat changes nothing placement reads.
            return False
        old = self._fingerprints.get(name)
        for part, a, b in zip(FINGERPRINT_PARTS, old or (), fp, strict=False):
            if a != b:
                self.node_changes[part] = self.node_changes.get(part, 0) + 1
        if old is None:
            self.node_changes["added"] = self.node_changes.get("added", 0) + 1
        self.nodes[name] = slim_node(node, self.node_label_keys)
        self._fingerprints[name] = fp
        return True

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
        self.node_changes.clear()  # the start-up list is not a change

    # -- GPU usage by pods -------------------------------------------------------------------
    def set_pod(self, pod: Mapping[str, Any], owner: tuple[str, str] | None) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        gpus = pod_gpu_requests(pod)
        if meta.get("namespace") in self.owned.terminating:
            gpus = {}  # as below: a pod being deleted holds no GPU in a plan
        if not node or not gpus or phase in TERMINAL_PHASES or meta.get("deletionTimestamp"):
            self.delete_pod(uid)
            return
        entry = (str(node), str(meta.get("namespace", "")), owner, gpus)
        old = self._pods.get(uid)
        if old == entry:
            return  # a status change: the GPUs it holds are the same
        if old is not None:
            self.delete_pod(uid)
        self._pods[uid] = entry
        self._add_usage(entry, 1)
        if owner is not None:
            self._owner_pods.setdefault(owner, set()).add(uid)

    def delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is None:
            return
        self._add_usage(old, -1)
        owner = old[2]
        if owner is not None:
            uids = self._owner_pods.get(owner)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._owner_pods[owner]

    def _add_usage(self, entry: PodGpus, sign: int) -> None:
        node, _, _, gpus = entry
        if self._usage_shared:
            self._usage = dict(self._usage)
            self._usage_shared = False
        per_node = dict(self._usage.get(node) or {})
        for name, count in gpus.items():
            total = per_node.get(name, 0) + sign * count
            if total:
                per_node[name] = total
            else:
                per_node.pop(name, None)
        if per_node:
            self._usage[node] = per_node
        else:
            self._usage.pop(node, None)

    def forget_namespace(self, namespace: str) -> list[Key]:
        """A namespace being deleted: its pods no longer hold GPUs (as a pod being deleted does
        not, see ``set_pod``) and its GLMDeployments are gone from the cache; their keys."""
        for uid in [uid for uid, (_, ns, _, _) in self._pods.items() if ns == namespace]:
            self.delete_pod(uid)
        return self.owned.forget_namespace(namespace)

    def replace_pods(self, pods: list[tuple[dict[str, Any], tuple[str, str] | None]]) -> None:
        self._pods.clear()
        self._usage = {}
        self._usage_shared = False
        self._owner_pods.clear()
        for pod, owner in pods:
            self.set_pod(pod, owner)

    def gpus_used(self, exclude_owner: tuple[str, str] | None = None) -> Mapping[str, Mapping[str, int]]:
        """GPUs held on each node by pods other than ``exclude_owner``'s own: a snapshot, which
        the cache never changes afterwards (it may be shared with other callers: read only)."""
        self._usage_shared = True
        own = self._owner_pods.get(exclude_owner) if exclude_owner is not None else None
        if not own:
            return self._usage
        used = dict(self._usage)
        for uid in own:
            node, _, _, gpus = self._pods[uid]
            per_node = {name: count - gpus.get(name, 0) for name, count in used[node].items()}
            per_node = {name: count for name, count in per_node.items() if count}
            if per_node:
                used[node] = per_node
            else:
                del used[node]
        return used
