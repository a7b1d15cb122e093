"""Generate the GLMDeployment CustomResourceDefinition from the pydantic models.

Pydantic writes JSON Schema (draft 2020-12); Kubernetes wants a *structural* OpenAPI v3.0 schema.
:func:`structural_schema` converts one into the other, and refuses what it cannot express:

- ``$ref`` / ``allOf: [$ref]`` are inlined (the field's own description wins over the class
  docstring);
- ``anyOf: [X, {type: null}]`` becomes ``X`` with ``nullable: true``; ``anyOf: [integer, string]``
  becomes ``x-kubernetes-int-or-string: true``; any other ``anyOf``/``oneOf`` is an error;
- ``title`` and ``additionalProperties: false`` are dropped (structural schemas prune unknown
  fields; strict field validation turns them into errors); ``additionalProperties: true`` (a
  free-form ``dict[str, Any]``) becomes ``x-kubernetes-preserve-unknown-fields: true``;
- ``default: null`` is dropped; numeric ``exclusiveMinimum``/``exclusiveMaximum`` become the
  OpenAPI 3.0 boolean form;
- ``x-kubernetes-*`` keys from ``json_schema_extra`` pass through; the ``x-kubernetes-validations``
  of an optional field's type and of the field itself add up;
- every property must have a description, and every node a type (``kubectl explain`` is the
  manual, and the apiserver refuses non-structural schemas).

Pure: no Kubernetes client, the output is a plain dict / YAML text.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from glm_operator.api import gateway, v1alpha1

GENERATED_HEADER = (
    "# Generated from operator/glm_operator/api/v1alpha1.py by `python -m devtools crd` (hack/generate.sh).\n"
    "# Do not edit by hand: change the pydantic models and regenerate.\n"
)

_DROPPED_KEYS = frozenset({"title", "$defs", "definitions", "$schema"})
_KEY_ORDER = ("description", "type", "format", "nullable")
_VALIDATIONS = "x-kubernetes-validations"


class SchemaConversionError(ValueError):
    """The pydantic schema uses a construct a structural CRD schema cannot express."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (as used under ``openAPIV3Schema``)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions: dict[str, Any] = raw.get("$defs", {})
    return _convert(raw, definitions, path=model.__name__)


def _resolve_ref(ref: str, definitions: dict[str, Any], path: str) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in definitions:
        raise SchemaConversionError(f"{path}: unresolvable $ref {ref!r}")
    resolved: dict[str, Any] = definitions[ref[len(prefix) :]]
    return resolved


def _convert(node: dict[str, Any], definitions: dict[str, Any], path: str) -> dict[str, Any]:
    """One pydantic JSON-schema node as a structural schema node: references inlined, a nullable
    ``anyOf`` flattened, each key converted, then checked and put in order."""
    node = dict(node)

    # Inline references: the referencing node's own keys (description, default, ...) win.
    if "$ref" in node:
        target = _resolve_ref(node.pop("$ref"), definitions, path)
        node = {**target, **node}
    if "allOf" in node:
        parts = node.pop("allOf")
        if len(parts) != 1:
            raise SchemaConversionError(f"{path}: allOf with {len(parts)} members is not supported")
        return _convert({**parts[0], **node}, definitions, path)

    if "oneOf" in node:
        raise SchemaConversionError(f"{path}: oneOf is not supported in a structural schema")
    node, nullable = _flatten_any_of(node, definitions, path)

    out: dict[str, Any] = {}
    for key, value in node.items():
        _convert_key(out, key, value, definitions, path)
    if nullable:
        out["nullable"] = True
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaConversionError(f"{path}: object without properties (type its fields)")
    _check_node(out, path)
    return _ordered(out)


def _flatten_any_of(
    node: dict[str, Any], definitions: dict[str, Any], path: str
) -> tuple[dict[str, Any], bool]:
    """``anyOf`` as a structural schema has it: one type plus ``null`` (nullable), or integer-or-string;
    the node and whether it is nullable."""
    if "anyOf" not in node:
        return node, False
    members = node.pop("anyOf")
    non_null = [member for member in members if member != {"type": "null"}]
    nullable = len(non_null) != len(members)
    types = sorted(str(member.get("type")) for member in non_null)
    if len(non_null) == 1:
        # The type's own rules (glm_operator.api.safe_text.CelRule) and the field's add up.
        rules = [*non_null[0].get(_VALIDATIONS, []), *node.get(_VALIDATIONS, [])]
        node = {**non_null[0], **node}
        if rules:
            node[_VALIDATIONS] = rules
        if "$ref" in node or "allOf" in node or "anyOf" in node:
            node = _convert(node, definitions, path)
    elif types == ["integer", "string"] and all(set(m) == {"type"} for m in non_null):
        node["x-kubernetes-int-or-string"] = True
    else:
        raise SchemaConversionError(f"{path}: anyOf {members!r} is not expressible in a structural schema")
    return node, nullable


