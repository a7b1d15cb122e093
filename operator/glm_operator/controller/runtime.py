"""The running operator: caches, work queue, workers, leader election, periodic resync.

kopf delivers watch events to the thin handlers in ``glm_operator.handlers``; they update the
caches and enqueue GLMDeployment keys. Workers (only on the leader) run one level-based
``reconcile`` per key, reading the GLMDeployment from the watch-fed cache so every reconcile
works from the latest state seen, never from the event that woke it. The status write that ends
a reconcile runs as a work-queue tail (at most ``workers`` at once): the worker takes the next
key meanwhile, the key itself waits for it. Lost leadership cancels the workers and the tails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fnmatch
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from glm_operator.clients.kube import API_VERSION, KubeClient, NotLeader, summarize_api_error
from glm_operator.controller import memory, metrics, timeline
from glm_operator.controller.cache import ClusterCache, is_known, spec_planned
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.desired import WORKLOAD_KIND_NAMES
from glm_operator.controller.gateway import GatewayController
from glm_operator.controller.leader import LeaderElector
from glm_operator.controller.memory import QuietTrimmer
from glm_operator.controller.nodepools import NodePoolCache
from glm_operator.controller.planning_pool import PlanningPool
from glm_operator.controller.pod_monitors import pod_monitor_wanted
from glm_operator.controller.predicates import child_version
from glm_operator.controller.workqueue import Key, Tail, WorkQueue
from glm_operator.planning.pools import node_group_label_keys
from glm_operator.render import names
from glm_operator.render.monitoring import (
    POD_MONITOR_API_VERSION,
    POD_MONITOR_CRD,
    POD_MONITOR_KIND,
    POD_MONITOR_PLURAL,
)

log = logging.getLogger(__name__)
GATEWAY_WORKERS = 2

EVENT_SENDERS = 4  # Event posts in flight at once
REPLAN_MIN_INTERVAL = 5.0  # seconds between two node-driven re-plans of every GLMDeployment
RESYNC_SHARE = 4  # a resync keeps at most workers / RESYNC_SHARE of its keys queued or in flight
COMPANION_LANE_THREADS = 4  # Service, PDB and PodMonitor applies in flight at once (the apiserver
# allocates a Service's ClusterIP under a lock; nothing uses these objects before a pod is Ready)
# At shut-down, Events in flight get this long to be posted while this replica still leads.
EVENT_FLUSH_SECONDS = 2.0
COMPANION_HOLD_SECONDS = 30.0  # longest a companion apply waits for the workload writes in flight


def crd_serves(crd: dict[str, Any], api_version: str) -> bool:
    """Whether a CustomResourceDefinition object says it serves ``api_version`` (Established)."""
    group = (crd.get("spec") or {}).get("group")
    versions = {str(v.get("name")) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")}
    conditions = (crd.get("status") or {}).get("conditions") or []
    established = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
    return established and any(f"{group}/{v}" == api_version for v in versions)


def _outcome_seen(apply: asyncio.Future[Any]) -> None:
    """Mark an apply's failure as seen. The reconcile that started it, or ``track_pending_apply``
    for one that outlives it, reads the outcome; one whose reconcile was cancelled (the operator
    stopping, the Lease lost) fails with ``NotLeader`` and would be logged at garbage collection
    as an "exception never retrieved" traceback."""
    if not apply.cancelled():
        apply.exception()


async def _cancel_and_wait(tasks: list[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended, whatever it ended with."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def owner_key(obj: dict[str, Any]) -> Key | None:
    """The GLMDeployment a child object or pod belongs to, from our labels."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
        return None
    owner = labels.get(names.LABEL_DEPLOYMENT)
    ns = meta.get("namespace")
    return (str(ns), str(owner)) if owner and ns else None


