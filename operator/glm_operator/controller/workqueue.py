"""A de-duplicating work queue of GLMDeployment keys, like controller-runtime's.

Events (the GLMDeployment itself, its children, GPU nodes, the periodic resync) only *enqueue*
a key; workers take keys and run one level-based reconcile for each. A key is never processed by
two workers at once, and a key enqueued while it is being processed runs once more afterwards,
so the last event always sees a reconcile that started after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

Key = tuple[str, str]  # (namespace, name)


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._dirty: set[Key] = set()
        self.known: set[Key] = set()

    def add(self, key: Key) -> None:
        self.known.add(key)
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_all(self, keys: Iterable[Key] | None = None) -> None:
        for key in list(self.known if keys is None else keys):
            self.add(key)

    def forget(self, key: Key) -> None:
        self.known.discard(key)

    def __len__(self) -> int:
        return self._queue.qsize()

    async def run_worker(
        self, handle: Callable[[Key], Awaitable[None]], gate: Callable[[], Awaitable[None]]
    ) -> None:
        """Process keys forever; ``gate`` waits until this replica may act (leader election)."""
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                await gate()
                await handle(key)
            finally:
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
