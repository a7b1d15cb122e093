"""Hostile specs reconciled by the operator: a sample of ``tests.harness.hostile``'s cases is applied
for real to a namespace the operator serves, and each must end with a status (``observedGeneration``
and a ``Planned`` condition). Every case's dry runs against the apiserver (refused naming the field,
or children it accepts) are in tests/integration/test_hostile_specs.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.harness.hostile import GROUP, PLURAL, VERSION, HostileCase, create, hostile_cases, manifest

from .conftest import E2ECluster, RunningOperator
from .test_controller import wait_for

pytestmark = pytest.mark.e2e
CASES = hostile_cases()


@pytest.fixture(scope="module")
def api(cluster: E2ECluster, operator: RunningOperator) -> Iterator[client.ApiClient]:
    # The operator fixture installs the CRD; the admin kubeconfig applies the specs.
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()


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
