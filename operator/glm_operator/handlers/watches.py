"""Thin kopf handlers: they only update caches and enqueue GLMDeployment keys.

No handler reconciles by itself and none writes kopf's progress annotations or finalizers onto
the GLMDeployment (``on.event`` keeps no state), so a GitOps tool sees no drift and deleting a
GLMDeployment never waits for the operator: the garbage collector removes the children.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from glm_operator.clients.kube import GROUP, PLURAL, VERSION
from glm_operator.controller.runtime import Operator, owner_key
from glm_operator.render import names

log = logging.getLogger(__name__)


def _operator(memo: Any) -> Operator:
    op = memo.get("operator") if isinstance(memo, dict) else getattr(memo, "operator", None)
    if not isinstance(op, Operator):
        raise kopf.PermanentError("operator runtime missing from kopf memo")
    return op


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.posting.enabled = False  # we post our own Events, with reasons users can act on
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    await _operator(memo).start()


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    await _operator(memo).stop()


@kopf.on.event(GROUP, VERSION, PLURAL)
def glmdeployment_event(event: Any, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    op = _operator(memo)
    key = (str(namespace), name)
    if event.get("type") == "DELETED":
        op.queue.forget(key)
        op.specs.pop(key, None)
        return
    obj = event.get("object") or {}
    op.specs[key] = dict(obj.get("spec") or {})
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    op.queue.add(key, urgent=generation != observed)  # a spec not planned yet goes first


@kopf.on.event("", "v1", "nodes")
def node_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    op = _operator(memo)
    obj = dict(event.get("object") or body)
    name = str(obj.get("metadata", {}).get("name", ""))
    changed = op.cache.delete_node(name) if event.get("type") == "DELETED" else op.cache.set_node(obj)
    if changed:
        op.replan_all_soon()  # GPU supply changed: every GLMDeployment re-plans (debounced)


@kopf.on.event("", "v1", "pods")
def pod_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    op = _operator(memo)
    obj = dict(event.get("object") or body)
    key = owner_key(obj)
    if event.get("type") == "DELETED":
        op.cache.delete_pod(str(obj.get("metadata", {}).get("uid", "")))
    else:
        op.cache.set_pod(obj, key)
    if key is not None:
        op.queue.add(key)


@kopf.on.event("apps", "v1", "deployments", labels={names.LABEL_MANAGED_BY: names.MANAGED_BY})
def child_event(event: Any, body: Any, memo: Any, **_: Any) -> None:
    key = owner_key(dict(event.get("object") or body))
    if key is not None:
        _operator(memo).queue.add(key)
