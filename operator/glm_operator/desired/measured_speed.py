"""Step 1b of the pipeline: a recorded load test in place of the modelled knee, when it still applies (pure).

``glm-operator loadtest --record`` leaves one ConfigMap per GLMDeployment (``<name>-loadtest``, owned by
it). ``use_recording`` reads it (:mod:`glm_operator.planning.speed.measured` has the rules): the variant
of the plan whose shape, as ``status.plan`` writes it, equals the recorded one gets the measured knee
(``Variant.measured_knee_concurrency``, the autoscaler's target per replica), and ``status.plan``
says ``speedSource: measured``; otherwise ``modelled``, with why the recording was not used.
``speed_source_events`` announces a change of source (or of why), only once a recording is involved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from glm_operator.api.v1alpha1 import GLMDeploymentSpec, SpeedSource
from glm_operator.desired.model import Event, SpeedChoice
from glm_operator.desired.status import plan_variant
from glm_operator.planning.placement.result import Plan, Variant
from glm_operator.planning.speed.measured import (
    Measurement,
    MeasurementFormatError,
    RecordedShape,
    measured_knee,
    measurement_from_data,
    shape_differences,
    shape_from_status,
    workload_mismatch,
)
from glm_operator.planning.speed.performance import PLAN_INPUT_TOKENS, PLAN_OUTPUT_TOKENS

MEASURED: SpeedSource = "measured"
MODELLED: SpeedSource = "modelled"
NOT_RECORDED = (
    "no load test recorded: the knee is the performance model's; `glm-operator loadtest --url URL "
    "--model NAME --record NAMESPACE/NAME` measures one and the autoscaler then aims at its knee"
)
RECORD_AGAIN = "record it again (glm-operator loadtest --record) against the shape served now"


def _shape(v: Variant, image: str) -> RecordedShape:
    return shape_from_status(plan_variant(v).to_wire(), image)


def _modelled(name: str, m: Measurement | None, why: str) -> SpeedChoice:
    when = f" ({m.recorded_at})" if m is not None and m.recorded_at else ""
    return SpeedChoice(MODELLED, f"the load test in ConfigMap {name}{when} is not used: {why}"[:2048], True)


def use_recording(
    plan: Plan, config_map: Mapping[str, Any] | None, spec: GLMDeploymentSpec, image: str
) -> tuple[Plan, SpeedChoice]:
    """``plan`` with the recorded knee on the variant it was measured on, and the speed source."""
    if config_map is None:
        return plan, SpeedChoice(MODELLED, NOT_RECORDED)
    name = str((config_map.get("metadata") or {}).get("name", ""))
    try:
        m = measurement_from_data(config_map.get("data"))
    except MeasurementFormatError as exc:
        return plan, _modelled(name, None, f"{exc}; {RECORD_AGAIN}")
    variants = [v for v in plan.variants if v.replicas > 0] or list(plan.variants)
    if not variants:
        return plan, _modelled(name, m, "the plan has no variant")
    shapes = [(v, _shape(v, image)) for v in variants]
    matching = [v for v, shape in shapes if shape == m.shape]
    if not matching:
        closest = next((s for _, s in shapes if s.gpu_product == m.shape.gpu_product), shapes[0][1])
        diff = "; ".join(shape_differences(m.shape, closest))
        return plan, _modelled(
            name,
            m,
            f"it ran on {m.shape.describe()}, the plan serves {closest.describe()} ({diff}); {RECORD_AGAIN}",
        )
    v = matching[0]
    workload = v.speed.workload if v.speed is not None else None
    want_in = workload.input_tokens if workload else PLAN_INPUT_TOKENS
    want_out = workload.output_tokens if workload else PLAN_OUTPUT_TOKENS
    mismatch = workload_mismatch(m, want_in, want_out)
    if mismatch:
        return plan, _modelled(
            name,
            m,
            f"it measured {mismatch}; record with --input-tokens {want_in} --output-tokens {want_out}",
        )
    slo = spec.slo
    knee = measured_knee(
        m.levels,
        m.replicas,
        v.max_num_seqs * v.data_parallel_size,
        slo.itl_milliseconds if slo else None,
        slo.ttft_milliseconds if slo else None,
    )
    if knee.concurrency is None:
        return plan, _modelled(name, m, knee.reason)
    measured = {id(x) for x in matching}
    plan = dataclasses.replace(
        plan,
        variants=tuple(
            dataclasses.replace(x, measured_knee_concurrency=knee.concurrency) if id(x) in measured else x
            for x in plan.variants
        ),
    )
    reason = (
        f"the load test in ConfigMap {name} ({m.recorded_at}) on {m.shape.describe()}: knee "
        f"{knee.concurrency} running requests per replica (predicted: "
        f"{v.knee_concurrency or v.max_num_seqs}); {knee.reason}"
    )
    return plan, SpeedChoice(MEASURED, reason[:2048], True)


def speed_source_events(previous_plan: Mapping[str, Any], choice: SpeedChoice) -> tuple[Event, ...]:
    """An Event when the source or its reason changed, once a recording is (or was) involved."""
    before = (previous_plan.get("speedSource"), previous_plan.get("speedSourceReason"))
    if before == (choice.source, choice.reason):
        return ()
    if not choice.recorded and before[0] != MEASURED:
        return ()  # nothing recorded, before or now: nothing to announce
    if choice.source == MEASURED:
        return (Event("Normal", "MeasuredSpeed", f"speed source: measured; {choice.reason}"[:1000]),)
    return (Event("Normal", "ModelledSpeed", f"speed source: modelled; {choice.reason}"[:1000]),)
