"""Hostile specs against the real kube-apiserver: refused naming the field, or valid all the way down.

Every case of ``tests.harness.hostile`` is sent to the apiserver with ``dryRun=All``. A case
the apiserver refuses must name a ``spec`` field in its message; a case that cannot work must be
refused naming its field (``expect == REFUSED``: the CRD's CEL rules must hold within the
apiserver's cost budget) or planned to no children (``NOT_PLANNED``). A case it accepts is planned by
``compute_desired`` exactly as the operator would, on the GPU nodes of tests/fixtures/gpu-cluster.yaml
(the e2e cluster's), and every child object is sent with ``dryRun=All`` too: none may be refused (a
refused child is a reconcile that could only fail, forever). tests/e2e/test_hostile_specs.py
applies a sample for real, for the operator to reconcile.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from glm_operator.api import spec_from_dict
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.desired import Observed, compute_desired
from tests.harness.chart import apply_crds
from tests.harness.cluster import SessionCluster
from tests.harness.hostile import NOT_PLANNED, REFUSED, create, hostile_cases, manifest
from tests.harness.scenarios import NODES

pytestmark = pytest.mark.integration
CASES = hostile_cases()


@pytest.fixture(scope="module")
def api(cluster: SessionCluster) -> Iterator[client.ApiClient]:
    apply_crds(cluster)
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()


def test_every_hostile_spec_is_refused_naming_the_field_or_has_children_the_apiserver_accepts(
    api: client.ApiClient, ns: str
) -> None:
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
                nodes=NODES,
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
