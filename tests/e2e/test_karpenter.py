"""Elastic GPU capacity on the real Karpenter (its KWOK provider) in a cluster with no GPU node.

The module runs its own local control plane (no fixture nodes: every GPU node here is one that
Karpenter launched for a Pending pod), Karpenter's KWOK provider with the committed instance
types and NodePools (tests/fixtures/karpenter), and the operator with the chart's RBAC and a
resync far above the test durations, so everything below is driven by watch events. The
figures each test measures are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.karpenter import KarpenterProvider
from tests.harness.operator import RunningOperator
from tests.harness.prometheus import PrometheusServer
from tests.harness.vllm_emulator import VLLMMetricsEmulator

from .conftest import E2ECluster, delete_namespace
from .test_autoscaling import MODEL, autoscaled
from .test_controller import apply, condition, glmd, manifest, phase_is, small, wait_for

pytestmark = pytest.mark.e2e


@dataclass
class Elastic:
    cluster: E2ECluster
    operator: RunningOperator
    karpenter: KarpenterProvider


@pytest.fixture(scope="module")
def elastic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Elastic]:
    local = LocalCluster(state_dir=tmp_path_factory.mktemp("elastic-cluster"))
    local.up()
    karpenter = KarpenterProvider(local)
    operator = RunningOperator(local, tmp_path_factory.mktemp("elastic-operator"), resync_seconds=900)
    try:
        karpenter.start()
        operator.install()
        operator.start()
        yield Elastic(E2ECluster(local), operator, karpenter)
    finally:
        operator.stop()
        karpenter.stop()
        local.down()


@pytest.fixture
def ens(elastic: Elastic, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "ctl-" + request.node.name.removeprefix("test_").replace("_", "-")[:40].rstrip("-")
    elastic.cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        delete_namespace(elastic.cluster, name)


def gpu_nodes(cluster: E2ECluster) -> list[dict[str, Any]]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return [n for n in nodes if "nvidia.com/gpu" in (n.get("status", {}).get("allocatable") or {})]


def no_gpu_nodes_left(cluster: E2ECluster) -> None:
    """Earlier tests' nodes are consolidated away once their namespace is gone."""
    wait_for(
        lambda: not gpu_nodes(cluster) and not nodeclaims(cluster), 180, "no GPU node left from earlier tests"
    )


def nodeclaims(cluster: E2ECluster) -> list[dict[str, Any]]:
    return list(json.loads(cluster.kubectl("get", "nodeclaims", "-o", "json").stdout)["items"])


