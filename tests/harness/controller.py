"""The operator's components wired for unit tests: real caches, queues and handlers, a manual
clock, and no apiserver (components that would call one get ``api=None`` and are not asked to)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from glm_operator.controller.applier import Applier
from glm_operator.controller.cache import ClusterCache, OwnedObjects
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.discovery import ApiDiscovery
from glm_operator.controller.event_handlers import EventHandlers
from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.replan import Replanner
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.gateway.network_policy import NetworkPolicySettings
from tests.harness.clock import ManualClock


@dataclass
class Wired:
    handlers: EventHandlers
    cache: ClusterCache
    queue: WorkQueue[Key]
    gateway_queue: WorkQueue[Key]
    gateways: GatewayReconciler
    replanned: list[str]
    clock: ManualClock

    def queued(self) -> list[Key]:
        """The keys a worker would take once the routine delay of child and pod events is over,
        in order, each marked done."""
        from glm_operator.controller.event_handlers import ROUTINE_DELAY

        self.clock.advance(ROUTINE_DELAY)
        return drain(self.queue)


def drain(queue: WorkQueue[Key]) -> list[Key]:
    """The keys a worker would take from ``queue`` now, in order, each marked done."""

    async def take() -> list[Key]:
        keys = []
        while len(queue):
            key = await queue.get()
            keys.append(key)
            queue.done(key)
        return keys

    return asyncio.run(take())


def gateway_reconciler(
    api: Any,
    queue: WorkQueue[Key] | None = None,
    clock: ManualClock | None = None,
    network_policy: NetworkPolicySettings | None = None,
    wake: Callable[[Key, float], bool] | None = None,
) -> GatewayReconciler:
    """A ``GatewayReconciler`` wired as the manager wires it, around ``api``."""
    clock = clock or ManualClock()
    children = OwnedObjects()
    return GatewayReconciler(
        api=api,
        queue=queue if queue is not None else WorkQueue(clock),
        children=children,
        applier=Applier(api, children, companion_lane=False),
        recorder=EventRecorder(api),
        clock=clock,
        image="glm-operator:test",
        network_policy=network_policy or NetworkPolicySettings(),
        wake=wake,
    )


def reconcile_gateway(gateways: GatewayReconciler, key: Key) -> None:
    """One reconcile of a GLMGateway, then its Events posted, on a loop of its own."""

    async def run() -> None:
        await gateways.reconcile(key)
        await gateways.recorder.flush(5.0)

    asyncio.run(run())


def wired(config: OperatorConfig | None = None, api: Any = None) -> Wired:
    config = config or OperatorConfig(leader_election=False)
    clock = ManualClock()
    cache = ClusterCache()
    queue: WorkQueue[Key] = WorkQueue(clock)
    gateway_queue: WorkQueue[Key] = WorkQueue(clock)
    gateways = gateway_reconciler(api, gateway_queue, clock)
    replanned: list[str] = []
    handlers = EventHandlers(
        cache=cache,
        nodepools=NodePoolCache(),
        queue=queue,
        gateways=gateways,
        replanner=Replanner(clock, replanned.append),
        discovery=ApiDiscovery(api, config.pod_monitor),
        namespaces=config.namespaces,
    )
    return Wired(handlers, cache, queue, gateway_queue, gateways, replanned, clock)


@dataclass
class Reconciling:
    """A GLMDeployment reconciler with real components around a ``FakeApi``."""

    reconciler: Any  # GLMDeploymentReconciler
    wired: Wired
    api: Any  # FakeApi
    applier: Any  # Applier

    def reconcile(self, key: Key) -> None:
        """One reconcile, then what it queued in the companion lane, on a loop of its own."""

        async def run() -> None:
            self.applier.start()
            try:
                await self.reconciler.reconcile(key)
                await self.applier.idle()
                await self.reconciler.recorder.flush(5.0)
            finally:
                writers = self.applier.stop()
                await asyncio.gather(*writers, return_exceptions=True)

        asyncio.run(run())


def reconciling(
    api: Any,
    config: OperatorConfig | None = None,
    nodes: list[dict[str, Any]] | None = None,
    pages: Any = None,
) -> Reconciling:
    from glm_operator.controller.glmdeployment import GLMDeploymentReconciler

    config = config or OperatorConfig(leader_election=False)
    w = wired(config, api)
    w.handlers.discovery.lws_served = True
    if nodes is not None:
        w.cache.replace_nodes(nodes)
    applier = Applier(
        api,
        w.cache.owned,
        on_companion_rejected=w.queue.add,
        on_pod_monitor_api_missing=w.handlers.discovery.pod_monitor_api_missing,
    )
    reconciler = GLMDeploymentReconciler(
        api=api,
        cache=w.cache,
        nodepools=w.handlers.nodepools,
        discovery=w.handlers.discovery,
        applier=applier,
        recorder=EventRecorder(api),
        queue=w.queue,
        config=config,
        clock=w.clock,
        pages=pages,
    )
    return Reconciling(reconciler, w, api, applier)
