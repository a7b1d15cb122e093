"""Leader election on a coordination.k8s.io/v1 Lease, so two operator replicas never both act.

Every replica watches and enqueues; only the holder of the Lease reconciles. The holder renews
every ``renew_seconds``; another replica takes over when ``lease_seconds`` pass without a renewal.
Updates use the Lease's resourceVersion (optimistic concurrency), so two candidates cannot both win.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from glm_operator.clients.kube import KubeClient

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _fmt(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.strptime(value.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


class LeaderElector:
    def __init__(
        self,
        api: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
    ) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self._leader = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    async def wait_until_leader(self) -> None:
        await self._leader.wait()

    def _try_acquire_or_renew(self) -> bool:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        now = _now()
        try:
            lease: dict[str, Any] | None = self.api.request("GET", f"{path}/{self.name}")
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = None
        spec_new = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _fmt(now),
        }
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec_new, "acquireTime": _fmt(now), "leaseTransitions": 0},
            }
            try:
                self.api.request("POST", path, body=body)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        renew = _parse(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
        expired = renew is None or (now - renew).total_seconds() > duration
        if holder != self.identity and not expired:
            return False
        new_spec = dict(spec)
        new_spec.update(spec_new)
        if holder != self.identity:
            new_spec["acquireTime"] = _fmt(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            self.api.request("PUT", f"{path}/{self.name}", body=lease)
        except ApiException as exc:
            if exc.status == 409:  # somebody else renewed or took it first
                return False
            raise
        return True

    async def run(self) -> None:
        while True:
            try:
                won = await asyncio.to_thread(self._try_acquire_or_renew)
            except Exception as exc:  # keep trying; losing the apiserver must not crash us
                log.warning("leader election: %s", exc)
                won = False
            if won and not self.is_leader:
                log.info("became leader (%s/%s as %s)", self.namespace, self.name, self.identity)
                self._leader.set()
            elif not won and self.is_leader:
                log.warning("lost leadership of %s/%s", self.namespace, self.name)
                self._leader.clear()
            await asyncio.sleep(self.renew_seconds)

    def release(self) -> None:
        """Give the lease up on shutdown so a peer takes over at once."""
        if not self.is_leader:
            return
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"
        try:
            lease = self.api.request("GET", path)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                lease["spec"]["leaseDurationSeconds"] = 1
                lease["spec"]["renewTime"] = _fmt(_now() - dt.timedelta(seconds=60))
                self.api.request("PUT", path, body=lease)
        except Exception as exc:
            log.info("could not release lease: %s", exc)
        self._leader.clear()
