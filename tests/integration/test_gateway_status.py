"""GLMGateway status and NetworkPolicy against the real apiserver: the reconciler writes conditions
the CRD schema accepts, ``kubectl get glmgw`` shows them in its columns, the Events of a transition
land once; the rendered NetworkPolicy is accepted and means what the docs say.

kube-apiserver + etcd alone run no Deployment controller, so the gateway Deployment's ready pods are
written into its status subresource by the test (as the controller would), then seen by the
reconciler as a watch event would deliver them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config as k8s_config

from glm_operator.clients.kube import KubeClient
from glm_operator.gateway.network_policy import NetworkPolicySettings
from glm_operator.gateway.objects import gateway_labels
from glm_operator.render import names
from tests.harness.cluster import SessionCluster
from tests.harness.controller import gateway_reconciler, reconcile_gateway
from tests.harness.netpol import Pod, allows_ingress

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRDS = ("glmdeployments.inference.glm.dev", "glmgateways.inference.glm.dev")
GATEWAY = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMGateway",
    "metadata": {"name": "llm"},
    "spec": {"apiKeys": {"secretName": "gateway-keys"}, "replicas": 2},
}
GLMD = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMDeployment",
    "metadata": {"name": "flash"},
    "spec": {"model": {"id": "zai-org/GLM-4.5-Air", "servedModelName": "glm-flash"}},
}


def columns(cluster: SessionCluster, ns: str) -> dict[str, str]:
    out = cluster.kubectl("get", "glmgw", "-n", ns, "llm").stdout.splitlines()
    return dict(zip(out[0].split(), out[1].split(), strict=False))


def events(cluster: SessionCluster, ns: str) -> list[tuple[str, str, str]]:
    listed = json.loads(
        cluster.kubectl(
            "get", "events", "-n", ns, "--field-selector=involvedObject.kind=GLMGateway", "-o", "json"
        ).stdout
    )
    return sorted((e["type"], e["reason"], e["message"]) for e in listed["items"])


def create_gateway(cluster: SessionCluster, ns: str) -> KubeClient:
    """Both CRDs installed, GATEWAY created in ``ns``; a client as the operator's (admin here)."""
    for crd in CRDS:
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / f"{crd}.yaml")
        )
    cluster.local.wait_crds_established(*CRDS)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(GATEWAY))
    return KubeClient(k8s_config.new_client_from_config(str(cluster.kubeconfig)))


def test_conditions_columns_and_events_of_a_gateway(cluster: SessionCluster, ns: str) -> None:
    api = create_gateway(cluster, ns)
    gateways = gateway_reconciler(api)
    key = (ns, "llm")

    def reconcile() -> dict[str, Any]:
        body = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
        assert body is not None
        gateways.on_gateway("MODIFIED", body)
        reconcile_gateway(gateways, key)
        live = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
        assert live is not None
        return {c["type"]: c for c in live["status"]["conditions"]}

    # Just created: no pod, no model. The fix is in the messages; one Warning Event.
    first = reconcile()
    assert {t: (c["status"], c["reason"]) for t, c in first.items()} == {
        "Ready": ("False", "Deploying"),
        "KeysLoaded": ("Unknown", "SecretNotMounted"),
        "RoutesResolved": ("False", "NoServedModels"),
    }
    assert "create secret generic gateway-keys" in first["KeysLoaded"]["message"]
    row = columns(cluster, ns)
    assert (row["READY"], row["KEYS"], row["ROUTES"], row["MODELS"]) == ("False", "Unknown", "False", "0")
    assert row["SERVICE"] == "llm-gateway"
    warnings = events(cluster, ns)
    assert [(t, r) for t, r, _ in warnings] == [("Warning", "NoServedModels")]
    assert f"create a GLMDeployment in {ns}" in warnings[0][2]

    # A GLMDeployment serves a name and a gateway pod is ready: all True, one Normal Event.
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(GLMD))
    glmd = api.get("inference.glm.dev/v1alpha1", "GLMDeployment", ns, "flash")
    assert glmd is not None
    gateways.on_glmdeployment("ADDED", glmd)
    cluster.kubectl(
        "patch", "-n", ns, "deployment/llm-gateway", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"replicas": 2, "readyReplicas": 1}}),
    )  # fmt: skip
    deployment = api.get("apps/v1", "Deployment", ns, "llm-gateway")
    assert deployment is not None
    gateways.on_gateway_deployment("MODIFIED", deployment)
    ready = reconcile()
    assert {t: c["status"] for t, c in ready.items()} == dict.fromkeys(
        ("Ready", "KeysLoaded", "RoutesResolved"), "True"
    )
    assert ready["RoutesResolved"]["lastTransitionTime"] >= first["RoutesResolved"]["lastTransitionTime"]
    row = columns(cluster, ns)
    assert (row["READY"], row["KEYS"], row["ROUTES"], row["MODELS"], row["PODS"]) == (
        "True",
        "True",
        "True",
        "1",
        "1",
    )
    assert [(t, r) for t, r, _ in events(cluster, ns)] == [("Normal", "Ready"), ("Warning", "NoServedModels")]

    # Nothing changed: a second run writes no Event.
    reconcile()
    assert len(events(cluster, ns)) == 2
    explained = cluster.kubectl("explain", "glmgateway.status.conditions").stdout
    assert "RoutesResolved" in explained


