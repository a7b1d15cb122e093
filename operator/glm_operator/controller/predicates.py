"""Which child events need a reconcile, like controller-runtime's event predicates.

A child object (Deployment, LeaderWorkerSet, Service, PodDisruptionBudget, PodMonitor, the ConfigMap
of a recorded load test) changes
far more often than anything a reconcile reads from it: the deployment controller rewrites a
Deployment's status for ``availableReplicas``, ``unavailableReplicas`` and each condition, the
disruption controller a PodDisruptionBudget's for every pod that turns Ready. ``child_view`` is
exactly what a reconcile reads from a child:

- ``observe`` keeps the children owned by this GLMDeployment (ownerReferences' uids);
- ``compute_desired`` (controller.desired) sums ``status.replicas`` / ``readyReplicas`` of the
  workloads and counts ``status.updatedReplicas`` of those whose pod template carries the wanted
  spec-hash label and whose ``status.observedGeneration`` caught up with ``metadata.generation``;
- ``apply_children`` compares ``child_version`` (a workload's, PDB's or PodMonitor's
  generation, a Service's resourceVersion) with the one its last apply returned;
- ``desired.measured_speed`` reads a load-test ConfigMap's data: its resourceVersion stands for it;
- a child being deleted (deletionTimestamp) is kept in the view, although nothing reads it yet.

The cache remembers, per child, the view the last reconcile *read* (``OwnedObjects.children_of``);
a watch event whose child has that same view is stored in the cache but enqueues nothing: the
reconcile that read it already ran on these inputs (or is running: an event during it that does
change the view runs it once more). A new child, a deleted one, or any change of the view enqueues.
A test checks that ``compute_desired`` gives the same result for children of equal views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm_operator.desired.children import template_labels
from glm_operator.desired.model import WORKLOAD_KIND_NAMES
from glm_operator.render import names

ChildView = tuple[Any, ...]
# Kinds without metadata.generation: a Service, and the ConfigMap of a recorded load test (its data
# is what the reconcile reads)
VERSIONED_BY_RESOURCE_VERSION = frozenset({"Service", "ConfigMap"})
WORKLOAD_STATUS_FIELDS = ("replicas", "readyReplicas", "updatedReplicas", "observedGeneration")
COUNTED_FIELDS = ("replicas", "readyReplicas", "updatedReplicas")  # what status sums


def child_version(obj: Mapping[str, Any]) -> str:
    """What changes when somebody else edits a child: a workload's generation, a Service's or
    ConfigMap's version."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") in VERSIONED_BY_RESOURCE_VERSION:
        return str(meta.get("resourceVersion", ""))
    return str(meta.get("generation", ""))


def child_view(obj: Mapping[str, Any]) -> ChildView:
    """Everything a reconcile reads from ``obj`` (see the module docstring)."""
    meta = obj.get("metadata") or {}
    owners = tuple(sorted(str(ref.get("uid", "")) for ref in meta.get("ownerReferences") or []))
    view: ChildView = (owners, meta.get("deletionTimestamp") is not None, child_version(obj))
    if obj.get("kind") in WORKLOAD_KIND_NAMES:
        status = obj.get("status") or {}
        view += (
            template_labels(obj).get(names.LABEL_SPEC_HASH),
            *(status.get(field) for field in WORKLOAD_STATUS_FIELDS),
        )
    return view


def counts_nothing(obj: Mapping[str, Any]) -> bool:
    """A workload whose status counts no replica yet (just created): status reads it as if it
    were absent. A reconcile that read no such child need not run again for it."""
    status = obj.get("status") or {}
    return not any(status.get(field) for field in COUNTED_FIELDS)
