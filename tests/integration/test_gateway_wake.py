"""A model without a ready replica (scaled to zero) on the real binaries: HAProxy answers an
OpenAI-style 503 with Retry-After and counts the request in its ``wake`` table; the sync sidecar
reads it and reports the model in the GLMGateway's ``status.wake`` (as the gateway's own
ServiceAccount, through the Role the operator renders); the operator's reconciler turns that into
the autoscaler's wake-up of the GLMDeployment serving it, and its own status writes keep it.

Meanwhile the requests are held at the proxy (bounded: so many per model, so long each): they go
through when the first replica is ready; past the bound they get the 503 with Retry-After.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import config as k8s_config

from glm_operator.gateway.haproxy_config import WAKE_TABLE
from glm_operator.gateway.routes import Backend, Member, RoutingTable, backend_name
from glm_operator.gateway.sync import GatewaySync, SyncOptions
from tests.harness.cluster import SessionCluster, wait_for
from tests.harness.controller import gateway_reconciler, reconcile_gateway
from tests.harness.haproxy import LocalGateway
from tests.harness.load import Result, request
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .test_gateway_status import GLMD, create_gateway

pytestmark = pytest.mark.integration
CHAT = "/v1/chat/completions"


AT_ZERO = RoutingTable((Backend("glm-flash", backend_name("glm-flash"), ()),))  # no replica


def chat() -> dict[str, object]:
    return {"model": "glm-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_held_requests_go_through_when_the_first_replica_is_ready(tmp_path: Path) -> None:
    emulator = VLLMMetricsEmulator({"glm-flash": (0.0, 0.0)}).start()
    try:
        with LocalGateway(tmp_path, hold_max_requests=3, health_check_interval_seconds=1) as gateway:
            gateway.start(AT_ZERO)
            results: dict[int, Result] = {}
            threads = [
                threading.Thread(target=lambda i=i: results.update({i: request(gateway.url, CHAT, chat())}))
                for i in range(4)
            ]
            for thread in threads:
                thread.start()
            # Three are held; the fourth finds the queue full and gets its 503 at once.
            full = wait_for(
                lambda: [r for r in results.values() if r.status == 503] or None, timeout=30, what="the 503"
            )
            assert len(full) == 1 and json.loads(full[0].body)["error"]["code"] == "model_not_ready"
            assert full[0].headers.get("retry-after") == "30"
            assert len(results) == 1, "the other three are still held"

            # The first replica is ready: the sidecar's runtime commands put it in its slot.
            member = Member(1, "flash-0", "127.0.0.1", emulator.port, 1, True)
            ready = RoutingTable((Backend("glm-flash", backend_name("glm-flash"), (member,)),))
            assert gateway.driver.apply(ready) == "runtime"
            for thread in threads:
                thread.join(timeout=60)
            assert sorted(r.status for r in results.values()) == [200, 200, 200, 503]
    finally:
        emulator.stop()


def test_past_the_longest_wait_a_held_request_gets_503(tmp_path: Path) -> None:
    with LocalGateway(tmp_path, hold_max_wait_seconds=1) as gateway:
        gateway.start(AT_ZERO)
        expired = request(gateway.url, CHAT, chat())
        assert expired.status == 503 and json.loads(expired.body)["error"]["code"] == "model_not_ready"
        assert expired.headers.get("retry-after") == "30"


def test_retry_after_is_the_models_expected_wake_up_changed_without_a_reload(tmp_path: Path) -> None:
    """A measured wake-up (status.autoscaler.wakeUpSeconds, 41.2 s) is the Retry-After (42) of the
    queue-full and wait-expired 503s; a new estimate reaches the running proxy as one ``set map``,
    not a reload (held requests live in the process that holds them)."""
    name = backend_name("glm-flash")
    measured = RoutingTable((Backend("glm-flash", name, (), wake_up_seconds=41.2),))
    with LocalGateway(tmp_path, hold_max_requests=1, hold_max_wait_seconds=2) as gateway:
        gateway.start(measured)
        results: list[Result] = []
        held = threading.Thread(target=lambda: results.append(request(gateway.url, CHAT, chat())))
        held.start()
        wait_for(lambda: gateway.runtime.key_counters(WAKE_TABLE) or None, timeout=10, what="one held")
        full = request(gateway.url, CHAT, chat())
        assert full.status == 503 and full.headers.get("retry-after") == "42", full
        assert b"waiting for this model to start: retry after 42 seconds" in full.body
        assert b'"code":"model_not_ready"' in full.body and results == []
        held.join(timeout=30)
        (expired,) = results
        assert expired.status == 503 and expired.headers.get("retry-after") == "42"
        assert b"No replica of this model is ready" in expired.body

        worker = gateway.runtime.process_id()
        faster = RoutingTable((Backend("glm-flash", name, (), wake_up_seconds=7.5),))
        assert gateway.driver.apply(faster) == "runtime"
        assert gateway.runtime.process_id() == worker, "no reload"
        expired = request(gateway.url, CHAT, chat())
        assert expired.status == 503 and expired.headers.get("retry-after") == "8"
        assert (tmp_path / "retry-after.map").read_text() == f"{name} 8\n", "kept for a restart"


def test_a_request_for_a_model_at_zero_is_answered_503_and_reported(tmp_path: Path) -> None:
    table = AT_ZERO
    with LocalGateway(tmp_path, hold_max_requests=0) as gateway:
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
    gateways = gateway_reconciler(api, wake=lambda key, at: woken.append((key, at)) is None)
    glmd = api.get("inference.glm.dev/v1alpha1", "GLMDeployment", ns, "flash")
    body = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert glmd is not None and body is not None
    gateways.on_glmdeployment("ADDED", glmd)
    gateways.on_gateway("ADDED", body)
    reconcile_gateway(gateways, (ns, "llm"))  # renders the gateway's ServiceAccount and Role
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
    reconcile_gateway(gateways, (ns, "llm"))
    after = api.get("inference.glm.dev/v1alpha1", "GLMGateway", ns, "llm")
    assert after is not None and after["status"]["wake"] == patch["status"]["wake"]
