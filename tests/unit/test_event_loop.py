"""The operator's event loop closes kopf's nested watch generators in order when it shuts down.

The chains are the operator's own: the watch guard's wrapper around kopf's real ``infinite_watch``
and ``streaming_block``; only kopf's ``continuous_watch`` (the HTTP stream) is replaced by a
generator that yields an event at a time. A watcher holds each chain and is cancelled while the
chain waits at a ``yield``, as kopf's watchers are when the operator stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.configs.configuration import OperatorSettings

from glm_operator.controller import event_loop, watch_guard

CHAINS = 40


class Resource:
    group = "monitoring.coreos.com"
    plural = "podmonitors"


def stop_with_watches_open(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], int]:
    """Leave CHAINS watch chains open when the main coroutine returns; return what the loop's
    exception handler got during shut-down and how many HTTP streams were closed."""
    reported: list[str] = []
    closed = 0

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        nonlocal closed
        try:
            while True:
                await asyncio.sleep(0)
                yield {"type": "ADDED", "object": {"metadata": {"name": "pm"}}}
        finally:
            closed += 1

    monkeypatch.setattr(kopf_watching, "continuous_watch", continuous_watch)
    watch_guard.stop_delivering()

    async def watcher(first_event: asyncio.Event) -> None:
        stream = watch_guard.guarded_infinite_watch(
            settings=OperatorSettings(), resource=Resource(), namespace=None
        )
        async for _ in stream:
            first_event.set()
            await asyncio.sleep(3600)  # handling the event when the operator stops

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: reported.append(str(context.get("message")))
        )
        for _ in range(CHAINS):
            first_event = asyncio.Event()
            asyncio.get_running_loop().create_task(watcher(first_event))
            await first_event.wait()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    return reported, closed


def test_asyncios_own_shutdown_breaks_on_these_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: what the operator logged at a SIGTERM in CI, from the same chains."""
    reported, _ = stop_with_watches_open(asyncio.SelectorEventLoop, monkeypatch)
    assert reported and all("error occurred during closing of asynchronous generator" in m for m in reported)


def test_the_operators_loop_closes_every_chain_without_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    reported, closed = stop_with_watches_open(event_loop.OrderlyShutdownLoop, monkeypatch)
    assert reported == []
    assert closed == CHAINS


def test_a_generator_failing_to_close_is_reported_and_the_rest_still_close() -> None:
    reported: list[dict[str, Any]] = []
    closed: list[str] = []

    async def breaks_on_close() -> AsyncIterator[int]:
        try:
            yield 1
        finally:
            raise ValueError("broken finally")

    async def closes(name: str) -> AsyncIterator[int]:
        try:
            yield 1
        finally:
            closed.append(name)

    held: list[AsyncIterator[int]] = []

    async def main() -> str:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
        for agen in (closes("first"), breaks_on_close(), closes("last")):
            await agen.__anext__()
            held.append(agen)
        return "done"

    assert event_loop.run(main()) == "done"
    assert closed == ["first", "last"]
    (context,) = reported
    assert isinstance(context["exception"], ValueError)
    assert "breaks_on_close" in context["message"]
