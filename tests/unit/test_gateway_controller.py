"""GLMGateways on their own work queue: events only enqueue; a failed apply backs off and honours a
429's Retry-After; a Deployment status update does not re-apply; a deleted gateway is forgotten."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.gateway import GatewayController
from glm_operator.controller.runtime import Operator

GATEWAY = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm", "namespace": "ns", "uid": "u1", "generation": 1},
    "spec": {"apiKeys": {"secretName": "keys"}},
}


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
    async def scenario() -> None:
        gateways = GatewayController()
        gateways.on_gateway("ADDED", GATEWAY)
        assert len(gateways.queue) == 1
        await gateways.queue._take()
        gateways.on_gateway_deployment("ADDED", deployment(1))
        assert len(gateways.queue) == 1  # first sight of its generation: re-apply
        await gateways.queue._take()
        gateways.on_gateway_deployment("MODIFIED", deployment(1))
        assert len(gateways.queue) == 0  # a status update
        gateways.on_gateway_deployment("MODIFIED", deployment(2))
        assert len(gateways.queue) == 1  # edited by hand
        gateways.on_gateway("DELETED", GATEWAY)
        assert ("ns", "llm") not in gateways.bodies and ("ns", "llm") not in gateways.queue.known

    asyncio.run(scenario())


class RefusingApi:
    """Answers every write with 429 and Retry-After, as API Priority and Fairness does."""

    def __init__(self) -> None:
        self.calls = 0
        self.called_at = 0.0

    def apply(self, obj: Any) -> Any:
        self.calls += 1
        self.called_at = time.monotonic()  # the event loop's clock
        exc = ApiException(status=429, reason="Too Many Requests")
        exc.headers = {"Retry-After": "30"}
        raise exc


def test_a_refused_apply_is_retried_no_earlier_than_retry_after() -> None:
    async def scenario() -> tuple[int, float]:
        api = RefusingApi()
        op = Operator(OperatorConfig(leader_election=False), api)  # type: ignore[arg-type]
        op._leading.set()
        op.gateways.on_gateway("ADDED", GATEWAY)
        worker = asyncio.create_task(
            op.gateways.queue.run_worker(op.reconcile_gateway_key, op.wait_for_leadership)
        )
        await asyncio.sleep(0.5)
        worker.cancel()
        waiting = op.gateways.queue._waiting[("ns", "llm")]
        return api.calls, waiting.when() - api.called_at

    calls, retry_after = asyncio.run(scenario())
    assert calls == 1  # not retried at once
    assert 29.9 <= retry_after <= 30.5  # but when the server asked
