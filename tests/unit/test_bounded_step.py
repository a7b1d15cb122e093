"""``controller.retry.bounded_step``: the autoscaler's and the KV-cache reader's steps run holding
their shared semaphore, and a failing step is one warning on the caller's logger, never raised (the
loop runs it again at its next tick; the other keys' steps carry on)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from glm_operator.controller.retry import bounded_step
from glm_operator.controller.workqueue import Key

LOG = logging.getLogger("glm_operator.test_bounded_step")


def test_a_failing_step_is_logged_on_the_callers_logger_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[Key] = []
    running = 0
    most = 0

    async def step(key: Key) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        if key[1] == "bad":
            raise RuntimeError("boom")
        ran.append(key)

    async def main() -> None:
        semaphore = asyncio.Semaphore(2)
        keys = [("ns", "a"), ("ns", "bad"), ("ns", "b"), ("ns", "c")]
        await asyncio.gather(*(bounded_step(semaphore, step, k, "test step", LOG) for k in keys))

    with caplog.at_level(logging.WARNING, logger=LOG.name):
        asyncio.run(main())
    assert sorted(ran) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    assert most == 2
    warnings = [r for r in caplog.records if r.name == LOG.name]
    assert [r.getMessage() for r in warnings] == ["test step for ns/bad failed: boom"]
