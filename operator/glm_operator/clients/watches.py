"""kopf as the watch layer, through its public API only: a table of watches becomes a kopf registry,
and kopf runs in a thread of its own that is started again whenever it stops on its own.

Used by the operator (``controller.watches``: its table and what each event does) and by the
gateway's sync sidecar (``gateway.sync``): one watch mechanism for both.

- ``Watch``: one watched resource; kopf opens one list+watch per (group, version, plural). Label
  and field selectors given here are applied by the apiserver (``settings``).
- ``registry``: one ``@kopf.on.event`` handler per watch, in a ``kopf.OperatorRegistry`` of its own
  (with kopf's login through the official client's configuration); each hands its event to a sink
  through ``deliver`` (the operator: onto its event loop; the sidecar: straight into its store).
- ``WatchThread``: ``kopf.operator`` in a thread with its own event loop, as kopf's documentation on
  embedding describes. When an optional API goes away under a running operator (its CRD deleted),
  kopf's watcher may reconnect before kopf's CRD observer has stopped it; the apiserver answers 404
  and kopf stops the whole operator. A client-go informer would log it and list again later; here
  kopf's run ends, the thread logs one warning and starts kopf again after a backoff (1 s doubling
  to 30 s): its watches list again, and nothing of the owner's state is touched.

Not used, and why (docs/DESIGN.md): ``on.create/update`` handlers (progress annotations on the
object: GitOps drift), timers and daemons (a finalizer on every object), peering (leader election
is a Lease), kopf's Event posting (the operator posts its own), the diff base (``NoDiffBase``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import kopf

log = logging.getLogger(__name__)

# A sink receives (event type, object) of one watch; ``None`` is kopf's type for a listed object.
Sink = Callable[[str | None, dict[str, Any]], None]
# What ``registry`` and ``settings`` give, named here so that their users need not import kopf.
Registry = kopf.OperatorRegistry
Settings = kopf.OperatorSettings
Deliver = Callable[[Sink, str | None, dict[str, Any]], None]
T = TypeVar("T")

FIRST_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
STABLE_RUN_SECONDS = 60.0  # a run this long resets the restart backoff


@dataclass(frozen=True)
class Watch(Generic[T]):
    """One watched resource and where its events go (``sink(target)``)."""

    group: str
    version: str
    plural: str
    sink: Callable[[T], Sink]
    labels: Mapping[str, str] | None = None  # handler filter (client-side)
    server_selector: str | None = None  # label selector the apiserver applies
    field_selector: str | None = None  # field selector the apiserver applies
    name: str | None = None  # only the object of this name (client-side)


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


def settings(watches: Iterable[Watch[Any]] = ()) -> kopf.OperatorSettings:
    """kopf's settings for ``watches``: their server-side selectors, timeouts, no posting."""
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
    # by its flag; the owner decides when the process ends.
    s.process.ultimate_exiting_timeout = None
    for watch in watches:
        resource = (watch.group, watch.version, watch.plural)
        if watch.server_selector:
            s.watching.label_selectors[resource] = watch.server_selector
        if watch.field_selector:
            s.watching.field_selectors[resource] = watch.field_selector
    return s


def registry(
    watches: Iterable[Watch[T]],
    target: T,
    deliver: Deliver,
    on_event: Callable[[Watch[T]], None] | None = None,
) -> kopf.OperatorRegistry:
    """A kopf registry with one ``on.event`` handler per watch; each passes its events to the
    watch's sink (``watch.sink(target)``) through ``deliver``, from kopf's thread. ``on_event`` is
    told of every event received (metrics)."""
    reg = kopf.OperatorRegistry()
    kopf.on.login(registry=reg)(kopf.login_via_client)
    for index, watch in enumerate(watches):
        sink = watch.sink(target)

        async def handler(event: Any, _sink: Sink = sink, _watch: Watch[T] = watch, **_: Any) -> None:
            if event.get("type") == "BOOKMARK":
                return
            if on_event is not None:
                on_event(_watch)
            deliver(_sink, event.get("type"), dict(event.get("object") or {}))

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
        )(handler)
    return reg


def safely(sink: Sink, event_type: str | None, obj: dict[str, Any]) -> None:
    """Call ``sink``; one bad event is logged and never stops the others."""
    try:
        sink(event_type, obj)
    except Exception:
        meta = obj.get("metadata") or {}
        log.exception("handling a watch event of %s/%s failed", meta.get("namespace"), meta.get("name"))


def on_loop(loop: asyncio.AbstractEventLoop) -> Deliver:
    """Deliver each event on ``loop`` (in order), where its sink may touch state that loop owns."""

    def deliver(sink: Sink, event_type: str | None, obj: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(safely, sink, event_type, obj)

    return deliver


def restart_log_filter(record: logging.LogRecord) -> bool:
    """A handler filter for the processes that run a ``WatchThread``: kopf's own records of a
    watcher that met a 404 (the API went away) lose their traceback and become warnings, as the
    thread starts kopf again and says so in one line; kopf's note that it ignores OS signals
    outside the main thread is dropped (the owner handles them)."""
    if record.getMessage().startswith("OS signals are ignored"):
        return False
    error = record.exc_info[1] if record.exc_info else None
    if error is not None and type(error).__name__ == "APINotFoundError":
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


class WatchThread:
    """kopf's operator in a thread of its own, started again whenever it stops on its own."""

    def __init__(
        self,
        registry: kopf.OperatorRegistry,
        namespaces: tuple[str, ...],
        liveness_endpoint: str | None = None,
        settings_factory: Callable[[], kopf.OperatorSettings] = settings,
        on_restart: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_restart``: told of every restart (metrics)."""
        self.registry = registry
        self.settings_factory = settings_factory
        self.namespaces = namespaces
        self.liveness_endpoint = liveness_endpoint
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flag: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self.restarts = 0
        self.on_restart = on_restart

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
            self.on_restart()
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
