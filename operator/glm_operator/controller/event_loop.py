"""The operator's event loop: asyncio's, with async generators closed outermost first at shut-down.

At exit ``asyncio.run`` closes every async generator still open with one ``gather`` over a set of
them, in no order. kopf's watch is three generators deep (``infinite_watch`` holds the
``streaming_block`` context manager around ``continuous_watch``), and a watcher cancelled while
its stream waits at a ``yield`` leaves all of them open. When ``streaming_block``'s generator is
closed before ``infinite_watch``, closing ``infinite_watch`` throws into a finished generator and
asyncio logs "an error occurred during closing of asynchronous generator" with a
``RuntimeError: generator didn't stop after athrow()`` traceback (seen on an operator's SIGTERM in
CI; ``tests/unit/test_event_loop.py`` provokes it with asyncio's own loop, as its control).

Here the generators are closed one at a time in the order they were first iterated. An outer
generator is always first iterated before the ones it iterates, so each is closed while the
generators it holds are still intact, as its ``finally`` and ``async with`` blocks expect; the
inner ones are then closed (or found closed) in turn. asyncio's own shut-down runs after, on
nothing left open.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import AsyncGenerator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class OrderlyShutdownLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._first_iterated: weakref.WeakKeyDictionary[AsyncGenerator[Any, Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._order = itertools.count()

    def _asyncgen_firstiter_hook(self, agen: AsyncGenerator[Any, Any]) -> None:
        self._first_iterated[agen] = next(self._order)
        super()._asyncgen_firstiter_hook(agen)  # type: ignore[misc]

    async def shutdown_asyncgens(self) -> None:
        open_generators = sorted(self._first_iterated.items(), key=lambda item: item[1])
        self._first_iterated.clear()
        for agen, _ in open_generators:
            try:
                await agen.aclose()
            except Exception as exc:  # reported as asyncio reports it, and the others still close
                self.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of asynchronous generator {agen!r}",
                        "exception": exc,
                        "asyncgen": agen,
                    }
                )
        await super().shutdown_asyncgens()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on an :class:`OrderlyShutdownLoop`."""
    with asyncio.Runner(loop_factory=OrderlyShutdownLoop) as runner:
        return runner.run(main)
