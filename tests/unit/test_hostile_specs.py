"""Every hostile spec is refused naming the field, or planned to a status condition (no crash)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.desired import compute_desired
from tests.harness.hostile import NOT_PLANNED, REFUSED, HostileCase, hostile_cases, largest_inline_specs

from .test_desired import body, observe

CASES = hostile_cases()
PLAN_REASONS = {"Planned", "InvalidSpec", "NoGPUFits", "NoGPUNodes"}


def test_there_are_at_least_200_cases_with_unique_ids() -> None:
    assert len(CASES) >= 200
    assert len({c.id for c in CASES}) == len(CASES)


def refusal(case: HostileCase) -> ValidationError | None:
    try:
        spec_from_dict(case.spec)
    except ValidationError as exc:
        return exc
    return None


def names_the_field(error: ValidationError, field: str) -> bool:
    """An error is at the field (or inside it), or at its parent with the field's key in the message."""
    for e in error.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if loc.startswith(field) or (field.startswith(loc) and field.rsplit(".", 1)[-1] in e["msg"]):
            return True
    return False


def planned_condition(case: HostileCase) -> tuple[dict[str, Any], Any]:
    desired = compute_desired(observe(body(generation=1, **case.spec)))
    conditions: dict[str, Any] = {c["type"]: c for c in desired.status["conditions"]}
    return conditions["Planned"], desired


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_spec_is_refused_naming_the_field_or_ends_with_a_condition(case: HostileCase) -> None:
    error = refusal(case)
    if case.expect == REFUSED:
        assert error is not None, f"{case.id} was accepted"
        assert names_the_field(error, case.field), (case.field, error.errors())
    if error is not None:
        locations = [".".join(str(p) for p in e["loc"]) for e in error.errors()]
        top = case.field.split(".")[0]
        assert any(loc.split(".")[0] == top for loc in locations), (case.field, locations)
        return
    planned, desired = planned_condition(case)
    assert planned["reason"] in PLAN_REASONS, planned
    assert desired.status["observedGeneration"] == 1
    if planned["status"] == "False":
        assert planned["message"] and desired.objects == ()
        if planned["reason"] == "InvalidSpec":
            assert planned["message"].startswith("spec"), planned["message"]  # names the field
    if case.expect == NOT_PLANNED:
        assert planned["status"] == "False", planned
        assert case.field in planned["message"] and "fix: " in planned["message"], planned["message"]


def test_no_spec_that_cannot_work_is_planned() -> None:
    """The hostile-input review's finding (15 such specs accepted and planned) stays at 0."""
    must_fail = [c for c in CASES if c.expect]
    assert len(must_fail) >= 30
    planned = [c.id for c in must_fail if refusal(c) is None and planned_condition(c)[0]["status"] != "False"]
    assert planned == []


def test_planner_crashes_on_odd_quantization_configs_become_invalid_spec_naming_the_field() -> None:
    odd = [c for c in CASES if c.id.startswith("model.config.quantization_config") and refusal(c) is None]
    assert odd, "some odd quantization_config cases pass the schema (free-form parts)"
    for case in odd:
        desired = compute_desired(observe(body(generation=1, **case.spec)))
        planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
        if planned["status"] == "False":
            assert planned["reason"] == "InvalidSpec"
            assert "quantization_config" in planned["message"], (case.id, planned["message"])


def test_inline_configs_are_bounded() -> None:
    for layers in (1_000_000, 257):
        case = {"model": {"id": "x/y", "config": {"num_hidden_layers": layers}}}
        with pytest.raises(ValidationError, match="num_hidden_layers"):
            spec_from_dict(case)


def test_the_largest_inline_configs_validation_allows_are_planned_to_a_condition() -> None:
    for case in largest_inline_specs():
        assert refusal(case) is None, case.id  # at the bounds, not past them
        desired = compute_desired(observe(body(generation=1, **case.spec), lws_available=True))
        planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
        assert planned["reason"] in PLAN_REASONS - {"InvalidSpec"}, (case.id, planned)
