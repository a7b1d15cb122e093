"""Node outages and their grace period (pure): what is held, for how long, and what is given up."""

from __future__ import annotations

import datetime as dt
from typing import Any

from glm_operator.planning.supply.nodes import parse_gpu_pools
from glm_operator.planning.supply.outages import (
    CORDONED,
    NOT_READY,
    UNKNOWN,
    held_gpus,
    next_expiry,
    node_outage,
    node_outages,
    parse_time,
)

NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_node(
    name: str, ready: str = "True", since: float = 0.0, unschedulable: bool = False, **extra: Any
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": H100},
        "spec": {"unschedulable": unschedulable, **extra},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": stamp(since)}],
        },
    }


def pod(name: str, node: str, gpus: int, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": phase},
    }


def test_ready_schedulable_node_has_no_outage() -> None:
    assert node_outage(gpu_node("a"), NOW, 300) is None
    assert node_outage({"metadata": {"name": "no-conditions"}}, NOW, 300) is None


def test_not_ready_and_unknown_are_held_for_the_grace_from_the_transition() -> None:
    nr = node_outage(gpu_node("a", "False", since=60), NOW, 300)
    assert nr is not None and nr.reason == NOT_READY and nr.held(NOW)
    assert nr.expires == NOW + dt.timedelta(seconds=240)
    unknown = node_outage(gpu_node("b", "Unknown", since=301), NOW, 300)
    assert unknown is not None and unknown.reason == UNKNOWN and not unknown.held(NOW)
    assert unknown.describe() == f"b (Unknown since {stamp(301)})"


def test_a_stale_outage_taint_does_not_cut_the_grace_short() -> None:
    # After a short recovery the lifecycle controller's taint can still carry the previous outage.
    node = gpu_node(
        "a",
        "Unknown",
        since=40,
        taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": stamp(400)}],
    )
    outage = node_outage(node, NOW, 300)
    assert outage is not None and outage.since == NOW - dt.timedelta(seconds=40) and outage.held(NOW)


def test_no_timestamp_starts_the_grace_now() -> None:
    node = gpu_node("a", "False")
    del node["status"]["conditions"][0]["lastTransitionTime"]
    outage = node_outage(node, NOW, 300)
    assert outage is not None and outage.since == NOW


def test_cordoned_ready_node_is_held_without_expiry() -> None:
    outage = node_outage(gpu_node("a", unschedulable=True), NOW, 300)
    assert outage is not None and outage.reason == CORDONED and outage.expires is None
    assert outage.held(NOW + dt.timedelta(days=30))


def test_held_gpus_count_only_live_own_pods_on_nodes_in_their_grace() -> None:
    nodes = [gpu_node("in", "False", 10), gpu_node("out", "False", 900), gpu_node("ok")]
    outages = node_outages(nodes, NOW, 300)
    assert set(outages) == {"in", "out"}
    pods = [
        pod("p0", "in", 2),
        pod("p1", "in", 2),
        pod("gone", "in", 2, phase="Failed"),
        pod("deleting", "in", 2, deletionTimestamp=stamp(1)),
        pod("expired", "out", 2),
        pod("healthy", "ok", 2),
    ]
    assert held_gpus(outages, pods, NOW) == {"in": {"nvidia.com/gpu": 4}}


def test_held_nodes_stay_pools_with_only_the_held_gpus_free() -> None:
    nodes = [gpu_node("in", "False", 10), gpu_node("cordoned", unschedulable=True), gpu_node("ok")]
    pools = {
        p.node_name: p
        for p in parse_gpu_pools(nodes, {"ok": {"nvidia.com/gpu": 3}}, {"in": {"nvidia.com/gpu": 4}})
    }
    assert set(pools) == {"in", "ok"}  # the cordoned node holds nothing of ours: not a pool
    assert pools["in"].gpus_free == 4 and pools["in"].gpus_free_when_available == 8
    assert pools["ok"].gpus_free == 5 == pools["ok"].gpus_free_when_available


def test_next_expiry_is_the_first_grace_end_among_the_held_nodes() -> None:
    outages = node_outages(
        [gpu_node("a", "False", 100), gpu_node("b", "False", 250), gpu_node("c", unschedulable=True)],
        NOW,
        300,
    )
    assert next_expiry(outages.values(), NOW, ["a", "b", "c"]) == 50.0
    assert next_expiry(outages.values(), NOW, ["a", "c"]) == 200.0
    assert next_expiry(outages.values(), NOW, ["c"]) is None


def test_parse_time() -> None:
    assert parse_time("2026-11-30T12:00:00Z") == NOW
    assert parse_time("yesterday") is None and parse_time(None) is None
