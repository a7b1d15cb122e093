"""Thin kopf handler for Karpenter NodePools: update the NodePool view, re-plan on a change.

kopf serves this resource only while its CRD exists (it watches CRDs and starts or stops the
watch as ``nodepools.karpenter.sh`` appears or goes), so clusters without Karpenter are fine.
"""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.handlers.watches import _operator


# async: kopf runs sync handlers in a thread, where replan_all_soon has no event loop to schedule on.
@kopf.on.event("karpenter.sh", "v1", "nodepools")
async def nodepool_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    op = _operator(memo)
    obj = dict(event.get("object") or body)
    name = str(obj.get("metadata", {}).get("name", ""))
    changed = op.nodepools.delete(name) if event.get("type") == "DELETED" else op.nodepools.set(obj)
    if changed:
        op.replan_all_soon()  # what node autoscalers can add changed: every GLMDeployment re-plans
