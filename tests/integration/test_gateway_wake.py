"""A model without a ready replica (scaled to zero) on the real binaries: HAProxy answers an
OpenAI-style 503 with Retry-After and counts the request in its ``wake`` table; the sync sidecar
reads it and reports the model in the GLMGateway's ``status.wake`` (as the gateway's own
ServiceAccount, through the Role the operator renders); the operator's reconciler turns that into
the autoscaler's wake-up of the GLMDeployment serving it, and its own status writes keep it.

Not shown here: requests are not held while the model starts (they get the 503 and retry).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from kubernetes import config as k8s_config

from glm_operator.controller.gateway import GatewayReconciler
from glm_operator.controller.workqueue import WorkQueue
from glm_operator.gateway.routes import Backend, RoutingTable, backend_name
from glm_operator.gateway.sync import GatewaySync, SyncOptions
from tests.harness.clock import ManualClock
from tests.harness.cluster import SessionCluster
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request

from .test_gateway_status import GLMD, create_gateway

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"


def test_a_request_for_a_model_at_zero_is_answered_503_and_reported(tmp_path: Path) -> None:
    table = RoutingTable((Backend("glm-flash", backend_name("glm-flash"), ()),))  # no replica
    with LocalGateway(tmp_path) as gateway:
        gateway.start(table)
        sync = GatewaySync(SyncOptions("ns", "llm", str(tmp_path), None), gateway.runtime)
        sync.driver = gateway.driver
        assert sync.new_wake_requests(now=0.0) == []
        answers = [request(gateway.url, CHAT, {"model": "glm-flash", "messages": []}) for _ in range(3)]
        assert {a.status for a in answers} == {503}
        error = json.loads(answers[0].body)["error"]
        assert error["code"] == "model_not_ready" and answers[0].headers.get("retry-after") == "30"
        assert sync.new_wake_requests(now=1.0) == ["glm-flash"]
        assert sync.new_wake_requests(now=2.0) == [], "reported once until a new request comes"
        request(gateway.url, CHAT, {"model": "glm-flash", "messages": []})
        assert sync.new_wake_requests(now=3.0) == [], "nor again within the report interval"
        assert sync.new_wake_requests(now=11.0) == ["glm-flash"]


def test_status_wake_from_the_gateways_account_wakes_the_model(cluster: SessionCluster, ns: str) -> None:
    api = create_gateway(cluster, ns)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(GLMD))
    woken: list[tuple[tuple[str, str], float]] = []
    gateways = GatewayReconciler(api, WorkQueue(ManualClock()), image="glm-operator:test")
    gateways.wake = lambda key, at: woken.append((key, at)) is None
    glmd = api.get("inference.glm.dev/v1alpha1", "GLMDeployment", ns, "flash")
    body = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert glmd is not None and body is not None
    gateways.on_glmdeployment("ADDED", glmd)
    gateways.on_gateway("ADDED", body)
    asyncio.run(gateways.reconcile((ns, "llm")))  # renders the gateway's ServiceAccount and Role
    assert woken == []

    # What the sidecar sends; the gateway's ServiceAccount may send it (the rendered Role).
    sync = GatewaySync(SyncOptions(ns, "llm", "/unused", None), None)
    sync.report_wake(
        k8s_config.new_client_from_config(str(cluster.kubeconfig)), ["glm-flash"], "2026-12-02T10:00:00Z"
    )
    patch = {"status": {"wake": [{"model": "glm-flash", "requestedAt": "2026-12-02T10:00:00Z"}]}}
    reported = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert reported is not None and reported["status"]["wake"] == patch["status"]["wake"]
    cluster.kubectl(
        "patch", "-n", ns, "glmgw/llm", "--subresource=status", "--type=merge", "-p", json.dumps(patch),
        "--as", f"system:serviceaccount:{ns}:llm-gateway",
    )  # fmt: skip
    spec_edit = cluster.kubectl(
        "patch", "-n", ns, "glmgw/llm", "--type=merge", "-p", json.dumps({"spec": {"replicas": 3}}),
        "--as", f"system:serviceaccount:{ns}:llm-gateway", check=False,
    )  # fmt: skip
    assert spec_edit.returncode != 0, "the gateway's account writes status only"
    live = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert live is not None
    gateways.on_gateway("MODIFIED", live)
    assert [key for key, _ in woken] == [(ns, "flash")]

    # The operator's own status write keeps the sidecar's field.
    asyncio.run(gateways.reconcile((ns, "llm")))
    after = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert after is not None and after["status"]["wake"] == patch["status"]["wake"]
