"""Every watch the operator opens, in one table, and the kopf thread that runs them.

kopf is the watch layer, through its public API only: one ``@kopf.on.event`` handler per row of
``WATCHES``, registered in a registry of our own (``kopf.OperatorRegistry``), settings on a
``kopf.OperatorSettings``, and ``kopf.operator`` run in a thread of its own with its own event
loop, as kopf's documentation on embedding describes. Each handler hands its event over to the
operator's event loop (``call_soon_threadsafe``), where ``EventHandlers`` update the caches and
enqueue keys; the two loops share nothing else.

Why a thread: when an optional API goes away under a running operator (its CRD deleted), kopf's
watcher may reconnect before kopf's CRD observer has stopped it; the apiserver answers 404 and kopf
stops the whole operator. A client-go informer would log it and list again later. Here kopf's run
ends, the thread logs one warning and starts kopf again after a backoff (1 s doubling to 30 s):
its watches list again, the caches catch up, and nothing of the operator's own state (caches,
work queues, leadership, applies in flight) is touched. See docs/DESIGN.md.

What kopf is not used for, and why (also in docs/DESIGN.md): no ``on.create/update`` handlers
(they keep progress annotations on the object, which GitOps would see as drift), no timers or
daemons (they put a finalizer on every object), no peering (leader election is a Lease,
``controller.leader``), no Event posting (the operator posts its own, with reasons users act on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import kopf

from glm_operator.api.gateway import GATEWAY_PLURAL
from glm_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from glm_operator.controller import metrics
from glm_operator.controller.event_handlers import EventHandlers
from glm_operator.gateway.objects import GATEWAY_APP_NAME
from glm_operator.render import names
from glm_operator.render.monitoring import (
    POD_MONITOR_CRD,
    POD_MONITOR_KIND,
    POD_MONITOR_PLURAL,
)

log = logging.getLogger(__name__)

# A sink receives (event type, object) on the operator's event loop.
Sink = Callable[[str | None, dict[str, Any]], None]

MANAGED = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
MANAGED_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
FIRST_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
STABLE_RUN_SECONDS = 60.0  # a run this long resets the restart backoff


@dataclass(frozen=True)
class Watch:
    """One watched resource: kopf opens one list+watch per (group, version, plural)."""

    group: str
    version: str
    plural: str
    sink: Callable[[EventHandlers], Sink]  # where its events go
    labels: Mapping[str, str] | None = None  # handler filter (client-side)
    server_selector: str | None = None  # label selector the apiserver applies
    name: str | None = None  # only the object of this name (client-side)


def _child(group: str, version: str, plural: str, kind: str) -> Watch:
    """A kind of child object: only the operator's own (labelled), filtered by the apiserver."""
    api_version = f"{group}/{version}" if group else version

    def sink(h: EventHandlers) -> Sink:
        return lambda event_type, obj: h.on_child(api_version, kind, event_type, obj)

    return Watch(group, version, plural, sink, labels=MANAGED, server_selector=MANAGED_SELECTOR)


