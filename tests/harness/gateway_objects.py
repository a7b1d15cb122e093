"""Small builders of the GLMDeployment and Pod objects the gateway reads (tests and benchmark)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from glm_operator.render import names

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"


def glmdeployment(
    name: str, served: str, variants: Sequence[tuple[str, float]], *, port: int = 8000
) -> dict[str, Any]:
    """A planned GLMDeployment serving ``served``, with ``(gpu product, max concurrency)`` variants."""
    return {
        "metadata": {"name": name},
        "spec": {"model": {"servedModelName": served}, "serving": {"port": port}},
        "status": {
            "model": served,
            "plan": {"variants": [{"gpuProduct": g, "maxConcurrency": c} for g, c in variants]},
        },
    }


def vllm_pod(
    name: str, deployment: str, gpu_product: str, ip: str, *, ready: bool = True, terminating: bool = False
) -> dict[str, Any]:
    """A vLLM pod of ``deployment`` on ``gpu_product`` with address ``ip``."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            names.LABEL_COMPONENT: names.COMPONENT_INFERENCE,
            names.LABEL_DEPLOYMENT: names.label_value(deployment),
            names.LABEL_GPU_PRODUCT: names.label_value(gpu_product),
        },
    }
    if terminating:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
