"""A de-duplicating work queue of GLMDeployment keys, like controller-runtime's, with two lanes.

Events (the GLMDeployment itself, its children, GPU nodes, the periodic resync) only *enqueue*
a key; workers take keys and run one level-based reconcile for each. A key is never processed by
two workers at once, and a key enqueued while it is being processed runs once more afterwards,
so the last event always sees a reconcile that started after it.

Keys whose spec has not been planned yet (new objects, spec changes) go to the *urgent* lane and
are taken before routine re-reconciles (pod and child events, node changes, resync): under a
burst of 200 new GLMDeployments, planning them is not stuck behind refreshes of the planned ones.

Routine events of pods and children (``add_soon``) are coalesced for ``ROUTINE_BATCH_SECONDS``,
and for longer while new specs are arriving (a *burst*: an urgent key added, queued or in a
worker within the last ``BURST_GAP_SECONDS``), up to ``BURST_DEFER_SECONDS`` after the first
event. The operator is one Python process: a trace of bench run 74 showed every step of a new
spec slowed by the operator's own CPU (its watch handler ran up to 0.6 s after the bench saw the
object; a Deployment POST took 0.55 s in the client against 0.32 s on the server), while the pods
of the first new GLMDeployments re-reconciled (a re-plan, ~20 ms of CPU each). A pod going Ready
a few seconds later in status costs nothing; a Deployment of a new spec later does.

A failed reconcile is re-added with ``add_rate_limited``: after a per-key exponential backoff
with jitter, bounded overall by a token bucket (``ratelimit.RateLimiter``); ``forget_failures``
after a success resets the key's backoff. While a key waits out its backoff, routine events
(pods, children, nodes) do not run it earlier: the retry is level-based and sees what they
changed. A spec change (urgent) still runs at once, unless the apiserver answered the last try
with a ``Retry-After`` (429): then nothing runs the key before that time.

A handler may return a *tail*: the end of its reconcile that only waits on the apiserver (the
status write and the Events after it). The tail runs in the background and the worker takes the
next key at once; the key stays in flight until the tail has finished, so per-key order holds
(no second reconcile of it starts before, and an add meanwhile runs once after it, urgent flag
kept). At most ``max_tails`` tails run at once; beyond that a worker waits for one to finish
before it takes another key, so a slow apiserver slows the workers down instead of piling up
writes. A tail handles its own failures (see ``runtime``); one that raises anyway is logged
and its key re-added with backoff. ``cancel_tails`` cancels them all (lost leadership).

A tail may be *held* first (``hold_tails``; the operator holds status writes while workload writes
are on the wire, see ``runtime``). A held tail gives its slot back while it waits and then writes
in a lane of its own (``max_tails // HELD_TAILS_SHARE`` at once), so held tails never keep the
workers from new keys (a key is in flight once, so held tails are bounded by the keys). An
urgent add of a held key (a spec change) ends its hold at once: the new spec is not kept waiting
behind a burst.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from glm_operator.controller.ratelimit import RateLimiter

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
Tail = Callable[[], Awaitable[None]]  # the rest of a reconcile, run without holding a worker
DEFAULT_MAX_TAILS = 32
HELD_TAILS_SHARE = 4  # tails whose hold is over write at most max_tails // 4 at once
PACE_POLL_SECONDS = 0.05  # how often add_paced looks for room
ROUTINE_BATCH_SECONDS = 0.5  # pod and child events of one key within this run one reconcile
BURST_GAP_SECONDS = 0.5  # new specs this close together are one burst
BURST_DEFER_SECONDS = 10.0  # a routine event waits out a burst at most this long


class WorkQueue:
    def __init__(
        self,
        max_tails: int = DEFAULT_MAX_TAILS,
        hold_tails: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        """``hold_tails``: what a tail waits for before it takes a slot and runs, or None when it
        need not wait."""
        self._urgent: deque[Key] = deque()
        self._normal: deque[Key] = deque()
        self._items = asyncio.Semaphore(0)  # one release per deque entry
        self._queued: set[Key] = set()
        self._urgent_keys: set[Key] = set()
        self._active: set[Key] = set()
        self._dirty: dict[Key, bool] = {}  # key -> urgent, for keys enqueued while active
        self.known: set[Key] = set()
        self.limiter = RateLimiter()
        self._waiting: dict[Key, asyncio.TimerHandle] = {}  # rate-limited re-adds not due yet
        self._told_to_wait: set[Key] = set()  # waiting keys the apiserver gave a Retry-After
        self._soon: dict[Key, asyncio.TimerHandle] = {}  # routine events being coalesced
        self._since: dict[Key, float] = {}  # loop time a queued key was added (or promoted)
        # Called with (urgent, seconds a key waited in the queue) when a worker takes it.
        self.observe_wait: Callable[[bool, float], None] | None = None
        self.max_tails = max_tails
        self._tail_slots = asyncio.Semaphore(max_tails)
        # Tails whose hold is over write in a lane of their own: at the end of a burst a hundred
        # of them go at once, and in the workers' slots they kept the workers (and the next new
        # specs) waiting for a slot (bench run 75: 2 s in the urgent queue).
        self._held_slots = asyncio.Semaphore(max(1, max_tails // HELD_TAILS_SHARE))
        self._tails: set[asyncio.Task[None]] = set()
        self.hold_tails = hold_tails
        self._holds: dict[Key, asyncio.Future[None]] = {}  # held tails, by key
        self.taken = 0  # keys a worker has taken, ever (to tell a quiet queue from an idle one)
        self._urgent_active = 0  # urgent keys in a worker
        self._last_urgent = float("-inf")  # loop time of the last urgent add or take

    def add_rate_limited(self, key: Key, retry_after: float | None = None) -> float:
        """Re-add ``key`` after its backoff (and no earlier than ``retry_after``); the delay."""
        loop = asyncio.get_running_loop()
        delay = self.limiter.when(key, loop.time(), retry_after)
        previous = self._waiting.pop(key, None)
        if previous is not None:
            previous.cancel()
        if retry_after is not None:
            self._told_to_wait.add(key)
        else:
            self._told_to_wait.discard(key)

        def due() -> None:
            self._waiting.pop(key, None)
            self._told_to_wait.discard(key)
            if key in self.known:
                self.add(key)

        self._waiting[key] = loop.call_later(delay, due)
        return delay

    def forget_failures(self, key: Key) -> None:
        self.limiter.forget(key)

    def add(self, key: Key, urgent: bool = False) -> None:
        self.known.add(key)
        if urgent:
            self._last_urgent = asyncio.get_running_loop().time()
        if key in self._waiting and (not urgent or key in self._told_to_wait):
            return  # backing off: its retry reads the caches then, this event included
        if key in self._active:
            self._dirty[key] = self._dirty.get(key, False) or urgent
            if urgent and key in self._holds:
                self._holds[key].cancel()  # a spec change: the held tail goes now, then the key
            return
        if key in self._queued and (not urgent or key in self._urgent_keys):
            return
        self._queued.add(key)
        self._since[key] = time.monotonic()
        if urgent:
            self._urgent_keys.add(key)
            self._urgent.append(key)
        else:
            self._normal.append(key)
        self._items.release()

    def add_soon(self, key: Key, delay: float = ROUTINE_BATCH_SECONDS) -> None:
        """A routine event (a pod or child changed): add ``key`` after ``delay``, once for every
        event of that key meanwhile. A pod going Pending -> scheduled -> Running -> Ready sends
        four events in a second; one reconcile then sees them all."""
        self.known.add(key)
        if key in self._queued or key in self._soon or key in self._waiting:
            return  # a reconcile that starts later reads the caches, this event included
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BURST_DEFER_SECONDS

        def due() -> None:
            if key not in self.known:
                self._soon.pop(key, None)
                return
            if self.in_burst() and loop.time() < deadline:
                self._soon[key] = loop.call_later(min(delay, max(0.0, deadline - loop.time())), due)
                return
            self._soon.pop(key, None)
            self.add(key)

        self._soon[key] = loop.call_later(delay, due)

    def in_burst(self) -> bool:
        """New specs are arriving: an urgent key is queued or in a worker, or was added or
        taken within ``BURST_GAP_SECONDS``."""
        if self._urgent_keys or self._urgent_active:
            return True
        return asyncio.get_running_loop().time() - self._last_urgent < BURST_GAP_SECONDS

    def add_all(self, keys: Iterable[Key] | None = None) -> None:
        for key in list(self.known if keys is None else keys):
            self.add(key)

    async def add_paced(self, keys: Iterable[Key], at_once: int, poll: float = PACE_POLL_SECONDS) -> None:
        """Add ``keys`` (routine) so that at most ``at_once`` of them are queued or in flight at a
        time: a resync re-applies every child, and all at once it took every worker and thread and
        sent four applies per GLMDeployment to the apiserver in the same second. A key forgotten
        meanwhile (deleted) is skipped; one another event added counts as added."""
        pending = deque(keys)
        mine: set[Key] = set()
        while pending:
            mine = {k for k in mine if k in self._queued or k in self._active}
            while pending and len(mine) < at_once:
                key = pending.popleft()
                if key in self.known:
                    self.add(key)
                    mine.add(key)
            if pending:
                await asyncio.sleep(poll)

    def forget(self, key: Key) -> None:
        self.known.discard(key)
        self.limiter.forget(key)
        self._told_to_wait.discard(key)
        for timers in (self._waiting, self._soon):
            timer = timers.pop(key, None)
            if timer is not None:
                timer.cancel()

    def quiet(self) -> bool:
        """Nothing queued, in a worker, in a tail or waiting out a backoff or a coalescing delay."""
        return not (self._queued or self._active or self._waiting or self._soon)

    def __len__(self) -> int:
        return len(self._queued)

    async def _take(self) -> tuple[Key, bool]:
        while True:
            await self._items.acquire()
            lane = self._urgent if self._urgent else self._normal
            key = lane.popleft()
            if key in self._queued:  # else a stale duplicate of a key promoted to urgent
                self._queued.discard(key)
                urgent = key in self._urgent_keys
                self._urgent_keys.discard(key)
                since = self._since.pop(key, None)
                if since is not None and self.observe_wait is not None:
                    self.observe_wait(urgent, time.monotonic() - since)
                return key, urgent

    @property
    def tails_in_flight(self) -> int:
        return len(self._tails)

    @property
    def tails_held(self) -> int:
        return len(self._holds)

    def in_flight(self, key: Key) -> bool:
        """Whether a worker or a tail holds ``key``."""
        return key in self._active

    def cancel_tails(self) -> list[asyncio.Task[None]]:
        """Cancel every tail in flight; the tasks, to wait for them."""
        tails = list(self._tails)
        for task in tails:
            task.cancel()
        return tails

    def _release(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self.add(key, urgent=self._dirty.pop(key))

    def _start_tail(self, key: Key, tail: Tail) -> None:
        """Run ``tail`` in the background; the caller took a slot for it."""

        async def run() -> None:
            slot: asyncio.Semaphore | None = self._tail_slots
            try:
                urgent_next = self._dirty.get(key, False)
                hold = self.hold_tails() if self.hold_tails is not None and not urgent_next else None
                if hold is not None:
                    self._tail_slots.release()
                    slot = None
                    await self._held(key, hold)
                    await self._held_slots.acquire()
                    slot = self._held_slots
                await tail()
            except Exception as exc:  # a tail handles its failures; this is the last guard
                delay = self.add_rate_limited(key)
                log.warning("tail of %s/%s failed: %s; retry in %.2f s", *key, exc, delay)
            finally:
                if slot is not None:
                    slot.release()
                self._release(key)

        task = asyncio.create_task(run(), name=f"tail-{key[0]}/{key[1]}")
        self._tails.add(task)
        task.add_done_callback(self._tails.discard)

    async def _held(self, key: Key, hold: Awaitable[None]) -> None:
        """Wait for ``hold``, or until an urgent add of ``key`` cancels it."""
        held = asyncio.ensure_future(hold)
        self._holds[key] = held
        try:
            await asyncio.wait({held})  # not cancelled with ``held``; cancelled with the tail
        finally:
            self._holds.pop(key, None)
            held.cancel()

    async def _handle(
        self, key: Key, urgent: bool, handle: Callable[[Key], Awaitable[Tail | None]]
    ) -> Tail | None:
        """``handle(key)``; an urgent key counts as in a worker (``in_burst``) until it returns."""
        if urgent:
            self._urgent_active += 1
        try:
            return await handle(key)
        finally:
            if urgent:
                self._urgent_active -= 1
                self._last_urgent = asyncio.get_running_loop().time()

    async def run_worker(
        self,
        handle: Callable[[Key], Awaitable[Tail | None]],
        gate: Callable[[], Awaitable[None]],
    ) -> None:
        """Process keys forever; ``gate`` waits until this replica may act (leader election).
        A tail ``handle`` returns runs in the background, the key in flight until it ends."""
        while True:
            key, urgent = await self._take()
            self.taken += 1
            self._active.add(key)
            handed_off = False
            try:
                await gate()
                tail = await self._handle(key, urgent, handle)
                if tail is not None:
                    await self._tail_slots.acquire()
                    self._start_tail(key, tail)  # no await in between: nothing cancels it here
                    handed_off = True
            finally:
                if not handed_off:
                    self._release(key)
