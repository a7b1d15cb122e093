"""spec.inferencePool through compute_desired: the InferencePool over the vLLM pods and its
endpoint picker's objects, their pruning when turned off, status.inferencePool. The apiserver's
view of them (the real CRD, the picker run against it) is in tests/e2e/test_inference_pool.py."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from glm_operator.api.v1alpha1 import DEFAULT_EPP_IMAGE
from glm_operator.controller.config import OperatorConfig
from glm_operator.desired import compute_desired
from glm_operator.desired.children import child_ref
from glm_operator.desired.inference_pool import API_MISSING
from glm_operator.desired.status import changed as status_changed
from glm_operator.render import names
from glm_operator.render.inference_pool import EPP_CONFIG, INFERENCE_POOL_API_VERSION
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.scenarios import BODY, NODES
from tests.unit.test_desired import ROOT, body, observe

SPEC: dict[str, Any] = {
    "model": {"id": "zai-org/GLM-4.5-Air"},
    "contextLength": 32768,
    "gpu": {"products": ["H100"]},
}
POOL_KINDS = ["Deployment", "InferencePool", "Role", "RoleBinding", "Service", "ServiceAccount"]


def pool_objects(objects: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """The objects of the pool and its picker, by kind (the vLLM workload and Service left out)."""
    found = {}
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        if (
            obj["kind"] == "InferencePool"
            or labels.get(names.LABEL_COMPONENT) == names.COMPONENT_ENDPOINT_PICKER
        ):
            found[obj["kind"]] = obj
    return found


def test_the_default_picker_image_is_the_release_the_tests_build() -> None:
    go_mod = (ROOT / "tools" / "inference-extension" / "go.sum").read_text()
    versions = set(re.findall(r"sigs\.k8s\.io/gateway-api-inference-extension (v[0-9.]+) ", go_mod))
    assert versions == {DEFAULT_EPP_IMAGE.rsplit(":", 1)[1]}


def test_an_opted_in_glmdeployment_gets_a_pool_over_its_vllm_pods_and_a_picker() -> None:
    d = compute_desired(observe(body(name="air", inferencePool={}, **SPEC), inference_pool_api=True))
    pool = pool_objects(d.objects)
    assert sorted(pool) == POOL_KINDS
    for obj in pool.values():
        assert obj["metadata"]["namespace"] == "llm"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert obj["metadata"]["labels"][names.LABEL_DEPLOYMENT] == "air"  # the child watches route it
        assert obj["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
    ip = pool["InferencePool"]
    assert ip["apiVersion"] == INFERENCE_POOL_API_VERSION and ip["metadata"]["name"] == "air"
    vllm_service = next(o for o in d.objects if o["kind"] == "Service" and o["metadata"]["name"] == "air")
    assert ip["spec"]["selector"]["matchLabels"] == vllm_service["spec"]["selector"]
    vllm = next(o for o in d.objects if o["kind"] == "Deployment" and o is not pool["Deployment"])
    assert (
        vllm["spec"]["template"]["metadata"]["labels"].items()
        >= ip["spec"]["selector"]["matchLabels"].items()
    )
    assert ip["spec"]["targetPorts"] == [{"number": 8000}]
    assert ip["spec"]["endpointPickerRef"] == {
        "group": "", "kind": "Service", "name": "air-epp", "port": {"number": 9002},
        "failureMode": "FailClose",
    }  # fmt: skip

    epp = pool["Deployment"]
    pod = epp["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == DEFAULT_EPP_IMAGE
    args = container["args"]
    assert args[args.index("--pool-name") + 1] == "air" and args[args.index("--pool-namespace") + 1] == "llm"
    assert yaml.safe_load(args[args.index("--config-text") + 1]) == EPP_CONFIG
    assert pod["spec"]["serviceAccountName"] == "air-epp"
    # its pods are no vLLM pods: no GLMDeployment label (the operator's pod watch ignores them), and
    # the pool's selector does not match them
    assert names.LABEL_DEPLOYMENT not in pod["metadata"]["labels"]
    assert not pod["metadata"]["labels"].items() >= ip["spec"]["selector"]["matchLabels"].items()
    assert pool["Service"]["spec"]["selector"] == epp["spec"]["selector"]["matchLabels"]
    assert pool["RoleBinding"]["roleRef"]["name"] == pool["Role"]["metadata"]["name"] == "air-epp"
    rules = {r: rule["verbs"] for rule in pool["Role"]["rules"] for r in rule["resources"]}
    assert rules["pods"] == rules["inferencepools"] == ["get", "list", "watch"]

    assert d.status["inferencePool"] == {
        "name": "air",
        "endpointPicker": "air-epp:9002",
        "ready": False,
        "message": "the endpoint picker has no ready replica yet: kubectl -n llm get pods -l "
        "app.kubernetes.io/name=endpoint-picker,app.kubernetes.io/instance=air,"
        "app.kubernetes.io/component=endpoint-picker",
    }


def test_the_picker_image_failure_mode_and_resources_come_from_the_spec() -> None:
    picker = {
        "image": "mirror.local/epp:v1.5.0",
        "failureMode": "FailOpen",
        "resources": {"requests": {"cpu": "1"}},
    }
    d = compute_desired(
        observe(body(name="air", inferencePool={"endpointPicker": picker}, **SPEC), inference_pool_api=True)
    )
    pool = pool_objects(d.objects)
    container = pool["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "mirror.local/epp:v1.5.0"
    assert container["resources"] == {"requests": {"cpu": "1"}}
    assert pool["InferencePool"]["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_a_ready_picker_is_reported_ready() -> None:
    first = compute_desired(observe(body(name="air", inferencePool={}, **SPEC), inference_pool_api=True))
    existing = [{**o, "status": {"readyReplicas": 1}} for o in pool_objects(first.objects).values()]
    d = compute_desired(
        observe(
            body(name="air", inferencePool={}, **SPEC),
            inference_pool_api=True,
            inference_pool_children=existing,
        )
    )
    assert d.status["inferencePool"] == {"name": "air", "endpointPicker": "air-epp:9002", "ready": True}
    assert d.prune == ()
    # written over the block of the first pass, its message is cleared (the status is a merge patch)
    again = compute_desired(
        observe(
            body(
                name="air", status={"inferencePool": first.status["inferencePool"]}, inferencePool={}, **SPEC
            ),
            inference_pool_api=True,
            inference_pool_children=existing,
        )
    )
    assert again.status["inferencePool"] == {**d.status["inferencePool"], "message": None}
    settled = {"inferencePool": d.status["inferencePool"]}
    written = compute_desired(
        observe(body(name="air", status=settled, inferencePool={}, **SPEC), inference_pool_api=True,
                inference_pool_children=existing)
    ).status  # fmt: skip
    assert not status_changed(settled, {"inferencePool": written["inferencePool"]})


def test_without_the_api_nothing_is_rendered_and_status_says_to_install_the_crd() -> None:
    d = compute_desired(observe(body(name="air", inferencePool={}, **SPEC), inference_pool_api=False))
    assert pool_objects(d.objects) == {}
    assert d.status["inferencePool"] == {"ready": False, "message": API_MISSING}
    assert "install" in API_MISSING and "inferencepools CRD" in API_MISSING


def test_turning_it_off_prunes_every_object_and_clears_the_status() -> None:
    on = compute_desired(observe(body(name="air", inferencePool={}, **SPEC), inference_pool_api=True))
    existing = list(pool_objects(on.objects).values())
    previous = {"inferencePool": on.status["inferencePool"]}
    off = compute_desired(
        observe(
            body(name="air", status=previous, **SPEC),
            inference_pool_api=True,
            inference_pool_children=existing,
        )
    )
    assert pool_objects(off.objects) == {}
    assert sorted(off.prune) == sorted(child_ref(o) for o in existing)
    assert off.status["inferencePool"] is None  # the merge patch removes the block
    # Nothing of the pool left: nothing to prune, no status field.
    quiet = compute_desired(observe(body(name="air", **SPEC), inference_pool_api=True))
    assert quiet.prune == () and "inferencePool" not in quiet.status


def test_the_reconciler_applies_the_pool_once_keeps_its_picker_apart_and_prunes_it_when_off() -> None:
    """With the components wired around a FakeApi: the six objects are written once (every kind is
    watched, so an unchanged one is not sent again), the picker's Deployment counts as no vLLM
    replica, and removing spec.inferencePool deletes all six and clears the status block."""
    api = FakeApi()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES)
    r.wired.handlers.discovery.inference_pools_served = True
    key = ("llm", "g")
    glmd_ref = ("inference.glm.dev/v1alpha1", "GLMDeployment", "llm", "g")
    r.wired.handlers.on_glmdeployment(
        "ADDED", api.put({**copy.deepcopy(BODY), "spec": {**BODY["spec"], "inferencePool": {}}})
    )
    r.reconcile(key)
    pool = {("InferencePool", "g")} | {(kind, "g-epp") for kind in POOL_KINDS if kind != "InferencePool"}
    assert pool <= {(kind, name) for verb, kind, name in api.calls if verb in ("apply", "create")}

    picker = api.objects[("apps/v1", "Deployment", "llm", "g-epp")]
    r.wired.handlers.on_child(
        "apps/v1",
        "Deployment",
        "MODIFIED",
        api.put({**picker, "status": {"replicas": 1, "readyReplicas": 1}}),
    )
    before = len(api.calls)
    r.wired.queued()
    r.reconcile(key)
    assert [c for c in api.calls[before:] if c[0] != "status"] == [], "nothing sent again"
    status = api.objects[glmd_ref]["status"]
    assert status["inferencePool"] == {"name": "g", "endpointPicker": "g-epp:9002", "ready": True}
    assert status["readyReplicas"] == 0 and status["replicas"] == 0, "the picker is no vLLM replica"

    off = copy.deepcopy(api.objects[glmd_ref])
    del off["spec"]["inferencePool"]
    off["metadata"]["generation"] = 2
    r.wired.handlers.on_glmdeployment("MODIFIED", api.put(off))
    r.reconcile(key)
    assert {(kind, name) for verb, kind, name in api.calls if verb == "delete"} == pool
    assert "inferencePool" not in api.objects[glmd_ref]["status"]
