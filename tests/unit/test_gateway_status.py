"""GLMGateway status (pure): each condition's reasons name the field and the fix, transitions post
Events once, ``lastTransitionTime`` moves only on a flip; and the reconciler writes it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.workqueue import WorkQueue
from glm_operator.gateway.status import GatewayObserved, gateway_status
from tests.harness.clock import ManualClock
from tests.harness.controller import drain

STARTING = GatewayObserved(
    namespace="llm",
    name="gw",
    generation=3,
    deployment="gw-gateway",
    secret_name="gateway-keys",
    secret_key="keys",
    replicas=2,
    deployment_seen=True,
    served={"glm-5.3-flash": ("flash",), "glm-5.3-flash[1m]": ("flash-1m",)},
)
SERVING = dataclasses.replace(STARTING, ready_replicas=2)


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(c["type"]): c for c in conditions}


def test_a_serving_gateway_is_ready_with_its_keys_and_routes() -> None:
    status = gateway_status(SERVING, [], "2026-12-02T10:00:00Z")
    c = by_type(status.conditions)
    assert [x["type"] for x in status.conditions] == ["Ready", "KeysLoaded", "RoutesResolved"]
    assert {t: x["status"] for t, x in c.items()} == {
        "Ready": "True",
        "KeysLoaded": "True",
        "RoutesResolved": "True",
    }
    assert all(x["observedGeneration"] == 3 for x in status.conditions)
    assert "Secret gateway-keys key 'keys'" in c["KeysLoaded"]["message"]
    assert "glm-5.3-flash, glm-5.3-flash[1m]" in c["RoutesResolved"]["message"]
    assert status.fields == {
        "replicas": 2,
        "readyReplicas": 2,
        "models": ["glm-5.3-flash", "glm-5.3-flash[1m]"],
        "modelCount": 2,
    }
    assert [(e.type, e.reason) for e in status.events] == [("Normal", "Ready")]


def test_starting_pods_are_not_a_warning_but_a_passed_deadline_names_the_secret() -> None:
    status = gateway_status(STARTING, [], "t0")
    c = by_type(status.conditions)
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "PodsStarting")
    assert (c["KeysLoaded"]["status"], c["KeysLoaded"]["reason"]) == ("Unknown", "SecretNotMounted")
    assert (
        "kubectl -n llm create secret generic gateway-keys --from-literal=keys=" in c["KeysLoaded"]["message"]
    )
    assert status.events == ()

    stalled = gateway_status(dataclasses.replace(STARTING, rollout_stalled=True), status.conditions, "t1")
    ready = by_type(stalled.conditions)["Ready"]
    assert ready["reason"] == "NoReadyPods"
    assert "FailedMount" in ready["message"] and "gateway-keys" in ready["message"]
    assert "spec.apiKeys" in ready["message"]
    assert ready["lastTransitionTime"] == "t0", "False to False: a new reason is not a transition"
    assert [(e.type, e.reason) for e in stalled.events] == [("Warning", "NoReadyPods")]


def test_no_served_model_says_how_to_get_one_and_warns_once() -> None:
    lonely = dataclasses.replace(SERVING, served={})
    first = gateway_status(lonely, [], "t0")
    routes = by_type(first.conditions)["RoutesResolved"]
    assert (routes["status"], routes["reason"]) == ("False", "NoServedModels")
    assert "create a GLMDeployment in llm" in routes["message"] and "servedModelName" in routes["message"]
    assert ("Warning", "NoServedModels") in [(e.type, e.reason) for e in first.events]
    again = gateway_status(lonely, first.conditions, "t1")
    assert again.events == (), "nothing flipped: no second Event"
    assert again.conditions == first.conditions


def test_an_allow_list_naming_an_unknown_model_names_the_field() -> None:
    listed = dataclasses.replace(SERVING, allow_lists=(("team-a", ("glm-5.3-flash", "glm-typo")),))
    status = gateway_status(listed, [], "t0")
    routes = by_type(status.conditions)["RoutesResolved"]
    assert (routes["status"], routes["reason"]) == ("False", "UnknownModel")
    assert "spec.clients[0].models[1] ('glm-typo', client team-a)" in routes["message"]
    assert "glm-5.3-flash, glm-5.3-flash[1m]" in routes["message"], "the served names to pick from"
    assert ("Warning", "UnknownModel") in [(e.type, e.reason) for e in status.events]


def test_an_invalid_spec_fails_every_condition_naming_the_field() -> None:
    bad = dataclasses.replace(
        STARTING, spec_error="spec.replicas: Input should be greater than or equal to 1"
    )
    status = gateway_status(bad, [], "t0")
    assert {c["reason"] for c in status.conditions} == {"InvalidSpec"}
    assert all("spec.replicas" in c["message"] for c in status.conditions)
    assert ("Warning", "InvalidSpec") in [(e.type, e.reason) for e in status.events]


def test_a_flip_moves_last_transition_time_only_for_that_condition() -> None:
    ready = gateway_status(SERVING, [], "t0").conditions
    down = gateway_status(dataclasses.replace(SERVING, ready_replicas=0), ready, "t1").conditions
    c = by_type(down)
    assert c["Ready"]["lastTransitionTime"] == "t1"
    assert c["RoutesResolved"]["lastTransitionTime"] == "t0"


# -- the reconciler ---------------------------------------------------------------------------
GATEWAY = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "gw", "namespace": "llm", "uid": "u1", "generation": 1},
    "spec": {"apiKeys": {"secretName": "gateway-keys"}},
}
KEY = ("llm", "gw")


class RecordingApi:
    def __init__(self) -> None:
        self.applied: list[str] = []
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []

    def apply(self, obj: Mapping[str, Any]) -> None:
        self.applied.append(str(obj["kind"]))

    def request(self, method: str, path: str, *, body: Any, content_type: str) -> None:
        assert path.endswith("/namespaces/llm/glmgateways/gw/status")
        self.statuses.append(body["status"])

    def create_event(self, involved: Any, *, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((type_, reason))


def glmdeployment(name: str, served: str | None) -> dict[str, Any]:
    spec = {"model": {"servedModelName": served}} if served else {"model": {}}
    return {"metadata": {"name": name, "namespace": "llm"}, "spec": spec}


def gateway_deployment(ready: int) -> dict[str, Any]:
    owner = {"kind": "GLMGateway", "name": "gw", "uid": "u1"}
    return {
        "metadata": {"name": "gw-gateway", "namespace": "llm", "generation": 1, "ownerReferences": [owner]},
        "status": {"readyReplicas": ready},
    }


def test_the_reconciler_follows_pods_and_served_names_into_the_status() -> None:
    api = RecordingApi()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(ManualClock())
    gateways = GatewayReconciler(api, queue, image="glm-operator:test")  # type: ignore[arg-type]
    gateways.on_gateway("ADDED", GATEWAY)
    assert drain(queue) == [KEY]
    asyncio.run(gateways.reconcile(KEY))
    first = {c["type"]: c["reason"] for c in api.statuses[-1]["conditions"]}
    assert first == {
        "Ready": "Deploying",
        "KeysLoaded": "SecretNotMounted",
        "RoutesResolved": "NoServedModels",
    }
    assert api.events == [("Warning", "NoServedModels")]

    gateways.on_glmdeployment("ADDED", glmdeployment("flash", "glm-5.3-flash"))
    gateways.on_glmdeployment("MODIFIED", glmdeployment("flash", "glm-5.3-flash"))  # same name: once
    gateways.on_gateway_deployment("ADDED", gateway_deployment(ready=0))
    gateways.on_gateway_deployment("MODIFIED", gateway_deployment(ready=1))
    assert drain(queue) == [KEY]
    asyncio.run(gateways.reconcile(KEY))
    status = api.statuses[-1]
    assert {c["type"]: c["status"] for c in status["conditions"]} == dict.fromkeys(
        ("Ready", "KeysLoaded", "RoutesResolved"), "True"
    )
    assert (status["models"], status["readyReplicas"], status["service"]) == (
        ["glm-5.3-flash"],
        1,
        "gw-gateway",
    )
    assert api.events[1:] == [("Normal", "Ready")]

    gateways.on_gateway_deployment("MODIFIED", gateway_deployment(ready=1))  # nothing shown changed
    gateways.on_glmdeployment("DELETED", glmdeployment("other", "other-model"))  # never served here
    assert drain(queue) == []
    gateways.on_glmdeployment("DELETED", glmdeployment("flash", "glm-5.3-flash"))
    assert drain(queue) == [KEY]


def test_an_invalid_spec_is_not_applied_but_reported() -> None:
    api = RecordingApi()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(ManualClock())
    gateways = GatewayReconciler(api, queue, image="glm-operator:test")  # type: ignore[arg-type]
    gateways.on_gateway("ADDED", {**GATEWAY, "spec": {"apiKeys": {"secretName": "k"}, "replicas": 0}})
    asyncio.run(gateways.reconcile(KEY))
    assert api.applied == []
    conditions = api.statuses[-1]["conditions"]
    assert {c["reason"] for c in conditions} == {"InvalidSpec"}
    assert "spec.replicas" in conditions[0]["message"]
    assert ("Warning", "InvalidSpec") in api.events


def test_status_wake_wakes_the_glmdeployments_serving_the_model() -> None:
    queue: WorkQueue[tuple[str, str]] = WorkQueue(ManualClock())
    gateways = GatewayReconciler(RecordingApi(), queue, image="i")  # type: ignore[arg-type]
    woken: list[tuple[tuple[str, str], float]] = []
    gateways.on_glmdeployment("ADDED", glmdeployment("flash", "glm-5.3-flash"))
    gateways.on_glmdeployment("ADDED", glmdeployment("other", "glm-other"))
    wake = [
        {"model": "glm-5.3-flash", "requestedAt": "2026-12-02T10:00:00Z"},
        {"model": "x", "requestedAt": "bad"},
    ]
    body = {**GATEWAY, "status": {"wake": wake}}
    gateways.on_gateway("MODIFIED", body)  # no autoscaler (no Prometheus): nothing to wake
    gateways.wake = lambda key, at: woken.append((key, at)) is None
    gateways.on_gateway("MODIFIED", body)
    assert woken == [(("llm", "flash"), 1796205600.0)]  # 2026-12-02T10:00:00Z
