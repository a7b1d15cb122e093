"""The GLMGateway's NetworkPolicy: rendered by default, and what it means (a pure evaluator of the
networking.k8s.io/v1 rules, ``tests.harness.netpol``): the gateway and the metrics scraper reach
the vLLM pods, a pod of another namespace or a bare pod of the same one does not. KWOK runs no CNI,
so enforcement itself is not shown here."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.commands import run
from glm_operator.gateway.network_policy import (
    NetworkPolicySettings,
    network_policy_settings,
    parse_metrics_from,
)
from glm_operator.gateway.objects import gateway_labels, render_gateway
from glm_operator.render import names
from tests.harness.controller import gateway_reconciler, reconcile_gateway
from tests.harness.fake_api import FakeApi
from tests.harness.netpol import Pod, allows_ingress

BODY: dict[str, Any] = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1", "generation": 1},
    "spec": {"apiKeys": {"secretName": "gateway-keys"}},
}
SPEC = GLMGatewaySpec.model_validate(BODY["spec"])
VLLM = Pod("team-a", names.common_labels("flash", "h100", "NVIDIA-H100-80GB-HBM3"), "10.1.0.5")
WORKER = Pod(
    "team-a",
    names.common_labels("big", "h100", "NVIDIA-H100-80GB-HBM3", component=names.COMPONENT_WORKER),
    "10.1.0.6",
)
GATEWAY = Pod("team-a", gateway_labels("llm"), "10.1.0.9")
NAMESPACES = {"team-a": {}, "team-b": {}, "monitoring": {}}
PORT = 8000


def policies(settings: NetworkPolicySettings | None = None) -> list[dict[str, Any]]:
    return [o for o in render_gateway(BODY, SPEC, "glm-operator:1", settings) if o["kind"] == "NetworkPolicy"]


def allowed(source: Pod, target: Pod = VLLM, rendered: list[dict[str, Any]] | None = None) -> bool:
    return allows_ingress(policies() if rendered is None else rendered, target, source, PORT, NAMESPACES)


def test_a_policy_is_rendered_by_default_owned_by_the_gateway() -> None:
    (policy,) = policies()
    assert policy["metadata"]["name"] == "llm-gateway-vllm"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "GLMGateway"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policies(NetworkPolicySettings(enabled=False)) == []


def test_only_the_gateway_the_scraper_and_other_vllm_pods_get_in() -> None:
    assert allowed(GATEWAY)
    assert allowed(GATEWAY, target=WORKER)
    assert allowed(WORKER), "a multi-node replica's worker reaches its leader"
    assert allowed(Pod("monitoring", {names.LABEL_NAME: "prometheus"}))
    assert not allowed(Pod("team-b", {}, "10.2.0.7")), "a pod of another namespace is refused"
    assert not allowed(Pod("team-b", gateway_labels("llm"))), "the gateway's labels in another namespace"
    assert not allowed(Pod("team-a", {"app": "curl"})), "a bare pod of the same namespace"
    assert not allowed(Pod("team-a", gateway_labels("other"))), (
        "another gateway's pods (it has its own policy)"
    )


def test_a_namespace_without_a_gateway_is_untouched_and_policies_add_up() -> None:
    stranger = Pod("team-b", {}, "10.2.0.7")
    assert allowed(stranger, target=Pod("team-c", VLLM.labels))
    second = render_gateway({**BODY, "metadata": {**BODY["metadata"], "name": "other"}}, SPEC, "i", None)
    both = policies() + [o for o in second if o["kind"] == "NetworkPolicy"]
    assert allowed(Pod("team-a", gateway_labels("other")), rendered=both)
    assert not allowed(stranger, rendered=both)


def test_metrics_from_comes_from_the_chart_and_bad_values_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def config() -> Any:
        parser = argparse.ArgumentParser()
        run.register(parser.add_subparsers())
        return run.config_from_args(parser.parse_args(["run"]))

    assert config().gateway_network_policy == NetworkPolicySettings()
    monkeypatch.setenv("GLM_OPERATOR_GATEWAY_METRICS_FROM", '[{"ipBlock": {"cidr": "10.9.0.0/16"}}]')
    rendered = policies(config().gateway_network_policy)
    assert allowed(Pod("monitoring", {}, "10.9.1.1"), rendered=rendered)
    assert not allowed(Pod("monitoring", {names.LABEL_NAME: "prometheus"}), rendered=rendered)
    for bad, where in [("{", "not JSON"), ('{"a": 1}', "not a list"), ('[{"pod": {}}]', "[0]")]:
        with pytest.raises(ValueError, match=r"gateway\.networkPolicy\.metricsFrom") as err:
            parse_metrics_from(bad)
        assert where in str(err.value)
    with pytest.raises(ValueError, match=r"gateway\.networkPolicy\.enabled"):
        network_policy_settings("yes", None)
    monkeypatch.setenv("GLM_OPERATOR_GATEWAY_NETWORK_POLICY", "yes")
    with pytest.raises(SystemExit, match=r"gateway\.networkPolicy\.enabled: 'yes'; set true or false"):
        config()  # the operator stops at start, the chart value named


@pytest.mark.parametrize("enabled", [True, False])
def test_the_reconciler_applies_it_or_deletes_the_one_made_before(enabled: bool) -> None:
    api = FakeApi()
    gateways = gateway_reconciler(api, network_policy=NetworkPolicySettings(enabled=enabled))
    gateways.on_gateway("ADDED", api.put(BODY))
    reconcile_gateway(gateways, ("team-a", "llm"))
    assert (("apply", "NetworkPolicy", "llm-gateway-vllm") in api.calls) is enabled
    assert (("delete", "NetworkPolicy", "llm-gateway-vllm") in api.calls) is not enabled
