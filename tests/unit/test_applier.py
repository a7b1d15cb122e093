"""The applier: workloads in the reconcile, companions in a lane that never holds it; unchanged
children are not sent again; a refused companion is reported by the owner's next reconcile."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

from glm_operator.controller.config import OperatorConfig
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi, api_error
from tests.harness.scenarios import BODY, NODES

KEY = ("llm", "g")


class SlowServiceApi(FakeApi):
    """Service applies wait until ``release`` (a busy apiserver allocating ClusterIPs)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def apply(self, obj: Any) -> dict[str, Any]:
        if obj["kind"] == "Service":
            assert self.release.wait(10)
        return super().apply(obj)


def test_a_slow_service_does_not_hold_the_reconcile_and_lands_afterwards() -> None:
    api = SlowServiceApi()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(BODY)))

    async def scenario() -> tuple[list[str], bool, list[str]]:
        r.applier.start()
        await asyncio.wait_for(r.reconciler.reconcile(KEY), 5)  # returns with the Service on the wire
        during = [kind for _, kind, _ in api.calls]
        service_then = api.get_object("v1", "Service", "llm", "g") is not None
        api.release.set()
        await r.applier.idle()
        for task in r.applier.stop():
            task.cancel()
        return during, service_then, [kind for _, kind, _ in api.calls]

    during, service_then, after = asyncio.run(scenario())
    assert "Deployment" in during and "GLMDeployment" in during, "workload and status written meanwhile"
    assert not service_then, "the reconcile did not wait for the Service"
    assert after.count("Service") == 1
    assert api.get_object("v1", "Service", "llm", "g") is not None
    r.reconcile(KEY)  # nothing changed: nothing sent again
    assert [kind for _, kind, _ in api.calls] == after


def test_a_refused_service_is_reported_by_the_next_reconcile_and_cleared_once_it_lands() -> None:
    api = FakeApi()
    api.fail["Service"] = api_error(422, "spec.ports[0].port: Invalid value")
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(BODY)))
    r.reconcile(KEY)
    assert r.wired.queued() == [KEY], "the lane asked for a reconcile to report the refusal"
    r.reconcile(KEY)
    status = api.get_object("inference.glm.dev/v1alpha1", "GLMDeployment", "llm", "g")["status"]
    (degraded,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert degraded["reason"] == "ChildRejected" and "Service g" in degraded["message"]
    assert ("Warning", "ChildRejected") in {(t, reason) for t, reason, _ in api.events}

    del api.fail["Service"]
    r.wired.queued()
    r.reconcile(KEY)  # the retry (backoff) sends it again; it lands
    assert api.get_object("v1", "Service", "llm", "g") is not None
    assert r.wired.queued() == [KEY], "its landing asks for a reconcile to clear ChildRejected"
    r.reconcile(KEY)
    status = api.get_object("inference.glm.dev/v1alpha1", "GLMDeployment", "llm", "g")["status"]
    (degraded,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert degraded["reason"] != "ChildRejected"


def test_a_companion_rendered_again_while_on_the_wire_is_sent_once_more_with_the_newer_form() -> None:
    api = SlowServiceApi()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    body = api.put(copy.deepcopy(BODY))
    r.wired.handlers.on_glmdeployment("ADDED", body)

    async def scenario() -> None:
        r.applier.start()
        await r.reconciler.reconcile(KEY)
        for _ in range(20):  # the writer takes the Service and blocks on it
            await asyncio.sleep(0)
        changed = copy.deepcopy(api.get_object("inference.glm.dev/v1alpha1", "GLMDeployment", "llm", "g"))
        changed["spec"]["serving"] = {"port": 8080}
        changed["metadata"]["generation"] = 2
        r.wired.handlers.on_glmdeployment("MODIFIED", api.put(changed))
        await r.reconciler.reconcile(KEY)
        api.release.set()
        await r.applier.idle()
        for task in r.applier.stop():
            task.cancel()

    asyncio.run(scenario())
    services = [c for c in api.calls if c[1] == "Service"]
    assert len(services) == 2
    assert api.get_object("v1", "Service", "llm", "g")["spec"]["ports"][0]["targetPort"] in (8080, "http")