def test_zero_gpu_nodes_then_karpenter_launches_the_planned_instance_type(elastic: Elastic, ens: str) -> None:
    """(a) apply -> plan on the pool -> Pending -> Karpenter launches g6.xlarge -> Ready."""
    cluster = elastic.cluster
    before = len(gpu_nodes(cluster))
    assert before == 0  # the first test of a cluster that starts with no GPU node
    started = time.monotonic()
    apply(cluster, ens, small("air"))

    seen_waiting: list[dict[str, Any]] = []

    def ready() -> dict[str, Any] | None:
        obj = glmd(cluster, ens, "air")
        variants = obj.get("status", {}).get("plan", {}).get("variants") or []
        seen_waiting.extend(v for v in variants if v.get("newNodeReplicas"))
        return obj if obj.get("status", {}).get("phase") == "Ready" else None

    obj = wait_for(ready, 240, "Ready on a node Karpenter launched")
    seconds = time.monotonic() - started
    nodes = gpu_nodes(cluster)
    print(f"\n(a) apply -> Ready: {seconds:.1f} s; GPU nodes before {before}, after {len(nodes)}")
    assert len(nodes) == 1
    labels = nodes[0]["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "g6.xlarge"  # one L4 is the cheapest that fits
    assert labels["karpenter.sh/nodepool"] == "gpu-l4"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    # while the node was being launched the plan said which replica waited, and for which pool
    assert seen_waiting and seen_waiting[0]["nodePools"] == ["NodePool gpu-l4"]
    assert seen_waiting[0]["newNodeReplicas"] == 1
    (variant,) = [v for v in obj["status"]["plan"]["variants"] if v["replicas"]]
    assert variant["nodePools"] == ["NodePool gpu-l4"] and variant["gpuProduct"] == "NVIDIA-L4"
    assert condition(obj, "Degraded")["status"] == "False"


def test_a_replica_bigger_than_any_instance_type_is_rejected_with_the_fix(elastic: Elastic, ens: str) -> None:
    """(d) GLM-4.5 in bf16 needs more L4 GPUs than the largest L4 machine has: nothing is launched."""
    cluster = elastic.cluster
    claims_before = len(nodeclaims(cluster))
    apply(
        cluster,
        ens,
        manifest("big", model={"id": "zai-org/GLM-4.5"}, quantization="bf16", gpu={"products": ["L4"]}),
    )

    def failed() -> dict[str, Any] | None:
        obj = glmd(cluster, ens, "big")
        return obj if obj.get("status", {}).get("phase") == "Failed" else None

    obj = wait_for(failed, 60, "Failed")
    planned = condition(obj, "Planned")
    assert planned["status"] == "False"
    assert "NodePool gpu-l4 launches at most 4 NVIDIA-L4 GPUs per node (g6.12xlarge)" in planned["message"]
    assert "fix: one replica must fit on one machine" in planned["message"]
    time.sleep(5)  # Karpenter's batch window: had a pod been Pending, a NodeClaim would be there now
    assert len(nodeclaims(cluster)) == claims_before
    deployments = json.loads(cluster.kubectl("get", "deployments", "-n", ens, "-o", "json").stdout)["items"]
    assert deployments == []


def test_replicas_waiting_for_slow_nodes_are_not_replanned_elsewhere(elastic: Elastic, ens: str) -> None:
    """Machines take 30 s to register: once Karpenter's claims fill the L4 pool's limit its headroom
    is 0 and no L4 node exists yet, but the two Pending replicas stay planned on L4 (the A100 pool,
    next in gpu.products, launches nothing) and start there when the nodes come."""
    cluster = elastic.cluster
    no_gpu_nodes_left(cluster)
    delay = '{"spec":{"nodeRegistrationDelay":"30s"}}'
    cluster.kubectl("patch", "kwoknodeclass", "default", "--type=merge", "-p", delay)
    try:
        apply(cluster, ens, small("sticky", replicas=2, gpu={"products": ["L4", "A100-80GB"]}))
        wait_for(lambda: glmd(cluster, ens, "sticky").get("status", {}).get("plan"), 30, "a plan")
        pool_full = False
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            plan = glmd(cluster, ens, "sticky").get("status", {}).get("plan") or {}
            placed = {v["gpuProduct"]: v["replicas"] for v in plan.get("variants") or [] if v["replicas"]}
            assert placed == {"NVIDIA-L4": 2}, plan
            types = {
                c["metadata"]["labels"].get("node.kubernetes.io/instance-type") for c in nodeclaims(cluster)
            }
            assert types <= {"g6.xlarge"}, types
            used = json.loads(cluster.kubectl("get", "nodepool", "gpu-l4", "-o", "json").stdout)
            pool_full = (
                pool_full or (used.get("status", {}).get("resources") or {}).get("nvidia.com/gpu") == "2"
            )
            time.sleep(2)
        assert pool_full, "the L4 pool never reached its limit while the nodes were launching"
        wait_for(phase_is(cluster, ens, "sticky", "Ready"), 120, "Ready on the L4 nodes")
        products = {n["metadata"]["labels"].get("nvidia.com/gpu.product") for n in gpu_nodes(cluster)}
        assert products == {"NVIDIA-L4"}
    finally:
        cluster.kubectl(
            "patch",
            "kwoknodeclass",
            "default",
            "--type=merge",
            "-p",
            '{"spec":{"nodeRegistrationDelay":null}}',
        )


def test_queue_grows_to_the_pool_limit_then_drains_and_karpenter_removes_the_nodes(
    elastic: Elastic, ens: str, tmp_path: Path
) -> None:
    """(b) replicas and nodes grow up to the NodePool's 2-GPU limit, capped with the reason;
    (c) the queue drains, replicas fall and Karpenter consolidates the empty nodes away."""
    cluster, operator = elastic.cluster, elastic.operator
    no_gpu_nodes_left(cluster)
    with VLLMMetricsEmulator({MODEL: (0.0, 0.0)}) as emulator:
        prometheus = PrometheusServer(tmp_path, [(emulator.port, {"namespace": ens})])
        prometheus.start()
        operator.stop()
        operator.start("--prometheus-url", prometheus.url, remember=False)  # start() goes back
        timeline: list[tuple[float, str, int, int, int]] = []
        started = time.monotonic()

        def sample(phase: str) -> tuple[int, int, int]:
            status = glmd(cluster, ens, "auto").get("status", {})
            row = (int(status.get("desiredReplicas") or 0), int(status.get("readyReplicas") or 0))
            nodes = len(gpu_nodes(cluster))
            if not timeline or timeline[-1][2:] != (*row, nodes):
                timeline.append((time.monotonic() - started, phase, *row, nodes))
            return (*row, nodes)

        try:
            apply(cluster, ens, autoscaled("auto"))
            wait_for(lambda: sample("start") == (1, 1, 1), 240, "1 replica Ready on 1 node")
            per_replica = int(glmd(cluster, ens, "auto")["status"]["plan"]["variants"][0]["maxNumSeqs"])

            emulator.set(MODEL, waiting=5 * (per_replica + 4), running=per_replica)
            wait_for(
                lambda: sample("queue grows") == (2, 2, 2), 240, "2 replicas Ready on 2 nodes (the limit)"
            )

            def capped() -> str | None:
                reason = str(glmd(cluster, ens, "auto")["status"]["autoscaler"].get("reason", ""))
                return reason if "GPU pools can host only 2 replicas" in reason else None

            reason = wait_for(capped, 30, "the autoscaler capped by the pool's limit, saying so")
            print(f"\n(b) autoscaler at the pool limit: {reason}")
            time.sleep(15)  # three intervals more: still capped, no third node
            assert sample("queue high") == (2, 2, 2)

            emulator.set(MODEL, waiting=0, running=0)
            wait_for(lambda: sample("queue drains") == (1, 1, 1), 420, "back to 1 replica on 1 node")
        finally:
            for _ in range(3):
                sample("end")
            print("\n(b)/(c) seconds  phase         desired ready gpu-nodes")
            for t, phase, desired, ready, nodes in timeline:
                print(f"        {t:7.1f}  {phase:13s} {desired:7d} {ready:5d} {nodes:9d}")
            operator.stop()
            operator.start()
            prometheus.stop()
    deleted = time.monotonic()
    cluster.kubectl("delete", "glmdeployment", "auto", "-n", ens, "--wait=true")
    wait_for(lambda: not gpu_nodes(cluster), 180, "every GPU node removed after the GLMDeployment is gone")
    print(f"(c) GLMDeployment deleted -> 0 GPU nodes in {time.monotonic() - deleted:.1f} s")
    assert nodeclaims(cluster) == []