WATCHES: tuple[Watch, ...] = (
    Watch(GROUP, VERSION, PLURAL, lambda h: h.on_glmdeployment),
    Watch("", "v1", "nodes", lambda h: h.on_node),
    Watch("", "v1", "pods", lambda h: h.on_pod),  # every pod: the GPUs other workloads hold
    Watch("", "v1", "namespaces", lambda h: h.on_namespace),
    _child("apps", "v1", "deployments", "Deployment"),
    _child("", "v1", "services", "Service"),
    _child("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    _child("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    _child("monitoring.coreos.com", "v1", POD_MONITOR_PLURAL, POD_MONITOR_KIND),
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


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base serves ``on.create/update/field`` handlers; kopf builds it (a deep copy of
    the object) for every event of every watch even when no handler reads it. The operator has only
    ``on.event`` handlers, so none is built."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class ReconnectBackoffs:
    """Retry delays of kopf's API requests: 0.5 s, then 1 s forever. kopf's default backs off up to
    21 s, so after an apiserver restart a watch could stay down that long and a spec change would go
    unseen; the watches are the operator's eyes."""

    def __iter__(self) -> Iterator[float]:
        yield 0.5
        while True:
            yield 1.0


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.posting.enabled = False  # the operator posts its own Events
    s.persistence.diffbase_storage = NoDiffBase()
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    s.watching.connect_timeout = 3
    s.watching.inactivity_timeout = 70
    s.networking.request_timeout = 60
    s.networking.connect_timeout = 3
    s.networking.error_backoffs = ReconnectBackoffs()
    # kopf would SIGKILL its thread (hence the process) 10 minutes after a run it did not stop
    # by its flag; the manager decides when the process ends.
    s.process.ultimate_exiting_timeout = None
    for watch in WATCHES:
        if watch.server_selector:
            s.watching.label_selectors[(watch.group, watch.version, watch.plural)] = watch.server_selector
    return s


def registry(handlers: EventHandlers, loop: asyncio.AbstractEventLoop) -> kopf.OperatorRegistry:
    """A kopf registry with one ``on.event`` handler per row of ``WATCHES``; each passes its event
    to the operator's ``loop``."""
    reg = kopf.OperatorRegistry()
    kopf.on.login(registry=reg)(kopf.login_via_client)
    for index, watch in enumerate(WATCHES):
        sink = watch.sink(handlers)
        received = metrics.WATCH_EVENTS.labels(resource=watch.plural)

        async def on_event(event: Any, _sink: Sink = sink, _received: Any = received, **_: Any) -> None:
            if event.get("type") == "BOOKMARK":
                return
            _received.inc()
            loop.call_soon_threadsafe(_deliver, _sink, event.get("type"), dict(event.get("object") or {}))

        kwargs: dict[str, Any] = {"labels": dict(watch.labels)} if watch.labels else {}
        if watch.name is not None:
            wanted = watch.name
            kwargs["when"] = lambda name, _wanted=wanted, **_: name == _wanted
        kopf.on.event(
            watch.group,
            watch.version,
            watch.plural,
            id=f"watch-{index}-{watch.plural}",
            registry=reg,
            **kwargs,
        )(on_event)
    return reg


def _deliver(sink: Sink, event_type: str | None, obj: dict[str, Any]) -> None:
    try:
        sink(event_type, obj)
    except Exception:  # one bad event never stops the others
        meta = obj.get("metadata") or {}
        log.exception("handling a watch event of %s/%s failed", meta.get("namespace"), meta.get("name"))


class WatchThread:
    """kopf's operator in a thread of its own, started again whenever it stops on its own."""

    def __init__(
        self,
        registry: kopf.OperatorRegistry,
        namespaces: tuple[str, ...],
        liveness_endpoint: str | None = None,
        settings_factory: Callable[[], kopf.OperatorSettings] = settings,
    ) -> None:
        self.registry = registry
        self.settings_factory = settings_factory
        self.namespaces = namespaces
        self.liveness_endpoint = liveness_endpoint
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flag: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self.restarts = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kopf-watches", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = FIRST_RESTART_DELAY
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                asyncio.run(self._operator())
                problem = "stopped"
            except Exception as exc:
                problem = f"failed ({type(exc).__name__}: {exc})"
            if self._stop.is_set():
                return
            if time.monotonic() - started > STABLE_RUN_SECONDS:
                delay = FIRST_RESTART_DELAY
            self.restarts += 1
            metrics.WATCH_RESTARTS.inc()
            log.warning("the watches %s; listing and watching again in %.0f s", problem, delay)
            self._stop.wait(delay)
            delay = min(delay * 2, MAX_RESTART_DELAY)

    async def _operator(self) -> None:
        """One run of kopf on this thread's loop, until ``stop`` sets its flag. The flag is an
        asyncio.Event of this loop: kopf waits for a thread-safe flag in an executor thread that
        nothing can cancel, so a failed run would never return."""
        stop_flag = asyncio.Event()
        self._flag = (asyncio.get_running_loop(), stop_flag)
        if self._stop.is_set():
            return
        await kopf.operator(
            registry=self.registry,
            settings=self.settings_factory(),
            standalone=True,  # leader election is the operator's own Lease
            clusterwide=not self.namespaces,
            namespaces=self.namespaces,
            liveness_endpoint=self.liveness_endpoint,
            stop_flag=stop_flag,
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._flag is not None:
            loop, flag = self._flag
            with contextlib.suppress(RuntimeError):  # the loop is closed: that run is over
                loop.call_soon_threadsafe(flag.set)
        if self._thread is not None:
            self._thread.join(timeout)
