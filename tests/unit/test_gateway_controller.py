"""GLMGateways on their own work queue: events only enqueue; a failed apply backs off and honours a
429's Retry-After; a Deployment status update does not re-apply; a deleted gateway is forgotten."""

from __future__ import annotations

import asyncio
from typing import Any

from glm_operator.controller.workqueue import WorkQueue
from tests.harness.clock import ManualClock
from tests.harness.controller import drain, gateway_reconciler, wired
from tests.harness.fake_api import FakeApi, api_error

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


def test_a_refused_apply_is_retried_no_earlier_than_retry_after() -> None:
    api = FakeApi()  # every write answered 429 with Retry-After, as API Priority and Fairness does
    refused = api_error(429, "Too Many Requests", retry_after=30)
    api.fail = dict.fromkeys(("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"), refused)
    api.fail["NetworkPolicy"] = refused
    clock = ManualClock()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(clock)
    gateways = gateway_reconciler(api, queue, clock)
    gateways.on_gateway("ADDED", api.put(GATEWAY))
    assert drain(queue) == [KEY]
    asyncio.run(gateways.reconcile(KEY))
    assert api.writes() and not api.writes("status"), "applies sent, no status written"
    assert clock.pending() == [30.0], "retried when the server asked, not at once"
    gateways.on_gateway("MODIFIED", {**GATEWAY, "metadata": {**GATEWAY["metadata"], "generation": 2}})
    assert drain(queue) == [], "an event meanwhile does not run it earlier"
    clock.advance(30.0)
    assert drain(queue) == [KEY]
