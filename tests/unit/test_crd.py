"""The CRD generator: structural, described, and identical to the committed files."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from devtools import crd
from devtools.__main__ import main

from glm_operator.api import v1alpha1
from glm_operator.api.kube_validation import cel_string
from glm_operator.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_CRD = ROOT / "crds" / "glmdeployments.inference.glm.dev.yaml"
CHART_CRD = ROOT / "charts" / "glm-operator" / "templates" / "crd.yaml"
REGENERATE = "run hack/generate.sh and commit the result"

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "const"}


def schema() -> dict[str, Any]:
    result: dict[str, Any] = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (``.spec.gpu``, ``.spec.serving.env[]``)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_no_json_schema_leftovers() -> None:
    for path, node in walk(schema()):
        assert not FORBIDDEN_KEYS & set(node), f"{path}: {FORBIDDEN_KEYS & set(node)}"
        assert node.get("additionalProperties") is not False, path
        assert "default" not in node or node["default"] is not None, path
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert key not in node or isinstance(node[key], bool), path


def test_structural_every_node_has_a_type() -> None:
    for path, node in walk(schema()):
        if node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"):
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path


def test_every_property_has_a_description() -> None:
    for path, node in walk(schema()):
        if path == "" or path.startswith(".metadata"):
            continue
        if path.endswith(("[]", "{}")):
            continue
        assert node.get("description"), f"{path} has no description"


def test_only_model_config_is_free_form() -> None:
    free_form = [path for path, node in walk(schema()) if node.get("x-kubernetes-preserve-unknown-fields")]
    assert free_form[0] == ".spec.model.config"
    assert all(path.startswith(".spec.model.config.") for path in free_form[1:])  # its typed parts


def test_optional_fields_are_nullable_and_required_fields_listed() -> None:
    nodes = dict(walk(schema()))
    assert nodes[".spec.model.id"]["nullable"] is True
    assert nodes[".spec.autoscaling"]["nullable"] is True
    assert "nullable" not in nodes[".spec.contextLength"]
    assert nodes[".spec"]["required"] == ["model"]
    assert nodes[".spec.serving.apiKeySecretRef"]["required"] == ["name"]
    assert nodes[""]["required"] == ["spec"]


def test_bounds_enums_patterns_defaults() -> None:
    nodes = dict(walk(schema()))
    util = nodes[".spec.gpu.memoryUtilization"]
    assert (util["minimum"], util["maximum"]) == (0.5, 0.95) and "default" not in util  # the release's
    assert nodes[".spec.contextLength"]["minimum"] == 256
    assert nodes[".spec.quantization"]["enum"] == ["auto", "bf16", "fp16", "fp8", "int8", "int4"]
    assert nodes[".spec.kvCacheDtype"]["enum"] == ["auto", "fp8"]
    assert nodes[".status.phase"]["enum"] == list(v1alpha1.PHASES)
    assert nodes[".spec.gpu"]["default"] == {}
    assert nodes[".spec.serving"]["default"] == {}
    # Formats with a message saying the fix are CEL rules (a failed OpenAPI pattern shows only the regex).
    source_rules = [r["rule"] for r in nodes[".spec.model.source"]["x-kubernetes-validations"]]
    assert f"self.matches({cel_string(v1alpha1.MODEL_SOURCE_PATTERN)})" in source_rules
    source = re.compile(v1alpha1.MODEL_SOURCE_PATTERN)
    assert source.match("hf://zai-org/GLM-4.5-Air")
    assert source.match("pvc://models/glm")
    assert source.match("s3://bucket/prefix")
    assert not source.match("https://huggingface.co/zai-org/GLM-4.5-Air")
    assert nodes[".spec.serving.resources.limits{}"]["x-kubernetes-int-or-string"] is True
    conditions = nodes[".status.conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_cel_rules() -> None:
    nodes = dict(walk(schema()))

    def rules(path: str) -> list[str]:
        return [rule["rule"] for rule in nodes[path].get("x-kubernetes-validations", [])]

    assert rules(".spec.autoscaling") == [
        "self.minReplicas <= self.maxReplicas",
        "!has(self.idleSeconds) || self.minReplicas == 0",
    ]
    assert rules(".spec.gpu.tensorParallelSize") == ["self in [0, 1, 2, 4, 8, 16, 32]"]
    assert rules(".spec.model") == ["has(self.id) || has(self.config)"]
    assert any("maxNumSeqs" in rule for rule in rules(".spec"))
    assert nodes[".metadata.name"]["maxLength"] == v1alpha1.MAX_GLMDEPLOYMENT_NAME_LENGTH
    # Tensor-parallel list in CEL and in Python are the same.
    assert str(list(v1alpha1.TENSOR_PARALLEL_SIZES)) in rules(".spec.gpu.tensorParallelSize")[0]


def test_names_subresources_printer_columns() -> None:
    spec = crd.build_crd()["spec"]
    assert crd.build_crd()["metadata"]["name"] == "glmdeployments.inference.glm.dev"
    assert spec["group"] == "inference.glm.dev"
    assert spec["names"]["shortNames"] == ["glmd"]
    assert spec["scope"] == "Namespaced"
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    nodes = dict(walk(schema()))
    for name in ("Model", "Quant", "Context", "GPU", "TP", "Ready", "Desired", "Phase", "Age"):
        assert name in columns
    for json_path in columns.values():
        if not json_path.startswith(".metadata"):
            assert json_path in nodes, json_path


def test_unsupported_constructs_are_refused() -> None:
    from pydantic import BaseModel, Field

    class Union(BaseModel):
        value: int | list[int] = Field(0, description="x")

    class Undescribed(BaseModel):
        value: int = 0

    with pytest.raises(crd.SchemaConversionError, match="anyOf"):
        crd.structural_schema(Union)
    with pytest.raises(crd.SchemaConversionError, match="description"):
        crd.structural_schema(Undescribed)


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED_CRD.exists(), f"{COMMITTED_CRD} is missing: {REGENERATE}"
    committed = yaml.safe_load(COMMITTED_CRD.read_text())
    assert committed == crd.build_crd(), f"{COMMITTED_CRD} drifted from the models: {REGENERATE}"
    assert COMMITTED_CRD.read_text() == crd.crd_yaml(), f"{COMMITTED_CRD} is not byte-identical: {REGENERATE}"


def test_chart_crd_matches_the_models() -> None:
    assert CHART_CRD.exists(), f"{CHART_CRD} is missing: {REGENERATE}"
    assert CHART_CRD.read_text() == crd.chart_crd_template(), f"{CHART_CRD} drifted: {REGENERATE}"
    # Without the Helm directives it is the same CRD.
    plain = "\n".join(line for line in CHART_CRD.read_text().splitlines() if "{{" not in line)
    parsed = yaml.safe_load(plain.replace("  labels:\n  annotations:", "  annotations:"))
    assert parsed["spec"] == crd.build_crd()["spec"]
    assert parsed["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_devtools_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == crd.build_crd()
    assert main(["crd", "-o", "json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == crd.build_crd()
    assert main(["crd", "--kind", "GLMGateway", "-o", "helm"]) == 0
    assert capsys.readouterr().out == crd.chart_crd_template(crd.build_gateway_crd())


def test_the_operator_cli_has_no_generator_commands() -> None:
    """The generators are developer tools (``python -m devtools``), not the shipped operator's."""
    subcommands = next(
        action.choices for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
    )
    assert set(subcommands) == {"estimate", "plan", "run", "gateway", "loadtest"}


def test_the_crds_stay_small_enough_for_a_client_side_apply() -> None:
    """``kubectl apply`` without --server-side keeps the whole object in an annotation of at most
    256 KiB. The extraArgs rules carry vLLM's option table (a CEL map in each of four expressions),
    which makes the GLMDeployment CRD the largest: keep a margin."""
    for definition in (crd.build_crd(), crd.build_gateway_crd()):
        assert len(json.dumps(definition, separators=(",", ":"))) < 200 * 1024
