"""The running operator: caches, work queue, workers, leader election, periodic resync.

kopf delivers watch events to the thin handlers in ``glm_operator.handlers``; they update the
caches and enqueue GLMDeployment keys. Workers (only on the leader) run one level-based
``reconcile`` per key, reading the GLMDeployment again from the apiserver so every reconcile
works from actual state, never from the event that woke it.
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
from typing import Any

from glm_operator.clients.kube import API_VERSION, KubeClient, NotLeader
from glm_operator.controller import metrics
from glm_operator.controller.cache import ClusterCache
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.leader import LeaderElector
from glm_operator.controller.workqueue import Key, WorkQueue
from glm_operator.render import names

log = logging.getLogger(__name__)


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
        self.cache = ClusterCache()
        self.queue = WorkQueue()
        self.elector: LeaderElector | None = None
        if config.leader_election:
            self.elector = LeaderElector(
                election_api or KubeClient(api.api, timeout=4.0),
                config.lease_namespace,
                config.lease_name,
                config.identity,
            )
            api.may_write = self.elector.may_write  # no write leaves a replica that does not lead
        self._leading = asyncio.Event()
        self.stop_flag = asyncio.Event()  # set to make kopf shut the operator down
        self.exit_code = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._replan_pending = False
        # (namespace, kind, name) -> (digest of the object last applied, the version the apply
        # returned); see reconcile
        self.applied: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.autoscaler: Any = None  # glm_operator.controller.autoscaling.Autoscaler when enabled
        self.specs: dict[Key, dict[str, Any]] = {}  # last seen spec per GLMDeployment (autoscaler)
        self.lws_available = False  # LeaderWorkerSet CRD installed (multi-node variants)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        # Blocking apiserver calls run in threads (asyncio.to_thread): size the pool to the
        # workers, or reconciles queue for a thread (the default pool is cores + 4).
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=max(8, 3 * self.config.workers))
        )
        await self.refresh_cluster_view()
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
        self._tasks.append(asyncio.create_task(self._resync_loop(), name="resync"))
        if self.autoscaler is not None:
            self._tasks.append(asyncio.create_task(self.autoscaler.run(), name="autoscaler"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.elector is not None:
            await asyncio.to_thread(self.elector.release)
            await asyncio.to_thread(self.elector.stop)

    def _started_leading(self) -> None:
        # Forget what an earlier term applied: a peer may have led in between.
        self.applied.clear()
        self._leading.set()
        self.queue.add_all()

    def _stopped_leading(self) -> None:
        """Lost the Lease: cancel every in-flight reconcile, then exit non-zero (as client-go's
        managers do); the Deployment restarts this replica, which comes back as a standby."""
        self._leading.clear()
        for task in self._tasks:
            task.cancel()
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
        if event_type == "DELETED":
            self.queue.forget(key)
            self.specs.pop(key, None)
            return
        self.specs[key] = dict(obj.get("spec") or {})
        generation = meta.get("generation")
        observed = (obj.get("status") or {}).get("observedGeneration")
        self.queue.add(key, urgent=generation != observed)  # a spec not planned yet goes first

    def on_node(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        changed = self.cache.delete_node(name) if event_type == "DELETED" else self.cache.set_node(obj)
        if changed:
            self.replan_all_soon()  # GPU supply changed: every GLMDeployment re-plans (debounced)

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        if event_type == "DELETED":
            self.cache.delete_pod(str((obj.get("metadata") or {}).get("uid", "")))
        else:
            self.cache.set_pod(obj, key)
        if key is not None:
            self.queue.add(key)

    def on_child(self, event_type: str | None, obj: dict[str, Any], api_version: str, kind: str) -> None:
        key = owner_key(obj)
        if key is not None:
            self.queue.add(key)

    def replan_all_soon(self, delay: float = 1.0) -> None:
        """Re-plan every GLMDeployment once, ``delay`` after the first of a burst of node changes."""
        if self._replan_pending:
            return
        self._replan_pending = True

        def fire() -> None:
            self._replan_pending = False
            self.queue.add_all()

        asyncio.get_running_loop().call_later(delay, fire)

    async def wait_for_leadership(self) -> None:
        await self._leading.wait()

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.may_write()

    # -- cluster view ------------------------------------------------------------------------
    async def refresh_cluster_view(self) -> None:
        """Full list of nodes, GPU pods and GLMDeployments: the ground truth the caches start from."""
        self.lws_available = await asyncio.to_thread(self.api.api_available, "leaderworkerset.x-k8s.io/v1")
        nodes = await asyncio.to_thread(self.api.list, "v1", "Node")
        self.cache.replace_nodes(nodes)
        # GPUs held by any pod count, whichever namespace or tenant it belongs to.
        pods = await asyncio.to_thread(self.api.list, "v1", "Pod")
        self.cache.replace_pods([(p, owner_key(p)) for p in pods])
        for obj in await asyncio.to_thread(self.api.list, API_VERSION, "GLMDeployment"):
            meta = obj["metadata"]
            if not self.watches_namespace(meta["namespace"]):
                continue
            key = (meta["namespace"], meta["name"])
            self.queue.known.add(key)
            self.specs[key] = dict(obj.get("spec") or {})

    def watches_namespace(self, namespace: str) -> bool:
        """kopf-style namespace patterns: globs, ``!`` negations, the rightmost match wins."""
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
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            try:
                await self.refresh_cluster_view()
            except Exception as exc:
                log.warning("resync: could not list the cluster: %s", exc)
            self.applied.clear()  # re-apply everything once per resync: repairs drift made by hand
            self.queue.add_all()

    # -- reconcile ---------------------------------------------------------------------------
    async def reconcile_key(self, key: Key) -> None:
        from glm_operator.controller.reconcile import reconcile

        namespace, name = key
        started = time.perf_counter()
        try:
            found = await reconcile(self, namespace, name)
            if not found:
                self.queue.forget(key)
                metrics.forget(namespace, name)
                for applied_key in [k for k in self.applied if k[0] == namespace]:
                    self.applied.pop(applied_key, None)  # its children are gone with it
            metrics.RECONCILES.labels(result="ok").inc()
        except NotLeader:
            self.queue.add(key)  # waits at the leadership gate; this replica no longer writes
        except Exception:
            metrics.RECONCILES.labels(result="error").inc()
            log.exception("reconcile %s/%s failed; retrying in 5s", namespace, name)
            asyncio.get_running_loop().call_later(5.0, self.queue.add, key)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
