"""New workloads are POSTed, then their fields handed to the apply entry (clients.managed_fields);
the integration counterpart (tests/integration/test_create_then_apply.py) checks the pruning on a
real apiserver."""

from __future__ import annotations

import copy
from typing import Any

from glm_operator.clients.kube import FIELD_MANAGER, KubeClient
from glm_operator.clients.managed_fields import (
    owns_by_update,
    union_fields,
    upgrade_patch,
    upgraded_managed_fields,
)
from glm_operator.controller.config import OperatorConfig
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.scenarios import BODY, NODES


def entry(manager: str, operation: str, fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "apps/v1",
        "time": "2026-12-01T03:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **extra,
    }


CREATED = {
    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}}}}}}
}


def obj_with(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "resourceVersion": "41", "managedFields": list(entries)},
    }


def test_a_created_object_s_update_entry_becomes_the_apply_entry() -> None:
    other = entry("kube-controller-manager", "Update", {"f:status": {}}, subresource="status")
    obj = obj_with(entry(FIELD_MANAGER, "Update", CREATED), other)
    assert owns_by_update(obj, FIELD_MANAGER)
    entries = upgraded_managed_fields(obj, FIELD_MANAGER)
    assert entries == [entry(FIELD_MANAGER, "Apply", CREATED), other]
    assert obj["metadata"]["managedFields"][0]["operation"] == "Update"  # the input is not changed
    patch = upgrade_patch(obj, FIELD_MANAGER)
    assert patch == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
    ]


def test_update_fields_are_merged_into_an_existing_apply_entry() -> None:
    applied = {"f:spec": {"f:replicas": {}, "f:paused": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
    obj = obj_with(entry(FIELD_MANAGER, "Apply", applied), entry(FIELD_MANAGER, "Update", CREATED))
    entries = upgraded_managed_fields(obj, FIELD_MANAGER)
    assert entries is not None and len(entries) == 1
    assert entries[0]["operation"] == "Apply"
    assert entries[0]["fieldsV1"] == {
        "f:spec": {
            "f:replicas": {},
            "f:paused": {},
            "f:template": {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}}}}},
        },
        "f:metadata": {"f:labels": {"f:a": {}}},
    }


def test_nothing_to_move_without_an_update_entry_of_the_manager() -> None:
    status = entry(FIELD_MANAGER, "Update", {"f:status": {}}, subresource="status")
    for obj in (
        obj_with(entry(FIELD_MANAGER, "Apply", CREATED)),
        obj_with(entry("kubectl-edit", "Update", CREATED)),
        obj_with(status),  # the status subresource is not the apply entry's business
        {"metadata": {"name": "d"}},
    ):
        assert not owns_by_update(obj, FIELD_MANAGER)
        assert upgrade_patch(obj, FIELD_MANAGER) is None


def test_union_of_field_sets() -> None:
    assert union_fields({"f:a": {"f:b": {}}}, {"f:a": {"f:c": {}}, "f:d": {}}) == {
        "f:a": {"f:b": {}, "f:c": {}},
        "f:d": {},
    }


class RecordingKube(KubeClient):
    """KubeClient with its HTTP requests answered here (method, path, body recorded)."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__(api_client=None)
        self.answers, self.sent = answers, []

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.sent.append((method, path, kwargs.get("content_type"), kwargs.get("body")))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_create_or_apply_posts_and_applies_when_the_child_exists_after_all() -> None:
    from kubernetes.client.exceptions import ApiException

    desired = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}
    created = obj_with(entry(FIELD_MANAGER, "Update", CREATED))
    api = RecordingKube([created])
    assert api.create_or_apply(desired) == created  # one request: the hand-over waits for an apply
    assert [(m, p, c) for m, p, c, _ in api.sent] == [
        ("POST", "/apis/apps/v1/namespaces/n/deployments", None)
    ]

    applied = obj_with(entry(FIELD_MANAGER, "Apply", CREATED))
    api = RecordingKube([ApiException(status=409, reason="AlreadyExists"), applied])
    assert api.create_or_apply(desired) == applied
    assert [(m, c) for m, _, c, _ in api.sent] == [("POST", None), ("PATCH", "application/apply-patch+yaml")]


def test_an_apply_that_finds_update_owned_fields_hands_them_over_and_applies_again() -> None:
    """An operator killed between its create and the hand-over: the next apply repairs it."""
    from kubernetes.client.exceptions import ApiException

    desired = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}
    shared = obj_with(entry(FIELD_MANAGER, "Apply", {}), entry(FIELD_MANAGER, "Update", CREATED))
    fresh = copy.deepcopy(shared)
    fresh["metadata"]["resourceVersion"] = "42"
    final = obj_with(entry(FIELD_MANAGER, "Apply", {}))
    conflict = ApiException(status=422, reason="Unprocessable Entity")
    api = RecordingKube([shared, conflict, fresh, {}, final])
    assert api.apply(desired) == final
    methods = [(m, c) for m, _, c, _ in api.sent]
    assert methods == [
        ("PATCH", "application/apply-patch+yaml"),
        ("PATCH", "application/json-patch+json"),  # refused: the object changed since (test op)
        ("GET", None),
        ("PATCH", "application/json-patch+json"),
        ("PATCH", "application/apply-patch+yaml"),
    ]
    assert api.sent[3][3][0]["value"] == "42"


def test_a_workload_not_in_the_cache_is_created_and_one_in_it_is_applied() -> None:
    api = FakeApi()
    r = reconciling(api, OperatorConfig(leader_election=False, workers=2), NODES)
    r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(BODY)))
    r.reconcile(("llm", "g"))
    assert [kind for verb, kind, _ in api.writes("create")] == ["Deployment"]  # Service, PDB: applied
    assert {kind for verb, kind, _ in api.writes("apply")} == {"Service", "PodDisruptionBudget"}
    r.applier.forget()  # a resync: the Deployment is in the cache now
    r.reconcile(("llm", "g"))
    assert [kind for verb, kind, _ in api.writes("create")] == ["Deployment"]
    assert [kind for verb, kind, _ in api.writes("apply")].count("Deployment") == 1
