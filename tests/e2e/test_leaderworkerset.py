"""Multi-node replicas on the real LeaderWorkerSet controller (lws-manager v0.9.0, webhooks on loopback).

GLM-5.1 in FP8 on H100s only: one replica is TP8 within a node x PP2 across two nodes, rendered
as a LeaderWorkerSet. LWS (not the operator) creates the leader pod, a StatefulSet per group for
the worker, the headless Service, and its pod webhook injects the group labels and the
leader's address; KWOK then runs the pods on the simulated H100 nodes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import E2ECluster, RunningOperator
from .test_controller import apply, arg_value, condition, get, glmd, manifest, node_products, wait_for

pytestmark = pytest.mark.e2e
H100 = "NVIDIA-H100-80GB-HBM3"
SELECTOR = "inference.glm.dev/deployment=glm51"
LWS_PREFIX = "leaderworkerset.sigs.k8s.io"


def glm51(replicas: int) -> dict[str, Any]:
    return manifest(
        "glm51",
        model={"id": "zai-org/GLM-5.1"},
        quantization="fp8",
        kvCacheDtype="fp8",
        contextLength=65536,
        gpu={"products": ["H100"], "allowMultiNode": True, "memoryUtilization": 0.92},
        replicas=replicas,
    )


def ready_with(cluster: E2ECluster, ns: str, replicas: int) -> Any:
    def check() -> dict[str, Any] | None:
        obj = glmd(cluster, ns, "glm51")
        status = obj.get("status", {})
        ok = (
            status.get("phase") == "Ready"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and status.get("readyReplicas") == replicas
        )
        return obj if ok else None

    return check


def pods(cluster: E2ECluster, ns: str) -> list[dict[str, Any]]:
    items = get(cluster, ns, "pods", selector=SELECTOR)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def test_multi_node_replica_is_a_leaderworkerset_group_on_two_h100_nodes(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    apply(cluster, ns, glm51(replicas=1))
    obj = wait_for(ready_with(cluster, ns, 1), 120, "Ready with 1 group")
    (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"] > 0]
    assert variant["gpuProduct"] == H100
    assert (variant["tensorParallelSize"], variant["pipelineParallelSize"], variant["nodesPerReplica"]) == (
        8,
        2,
        2,
    )
    assert condition(obj, "Available")["status"] == "True"
    assert not get(cluster, ns, "deployments", selector=SELECTOR)["items"]
    (lws,) = get(cluster, ns, "leaderworkersets", selector=SELECTOR)["items"]
    name = lws["metadata"]["name"]
    assert lws["metadata"]["ownerReferences"][0]["name"] == "glm51"
    assert lws["status"]["readyReplicas"] == 1

    group = pods(cluster, ns)
    products = node_products(cluster)
    roles = {p["metadata"]["labels"][f"{LWS_PREFIX}/worker-index"]: p for p in group}
    assert sorted(roles) == ["0", "1"]
    leader, worker = roles["0"], roles["1"]
    assert {p["metadata"]["labels"][f"{LWS_PREFIX}/group-index"] for p in group} == {"0"}
    nodes = {p["spec"]["nodeName"] for p in group}
    assert len(nodes) == 2 and {products[n] for n in nodes} == {H100}
    assert all(p["status"]["phase"] == "Running" for p in group)
    # LWS's pod webhook (served on loopback) injected the group's identity; the args use it.
    leader_env, worker_env = env(leader), env(worker)
    assert leader_env["LWS_LEADER_ADDRESS"] == f"{leader['metadata']['name']}.{name}.{ns}"
    assert worker_env["LWS_LEADER_ADDRESS"] == leader_env["LWS_LEADER_ADDRESS"]
    assert (leader_env["LWS_WORKER_INDEX"], worker_env["LWS_WORKER_INDEX"]) == ("0", "1")
    assert worker_env["LWS_GROUP_SIZE"] == "2"
    leader_args = leader["spec"]["containers"][0]["args"]
    worker_args = worker["spec"]["containers"][0]["args"]
    for args in (leader_args, worker_args):
        assert arg_value(args, "--tensor-parallel-size") == "8"
        assert arg_value(args, "--pipeline-parallel-size") == "2"
        assert arg_value(args, "--distributed-executor-backend") == "mp"
        assert arg_value(args, "--nnodes") == "2"
        assert arg_value(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert arg_value(leader_args, "--node-rank") == "0" and "--headless" not in leader_args
    assert arg_value(worker_args, "--node-rank") == "$(LWS_WORKER_INDEX)" and "--headless" in worker_args
    for pod in group:
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # Only the leader serves the API: the GLMDeployment's Service selects it alone.
    svc = get(cluster, ns, "service", "glm51")
    endpoints = get(cluster, ns, "endpointslices", selector="kubernetes.io/service-name=glm51")["items"]
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "inference"
    targets = {e["targetRef"]["name"] for s in endpoints for e in s.get("endpoints") or []}
    assert targets == {leader["metadata"]["name"]}


def test_scaling_adds_whole_groups_and_a_deleted_worker_comes_back(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    apply(cluster, ns, glm51(replicas=1))
    wait_for(ready_with(cluster, ns, 1), 120, "Ready with 1 group")

    cluster.kubectl("scale", "-n", ns, "glmd/glm51", "--replicas=2")
    wait_for(ready_with(cluster, ns, 2), 120, "Ready with 2 groups")
    (lws,) = get(cluster, ns, "leaderworkersets", selector=SELECTOR)["items"]
    assert lws["spec"]["replicas"] == 2
    group = pods(cluster, ns)
    groups: dict[str, list[str]] = {}
    for p in group:
        groups.setdefault(p["metadata"]["labels"][f"{LWS_PREFIX}/group-index"], []).append(
            p["spec"]["nodeName"]
        )
    assert sorted(groups) == ["0", "1"] and all(len(nodes) == 2 for nodes in groups.values())
    assert len({p["spec"]["nodeName"] for p in group}) == 4  # 2 groups x 2 nodes, 8 GPUs each

    # A worker pod deleted by hand: LWS recreates it (its group's StatefulSet), the group gets Ready.
    (worker,) = [
        p
        for p in group
        if p["metadata"]["labels"][f"{LWS_PREFIX}/group-index"] == "1"
        and p["metadata"]["labels"][f"{LWS_PREFIX}/worker-index"] == "1"
    ]
    cluster.kubectl("delete", "pod", "-n", ns, worker["metadata"]["name"], "--wait=false")

    def recreated() -> bool:
        now = {p["metadata"]["name"]: p for p in pods(cluster, ns)}
        again = now.get(worker["metadata"]["name"])
        return bool(
            again
            and again["metadata"]["uid"] != worker["metadata"]["uid"]
            and any(
                c["type"] == "Ready" and c["status"] == "True" for c in again["status"].get("conditions", [])
            )
        )

    wait_for(recreated, 90, "worker pod recreated and Ready")
    wait_for(ready_with(cluster, ns, 2), 120, "Ready with 2 groups again")

    cluster.kubectl("scale", "-n", ns, "glmd/glm51", "--replicas=1")
    wait_for(ready_with(cluster, ns, 1), 120, "Ready with 1 group")
    wait_for(lambda: len(pods(cluster, ns)) == 2, 90, "the second group's pods gone")


def test_deleting_the_glmdeployment_removes_the_leaderworkerset_and_its_pods(
    cluster: E2ECluster, operator: RunningOperator, ns: str
) -> None:
    apply(cluster, ns, glm51(replicas=1))
    wait_for(ready_with(cluster, ns, 1), 120, "Ready with 1 group")
    assert get(cluster, ns, "statefulsets")["items"]  # the worker StatefulSet LWS made for group 0
    cluster.kubectl("delete", "glmd", "-n", ns, "glm51", "--wait=true", "--timeout=60s")

    def gone() -> bool:
        left = [
            *get(cluster, ns, "leaderworkersets")["items"],
            *get(cluster, ns, "statefulsets")["items"],
            *pods(cluster, ns),
        ]
        return not left

    wait_for(gone, 90, "LeaderWorkerSet, StatefulSets and pods garbage-collected")
    services = json.loads(cluster.kubectl("get", "services", "-n", ns, "-o", "json").stdout)["items"]
    assert not services  # ours and LWS's headless Service
