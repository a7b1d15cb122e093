"""The gateway's routing table: names, members, weights from the plan, stable slots."""

from __future__ import annotations

import pytest

from glm_operator.gateway.routes import (
    MAX_WEIGHT,
    assign_slots,
    backend_name,
    capacity_weights,
    compute_routing_table,
)
from tests.harness.gateway_objects import H100, L4, glmdeployment, vllm_pod

AIR = glmdeployment("air", "glm-4.5-air", [(H100, 13.2), (L4, 3.1)])
FLASH_1M = glmdeployment("flash-1m", "glm-5.3-flash[1m]", [(H100, 2.0)])


def test_h100_replica_weighs_about_four_l4_replicas() -> None:
    table = compute_routing_table(
        [AIR],
        [vllm_pod("air-h100-0", "air", H100, "10.0.0.1"), vllm_pod("air-l4-0", "air", L4, "10.0.0.2")],
        slots=8,
    )
    backend = table.backend("glm-4.5-air")
    assert backend is not None
    assert {m.pod: m.weight for m in backend.members} == {"air-h100-0": 13, "air-l4-0": 3}
    assert [m.slot for m in backend.members] == [1, 2]


def test_long_context_name_is_its_own_backend_with_its_own_pods() -> None:
    table = compute_routing_table(
        [AIR, FLASH_1M],
        [vllm_pod("air-0", "air", H100, "10.0.0.1"), vllm_pod("flash-1m-0", "flash-1m", H100, "10.0.0.9")],
        slots=4,
    )
    assert table.models == ("glm-4.5-air", "glm-5.3-flash[1m]")
    flash = table.backend("glm-5.3-flash[1m]")
    assert flash is not None and [m.pod for m in flash.members] == ["flash-1m-0"]
    assert backend_name("glm-5.3-flash[1m]") != backend_name("glm-5.3-flash")
    assert all(c.isalnum() or c in "_.-" for c in backend_name("glm-5.3-flash[1m]"))


def test_unready_and_terminating_pods_keep_their_slot_but_are_not_ready() -> None:
    table = compute_routing_table(
        [AIR],
        [
            vllm_pod("a", "air", H100, "10.0.0.1", ready=False),
            vllm_pod("b", "air", H100, "10.0.0.2", terminating=True),
            vllm_pod("c", "air", H100, "10.0.0.3"),
        ],
        slots=4,
    )
    backend = table.backend("glm-4.5-air")
    assert backend is not None
    assert {m.pod: m.ready for m in backend.members} == {"a": False, "b": False, "c": True}


def test_pods_without_an_address_or_of_other_deployments_or_workers_are_left_out() -> None:
    worker = vllm_pod("w", "air", H100, "10.0.0.5")
    worker["metadata"]["labels"]["app.kubernetes.io/component"] = "ray-worker"
    no_ip = vllm_pod("n", "air", H100, "10.0.0.6")
    del no_ip["status"]["podIP"]
    table = compute_routing_table([AIR], [worker, no_ip, vllm_pod("x", "other", H100, "10.0.0.7")], slots=4)
    backend = table.backend("glm-4.5-air")
    assert backend is not None and backend.members == ()


def test_a_glmdeployment_without_a_served_name_yet_is_not_routed() -> None:
    unplanned = {"metadata": {"name": "new"}, "spec": {"model": {"id": "zai-org/GLM-4.5-Air"}}}
    assert compute_routing_table([unplanned], [], slots=4).models == ()


def test_slots_are_stable_when_pods_come_and_go() -> None:
    slots, left_out = assign_slots({"b": 2, "gone": 1}, ["a", "b", "c"], 3)
    assert slots == {"b": 2, "a": 1, "c": 3} and left_out == []
    slots, left_out = assign_slots(slots, ["a", "b", "c", "d"], 3)
    assert left_out == ["d"]


def test_pods_beyond_the_slots_are_reported() -> None:
    pods = [vllm_pod(f"p{i}", "air", L4, f"10.0.0.{i}") for i in range(3)]
    table = compute_routing_table([AIR], pods, slots=2)
    assert any("beyond 2 slots" in detail for detail in table.details)


@pytest.mark.parametrize(
    ("concurrency", "expected"),
    [
        ({"h100": 13.2, "l4": 3.1}, {"h100": 13, "l4": 3}),
        ({"h100": 0.4}, {"h100": 1}),
        ({"big": 1024.0, "small": 2.0}, {"big": MAX_WEIGHT, "small": 1}),
        ({}, {}),
    ],
)
def test_capacity_weights(concurrency: dict[str, float], expected: dict[str, int]) -> None:
    assert capacity_weights(concurrency) == expected
