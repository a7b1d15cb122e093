"""WorkQueue: de-duplication, urgent lane first, a key never runs twice at once, re-run when dirty."""

from __future__ import annotations

import asyncio

from glm_operator.controller.workqueue import Key, WorkQueue


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
