"""Threads that run the planner (``compute_desired``), most urgent first.

Planning is CPU-bound Python: threads give it no parallelism (the GIL), only latency. With one
thread per worker, a burst of re-plans time-sliced every plan together, and the event loop (watch
events, applies) got a sliver of the interpreter between them. So a few threads take plans from
a priority queue instead:

1. new specs (``urgent``: generation not planned yet) before re-plans of planned ones;
2. catalog models before inline ``config.json`` specs (the only plans that can take long);
3. first come, first served.

More than one thread, so a plan that overruns its time bound (``reconcile.plan``) does not stop
the others; a thread stays busy until such a plan returns.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
DEFAULT_THREADS = 3


class PlanningPool:
    def __init__(self, threads: int = DEFAULT_THREADS, name: str = "planning") -> None:
        self._heap: list[tuple[tuple[int, int, int], Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
            for i in range(max(1, threads))
        ]
        self._started = False  # threads start with the first plan (an idle Operator has none)

    def submit(
        self, fn: Callable[..., T], *args: Any, urgent: bool = False, slow: bool = False
    ) -> concurrent.futures.Future[T]:
        """Run ``fn(*args)`` on a planning thread; ``urgent`` and not ``slow`` go first."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the awaiting reconcile
                future.set_exception(exc)

        with self._cond:
            if self._closed:
                raise RuntimeError("the planning pool is shut down")
            heapq.heappush(self._heap, ((0 if urgent else 1, 1 if slow else 0, next(self._seq)), job))
            self._cond.notify()
            if not self._started:
                self._started = True
                for t in self._threads:
                    t.start()
        return future

    def queued(self) -> int:
        with self._cond:
            return len(self._heap)

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap and not self._closed:
                    self._cond.wait()
                if not self._heap:
                    return
                _, job = heapq.heappop(self._heap)
            job()
