"""spec.inferencePool on the local control plane, with the Gateway API Inference Extension's real
parts: its InferencePool CRD and its endpoint picker, both from the pinned Go module (v1.5.0;
hack/build-tools.sh), the picker run on loopback with the command line and the ServiceAccount the
operator rendered (tests/harness/inference_extension.py).

The GLMDeployment's two vLLM pods land on a KWOK node of their own whose podCIDR is 127.0.1.0/24,
so KWOK gives them loopback addresses; a vLLM emulator serves each pod's address and port, and the
picker scrapes them there (nothing dials a 10.x address: the harness refuses a pod outside
127.0.0.0/8). The test asks the picker through Envoy's ext_proc API (extproc-pick) and checks that
it sends requests to the less loaded pod, by the emulators' queue and KV-cache gauges, both ways
round, and keeps requests sharing a long prefix on one pod; then that turning inferencePool off
deletes the pool and the picker's objects and clears the status.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import free_port, wait_for
from tests.harness.inference_extension import EndpointPicker, listening_addresses, loopback_only
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster, RunningOperator
from .test_controller import apply, glmd, manifest

pytestmark = pytest.mark.e2e

NAME = "pool"
MODEL = "glm-4-9b-chat"
NODE = "loopback-l40s-0"
EPP_KINDS = ("deployment", "service", "serviceaccount", "role", "rolebinding")


def loopback_node() -> dict[str, Any]:
    """A KWOK node with two L40S GPUs (a type no fixture node has) whose pods get 127.0.1.x."""
    labels = {
        "kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "type": "kwok", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L40S",
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "46068",
        "nvidia.com/gpu.family": "ada-lovelace",
        "nvidia.com/cuda.driver.major": "570", "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "9",
    }  # fmt: skip
    resources = {
        "cpu": "32",
        "memory": "256Gi",
        "pods": "110",
        "ephemeral-storage": "2Ti",
        "nvidia.com/gpu": "2",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "podCIDR": "127.0.1.0/24",
            "podCIDRs": ["127.0.1.0/24"],
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {"allocatable": resources, "capacity": resources},
    }


@pytest.fixture
def node(cluster: E2ECluster) -> Iterator[str]:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(loopback_node()))
    cluster.kubectl("wait", "--for=condition=Ready", f"node/{NODE}", "--timeout=60s")
    yield NODE
    cluster.kubectl("delete", "node", NODE, "--ignore-not-found", "--wait=false", check=False)


def serving_pods(cluster: E2ECluster, ns: str) -> list[dict[str, Any]]:
    selector = f"inference.glm.dev/deployment={NAME},app.kubernetes.io/component=inference"
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
    pods = json.loads(out.stdout)["items"]
    ready = [
        p for p in pods
        if p.get("status", {}).get("podIP")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]  # fmt: skip
    return ready if len(ready) == 2 else []


def chat(content: str) -> dict[str, Any]:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    return {"path": "/v1/chat/completions", "body": body}


def endpoints(answers: list[dict[str, Any]]) -> Counter[str]:
    assert all("endpoint" in a for a in answers), answers
    assert all(a["endpoint"] == a["metadata"] for a in answers), answers  # header and envoy.lb agree
    return Counter(a["endpoint"] for a in answers)


def test_an_inference_pool_routed_by_the_real_endpoint_picker(
    cluster: E2ECluster,
    operator: RunningOperator,
    ns: str,
    node: str,
    emulators: list[VLLMMetricsEmulator],
    tmp_path: Path,
) -> None:
    port = free_port()  # every pod's vLLM port (pods differ by address)
    doc = manifest(
        NAME,
        model={"id": "zai-org/glm-4-9b-chat"},
        contextLength=8192,
        gpu={"products": ["L40S"]},
        replicas=2,
        serving={"port": port},
        inferencePool={},
    )
    apply(cluster, ns, doc)

    # kubectl get inferencepools: the operator's pool over the GLMDeployment's pods
    listed = wait_for(
        lambda: cluster.kubectl("get", "inferencepools", "-n", ns, "-o", "name", check=False).stdout.split(),
        120,
        "an InferencePool",
    )
    assert listed == [f"inferencepool.inference.networking.k8s.io/{NAME}"]
    print("\n" + cluster.kubectl("get", "inferencepools", "-n", ns).stdout)
    pool = json.loads(cluster.kubectl("get", "inferencepool", NAME, "-n", ns, "-o", "json").stdout)
    assert pool["spec"]["targetPorts"] == [{"number": port}]
    assert pool["spec"]["endpointPickerRef"]["name"] == f"{NAME}-epp"
    for kind in EPP_KINDS:
        cluster.kubectl("get", kind, f"{NAME}-epp", "-n", ns)
    status = wait_for(
        lambda: (glmd(cluster, ns, NAME).get("status") or {}).get("inferencePool", {}).get("ready") and
        glmd(cluster, ns, NAME)["status"]["inferencePool"],
        120,
        "status.inferencePool ready (the picker's KWOK pod)",
    )  # fmt: skip
    assert status == {"name": NAME, "endpointPicker": f"{NAME}-epp:9002", "ready": True}

    # the vLLM pods on the loopback node, an emulator on each one's address and port
    pods = wait_for(lambda: serving_pods(cluster, ns), 120, "2 ready vLLM pods")
    addresses = sorted(p["status"]["podIP"] for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    loopback_only(addresses)
    for address in addresses:
        emulator = VLLMMetricsEmulator({MODEL: (0.0, 0.0)}, port, host=address, name=address)
        emulators.append(emulator.start())
    a, b = (f"{address}:{port}" for address in addresses)
    first, second = emulators

    picker = EndpointPicker(cluster.local, ns, f"{NAME}-epp", tmp_path).start()
    try:
        # the build binds every server of the picker (ext_proc, health, metrics) to loopback
        assert picker.proc is not None
        pid = picker.proc.pid
        listening = wait_for(lambda: len(found := listening_addresses(pid)) >= 3 and found, 30, "its servers")
        assert all(address.startswith("127.0.0.1:") for address in listening), listening
        print(f"endpoint picker listening on {sorted(listening)}; pods at {addresses}")

        def routes_to_both() -> bool:
            answers = picker.pick([chat(f"warm-up {i}") for i in range(12)])
            return all("endpoint" in a for a in answers) and len(endpoints(answers)) == 2

        # ready once it knows the pool, both pods and their metrics (until then it may answer 503)
        wait_for(routes_to_both, 60, "the picker routing to both pods")

        def follows_the_load(busy: VLLMMetricsEmulator, idle: VLLMMetricsEmulator, expected: str) -> bool:
            busy.set(MODEL, waiting=8, running=16, kv_cache_usage=0.9)
            idle.set(MODEL, waiting=0, running=1, kv_cache_usage=0.1)
            answers = picker.pick([chat(f"question {n} about {expected}") for n in range(10)])
            return endpoints(answers) == Counter({expected: 10})

        # the less loaded pod, by the emulators' gauges, both ways round (each once scraped)
        wait_for(lambda: follows_the_load(first, second, b), 10, f"every request on {b}")
        wait_for(lambda: follows_the_load(second, first, a), 10, f"every request on {a}")

        # equal load: requests sharing a long document stay on one pod
        for emulator in emulators:
            emulator.set(MODEL, waiting=0, running=1, kv_cache_usage=0.1)
        picker.pick([chat("settle")])
        document = "The contract between the parties says, clause by clause: " + "terms and duties. " * 400
        shared = endpoints(
            picker.pick([chat(f"{document}\nQuestion {n}: what about item {n}?") for n in range(8)])
        )
        assert len(shared) == 1, shared
        # while unrelated prompts under the same load spread over both
        assert len(endpoints(picker.pick([chat(f"unrelated prompt {n}") for n in range(16)]))) == 2
    finally:
        picker.stop()
        print("==== endpoint picker log, last lines ====\n" + picker.log_text()[-3000:])

    # turned off: the pool and the picker's objects go, and the status block with them
    cluster.kubectl(
        "patch", "glmd", NAME, "-n", ns, "--type=json", "-p", '[{"op":"remove","path":"/spec/inferencePool"}]'
    )
    kinds = "inferencepools,deployments,services,serviceaccounts,roles,rolebindings"
    picker_objects = (
        "get",
        kinds,
        "-n",
        ns,
        "-l",
        "app.kubernetes.io/component=endpoint-picker",
        "-o",
        "name",
    )
    wait_for(
        lambda: (
            not cluster.kubectl(*picker_objects).stdout.strip()
            and not cluster.kubectl("get", "inferencepools", "-n", ns, "-o", "name").stdout.strip()
        ),
        60,
        "the pool and the picker's objects deleted",
    )
    wait_for(
        lambda: "inferencePool" not in (glmd(cluster, ns, NAME).get("status") or {}), 30, "status cleared"
    )
