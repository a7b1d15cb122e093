"""A clock the tests move by hand (``glm_operator.controller.clock.Clock``): no test of the
controller's timing waits for real time."""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

START = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


@dataclass(order=True)
class _Timer:
    due: float
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, start: dt.datetime = START) -> None:
        self._now = 0.0
        self._start = start
        self._timers: list[_Timer] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def now(self) -> dt.datetime:
        return self._start + dt.timedelta(seconds=self._now)

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + max(0.0, delay), next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer that falls due, in order."""
        end = self._now + seconds
        while self._timers and self._timers[0].due <= end:
            timer = heapq.heappop(self._timers)
            self._now = max(self._now, timer.due)
            if not timer.cancelled:
                timer.callback()
        self._now = end

    def pending(self) -> list[float]:
        """Due times of the timers not fired nor cancelled."""
        return sorted(t.due for t in self._timers if not t.cancelled)
