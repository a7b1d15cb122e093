"""Scale to zero and back through the gateway, on the local control plane with the real HAProxy.

The operator runs with Prometheus (its autoscaler); a GLMDeployment with ``minReplicas: 0`` starts
at zero. ``glm-operator gateway sync`` runs on the test machine as the gateway's ServiceAccount,
driving HAProxy on loopback; the vLLM emulator on 127.0.0.1 stands for the replica's pod (the
sync's test-only address map turns every pod IP into 127.0.0.1: nothing dials a pod IP). A burst
of 20 requests is held at the proxy; the sidecar reports the model in ``status.wake``, the
autoscaler wakes it, the KWOK replica turns Ready, the sidecar puts it in its slot, and all 20 are
answered. Once its cold start is measured the model's expected wake-up is the Retry-After of the
queue-full and wait-expired 503s.

The second test runs two gateway replicas (two HAProxy processes and two sidecars, each as one of
the gateway Deployment's KWOK pods) sharing one key's rate limit through HAProxy peers on loopback.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from glm_operator.clients.haproxy import send
from glm_operator.gateway.haproxy_config import WAKE_TABLE, key_table_name
from glm_operator.gateway.routes import backend_name
from tests.harness.cluster import free_port
from tests.harness.haproxy import LocalGateway
from tests.harness.load import Result, request
from tests.harness.operator import RunningOperator
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster
from .test_autoscaling import MODEL, emulator, prometheus, scaling_operator  # noqa: F401 - fixtures
from .test_controller import ONE_L4, apply, get, glmd, manifest, small, wait_for
from .test_gateway_sync import KEY, Sync, gateway_kubeconfig, ready_pod_ips

pytestmark = pytest.mark.e2e
CHAT = "/v1/chat/completions"
BURST = 20


def chat(model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def gateway_doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMGateway",
        "metadata": {"name": "llm"},
        "spec": {"apiKeys": {"secretName": "gateway-keys"}, **spec},
    }


def wake_count(gw: LocalGateway) -> int:
    return sum(e.requests_total for e in gw.runtime.key_counters(WAKE_TABLE))


def vllm_pods(cluster: E2ECluster, ns: str, name: str) -> list[dict[str, Any]]:
    return list(get(cluster, ns, "pods", selector=f"inference.glm.dev/deployment={name}")["items"])


def at_zero(cluster: E2ECluster, ns: str, name: str) -> dict[str, Any] | None:
    obj = glmd(cluster, ns, name)
    status = obj.get("status", {})
    zero = status.get("desiredReplicas") == 0 and not vllm_pods(cluster, ns, name)
    return obj if zero and status.get("model") == MODEL else None


def in_background(gw: LocalGateway, count: int) -> tuple[list[Result], list[threading.Thread]]:
    results: list[Result] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(request(gw.url, CHAT, chat(), api_key=KEY, timeout=180))
        )
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    return results, threads


@pytest.mark.usefixtures("scaling_operator")  # imported above, with the emulator
def test_a_burst_wakes_a_model_at_zero_and_503s_retry_after_its_expected_wake_up(
    cluster: E2ECluster,
    emulator: VLLMMetricsEmulator,  # noqa: F811 - the fixture imported above
    ns: str,
    tmp_path: Path,
) -> None:
    apply(
        cluster,
        ns,
        manifest(
            "zero",
            model={"id": "zai-org/glm-4-9b-chat", "servedModelName": MODEL},
            contextLength=8192,
            gpu=ONE_L4,
            serving={"port": emulator.port},  # the emulator answers for the pod on 127.0.0.1
            autoscaling={
                "minReplicas": 0,
                "maxReplicas": 1,
                "idleSeconds": 30,
                "intervalSeconds": 5,
                "scaleUpStabilizationSeconds": 0,
                "scaleDownStabilizationSeconds": 0,
            },
        ),
    )
    wait_for(lambda: at_zero(cluster, ns, "zero"), 90, "the GLMDeployment planned, at zero replicas")
    cluster.kubectl("create", "secret", "generic", "gateway-keys", "-n", ns, f"--from-literal=keys={KEY} e2e")
    hold = {"maxQueuedRequests": BURST, "maxWaitSeconds": 120, "retryAfterSeconds": 45}
    apply(cluster, ns, gateway_doc(scaleFromZero=hold))
    wait_for(lambda: get(cluster, ns, "glmgateway", "llm").get("status", {}).get("service"), 60, "gateway")

    address_map = tmp_path / "address-map.json"
    address_map.write_text(json.dumps({"*": "127.0.0.1"}))
    keys = tmp_path / "keys.map"
    keys.write_text(f"{KEY} e2e\n")
    gw = LocalGateway(tmp_path / "gw")
    gw.workdir.mkdir()
    kubeconfig = gateway_kubeconfig(cluster, ns, "llm-gateway", tmp_path / "gw.kubeconfig")
    sync = Sync(kubeconfig, ns, gw, keys, address_map)
    try:
        sync.once()
        gw.start(None)
        sync.start(gw.master_socket)
        listed = json.loads(request(gw.url, "/v1/models", api_key=KEY).body)["data"]
        assert [m["id"] for m in listed] == [MODEL]

        # The burst: every request is held (none refused) while no replica exists.
        started = time.monotonic()
        results, threads = in_background(gw, BURST)
        wait_for(lambda: wake_count(gw) >= BURST or None, 30, f"{BURST} requests held")
        assert results == [], "held, not answered"
        # One more finds the queue full: 503 at once; no wake-up measured yet, so retryAfterSeconds.
        full = request(gw.url, CHAT, chat(), api_key=KEY)
        assert full.status == 503 and full.headers.get("retry-after") == "45", full
        assert json.loads(full.body)["error"]["code"] == "model_not_ready"
        for thread in threads:
            thread.join(timeout=150)
        statuses = Counter(r.status for r in results)
        assert statuses == {200: BURST}, statuses
        assert {r.served_by for r in results} == {emulator.name}
        first, last = min(r.seconds for r in results), max(r.seconds for r in results)
        print(
            f"\nwake-up through the gateway: first of {BURST} held requests answered {first:.1f} s "
            f"after the burst, all {BURST} in {last:.1f} s (includes the sidecar's report, the "
            "autoscaler's decision, the reconcile, scheduling and the KWOK pod turning Ready)"
        )
        assert time.monotonic() - started < 150
        obj = glmd(cluster, ns, "zero")
        assert "waits at the gateway" in (obj["status"]["autoscaler"].get("reason") or "") or any(
            "waits at the gateway" in (e.get("message") or "")
            for e in get(cluster, ns, "events")["items"]
            if e["involvedObject"]["name"] == "zero" and e["reason"] == "ScaledUp"
        )

        # The replica's cold start is measured: the autoscaler writes the expected wake-up, and the
        # sidecar sets it as the model's Retry-After at runtime.
        def estimate() -> float | None:
            seconds = glmd(cluster, ns, "zero").get("status", {}).get("autoscaler", {}).get("wakeUpSeconds")
            return float(seconds) if seconds else None

        wake_up = wait_for(estimate, 60, "status.autoscaler.wakeUpSeconds")
        retry_after = max(1, math.ceil(wake_up))
        line = f"{backend_name(MODEL)} {retry_after}\n"
        wait_for(lambda: (gw.workdir / "retry-after.map").read_text() == line, 30, "the estimate in the map")
        print(f"expected wake-up (status.autoscaler.wakeUpSeconds): {wake_up} s -> Retry-After {retry_after}")

        # Idle: the model goes back to zero, keeping its estimate. The next replica is left out of
        # the address map, so the next wake-up cannot finish: the queue-full and expired answers.
        address_map.write_text("{}")
        wait_for(lambda: at_zero(cluster, ns, "zero"), 120, "back to zero after idleSeconds")
        assert estimate() == wake_up
        worker = gw.runtime.process_id()
        hold = {"maxQueuedRequests": 2, "maxWaitSeconds": 4, "retryAfterSeconds": 45}
        apply(cluster, ns, gateway_doc(scaleFromZero=hold))
        wait_for(lambda: gw.runtime.process_id() not in (None, worker), 30, "the proxy reloaded")
        results, threads = in_background(gw, 2)
        wait_for(lambda: wake_count(gw) >= 2 or None, 30, "two held")
        full = request(gw.url, CHAT, chat(), api_key=KEY)
        assert full.status == 503 and full.headers.get("retry-after") == str(retry_after), full
        assert f"retry after {retry_after} seconds" in json.loads(full.body)["error"]["message"]
        for thread in threads:
            thread.join(timeout=30)
        assert [r.status for r in results] == [503, 503]
        for expired in results:
            assert expired.headers.get("retry-after") == str(retry_after)
            assert b"No replica of this model is ready" in expired.body and expired.seconds >= 3.5
        # The held requests were reported after the reload too: the model is being woken.
        wait_for(lambda: glmd(cluster, ns, "zero")["status"].get("desiredReplicas") == 1, 30, "woken again")
    finally:
        sync.stop()
        gw.stop()
        print(sync.log.read_text(errors="replace")[-2000:] if sync.log.exists() else "")


def gateway_pods(cluster: E2ECluster, ns: str) -> list[dict[str, Any]]:
    pods = get(
        cluster, ns, "pods", selector="app.kubernetes.io/name=glm-gateway,app.kubernetes.io/instance=llm"
    )
    return [p for p in pods["items"] if p.get("status", {}).get("podIP")]


def peer_session_up(gw: LocalGateway) -> bool:
    """This replica's session with the other is established, for 2 s (two replicas started
    together dial each other at once; HAProxy drops both sessions and dials again)."""
    entries = send(str(gw.workdir / "admin.sock"), "show peers").split("  0x")
    entry = next((e for e in entries if "(remote," in e), "")
    age = entry.split("last_hdshk=")[1].split("s")[0] if "last_hdshk=" in entry else ""
    return "(remote,active)" in entry and "last_status=ESTA" in entry and age.isdigit() and int(age) >= 2


def test_two_gateway_replicas_hold_one_keys_rate_limit_through_peers(
    cluster: E2ECluster,
    operator: RunningOperator,
    ns: str,
    tmp_path: Path,
    emulators: list[VLLMMetricsEmulator],
) -> None:
    limit = 10
    port = free_port()
    apply(cluster, ns, small("chat", replicas=1, serving={"port": port}))
    cluster.kubectl("create", "secret", "generic", "gateway-keys", "-n", ns, f"--from-literal=keys={KEY} e2e")
    apply(cluster, ns, gateway_doc(limits={"requestsPerMinute": limit}, replicas=2))
    (vllm_ip,) = wait_for(lambda: ready_pod_ips(cluster, ns, "chat"), 120, "the replica Ready")
    pods = wait_for(lambda: p if len(p := gateway_pods(cluster, ns)) == 2 else None, 90, "2 gateway pods")
    emulators.append(
        VLLMMetricsEmulator({MODEL: (0, 0), "glm-4-9b-chat": (0, 0)}, port, host="127.0.0.2").start()
    )
    loopback = {p["metadata"]["name"]: f"127.0.0.{11 + i}" for i, p in enumerate(pods)}
    address_map = tmp_path / "address-map.json"
    address_map.write_text(
        json.dumps(
            {vllm_ip: "127.0.0.2", **{p["status"]["podIP"]: loopback[p["metadata"]["name"]] for p in pods}}
        )
    )
    keys = tmp_path / "keys.map"
    keys.write_text(f"{KEY} e2e\n")
    kubeconfig = gateway_kubeconfig(cluster, ns, "llm-gateway", tmp_path / "gw.kubeconfig")
    peers_port = free_port()
    replicas: list[tuple[str, LocalGateway, Sync]] = []
    for index, (name, address) in enumerate(loopback.items()):
        gw = LocalGateway(tmp_path / f"gw{index}")  # short: HAProxy's socket paths are at most 97 bytes
        gw.workdir.mkdir()
        extra = ("--pod-name", name, "--pod-ip", address, "--peers-port", str(peers_port))
        replicas.append((name, gw, Sync(kubeconfig, ns, gw, keys, address_map, *extra)))
    try:
        for _, gw, sync in replicas:
            sync.once()
            gw.start(None)
            sync.start(gw.master_socket)
        config = (replicas[0][1].workdir / "haproxy.cfg").read_text()
        assert all(f"peer {name} {address}:{peers_port}" in config for name, address in loopback.items())
        wait_for(lambda: all(peer_session_up(gw) for _, gw, _ in replicas), 30, "the peers' sessions")

        def counted(gw: LocalGateway) -> int:
            """Requests of the key this replica knows of: its own table and its copy of the other's."""
            return sum(
                e.requests_total for name in loopback for e in gw.runtime.key_counters(key_table_name(name))
            )

        results: list[tuple[str, Result]] = []
        for index in range(2 * limit):
            name, gw, _ = replicas[index % 2]
            results.append((name, request(gw.url, CHAT, chat("glm-4-9b-chat"), api_key=KEY)))
            other = replicas[(index + 1) % 2][1]
            wait_for(
                lambda other=other, n=index + 1: counted(other) >= n or None, 30, "the other replica's count"
            )
        statuses = Counter(r.status for _, r in results)
        print(f"\none key over two gateway replicas, {limit}/min: {dict(statuses)}")
        assert statuses == {200: limit, 429: limit}, statuses
        assert {name for name, r in results if r.status == 200} == set(loopback), "both replicas served"
        assert {name for name, r in results if r.status == 429} == set(loopback), "both refused"
        for _, refused in results:
            if refused.status == 429:
                assert refused.headers.get("retry-after") == str(math.ceil(60 / limit))
                assert json.loads(refused.body)["error"]["code"] == "rate_limit_exceeded"
    finally:
        for _, gw, sync in replicas:
            sync.stop()
            gw.stop()
