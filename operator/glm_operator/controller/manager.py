"""The manager: builds the operator's components with their dependencies, starts and stops them.

Components (each in its own module, each given only what it uses):

- ``ClusterCache`` / ``NodePoolCache``: what the watches saw (nodes, GPU usage, GLMDeployments and
  their children and pods; Karpenter NodePools);
- ``EventHandlers`` fed by ``WatchThread`` (kopf, ``watches.WATCHES``): update the caches, enqueue;
- ``GLMDeploymentReconciler`` on its ``WorkQueue``, with an ``Applier`` and an ``EventRecorder``;
- ``GatewayReconciler`` on a work queue of its own, with an ``Applier`` of its own and the
  ``EventRecorder``;
- ``Autoscaler`` (when a Prometheus URL is configured), with its ``KVCacheReader``;
- ``ApiDiscovery`` (PodMonitor, LeaderWorkerSet APIs), ``Replanner`` (GPU supply changes);
- ``LeaderElector`` (a Lease, client-go's rules), built by ``glm-operator run`` with the API client
  whose writes it gates.

Every component gets what it uses in its constructor, and the one ``Clock``.

Lifecycle: list everything once into the caches (retried until the apiserver answers), start the
watches, then the leader election; the workers wait at the leadership gate. Becoming leader
forgets what an earlier term applied and queues every key. Losing the Lease cancels every
reconcile in flight and the process exits non-zero (as client-go's managers do); the Deployment
restarts it as a standby. On SIGTERM: stop the workers, give the Events in flight a moment, give
the Lease back, stop the watches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION, KIND
from glm_operator.clients.kube import KubeClient, summarize_api_error
from glm_operator.clients.prometheus import PrometheusQueueClient
from glm_operator.controller import metrics
from glm_operator.controller.applier import Applier
from glm_operator.controller.autoscaler import Autoscaler
from glm_operator.controller.cache import ClusterCache, OwnedObjects
from glm_operator.controller.clock import Clock, LoopClock
from glm_operator.controller.config import OperatorConfig, namespace_matches, plain_namespaces
from glm_operator.controller.discovery import ApiDiscovery
from glm_operator.controller.event_handlers import EventHandlers
from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.glmdeployment import GLMDeploymentReconciler
from glm_operator.controller.leader import LeaderElector
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.pages import PlanPages
from glm_operator.controller.recorder import EventRecorder
from glm_operator.controller.replan import Replanner
from glm_operator.controller.retry import retry_failed
from glm_operator.controller.watches import MANAGED_SELECTOR, WatchThread, registry, settings
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.planning.supply.pools import node_group_label_keys
from glm_operator.render.monitoring import POD_MONITOR_API_VERSION, POD_MONITOR_KIND
from glm_operator.render.objects import LWS_API_VERSION

log = logging.getLogger(__name__)

GATEWAY_WORKERS = 2
EVENT_FLUSH_SECONDS = 2.0  # at shut-down, Events in flight get this long while this replica leads
LOST_LEASE_EXIT_SECONDS = 20.0  # after the Lease is lost, the process exits within this, whatever hangs
# The start-up list is retried every half second while the apiserver is away (a refused connection
# costs nothing; a restarted apiserver answers 429 while its storage initialises, for about a second):
# a replica that restarted during an outage sees the changes made meanwhile soon after the return.
START_RETRY_SECONDS = 0.5
START_RETRY_LOG_EVERY = 60  # a failed start-up list is logged at warning once per this many tries (30 s)
CHILD_KINDS = (("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget"))


class Manager:
    def __init__(
        self,
        config: OperatorConfig,
        api: KubeClient,
        elector: LeaderElector | None = None,
        clock: Clock | None = None,
        liveness_endpoint: str | None = None,
    ) -> None:
        """``api``: the operator's client (``glm-operator run`` gates its writes on ``elector``'s
        Lease and counts its requests); ``elector``: None without leader election (this replica
        writes); ``clock``: the one every component reads, the elector's too."""
        self.config = config
        self.api = api
        self.elector = elector
        self.clock = clock or LoopClock()
        self.liveness_endpoint = liveness_endpoint
        self._leading = asyncio.Event()
        self._stopping = asyncio.Event()
        self.exit_code = 0
        self._tasks: list[asyncio.Task[None]] = []

        self.cache = ClusterCache(node_group_label_keys(config.node_groups))
        self.nodepools = NodePoolCache()
        self.discovery = ApiDiscovery(
            api,
            config.pod_monitor,
            on_pod_monitors_change=self._pod_monitors_changed,
            load_pod_monitors=self._load_pod_monitors,
        )
        self.queue: WorkQueue[Key] = WorkQueue(self.clock, observe_wait=metrics.QUEUE_WAIT_SECONDS.observe)
        self.gateway_queue: WorkQueue[Key] = WorkQueue(self.clock)
        self.applier = Applier(
            api,
            self.cache.owned,
            on_companion_rejected=self.queue.add,
            on_companion_failed=self._companion_failed,
            on_pod_monitor_api_missing=self.discovery.pod_monitor_api_missing,
        )
        self.recorder = EventRecorder(api, hold=self.applier.after_workload_writes)
        self.autoscaler = self._autoscaler()
        self.gateway_children = OwnedObjects()  # the GLMGateways' children, as applied or watched
        self.gateway_applier = Applier(api, self.gateway_children, companion_lane=False)
        self.gateways = GatewayReconciler(
            api=api,
            queue=self.gateway_queue,
            children=self.gateway_children,
            applier=self.gateway_applier,
            recorder=self.recorder,
            clock=self.clock,
            image=config.gateway_sync_image,
            network_policy=config.gateway_network_policy,
            wake=self.autoscaler.wake if self.autoscaler is not None else None,  # a model at zero
        )
        self.pages = PlanPages()
        self.reconciler = GLMDeploymentReconciler(
            api=api,
            cache=self.cache,
            nodepools=self.nodepools,
            discovery=self.discovery,
            applier=self.applier,
            recorder=self.recorder,
            queue=self.queue,
            config=config,
            clock=self.clock,
            autoscaler=self.autoscaler,
            pages=self.pages,
        )
        self.replanner = Replanner(self.clock, self.replan_all)
        self.handlers = EventHandlers(
            cache=self.cache,
            nodepools=self.nodepools,
            queue=self.queue,
            gateways=self.gateways,
            replanner=self.replanner,
            discovery=self.discovery,
            namespaces=config.namespaces,
        )
        self.watches: WatchThread | None = None

    def _autoscaler(self) -> Autoscaler | None:
        """The built-in autoscaler, when a Prometheus URL is configured."""
        config = self.config
        if not config.prometheus_url:
            return None
        prometheus = PrometheusQueueClient(
            config.prometheus_url,
            waiting_query=config.waiting_query,
            running_query=config.running_query,
            kv_cache_query=config.kv_cache_query,
        )
        return Autoscaler(
            prometheus=prometheus,
            api=self.api,
            cache=self.cache,
            recorder=self.recorder,
            queue=self.queue,
            clock=self.clock,
            is_leader=self.is_leader,
        )

    # -- leadership ------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.may_write()

    async def wait_for_leadership(self) -> None:
        await self._leading.wait()

    def _started_leading(self) -> None:
        self.applier.forget()  # a peer may have led in between: send every child once
        self.gateway_applier.forget()
        metrics.LEADER.set(1)
        self._leading.set()
        self.queue.add_all(self.cache.owned.glmdeployments)
        self.gateway_queue.add_all(self.gateways.bodies)

    def _stopped_leading(self) -> None:
        """Lost the Lease: cancel every reconcile in flight, then exit non-zero."""
        metrics.LEADER.set(0)
        self._leading.clear()
        for task in [*self._tasks, *self.applier.stop()]:
            task.cancel()
        self.recorder.cancel()
        self.exit_code = 1
        self._stopping.set()
        backstop = threading.Timer(LOST_LEASE_EXIT_SECONDS, os._exit, args=(1,))
        backstop.daemon = True
        backstop.start()

    # -- what several components ask for -------------------------------------------------------
    def replan_all(self, why: str) -> None:
        keys = list(self.cache.owned.glmdeployments)
        log.info("re-planning %d GLMDeployments: GPU supply changed (%s)", len(keys), why)
        metrics.ENQUEUED.labels(cause="node").inc(len(keys))
        self.queue.add_all(keys)

    def _companion_failed(self, key: Key, exc: BaseException) -> None:
        retry_failed(self.queue, key, "companion apply", exc)

    def _pod_monitors_changed(self, served: bool) -> None:
        if not served:
            self.cache.owned.delete_children_of_kind(POD_MONITOR_KIND)  # deleted with their CRD
        self.queue.add_all(self.cache.owned.glmdeployments)

    async def _load_pod_monitors(self) -> None:
        await self._load(POD_MONITOR_API_VERSION, POD_MONITOR_KIND)

    # -- start-up ---------------------------------------------------------------------------------
    async def _list(self, api_version: str, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        """List in the watched namespaces only: per namespace when they are plain names (what a
        namespaced install's Roles allow), else cluster-wide, filtered by the patterns."""
        plain = plain_namespaces(self.config.namespaces)
        if plain is None:
            items = await asyncio.to_thread(self.api.list, api_version, kind, None, selector)
            return [
                i
                for i in items
                if namespace_matches(self.config.namespaces, str(i["metadata"].get("namespace")))
            ]
        lists = await asyncio.gather(
            *(asyncio.to_thread(self.api.list, api_version, kind, ns, selector) for ns in plain)
        )
        return [i for items in lists for i in items]

    async def _load(self, api_version: str, kind: str) -> None:
        for obj in await self._list(api_version, kind, MANAGED_SELECTOR):
            self.handlers.on_child(api_version, kind, "ADDED", obj)

    async def load_caches(self) -> None:
        """One list of everything the caches hold, before any reconcile: the workers start on a
        complete view (the watches then keep it current). In a namespaced install, pods (hence GPU
        usage) are listed in the watched namespaces only: GPUs held by pods elsewhere count as free."""
        await self.discovery.refresh()
        self.discovery.log_state()
        self.cache.replace_nodes(await asyncio.to_thread(self.api.list, "v1", "Node"))
        await asyncio.to_thread(self.nodepools.refresh, self.api)
        for pod in await self._list("v1", "Pod"):
            self.handlers.on_pod("ADDED", pod)
        for obj in await self._list(API_VERSION, KIND):
            self.handlers.on_glmdeployment("ADDED", {"apiVersion": API_VERSION, "kind": KIND, **obj})
        kinds = list(CHILD_KINDS)
        if self.discovery.lws_served:
            kinds.append((LWS_API_VERSION, "LeaderWorkerSet"))
        for api_version, kind in kinds:
            await self._load(api_version, kind)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Blocking apiserver calls run in threads (asyncio.to_thread): one per worker and then some.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(self.config.workers + 8, thread_name_prefix="api")
        )
        for attempt in itertools.count():  # the apiserver may be away while this replica (re)starts
            try:
                await self.load_caches()
                break
            except Exception as exc:
                level = logging.WARNING if attempt % START_RETRY_LOG_EVERY == 0 else logging.DEBUG
                log.log(
                    level,
                    "start-up list failed: %s; retrying every %g s",
                    summarize_api_error(exc).line(),
                    START_RETRY_SECONDS,
                )
                await asyncio.sleep(START_RETRY_SECONDS)
        # Plain namespace names (a namespaced install, whose Roles allow nothing else): one watch
        # per namespace and resource. Patterns: one cluster-wide watch per resource, filtered here
        # (EventHandlers.watches_namespace), as the start-up list is; kopf would open one stream per
        # matching namespace and resource (80 for 10 namespaces, each with its own TLS buffers).
        watched = tuple(plain_namespaces(self.config.namespaces) or ())
        self.watches = WatchThread(
            registry(self.handlers, loop),
            watched,
            self.liveness_endpoint,
            settings,
            metrics.WATCH_RESTARTS.inc,
        )
        self.watches.start()
        log.info(
            "started: %d nodes, %d GLMDeployments in the caches; watching%s",
            len(self.cache.nodes),
            len(self.cache.owned.glmdeployments),
            "; waiting for the Lease" if self.elector is not None else "",
        )
        self.applier.start()
        self._spawn(self.queue.run_worker, self.reconciler.reconcile, self.config.workers, "worker")
        self._spawn(self.gateway_queue.run_worker, self.gateways.reconcile, GATEWAY_WORKERS, "gateway-worker")
        self._tasks.append(asyncio.create_task(self._resync(), name="resync"))
        if self.autoscaler is not None:
            self._tasks.append(asyncio.create_task(self.autoscaler.run(), name="autoscaler"))
        if self.elector is None:
            self._started_leading()
        else:

            def started() -> None:
                loop.call_soon_threadsafe(self._started_leading)

            def stopped() -> None:
                loop.call_soon_threadsafe(self._stopped_leading)

            self.elector.start(started, stopped)

    def _spawn(
        self,
        run_worker: Callable[..., Coroutine[Any, Any, None]],
        handle: Callable[[Key], Awaitable[None]],
        count: int,
        name: str,
    ) -> None:
        for i in range(count):
            self._tasks.append(
                asyncio.create_task(run_worker(handle, self.wait_for_leadership), name=f"{name}-{i}")
            )

    async def _resync(self) -> None:
        """Every ``resync_seconds``: forget what was applied and queue every GLMDeployment and
        GLMGateway, so each child is applied once more (drift no watch event shows, a label edited
        by hand, is repaired within one period), and ask API discovery again (a missed CRD event)."""
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            self.applier.forget()
            self.gateway_applier.forget()
            try:
                await self.discovery.refresh()
            except Exception as exc:
                log.warning("API discovery failed: %s", summarize_api_error(exc).line())
            keys = list(self.cache.owned.glmdeployments)
            metrics.ENQUEUED.labels(cause="resync").inc(len(keys))
            self.queue.add_all(keys)
            self.gateway_queue.add_all(self.gateways.bodies)

    # -- shut-down --------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Stop the workers, give the Events in flight EVENT_FLUSH_SECONDS, give the Lease back,
        stop the watches; nothing is left running."""
        for task in self._tasks:
            task.cancel()
        pending = [t for t in (self.discovery.stop(),) if t is not None] + self.applier.stop()
        await asyncio.gather(*self._tasks, *pending, return_exceptions=True)
        self._tasks.clear()
        self.reconciler.stop()
        await self.recorder.flush(EVENT_FLUSH_SECONDS if self.exit_code == 0 else 0.0)
        if self.elector is not None:
            await asyncio.to_thread(self.elector.release)  # stops the election thread, then releases
        if self.watches is not None:
            await asyncio.to_thread(self.watches.stop)

    async def run(self) -> int:
        """Start, run until SIGTERM/SIGINT or a lost Lease, stop; the process's exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        starting = asyncio.create_task(self.start())
        stopping = asyncio.create_task(self._stopping.wait())
        done, _ = await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting in done:
            starting.result()
            await stopping
        else:
            starting.cancel()
        log.info("stopping (%s)", "lost the Lease" if self.exit_code else "signal")
        await self.stop()
        return self.exit_code
