"""Placement stickiness on the real control plane: a GPU-node blip keeps the serving replicas.

A kubelet that stops posting status is simulated on KWOK nodes: the node is released from KWOK
(its annotation removed, so nothing renews its status or Lease) and its Ready condition is set to
Unknown, as the node lifecycle controller does. Bringing it back hands it to KWOK again, which
reports Ready. The operator runs with ``--node-grace-seconds`` from conftest (short, so the test
can wait it out; the resync plays no part: the re-plan at the end of the grace is requeued by
the reconcile itself). The test takes GPU nodes away, and needs every H100 and A100 GPU free: it
runs on a cluster of its own, so what other tests leave behind (or an apiserver outage they
caused) cannot decide its outcome.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster

from .conftest import NODE_GRACE_SECONDS, NODES, E2ECluster, RunningOperator, delete_namespace
from .test_controller import apply, children, condition, get, glmd, manifest, phase_is, wait_for

pytestmark = pytest.mark.e2e
H100_NODES = ("h100-sxm-0", "h100-sxm-1", "h100-sxm-2", "h100-sxm-3")  # every H100 node of the fixture
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
BLIP_SECONDS = 60


@pytest.fixture(scope="module")
def outage_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[E2ECluster, RunningOperator]]:
    local = LocalCluster(state_dir=tmp_path_factory.mktemp("outage-cluster"))
    local.up(nodes=[NODES])
    operator = RunningOperator(local, tmp_path_factory.mktemp("outage-operator"))
    try:
        operator.install()
        operator.start("--node-grace-seconds", str(NODE_GRACE_SECONDS))
        yield E2ECluster(local), operator
    finally:
        operator.stop()
        local.down()


def take_down(cluster: E2ECluster, nodes: tuple[str, ...]) -> None:
    """The kubelets stop posting status: Ready=Unknown, nothing renews the node any more."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    for node in nodes:
        cluster.kubectl("annotate", "node", node, f"{KWOK_ANNOTATION}-")
        patch = json.dumps({"status": {"conditions": [ready]}})
        cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch)


def bring_back(cluster: E2ECluster, nodes: tuple[str, ...]) -> None:
    """KWOK reports the nodes Ready again; wait until the lifecycle controller lifted its taints."""
    for node in nodes:
        cluster.kubectl("annotate", "node", node, f"{KWOK_ANNOTATION}=fake", "--overwrite")
    cluster.kubectl("wait", "--for=condition=Ready", "node", *nodes, "--timeout=60s")

    def untainted() -> bool:
        for node in nodes:
            taints = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)["spec"].get(
                "taints"
            )
            if any(t["key"].startswith("node.kubernetes.io/") for t in taints or []):
                return False
        return True

    wait_for(untainted, 60, "outage taints lifted")


def child_uids(cluster: E2ECluster, ns: str, name: str) -> dict[str, str]:
    return {d["metadata"]["name"]: d["metadata"]["uid"] for d in children(cluster, ns, name)}


def pod_uids(cluster: E2ECluster, ns: str, name: str) -> set[str]:
    pods = get(cluster, ns, "pods", selector=f"inference.glm.dev/deployment={name}")["items"]
    return {p["metadata"]["uid"] for p in pods}


def sticky(name: str) -> dict[str, Any]:
    return manifest(
        name,
        model={"id": "zai-org/GLM-4.5-Air"},
        contextLength=32768,
        gpu={"products": ["H100", "A100-80GB"]},
        replicas=2,
    )


def test_a_60s_h100_blip_keeps_children_and_pods_and_past_the_grace_it_replans(
    outage_cluster: tuple[E2ECluster, RunningOperator],
) -> None:
    cluster, _ = outage_cluster
    ns = cluster.namespace("ctl-outage")
    try:
        blip_then_outage(cluster, ns)
    finally:
        delete_namespace(cluster, ns)


def blip_then_outage(cluster: E2ECluster, ns: str) -> None:
    apply(cluster, ns, sticky("sticky"))
    wait_for(phase_is(cluster, ns, "sticky", "Ready"), 120, "Ready")
    deployments = child_uids(cluster, ns, "sticky")
    assert list(deployments) == ["sticky-h100-80gb-hbm3"]
    pods = pod_uids(cluster, ns, "sticky")
    assert len(pods) == 2

    # 1. A blip shorter than the grace: nothing deleted, nothing rolled, Degraded says why.
    try:
        take_down(cluster, H100_NODES)
        started = time.monotonic()

        def reported() -> dict[str, Any] | None:
            obj = glmd(cluster, ns, "sticky")
            return obj if condition(obj, "Degraded").get("reason") == "GPUNodesUnavailable" else None

        obj = wait_for(reported, 45, "Degraded GPUNodesUnavailable")
        assert obj["status"]["phase"] == "Degraded"
        hosts = {
            p["spec"]["nodeName"]
            for p in get(cluster, ns, "pods", selector="inference.glm.dev/deployment=sticky")["items"]
        }
        assert all(host in condition(obj, "Degraded")["message"] for host in hosts), hosts
        while time.monotonic() - started < BLIP_SECONDS:
            assert child_uids(cluster, ns, "sticky") == deployments
            assert pod_uids(cluster, ns, "sticky") == pods
            time.sleep(2)
    finally:
        bring_back(cluster, H100_NODES)
    wait_for(
        lambda: condition(glmd(cluster, ns, "sticky"), "Degraded").get("reason") != "GPUNodesUnavailable",
        60,
        "Degraded cleared after the nodes came back",
    )
    assert child_uids(cluster, ns, "sticky") == deployments
    assert pod_uids(cluster, ns, "sticky") == pods

    # 2. An outage longer than the grace: the replicas move to the next allowed GPU type.
    try:
        take_down(cluster, H100_NODES)
        started = time.monotonic()

        def replanned() -> bool:
            return "sticky-a100-sxm4-80gb" in child_uids(cluster, ns, "sticky")

        wait_for(replanned, NODE_GRACE_SECONDS + 60, "re-planned onto A100 after the grace")
        elapsed = time.monotonic() - started
        print(f"\nre-planned {elapsed:.0f} s after the outage began (grace {NODE_GRACE_SECONDS} s)")
        assert elapsed >= NODE_GRACE_SECONDS - 5
        # Make before break: the H100 child goes once the A100 replicas are Ready.
        wait_for(
            lambda: list(child_uids(cluster, ns, "sticky")) == ["sticky-a100-sxm4-80gb"],
            120,
            "the H100 child pruned once the replacement is Ready",
        )
    finally:
        bring_back(cluster, H100_NODES)
