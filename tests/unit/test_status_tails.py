"""The status write of a reconcile runs as a work-queue tail (runtime.reconcile_key, in-process).

The apiserver is a stand-in here so the test can hold a status write and refuse it on purpose
(409 conflict, 429 with Retry-After); the e2e tests run the same path against the real
kube-apiserver.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.runtime import Operator
from tests.unit.test_slow_applies import BODY, NODES, SlowServiceApi
from tests.unit.test_workqueue import wait_until


class SlowStatusApi(SlowServiceApi):
    """Applies succeed at once; a status write waits for ``status_release``, then raises the
    next of ``errors`` (if any) or succeeds."""

    def __init__(self) -> None:
        super().__init__(slow_kind="none")
        self.status_release = threading.Event()
        self.errors: list[ApiException] = []
        self.writes: list[tuple[str, float]] = []  # (name, when sent)
        self.lock = threading.Lock()
        self.events: list[str] = []  # reasons of the Events posted

    def create_event(self, *_: Any, **kw: Any) -> None:
        self.events.append(kw["reason"])

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], rv: str | None
    ) -> dict[str, Any]:
        self.writes.append((name, time.monotonic()))
        assert self.status_release.wait(10)
        with self.lock:
            error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        meta = {**BODY["metadata"], "name": name, "resourceVersion": "8"}
        return {**BODY, "metadata": meta, "status": status}


def body(name: str) -> dict[str, Any]:
    out = copy.deepcopy(BODY)
    out["metadata"].update(name=name, uid=f"uid-{name}")
    return out


def refused(status: int, retry_after: float | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Conflict" if status == 409 else "TooManyRequests")
    exc.headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return exc


async def start(op: Operator) -> list[asyncio.Task[None]]:
    async def gate() -> None:
        return None

    workers = range(op.config.workers)
    return [asyncio.create_task(op.queue.run_worker(op.reconcile_key, gate)) for _ in workers]


def test_the_worker_takes_the_next_key_while_a_status_write_is_on_the_wire() -> None:
    async def scenario() -> None:
        api = SlowStatusApi()
        # One worker, so one tail at a time: without tails the worker would wait for g's write.
        op = Operator(OperatorConfig(leader_election=False, workers=1), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        for name in ("g", "h"):
            op.cache.owned.set_glmdeployment(body(name))
        workers = await start(op)
        op.queue.add(("llm", "g"), urgent=True)
        await wait_until(lambda: [n for n, _ in api.writes] == ["g"], 5)
        op.queue.add(("llm", "h"), urgent=True)
        op.queue.add(("llm", "g"))  # waits for g's tail
        # h is planned and applied while g's status write is still held; h's status write then
        # waits for the one tail slot.
        await wait_until(lambda: api.applied.count("Deployment") == 2, 5)
        await asyncio.sleep(0.1)
        assert [n for n, _ in api.writes] == ["g"]
        assert op.queue.in_flight(("llm", "g")) and op.queue.tails_in_flight == 1
        api.status_release.set()
        await wait_until(lambda: not op.queue.tails_in_flight and not len(op.queue), 5)
        await asyncio.sleep(0.1)
        # g ran once more after its tail and read the status just written from the cache:
        # nothing left to write.
        assert [n for n, _ in api.writes] == ["g", "h"]
        assert api.events.count("Planned") == 2  # posted after each status write
        assert op.cache.owned.glmdeployments[("llm", "g")]["metadata"]["resourceVersion"] == "8"
        for w in workers:
            w.cancel()
        op.planning_pool.shutdown()

    asyncio.run(scenario())


def test_a_refused_status_write_is_retried_with_backoff_and_retry_after_then_forgotten() -> None:
    async def scenario() -> None:
        api = SlowStatusApi()
        api.status_release.set()
        api.errors = [refused(409), refused(429, retry_after=0.4)]
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(body("g"))
        key = ("llm", "g")
        workers = await start(op)
        op.queue.add(key, urgent=True)
        await wait_until(lambda: len(api.writes) == 3, seconds=10)
        await wait_until(lambda: not op.queue.in_flight(key), 5)
        times = [t for _, t in api.writes]
        assert times[2] - times[1] >= 0.35  # the 429's Retry-After was honoured
        assert key not in op.queue.limiter._failures  # the success reset the key's backoff
        assert op.cache.owned.glmdeployments[key]["metadata"]["resourceVersion"] == "8"
        for w in workers:
            w.cancel()
        op.planning_pool.shutdown()

    asyncio.run(scenario())


def test_lost_leadership_cancels_the_status_writes_in_flight_and_what_follows_them(
    monkeypatch: Any,
) -> None:
    """A tail cancelled by lost leadership neither updates the cache nor posts its Events (the
    write already on the wire is refused by the client's may_write check in production)."""
    import glm_operator.controller.runtime as runtime

    class NoBackstop:  # _stopped_leading arms an os._exit timer for a hung shutdown
        def __init__(self, *_: Any, **__: Any) -> None:
            self.daemon = False

        def start(self) -> None:
            pass

    monkeypatch.setattr(runtime.threading, "Timer", NoBackstop)

    async def scenario() -> None:
        api = SlowStatusApi()
        op = Operator(OperatorConfig(leader_election=False, workers=2), api=api)  # type: ignore[arg-type]
        op.cache.replace_nodes(NODES)
        op.cache.owned.set_glmdeployment(body("g"))
        op._tasks.extend(await start(op))
        op.queue.add(("llm", "g"), urgent=True)
        await wait_until(lambda: op.queue.tails_in_flight == 1, 5)
        tails = list(op.queue._tails)
        op._stopped_leading()
        await asyncio.gather(*tails, *op._tasks, return_exceptions=True)
        assert all(t.cancelled() for t in tails) and op.exit_code == 1
        api.status_release.set()  # the write's thread returns; nobody is left to use it
        await asyncio.sleep(0.2)
        assert op.cache.owned.glmdeployments[("llm", "g")]["metadata"]["resourceVersion"] == "5"
        assert api.events == [] and not op.queue.in_flight(("llm", "g"))
        op.planning_pool.shutdown()

    asyncio.run(scenario())
