"""Threads that run the planner (``compute_desired``), most urgent first.

Planning is CPU-bound Python: threads give it no parallelism (the GIL), only latency. With one
thread per worker, a burst of re-plans time-sliced every plan together, and the event loop (watch
events, applies) got a sliver of the interpreter between them. So a few threads take plans from
a priority queue instead:

1. new specs (``urgent``: generation not planned yet) before re-plans of planned ones;
2. catalog models before inline ``config.json`` specs (the only plans that can take long);
3. first come, first served.

More than one thread, so a plan that overruns its time bound (``reconcile.plan``) does not stop
the others; a thread stays busy until such a plan returns. But one plan at a time while plans are
quick: a second thread starts a plan only once every running one has run ``stall_seconds``. Plans
on several threads do not run in parallel (the GIL), they time-slice, and each CPU-bound thread
takes another share of the interpreter from the event loop: with three plans at once in a burst
the loop (watch events, handlers, the start of applies) got about a quarter of it; one after the
other, each plan also finishes sooner.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
DEFAULT_THREADS = 3
# A plan running this long lets the next one start on another thread (a catalog model's plan takes
# milliseconds; an inline config.json can take seconds).
STALL_SECONDS = 0.5


class PlanningPool:
    def __init__(
        self, threads: int = DEFAULT_THREADS, name: str = "planning", stall_seconds: float = STALL_SECONDS
    ) -> None:
        self._heap: list[tuple[tuple[int, int, int], Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._closed = False
        self.stall_seconds = stall_seconds
        self._running: dict[int, float] = {}  # job number -> when it started (time.monotonic)
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

    def running(self) -> int:
        with self._cond:
            return len(self._running)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        if self._closed:
                            return
                        self._cond.wait()
                        continue
                    now = time.monotonic()
                    youngest = max(self._running.values(), default=None)
                    if youngest is None or now - youngest >= self.stall_seconds:
                        break
                    # another plan runs and is not stalled: wait for it to end (notified) or stall
                    self._cond.wait(timeout=self.stall_seconds - (now - youngest))
                _, job = heapq.heappop(self._heap)
                number = next(self._seq)
                self._running[number] = time.monotonic()
            try:
                job()
            finally:
                with self._cond:
                    del self._running[number]
                    self._cond.notify()
