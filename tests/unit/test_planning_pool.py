"""PlanningPool: new specs first, catalog models before inline configs, errors handed back."""

from __future__ import annotations

import threading
import time

import pytest

from glm_operator.controller.planning_pool import PlanningPool


def test_urgent_then_fast_then_first_come_while_the_threads_are_busy() -> None:
    pool = PlanningPool(threads=1)
    gate = threading.Event()
    order: list[str] = []
    started = threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(5)

    blocker = pool.submit(hold)  # holds the only thread while the others queue
    assert started.wait(5)
    futures = [
        pool.submit(order.append, "routine-1"),
        pool.submit(order.append, "urgent-inline", urgent=True, slow=True),
        pool.submit(order.append, "routine-inline", slow=True),
        pool.submit(order.append, "urgent-1", urgent=True),
        pool.submit(order.append, "routine-2"),
        pool.submit(order.append, "urgent-2", urgent=True),
    ]
    assert pool.queued() == 6
    gate.set()
    assert blocker.result(5) is True
    for f in futures:
        f.result(5)
    assert order == ["urgent-1", "urgent-2", "urgent-inline", "routine-1", "routine-2", "routine-inline"]
    pool.shutdown()


def test_a_planner_exception_reaches_the_caller_and_the_thread_lives_on() -> None:
    pool = PlanningPool(threads=1)
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(5)
    assert pool.submit(lambda: 42).result(5) == 42
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: 1)


def test_one_plan_at_a_time_while_plans_are_quick_on_several_threads() -> None:
    pool = PlanningPool(threads=3, stall_seconds=5.0)
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    def plan(i: int) -> int:
        with lock:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
        end = time.monotonic() + 0.02  # CPU for longer than the GIL's switch interval (5 ms)
        while time.monotonic() < end:
            pass
        with lock:
            at_once[0] -= 1
        return i

    futures = [pool.submit(plan, i) for i in range(20)]
    assert [f.result(10) for f in futures] == list(range(20))
    assert at_once[1] == 1, "quick plans ran on several threads at once (time-sliced under the GIL)"
    pool.shutdown()


def test_a_stalled_plan_lets_the_next_start_on_another_thread_after_stall_seconds() -> None:
    pool = PlanningPool(threads=2, stall_seconds=0.3)
    gate = threading.Event()
    started = threading.Event()

    def stalled() -> bool:
        started.set()
        return gate.wait(10)

    blocker = pool.submit(stalled)
    assert started.wait(5)
    t0 = time.monotonic()
    quick = pool.submit(time.monotonic)
    ran_at = quick.result(5)
    assert 0.2 <= ran_at - t0 < 3.0, "the next plan waited for the stalled one's end, or did not wait at all"
    assert pool.running() == 1 and not blocker.done()
    gate.set()
    assert blocker.result(5) is True
    pool.shutdown()
