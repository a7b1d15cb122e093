"""Make the real kube-apiserver answer one user's requests with 429, through API Priority and Fairness.

A PriorityLevelConfiguration with no concurrency of its own (``nominalConcurrencyShares: 0``, no
borrowing) and ``limitResponse: Reject`` admits a request only while none of its requests executes,
and answers every other one at once with ``429 Too Many Requests`` and ``Retry-After: 1``. Two
FlowSchemas route requests into it:

- the *victim's* writes (create/update/patch/delete of the listed resources in one namespace);
- a *seat holder*: a ServiceAccount of the test that lists ConfigMaps "not older than" a resource
  version far in the future. The apiserver's watch cache waits 3 s for that version before it
  answers 504, so the holder keeps the level's only seat busy almost all the time, with next to
  no CPU (one request every 3 s).

Everything else the victim does (reads, watches, its leader-election Lease) is not matched and
is served as usual. ``rejected()`` reads ``apiserver_flowcontrol_rejected_requests_total`` of the
victim's FlowSchema from the apiserver's own /metrics (on loopback).
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import yaml

from tests.harness.cluster import LocalCluster

FAR_FUTURE_VERSION = "999999999"


def _http(url: str, token: str, timeout: float) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the local apiserver's self-signed certificate, on loopback
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")


class ApfThrottle:
    """While active, ``victim``'s writes of ``resources`` in ``namespace`` are refused with 429."""

    def __init__(
        self,
        cluster: LocalCluster,
        name: str,
        namespace: str,
        victim: tuple[str, str],  # (namespace, name) of a ServiceAccount
        resources: Sequence[tuple[str, str]],  # (apiGroup, resource or resource/subresource)
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.namespace = namespace
        self.victim = victim
        self.resources = list(resources)
        self.holder = f"{name}-seat-holder"
        self.holder_requests = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        server, admin = cluster.server_url(), cluster.token()
        assert server and admin, "cluster not running"
        self.server, self.admin_token = server, admin

    def objects(self) -> list[dict[str, Any]]:
        name, ns = self.name, self.namespace
        holder_subject = {"kind": "ServiceAccount", "serviceAccount": {"name": self.holder, "namespace": ns}}
        victim_subject = {
            "kind": "ServiceAccount",
            "serviceAccount": {"name": self.victim[1], "namespace": self.victim[0]},
        }
        groups = sorted({g for g, _ in self.resources})
        resources = sorted({r for _, r in self.resources})

        def flow_schema(suffix: str, subject: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
            return {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "FlowSchema",
                "metadata": {"name": f"{name}-{suffix}"},
                "spec": {
                    "priorityLevelConfiguration": {"name": name},
                    "matchingPrecedence": 500,  # before the built-in service-accounts schema (9000)
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [{"subjects": [subject], "resourceRules": [rule]}],
                },
            }

        return [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": self.holder, "namespace": ns},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": self.holder, "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": self.holder, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self.holder},
                "subjects": [{"kind": "ServiceAccount", "name": self.holder, "namespace": ns}],
            },
            {
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": name},
                "spec": {
                    "type": "Limited",
                    "limited": {
                        "nominalConcurrencyShares": 0,
                        "lendablePercent": 0,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Reject"},
                    },
                },
            },
            flow_schema(
                "writes",
                victim_subject,
                {
                    "verbs": ["create", "update", "patch", "delete"],
                    "apiGroups": groups,
                    "resources": resources,
                    "namespaces": [ns],
                },
            ),
            flow_schema(
                "seat",
                holder_subject,
                {"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"], "namespaces": [ns]},
            ),
        ]

    @property
    def writes_schema(self) -> str:
        return f"{self.name}-writes"

    def start(self) -> None:
        docs = yaml.safe_dump_all(self.objects())
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=docs)
        token = self.cluster.kubectl("create", "token", self.holder, "-n", self.namespace).stdout.strip()
        self._stop.clear()
        self._thread = threading.Thread(target=self._hold, args=(token,), daemon=True, name="apf-seat")
        self._thread.start()

    def _hold(self, token: str) -> None:
        url = (
            f"{self.server}/api/v1/namespaces/{self.namespace}/configmaps"
            f"?resourceVersion={FAR_FUTURE_VERSION}&resourceVersionMatch=NotOlderThan"
        )
        while not self._stop.is_set():
            try:
                status, _ = _http(url, token, timeout=10)
            except OSError:
                status = 0
            self.holder_requests += 1
            if status in (0, 429):  # the victim holds the seat for a moment (or a network error)
                self._stop.wait(0.01)

    def active(self, timeout: float = 10.0) -> bool:
        """Wait until the apiserver has the priority level in force (it reports its seats)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seats = self._metric("apiserver_flowcontrol_nominal_limit_seats", {"priority_level": self.name})
            if seats is not None:
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """Remove the FlowSchemas and the priority level, stop the seat holder."""
        self.cluster.kubectl(
            "delete",
            f"flowschema/{self.name}-writes",
            f"flowschema/{self.name}-seat",
            f"prioritylevelconfiguration/{self.name}",
            "--ignore-not-found",
            check=False,
        )
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    # -- the apiserver's own counters ----------------------------------------------------------
    def metrics_text(self) -> str:
        status, text = _http(f"{self.server}/metrics", self.admin_token, timeout=30)
        if status != 200:
            raise RuntimeError(f"apiserver /metrics answered {status}: {text[:200]}")
        return text

    def _metric(self, metric: str, labels: dict[str, str], text: str | None = None) -> float | None:
        total: float | None = None
        for line in (text if text is not None else self.metrics_text()).splitlines():
            if not line.startswith(metric + "{"):
                continue
            body, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in body for k, v in labels.items()):
                total = (total or 0.0) + float(value)
        return total

    def rejected(self) -> int:
        """Requests of the victim's writes schema the apiserver answered with 429 so far."""
        value = self._metric(
            "apiserver_flowcontrol_rejected_requests_total", {"flow_schema": self.writes_schema}
        )
        return int(value or 0)

    def dispatched(self) -> int:
        """Requests of the victim's writes schema the apiserver let through so far."""
        value = self._metric(
            "apiserver_flowcontrol_dispatched_requests_total", {"flow_schema": self.writes_schema}
        )
        return int(value or 0)