def _convert_key(out: dict[str, Any], key: str, value: Any, definitions: dict[str, Any], path: str) -> None:
    """Put one key of a JSON-schema node into ``out`` as a structural schema says it (or drop it)."""
    if key in _DROPPED_KEYS or (key == "default" and value is None):
        return
    if key == "additionalProperties":
        if value is False:
            return
        if value is True or value == {}:
            out["x-kubernetes-preserve-unknown-fields"] = True
            return
        out[key] = _convert(value, definitions, f"{path}.additionalProperties")
    elif key == "properties":
        out[key] = {name: _convert(child, definitions, f"{path}.{name}") for name, child in value.items()}
    elif key == "items":
        out[key] = _convert(value, definitions, f"{path}[]")
    elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
        out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
        out[key] = True
    elif key == "const":
        raise SchemaConversionError(f"{path}: const is not supported; use a one-value enum")
    else:
        out[key] = value


def _check_node(node: dict[str, Any], path: str) -> None:
    if "type" not in node and not (
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaConversionError(f"{path}: no type (structural schemas need one on every node)")
    for name, child in node.get("properties", {}).items():
        if not child.get("description"):
            raise SchemaConversionError(f"{path}.{name}: property has no description")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Stable, readable key order: description/type first, then the rest alphabetically."""
    head = [key for key in _KEY_ORDER if key in node]
    tail = sorted(key for key in node if key not in _KEY_ORDER)
    return {key: node[key] for key in [*head, *tail]}


def _metadata_schema(limit: int = v1alpha1.MAX_GLMDEPLOYMENT_NAME_LENGTH) -> dict[str, Any]:
    """Restrictions on metadata.name (the only ones a CRD may set on metadata)."""
    return {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "maxLength": limit,
                "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$",
            }
        },
    }


def openapi_v3_schema(
    root: type[BaseModel] = v1alpha1.GLMDeployment,
    spec_model: type[BaseModel] = v1alpha1.GLMDeploymentSpec,
    status_model: type[BaseModel] = v1alpha1.GLMDeploymentStatus,
    name_limit: int = v1alpha1.MAX_GLMDEPLOYMENT_NAME_LENGTH,
) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a CRD (default GLMDeployment): apiVersion, kind, metadata, spec, status."""
    root_description = (root.__doc__ or "").strip()
    spec = structural_schema(spec_model)
    status = structural_schema(status_model)
    return {
        "description": root_description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": (
                    "APIVersion defines the versioned schema of this representation of an object. "
                    "Servers should convert recognized schemas to the latest internal value, and may "
                    "reject unrecognized values."
                ),
                "type": "string",
            },
            "kind": {
                "description": (
                    "Kind is a string value representing the REST resource this object represents. "
                    "In CamelCase."
                ),
                "type": "string",
            },
            # A DNS-1035 label of at most name_limit characters (MAX_GLMDEPLOYMENT_NAME_LENGTH): it names
            # the Service and, with a suffix, the Deployments of each GPU variant.
            "metadata": _metadata_schema(name_limit),
            "spec": spec,
            "status": status,
        },
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.id", "description": "Catalog model id."},
    {
        "name": "Quant",
        "type": "string",
        "jsonPath": ".status.quantization",
        "description": "Chosen weight precision per variant.",
    },
    {
        "name": "Context",
        "type": "integer",
        "jsonPath": ".spec.contextLength",
        "description": "Max model length.",
    },
    {"name": "GPU", "type": "string", "jsonPath": ".status.gpu", "description": "GPUs per variant."},
    {
        "name": "TP",
        "type": "string",
        "jsonPath": ".status.tensorParallelSize",
        "description": "Tensor-parallel size per variant.",
    },
    {
        "name": "Ready",
        "type": "integer",
        "jsonPath": ".status.readyReplicas",
        "description": "Ready replicas.",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": ".status.desiredReplicas",
        "description": "Replicas wanted now.",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Lifecycle phase."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Served",
        "type": "string",
        "jsonPath": ".status.model",
        "priority": 1,
        "description": "Served model name.",
    },
]


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) as a plain dict."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": v1alpha1.CRD_NAME},
        "spec": {
            "group": v1alpha1.GROUP,
            "names": {
                "kind": v1alpha1.KIND,
                "listKind": v1alpha1.LIST_KIND,
                "plural": v1alpha1.PLURAL,
                "singular": v1alpha1.SINGULAR,
                "shortNames": list(v1alpha1.SHORT_NAMES),
                "categories": ["all", "glm"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": v1alpha1.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_v3_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


GATEWAY_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "A gateway pod serves.",
    },
    {
        "name": "Keys",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="KeysLoaded")].status',
        "description": "The API-key Secret is mounted and loaded.",
    },
    {
        "name": "Routes",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="RoutesResolved")].status',
        "description": "Some GLMDeployment of the namespace serves a model.",
    },
    {"name": "Models", "type": "integer", "jsonPath": ".status.modelCount", "description": "Served names."},
    {"name": "Pods", "type": "integer", "jsonPath": ".status.readyReplicas", "description": "Ready pods."},
    {
        "name": "Balancing",
        "type": "string",
        "jsonPath": ".spec.loadBalancing",
        "description": "LeastRequests, RoundRobin or PrefixAffinity.",
        "priority": 1,
    },
    {"name": "Service", "type": "string", "jsonPath": ".status.service", "description": "Gateway Service."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_gateway_crd() -> dict[str, Any]:
    """The GLMGateway CustomResourceDefinition: the GLMDeployment one with its own names and schema."""
    crd = build_crd()
    crd["metadata"] = {"name": f"{gateway.GATEWAY_PLURAL}.{v1alpha1.GROUP}"}
    crd["spec"]["names"] = {
        "kind": gateway.GATEWAY_KIND,
        "listKind": gateway.GATEWAY_LIST_KIND,
        "plural": gateway.GATEWAY_PLURAL,
        "singular": gateway.GATEWAY_SINGULAR,
        "shortNames": list(gateway.GATEWAY_SHORT_NAMES),
        "categories": ["all", "glm"],
    }
    version = crd["spec"]["versions"][0]
    version["schema"] = {
        "openAPIV3Schema": openapi_v3_schema(
            gateway.GLMGateway,
            gateway.GLMGatewaySpec,
            gateway.GLMGatewayStatus,
            gateway.MAX_GATEWAY_NAME_LENGTH,
        )
    }
    version["subresources"] = {"status": {}}  # no scale: replicas is the gateway's own setting
    version["additionalPrinterColumns"] = GATEWAY_PRINTER_COLUMNS
    return crd


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def _header(crd: dict[str, Any]) -> str:
    if crd["spec"]["names"]["kind"] == gateway.GATEWAY_KIND:
        return GENERATED_HEADER.replace("v1alpha1.py", "gateway.py").replace(
            "`python -m devtools crd`", "`python -m devtools crd --kind GLMGateway`"
        )
    return GENERATED_HEADER


def crd_yaml(crd: dict[str, Any] | None = None) -> str:
    """The CRD as YAML, with the generated-file header (the content of ``crds/``)."""
    crd = crd or build_crd()
    return _header(crd) + _dump(crd)


def chart_crd_template(crd: dict[str, Any] | None = None) -> str:
    """The CRD as a Helm template: gated by ``crds.install``, kept on uninstall when ``crds.keep``.

    Helm's ``crds/`` directory is installed once and never upgraded, so the chart ships the CRD as
    an ordinary template instead; ``helm.sh/resource-policy: keep`` stops ``helm uninstall`` from
    deleting it (which would delete every GLMDeployment with it).
    """
    crd = crd or build_crd()
    body = _dump({"spec": crd["spec"]})
    return (
        "{{- if .Values.crds.install }}\n"
        + _header(crd)
        + "apiVersion: apiextensions.k8s.io/v1\n"
        + "kind: CustomResourceDefinition\n"
        + "metadata:\n"
        + f"  name: {crd['metadata']['name']}\n"
        + "  labels:\n"
        + '    {{- include "glm-operator.labels" . | nindent 4 }}\n'
        + "  {{- if .Values.crds.keep }}\n"
        + "  annotations:\n"
        + "    helm.sh/resource-policy: keep\n"
        + "  {{- end }}\n"
        + body
        + "{{- end }}\n"
    )
