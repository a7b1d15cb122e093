"""compute_desired with a recorded load test: which knee the plan and the autoscaler use, and why.

Whole passes of the pipeline on the fixture cluster: the recording is built from the status.plan of
a first pass (as ``glm-operator loadtest --record`` reads it), then handed back as the ConfigMap the
reconciler observes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from glm_operator.clients.load_tests import load_test_config_map
from glm_operator.desired import Desired, compute_desired
from glm_operator.desired.measured_speed import NOT_RECORDED
from glm_operator.planning.speed.measured import Measurement, measurement_to_data, shape_from_status
from tests.harness.load_levels import SATURATING, level
from tests.unit.test_desired import body, observe

IMAGE = "vllm/vllm-openai:v0.33.0-test"  # observe()'s default image


def autoscaled(**spec: Any) -> dict[str, Any]:
    return body(
        model={"id": "zai-org/glm-4-9b-chat", "servedModelName": "auto-glm"},
        contextLength=8192,
        gpu={"products": ["L4"], "memoryUtilization": 0.95},
        autoscaling={"minReplicas": 1, "maxReplicas": 4, "targetQueueLength": 4},
        **spec,
    )


def recording(desired: Desired, levels: Any = SATURATING, **change: Any) -> dict[str, Any]:
    """The ConfigMap ``loadtest --record`` writes for the first variant of ``desired``'s status.plan."""
    plan = desired.status["plan"]
    shape = shape_from_status(plan["variants"][0], plan["image"])
    m = Measurement(
        levels=tuple(levels),
        input_tokens=512,
        output_tokens=128,
        shape=dataclasses.replace(shape, **change),
        recorded_at="2026-11-30T00:00:00Z",
    )
    owner = {"metadata": {"name": "g", "namespace": "llm", "uid": "uid-1"}}
    return load_test_config_map(owner, measurement_to_data(m))


def with_status(b: dict[str, Any], desired: Desired) -> dict[str, Any]:
    return {**b, "status": desired.status}


def test_without_a_recording_the_knee_is_modelled_and_nothing_is_announced() -> None:
    d = compute_desired(observe(autoscaled()))
    plan = d.status["plan"]
    assert plan["speedSource"] == "modelled" and plan["speedSourceReason"] == NOT_RECORDED
    assert plan["image"] == IMAGE
    assert "measuredKneeConcurrency" not in plan["variants"][0]
    assert d.scaling is not None
    assert d.scaling.replica_concurrency == plan["variants"][0]["predicted"]["kneeConcurrency"]
    assert not [e for e in d.events if e.reason in ("MeasuredSpeed", "ModelledSpeed")]


def test_a_recording_on_the_shape_served_sets_the_knee_and_the_autoscalers_target() -> None:
    b = autoscaled()
    first = compute_desired(observe(b))
    predicted = first.status["plan"]["variants"][0]["predicted"]["kneeConcurrency"]
    assert predicted > 8  # the model expects more than the measured replica gives

    d = compute_desired(observe(with_status(b, first), load_test=recording(first)))
    plan = d.status["plan"]
    assert plan["speedSource"] == "measured"
    assert plan["variants"][0]["measuredKneeConcurrency"] == 8
    assert plan["variants"][0]["predicted"]["kneeConcurrency"] == predicted  # the prediction stays shown
    assert d.scaling is not None and d.scaling.replica_concurrency == 8.0
    assert "ConfigMap g-loadtest (2026-11-30T00:00:00Z)" in plan["speedSourceReason"]
    assert f"knee 8 running requests per replica (predicted: {predicted})" in plan["speedSourceReason"]
    assert [e.reason for e in d.events if e.reason.endswith("Speed")] == ["MeasuredSpeed"]

    # the next pass on the same inputs announces nothing again
    again = compute_desired(observe(with_status(b, d), load_test=recording(first)))
    assert again.status["plan"] == plan
    assert not [e for e in again.events if e.reason.endswith("Speed")]

    # the recording deleted: back to the model, and said so
    gone = compute_desired(observe(with_status(b, d)))
    assert gone.status["plan"]["speedSource"] == "modelled"
    assert gone.scaling is not None and gone.scaling.replica_concurrency == predicted
    assert [e.reason for e in gone.events if e.reason.endswith("Speed")] == ["ModelledSpeed"]


