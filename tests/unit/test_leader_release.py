"""The Lease released on a clean shutdown stays released.

An in-memory Lease with the apiserver's optimistic concurrency (a PUT with a stale resourceVersion
is a 409) stands in for the apiserver so the renewal thread can run every few milliseconds; the
real apiserver case is tests/e2e/test_leader_election.py.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from glm_operator.clients.kube import KubeClient
from glm_operator.controller.clock import LoopClock
from glm_operator.controller.leader import LeaderElector


class LeaseStore:
    """GET, POST and PUT of one Lease, as the apiserver answers them."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.lock = threading.Lock()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        with self.lock:
            if method == "GET":
                if self.lease is None:
                    raise ApiException(status=404)
                return copy.deepcopy(self.lease)
            assert body is not None
            if method == "POST" and self.lease is not None:
                raise ApiException(status=409)
            if method == "PUT" and (
                self.lease is None or body["metadata"]["resourceVersion"] != str(self.version)
            ):
                raise ApiException(status=409)
            self.version += 1
            self.lease = {
                **copy.deepcopy(body),
                "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
            }
            return copy.deepcopy(self.lease)

    def holder(self) -> str:
        assert self.lease is not None
        return str(self.lease["spec"]["holderIdentity"])


def elector(store: LeaseStore, identity: str) -> LeaderElector:
    api = cast(KubeClient, store)
    return LeaderElector(
        api,
        "ops",
        "glm-operator",
        identity,
        LoopClock(),
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.005,
    )


def wait_until(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.001)


def test_a_released_lease_is_not_taken_again_by_the_leaders_own_renewals() -> None:
    for _ in range(20):  # the renewal thread runs every 5 ms: a renewal after the release is likely
        store = LeaseStore()
        leader = elector(store, "a")
        leader.start(lambda: None, lambda: None)
        wait_until(lambda s=store: s.version >= 3)  # leading and renewing
        leader.release()
        time.sleep(0.03)
        assert store.holder() == "", "the leader took its released Lease back"
        assert not leader.may_write()


def test_a_standby_takes_a_released_lease_at_once() -> None:
    store = LeaseStore()
    first, second = elector(store, "a"), elector(store, "b")
    first.start(lambda: None, lambda: None)
    wait_until(lambda: first.leading)
    second.start(lambda: None, lambda: None)
    time.sleep(0.05)
    assert store.holder() == "a" and not second.leading  # held and renewed: the standby waits
    first.release()
    wait_until(lambda: second.leading, timeout=1.0)  # well under the 3 s lease duration
    assert store.holder() == "b"
    second.stop()
