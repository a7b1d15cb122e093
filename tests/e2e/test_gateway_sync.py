"""GLMGateway end to end: the operator renders the gateway, the sync sidecar follows the cluster.

The operator (chart RBAC) applies a GLMGateway's objects. ``glm-operator gateway sync`` then runs
on the test machine as the gateway's own ServiceAccount (so the rendered Role is what is tested),
watching the real apiserver; HAProxy and the vLLM emulators run on loopback. KWOK pod IPs are
mapped to 127.0.0.x addresses through the sync's test-only address map: nothing dials a pod IP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import free_port
from tests.harness.haproxy import LocalGateway
from tests.harness.load import request
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster, RunningOperator
from .test_controller import apply, get, phase_is, small, wait_for

pytestmark = pytest.mark.e2e
KEY = "sk-e2e"
CHAT = "/v1/chat/completions"


def ready_pod_ips(cluster: E2ECluster, ns: str, deployment: str) -> list[str]:
    pods = get(cluster, ns, "pods", selector=f"inference.glm.dev/deployment={deployment}")["items"]
    return sorted(
        p["status"]["podIP"]
        for p in pods
        if p.get("status", {}).get("podIP")
        and not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    )


def count_is(items: list[str], count: int) -> list[str] | None:
    return items if len(items) == count else None


def gateway_kubeconfig(cluster: E2ECluster, ns: str, sa: str, path: Path) -> Path:
    """A kubeconfig authenticated as the gateway's ServiceAccount."""
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=1h").stdout.strip()
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "gateway", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "gateway"
    path.write_text(json.dumps(config))
    return path


