"""compute_gateway_desired on whole scenarios: a GLMGateway and what the watches saw in; objects,
prunes, status and Events out. No apiserver, no reconciler."""

from __future__ import annotations

import copy
from typing import Any

from glm_operator.desired.gateway import DeploymentView, ObservedGateway, compute_gateway_desired
from glm_operator.gateway.network_policy import NetworkPolicySettings

NOW = "2026-12-02T10:00:00Z"
BODY: dict[str, Any] = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm", "namespace": "team-a", "uid": "u1", "generation": 2},
    "spec": {"apiKeys": {"secretName": "keys"}, "replicas": 2},
}


def observe(body: dict[str, Any] = BODY, **kw: Any) -> ObservedGateway:
    return ObservedGateway(body=body, image="glm-operator:1", now=NOW, **kw)


def reasons(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["reason"] for c in status["conditions"]}


def test_a_new_gateway_renders_its_objects_and_says_what_it_waits_for() -> None:
    desired = compute_gateway_desired(observe())
    kinds = [o["kind"] for o in desired.objects]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"]
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "u1" for o in desired.objects)
    assert desired.prune == ()
    assert reasons(desired.status) == {
        "Ready": "Deploying",
        "KeysLoaded": "SecretNotMounted",
        "RoutesResolved": "NoServedModels",
    }
    assert desired.status["observedGeneration"] == 2 and desired.status["service"] == "llm-gateway"
    assert (desired.status["replicas"], desired.status["readyReplicas"], desired.status["modelCount"]) == (
        2,
        0,
        0,
    )
    assert [(e.type, e.reason) for e in desired.events] == [("Warning", "NoServedModels")]


def test_serving_then_nothing_changed_announces_nothing_more() -> None:
    serving = observe(
        deployment=DeploymentView(generation=1, ready_replicas=2, rollout_stalled=False),
        served={"glm-flash": ("flash",)},
    )
    first = compute_gateway_desired(serving)
    assert set(reasons(first.status).values()) == {"PodsReady", "SecretMounted", "ModelsRouted"}
    assert first.status["models"] == ["glm-flash"] and first.status["readyReplicas"] == 2
    assert [(e.type, e.reason) for e in first.events] == [("Normal", "Ready")]
    written = {**copy.deepcopy(BODY), "status": first.status}
    again = compute_gateway_desired(observe(written, deployment=serving.deployment, served=serving.served))
    assert again.status == first.status and again.events == ()


def test_the_network_policy_turned_off_is_not_rendered_but_pruned() -> None:
    desired = compute_gateway_desired(observe(network_policy=NetworkPolicySettings(enabled=False)))
    assert "NetworkPolicy" not in [o["kind"] for o in desired.objects]
    assert desired.prune == (("networking.k8s.io/v1", "NetworkPolicy", "llm-gateway-vllm"),)


def test_an_invalid_spec_renders_nothing_and_names_the_field_everywhere() -> None:
    bad = {**BODY, "spec": {"apiKeys": {"secretName": "keys"}, "replicas": 0}}
    desired = compute_gateway_desired(observe(bad, network_policy=NetworkPolicySettings(enabled=False)))
    assert desired.objects == () and desired.prune == ()
    assert set(reasons(desired.status).values()) == {"InvalidSpec"}
    assert all("spec.replicas" in c["message"] for c in desired.status["conditions"])
    assert ("Warning", "InvalidSpec") in [(e.type, e.reason) for e in desired.events]
