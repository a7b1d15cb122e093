"""GLMGateways on their own work queue: events only enqueue; a failed apply backs off and honours a
429's Retry-After; a Deployment status update does not re-apply; a deleted gateway is forgotten."""

from __future__ import annotations

import asyncio
from typing import Any

from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.workqueue import WorkQueue
from tests.harness.clock import ManualClock
from tests.harness.controller import drain, wired
from tests.harness.fake_api import api_error

GATEWAY = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm", "namespace": "ns", "uid": "u1", "generation": 1},
    "spec": {"apiKeys": {"secretName": "keys"}},
}
KEY = ("ns", "llm")


def deployment(generation: int) -> dict[str, Any]:
    owner = {"kind": "GLMGateway", "name": "llm", "uid": "u1"}
    return {
        "metadata": {
            "name": "llm-gateway",
            "namespace": "ns",
            "generation": generation,
            "ownerReferences": [owner],
        }
    }


def test_events_enqueue_and_a_status_update_of_the_deployment_does_not() -> None:
    w = wired()
    w.handlers.on_gateway("ADDED", GATEWAY)
    w.handlers.on_gateway_deployment("ADDED", deployment(1))  # first sight of its generation
    assert drain(w.gateway_queue) == [KEY]
    w.handlers.on_gateway_deployment("MODIFIED", deployment(1))
    assert drain(w.gateway_queue) == []  # a status update
    w.handlers.on_gateway_deployment("MODIFIED", deployment(2))
    assert drain(w.gateway_queue) == [KEY]  # edited by hand
    w.handlers.on_gateway("DELETED", GATEWAY)
    assert KEY not in w.gateways.bodies


class RefusingApi:
    """Answers every write with 429 and Retry-After, as API Priority and Fairness does."""

    def __init__(self) -> None:
        self.calls = 0

    def apply(self, obj: Any) -> Any:
        self.calls += 1
        raise api_error(429, "Too Many Requests", retry_after=30)


def test_a_refused_apply_is_retried_no_earlier_than_retry_after() -> None:
    api = RefusingApi()
    clock = ManualClock()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(clock)
    gateways = GatewayReconciler(api, queue, image="glm-operator:test")  # type: ignore[arg-type]
    gateways.on_gateway("ADDED", GATEWAY)
    assert drain(queue) == [KEY]
    asyncio.run(gateways.reconcile(KEY))
    assert api.calls == 1
    assert clock.pending() == [30.0], "retried when the server asked, not at once"
    gateways.on_gateway("MODIFIED", GATEWAY)  # an event meanwhile does not run it earlier
    assert drain(queue) == []
    clock.advance(30.0)
    assert drain(queue) == [KEY]
