"""Child watch events enqueue a reconcile only when something a reconcile reads changed
(controller.predicates), and compute_desired reads nothing of a child outside that view."""

from __future__ import annotations

import copy
import json
from typing import Any

from glm_operator.clients.load_tests import load_test_config_map
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.predicates import WORKLOAD_STATUS_FIELDS, child_view
from glm_operator.desired import Observed, compute_desired
from glm_operator.planning.speed.measured import Measurement, measurement_to_data, shape_from_status
from glm_operator.render import names
from tests.harness.controller import Reconciling, reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.load_levels import SATURATING
from tests.harness.scenarios import BODY, NODES

KEY = ("llm", "g")


def _bump(obj: dict[str, Any]) -> dict[str, Any]:
    """The next version of ``obj`` as a watch event brings it."""
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


class Setup:
    """A reconciler that reconciled ``g`` once (children applied); ``enqueued()`` drains the keys
    child events put on the queue since."""

    def __init__(self) -> None:
        api = FakeApi()
        self.r: Reconciling = reconciling(api, OperatorConfig(leader_election=False, workers=2), NODES)
        self.r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(BODY)))
        self.reconcile()
        self.children = {
            c["kind"]: copy.deepcopy(c) for c in self.r.wired.cache.owned.children.get(KEY, {}).values()
        }
        self.enqueued()

    def reconcile(self) -> None:
        self.r.reconcile(KEY)

    def enqueued(self) -> list[tuple[str, str]]:
        return self.r.wired.queued()

    def event(self, obj: dict[str, Any], event_type: str = "MODIFIED") -> None:
        self.r.wired.handlers.on_child(obj["apiVersion"], obj["kind"], event_type, obj)


