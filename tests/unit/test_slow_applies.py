"""A slow child apply does not hold a reconcile worker (reconcile.execute, in-process).

The apiserver is a stand-in here so the test can hold one apply on purpose; every e2e test runs
the same path against the real kube-apiserver (Service applies there often outlive 0.2 s on a
busy machine).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.reconcile import SLOW_APPLY_SECONDS, reconcile
from glm_operator.controller.runtime import Operator

ROOT = Path(__file__).resolve().parents[2]
NODES = yaml.safe_load((ROOT / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]


class SlowServiceApi:
    """Applies succeed at once, except ``slow_kind`` (Services), which waits until ``release``."""

    def __init__(self, slow_kind: str = "Service", slow_name: str | None = None) -> None:
        self.slow_kind = slow_kind
        self.slow_name = slow_name  # only this name of slow_kind waits (None: every one)
        self.events: list[str] = []  # reasons, in the order posted
        self.release = threading.Event()
        self.applied: list[str] = []
        self.started: dict[str, float] = {}  # kind -> when its first apply was sent
        self.status_writes = 0
        self.on_request = None
        self.may_write = None
        self.result_status: dict[str, Any] | None = None  # status the apply's answer carries

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.started.setdefault(obj["kind"], time.monotonic())
        if obj["kind"] == self.slow_kind and self.slow_name in (None, obj["metadata"]["name"]):
            assert self.release.wait(10)
        self.applied.append(obj["kind"])
        out = copy.deepcopy(obj)
        out["metadata"].update(resourceVersion="7", generation=1, uid=f"uid-{obj['kind']}")
        if self.result_status is not None:
            out["status"] = dict(self.result_status)
        return out

    def create_or_apply(self, obj: dict[str, Any]) -> dict[str, Any]:  # a workload not seen yet
        return self.apply(obj)

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], rv: str | None
    ) -> dict[str, Any]:
        self.status_writes += 1
        return {**BODY, "status": status, "metadata": {**BODY["metadata"], "resourceVersion": "8"}}

    def create_event(self, *_: Any, reason: str, **__: Any) -> None:
        self.events.append(reason)

    def delete(self, *_: Any) -> bool:
        return True


async def background_applies_done(op: Operator, timeout: float = 5.0) -> None:
    """Wait (up to ``timeout``) until no apply is left on the wire in the background."""
    for _ in range(int(timeout / 0.05)):
        if not op.pending_applies:
            return
        await asyncio.sleep(0.05)


BODY: dict[str, Any] = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMDeployment",
    "metadata": {"name": "g", "namespace": "llm", "uid": "uid-1", "generation": 1, "resourceVersion": "5"},
    "spec": {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 32768},
}


def test_a_slow_service_apply_finishes_in_the_background_without_another_reconcile() -> None:
    async def scenario() -> None:
        api = SlowServiceApi()
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
        key = ("llm", "g")

        rejected = await asyncio.wait_for(reconcile(op, *key), 5)

        # The reconcile returned with the Service still on the wire: the workload was applied,
        # the status written, and the Service is tracked, not sent twice.
        assert rejected == []
        assert "Deployment" in api.applied and "Service" not in api.applied
        assert api.status_writes == 1
        service_key = ("llm", "Service", "g")
        assert service_key in op.pending_applies
        assert len(op.queue) == 0

        await asyncio.wait_for(reconcile(op, *key), 5)  # e.g. a pod event meanwhile
        assert api.applied.count("Service") == 0 and len(op.pending_applies) == 1

        api.release.set()
        await background_applies_done(op)
        assert not op.pending_applies
        assert api.applied.count("Service") == 1
        assert op.applied[service_key][1] == "7"  # its resourceVersion, from the apply's answer
        # Nothing waited for it (no prune, status does not read it): no reconcile just for it.
        assert len(op.queue) == 0

    asyncio.run(scenario())


def test_a_slow_apply_requeues_its_key_when_the_reconcile_waited_for_it() -> None:
    """A workload's background apply re-queues the key when its answer counts replicas the
    reconcile did not see (status counts them); a new one that counts none reads as absent."""
    for counted, requeued in (({"replicas": 2, "readyReplicas": 1}, 1), (None, 0), ({"replicas": 0}, 0)):
        asyncio.run(_slow_workload_apply(counted, requeued))


async def _slow_workload_apply(result_status: dict[str, Any] | None, requeued: int) -> None:
    api = SlowServiceApi(slow_kind="Deployment")
    api.result_status = result_status
    op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
    op.cache.replace_nodes(NODES)
    op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
    await asyncio.wait_for(reconcile(op, "llm", "g"), 5)
    assert "Deployment" not in api.applied and len(op.queue) == 0
    # The Service and PDB wait while the workload is on the wire, not alongside it.
    await asyncio.sleep(SLOW_APPLY_SECONDS)
    assert "Service" not in api.started and "PodDisruptionBudget" not in api.started
    api.release.set()
    await background_applies_done(op)
    assert api.applied.count("Deployment") == 1
    assert api.started["Service"] >= api.started["Deployment"] + SLOW_APPLY_SECONDS
    assert api.started["PodDisruptionBudget"] >= api.started["Deployment"] + SLOW_APPLY_SECONDS
    assert len(op.queue) == requeued, result_status


def test_a_slow_service_never_holds_the_status_even_when_background_applies_are_at_their_limit() -> None:
    async def scenario() -> None:
        api = SlowServiceApi()
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
        # Other GLMDeployments' workload applies fill the shared pool's background quota.
        blocked = asyncio.get_running_loop().create_future()
        for i in range(op.max_pending_applies):
            op.pending_applies[("other", "Deployment", f"d{i}")] = blocked
        assert op.pending_workload_applies() >= op.max_pending_applies

        rejected = await asyncio.wait_for(reconcile(op, "llm", "g"), 5)

        assert rejected == []
        assert "Deployment" in api.applied and "Service" not in api.applied
        assert api.status_writes == 1  # written while the Service is still on the wire
        api.release.set()
        blocked.cancel()

    asyncio.run(scenario())


def test_new_specs_keep_a_share_of_the_background_applies_routine_reconciles_may_not_use() -> None:
    """Between ``routine_pending_applies`` and ``max_pending_applies`` background applies, a
    routine reconcile waits for its own workloads and an urgent one (a new spec) does not; at the
    global bound both wait."""

    async def reconcile_with_pending(pending: int, planned: bool) -> bool:
        """Whether the reconcile returned with its Deployment apply still on the wire."""
        api = SlowServiceApi(slow_kind="Deployment")
        op = Operator(OperatorConfig(leader_election=False, workers=8), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        body = copy.deepcopy(BODY)
        if planned:  # a routine reconcile: this generation was planned already
            body["status"] = {"observedGeneration": 1}
        op.cache.owned.set_glmdeployment(body)
        blocked = asyncio.get_running_loop().create_future()
        for i in range(pending):
            op.pending_applies[("other", "Deployment", f"d{i}")] = blocked
        task = asyncio.create_task(reconcile(op, "llm", "g"))
        done, _ = await asyncio.wait([task], timeout=1.5)
        api.release.set()
        await asyncio.wait_for(task, 5)
        blocked.cancel()
        op.planning_pool.shutdown()
        return bool(done)

    async def scenario() -> None:
        op = Operator(OperatorConfig(leader_election=False, workers=8), api=SlowServiceApi())  # type: ignore[arg-type]
        routine_mark, bound = op.routine_pending_applies, op.max_pending_applies
        op.planning_pool.shutdown()
        assert 0 < routine_mark < bound == 8
        assert await reconcile_with_pending(routine_mark - 1, planned=True)
        assert not await reconcile_with_pending(routine_mark, planned=True)
        assert await reconcile_with_pending(bound - 1, planned=False)
        assert not await reconcile_with_pending(bound, planned=False)

    asyncio.run(scenario())


def test_companion_applies_in_the_background_never_hold_back_a_new_workload() -> None:
    """Services, PDBs and PodMonitors wait in their own lane: however many of them are still on
    the wire, a reconcile does not wait for its own workload apply (only workloads count)."""

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="Deployment")
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
        blocked = asyncio.get_running_loop().create_future()
        for i in range(op.max_pending_applies):
            for kind in ("Service", "PodDisruptionBudget", "PodMonitor"):
                op.pending_applies[("other", kind, f"c{i}")] = blocked
        assert op.pending_workload_applies() == 0
        started = time.monotonic()
        # The Deployment apply is never released here: waiting for it would time out.
        await asyncio.wait_for(reconcile(op, "llm", "g"), 5)
        assert time.monotonic() - started < 4
        assert "Deployment" not in api.applied
        # Its Service and PDB wait for it (see the test below), but do not count.
        pending = [kind for ns, kind, _ in op.pending_applies if ns == "llm"]
        assert pending == ["Deployment", "Service", "PodDisruptionBudget"]
        # A workload of another GLMDeployment on the wire does count.
        op.pending_applies[("other", "Deployment", "d")] = blocked
        assert op.pending_workload_applies() == 2
        api.release.set()
        blocked.cancel()

    asyncio.run(scenario())


def test_companions_wait_while_workload_writes_are_on_the_wire() -> None:
    """In a burst, the Services (their ClusterIP allocation is among the apiserver's costliest
    writes) go after the workloads on the wire; alone, a companion is sent at once."""

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="Deployment")
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))

        await asyncio.wait_for(reconcile(op, "llm", "g"), 5)
        await asyncio.sleep(0.3)
        # The Deployment is held on the wire: its Service and PDB wait, with the lane free.
        assert set(api.started) == {"Deployment"}
        assert ("llm", "Service", "g") in op.pending_applies

        api.release.set()
        await background_applies_done(op)
        assert not op.pending_applies
        assert api.applied[0] == "Deployment"
        assert sorted(api.applied[1:]) == ["PodDisruptionBudget", "Service"]

        # No workload write on the wire: a companion goes at once.
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "llm"}}
        result = await asyncio.wait_for(op.submit_apply(service), 1)
        assert result["metadata"]["resourceVersion"] == "7"
        op.planning_pool.shutdown()

    asyncio.run(scenario())


def test_a_held_companion_goes_after_its_hold_even_when_workloads_never_stop(monkeypatch: Any) -> None:
    """A steady stream of workload writes delays a companion by COMPANION_HOLD_SECONDS at most."""
    from glm_operator.controller import runtime

    monkeypatch.setattr(runtime, "COMPANION_HOLD_SECONDS", 0.3)

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="Deployment")
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        meta = {"name": "d", "namespace": "llm"}
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta}
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "llm"}}
        workload = op.submit_apply(deployment)
        started = time.monotonic()
        await asyncio.wait_for(op.submit_apply(service), 5)
        assert 0.25 <= time.monotonic() - started < 3
        assert not workload.done()
        api.release.set()
        await asyncio.wait_for(workload, 5)
        op.planning_pool.shutdown()

    asyncio.run(scenario())


def test_a_reconcile_does_not_wait_for_companions_held_behind_other_workloads(monkeypatch: Any) -> None:
    """In a burst, another GLMDeployment's workload on the wire holds this one's Service and
    PDB: the reconcile writes its status at once instead of spending its apply budget on them,
    and its Events wait with the companions."""
    from glm_operator.controller import reconcile as reconcile_module

    monkeypatch.setattr(reconcile_module, "SLOW_APPLY_SECONDS", 3.0)  # a wait for them would show

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="Deployment", slow_name="other")
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(copy.deepcopy(BODY))
        other = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "other", "namespace": "x"},
        }
        other_write = op.submit_apply(other)

        started = time.monotonic()
        await asyncio.wait_for(reconcile(op, "llm", "g"), 5)
        assert time.monotonic() - started < 1.5  # not the 3 s budget
        assert api.applied == ["Deployment"] and api.status_writes == 1
        held = [kind for ns, kind, _ in op.pending_applies if ns == "llm"]
        assert held == ["Service", "PodDisruptionBudget"]
        await asyncio.sleep(0.2)
        assert api.events == []  # the Events wait with the companions

        api.release.set()
        await asyncio.wait_for(other_write, 5)
        await background_applies_done(op)
        assert sorted(api.applied) == ["Deployment", "Deployment", "PodDisruptionBudget", "Service"]
        for _ in range(40):
            if api.events:
                break
            await asyncio.sleep(0.05)
        assert api.events  # posted once the workload writes are done
        op.planning_pool.shutdown()

    asyncio.run(scenario())


def test_the_status_write_waits_in_its_tail_while_workloads_are_on_the_wire_and_the_worker_goes_on() -> None:
    """Through the operator's own work queue (one worker, one tail slot): while another
    GLMDeployment's workload write is on the wire, g's status write is held in its tail, g stays
    in flight, and the worker is free for the next key (h, whose status is held too); once the
    workload lands, both statuses are written. With nothing on the wire, nothing is held."""

    async def scenario() -> None:
        api = SlowServiceApi(slow_kind="Deployment", slow_name="other")
        op = Operator(OperatorConfig(leader_election=False, workers=1), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        assert op.hold_status_write() is None  # nothing on the wire
        for name in ("g", "h"):
            body = copy.deepcopy(BODY)
            body["metadata"]["name"] = name
            op.cache.owned.set_glmdeployment(body)
        meta = {"name": "other", "namespace": "x"}
        other_write = op.submit_apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta})

        async def gate() -> None:
            return None

        worker = asyncio.create_task(op.queue.run_worker(op.reconcile_key, gate))
        op.queue.add(("llm", "g"), urgent=True)
        op.queue.add(("llm", "h"), urgent=True)
        for _ in range(100):
            if op.queue.tails_held == 2:
                break
            await asyncio.sleep(0.05)
        assert op.queue.tails_held == 2 and api.status_writes == 0
        assert op.queue.in_flight(("llm", "g")) and op.queue.in_flight(("llm", "h"))
        assert api.applied.count("Deployment") == 2  # g's and h's workloads went meanwhile

        api.release.set()
        await asyncio.wait_for(other_write, 5)
        for _ in range(100):
            if api.status_writes == 2 and not op.queue.tails_in_flight:
                break
            await asyncio.sleep(0.05)
        assert api.status_writes == 2 and op.queue.tails_held == 0
        worker.cancel()
        op.planning_pool.shutdown()

    asyncio.run(scenario())
