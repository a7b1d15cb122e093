"""Every watch the operator opens, in one table (``WATCHES``), and where each one's events go.

kopf runs them (``clients.watches``: a registry of ``on.event`` handlers, kopf in a thread of its
own); each event is handed over to the operator's event loop, where ``EventHandlers`` update the
caches and enqueue keys.
"""

from __future__ import annotations

import asyncio
from typing import Any

from glm_operator.api.gateway import GATEWAY_PLURAL
from glm_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from glm_operator.clients import watches as watch_layer
from glm_operator.clients.watches import Registry, Settings, Sink, Watch, WatchThread
from glm_operator.controller import metrics
from glm_operator.controller.event_handlers import EventHandlers
from glm_operator.gateway.objects import GATEWAY_APP_NAME
from glm_operator.render import names
from glm_operator.render.inference_pool import (
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_KIND,
    INFERENCE_POOL_PLURAL,
)
from glm_operator.render.monitoring import POD_MONITOR_CRD, POD_MONITOR_KIND, POD_MONITOR_PLURAL

MANAGED = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
MANAGED_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"

__all__ = ["MANAGED_SELECTOR", "WATCHES", "WatchThread", "registry", "settings"]


def _child(group: str, version: str, plural: str, kind: str) -> Watch[EventHandlers]:
    """A kind of child object: only the operator's own (labelled), filtered by the apiserver."""
    api_version = f"{group}/{version}" if group else version

    def sink(h: EventHandlers) -> Sink:
        return lambda event_type, obj: h.on_child(api_version, kind, event_type, obj)

    return Watch(group, version, plural, sink, labels=MANAGED, server_selector=MANAGED_SELECTOR)


WATCHES: tuple[Watch[EventHandlers], ...] = (
    Watch(GROUP, VERSION, PLURAL, lambda h: h.on_glmdeployment),
    Watch("", "v1", "nodes", lambda h: h.on_node),
    Watch("", "v1", "pods", lambda h: h.on_pod),  # every pod: the GPUs other workloads hold
    Watch("", "v1", "namespaces", lambda h: h.on_namespace),
    _child("apps", "v1", "deployments", "Deployment"),
    _child("", "v1", "services", "Service"),
    _child("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    _child("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    _child("monitoring.coreos.com", "v1", POD_MONITOR_PLURAL, POD_MONITOR_KIND),
    # spec.inferencePool: the InferencePool and its endpoint picker's ServiceAccount and RBAC (its
    # Deployment and Service come with the rows above), to prune them when turned off
    _child(INFERENCE_POOL_GROUP, "v1", INFERENCE_POOL_PLURAL, INFERENCE_POOL_KIND),
    _child("", "v1", "serviceaccounts", "ServiceAccount"),
    _child("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    _child("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    # the recorded load test of a GLMDeployment (glm-operator loadtest --record): an input of its plan
    _child("", "v1", "configmaps", "ConfigMap"),
    Watch("karpenter.sh", "v1", "nodepools", lambda h: h.on_nodepool),
    Watch(GROUP, VERSION, GATEWAY_PLURAL, lambda h: h.on_gateway),
    Watch(
        "apps",
        "v1",
        "deployments",
        lambda h: h.on_gateway_deployment,
        labels={names.LABEL_NAME: GATEWAY_APP_NAME},
        server_selector=MANAGED_SELECTOR,
    ),
    Watch(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", lambda h: h.on_crd, name=POD_MONITOR_CRD
    ),
)


def settings() -> Settings:
    return watch_layer.settings(WATCHES)


def registry(handlers: EventHandlers, loop: asyncio.AbstractEventLoop) -> Registry:
    """One ``on.event`` handler per row of ``WATCHES``; each passes its event to ``loop``."""

    def count(watch: Watch[Any]) -> None:
        metrics.WATCH_EVENTS.labels(resource=watch.plural).inc()

    return watch_layer.registry(WATCHES, handlers, watch_layer.on_loop(loop), on_event=count)
