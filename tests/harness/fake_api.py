"""An in-memory stand-in for ``KubeClient`` in unit tests of the reconcilers.

It keeps objects by (apiVersion, kind, namespace, name), bumps ``resourceVersion`` on every write
and ``metadata.generation`` when a spec changes, honours a status write's resourceVersion
precondition (409), and records every call. It is not an apiserver: the e2e and integration tests
run the same reconcilers against the real kube-apiserver.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from glm_operator.api.v1alpha1 import API_VERSION, KIND


def api_error(status: int, message: str = "refused", retry_after: float | None = None) -> ApiException:
    exc = ApiException(status=status, reason=message)
    exc.body = json.dumps({"kind": "Status", "message": message, "reason": message, "code": status})
    exc.headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return exc


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as a JSON merge patch (RFC 7386), as the apiserver applies a
    status patch: objects merge key by key, a null removes its key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []  # (verb, kind, name)
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message)
        self.fail: dict[str, ApiException] = {}  # kind -> the error its next writes raise
        self._versions = itertools.count(100)
        self.on_request = None
        self.may_write = None

    # -- helpers for tests --------------------------------------------------------------------
    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as if created by someone else; returns it as stored."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{obj['kind']}-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[self._key(stored)] = stored
        return copy.deepcopy(stored)

    def get_object(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def writes(self, verb: str | None = None) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if verb is None or c[0] == verb]

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        meta = obj["metadata"]
        return (str(obj["apiVersion"]), str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))

    def _write(self, verb: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append((verb, str(obj["kind"]), str(obj["metadata"]["name"])))
        if obj["kind"] in self.fail:
            raise self.fail[obj["kind"]]
        key = self._key(obj)
        old = self.objects.get(key)
        new = copy.deepcopy(dict(obj))
        meta = new["metadata"]
        if old is None:
            meta["uid"] = f"uid-{obj['kind']}-{meta['name']}"
            meta["generation"] = 1
        else:
            meta["uid"] = old["metadata"]["uid"]
            changed = old.get("spec") != new.get("spec")
            meta["generation"] = int(old["metadata"].get("generation") or 1) + (1 if changed else 0)
            if "status" in old:
                new["status"] = old["status"]
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[key] = new
        return copy.deepcopy(new)

    # -- KubeClient's surface -----------------------------------------------------------------
    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._write("apply", obj)

    def create_or_apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self._write("create", obj)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        self.calls.append(("delete", kind, name))
        return self.objects.pop((api_version, kind, namespace or "", name), None) is not None

    def patch_status(
        self,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
        kind: str = KIND,
    ) -> dict[str, Any]:
        self.calls.append(("status", kind, name))
        key = (API_VERSION, kind, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise api_error(404, "not found")
        if resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]:
            raise api_error(409, "the object has been modified")
        obj["status"] = merge_patch(obj.get("status") or {}, copy.deepcopy(dict(status)))
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def create_event(
        self, involved: Mapping[str, Any], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        self.events.append((type_, reason, message))

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (av, k, ns, _), o in self.objects.items()
            if av == api_version and k == kind and (namespace is None or ns == namespace)
        ]
