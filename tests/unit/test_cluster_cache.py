"""The watch-fed caches: which node changes trigger a re-plan, and GPUs held per node."""

from __future__ import annotations

import copy
from typing import Any

from glm_operator.controller.cache import ClusterCache, pod_gpu_requests
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.runtime import Operator, owner_key


def node(name: str = "n1", gpus: str = "8", ready: str = "True", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-L4", **labels},
            "resourceVersion": "1",
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(
    uid: str, node_name: str | None, gpus: int, phase: str = "Running", owner: str | None = None
) -> dict[str, Any]:
    labels = (
        {"app.kubernetes.io/managed-by": "glm-operator", "inference.glm.dev/deployment": owner}
        if owner
        else {}
    )
    return {
        "metadata": {"uid": uid, "namespace": "llm", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_only_changes_placement_reads_trigger_a_replan() -> None:
    cache = ClusterCache()
    n = node()
    assert cache.set_node(n) is True
    heartbeat = copy.deepcopy(n)
    heartbeat["metadata"]["resourceVersion"] = "2"  # a lease/heartbeat-only update
    assert cache.set_node(heartbeat) is False
    assert cache.set_node(node(gpus="4")) is True
    assert cache.set_node(node(gpus="4", ready="False")) is True
    cordoned = node(gpus="4", ready="False")
    cordoned["spec"]["unschedulable"] = True
    assert cache.set_node(cordoned) is True
    assert cache.delete_node("n1") is True and cache.delete_node("n1") is False


def test_gpus_used_counts_bound_live_pods_except_the_owners_own() -> None:
    cache = ClusterCache()
    pods = [
        pod("a", "n1", 4, owner="mine"),
        pod("b", "n1", 2, owner="other"),
        pod("c", "n1", 1),  # someone else's workload, not ours
        pod("d", None, 8),  # Pending: holds nothing yet
        pod("e", "n2", 8, phase="Succeeded"),  # finished: holds nothing
    ]
    cache.replace_pods([(p, owner_key(p)) for p in pods])
    assert cache.gpus_used() == {"n1": {"nvidia.com/gpu": 7}}
    assert cache.gpus_used(exclude_owner=("llm", "mine")) == {"n1": {"nvidia.com/gpu": 3}}
    cache.delete_pod("b")
    assert cache.gpus_used(exclude_owner=("llm", "mine")) == {"n1": {"nvidia.com/gpu": 1}}


def test_pod_gpu_requests_sums_containers_and_per_type_names() -> None:
    p = pod("x", "n1", 2)
    p["spec"]["containers"].append({"resources": {"requests": {"nvidia.com/a100-80gb": "1", "cpu": "4"}}})
    assert pod_gpu_requests(p) == {"nvidia.com/gpu": 2, "nvidia.com/a100-80gb": 1}


def test_namespace_patterns_follow_kopf_globs() -> None:
    def watches(patterns: tuple[str, ...], ns: str) -> bool:
        return Operator(
            OperatorConfig(namespaces=patterns, leader_election=False), api=None
        ).watches_namespace(ns)  # type: ignore[arg-type]

    assert watches((), "anything")
    assert watches(("ctl-*",), "ctl-a") and not watches(("ctl-*",), "llm")
    assert not watches(("!kube-*",), "kube-system") and watches(("!kube-*",), "llm")
    assert watches(("llm", "team-*"), "team-b")
