"""Hostile specs against the real apiserver: refused naming the field, or valid all the way down.

Every case of ``tests.harness.hostile`` is sent to the apiserver with ``dryRun=All``. A case
the apiserver refuses must name a ``spec`` field in its message; a case that cannot work must be
refused naming its field (``expect == REFUSED``: the CRD's CEL rules must hold within the
apiserver's cost budget) or planned to no children (``NOT_PLANNED``). A case it accepts is planned by
``compute_desired`` exactly as the operator would, and every child object is sent with ``dryRun=All``
too: none may be refused (a refused child is a reconcile that could only fail, forever). A sample
is then applied for real to a namespace the operator serves, and each must end with a status
(``observedGeneration`` and a ``Planned`` condition).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from glm_operator.api import spec_from_dict
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.desired import Observed, compute_desired
from tests.harness.hostile import NOT_PLANNED, REFUSED, HostileCase, hostile_cases

from .conftest import E2ECluster, RunningOperator
from .test_controller import wait_for

pytestmark = pytest.mark.e2e
GROUP, VERSION, PLURAL = "inference.glm.dev", "v1alpha1", "glmdeployments"
CASES = hostile_cases()


@pytest.fixture(scope="module")
def api(cluster: E2ECluster, operator: RunningOperator) -> Iterator[client.ApiClient]:
    # The operator fixture installs the CRD; the admin kubeconfig sends the dry runs.
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()


def manifest(case: HostileCase, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GLMDeployment",
        "metadata": {"name": name},
        "spec": case.spec,
    }


def create(api: client.ApiClient, ns: str, obj: dict[str, Any], dry_run: bool = True) -> dict[str, Any]:
    kind = obj["kind"]
    dry = "All" if dry_run else None
    if kind == "GLMDeployment":
        out = client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, obj, dry_run=dry, field_validation="Strict"
        )
        return dict(out)
    if kind == "Deployment":
        return dict(client.AppsV1Api(api).create_namespaced_deployment(ns, obj, dry_run=dry).to_dict())
    if kind == "Service":
        return dict(client.CoreV1Api(api).create_namespaced_service(ns, obj, dry_run=dry).to_dict())
    if kind == "PodDisruptionBudget":
        return dict(
            client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, obj, dry_run=dry).to_dict()
        )
    raise AssertionError(f"unexpected child kind {kind}")


def nodes(api: client.ApiClient) -> list[dict[str, Any]]:
    raw = client.CoreV1Api(api).list_node(_preload_content=False)
    return list(json.loads(raw.data)["items"])


def test_every_hostile_spec_is_refused_naming_the_field_or_has_children_the_apiserver_accepts(
    api: client.ApiClient, ns: str
) -> None:
    cluster_nodes = nodes(api)
    refused, planned, invalid_in_status, not_planned, bad_children = 0, 0, 0, 0, []
    for i, case in enumerate(CASES):
        name = f"h{i}"
        obj = manifest(case, name)
        try:
            stored = create(api, ns, obj)
        except ApiException as exc:
            assert exc.status in (400, 422), (case.id, exc.status, exc.body)  # 400: strict decoding
            message = json.loads(exc.body).get("message", "")
            assert "spec." in message or "spec:" in message, (case.id, message)
            assert case.expect != REFUSED or f"spec.{case.field}" in message, (case.id, message)
            refused += 1
            continue
        assert case.expect != REFUSED, f"{case.id} was accepted by the apiserver"
        try:
            spec_from_dict(stored["spec"])
        except ValidationError:
            invalid_in_status += 1  # the operator reports InvalidSpec with the field (unit tests)
            continue
        stored["metadata"].update(uid="00000000-0000-0000-0000-000000000000", generation=1, namespace=ns)
        desired = compute_desired(
            Observed(
                body=stored,
                nodes=cluster_nodes,
                gpus_used={},
                children=[],
                pods=[],
                default_image=DEFAULT_VLLM_IMAGE,
                now=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        )
        if not desired.objects:
            not_planned += 1
            continue
        assert case.expect != NOT_PLANNED, f"{case.id} was planned: {desired.status}"
        planned += 1
        for child in desired.objects:
            try:
                create(api, ns, child)
            except ApiException as exc:
                bad_children.append((case.id, child["kind"], json.loads(exc.body).get("message", "")[:300]))
    print(
        f"\n{len(CASES)} hostile specs: {refused} refused by the apiserver, {invalid_in_status} accepted but "
        f"InvalidSpec in status, {not_planned} planned to no children (Planned=False), {planned} planned "
        f"with children; children refused: {len(bad_children)}"
    )
    assert not bad_children, bad_children
    assert refused >= 100 and planned >= 20


def test_a_sample_applied_for_real_each_ends_with_a_status(
    api: client.ApiClient, operator: RunningOperator, ns: str
) -> None:
    sample = [
        c
        for c in CASES
        if c.id.startswith(("model.config.quantization_config", "serving.resources", "serving.env", "model-"))
    ][::3]
    applied: dict[str, HostileCase] = {}
    for i, case in enumerate(sample):
        name = f"s{i}"
        try:
            create(api, ns, manifest(case, name), dry_run=False)
        except ApiException:
            continue
        applied[name] = case
    assert len(applied) >= 8, len(applied)

    def without_status() -> list[str]:
        missing = []
        for name in applied:
            obj = _get(api, ns, name)
            status = obj.get("status") or {}
            planned = [c for c in status.get("conditions", []) if c["type"] == "Planned"]
            if status.get("observedGeneration") != obj["metadata"]["generation"] or not planned:
                missing.append(name)
        return missing

    wait_for(lambda: not without_status(), 120, f"a status on all {len(applied)} applied hostile specs")
    for name, case in applied.items():
        obj = _get(api, ns, name)
        planned = next(c for c in obj["status"]["conditions"] if c["type"] == "Planned")
        assert planned["reason"] in ("Planned", "InvalidSpec", "NoGPUFits", "NoGPUNodes"), (case.id, planned)


def _get(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name))
