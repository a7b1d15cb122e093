"""Leader election on a coordination.k8s.io/v1 Lease, by client-go's rules.

Every replica watches and keeps its caches warm; only the holder of the Lease writes. The rules,
as in client-go's ``leaderelection`` package:

- A candidate judges the Lease expired from its *own* clock: the local monotonic time at which it
  last saw the record change, plus ``leaseDurationSeconds``. The holder's ``renewTime`` is never
  compared with the local clock (clocks of two machines differ).
- Updates carry the Lease's resourceVersion, so two candidates cannot both win one round.
- The leader renews every ``retry_period``; it may write only until ``renew_deadline`` after the
  start of its last successful renewal (``renew_deadline < lease_duration``: it stops before any
  peer can consider the Lease expired). Every API request has a timeout below the deadline.
- A leader that misses its deadline (apiserver unreachable, process frozen by SIGSTOP or a long
  GC pause) has lost: it cancels its in-flight work and the process exits non-zero, and the
  Deployment restarts it as a standby. ``may_write`` is checked right before every write, so a
  frozen leader that wakes up after a peer took over sends nothing.
- On a clean shutdown the leader stops renewing, then releases the Lease (empty holder) so a peer
  takes over at once.

The election runs in its own thread with its own HTTP connection pool: a busy event loop or a
saturated reconcile thread pool never delays a renewal.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from glm_operator.clients.kube import KubeClient
from glm_operator.controller.clock import Clock

log = logging.getLogger(__name__)


def _micro_time(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        clock: Clock,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        """``clock``: the operator's; read from the election thread (``Clock.monotonic`` and
        ``now`` are safe there), its timers never used."""
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        self.clock = clock
        self._valid_until = 0.0  # monotonic; writes are allowed before it
        self._observed: dict[str, Any] | None = None  # the Lease spec last seen
        self._observed_at = 0.0  # monotonic time it was last seen to change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.leading = False
        self.lost = False

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def may_write(self) -> bool:
        """True while this replica holds the Lease and its last renewal is within the deadline."""
        return self.leading and not self.lost and self.clock.monotonic() < self._valid_until

    # -- one round -----------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One GET and at most one create/update; True when this replica holds the Lease now."""
        started = self.clock.monotonic()
        try:
            lease: dict[str, Any] | None = self.api.request("GET", f"{self.path}/{self.name}")
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = None
        now = _micro_time(self.clock.now())
        mine = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": mine,
            }
            try:
                self.api.request("POST", self.path, body=body)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            self._record(mine, started)
            return True
        spec = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observed, self._observed_at = spec, self.clock.monotonic()
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self.clock.monotonic() < self._observed_at + duration:
            return False  # held by a peer that renewed less than a lease duration ago (our clock)
        if holder == self.identity:
            mine["acquireTime"] = spec.get("acquireTime") or now
            mine["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        else:
            mine["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = mine
        try:
            self.api.request("PUT", f"{self.path}/{self.name}", body=lease)
        except ApiException as exc:
            if exc.status == 409:  # a peer renewed or took it first
                return False
            raise
        self._record(mine, started)
        return True

    def _record(self, spec: dict[str, Any], started: float) -> None:
        self._observed, self._observed_at = dict(spec), self.clock.monotonic()
        self._valid_until = started + self.renew_deadline

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as exc:  # the apiserver is away: keep trying until the deadline
            log.warning("leader election: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return False

    # -- the election thread -------------------------------------------------------------------
    def start(self, on_started_leading: Callable[[], None], on_stopped_leading: Callable[[], None]) -> None:
        """Run the election in a daemon thread; the callbacks are called from that thread."""
        self._thread = threading.Thread(
            target=self._run,
            args=(on_started_leading, on_stopped_leading),
            name="leader-election",
            daemon=True,
        )
        self._thread.start()

    def _run(self, on_started_leading: Callable[[], None], on_stopped_leading: Callable[[], None]) -> None:
        while not self._stop.is_set():  # acquire
            if self._attempt():
                break
            self._stop.wait(self.retry_period * random.uniform(1.0, 1.2))
        if self._stop.is_set():
            return
        self.leading = True
        log.info("became leader (%s/%s as %s)", self.namespace, self.name, self.identity)
        on_started_leading()
        while not self._stop.wait(self.retry_period):  # renew
            if self.clock.monotonic() >= self._valid_until:
                break  # frozen or cut off past the deadline: a peer may already lead
            if not self._attempt() and self.clock.monotonic() >= self._valid_until:
                break
        if self._stop.is_set():
            return
        self.lost = True
        log.error(
            "lost leadership of %s/%s: no renewal within %.0f s; stopping all work",
            self.namespace,
            self.name,
            self.renew_deadline,
        )
        on_stopped_leading()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry_period + 1)

    def release(self) -> None:
        """Give the Lease up on shutdown (empty holder) so a peer takes over at once.

        The election thread is stopped first: a renewal round that read the emptied Lease after
        this PUT would see no holder and take it again."""
        self.stop()
        if not self.may_write():
            return
        self.leading = False
        try:
            lease = self.api.request("GET", f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                now = _micro_time(self.clock.now())
                lease["spec"].update(
                    {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
                )
                self.api.request("PUT", f"{self.path}/{self.name}", body=lease)
                log.info("released the lease %s/%s", self.namespace, self.name)
        except Exception as exc:
            log.info("could not release the lease: %s", exc)
