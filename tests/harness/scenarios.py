"""Builders for ``compute_desired`` scenarios without a cluster (unit and contract tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.desired import Observed

NOW = "2026-11-30T00:00:00Z"


def observed(
    spec: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    *,
    name: str = "g",
    namespace: str = "llm",
    image: str = DEFAULT_VLLM_IMAGE,
) -> Observed:
    """A new GLMDeployment (generation 1, empty status) with ``spec`` on ``nodes``, nothing running."""
    body = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid", "generation": 1},
        "spec": dict(spec),
        "status": {},
    }
    return Observed(body=body, nodes=nodes, gpus_used={}, children=[], pods=[], default_image=image, now=NOW)


def fixture_nodes() -> list[dict[str, Any]]:
    """The GPU nodes of tests/fixtures/gpu-cluster.yaml (what the e2e cluster runs)."""
    import yaml

    from tests.harness.cluster import repo_root

    return list(
        yaml.safe_load((repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]
    )


NODES = fixture_nodes()
BODY: dict[str, Any] = {
    "apiVersion": "inference.glm.dev/v1alpha1",
    "kind": "GLMDeployment",
    "metadata": {"name": "g", "namespace": "llm", "uid": "uid-1", "generation": 1, "resourceVersion": "5"},
    "spec": {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 32768},
}
