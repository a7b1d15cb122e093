"""Keep kopf's watches alive when an API they watch stops being served, as client-go's reflector does.

kopf stops a resource's watch when its resource observer sees the CRD deleted. Deleting a CRD also
ends the open watch streams, and kopf reconnects at once; when that reconnect reaches the apiserver
before the observer has dropped the watch, the apiserver answers 404, kopf raises
``APINotFoundError`` out of the watcher, and the whole operator stops ("Multidimensional multitasker
has failed"). The same happens on an ``ERROR`` event in a watch stream other than 410. The
operator's optional APIs (PodMonitor, LeaderWorkerSet, Karpenter's NodePool, GLMGateway) can all be
removed under a running operator.

A client-go reflector logs such a failure and lists again after a backoff, forever; the informer is
stopped only by its owner. Here the watch does the same: one warning per outage, then a relist with
a backoff of 1 s doubling to 30 s, until the API is served again or kopf's observer cancels the
watch. A relist ends in the usual "listed" bookmark, so kopf treats it like the relist after a 410.

kopf has no hook for this, so the function kopf's per-resource watcher calls
(``kopf._cogs.clients.watching.infinite_watch``) is wrapped once at start-up. pyproject.toml pins
kopf to the minor version this was checked on (1.45): a new minor is taken on purpose, after
``tests/e2e/test_watch_guard.py`` shows kopf still fails without the wrapper and survives with it.

Direct delivery: the wrapper also hands the events of the busy kinds (pods, nodes, the children,
GLMDeployments) straight to the operator's cache updates (``deliver_directly``), as a client-go
informer calls its event handlers, instead of yielding them into kopf's per-object machinery
(a worker task per object, three loggers, a memory, cause detection and a patch per event: about
a quarter of the operator's CPU, and most of its event loop's time, in a burst of 200
GLMDeployments). Those kopf handlers stay registered: they make kopf start the watches, and they
handle any event that comes before the callbacks are set (none: kopf starts watching after the
start-up handlers, which set them). Bookmarks (kopf's "listed" marks) still go to kopf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import watching as kopf_watching

from glm_operator.controller import metrics

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0

_kopf_infinite_watch = kopf_watching.infinite_watch

# (API group, plural) -> what handles its events: called with the event's type and object
Delivery = Callable[[str | None, dict[str, Any]], None]
_direct: dict[tuple[str, str], Delivery] = {}


def deliver_directly(deliveries: dict[tuple[str, str], Delivery]) -> None:
    """From now on, events of these (group, plural) resources are handled by their callback on the
    event loop, in stream order, and not passed to kopf."""
    _direct.clear()
    _direct.update(deliveries)


def stop_delivering() -> None:
    _direct.clear()


def _deliver(delivery: Delivery, event: Mapping[str, Any], plural: str) -> None:
    obj = event.get("object")
    try:
        delivery(event.get("type"), obj if isinstance(obj, dict) else {})
    except Exception:  # one bad event never ends the watch (kopf logs a failed handler the same way)
        meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
        log.exception("handling a %s event of %s/%s failed", plural, meta.get("namespace"), meta.get("name"))


def install() -> None:
    """Make kopf's watchers survive a 404 or an ERROR event (idempotent)."""
    kopf_watching.infinite_watch = guarded_infinite_watch


def installed() -> bool:
    return kopf_watching.infinite_watch is guarded_infinite_watch


def next_backoff(previous: float | None) -> float:
    if previous is None:
        return FIRST_BACKOFF_SECONDS
    return min(previous * 2, MAX_BACKOFF_SECONDS)


async def guarded_infinite_watch(
    *,
    settings: Any,
    resource: Any,
    namespace: Any,
    operator_paused: Any = None,
    _iterations: int | None = None,
) -> AsyncIterator[Any]:
    """kopf's ``infinite_watch``, restarted (list, then watch) after a 404 or a watch ERROR event."""
    where = f"in {namespace}" if namespace is not None else "cluster-wide"
    backoff: float | None = None
    received = metrics.WATCH_EVENTS.labels(resource=resource.plural)
    key = (str(getattr(resource, "group", "")), str(resource.plural))
    while True:
        try:
            async for event in _kopf_infinite_watch(
                settings=settings,
                resource=resource,
                namespace=namespace,
                operator_paused=operator_paused,
                _iterations=_iterations,
            ):
                if backoff is not None and event is kopf_watching.Bookmark.LISTED:
                    log.info("watch of %s %s: listed again, the API is served", resource.plural, where)
                    backoff = None
                if isinstance(event, dict) and event.get("type") != "BOOKMARK":
                    received.inc()
                    delivery = _direct.get(key)
                    if delivery is not None:
                        _deliver(delivery, event, resource.plural)
                        continue
                yield event
            return  # only with kopf's test-only _iterations
        except (kopf_errors.APINotFoundError, kopf_watching.WatchingError) as exc:
            reason = "not_found" if isinstance(exc, kopf_errors.APINotFoundError) else "watch_error"
            metrics.WATCH_FAILURES.labels(resource=resource.plural, reason=reason).inc()
            backoff = next_backoff(backoff)
            message = (
                "watch of %s %s failed (%s: %s); listing again in %.0f s, until the API is served "
                "again or the CRD observer stops this watch"
            )
            level = logging.WARNING if backoff == FIRST_BACKOFF_SECONDS else logging.DEBUG
            log.log(level, message, resource.plural, where, type(exc).__name__, exc, backoff)
            await asyncio.sleep(backoff)
