"""spec.guaranteeMinConcurrency: plans within the budget model's stated error of minConcurrency."""

from __future__ import annotations

import math
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec
from glm_operator.planning.memory.instance import KV_TOKEN_ERROR
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from tests.unit.test_placement import H100, POOLS, variant

AIR = {"model": {"id": "zai-org/GLM-4.5-Air"}, "quantization": "bf16", "contextLength": 32768}


def _plan(**extra: Any) -> Any:
    return plan_placement(placement_request_from_spec({**AIR, **extra}, POOLS))


def test_close_call_is_flagged_and_guarantee_moves_to_the_next_configuration() -> None:
    tp4 = {"gpu": {"tensorParallelSize": 4, "memoryUtilization": 0.92}}
    base = variant(_plan(**tp4), H100)
    # minConcurrency just under the prediction: fits, but inside the stated error
    tight = math.floor(base.max_concurrency)
    assert tight * 1.0 > base.max_concurrency * (1 - KV_TOKEN_ERROR)
    flagged = _plan(minConcurrency=tight, **tp4)
    v = variant(flagged, H100)
    assert v.tensor_parallel_size == base.tensor_parallel_size
    assert any("KV-token error" in u for u in flagged.uncertain)
    # with the guarantee that shape no longer fits: TP 4 is refused, the planner's own choice holds it
    # (more GPUs, or the same TP at a higher gpu-memory-utilization: whichever predicts more per GPU)
    refused = _plan(minConcurrency=tight, guaranteeMinConcurrency=True, **tp4)
    assert all(v.gpu_product != H100 for v in refused.variants)
    guaranteed = _plan(minConcurrency=tight, guaranteeMinConcurrency=True)
    g = variant(guaranteed, H100)
    assert g.gpus_per_replica > base.gpus_per_replica or g.gpu_memory_utilization > 0.92
    assert g.max_concurrency * (1 - KV_TOKEN_ERROR) >= tight


def test_guarantee_is_a_spec_field_and_rejects_non_booleans() -> None:
    spec = GLMDeploymentSpec.model_validate({**AIR, "guaranteeMinConcurrency": True})
    assert spec.guarantee_min_concurrency is True
    assert GLMDeploymentSpec.model_validate(AIR).guarantee_min_concurrency is False
    # The apiserver refuses a non-boolean (the CRD's structural schema); the planner reads the model.
    from devtools.crd import build_crd

    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["guaranteeMinConcurrency"]["type"] == "boolean"
    assert placement_request_from_spec(
        {**AIR, "guaranteeMinConcurrency": True}, POOLS
    ).guarantee_min_concurrency
