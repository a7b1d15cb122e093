"""Thin kopf handlers for GLMGateway: they only update the gateway cache and enqueue keys.

The operator's gateway workers apply them (``glm_operator.controller.gateway.GatewayController``),
on the leader only, with the same per-key backoff as GLMDeployments. A hand edit of the gateway's
Deployment (a new ``metadata.generation``) or its deletion re-queues the GLMGateway it belongs to.
"""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.clients.kube import GROUP, VERSION
from glm_operator.handlers.watches import GATEWAY_DEPLOYMENT, _operator


@kopf.on.event(GROUP, VERSION, "glmgateways")
async def glmgateway_event(event: Any, memo: Any, **_: Any) -> None:
    _operator(memo).gateways.on_gateway(event.get("type"), dict(event.get("object") or {}))


@kopf.on.event("apps", "v1", "deployments", labels=GATEWAY_DEPLOYMENT)
async def gateway_deployment_event(event: Any, memo: Any, **_: Any) -> None:
    _operator(memo).gateways.on_gateway_deployment(event.get("type"), dict(event.get("object") or {}))
