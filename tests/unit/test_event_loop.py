"""kopf's watch generators close cleanly when the loop kopf runs on shuts down.

The operator runs kopf in a thread under plain ``asyncio.run`` (``controller.watches``). Until
December 2026 the operator wrapped kopf's ``infinite_watch`` in a generator of its own, three deep,
and asyncio's shut-down, which closes the open generators in no order, then logged "an error
occurred during closing of asynchronous generator" at a SIGTERM; a custom loop closed them in
order. Without the wrapper kopf's own chain (``infinite_watch`` holding ``streaming_block`` around
``continuous_watch``) closes cleanly under asyncio's own loop, which this checks on the real kopf
code (only the HTTP stream is replaced). Tests may reach into kopf's internals; the operator's
code uses kopf's public API only. A kopf upgrade that breaks this shows here first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.configs.configuration import OperatorSettings

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

    async def watcher(first_event: asyncio.Event) -> None:
        stream = kopf_watching.infinite_watch(
            settings=OperatorSettings(),
            resource=Resource(),  # type: ignore[arg-type]
            namespace=None,
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


def test_asyncios_own_shutdown_closes_kopfs_watch_chains_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported, closed = stop_with_watches_open(asyncio.SelectorEventLoop, monkeypatch)
    assert reported == []
    assert closed == CHAINS
