"""The start-up warm-up plans and renders a whole GLMDeployment (so it loads and compiles everything
the first real reconcile would)."""

from __future__ import annotations

from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.controller.reconcile import warm_up_planner


def test_the_warm_up_plans_and_renders_every_child_kind_of_a_single_node_variant() -> None:
    desired = warm_up_planner(DEFAULT_VLLM_IMAGE)
    assert [o["kind"] for o in desired.objects] == ["Deployment", "Service", "PodDisruptionBudget"]
