"""WorkQueue: de-duplication, urgent lane first, a key never runs twice at once, re-run when dirty."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from glm_operator.controller.workqueue import Key, Tail, WorkQueue


async def _drain(queue: WorkQueue, n: int, delay: float = 0.0) -> list[Key]:
    seen: list[Key] = []
    running: set[Key] = set()

    async def handle(key: Key) -> None:
        assert key not in running, "a key ran on two workers at once"
        running.add(key)
        seen.append(key)
        await asyncio.sleep(delay)
        running.discard(key)

    async def gate() -> None:
        return None

    workers = [asyncio.create_task(queue.run_worker(handle, gate)) for _ in range(3)]
    for _ in range(200):
        if len(seen) >= n:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    for w in workers:
        w.cancel()
    return seen


def test_duplicates_collapse_and_urgent_keys_go_first() -> None:
    async def scenario() -> list[Key]:
        q = WorkQueue()
        for i in range(3):
            q.add(("ns", f"old-{i}"))
            q.add(("ns", f"old-{i}"))
        q.add(("ns", "new"), urgent=True)
        q.add(("ns", "old-2"), urgent=True)  # promoted: runs once, early
        return await _drain(q, 4)

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted([("ns", "old-0"), ("ns", "old-1"), ("ns", "old-2"), ("ns", "new")])
    assert set(seen[:2]) == {("ns", "new"), ("ns", "old-2")}


def test_a_key_added_while_running_runs_once_more_afterwards() -> None:
    async def scenario() -> list[Key]:
        q = WorkQueue()
        key = ("ns", "a")
        q.add(key)
        task = asyncio.create_task(_drain(q, 2, delay=0.1))
        await asyncio.sleep(0.03)  # the first run is in progress
        q.add(key)
        q.add(key)
        return await task

    assert asyncio.run(scenario()) == [("ns", "a"), ("ns", "a")]


def test_add_all_requeues_every_known_key_and_forget_drops_it() -> None:
    q = WorkQueue()
    q.known.update({("a", "1"), ("a", "2")})
    q.forget(("a", "2"))
    q.add_all()
    assert len(q) == 1


def test_backoff_doubles_per_failure_with_jitter_and_resets_on_success() -> None:
    import random

    from glm_operator.controller.ratelimit import RateLimiter

    limiter = RateLimiter(rng=random.Random(1))
    delays = [limiter.when("a", now=0.0) for _ in range(8)]
    for n, delay in enumerate(delays):
        assert 0.9 * 0.005 * 2**n <= delay <= 1.1 * 0.005 * 2**n
    assert limiter.when("b", now=0.0) <= 0.0055  # keys back off independently
    for _ in range(40):
        limiter.when("a", now=0.0)
    assert limiter.when("a", now=0.0) <= 1100.0  # capped at 1000 s (+ jitter)
    limiter.forget("a")
    assert limiter.when("a", now=0.0) <= 0.0055


def test_the_token_bucket_spreads_a_mass_failure_and_retry_after_is_honoured() -> None:
    from glm_operator.controller.ratelimit import RateLimiter

    limiter = RateLimiter(qps=10, burst=100)
    delays = [limiter.when(f"k{i}", now=0.0) for i in range(300)]
    assert max(delays[:100]) < 0.01  # within the burst: only the per-key backoff
    assert 19.0 <= delays[-1] <= 20.1  # 200 beyond the burst at 10/s
    assert limiter.when("k0", now=100.0, retry_after=7.0) >= 7.0


def test_a_rate_limited_key_comes_back_after_its_backoff() -> None:
    async def scenario() -> list[Key]:
        q = WorkQueue()
        q.known.add(("ns", "a"))
        delay = q.add_rate_limited(("ns", "a"), retry_after=0.05)
        assert 0.05 <= delay < 0.1 and len(q) == 0
        return await _drain(q, 1)

    assert asyncio.run(scenario()) == [("ns", "a")]


def test_events_of_a_key_in_backoff_wait_for_its_retry_a_spec_change_not_unless_told() -> None:
    async def scenario(retry_after: float | None) -> tuple[int, int]:
        q = WorkQueue()
        key = ("ns", "a")
        q.known.add(key)
        q.add_rate_limited(key, retry_after=retry_after)
        q.add(key)  # a pod or child event during the backoff
        routine = len(q)
        q.add(key, urgent=True)  # a spec change
        return routine, len(q)

    assert asyncio.run(scenario(None)) == (0, 1)
    assert asyncio.run(scenario(5.0)) == (0, 0)  # the apiserver asked: not before Retry-After


def test_routine_events_of_a_key_are_coalesced_into_one_reconcile() -> None:
    async def scenario() -> tuple[list[Key], int, list[Key]]:
        q = WorkQueue()
        for _ in range(5):  # a pod's Pending -> scheduled -> Running -> Ready, and its child
            q.add_soon(("ns", "a"), delay=0.05)
        q.add_soon(("ns", "b"), delay=0.05)
        queued_before_the_delay = len(q)
        seen = await _drain(q, 2)
        # A key already queued needs no timer; a forgotten one never comes back.
        q.add(("ns", "c"))
        q.add_soon(("ns", "c"), delay=0.05)
        q.add_soon(("ns", "d"), delay=0.05)
        q.forget(("ns", "d"))
        later = await _drain(q, 1)
        return seen, queued_before_the_delay, later

    seen, queued_before_the_delay, later = asyncio.run(scenario())
    assert queued_before_the_delay == 0
    assert sorted(seen) == [("ns", "a"), ("ns", "b")]
    assert later == [("ns", "c")]


def test_the_time_each_key_waited_is_reported_by_lane() -> None:
    waits: list[tuple[bool, float]] = []

    async def scenario() -> None:
        q = WorkQueue()
        q.observe_wait = lambda urgent, seconds: waits.append((urgent, seconds))
        q.add(("ns", "routine"))
        q.add(("ns", "routine"))  # a duplicate: one wait, from the first add
        await asyncio.sleep(0.1)
        q.add(("ns", "new"), urgent=True)
        await _drain(q, 2)

    asyncio.run(scenario())
    assert [u for u, _ in waits] == [True, False]
    urgent_wait, routine_wait = waits[0][1], waits[1][1]
    assert 0 <= urgent_wait < 0.1 <= routine_wait < 5


class Tails:
    """A handler whose every reconcile returns a tail that waits until ``release`` is set."""

    def __init__(self, queue: WorkQueue) -> None:
        self.queue = queue
        self.release = asyncio.Event()
        self.handled: list[Key] = []
        self.tails_done: list[Key] = []
        self.running_tails: set[Key] = set()
        self.most_tails = 0
        self.fail: set[Key] = set()  # keys whose next tail raises
        self.workers: list[asyncio.Task[None]] = []  # set by held_queue

    async def handle(self, key: Key) -> Tail:
        assert key not in self.running_tails, "a key ran while its tail was still running"
        self.handled.append(key)

        async def tail() -> None:
            self.running_tails.add(key)
            self.most_tails = max(self.most_tails, len(self.running_tails))
            try:
                await self.release.wait()
                if key in self.fail:
                    self.fail.discard(key)
                    raise RuntimeError("status write refused")
            finally:
                self.running_tails.discard(key)
            self.tails_done.append(key)

        return tail

    def start(self, workers: int) -> list[asyncio.Task[None]]:
        async def gate() -> None:
            return None

        return [asyncio.create_task(self.queue.run_worker(self.handle, gate)) for _ in range(workers)]

    def stop(self) -> None:
        for w in self.workers:
            w.cancel()


async def wait_until(check: Callable[[], bool], seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_a_key_whose_tail_runs_is_not_taken_again_but_its_worker_takes_the_next_key() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        t = Tails(q)
        workers = t.start(1)  # one worker: it must be free while the tail runs
        q.add(("ns", "a"))
        await wait_until(lambda: t.running_tails == {("ns", "a")})
        q.add(("ns", "b"))
        q.add(("ns", "a"))  # e.g. the echo of its own status write: waits for the tail
        await wait_until(lambda: t.handled == [("ns", "a"), ("ns", "b")])
        await asyncio.sleep(0.05)
        assert t.handled == [("ns", "a"), ("ns", "b")] and q.in_flight(("ns", "a"))
        t.release.set()
        await wait_until(lambda: len(t.handled) == 3 and not q.tails_in_flight)
        await asyncio.sleep(0.05)
        assert t.handled == [("ns", "a"), ("ns", "b"), ("ns", "a")]  # once more, after its tail
        assert t.tails_done.index(("ns", "a")) < 2
        for w in workers:
            w.cancel()

    asyncio.run(scenario())


def test_adds_during_a_tail_run_exactly_once_after_it_with_the_urgent_flag() -> None:
    async def scenario() -> list[bool]:
        q = WorkQueue()
        lanes: list[bool] = []
        q.observe_wait = lambda urgent, _: lanes.append(urgent)
        t = Tails(q)
        workers = t.start(3)
        key = ("ns", "a")
        q.add(key)
        await wait_until(lambda: key in t.running_tails)
        q.add(key)
        q.add(key, urgent=True)  # a spec change while the status write is on the wire
        q.add(key)
        await asyncio.sleep(0.05)
        assert len(t.handled) == 1 and len(q) == 0
        t.release.set()
        await wait_until(lambda: len(t.tails_done) == 2)
        await asyncio.sleep(0.05)
        assert t.handled == [key, key]
        for w in workers:
            w.cancel()
        return lanes

    assert asyncio.run(scenario()) == [False, True]


def test_a_failing_tail_re_adds_its_key_with_backoff() -> None:
    async def scenario() -> None:
        from glm_operator.controller.ratelimit import RateLimiter

        q = WorkQueue()
        q.limiter = RateLimiter(base=0.2, jitter=0.0)
        t = Tails(q)
        t.release.set()
        key = ("ns", "a")
        t.fail.add(key)
        workers = t.start(2)
        q.add(key)
        await wait_until(lambda: key in q._waiting)  # backing off, not queued at once
        failed_at = asyncio.get_running_loop().time()
        assert len(q) == 0 and not q.in_flight(key)
        q.add(key)  # a routine event during the backoff does not run it earlier
        await wait_until(lambda: t.tails_done == [key])  # the retry ran after the backoff
        assert asyncio.get_running_loop().time() - failed_at >= 0.15
        assert t.handled == [key, key]
        for w in workers:
            w.cancel()

    asyncio.run(scenario())


def test_no_more_tails_than_the_bound_run_at_once() -> None:
    async def scenario() -> None:
        q = WorkQueue(max_tails=2)
        t = Tails(q)
        workers = t.start(3)
        for i in range(6):
            q.add(("ns", f"k{i}"))
        # Two tails hold the slots; each worker then holds one key waiting for a slot.
        await wait_until(lambda: len(t.handled) == 5)
        await asyncio.sleep(0.1)
        assert q.tails_in_flight == 2 and len(t.running_tails) == 2
        assert len(t.handled) == 5 and len(q) == 1  # the sixth waits for a worker
        t.release.set()
        await wait_until(lambda: len(t.tails_done) == 6)
        assert t.most_tails == 2
        for w in workers:
            w.cancel()

    asyncio.run(scenario())


def test_cancel_tails_cancels_every_status_write_in_flight_and_releases_their_keys() -> None:
    async def scenario() -> None:
        q = WorkQueue()
        t = Tails(q)
        workers = t.start(2)
        q.add(("ns", "a"))
        q.add(("ns", "b"))
        await wait_until(lambda: q.tails_in_flight == 2)
        for w in workers:
            w.cancel()
        tails = q.cancel_tails()
        await asyncio.gather(*tails, return_exceptions=True)
        assert all(task.cancelled() for task in tails)
        assert t.tails_done == [] and q.tails_in_flight == 0
        assert not q.in_flight(("ns", "a")) and not q.in_flight(("ns", "b"))

    asyncio.run(scenario())


class Hold:
    """``hold_tails`` for a WorkQueue: tails wait while ``busy`` (like status writes while
    workload writes are on the wire)."""

    def __init__(self) -> None:
        self.busy = True
        self.over = asyncio.Event()
        self.asked = 0

    def __call__(self) -> asyncio.Future[bool] | None:
        self.asked += 1
        return asyncio.ensure_future(self.over.wait()) if self.busy else None

    def end(self) -> None:
        self.busy = False
        self.over.set()


def held_queue(max_tails: int, workers: int, release: bool = True) -> tuple[Hold, WorkQueue, Tails]:
    """A WorkQueue whose tails are held by a ``Hold``, with ``workers`` running ``Tails``
    (cancelled with ``Tails.stop``); ``release``: the tails finish at once once let go."""
    hold = Hold()
    q = WorkQueue(max_tails=max_tails, hold_tails=hold)
    t = Tails(q)
    if release:
        t.release.set()
    t.workers = t.start(workers)
    return hold, q, t


def test_held_tails_give_their_slot_back_so_the_workers_go_on_and_run_after_the_hold() -> None:
    """One tail slot, one worker: six keys whose tails are held all get reconciled (a held tail
    does not keep the worker waiting for a slot, as it did in bench run 71); when the hold ends
    they write one at a time; a tail asked for when nothing holds goes at once."""

    async def scenario() -> None:
        hold, q, t = held_queue(max_tails=1, workers=1)
        keys = [("ns", f"k{i}") for i in range(6)]
        for key in keys:
            q.add(key)
        await wait_until(lambda: len(t.handled) == 6 and q.tails_held == 6)
        await asyncio.sleep(0.05)
        assert t.tails_done == [] and all(q.in_flight(k) for k in keys)
        hold.end()
        await wait_until(lambda: len(t.tails_done) == 6)
        assert t.most_tails == 1 and q.tails_held == 0 and q.tails_in_flight == 0
        assert not any(q.in_flight(k) for k in keys)
        q.add(("ns", "late"))
        await wait_until(lambda: ("ns", "late") in t.tails_done)
        t.stop()

    asyncio.run(scenario())


def test_tails_whose_hold_is_over_write_in_their_own_lane_and_leave_the_workers_slots_free() -> None:
    """Two tail slots, so a lane of one for tails whose hold is over: when three held tails are
    let go at once they write one at a time, and meanwhile a new key's tail still gets a worker's
    slot at once (in bench run 75 the let-go tails took every slot and new specs waited 2 s)."""

    async def scenario() -> None:
        hold, q, t = held_queue(max_tails=2, workers=2, release=False)  # tails wait for t.release
        held = [("ns", f"h{i}") for i in range(3)]
        for key in held:
            q.add(key)
        await wait_until(lambda: q.tails_held == 3)
        hold.end()
        await wait_until(lambda: len(t.running_tails) == 1)
        await asyncio.sleep(0.05)
        assert len(t.running_tails & set(held)) == 1  # one writes, two wait for the lane
        q.add(("ns", "new"))
        await wait_until(lambda: ("ns", "new") in t.running_tails)
        t.release.set()
        await wait_until(lambda: len(t.tails_done) == 4)
        assert q._tail_slots._value == 2 and q._held_slots._value == 1
        t.stop()

    asyncio.run(scenario())


def test_a_spec_change_ends_the_hold_of_its_key_and_runs_after_its_tail() -> None:
    async def scenario() -> None:
        hold, q, t = held_queue(max_tails=2, workers=2)
        a, b = ("ns", "a"), ("ns", "b")
        q.add(a)
        q.add(b)
        await wait_until(lambda: q.tails_held == 2)
        q.add(a)  # routine (its pods): waits for the held tail
        await asyncio.sleep(0.05)
        assert t.tails_done == [] and t.handled.count(a) == 1
        q.add(a, urgent=True)  # a spec change: a's tail goes now, then a runs again
        await wait_until(lambda: t.handled.count(a) == 2)
        assert a in t.tails_done and b not in t.tails_done and q.tails_held >= 1
        hold.end()
        await wait_until(lambda: b in t.tails_done and t.tails_done.count(a) == 2)
        t.stop()

    asyncio.run(scenario())


def test_cancelled_held_tails_release_their_keys_and_leave_the_slots_whole() -> None:
    async def scenario() -> None:
        hold, q, t = held_queue(max_tails=2, workers=2)
        for i in range(3):
            q.add(("ns", f"k{i}"))
        await wait_until(lambda: q.tails_held == 3)
        tails = q.cancel_tails()  # lost leadership
        await asyncio.gather(*tails, return_exceptions=True)
        assert t.tails_done == [] and q.tails_held == 0 and q.tails_in_flight == 0
        assert not any(q.in_flight(("ns", f"k{i}")) for i in range(3))
        hold.busy = False
        for i in range(3):
            q.add(("ns", f"k{i}"))
        await wait_until(lambda: len(t.tails_done) == 3)
        assert t.most_tails <= 2 and q._tail_slots._value == 2
        t.stop()

    asyncio.run(scenario())


def test_a_paced_resync_keeps_at_most_its_share_of_keys_in_the_queue_and_runs_them_all() -> None:
    """With 8 workers free, a resync of 30 keys paced at 3 never has more than 3 of its keys
    queued or in a worker; every key still runs once; a key deleted meanwhile is skipped; an
    urgent key added during the resync runs at once (the workers are not all taken)."""

    async def scenario() -> None:
        q = WorkQueue()
        keys = [("ns", f"k{i:02d}") for i in range(30)]
        q.known.update(keys)
        running: set[Key] = set()
        peak, seen = 0, []

        async def handle(key: Key) -> None:
            nonlocal peak
            running.add(key)
            peak = max(peak, len(running & set(keys)))
            seen.append(key)
            await asyncio.sleep(0.02)
            running.discard(key)

        async def gate() -> None:
            return None

        workers = [asyncio.create_task(q.run_worker(handle, gate)) for _ in range(8)]
        resync = asyncio.create_task(q.add_paced(keys, 3, poll=0.005))
        await wait_until(lambda: len(seen) >= 5)
        q.forget(("ns", "k29"))  # deleted during the resync
        q.known.add(("ns", "new"))
        q.add(("ns", "new"), urgent=True)
        await wait_until(lambda: ("ns", "new") in seen, 0.5)
        assert seen.index(("ns", "new")) < 12, seen
        await asyncio.wait_for(resync, 5)
        await wait_until(lambda: len(seen) == 30)
        assert peak == 3
        assert sorted(k for k in seen if k != ("ns", "new")) == keys[:29]
        for w in workers:
            w.cancel()

    asyncio.run(scenario())


def test_routine_events_wait_out_a_burst_of_new_specs_at_most_their_cap(monkeypatch: Any) -> None:
    """A pod event of ``a`` while new specs keep arriving waits until they stop (the burst is over
    ``BURST_GAP_SECONDS`` after the last one), not the usual coalescing delay; with new specs
    arriving forever it waits ``BURST_DEFER_SECONDS`` at most; outside a burst it goes after the
    coalescing delay."""
    from glm_operator.controller import workqueue

    monkeypatch.setattr(workqueue, "BURST_GAP_SECONDS", 0.2)
    monkeypatch.setattr(workqueue, "BURST_DEFER_SECONDS", 1.0)

    async def scenario() -> None:
        q = WorkQueue()
        taken: list[tuple[Key, float]] = []
        loop = asyncio.get_running_loop()

        async def handle(key: Key) -> None:
            taken.append((key, loop.time()))
            await asyncio.sleep(0.01)

        async def gate() -> None:
            return None

        workers = [asyncio.create_task(q.run_worker(handle, gate)) for _ in range(2)]
        a = ("ns", "a")
        start = loop.time()
        q.add_soon(a, delay=0.05)
        for i in range(6):  # new specs every 0.1 s for 0.6 s
            q.add(("ns", f"new-{i}"), urgent=True)
            last_add = loop.time() - start
            await asyncio.sleep(0.1)
        await wait_until(lambda: a in [k for k, _ in taken])
        when = dict(taken)[a] - start
        assert last_add + 0.2 - 0.01 <= when < 1.0, (last_add, when)  # after the burst, not 0.05 s

        taken.clear()
        start = loop.time()
        q.add_soon(a, delay=0.05)
        stop = loop.time() + 2.0
        while loop.time() < stop and a not in [k for k, _ in taken]:
            q.add(("ns", f"more-{loop.time()}"), urgent=True)
            await asyncio.sleep(0.05)
        when = dict(taken)[a] - start
        assert 0.95 <= when < 1.5, when  # the cap, though the burst never ended

        await asyncio.sleep(0.3)  # quiet: no burst
        taken.clear()
        start = loop.time()
        q.add_soon(a, delay=0.05)
        await wait_until(lambda: a in [k for k, _ in taken])
        assert dict(taken)[a] - start < 0.2
        for w in workers:
            w.cancel()

    asyncio.run(scenario())
