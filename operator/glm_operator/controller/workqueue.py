"""A work queue of object keys with per-key backoff, as client-go's rate-limiting work queue.

Watch events only *add* a key; workers take keys and run one level-based reconcile each, reading
the latest state from the caches, never the event that woke them. The rules:

- a key is queued at most once; a key is never processed by two workers at once;
- a key added while it is being processed runs once more afterwards (``done``), so the last event
  always sees a reconcile that started after it;
- ``add`` always queues at once, even while the key waits out a backoff: a new event is new
  information (client-go's ``Add`` does the same). The one exception: after a 429 the apiserver's
  ``Retry-After`` holds the key until then;
- ``add_rate_limited`` re-adds a failed key after ``RateLimiter.when`` (per-key exponential backoff
  and an overall token bucket); ``forget`` after a success resets the key's backoff.

Time comes from an injected ``Clock``, so the tests run on a manual one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

from glm_operator.controller.clock import Clock, LoopClock, Timer
from glm_operator.controller.ratelimit import RateLimiter

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
Key = tuple[str, str]  # (namespace, name)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        clock: Clock | None = None,
        limiter: RateLimiter | None = None,
        observe_wait: Callable[[float], None] | None = None,
    ) -> None:
        """``observe_wait``: called with the seconds a key waited on the queue when a worker takes
        it (metrics)."""
        self.clock: Clock = clock or LoopClock()
        self.limiter = limiter or RateLimiter()
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()  # added while processing: queued again by ``done``
        self._timers: dict[K, Timer] = {}  # delayed adds not due yet (one per key: the earliest)
        self._due: dict[K, float] = {}  # monotonic time each timer fires
        self._not_before: dict[K, float] = {}  # a 429's Retry-After: no run before this
        self.observe_wait = observe_wait
        self._added_at: dict[K, float] = {}

    # -- adding ---------------------------------------------------------------------------------
    def add(self, key: K) -> None:
        held = self._not_before.get(key)
        if held is not None:
            if self.clock.monotonic() < held:
                self._schedule(key, held - self.clock.monotonic())
                return
            del self._not_before[key]
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)
        self._added_at[key] = self.clock.monotonic()

    def add_all(self, keys: Iterable[K]) -> None:
        for key in list(keys):
            self.add(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` in ``delay`` seconds (an earlier pending add of it wins)."""
        if delay <= 0:
            self.add(key)
        else:
            self._schedule(key, delay)

    def add_rate_limited(self, key: K, retry_after: float | None = None) -> float:
        """Re-add a failed ``key`` after its backoff; returns the delay. ``retry_after`` (a 429's
        Retry-After) also keeps every other add of the key waiting until then."""
        delay = self.limiter.when(key, self.clock.monotonic(), retry_after)
        if retry_after is not None:
            self._not_before[key] = self.clock.monotonic() + delay
        self._schedule(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self.limiter.forget(key)
        self._not_before.pop(key, None)

    def remove(self, key: K) -> None:
        """The object is gone: drop its backoff and its pending delayed adds (a queued run stays
        and finds nothing to do)."""
        self.forget(key)
        timer = self._timers.pop(key, None)
        self._due.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _schedule(self, key: K, delay: float) -> None:
        due = self.clock.monotonic() + delay
        if key in self._timers and self._due[key] <= due:
            return
        if key in self._timers:
            self._timers[key].cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self._due.pop(key, None)
            self.add(key)

        self._due[key] = due
        self._timers[key] = self.clock.call_later(delay, fire)

    # -- taking ---------------------------------------------------------------------------------
    async def get(self) -> K:
        """The next key; it counts as processing until ``done(key)``."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._processing.add(key)
        added = self._added_at.pop(key, None)
        if added is not None and self.observe_wait is not None:
            self.observe_wait(self.clock.monotonic() - added)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._queued)

    def pending(self) -> bool:
        """Anything queued, processing or waiting on a timer."""
        return bool(self._queued or self._processing or self._timers)

    async def run_worker(
        self, handle: Callable[[K], Awaitable[None]], gate: Callable[[], Awaitable[None]]
    ) -> None:
        """Take keys forever; ``gate`` waits until this replica may act (leader election).
        ``handle`` deals with its own failures (see the reconcilers)."""
        while True:
            key = await self.get()
            try:
                await gate()
                await handle(key)
            except Exception:  # a reconciler handles its failures; this is the last guard
                delay = self.add_rate_limited(key)
                log.exception("processing %s failed unexpectedly; retry in %.2f s", key, delay)
            finally:
                self.done(key)
