"""Re-plan every GLMDeployment when the GPU supply changes, at most once per interval.

Nodes registering or being labelled one after another, or a node autoscaler's pool changing,
would each re-plan every GLMDeployment; instead the first change schedules one re-plan after
``delay`` and further changes within ``min_interval`` of the last re-plan join the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from glm_operator.controller.clock import Clock

log = logging.getLogger(__name__)

REPLAN_DELAY = 1.0  # seconds from the first change of a burst to its re-plan
REPLAN_MIN_INTERVAL = 5.0  # seconds between two re-plans of every GLMDeployment


class Replanner:
    def __init__(self, clock: Clock, replan_all: Callable[[str], None]) -> None:
        """``replan_all(why)`` enqueues every GLMDeployment."""
        self.clock = clock
        self.replan_all = replan_all
        self._pending = False
        self._last = float("-inf")
        self._why: dict[str, int] = {}

    def supply_changed(self, what: str) -> None:
        """Something the planner reads about the GPU supply changed (``what``: for the log)."""
        self._why[what] = self._why.get(what, 0) + 1
        if self._pending:
            return
        self._pending = True
        delay = max(REPLAN_DELAY, self._last + REPLAN_MIN_INTERVAL - self.clock.monotonic())
        self.clock.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._pending = False
        self._last = self.clock.monotonic()
        why, self._why = self._why, {}
        self.replan_all(", ".join(f"{what} {n}" for what, n in sorted(why.items())))
