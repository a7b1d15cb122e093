"""The only code that talks to the Kubernetes apiserver.

Writes go through server-side apply with one field manager (``glm-operator``) and ``force``
(a child not created yet is POSTed, then its fields are handed to the apply entry: see
``clients.managed_fields``); the status subresource is written with a JSON merge patch. Reads
are plain lists with label selectors.
The official ``kubernetes`` client is synchronous; callers in kopf handlers run these methods in a
worker thread (``asyncio.to_thread``) so the event loop never blocks.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from glm_operator.api.gateway import GATEWAY_KIND, GATEWAY_PLURAL
from glm_operator.api.v1alpha1 import API_VERSION, KIND, PLURAL
from glm_operator.clients.managed_fields import owns_by_update, upgrade_patch
from glm_operator.render.inference_pool import (
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    INFERENCE_POOL_PLURAL,
)
from glm_operator.render.monitoring import POD_MONITOR_API_VERSION, POD_MONITOR_KIND, POD_MONITOR_PLURAL
from glm_operator.render.objects import LWS_API_VERSION

FIELD_MANAGER = "glm-operator"


@dataclass(frozen=True)
class KindInfo:
    api_path: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    namespaced: bool = True


KINDS: dict[tuple[str, str], KindInfo] = {
    ("apps/v1", "Deployment"): KindInfo("/apis/apps/v1", "deployments"),
    ("v1", "Service"): KindInfo("/api/v1", "services"),
    ("policy/v1", "PodDisruptionBudget"): KindInfo("/apis/policy/v1", "poddisruptionbudgets"),
    (LWS_API_VERSION, "LeaderWorkerSet"): KindInfo(f"/apis/{LWS_API_VERSION}", "leaderworkersets"),
    (API_VERSION, KIND): KindInfo(f"/apis/{API_VERSION}", PLURAL),
    ("v1", "Node"): KindInfo("/api/v1", "nodes", namespaced=False),
    ("v1", "Pod"): KindInfo("/api/v1", "pods"),
    ("v1", "ServiceAccount"): KindInfo("/api/v1", "serviceaccounts"),
    ("v1", "ConfigMap"): KindInfo("/api/v1", "configmaps"),  # a recorded load test (clients.load_tests)
    ("rbac.authorization.k8s.io/v1", "Role"): KindInfo("/apis/rbac.authorization.k8s.io/v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): KindInfo(
        "/apis/rbac.authorization.k8s.io/v1", "rolebindings"
    ),
    (API_VERSION, GATEWAY_KIND): KindInfo(f"/apis/{API_VERSION}", GATEWAY_PLURAL),
    ("networking.k8s.io/v1", "NetworkPolicy"): KindInfo("/apis/networking.k8s.io/v1", "networkpolicies"),
    (INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND): KindInfo(
        f"/apis/{INFERENCE_POOL_API_VERSION}", INFERENCE_POOL_PLURAL
    ),
    ("karpenter.sh/v1", "NodePool"): KindInfo("/apis/karpenter.sh/v1", "nodepools", namespaced=False),
    (POD_MONITOR_API_VERSION, POD_MONITOR_KIND): KindInfo(
        f"/apis/{POD_MONITOR_API_VERSION}", POD_MONITOR_PLURAL
    ),
}


def kind_info(api_version: str, kind: str) -> KindInfo:
    try:
        return KINDS[(api_version, kind)]
    except KeyError as exc:
        raise ValueError(f"unsupported kind {api_version}/{kind}") from exc


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    info = kind_info(api_version, kind)
    path = info.api_path
    if info.namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{info.plural}"
    if name:
        path += f"/{name}"
    return path


class NotLeader(Exception):
    """A write was refused locally: this replica does not hold the leader Lease (any more)."""


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class KubeClient:
    """Thin wrapper over ``kubernetes.client.ApiClient`` for the calls the operator makes.

    ``may_write``, when given, is asked right before every write is sent (leader election): a
    replica that is not, or no longer, the leader raises ``NotLeader`` instead of writing.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient | None = None,
        timeout: float = 30.0,
        may_write: Callable[[], bool] | None = None,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api_client or k8s.ApiClient()
        self.timeout = timeout
        self.may_write = may_write
        self.on_request = on_request  # called with the HTTP method of every request sent (metrics)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str | None = None,
    ) -> Any:
        if method in WRITE_METHODS and self.may_write is not None and not self.may_write():
            raise NotLeader(f"{method} {path} not sent: this replica does not hold the leader Lease")
        if self.on_request is not None:
            self.on_request(method)
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*params, _request_timeout=self.timeout)
        raw = response.read()  # type: ignore[no-untyped-call]
        text = raw.decode("utf-8") if raw else ""
        if not 200 <= response.status <= 299:
            exc = ApiException(status=response.status, reason=response.reason, body=text)
            exc.headers = response.getheaders()  # type: ignore[no-untyped-call]
            raise exc
        return json.loads(text) if text else {}

    # -- reads ---------------------------------------------------------------------------------
    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        data = self.request("GET", object_path(api_version, kind, namespace), query=query)
        items = data.get("items", []) if isinstance(data, dict) else []
        return [dict(i) for i in items]

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            data = self.request("GET", object_path(api_version, kind, namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(data)

    def api_available(self, api_version: str) -> bool:
        """Whether the apiserver serves ``api_version`` (e.g. an optional CRD's group/version)."""
        try:
            self.request("GET", f"/apis/{api_version}")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def serves_resource(self, api_version: str, plural: str) -> bool:
        """Whether API discovery lists ``plural`` in ``api_version`` (a group may be served with
        only some of its CRDs installed)."""
        try:
            data = self.request("GET", f"/apis/{api_version}")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        resources = data.get("resources") if isinstance(data, dict) else None
        return any(isinstance(r, dict) and r.get("name") == plural for r in resources or [])

    # -- writes --------------------------------------------------------------------------------
    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``obj`` with the operator's field manager (force on conflicts).

        When the answer shows fields this manager set by create/update (``create_or_apply``, or an
        operator killed between its create and the hand-over), they are handed to the apply entry
        and ``obj`` is applied again, so that a field no longer in ``obj`` is really removed."""
        data = self._apply(obj)
        if owns_by_update(data, FIELD_MANAGER):
            self.upgrade_managed_fields(data)
            data = self._apply(obj)
        return data

    def _apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        data = self.request(
            "PATCH",
            path,
            body=dict(obj),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        return dict(data)

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``obj`` with the operator's field manager."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        data = self.request("POST", path, body=dict(obj), query=[("fieldManager", FIELD_MANAGER)])
        return dict(data)

    def create_or_apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Write a child the caller has not seen yet: POST it (one etcd write, where an apply of an
        absent object makes two); when it exists after all (409), server-side apply it. The
        fields the POST set are handed to the apply entry by the next ``apply`` of the object
        (its first change, or the next resync), not here: a burst of creates sends no second
        write per object."""
        try:
            return self.create(obj)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self.apply(obj)

    def upgrade_managed_fields(self, obj: Mapping[str, Any], attempts: int = 3) -> dict[str, Any]:
        """Move the fields the operator's manager owns in ``obj`` through create/update into its
        apply entry (``managed_fields.upgrade_patch``), re-reading the object when it changed in
        between; returns the object as last seen. After ``attempts`` conflicts it gives up: the
        next ``apply`` of the object tries again."""
        meta = obj["metadata"]
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        namespace, name = meta.get("namespace"), str(meta["name"])
        current: Mapping[str, Any] | None = obj
        for _ in range(attempts):
            patch = upgrade_patch(current, FIELD_MANAGER) if current is not None else None
            if patch is None:
                break
            try:
                data = self.request(
                    "PATCH",
                    object_path(api_version, kind, namespace, name),
                    body=patch,
                    content_type="application/json-patch+json",
                )
                return dict(data)
            except ApiException as exc:
                if exc.status not in (409, 422):  # changed since read: the JSON patch test failed
                    raise
            current = self.get(api_version, kind, namespace, name)
        return dict(current if current is not None else obj)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self.request(
                "DELETE",
                object_path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        kind: str = KIND,
    ) -> dict[str, Any]:
        """Merge-patch the status subresource of a GLMDeployment (or another ``kind`` of its API).

        With ``resource_version`` the write is conditional: the apiserver answers 409 Conflict
        when the object changed since that version (a status computed from an older read is
        never written over a newer one)."""
        path = object_path(API_VERSION, kind, namespace, name) + "/status"
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        data = self.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        return dict(data)

    def create_event(
        self,
        involved: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
        now: dt.datetime | None = None,
    ) -> None:
        """Post a core/v1 Event about ``involved`` (a GLMDeployment body)."""
        meta = involved["metadata"]
        ts = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", API_VERSION),
                "kind": involved.get("kind", KIND),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": FIELD_MANAGER,
        }
        self.request("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body=event)


@dataclass(frozen=True)
class ApiErrorSummary:
    """What an apiserver error says, in one line: status, message, the fields it names."""

    status: int | None
    reason: str
    message: str
    fields: tuple[str, ...] = ()
    retry_after: float | None = None

    def line(self) -> str:
        where = f" (field {', '.join(self.fields)})" if self.fields else ""
        return f"HTTP {self.status} {self.reason}: {self.message}{where}"


def summarize_api_error(exc: BaseException) -> ApiErrorSummary:
    """One-line summary of an exception from ``KubeClient`` (ApiException or a network error)."""
    if not isinstance(exc, ApiException):
        text = str(exc).splitlines()[0] if str(exc) else ""
        return ApiErrorSummary(None, type(exc).__name__, text[:500])
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(exc.body or "{}")
        body = parsed if isinstance(parsed, dict) else {}
    except ValueError:
        pass
    details = body.get("details") or {}
    fields = tuple(str(c["field"]) for c in details.get("causes") or [] if c.get("field"))
    retry_after: float | None = None
    headers = exc.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw:
        try:
            retry_after = float(raw)
        except ValueError:
            retry_after = None
    if retry_after is None and details.get("retryAfterSeconds"):
        retry_after = float(details["retryAfterSeconds"])
    message = str(body.get("message") or exc.reason or "")
    return ApiErrorSummary(
        exc.status, str(body.get("reason") or exc.reason or ""), message[:2000], fields, retry_after
    )