def test_the_network_policy_is_accepted_and_means_what_it_says(cluster: SessionCluster, ns: str) -> None:
    """The rendered NetworkPolicy passes the apiserver's validation; the stored object (defaults
    applied) lets the gateway and the scraper in and keeps another namespace out, as a CNI that
    implements NetworkPolicy would. Enforcement is not shown: no CNI runs here (nor in KWOK)."""
    api = create_gateway(cluster, ns)
    body = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert body is not None
    gateways = gateway_reconciler(api)
    gateways.on_gateway("ADDED", body)
    reconcile_gateway(gateways, (ns, "llm"))
    live = api.get("networking.k8s.io/v1", "NetworkPolicy", ns, "llm-gateway-vllm")
    assert live is not None
    assert live["metadata"]["ownerReferences"][0]["name"] == "llm"

    vllm = Pod(ns, names.common_labels("flash", "h100", "NVIDIA-H100-80GB-HBM3"))
    namespaces = {ns: {}, "elsewhere": {}, "monitoring": {}}

    def allowed(source: Pod) -> bool:
        return allows_ingress([live], vllm, source, 8000, namespaces)

    assert allowed(Pod(ns, gateway_labels("llm")))
    assert allowed(Pod("monitoring", {"app.kubernetes.io/name": "prometheus"}))
    assert not allowed(Pod("elsewhere", {"run": "curl"}))
    assert not allowed(Pod(ns, {"run": "curl"}))

    # Turned off in the chart: the next reconcile deletes it.
    off = gateway_reconciler(api, network_policy=NetworkPolicySettings(enabled=False))
    off.on_gateway("MODIFIED", body)
    reconcile_gateway(off, (ns, "llm"))
    assert api.get("networking.k8s.io/v1", "NetworkPolicy", ns, "llm-gateway-vllm") is None


def test_allow_lists_are_validated_and_an_unknown_model_is_named(cluster: SessionCluster, ns: str) -> None:
    api = create_gateway(cluster, ns)
    bad = {**GATEWAY, "spec": {**GATEWAY["spec"], "clients": [{"name": "team a", "models": ["glm-flash"]}]}}
    refused = cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0 and "spec.clients[0].name" in refused.stderr
    listed = {**GATEWAY, "spec": {**GATEWAY["spec"], "clients": [{"name": "team-a", "models": ["glm-typo"]}]}}
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(listed))
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(GLMD))
    gateways = gateway_reconciler(api)
    glmd = api.get("inference.glm.dev/v1alpha1", "GLMDeployment", ns, "flash")
    body = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert glmd is not None and body is not None
    gateways.on_glmdeployment("ADDED", glmd)
    gateways.on_gateway("ADDED", body)
    reconcile_gateway(gateways, (ns, "llm"))
    live = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert live is not None
    routes = {c["type"]: c for c in live["status"]["conditions"]}["RoutesResolved"]
    assert (routes["status"], routes["reason"]) == ("False", "UnknownModel")
    assert "spec.clients[0].models[0] ('glm-typo', client team-a)" in routes["message"]
    assert "served names: glm-flash" in routes["message"]
