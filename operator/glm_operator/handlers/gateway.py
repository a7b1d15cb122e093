"""Thin kopf handler for GLMGateway: the leader applies the gateway's objects on every event.

Separate from the GLMDeployment work queue: a gateway has no plan, only a render and an apply.
A replica that is not the leader waits for leadership, so a newly elected leader applies every
gateway from the events kopf queued.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from glm_operator.clients.kube import GROUP, VERSION
from glm_operator.controller.gateway import apply_gateway, sync_image
from glm_operator.handlers.watches import _operator

log = logging.getLogger(__name__)
RETRIES = 5


@kopf.on.event(GROUP, VERSION, "glmgateways")
async def glmgateway_event(event: Any, memo: Any, **_: Any) -> None:
    if event.get("type") == "DELETED":
        return  # owner references: the garbage collector removes the children
    body = dict(event.get("object") or {})
    if not body.get("metadata", {}).get("uid"):
        return
    op = _operator(memo)
    await op.wait_for_leadership()
    for attempt in range(RETRIES):
        try:
            await asyncio.to_thread(apply_gateway, op.api, body, sync_image())
            return
        except Exception as err:  # never crash the operator: back off, then leave it to the next event
            delay = 2.0 * 2**attempt
            log.warning(
                "GLMGateway %s not applied (%s); retry in %.0fs", body["metadata"]["name"], err, delay
            )
            await asyncio.sleep(delay)
