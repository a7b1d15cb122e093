"""Time, injected: the controller reads the clock and schedules timers only through a ``Clock``.

Production uses ``LoopClock`` (the monotonic time asyncio's loop runs on and the loop's timers, and
the wall clock for timestamps written to status): one clock for every component, the leader
election's thread included. Tests pass a manual clock they advance by hand, so no test
of the controller's timing waits for real time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (timeouts, backoffs)."""

    def now(self) -> dt.datetime:
        """The wall-clock time, UTC (timestamps in status and Events)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` after ``delay`` seconds."""


class LoopClock:
    """The asyncio loop's clock and timers; the system's wall clock."""

    def monotonic(self) -> float:
        return time.monotonic()  # what the loop's time() reads, from any thread

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


def rfc3339(moment: dt.datetime) -> str:
    """The timestamp format of status and conditions (seconds, UTC, 'Z')."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
