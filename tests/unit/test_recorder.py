"""Events are posted in the background, in order, best effort; at shut-down the ones in flight get
a bounded moment and nothing is left running."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from glm_operator.controller.recorder import EventRecorder
from glm_operator.desired.model import Event
from tests.harness.fake_api import FakeApi, api_error
from tests.harness.scenarios import BODY


class SlowApi(FakeApi):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def create_event(self, involved: Any, **kwargs: Any) -> None:
        assert self.release.wait(5)
        super().create_event(involved, **kwargs)


def test_events_are_posted_in_order_without_waiting_and_a_failure_is_only_logged() -> None:
    async def scenario() -> FakeApi:
        api = FakeApi()
        recorder = EventRecorder(api)  # type: ignore[arg-type]
        recorder.post(BODY, [Event("Normal", "Planned", "a"), Event("Warning", "InsufficientGPU", "b")])
        await recorder.flush(5.0)
        api.create_event = lambda *a, **k: (_ for _ in ()).throw(api_error(500))  # type: ignore[method-assign]
        recorder.post(BODY, [Event("Normal", "Planned", "c")])
        await recorder.flush(5.0)
        return api

    assert [e[1] for e in asyncio.run(scenario()).events] == ["Planned", "InsufficientGPU"]


def test_flush_waits_for_events_in_flight_then_drops_the_rest_and_leaves_no_task() -> None:
    async def scenario(release_after: float | None) -> list[str]:
        api = SlowApi()
        recorder = EventRecorder(api)  # type: ignore[arg-type]
        recorder.post(BODY, [Event("Normal", "Planned", "planned")])
        if release_after is not None:
            asyncio.get_running_loop().call_later(release_after, api.release.set)
        await recorder.flush(0.5)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        posted = [reason for _, reason, _ in api.events]
        api.release.set()  # the thread of a dropped post may still finish; nothing waits for it
        return posted

    assert asyncio.run(scenario(0.05)) == ["Planned"]
    assert asyncio.run(scenario(None)) == [], "flush returned without waiting for a stuck post"
