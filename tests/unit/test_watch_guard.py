"""The watch guard's restart logic on a scripted kopf stream (real case: tests/e2e/test_watch_guard.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import watching as kopf_watching

from glm_operator.controller import watch_guard


class Resource:
    plural = "podmonitors"


def test_backoff_doubles_to_a_cap() -> None:
    delays = []
    backoff = None
    for _ in range(8):
        backoff = watch_guard.next_backoff(backoff)
        delays.append(backoff)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]


def test_a_404_and_an_error_event_relist_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    script: list[list[Any]] = [
        ["a", kopf_errors.APINotFoundError({"message": "404 page not found"}, status=404, headers={})],
        [kopf_watching.WatchingError("Error in the watch-stream: {'code': 500}")],
        [kopf_watching.Bookmark.LISTED, "b"],
    ]

    async def scripted(**kwargs: Any) -> AsyncIterator[Any]:
        calls.append(kwargs["namespace"])
        for item in script.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item

    sleeps: list[float] = []

    async def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(watch_guard, "_kopf_infinite_watch", scripted)
    monkeypatch.setattr(watch_guard.asyncio, "sleep", no_sleep)

    async def collect() -> list[Any]:
        stream = watch_guard.guarded_infinite_watch(settings=None, resource=Resource(), namespace="ns")
        return [event async for event in stream]

    assert asyncio.run(collect()) == ["a", kopf_watching.Bookmark.LISTED, "b"]
    assert calls == ["ns", "ns", "ns"]
    assert sleeps == [1.0, 2.0]


def test_other_errors_still_stop_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    async def forbidden(**kwargs: Any) -> AsyncIterator[Any]:
        raise kopf_errors.APIForbiddenError({"message": "forbidden"}, status=403, headers={})
        yield

    monkeypatch.setattr(watch_guard, "_kopf_infinite_watch", forbidden)

    async def collect() -> list[Any]:
        stream = watch_guard.guarded_infinite_watch(settings=None, resource=Resource(), namespace=None)
        return [event async for event in stream]

    with pytest.raises(kopf_errors.APIForbiddenError):
        asyncio.run(collect())


def test_forbidden_lines_ignore_timestamps() -> None:
    from tests.e2e.conftest import forbidden_lines

    log = (
        "2026-12-01 05:50:46,403 INFO glm_operator.controller.runtime: PodMonitor API not served\n"
        "2026-12-01 05:50:47,001 ERROR kopf: APIForbiddenError: ('pods is forbidden', {'code': 403})\n"
        "aiohttp.client_exceptions.ClientResponseError: 403, message='Forbidden'\n"
    )
    assert forbidden_lines(log) == log.splitlines()[1:]


def test_events_are_counted_by_resource_and_bookmarks_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from glm_operator.controller import metrics

    async def scripted(**kwargs: Any) -> AsyncIterator[Any]:
        yield kopf_watching.Bookmark.LISTED
        yield {"type": "ADDED", "object": {}}
        yield {"type": "MODIFIED", "object": {}}

    monkeypatch.setattr(watch_guard, "_kopf_infinite_watch", scripted)
    counter = metrics.WATCH_EVENTS.labels(resource=Resource.plural)
    before = counter._value.get()

    async def collect() -> list[Any]:
        stream = watch_guard.guarded_infinite_watch(settings=None, resource=Resource(), namespace=None)
        return [event async for event in stream if not isinstance(event, dict)]

    asyncio.run(collect())
    assert counter._value.get() - before == 2


class Pods:
    group = ""
    plural = "pods"


def test_events_of_a_directly_delivered_kind_go_to_its_handler_in_order_and_not_to_kopf(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}

    async def scripted(**kwargs: Any) -> AsyncIterator[Any]:
        yield {"type": None, "object": {"metadata": {"name": "listed"}}}
        yield kopf_watching.Bookmark.LISTED
        yield {"type": "ADDED", "object": {"metadata": {"name": "bad"}}}
        yield {"type": "MODIFIED", "object": {"metadata": {"name": "a"}}}
        yield bookmark
        yield {"type": "DELETED", "object": {"metadata": {"name": "a"}}}

    handled: list[tuple[str | None, str]] = []

    def on_pod(event_type: str | None, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("a handler bug")
        handled.append((event_type, obj["metadata"]["name"]))

    monkeypatch.setattr(watch_guard, "_kopf_infinite_watch", scripted)
    watch_guard.deliver_directly({("", "pods"): on_pod})

    async def collect(resource: Any) -> list[Any]:
        stream = watch_guard.guarded_infinite_watch(settings=None, resource=resource, namespace=None)
        return [event async for event in stream]

    try:
        to_kopf = asyncio.run(collect(Pods()))
        assert handled == [(None, "listed"), ("MODIFIED", "a"), ("DELETED", "a")]
        assert to_kopf == [kopf_watching.Bookmark.LISTED, bookmark], "kopf still gets its listed mark only"
        assert "handling a pods event of None/bad failed" in caplog.text
        # Another kind is not delivered directly: kopf gets its events as before.
        handled.clear()
        assert len(asyncio.run(collect(Resource()))) == 6 and handled == []
    finally:
        watch_guard.stop_delivering()
    assert len(asyncio.run(collect(Pods()))) == 6, "after stop_delivering kopf gets every event again"
