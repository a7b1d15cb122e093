"""Kubernetes Events about GLMDeployments and GLMGateways, posted in the background as client-go's
recorder does.

A reconcile does not wait for its Events; at most ``MAX_IN_FLIGHT`` are posted at once, after the
workload writes on the wire (``Applier.after_workload_writes``: a burst writes workloads first). Posting is
best effort: a failure is logged at info and never fails a reconcile. At shut-down the Events in
flight get ``flush``'s timeout while this replica still leads; what is left is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from glm_operator.clients.kube import KubeClient, summarize_api_error
from glm_operator.desired.model import Event

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4


class EventRecorder:
    def __init__(self, api: KubeClient, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        """``hold``: what a post waits for first (the workload writes on the wire, bounded)."""
        self.api = api
        self.hold = hold
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, about: Mapping[str, Any], events: Sequence[Event]) -> None:
        """Post ``events`` about ``about`` (a GLMDeployment or GLMGateway body), in order, without
        waiting."""
        if not events:
            return
        task = asyncio.create_task(self._post(about, list(events)), name="events")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, about: Mapping[str, Any], events: list[Event]) -> None:
        meta = about.get("metadata") or {}
        if self.hold is not None:
            await self.hold()
        async with self._slots:
            for event in events:
                try:
                    await asyncio.to_thread(
                        self.api.create_event,
                        about,
                        reason=event.reason,
                        message=event.message,
                        type_=event.type,
                    )
                except Exception as exc:
                    where = f"{meta.get('namespace')}/{meta.get('name')}"
                    error = summarize_api_error(exc).line()
                    log.info("event %s on %s not posted: %s", event.reason, where, error)

    async def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the Events in flight, then drop the rest."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        self.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