# An L4 pair whose ITL crosses 60 ms between 8 and 16 concurrent requests while throughput still rises.
SLOWING = (
    level(1, 30, 30),
    level(2, 60, 32),
    level(4, 110, 35),
    level(8, 160, 50),
    level(16, 230, 70),
    level(32, 290, 110),
)


def test_spec_slo_limits_the_measured_knee_and_max_num_seqs_caps_it() -> None:
    b = autoscaled(slo={"itlMilliseconds": 60})
    first = compute_desired(observe(b))
    assert first.status["plan"]["variants"][0]["maxNumSeqs"] > 16  # the model expects 60 ms further out
    d = compute_desired(observe(with_status(b, first), load_test=recording(first, SLOWING)))
    # ITL 50 ms at 8, 70 ms at 16: 60 ms is reached half-way, at 12
    assert d.status["plan"]["variants"][0]["measuredKneeConcurrency"] == 12
    assert "spec.slo (ITL p50 <= 60 ms) holds up to concurrency 12.0" in d.status["plan"]["speedSourceReason"]
    assert d.scaling is not None and d.scaling.replica_concurrency == 12.0

    tight = autoscaled(slo={"itlMilliseconds": 20})  # no measured level meets it
    first = compute_desired(observe(tight))
    d = compute_desired(observe(with_status(tight, first), load_test=recording(first, SLOWING)))
    assert d.status["plan"]["speedSource"] == "modelled"
    assert "no measured level meets spec.slo (ITL p50 <= 20 ms)" in d.status["plan"]["speedSourceReason"]


def test_a_recording_on_another_shape_or_workload_is_ignored_with_the_reason() -> None:
    b = autoscaled()
    first = compute_desired(observe(b))
    tp = first.status["plan"]["variants"][0]["tensorParallelSize"]
    stale = compute_desired(
        observe(with_status(b, first), load_test=recording(first, tensor_parallel_size=tp * 2))
    )
    plan = stale.status["plan"]
    assert plan["speedSource"] == "modelled"
    assert f"tensor_parallel_size {tp * 2} -> {tp}" in plan["speedSourceReason"]
    assert "record it again" in plan["speedSourceReason"]
    assert stale.scaling is not None
    assert stale.scaling.replica_concurrency == plan["variants"][0]["predicted"]["kneeConcurrency"]
    assert [e.reason for e in stale.events if e.reason.endswith("Speed")] == ["ModelledSpeed"]

    old_image = recording(first, image="vllm/vllm-openai:v0.30.0")
    d = compute_desired(observe(with_status(b, first), load_test=old_image))
    assert (
        "image 'vllm/vllm-openai:v0.30.0' -> 'vllm/vllm-openai:v0.33.0-test'"
        in (d.status["plan"]["speedSourceReason"])
    )

    cm = recording(first)
    short = {**cm, "data": measurement_to_data(dataclasses.replace(_measurement(cm), output_tokens=8))}
    d = compute_desired(observe(with_status(b, first), load_test=short))
    assert d.status["plan"]["speedSource"] == "modelled"
    assert "answers of 8 tokens (the plan's workload: 128" in d.status["plan"]["speedSourceReason"]
    assert "--output-tokens 128" in d.status["plan"]["speedSourceReason"]

    broken = {**cm, "data": {"measurement.json": "{"}}
    d = compute_desired(observe(with_status(b, first), load_test=broken))
    assert d.status["plan"]["speedSource"] == "modelled"
    assert "is not a load-test record" in d.status["plan"]["speedSourceReason"]


def _measurement(cm: dict[str, Any]) -> Measurement:
    from glm_operator.planning.speed.measured import measurement_from_data

    return measurement_from_data(cm["data"])
