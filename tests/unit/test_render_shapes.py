"""Rendering through shapes (render.objects._Shapes) gives exactly what parsing the rendered text
gives, and falls back to the text wherever it could differ."""

from __future__ import annotations

import json
from typing import Any

import jinja2
import pytest

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.desired import compute_desired
from glm_operator.render import objects
from tests.harness.hostile import hostile_cases, largest_inline_specs

from .test_desired import body, observe


def env() -> jinja2.Environment:
    e = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    e.filters["q"] = objects._to_json
    return e


def both(template: str, **values: Any) -> tuple[Any, Any]:
    """(through a fresh _Shapes, or None when it falls back; the text parsed as YAML)."""
    t = env().from_string(template)
    encoded = objects._Shapes(size=8).render(t, values)
    try:
        shaped = None if encoded is None else json.loads(encoded)
    except ValueError:
        shaped = None
    return shaped, objects._PARSED.load(t.render(values))


def test_plain_values_through_a_shape_equal_the_parsed_text() -> None:
    values = {
        "name": "yes",  # YAML would read an unquoted yes as a bool
        "labels": {"a": "1.0", "b": "a: b", "c": "\u2028\x85 line", "d": "naïve"},
        "args": ("--x", "--y=1", "null"),
        "env": [{"name": "A", "value": ""}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
        "n": 3,
        "flag": True,
        "none": None,
    }
    template = (
        "metadata:\n  name: {{ name | q }}\n  labels: {{ labels | q }}\nspec:\n"
        "  args: {{ args | q }}\n  env: {{ env | q }}\n  n: {{ n | q }}\n  flag: {{ flag | q }}\n"
        "  none: {{ none | q }}\n  replicas: {{ n }}\n"
    )
    shaped, parsed = both(template, **values)
    assert shaped is not None and shaped == parsed
    assert shaped["spec"]["replicas"] == 3 and shaped["metadata"]["name"] == "yes"


@pytest.mark.parametrize(
    "template,values",
    [
        ("a: {{ v | q }}\n", {"v": 1e-05}),  # a float: YAML reads JSON's 1e-05 as a string
        ("a: {{ v | q }}\n", {"v": {"k": [0.5]}}),
        ("a: {{ v | q }}\n", {"v": "x\ue000y"}),  # the token mark inside a value
        ("a: {{ v | q }}\n", {"v": {1: "int key"}}),
        ("a: x{{ v | q }}\n", {"v": "inside a longer scalar"}),
        ("{{ v | q }}: 1\n", {"v": 5}),  # a token as a key, its value not a string
    ],
)
def test_values_a_shape_could_get_wrong_fall_back_to_the_text(template: str, values: dict[str, Any]) -> None:
    shaped, _ = both(template, **values)
    assert shaped is None


def test_glmdeployments_of_one_kind_of_spec_share_one_shape_per_template() -> None:
    shapes = objects._Shapes(size=64)
    template = objects._template("service.yaml.j2")
    for i in range(5):
        values = {
            "name": f"svc-{i}",
            "namespace": "llm",
            "labels": {"app": f"g-{i}"},
            "owner_references": [{"apiVersion": "v1", "kind": "X", "name": f"g-{i}", "uid": str(i)}],
            "selector": {"app": f"g-{i}"},
            "port": 8000,
        }
        got = shapes.render(template, values)
        assert got is not None and json.loads(got) == objects._PARSED.load(template.render(values))
    assert len(shapes._items) == 1


def _objects(spec: dict[str, Any]) -> tuple[dict[str, Any], ...] | None:
    try:
        spec_from_dict(spec)
    except Exception:
        return None
    return compute_desired(observe(body(generation=1, **spec))).objects


def test_every_hostile_and_largest_spec_renders_the_same_through_shapes_and_through_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = [c.spec for c in [*hostile_cases(), *largest_inline_specs()]]
    # fresh caches: every text is new, as in a burst of new GLMDeployments
    monkeypatch.setattr(objects, "_PARSED", objects._ParsedTexts(size=4096))
    monkeypatch.setattr(objects, "_SHAPES", objects._Shapes(size=256))
    shaped = [_objects(s) for s in specs]
    assert any(v is not None for v in objects._SHAPES._items.values()), "no shape was used"
    monkeypatch.setattr(objects, "_PARSED", objects._ParsedTexts(size=4096))
    monkeypatch.setattr(objects._SHAPES, "render", lambda template, values: None)
    parsed = [_objects(s) for s in specs]
    rendered = [o for o in shaped if o]
    assert len(rendered) >= 40, "many cases render objects"
    assert shaped == parsed
