"""WorkQueue on a manual clock: de-duplication, one worker per key, re-run when dirty, backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from glm_operator.controller.ratelimit import RateLimiter
from glm_operator.controller.workqueue import Key, WorkQueue
from tests.harness.clock import ManualClock
from tests.harness.controller import drain

A, B, C = ("ns", "a"), ("ns", "b"), ("ns", "c")


def queue() -> tuple[WorkQueue[Key], ManualClock]:
    clock = ManualClock()
    return WorkQueue(clock, RateLimiter(jitter=0.0)), clock


def test_duplicates_collapse_and_keys_come_in_order() -> None:
    q, _ = queue()
    for key in (A, B, A, C, B):
        q.add(key)
    assert drain(q) == [A, B, C]


def test_a_key_added_while_processing_runs_once_more_after_done_and_never_twice_at_once() -> None:
    async def scenario() -> list[Key]:
        q, _ = queue()
        q.add(A)
        first = await q.get()
        q.add(A)
        q.add(A)
        assert len(q) == 0, "not queued while a worker holds it"
        q.done(first)
        assert len(q) == 1
        second = await q.get()
        q.done(second)
        return [first, second]

    assert asyncio.run(scenario()) == [A, A]


def test_a_rate_limited_key_comes_back_after_its_backoff_and_forget_resets_it() -> None:
    q, clock = queue()
    delays = [q.add_rate_limited(A) for _ in range(4)]
    assert delays == [0.005, 0.01, 0.02, 0.04]
    assert len(q) == 0
    clock.advance(0.0049)
    assert len(q) == 0
    clock.advance(0.0001)
    assert drain(q) == [A], "the earliest retry wins; later ones add nothing new"
    clock.advance(1.0)
    assert drain(q) == []
    q.forget(A)
    assert q.add_rate_limited(A) == 0.005


def test_an_event_runs_a_key_at_once_even_during_its_backoff() -> None:
    """client-go's Add: new information is not held back by a retry scheduled for old one (after
    an apiserver outage, the keys that failed during it run as soon as their events arrive)."""
    q, _ = queue()
    for _ in range(20):
        q.add_rate_limited(A)  # a long backoff
    q.add(A)
    assert drain(q) == [A]


def test_retry_after_holds_every_add_of_the_key_until_then() -> None:
    q, clock = queue()
    delay = q.add_rate_limited(A, retry_after=7.0)
    assert delay == 7.0
    q.add(A)
    q.add(B)
    assert drain(q) == [B]
    clock.advance(7.0)
    assert drain(q) == [A]
    q.add(A)
    assert drain(q) == [A], "after the time asked for, events run at once again"


def test_add_after_keeps_the_earliest_and_remove_drops_pending_timers() -> None:
    q, clock = queue()
    q.add_after(A, 10.0)
    q.add_after(A, 3.0)
    q.add_after(A, 5.0)
    assert clock.pending() == [3.0]
    q.add_after(B, 4.0)
    q.remove(B)
    clock.advance(10.0)
    assert drain(q) == [A]


def test_wait_times_are_reported_when_a_worker_takes_a_key() -> None:
    q, clock = queue()
    waited: list[float] = []
    q.observe_wait = waited.append
    q.add(A)
    clock.advance(2.5)
    drain(q)
    assert waited == [2.5]


def test_workers_never_run_one_key_twice_at_once_and_a_failure_is_retried() -> None:
    async def scenario() -> tuple[list[Key], list[float]]:
        q, clock = queue()
        running: set[Key] = set()
        seen: list[Key] = []
        fail_once = {B}

        async def handle(key: Key) -> None:
            assert key not in running, "a key ran on two workers at once"
            running.add(key)
            seen.append(key)
            await asyncio.sleep(0)
            if key == A and seen.count(A) == 1:
                q.add(key)  # an event during its run
            await asyncio.sleep(0)
            running.discard(key)
            if key in fail_once:
                fail_once.discard(key)
                raise RuntimeError("boom")

        async def gate() -> None:
            return None

        workers = [asyncio.create_task(q.run_worker(handle, gate)) for _ in range(3)]
        for key in (A, B, C):
            q.add(key)
        for _ in range(50):
            await asyncio.sleep(0)
        retry = clock.pending()
        clock.advance(1.0)
        for _ in range(50):
            await asyncio.sleep(0)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return seen, retry

    seen, retry = asyncio.run(scenario())
    assert sorted(seen) == [A, A, B, B, C]
    assert retry == [0.005], "the failed key came back after its backoff"


def test_the_gate_holds_every_worker_until_it_opens() -> None:
    async def scenario() -> list[Key]:
        q, _ = queue()
        open_ = asyncio.Event()
        seen: list[Key] = []

        async def handle(key: Key) -> None:
            seen.append(key)

        gate: Callable[[], Awaitable[bool]] = open_.wait
        worker = asyncio.create_task(q.run_worker(handle, gate))  # type: ignore[arg-type]
        q.add(A)
        for _ in range(10):
            await asyncio.sleep(0)
        before = list(seen)
        open_.set()
        for _ in range(10):
            await asyncio.sleep(0)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        assert before == []
        return seen

    assert asyncio.run(scenario()) == [A]


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
