"""GLMGateway status (pure): each condition's reasons name the field and the fix, transitions post
Events once, ``lastTransitionTime`` moves only on a flip; and the reconciler writes it."""

from __future__ import annotations

import dataclasses
from typing import Any

from glm_operator.api.v1alpha1 import API_VERSION
from glm_operator.controller.workqueue import WorkQueue
from glm_operator.gateway.status import GatewayObserved, gateway_status
from tests.harness.clock import ManualClock
from tests.harness.controller import drain, gateway_reconciler, reconcile_gateway
from tests.harness.fake_api import FakeApi

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


def written_status(api: FakeApi) -> dict[str, Any]:
    gateway = api.get_object(API_VERSION, "GLMGateway", "llm", "gw")
    assert gateway is not None
    return dict(gateway["status"])


def events(api: FakeApi) -> list[tuple[str, str]]:
    return [(type_, reason) for type_, reason, _ in api.events]


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
    api = FakeApi()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(ManualClock())
    gateways = gateway_reconciler(api, queue)
    gateways.on_gateway("ADDED", api.put(GATEWAY))
    assert drain(queue) == [KEY]
    reconcile_gateway(gateways, KEY)
    first = {c["type"]: c["reason"] for c in written_status(api)["conditions"]}
    assert first == {
        "Ready": "Deploying",
        "KeysLoaded": "SecretNotMounted",
        "RoutesResolved": "NoServedModels",
    }
    assert events(api) == [("Warning", "NoServedModels")]

    gateways.on_glmdeployment("ADDED", glmdeployment("flash", "glm-5.3-flash"))
    gateways.on_glmdeployment("MODIFIED", glmdeployment("flash", "glm-5.3-flash"))  # same name: once
    gateways.on_gateway_deployment("ADDED", gateway_deployment(ready=0))
    gateways.on_gateway_deployment("MODIFIED", gateway_deployment(ready=1))
    assert drain(queue) == [KEY]
    applies = len(api.writes())
    reconcile_gateway(gateways, KEY)
    assert [verb for verb, _, _ in api.writes()[applies:]] == ["status"], "children unchanged: not sent"
    status = written_status(api)
    assert {c["type"]: c["status"] for c in status["conditions"]} == dict.fromkeys(
        ("Ready", "KeysLoaded", "RoutesResolved"), "True"
    )
    assert (status["models"], status["readyReplicas"], status["service"]) == (
        ["glm-5.3-flash"],
        1,
        "gw-gateway",
    )
    assert events(api)[1:] == [("Normal", "Ready")]

    gateways.on_gateway_deployment("MODIFIED", gateway_deployment(ready=1))  # nothing shown changed
    gateways.on_glmdeployment("DELETED", glmdeployment("other", "other-model"))  # never served here
    gateway = api.get_object(API_VERSION, "GLMGateway", "llm", "gw")
    gateways.on_gateway("MODIFIED", gateway)  # the echo of its own status write
    assert drain(queue) == []
    gateways.on_glmdeployment("DELETED", glmdeployment("flash", "glm-5.3-flash"))
    assert drain(queue) == [KEY]


def test_a_status_computed_from_an_older_read_is_not_written_and_retried() -> None:
    api = FakeApi()
    clock = ManualClock()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(clock)
    gateways = gateway_reconciler(api, queue, clock)
    gateways.on_gateway("ADDED", api.put(GATEWAY))
    drain(queue)
    reconcile_gateway(gateways, KEY)
    before = written_status(api)
    # Someone writes the status (the sidecar's status.wake) after the reconciler read the object.
    newer = api.get_object(API_VERSION, "GLMGateway", "llm", "gw")
    assert newer is not None
    api.put({**newer, "status": {**newer["status"], "wake": [{"model": "m", "requestedAt": "t"}]}})
    gateways.on_glmdeployment("ADDED", glmdeployment("flash", "glm-5.3-flash"))  # a new status to write
    assert drain(queue) == [KEY]
    reconcile_gateway(gateways, KEY)
    assert api.writes("status")[-1] == ("status", "GLMGateway", "gw")  # tried, conditional: 409
    assert written_status(api)["conditions"] == before["conditions"], "nothing written over the newer"
    assert clock.pending(), "retried with backoff"
    gateways.on_gateway("MODIFIED", api.get_object(API_VERSION, "GLMGateway", "llm", "gw"))  # its event
    clock.advance(max(clock.pending()))
    assert KEY in drain(queue)
    reconcile_gateway(gateways, KEY)
    status = written_status(api)
    assert status["models"] == ["glm-5.3-flash"] and status["wake"] == [{"model": "m", "requestedAt": "t"}]


def test_an_invalid_spec_is_not_applied_but_reported() -> None:
    api = FakeApi()
    queue: WorkQueue[tuple[str, str]] = WorkQueue(ManualClock())
    gateways = gateway_reconciler(api, queue)
    gateways.on_gateway(
        "ADDED", api.put({**GATEWAY, "spec": {"apiKeys": {"secretName": "k"}, "replicas": 0}})
    )
    reconcile_gateway(gateways, KEY)
    assert [verb for verb, _, _ in api.writes()] == ["status"], "nothing applied"
    conditions = written_status(api)["conditions"]
    assert {c["reason"] for c in conditions} == {"InvalidSpec"}
    assert "spec.replicas" in conditions[0]["message"]
    assert ("Warning", "InvalidSpec") in events(api)


def test_status_wake_wakes_the_glmdeployments_serving_the_model() -> None:
    woken: list[tuple[tuple[str, str], float]] = []
    wake = [
        {"model": "glm-5.3-flash", "requestedAt": "2026-12-02T10:00:00Z"},
        {"model": "x", "requestedAt": "bad"},
    ]
    body = {**GATEWAY, "status": {"wake": wake}}
    for waking in (None, lambda key, at: woken.append((key, at)) is None):  # no autoscaler, then one
        gateways = gateway_reconciler(FakeApi(), wake=waking)
        gateways.on_glmdeployment("ADDED", glmdeployment("flash", "glm-5.3-flash"))
        gateways.on_glmdeployment("ADDED", glmdeployment("other", "glm-other"))
        gateways.on_gateway("MODIFIED", body)
    assert woken == [(("llm", "flash"), 1796205600.0)]  # 2026-12-02T10:00:00Z
