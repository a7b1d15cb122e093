"""The InferencePool of ``spec.inferencePool`` and its endpoint picker: objects, prune, status (pure).

- Wanted when the spec sets ``inferencePool`` and the apiserver serves the InferencePool API
  (``Observed.inference_pool_api``, from discovery); then ``render.inference_pool`` renders them.
- Objects of an earlier setting that are no longer wanted (``inferencePool`` removed, the API gone)
  are pruned; ``Observed.inference_pool_children`` holds them (the operator watches every kind).
- ``status.inferencePool`` names the pool and the picker's Service and says whether the picker has a
  ready replica; with the API missing, it says to install the CRD. Removing ``inferencePool`` clears
  the block (an explicit null in the status merge patch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec, InferencePoolStatus
from glm_operator.desired.children import child_ref
from glm_operator.desired.model import ChildRef, Observed
from glm_operator.render.context import WorkloadContext
from glm_operator.render.inference_pool import (
    EPP_GRPC_PORT,
    INFERENCE_POOL_API_VERSION,
    endpoint_picker_name,
    endpoint_picker_selector,
    inference_pool_name,
    render_inference_pool,
)

STATUS_FIELD = "inferencePool"
API_MISSING = (
    f"the InferencePool API ({INFERENCE_POOL_API_VERSION}) is not served: install the Gateway API "
    "Inference Extension's CRDs (v1.x, the inferencepools CRD); the operator creates the pool at its "
    "next resync"
)


def inference_pool_objects(
    contexts: Sequence[WorkloadContext], spec: GLMDeploymentSpec, api_served: bool
) -> list[dict[str, Any]]:
    """The pool and its picker, when the spec asks for them and the API is served."""
    if spec.inference_pool is None or not api_served or not contexts:
        return []
    return render_inference_pool(contexts[0], spec.inference_pool)


def inference_pool_prune(
    existing: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]]
) -> tuple[ChildRef, ...]:
    """The pool's objects that exist and are not wanted any more."""
    wanted = {child_ref(o) for o in objects}
    return tuple(sorted(child_ref(c) for c in existing if child_ref(c) not in wanted))


def inference_pool_status(
    observed: Observed, spec: GLMDeploymentSpec, objects: Sequence[Mapping[str, Any]]
) -> InferencePoolStatus | None:
    """``status.inferencePool``: None without ``spec.inferencePool``."""
    if spec.inference_pool is None:
        return None
    if not observed.inference_pool_api:
        return InferencePoolStatus(ready=False, message=API_MISSING)
    name = str(observed.body["metadata"]["name"])
    picker = endpoint_picker_name(name)
    deployment = next(
        (c for c in observed.inference_pool_children if child_ref(c) == ("apps/v1", "Deployment", picker)),
        None,
    )
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0) > 0
    message = None
    if not ready:
        selector = ",".join(f"{k}={v}" for k, v in endpoint_picker_selector(name).items())
        message = (
            "the endpoint picker has no ready replica yet: "
            f"kubectl -n {observed.body['metadata']['namespace']} get pods -l {selector}"
        )
    return InferencePoolStatus(
        name=inference_pool_name(name) if objects else None,
        endpoint_picker=f"{picker}:{EPP_GRPC_PORT}",
        ready=ready,
        message=message,
    )


def wire_status(
    observed: Observed, status: dict[str, Any], pool: InferencePoolStatus | None
) -> dict[str, Any]:
    """``status`` with the pool's block. The status is written as a merge patch, which keeps what it
    does not name: an explicit null clears the block an earlier setting wrote, or a field of it that
    is gone (the message once the picker is ready)."""
    previous = observed.previous_status.get(STATUS_FIELD)
    if pool is not None:
        block: dict[str, Any] = pool.to_wire()
        if isinstance(previous, Mapping):
            block.update({k: None for k in previous if k not in block})
        return {**status, STATUS_FIELD: block}
    if previous is not None:
        return {**status, STATUS_FIELD: None}
    return status