class Sync:
    """``glm-operator gateway sync`` as a subprocess."""

    def __init__(
        self, kubeconfig: Path, ns: str, gw: LocalGateway, keys: Path, address_map: Path, *extra: str
    ) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.args = [
            sys.executable, "-m", "glm_operator.cli", "gateway", "sync",
            "--namespace", ns, "--gateway", "llm", "--config-dir", str(gw.workdir),
            "--keys-file", str(keys), "--bind-address", "127.0.0.1", "--port", str(gw.port),
            "--proxy-metrics-port", str(gw.metrics_port), "--address-map", str(address_map), *extra,
        ]  # fmt: skip
        self.log = gw.workdir / "sync.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def once(self) -> None:
        subprocess.run([*self.args, "--once"], env=self.env, check=True, timeout=60, capture_output=True)

    def start(self, master_socket: str) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.args, "--master-socket", master_socket],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def test_operator_renders_the_gateway_and_the_sync_follows_pods_and_models(
    cluster: E2ECluster,
    operator: RunningOperator,
    ns: str,
    tmp_path: Path,
    emulators: list[VLLMMetricsEmulator],
) -> None:
    port = free_port()
    served = "glm-4-9b-chat"
    long_name = "glm-4-9b-chat[1m]"
    apply(cluster, ns, small("chat", replicas=2, serving={"port": port}))
    cluster.kubectl("create", "secret", "generic", "gateway-keys", "-n", ns, f"--from-literal=keys={KEY} e2e")
    gateway_doc: dict[str, Any] = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMGateway",
        "metadata": {"name": "llm"},
        "spec": {"apiKeys": {"secretName": "gateway-keys"}, "limits": {"concurrentRequests": 50}},
    }
    # The apiserver rejects a bad spec and names the field (schema generated from the models).
    bad = {**gateway_doc, "spec": {"apiKeys": {"secretName": "gateway-keys"}, "loadBalancing": "Random"}}
    refused = cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0 and "spec.loadBalancing" in refused.stderr, refused.stderr
    apply(cluster, ns, gateway_doc)

    # The operator renders the gateway's objects, owned by the GLMGateway, and records it in status.
    gw_obj = wait_for(
        lambda: (o := get(cluster, ns, "glmgateway", "llm")).get("status", {}).get("service") and o,
        60,
        "GLMGateway status",
    )
    assert gw_obj["status"]["observedGeneration"] == gw_obj["metadata"]["generation"]
    for kind in ("deployment", "service", "serviceaccount", "role", "rolebinding"):
        child = get(cluster, ns, kind, "llm-gateway")
        assert child["metadata"]["ownerReferences"][0]["uid"] == gw_obj["metadata"]["uid"], kind
    pod_spec = get(cluster, ns, "deployment", "llm-gateway")["spec"]["template"]["spec"]
    assert any(v.get("secret", {}).get("secretName") == "gateway-keys" for v in pod_spec["volumes"])
    # A hand edit of the gateway's Deployment is reverted (replicas come from the GLMGateway).
    cluster.kubectl("scale", "deployment", "llm-gateway", "-n", ns, "--replicas=5")
    wait_for(
        lambda: get(cluster, ns, "deployment", "llm-gateway")["spec"]["replicas"] == 2,
        30,
        "replicas reverted",
    )

    wait_for(phase_is(cluster, ns, "chat", "Ready"), 120, "chat Ready")
    ips = wait_for(lambda: count_is(ready_pod_ips(cluster, ns, "chat"), 2), 90, "2 ready pods")
    loopback = {ip: f"127.0.0.{i + 2}" for i, ip in enumerate(ips)}
    for address in loopback.values():
        emulators.append(VLLMMetricsEmulator({served: (0, 0)}, port, host=address, name=address).start())
    address_map = tmp_path / "address-map.json"
    address_map.write_text(json.dumps(loopback))
    keys = tmp_path / "keys.map"
    keys.write_text(f"{KEY} e2e\n")  # the pod would mount the Secret here

    gw = LocalGateway(tmp_path / "gw")
    gw.workdir.mkdir()
    sync = Sync(
        gateway_kubeconfig(cluster, ns, "llm-gateway", tmp_path / "gw.kubeconfig"), ns, gw, keys, address_map
    )
    try:
        sync.once()  # as the init container: first files from one listing
        gw.start(None)
        sync.start(gw.master_socket)
        served_by = Counter(request(gw.url, CHAT, {"model": served}, api_key=KEY).served_by for _ in range(8))
        assert set(served_by) == set(loopback.values()), served_by
        assert request(gw.url, CHAT, {"model": served}).status == 401

        # Scale up: the new pod joins through the runtime API (same HAProxy worker).
        worker = gw.runtime.process_id()
        cluster.kubectl("scale", "glmd", "chat", "-n", ns, "--replicas=3")
        ips = wait_for(lambda: count_is(ready_pod_ips(cluster, ns, "chat"), 3), 90, "3 ready pods")
        new_ip = next(ip for ip in ips if ip not in loopback)
        loopback[new_ip] = "127.0.0.9"
        emulators.append(
            VLLMMetricsEmulator({served: (0, 0)}, port, host="127.0.0.9", name="127.0.0.9").start()
        )
        address_map.write_text(json.dumps(loopback))
        wait_for(
            lambda: any(
                request(gw.url, CHAT, {"model": served}, api_key=KEY).served_by == "127.0.0.9"
                for _ in range(6)
            ),
            30,
            "the new pod gets requests",
        )
        assert gw.runtime.process_id() == worker

        # A long-context copy of the model is a second GLMDeployment: a new name, its own pods.
        apply(cluster, ns, small("chat-long", contextLength=16384, model={"id": "zai-org/glm-4-9b-chat",
              "servedModelName": long_name}, serving={"port": port}))  # fmt: skip
        wait_for(phase_is(cluster, ns, "chat-long", "Ready"), 120, "chat-long Ready")
        (long_ip,) = wait_for(lambda: ready_pod_ips(cluster, ns, "chat-long"), 90)
        loopback[long_ip] = "127.0.0.10"
        emulators.append(
            VLLMMetricsEmulator({long_name: (0, 0)}, port, host="127.0.0.10", name="long").start()
        )
        address_map.write_text(json.dumps(loopback))
        models = wait_for(
            lambda: (
                long_name
                in (
                    listed := [
                        m["id"] for m in json.loads(request(gw.url, "/v1/models", api_key=KEY).body)["data"]
                    ]
                )
                and listed
            ),
            30,
            "/v1/models lists the long-context name",
        )
        assert models == [served, long_name]
        wait_for(
            lambda: request(gw.url, CHAT, {"model": long_name}, api_key=KEY).served_by == "long",
            30,
            "[1m] routed",
        )
        assert request(gw.url, CHAT, {"model": "glm-unknown"}, api_key=KEY).status == 404
    finally:
        sync.stop()
        gw.stop()
        print(sync.log.read_text(errors="replace")[-3000:] if sync.log.exists() else "")