def test_a_workload_event_enqueues_only_when_what_a_reconcile_reads_changed() -> None:
    t = Setup()
    dep = t.children["Deployment"]
    # The deployment controller's first status: the reconcile read no such child yet.
    dep = _bump(dep)
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "unavailableReplicas": 1,
    }
    t.event(dep)
    assert t.enqueued() == [KEY]
    t.reconcile()  # reads it
    t.enqueued()

    # Fields no reconcile reads: stored, nothing enqueued.
    quiet = _bump(dep)
    quiet["status"]["availableReplicas"] = 0
    quiet["status"]["conditions"] = [
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"}
    ]
    quiet["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
    t.event(quiet)
    assert t.enqueued() == []
    assert t.r.wired.cache.owned.child(KEY, "apps/v1", "Deployment", dep["metadata"]["name"]) == quiet

    # Each field a reconcile reads enqueues (each time from a version a reconcile read).
    current = quiet
    for field in WORKLOAD_STATUS_FIELDS:
        changed = _bump(current)
        changed["status"][field] = int(changed["status"].get(field) or 0) + 1
        t.event(changed)
        assert t.enqueued() == [KEY], field
        t.reconcile()
        current = changed
    for edit in ("generation", "spec-hash", "owner", "deleting"):
        changed = _bump(current)
        meta = changed["metadata"]
        if edit == "generation":
            meta["generation"] = int(meta["generation"]) + 1
        elif edit == "spec-hash":
            changed["spec"]["template"]["metadata"]["labels"][names.LABEL_SPEC_HASH] = "other"
        elif edit == "owner":
            meta["ownerReferences"] = []
        else:
            meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        t.event(changed)
        assert t.enqueued() == [KEY], edit
        t.event(_bump(_bump(current)))  # back to the version read: nothing to do
        assert t.enqueued() == [], edit
        current = _bump(_bump(current))
    t.event(_bump(current), "DELETED")
    assert t.enqueued() == [KEY]


def test_a_pdb_status_is_filtered_a_service_change_is_not() -> None:
    t = Setup()
    t.reconcile()  # this one read the PDB and the Service
    pdb = _bump(t.children["PodDisruptionBudget"])
    pdb["status"] = {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 2}
    t.event(pdb)
    assert t.enqueued() == []
    pdb = _bump(pdb)
    pdb["metadata"]["generation"] = 2  # edited by hand: re-applied
    t.event(pdb)
    assert t.enqueued() == [KEY]
    t.event(_bump(t.children["Service"]))  # a Service's version is what the apply memo reads
    assert t.enqueued() == [KEY]


def test_compute_desired_reads_nothing_of_a_workload_outside_its_view() -> None:
    """The other side of the predicate: children of equal views give the same Desired."""
    observed = Observed(
        body=copy.deepcopy(BODY), nodes=NODES, gpus_used={}, children=[], pods=[],
        default_image="vllm/vllm-openai:v0.33.0", now="2026-12-01T00:00:00Z",
    )  # fmt: skip
    first = compute_desired(observed)
    workloads = [copy.deepcopy(o) for o in first.objects if o["kind"] == "Deployment"]
    assert workloads
    for w in workloads:
        w["metadata"].update(generation=2, resourceVersion="9", uid="u")
        w["status"] = {"observedGeneration": 2, "replicas": 2, "readyReplicas": 1, "updatedReplicas": 2}
    body = {**copy.deepcopy(BODY), "status": first.status}
    base = compute_desired(observed.__class__(**{**observed.__dict__, "body": body, "children": workloads}))
    noisy = copy.deepcopy(workloads)
    for w in noisy:
        w["metadata"].update(resourceVersion="10", annotations={"deployment.kubernetes.io/revision": "3"})
        w["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
        w["status"].update(availableReplicas=1, unavailableReplicas=1, collisionCount=0)
        w["status"]["conditions"] = [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}
        ]
    assert [child_view(w) for w in noisy] == [child_view(w) for w in workloads]
    again = compute_desired(observed.__class__(**{**observed.__dict__, "body": body, "children": noisy}))
    assert (again.status, again.objects, again.prune, again.events) == (
        base.status, base.objects, base.prune, base.events,
    )  # fmt: skip
    # ... and a field in the view does change it (the test would notice a view missing it).
    ready = copy.deepcopy(workloads)
    ready[0]["status"]["readyReplicas"] = 2
    assert child_view(ready[0]) != child_view(workloads[0])
    moved = compute_desired(observed.__class__(**{**observed.__dict__, "body": body, "children": ready}))
    assert moved.status["readyReplicas"] != base.status["readyReplicas"]


def test_a_recorded_load_test_is_an_input_each_new_version_of_it_replans() -> None:
    """The ConfigMap of ``loadtest --record`` comes through the child watch: it has no generation, so
    its resourceVersion stands for its data; a replayed version enqueues nothing."""
    t = Setup()
    status = t.r.wired.cache.owned.glmdeployments[KEY]["status"]
    assert status["plan"]["speedSource"] == "modelled"
    plan = status["plan"]
    m = Measurement(
        SATURATING, 512, 128, shape_from_status(plan["variants"][0], plan["image"]), "2026-12-07T00:00:00Z"
    )
    cm = load_test_config_map(BODY, measurement_to_data(m))
    cm["metadata"]["resourceVersion"] = "40"
    t.event(cm, "ADDED")
    assert t.enqueued() == [KEY]
    t.reconcile()
    measured = t.r.wired.cache.owned.glmdeployments[KEY]["status"]["plan"]
    assert measured["speedSource"] == "measured" and measured["variants"][0]["measuredKneeConcurrency"] == 8
    t.event(copy.deepcopy(cm))  # a replay of the version read
    assert t.enqueued() == []

    stale = _bump(cm)  # edited: the same sweep, as if taken on another image
    doc = json.loads(stale["data"]["measurement.json"])
    doc["shape"]["image"] = "vllm/vllm-openai:v0.1.0"
    stale["data"]["measurement.json"] = json.dumps(doc)
    t.event(stale)
    assert t.enqueued() == [KEY]
    t.reconcile()
    plan = t.r.wired.cache.owned.glmdeployments[KEY]["status"]["plan"]
    assert (
        plan["speedSource"] == "modelled" and "image 'vllm/vllm-openai:v0.1.0'" in plan["speedSourceReason"]
    )
    t.event(_bump(stale), "DELETED")
    assert t.enqueued() == [KEY]