class Operator:
    def __init__(
        self, config: OperatorConfig, api: KubeClient, election_api: KubeClient | None = None
    ) -> None:
        """``election_api`` is the Lease's own client (own connection pool, short timeouts)."""
        self.config = config
        self.api = api
        if api is not None:
            api.on_request = metrics.count_api_request
        self.cache = ClusterCache(node_group_label_keys(config.node_groups))
        # Status writes run as tails, off the workers, at most one per worker at once; they wait
        # while workload writes are on the wire (see hold_status_write).
        self.queue = WorkQueue(max_tails=config.workers, hold_tails=self.hold_status_write)
        self.queue.observe_wait = metrics.observe_queue_wait
        self.elector: LeaderElector | None = None
        if config.leader_election:
            self.elector = LeaderElector(
                election_api or KubeClient(api.api, timeout=4.0),
                config.lease_namespace,
                config.lease_name,
                config.identity,
            )
            api.may_write = self.elector.may_write  # no write leaves a replica that does not lead
        # compute_desired runs here, off the event loop, new specs first (see reconcile.plan and
        # controller.planning_pool); keys whose planning overran its time bound and still
        # occupies a thread
        self.planning_pool = PlanningPool()
        self.slow_plans: set[Key] = set()
        self._leading = asyncio.Event()
        self.stop_flag = asyncio.Event()  # set to make kopf shut the operator down
        self.exit_code = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._replan_pending = False
        self._last_replan = float("-inf")  # loop time of the last re-plan of every GLMDeployment
        # (namespace, kind, name) -> (digest of the object last applied, the version the apply
        # returned); see reconcile
        self.applied: dict[tuple[str, str, str], tuple[str, str]] = {}
        # applies that outlived their reconcile (see reconcile.execute): memo key -> the request
        self.pending_applies: dict[tuple[str, str, str], asyncio.Future[Any]] = {}
        self.max_pending_applies = config.workers
        # Routine reconciles (a resync's re-applies, re-plans) wait for their own workloads at a
        # lower mark: the rest is reserved for new specs, whose first applies start serving.
        self.routine_pending_applies = max(1, self.max_pending_applies - self.max_pending_applies // 4)
        self._executor = self._new_executor()  # the loop's default executor, from start()
        self.companion_lane = concurrent.futures.ThreadPoolExecutor(
            max_workers=COMPANION_LANE_THREADS, thread_name_prefix="companion-apply"
        )
        # workload creates/applies on the wire; the companions wait while there are any
        self._workload_writes = 0
        self._workload_writes_idle = asyncio.Event()
        self._workload_writes_idle.set()
        self._held_companions: set[asyncio.Future[Any]] = set()
        self.autoscaler: Any = None  # glm_operator.controller.autoscaling.Autoscaler when enabled
        self.lws_available = False  # LeaderWorkerSet CRD installed (multi-node variants)
        self.nodepools = NodePoolCache()  # Karpenter NodePools: capacity node autoscalers can add
        # Events are posted in the background (as client-go's event recorder does): a reconcile
        # does not wait for them, at most EVENT_SENDERS are in flight.
        self._event_slots = asyncio.Semaphore(EVENT_SENDERS)
        self._event_tasks: set[asyncio.Task[None]] = set()
        self.gateways = GatewayController()  # GLMGateways: their own queue, the same backoff
        self.pod_monitors_served = False  # the prometheus-operator's PodMonitor API (discovery)
        self._pod_monitor_check: asyncio.Task[None] | None = None

    def _new_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(
            max_workers=max(8, 3 * self.config.workers) + self.max_pending_applies, thread_name_prefix="api"
        )

    async def release_idle(self) -> None:
        """Once a burst is over and the queue quiet (``memory.QuietTrimmer``): let go of what the
        burst grew and the quiet does not use, then trim the heap. A thread pool never shrinks,
        and urllib3 keeps every connection it opened: 200 GLMDeployments at once leave about 90
        threads and 80 idle apiserver connections. The loop gets a fresh default executor; the
        old one's threads finish what they run and exit (their stacks go back to the OS); the
        pooled idle connections are closed (one in use is closed when it returns). The next
        burst opens what it needs again."""
        old, self._executor = self._executor, self._new_executor()
        asyncio.get_running_loop().set_default_executor(self._executor)
        before = threading.active_count()
        await asyncio.to_thread(old.shutdown, wait=True)
        self.api.close_idle_connections()
        log.debug("idle: threads %d -> %d, pooled connections closed", before, threading.active_count())
        await memory.trim_in_thread()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        # Blocking apiserver calls run in threads (asyncio.to_thread): size the pool to the
        # workers, or reconciles queue for a thread (the default pool is cores + 4).
        asyncio.get_running_loop().set_default_executor(self._executor)
        from glm_operator.controller.reconcile import warm_up_planner

        # While the caches fill: the first reconciles then plan in milliseconds, not seconds.
        self.planning_pool.submit(warm_up_planner, self.config.default_image)
        while True:  # the apiserver may be away while this replica (re)starts
            try:
                await self.refresh_cluster_view()
                break
            except Exception as exc:
                log.warning("start-up list failed: %s; retrying in 1 s", summarize_api_error(exc).line())
                await asyncio.sleep(1.0)
        if self.elector is not None:
            loop = asyncio.get_running_loop()

            def started() -> None:
                loop.call_soon_threadsafe(self._started_leading)

            def stopped() -> None:
                loop.call_soon_threadsafe(self._stopped_leading)

            self.elector.start(started, stopped)
        else:
            self._started_leading()
        for i in range(self.config.workers):
            self._tasks.append(
                asyncio.create_task(
                    self.queue.run_worker(self.reconcile_key, self.wait_for_leadership), name=f"worker-{i}"
                )
            )
        for i in range(GATEWAY_WORKERS):
            self._tasks.append(
                asyncio.create_task(
                    self.gateways.queue.run_worker(self.reconcile_gateway_key, self.wait_for_leadership),
                    name=f"gateway-worker-{i}",
                )
            )
        self._tasks.append(asyncio.create_task(self._resync_loop(), name="resync"))
        trimmer = QuietTrimmer(
            quiet=self.queue.quiet, work_done=lambda: self.queue.taken, release=self.release_idle
        )
        self._tasks.append(asyncio.create_task(trimmer.run(), name="memory-trim"))
        if self.autoscaler is not None:
            self._tasks.append(asyncio.create_task(self.autoscaler.run(), name="autoscaler"))

    async def stop(self) -> None:
        """The cleanup on SIGTERM: cancel the workers and status tails, give the Events in flight
        EVENT_FLUSH_SECONDS, give the Lease back, and leave no task running (kopf would wait
        5 s for any, see below)."""
        if self._pod_monitor_check is not None:
            self._pod_monitor_check.cancel()
        await _cancel_and_wait([*self._tasks, *self.queue.cancel_tails()])
        self._tasks.clear()
        self.planning_pool.shutdown()
        # A companion apply still held is not sent: the next leader's first reconcile applies it.
        for held in list(self._held_companions):
            held.cancel()
        if self._event_tasks:
            await asyncio.wait(set(self._event_tasks), timeout=EVENT_FLUSH_SECONDS)
        await _cancel_and_wait([*self._event_tasks, *self._held_companions])
        try:
            if self.elector is not None:
                await asyncio.to_thread(self.elector.release)
                await asyncio.to_thread(self.elector.stop)
        finally:
            # kopf waits on this flag in a task of its own, which it leaves running when a
            # signal stops the operator, then waits 5 s for that "hung" task before cancelling
            # it. Set, the task ends, and a SIGTERM ends the process once this cleanup is done.
            self.stop_flag.set()

    def _started_leading(self) -> None:
        # Forget what an earlier term applied: a peer may have led in between.
        self.applied.clear()
        self._leading.set()
        self.queue.add_all()
        self.gateways.queue.add_all()

    def _stopped_leading(self) -> None:
        """Lost the Lease: cancel every in-flight reconcile, then exit non-zero (as client-go's
        managers do); the Deployment restarts this replica, which comes back as a standby."""
        self._leading.clear()
        for task in self._tasks:
            task.cancel()
        self.queue.cancel_tails()  # status writes in flight: nothing may be written from now on
        for event_task in list(self._event_tasks):
            event_task.cancel()
        self.exit_code = 1
        self.stop_flag.set()
        # kopf shuts down gracefully; if anything hangs, leave anyway.
        backstop = threading.Timer(20.0, os._exit, args=(1,))
        backstop.daemon = True
        backstop.start()

    # -- watch events (called by the kopf handlers, on the event loop) ------------------------
    def on_glmdeployment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if not self.watches_namespace(key[0]):
            return
        if event_type == "DELETED":
            self._forget_glmdeployment(key)
            return
        if is_known(obj, self.cache.owned.glmdeployments.get(key)):
            return  # the echo of this process's own status write: nothing to reconcile
        self.cache.owned.set_glmdeployment(obj)
        urgent = not spec_planned(obj)
        if urgent:
            timeline.stamp(key, "handler")
        metrics.ENQUEUED.labels(cause="spec" if urgent else "glmdeployment").inc()
        self.queue.add(key, urgent=urgent)  # a spec not planned yet goes first

    def _forget_glmdeployment(self, key: Key) -> None:
        self.cache.owned.delete_glmdeployment(key)
        self.queue.forget(key)
        metrics.forget(*key)  # its per-object series (a reconcile may never run for it again)

    def _forget_applied(self, namespace: str) -> None:
        """Drop the applied digests of ``namespace``'s children: the next apply is sent."""
        for memo_key in [k for k in self.applied if k[0] == namespace]:
            del self.applied[memo_key]

    def on_namespace(self, event_type: str | None, obj: dict[str, Any]) -> None:
        """A namespace being deleted takes its GLMDeployments, children and pods with it. kopf
        stops a namespace pattern's watch streams in it as soon as the namespace controller
        reports on its deletion, before those objects' DELETED events: without this, they stayed
        in the caches for good, the GLMDeployments were reconciled (404) at every resync and
        re-plan, and the pods held their GPUs in every plan. Its objects are forgotten once, and
        their later events ignored, until the namespace is gone (or made again)."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("name", ""))
        if event_type != "DELETED" and not meta.get("deletionTimestamp"):
            self.cache.owned.reopen(namespace)  # made again under the same name
            return
        if event_type != "DELETED" and namespace in self.cache.owned.terminating:
            return  # forgotten already
        keys = self.cache.forget_namespace(namespace)
        self.gateways.forget_namespace(namespace)
        if event_type == "DELETED":
            self.cache.owned.reopen(namespace)
        for key in keys:
            self._forget_glmdeployment(key)
        self._forget_applied(namespace)
        if keys:
            log.info("namespace %s is being deleted: %d GLMDeployments forgotten", namespace, len(keys))

    def on_node(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        changed = self.cache.delete_node(name) if event_type == "DELETED" else self.cache.set_node(obj)
        if changed:
            self.replan_all_soon()  # GPU supply changed: every GLMDeployment re-plans (debounced)

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if event_type == "DELETED":
            self.cache.delete_pod(uid)
        else:
            self.cache.set_pod(obj, key)
        if key is not None and self.watches_namespace(key[0]):
            if event_type == "DELETED":
                self.cache.owned.delete_pod(key, uid)
            else:
                self.cache.owned.set_pod(key, obj)
            metrics.ENQUEUED.labels(cause="pod").inc()
            self.queue.add_soon(key)

    def on_child(self, event_type: str | None, obj: dict[str, Any], api_version: str, kind: str) -> None:
        key = owner_key(obj)
        if key is None or not self.watches_namespace(key[0]):
            return
        obj = {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}
        name = str(obj["metadata"].get("name"))
        if event_type == "DELETED":
            self.cache.owned.delete_child(key, api_version, kind, name)
        elif is_known(obj, self.cache.owned.child(key, api_version, kind, name)):
            return  # the echo of this process's own apply
        else:
            self.cache.owned.set_child(key, obj)
            if not self.cache.owned.changed_since_read(key, obj):
                # nothing a reconcile reads changed (controller.predicates): a status field such
                # as availableReplicas or a condition, a PodDisruptionBudget's counters
                metrics.FILTERED.labels(kind=kind).inc()
                return
        metrics.ENQUEUED.labels(cause="child").inc()
        self.queue.add_soon(key)

    def on_crd(self, event_type: str | None, obj: dict[str, Any]) -> None:
        """The PodMonitor CRD was created, changed (e.g. became Established) or deleted: ask API
        discovery again (the answer is cached until the next event or resync)."""
        if str((obj.get("metadata") or {}).get("name")) != POD_MONITOR_CRD:
            return
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted: discovery still lists it until it is gone, but the apiserver refuses
            # new objects and deletes the existing ones. Stop applying now; DELETED follows.
            self.pod_monitor_api_missing()
            return
        self._recheck_pod_monitor_api_soon(
            event_type != "DELETED" and crd_serves(obj, POD_MONITOR_API_VERSION)
        )

    def pod_monitor_api_missing(self) -> None:
        """The PodMonitor API is going or gone (its CRD is being deleted, or an apply was refused
        for that reason): stop applying PodMonitors until a CRD event or the resync finds it again."""
        if self.pod_monitors_served:
            self._set_pod_monitors_served(False)

    def _recheck_pod_monitor_api_soon(self, expected: bool) -> None:
        previous = self._pod_monitor_check

        async def check() -> None:
            if previous is not None and not previous.done():  # it may have read discovery before this event
                previous.cancel()
                with contextlib.suppress(BaseException):
                    await previous
            await self._recheck_pod_monitor_api(expected)

        self._pod_monitor_check = asyncio.create_task(check())

    async def _recheck_pod_monitor_api(self, expected: bool, attempts: int = 8) -> None:
        """``refresh_pod_monitor_api`` until discovery agrees with what the CRD's own status says,
        with backoff (0.5 s doubling, ~1 min in all): discovery lags the CRD's Established
        condition, and a CRD created a moment ago answers 429 "storage is (re)initializing"; no
        further event would come. Past that the resync asks again."""
        delay = 0.5
        for _ in range(attempts):
            try:
                if await self.refresh_pod_monitor_api() == expected:
                    return
            except Exception as exc:
                log.warning("PodMonitor API discovery failed: %s", summarize_api_error(exc).line())
            await asyncio.sleep(delay)
            delay *= 2

    async def refresh_pod_monitor_api(self) -> bool:
        """Ask discovery whether PodMonitors are served; on a change, (un)load them into the cache
        and re-plan every GLMDeployment (each then creates or stops expecting its PodMonitor).
        Returns what discovery said."""
        served = await asyncio.to_thread(
            self.api.serves_resource, POD_MONITOR_API_VERSION, POD_MONITOR_PLURAL
        )
        if served == self.pod_monitors_served:
            return served
        if served:
            selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
            for obj in await self._list(POD_MONITOR_API_VERSION, POD_MONITOR_KIND, selector):
                self.on_child("ADDED", obj, POD_MONITOR_API_VERSION, POD_MONITOR_KIND)
        self._set_pod_monitors_served(served)
        return served

    def _set_pod_monitors_served(self, served: bool) -> None:
        log.info(
            "PodMonitor API %s %s (--pod-monitor=%s)",
            POD_MONITOR_API_VERSION,
            "found" if served else "gone",
            self.config.pod_monitor,
        )
        if not served:
            self.cache.owned.delete_children_of_kind(POD_MONITOR_KIND)  # deleted with their CRD
        self.pod_monitors_served = served
        self.queue.add_all(self.cache.owned.glmdeployments)

    @property
    def pod_monitor_wanted(self) -> bool:
        return pod_monitor_wanted(self.config.pod_monitor, self.pod_monitors_served)

    def replan_all_soon(self, delay: float = 1.0) -> None:
        """Re-plan every GLMDeployment once, ``delay`` after the first of a burst of node changes,
        and at most once per REPLAN_MIN_INTERVAL while changes keep coming (nodes registering or
        being labelled one after another re-plan every GLMDeployment a few times, not per node)."""
        if self._replan_pending:
            return
        self._replan_pending = True
        loop = asyncio.get_running_loop()
        delay = max(delay, self._last_replan + REPLAN_MIN_INTERVAL - loop.time())

        def fire() -> None:
            self._replan_pending = False
            self._last_replan = loop.time()
            changes, self.cache.node_changes = self.cache.node_changes, {}
            log.info(
                "re-planning %d GLMDeployments: GPU supply changed (%s)",
                len(self.queue.known),
                ", ".join(f"{part} {n}" for part, n in sorted(changes.items())) or "node pools",
            )
            metrics.ENQUEUED.labels(cause="node").inc(len(self.queue.known))
            self.queue.add_all()

        loop.call_later(delay, fire)

    async def wait_for_leadership(self) -> None:
        await self._leading.wait()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.may_write()

    # -- applies that finish in the background -------------------------------------------------
    def submit_apply(self, obj: dict[str, Any], create: bool = False) -> asyncio.Future[Any]:
        """Start a server-side apply (``create``: a POST, see ``KubeClient.create_or_apply``);
        workloads in the shared pool, the GLMDeployment-wide companions (Service, PDB,
        PodMonitor) in their own lane (see reconcile.execute).

        A companion waits while workload writes are on the wire (at most
        COMPANION_HOLD_SECONDS): in a burst of new GLMDeployments the apiserver serves the
        workloads, which start the long path (scheduling, image pull, model load), before the
        Services, whose ClusterIP allocation is among its costliest writes and which nothing uses
        before a pod is Ready. Alone, a companion is not held."""
        loop = asyncio.get_running_loop()
        write: Callable[[Any], Any] = self.api.create_or_apply if create else self.api.apply
        future: asyncio.Future[Any]
        if obj.get("kind") not in WORKLOAD_KIND_NAMES:
            if self._workload_writes_idle.is_set():
                future = loop.run_in_executor(self.companion_lane, write, obj)
            else:
                future = asyncio.ensure_future(self._held_companion_apply(write, obj))
                self._held_companions.add(future)
                future.add_done_callback(self._held_companions.discard)
        else:
            if create and timeline.enabled():
                owner = owner_key(obj)
                if owner is not None:
                    write = timeline.timed_write(owner, write)
            future = loop.run_in_executor(None, write, obj)
            self._workload_writes += 1
            self._workload_writes_idle.clear()
            future.add_done_callback(self._workload_write_done)
        future.add_done_callback(_outcome_seen)
        return future

    def _workload_write_done(self, _: asyncio.Future[Any]) -> None:
        self._workload_writes -= 1
        if self._workload_writes == 0:
            self._workload_writes_idle.set()

    def was_held(self, apply: asyncio.Future[Any]) -> bool:
        """``apply`` (from ``submit_apply``) is a companion that was held behind the workload
        writes on the wire: a reconcile does not wait for it (it would only spend its budget)."""
        return apply in self._held_companions

    async def _after_workload_writes(self) -> None:
        """Return once no workload write is on the wire, or after COMPANION_HOLD_SECONDS."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._workload_writes_idle.wait(), COMPANION_HOLD_SECONDS)

    def hold_status_write(self) -> Awaitable[None] | None:
        """What a reconcile's status write (its work-queue tail) waits for: like the companions,
        the workload writes on the wire (COMPANION_HOLD_SECONDS at most), None when there are
        none. A GLMDeployment status patch is among the apiserver's costliest writes in a burst
        (a custom resource: JSON, schema, managed fields); bench run 71 held them and the
        Deployment POSTs took 229 ms on the server instead of 330-396. Held, a tail gives its
        slot back (``workqueue``), so the workers go on; a spec change ends the hold."""
        if self._workload_writes_idle.is_set():
            return None
        return self._after_workload_writes()

    async def _held_companion_apply(self, write: Callable[[Any], Any], obj: dict[str, Any]) -> Any:
        await self._after_workload_writes()
        return await asyncio.get_running_loop().run_in_executor(self.companion_lane, write, obj)

    def pending_workload_applies(self) -> int:
        """Background workload applies (they hold a thread of the shared pool; the companions
        wait in their own lane and are bounded by its threads)."""
        return sum(1 for (_, kind, _) in self.pending_applies if kind in WORKLOAD_KIND_NAMES)

    def track_pending_apply(
        self,
        key: Key,
        memo_key: tuple[str, str, str],
        digest: str,
        task: asyncio.Future[Any],
        requeue: bool = True,
        requeue_if_changed: bool = False,
    ) -> None:
        """Record the result of an apply that outlived its reconcile, then reconcile ``key`` again
        if ``requeue``, or if ``requeue_if_changed`` and the result differs from what the last
        reconcile read (controller.predicates; a new workload that counts no replica yet reads as
        absent); a failure always, with backoff: the next reconcile sends it again and reports a
        rejection."""

        self.pending_applies[memo_key] = task

        def done(task: asyncio.Future[Any]) -> None:
            self.pending_applies.pop(memo_key, None)
            if task.cancelled():
                return
            exc = task.exception()
            if exc is not None:
                summary = summarize_api_error(exc)
                delay = self.queue.add_rate_limited(key, summary.retry_after)
                log.warning(
                    "apply %s %s/%s failed: %s; retry in %.2f s",
                    memo_key[1],
                    memo_key[0],
                    memo_key[2],
                    summary.line(),
                    delay,
                )
                return
            result = task.result()
            self.applied[memo_key] = (digest, child_version(result))
            self.cache.owned.set_child(key, result)
            if requeue or (
                requeue_if_changed and self.cache.owned.changed_since_read(key, result, absent_as_empty=True)
            ):
                metrics.ENQUEUED.labels(cause="apply").inc()
                self.queue.add(key)

        task.add_done_callback(done)

    # -- Events ------------------------------------------------------------------------------
    def post_events(self, body: dict[str, Any] | Any, events: list[Any]) -> None:
        """Post ``events`` (``desired.Event``) about ``body`` in order, without waiting; best
        effort: a failure is logged at info and never fails the reconcile. Like the companion
        applies, Events wait while workload writes are on the wire (COMPANION_HOLD_SECONDS at
        most): in a burst the apiserver serves the workloads first."""
        if not events:
            return
        task = asyncio.create_task(self._post_events(body, list(events)))
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def _post_events(self, body: Any, events: list[Any]) -> None:
        meta = body.get("metadata") or {}
        await self._after_workload_writes()
        async with self._event_slots:
            for event in events:
                try:
                    await asyncio.to_thread(
                        self.api.create_event,
                        body,
                        reason=event.reason,
                        message=event.message,
                        type_=event.type,
                    )
                except Exception as exc:
                    log.info(
                        "event %s on %s/%s not posted: %s",
                        event.reason,
                        meta.get("namespace"),
                        meta.get("name"),
                        summarize_api_error(exc).line(),
                    )

    # -- cluster view ------------------------------------------------------------------------
    def _plain_namespaces(self) -> list[str] | None:
        """The watched namespaces when all are plain names (namespaced install), else None."""
        if not self.config.namespaces:
            return None
        names_ = [n for pattern in self.config.namespaces for n in pattern.split(",")]
        if any(c in n for n in names_ for c in "*?[!"):
            return None
        return names_

    async def _list(self, api_version: str, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        """List in the watched namespaces only: per namespace when they are plain names (what a
        namespaced install's Roles allow), else cluster-wide, filtered by the patterns."""
        plain = self._plain_namespaces()
        if plain is None:
            items = await asyncio.to_thread(self.api.list, api_version, kind, None, selector)
            return [i for i in items if self.watches_namespace(str(i["metadata"].get("namespace")))]
        lists = await asyncio.gather(
            *(asyncio.to_thread(self.api.list, api_version, kind, ns, selector) for ns in plain)
        )
        return [i for items in lists for i in items]

    async def refresh_cluster_view(self) -> None:
        """One list of everything the caches hold, at start-up; watch events keep them current.

        In a namespaced install, Pods (hence GPU usage) are listed in the watched namespaces
        only: GPUs held by pods elsewhere are not seen, and the plan counts them as free.
        """
        self.lws_available = await asyncio.to_thread(self.api.api_available, "leaderworkerset.x-k8s.io/v1")
        self.pod_monitors_served = await asyncio.to_thread(
            self.api.serves_resource, POD_MONITOR_API_VERSION, POD_MONITOR_PLURAL
        )
        log.info(
            "PodMonitor API %s %s (--pod-monitor=%s)",
            POD_MONITOR_API_VERSION,
            "found" if self.pod_monitors_served else "not served",
            self.config.pod_monitor,
        )
        nodes = await asyncio.to_thread(self.api.list, "v1", "Node")
        self.cache.replace_nodes(nodes)
        await asyncio.to_thread(self.nodepools.refresh, self.api)
        for pod in await self._list("v1", "Pod"):
            self.on_pod("ADDED", pod)
        for obj in await self._list(API_VERSION, "GLMDeployment"):
            obj.setdefault("apiVersion", API_VERSION)
            obj.setdefault("kind", "GLMDeployment")
            self.on_glmdeployment("ADDED", obj)
        selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
        kinds = [("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget")]
        if self.lws_available:
            kinds.append(("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"))
        if self.pod_monitors_served:
            kinds.append((POD_MONITOR_API_VERSION, POD_MONITOR_KIND))
        for api_version, kind in kinds:
            for obj in await self._list(api_version, kind, selector):
                self.on_child("ADDED", obj, api_version, kind)

    def watches_namespace(self, namespace: str) -> bool:
        """kopf-style namespace patterns: globs, ``!`` negations, the rightmost match wins; never
        a namespace being deleted (``on_namespace``)."""
        if namespace in self.cache.owned.terminating:
            return False
        if not self.config.namespaces:
            return True
        matched = self.config.namespaces[0].startswith("!")
        for pattern in self.config.namespaces:
            for glob in pattern.split(","):
                negated = glob.startswith("!")
                if fnmatch.fnmatchcase(namespace, glob.lstrip("!")):
                    matched = not negated
        return matched

    async def _resync_loop(self) -> None:
        """Re-queue every GLMDeployment from the cache (no re-list: the watches keep it current)
        and forget the applied digests, so each child is applied once more: drift no watch
        event reveals (a label edited by hand) is repaired within one period. The keys go in a
        few at a time (a quarter of the workers): the rest stay free for events meanwhile."""
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            self.applied.clear()
            try:  # a missed CRD event (watch gap); one attempt, the next period tries again
                await self.refresh_pod_monitor_api()
            except Exception as exc:
                log.warning("PodMonitor API discovery failed: %s", summarize_api_error(exc).line())
            keys = list(self.cache.owned.glmdeployments)
            metrics.ENQUEUED.labels(cause="resync").inc(len(keys))
            await self.queue.add_paced(keys, max(1, self.config.workers // RESYNC_SHARE))

    # -- reconcile ---------------------------------------------------------------------------
    async def reconcile_key(self, key: Key) -> Tail | None:
        """One reconcile; a failure re-adds the key with backoff and logs one line (traceback at
        debug level), a success resets the key's backoff. A status write is returned as the
        tail (see ``workqueue``): it fails and succeeds the same way, off the worker."""
        from glm_operator.controller.reconcile import reconcile_children

        namespace, name = key
        timeline.stamp(key, "take")
        started = time.perf_counter()
        try:
            outcome = await reconcile_children(self, namespace, name)
        except Exception as exc:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            self._reconcile_failed(key, exc)
            return None
        if outcome is None:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            self.queue.forget(key)
            metrics.forget(namespace, name)
            self._forget_applied(namespace)  # its children are gone with it
            metrics.RECONCILES.labels(result="ok").inc()
            return None

        async def tail() -> None:
            try:
                await outcome.finish()
            except Exception as exc:
                self._reconcile_failed(key, exc)
                return
            finally:
                metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            self._reconciled(key, outcome.rejected)

        if outcome.status_changed:
            return tail
        await tail()  # nothing to wait for: Events are posted in the background
        return None

    def _reconcile_failed(self, key: Key, exc: Exception) -> None:
        if not isinstance(exc, NotLeader):
            metrics.RECONCILES.labels(result="error").inc()
        retry_failed(self.queue, key, "reconcile", exc)

    def _reconciled(self, key: Key, rejected: list[Any]) -> None:
        """A reconcile that ran to its end: rejected children are retried with backoff."""
        if rejected:
            metrics.RECONCILES.labels(result="error").inc()
            delay = self.queue.add_rate_limited(key)
            log.warning(
                "reconcile %s/%s: the apiserver rejected %s; Degraded/ChildRejected, retry in %.2f s",
                key[0],
                key[1],
                "; ".join(f"{r.kind} {r.name}: {r.error.line()}" for r in rejected)[:2000],
                delay,
            )
        else:
            self.queue.forget_failures(key)
            metrics.RECONCILES.labels(result="ok").inc()

    async def reconcile_gateway_key(self, key: Key) -> None:
        """Apply one GLMGateway; a failure is retried like a GLMDeployment's (backoff, one line)."""
        try:
            applied = await asyncio.to_thread(self.gateways.apply, self.api, key)
        except Exception as exc:
            retry_failed(self.gateways.queue, key, "GLMGateway", exc)
            return
        if applied is None:
            self.gateways.queue.forget(key)
        else:
            self.gateways.queue.forget_failures(key)


def retry_failed(queue: WorkQueue, key: Key, what: str, exc: Exception) -> None:
    """Re-add a failed key after its backoff (no earlier than a 429's ``Retry-After``); one log
    line per failure, the traceback at debug level."""
    if isinstance(exc, NotLeader):
        queue.add_rate_limited(key)  # waits at the leadership gate (or the process exits)
        return
    summary = summarize_api_error(exc)
    delay = queue.add_rate_limited(key, summary.retry_after)
    level = logging.INFO if summary.status == 409 else logging.WARNING
    asked = f" (Retry-After {summary.retry_after:g} s)" if summary.retry_after is not None else ""
    log.log(
        level, "%s %s/%s failed: %s; retry in %.2f s%s", what, key[0], key[1], summary.line(), delay, asked
    )
    log.debug("%s %s/%s failed", what, key[0], key[1], exc_info=True)
