"""PlanningPool: new specs first, catalog models before inline configs, errors handed back."""

from __future__ import annotations

import threading

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
