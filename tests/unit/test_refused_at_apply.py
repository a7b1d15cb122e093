"""The table of specs refused at apply (tests.harness.hostile.REFUSED_AT_APPLY), on the models.

Each row is refused by pydantic at the field the apiserver must name (for a rule over the whole of
``serving.extraArgs``, the message names the entry's index), so ``glm-operator plan`` and the
operator say what the apiserver says. tests/integration/test_refused_at_apply.py applies the same
rows to a real apiserver.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from pydantic import ValidationError

from glm_operator.api import spec_from_dict
from tests.harness.hostile import REFUSED_AT_APPLY, RefusedAtApply


def pydantic_location(field: str) -> str:
    """``spec.serving.extraArgs[0]`` as pydantic's dotted location: ``serving.extraArgs.0``."""
    return re.sub(r"\[(\d+)\]", r".\1", field.removeprefix("spec."))


def test_the_table_has_the_issues_four_and_twenty_more_in_every_family() -> None:
    families = Counter(row.family for row in REFUSED_AT_APPLY)
    assert set(families) == {"flags", "argv", "unicode", "paths", "sizes"}
    assert min(families.values()) >= 4 and len(REFUSED_AT_APPLY) >= 24
    assert len({row.id for row in REFUSED_AT_APPLY}) == len(REFUSED_AT_APPLY)


@pytest.mark.parametrize("row", REFUSED_AT_APPLY, ids=[f"{r.family}-{r.id}" for r in REFUSED_AT_APPLY])
def test_every_row_is_refused_by_the_models_at_the_field(row: RefusedAtApply) -> None:
    with pytest.raises(ValidationError) as info:
        spec_from_dict(row.spec)
    found = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in info.value.errors()]
    at_field = [message for location, message in found if location == pydantic_location(row.field)]
    assert at_field, (pydantic_location(row.field), found)
    if row.entry is not None:
        assert any(f"extraArgs[{row.entry}]" in message for message in at_field), at_field
