"""Child watch events enqueue a reconcile only when something a reconcile reads changed
(controller.predicates), and compute_desired reads nothing of a child outside that view."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.desired import Observed, compute_desired
from glm_operator.controller.predicates import WORKLOAD_STATUS_FIELDS, child_view
from glm_operator.controller.reconcile import reconcile
from glm_operator.controller.runtime import Operator
from glm_operator.render import names
from tests.unit.test_slow_applies import BODY, NODES, SlowServiceApi

KEY = ("llm", "g")


def _bump(obj: dict[str, Any]) -> dict[str, Any]:
    """The next version of ``obj`` as a watch event brings it."""
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


async def _reconciled_operator() -> tuple[Operator, list[tuple[str, str]], dict[str, dict[str, Any]]]:
    """An operator that reconciled ``g`` once (children applied), recording the keys child events
    enqueue; the children as the apiserver answered, by kind."""
    api = SlowServiceApi(slow_kind="-")
    op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
    op.cache.replace_nodes(NODES)
    op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
    await asyncio.wait_for(reconcile(op, *KEY), 5)
    enqueued: list[tuple[str, str]] = []
    op.queue.add_soon = lambda key, delay=0.0: enqueued.append(key)  # type: ignore[method-assign]
    children = {c["kind"]: copy.deepcopy(c) for c in op.cache.owned.children.get(KEY, {}).values()}
    return op, enqueued, children


def _event(op: Operator, obj: dict[str, Any], event_type: str = "MODIFIED") -> None:
    api_version, kind = obj["apiVersion"], obj["kind"]
    op.on_child(event_type, obj, api_version, kind)


def test_a_workload_event_enqueues_only_when_what_a_reconcile_reads_changed() -> None:
    async def scenario() -> None:
        op, enqueued, children = await _reconciled_operator()
        dep = children["Deployment"]
        # The deployment controller's first status: the reconcile read no such child yet.
        dep = _bump(dep)
        dep["status"] = {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "unavailableReplicas": 1,
        }
        _event(op, dep)
        assert enqueued == [KEY]
        await reconcile(op, *KEY)  # reads it
        enqueued.clear()

        # Fields no reconcile reads: stored, nothing enqueued.
        quiet = _bump(dep)
        quiet["status"]["availableReplicas"] = 0
        quiet["status"]["conditions"] = [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"}
        ]
        quiet["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
        _event(op, quiet)
        assert enqueued == []
        assert op.cache.owned.child(KEY, "apps/v1", "Deployment", dep["metadata"]["name"]) == quiet

        # Each field a reconcile reads enqueues (each time from a version a reconcile read).
        current = quiet
        for field in WORKLOAD_STATUS_FIELDS:
            changed = _bump(current)
            changed["status"][field] = int(changed["status"].get(field) or 0) + 1
            _event(op, changed)
            assert enqueued == [KEY], field
            enqueued.clear()
            await reconcile(op, *KEY)
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
            _event(op, changed)
            assert enqueued == [KEY], edit
            enqueued.clear()
            _event(op, _bump(_bump(current)))  # back to the version read: nothing to do
            assert enqueued == [], edit
            current = _bump(_bump(current))
        _event(op, _bump(current), "DELETED")
        assert enqueued == [KEY]

    asyncio.run(scenario())


def test_a_pdb_status_is_filtered_a_service_change_is_not() -> None:
    async def scenario() -> None:
        op, enqueued, children = await _reconciled_operator()
        await reconcile(op, *KEY)  # this one read the PDB and the Service
        pdb = _bump(children["PodDisruptionBudget"])
        pdb["status"] = {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 2}
        _event(op, pdb)
        assert enqueued == []
        pdb = _bump(pdb)
        pdb["metadata"]["generation"] = 2  # edited by hand: re-applied
        _event(op, pdb)
        assert enqueued == [KEY]
        enqueued.clear()
        _event(op, _bump(children["Service"]))  # a Service's version is what the apply memo reads
        assert enqueued == [KEY]

    asyncio.run(scenario())


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
