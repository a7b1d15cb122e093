"""The ground is real: the real scheduler binds GPU pods to simulated GPU nodes, KWOK runs them."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import E2ECluster, delete_namespace
from .test_controller import condition

pytestmark = pytest.mark.e2e


def gpu_deployment(name: str, gpus: int, product: str | None) -> str:
    affinity = ""
    if product:
        affinity = f"""
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {{key: nvidia.com/gpu.product, operator: In, values: [{product}]}}"""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{affinity}
      tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.33.0
        resources:
          limits: {{nvidia.com/gpu: "{gpus}"}}
"""


def pods(cluster: E2ECluster, ns: str, app: str) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"app={app}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def test_nodes_carry_gpu_labels_and_allocatable(cluster: E2ECluster) -> None:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    h100 = by_name["h100-sxm-0"]
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    mixed = by_name["mixed-0"]["status"]["allocatable"]
    assert mixed["nvidia.com/a100-80gb"] == "1" and mixed["nvidia.com/rtx-4090"] == "1"
    ready = {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    }
    assert {"h100-sxm-0", "a100-sxm-1", "l4-2", "mixed-0"} <= ready


def test_gpu_pod_bound_to_h100_and_ready(cluster: E2ECluster) -> None:
    ns = cluster.namespace("ground")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=gpu_deployment("tp4", 4, "NVIDIA-H100-80GB-HBM3"))
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/tp4", "--timeout=60s")
    (pod,) = pods(cluster, ns, "tp4")
    assert pod["spec"]["nodeName"].startswith("h100-sxm-")
    assert pod["status"]["phase"] == "Running"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])
    delete_namespace(cluster, ns)  # give the GPUs back to the tests that follow


def test_pod_asking_more_gpus_than_any_node_stays_pending(cluster: E2ECluster) -> None:
    ns = cluster.namespace("ground")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=gpu_deployment("tp16", 16, None))

    def unschedulable() -> dict | None:
        for pod in pods(cluster, ns, "tp16"):
            for cond in pod["status"].get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return dict(cond)
        return None

    cond = wait_for(unschedulable)
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    (pod,) = pods(cluster, ns, "tp16")
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


def test_a_pod_marked_not_ready_by_the_node_lifecycle_controller_becomes_ready_again(
    cluster: E2ECluster,
) -> None:
    """After a node blip the node lifecycle controller sets Ready=False on the node's pods and
    leaves ContainersReady=True (MarkPodsNotReady); a kubelet makes them Ready again on its next
    status sync, and so must KWOK (tests/fixtures/kwok-stages): otherwise a Deployment created
    just before a heartbeat hiccup never becomes available. A pod whose containers are not ready
    stays not ready."""
    ns = cluster.namespace("ground")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=gpu_deployment("blip", 1, "NVIDIA-L4"))
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/blip", "--timeout=60s")
    (pod,) = pods(cluster, ns, "blip")
    name = pod["metadata"]["name"]

    def mark(conditions: list[dict]) -> None:
        patch = json.dumps({"status": {"conditions": conditions}})
        cluster.kubectl(
            "patch", "pod", name, "-n", ns, "--subresource=status", "--type=strategic", "-p", patch
        )

    mark([{"type": "Ready", "status": "False"}])  # what MarkPodsNotReady writes
    wait_for(lambda: condition(pods(cluster, ns, "blip")[0], "Ready").get("status") == "True", 30)

    mark([{"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}])
    time.sleep(3)
    (pod,) = pods(cluster, ns, "blip")
    assert condition(pod, "Ready")["status"] == condition(pod, "ContainersReady")["status"] == "False"
    delete_namespace(cluster, ns)
