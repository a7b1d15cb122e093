"""Operator.stop, the cleanup on SIGTERM, leaves no task running (kopf waits 5 s for any it finds)
and gives the Events in flight a bounded moment, in-process; tests/e2e/test_operator_stop.py runs
the real process against the real kube-apiserver."""

from __future__ import annotations

import asyncio
import copy

import pytest

from glm_operator.controller import runtime
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.desired import Event
from glm_operator.controller.runtime import Operator

from .test_slow_applies import BODY, SlowServiceApi

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "g-l4", "namespace": "llm"},
}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "g", "namespace": "llm"}}


async def stop_with_a_workload_write_on_the_wire(
    release_after: float | None,
) -> tuple[SlowServiceApi, Operator]:
    """A Deployment apply on the wire; behind it, an Event and a Service apply wait (as in a burst)."""
    api = SlowServiceApi(slow_kind="Deployment")
    op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
    workload = op.submit_apply(copy.deepcopy(DEPLOYMENT))
    companion = op.submit_apply(copy.deepcopy(SERVICE))
    assert op.was_held(companion)
    op.post_events(copy.deepcopy(BODY), [Event("Normal", "Planned", "planned")])
    await asyncio.sleep(0.05)
    if release_after is not None:
        asyncio.get_running_loop().call_later(release_after, api.release.set)
    await op.stop()
    assert asyncio.all_tasks() == {asyncio.current_task()}, "a task left for kopf to wait out"
    assert op.stop_flag.is_set()
    assert companion.cancelled()
    api.release.set()
    await asyncio.wait_for(workload, 5)  # the thread's write ends on its own
    return api, op


def test_an_event_waiting_behind_a_workload_write_is_posted_before_the_lease_goes() -> None:
    api, _ = asyncio.run(stop_with_a_workload_write_on_the_wire(release_after=0.2))
    assert api.events == ["Planned"]
    assert "Service" not in api.applied  # the next leader's first reconcile applies it


def test_an_event_still_held_after_the_flush_is_dropped_and_stop_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime, "EVENT_FLUSH_SECONDS", 0.3)
    api, _ = asyncio.run(stop_with_a_workload_write_on_the_wire(release_after=None))
    assert api.events == []
