"""Every string of the spec that reaches a process carries the one rule against hidden characters.

The rule (glm_operator.api.safe_text) comes with the type, SafeText: a field typed plainly ``str``
would carry none. This walks the generated CRDs: every string a user writes is an enum, a date, or
has a pattern that admits only listed ASCII characters, or carries the shared CEL rule (or its
pattern form, where the CEL budget cannot afford it), or is one of the few that reach no command
line, environment variable, label or path (listed with why).
"""

from __future__ import annotations

import json
import re
import re._parser as sre
from collections.abc import Iterator
from typing import Annotated, Any, get_args, get_origin

import pytest
from devtools import crd
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.api.safe_text import NO_UNSAFE_CHARACTER_CEL, VISIBLE_WORD_PATTERN
from glm_operator.api.v1alpha1 import GLMDeploymentSpec

from .test_crd import walk

#: Strings that reach nothing the rule guards, and why.
REACH_NOTHING = {
    "spec.model.config": "the inline config.json is read by the planner only",
    "spec.service.annotations": "GLMGateway Service annotations: metadata, never a process's input",
}


def admits_only_printable_ascii(pattern: str) -> bool:
    """True when every character ``pattern`` can match is listed and printable ASCII (no negated
    class, no ``.``, no class escape such as ``\\S``): it cannot match a hidden character."""

    def closed(items: Any) -> bool:
        for op, arg in items:
            name = str(op)
            if name in ("NOT_LITERAL", "ANY", "CATEGORY", "NEGATE"):
                return False
            if name == "LITERAL" and not 0x20 <= arg <= 0x7E:
                return False
            if name == "RANGE" and not (arg[0] >= 0x20 and arg[1] <= 0x7E):
                return False
            if name == "IN" and not closed(arg):
                return False
            if name in ("MAX_REPEAT", "MIN_REPEAT") and not closed(arg[2]):
                return False
            if name == "SUBPATTERN" and not closed(arg[3]):
                return False
            if name == "BRANCH" and not all(closed(branch) for branch in arg[1]):
                return False
        return True

    return closed(sre.parse(pattern))


def rules_of(node: dict[str, Any]) -> list[str]:
    return [v["rule"] for v in node.get("x-kubernetes-validations", [])]


def matched_patterns(node: dict[str, Any]) -> list[str]:
    """The node's pattern and the regular expressions of its ``self.matches('...')`` rules."""
    found = [node["pattern"]] if "pattern" in node else []
    for validation in node.get("x-kubernetes-validations", []):
        literal = re.fullmatch(r"self\.matches\('((?:[^'\\]|\\.)*)'\)", validation["rule"])
        if literal:
            found.append(re.sub(r"\\(.)", r"\1", literal.group(1)))
    return found


def strings(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The string nodes under ``node`` but those of REACH_NOTHING."""
    for where, child in walk(node, path):
        if any(re.match(re.escape(p) + r"($|[.\[{])", where) for p in REACH_NOTHING):
            continue
        if child.get("type") == "string" or child.get("x-kubernetes-int-or-string"):
            yield where, child


def spec_schema(definition: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"])


SPEC_STRINGS = [
    *strings(spec_schema(crd.build_crd()), "spec"),
    *(("GLMGateway " + p, n) for p, n in strings(spec_schema(crd.build_gateway_crd()), "spec")),
]


@pytest.mark.parametrize("path,node", SPEC_STRINGS, ids=[p for p, _ in SPEC_STRINGS])
def test_every_string_a_user_writes_is_closed_or_carries_the_shared_rule(
    path: str, node: dict[str, Any]
) -> None:
    rules = rules_of(node)
    patterns = matched_patterns(node)
    closed = (
        "enum" in node
        or "format" in node
        or VISIBLE_WORD_PATTERN in patterns
        or any(map(admits_only_printable_ascii, patterns))
    )
    assert closed or NO_UNSAFE_CHARACTER_CEL in rules, f"{path}: {node}"


def test_the_walk_sees_the_fields_the_rule_was_written_for() -> None:
    carrying = {p for p, n in SPEC_STRINGS if NO_UNSAFE_CHARACTER_CEL in rules_of(n)}
    assert {
        "spec.serving.extraArgs[]",
        "spec.serving.env[].value",
        "spec.model.source",
        "spec.gpu.products[]",
        "spec.serving.modelCache.mountPath",
        "spec.serving.modelCache.subPath",
        "GLMGateway spec.apiKeys.key",
    } <= carrying
    as_pattern = {p for p, n in SPEC_STRINGS if n.get("pattern") == VISIBLE_WORD_PATTERN}
    assert as_pattern == {"GLMGateway spec.clients[].models[]"}


def _patterns_in(annotation: Any, metadata: list[Any]) -> set[str]:
    """Patterns a field declares: in its metadata and in Annotated types inside its annotation."""
    found = {m.pattern for m in metadata if isinstance(getattr(m, "pattern", None), str)}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found |= _patterns_in(None, list(item.metadata))
    if get_origin(annotation) is Annotated:
        found |= _patterns_in(get_args(annotation)[0], list(get_args(annotation)[1:]))
    else:
        for arg in get_args(annotation):
            found |= _patterns_in(arg, [])
    return found


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                item = stack.pop()
                if isinstance(item, type) and issubclass(item, BaseModel):
                    todo.append(item)
                stack.extend(get_args(item))


@pytest.mark.parametrize("root", [GLMDeploymentSpec, GLMGatewaySpec])
def test_every_declared_pattern_reaches_the_crd(root: type[BaseModel]) -> None:
    """pydantic leaves a field's pattern out of the JSON schema when the type carries a validator
    (SafeText does): such a field must state its rule as a CelRule, or the CRD would not check it."""
    lost = []
    for model in _models(root):
        schema = json.dumps(model.model_json_schema(by_alias=True))
        for name, field in model.model_fields.items():
            for pattern in _patterns_in(field.annotation, list(field.metadata)):
                if json.dumps(pattern)[1:-1] not in schema:
                    lost.append(f"{model.__name__}.{name}: {pattern}")
    assert not lost, lost
