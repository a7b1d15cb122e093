"""Names, labels, selectors and the spec hash of every object the operator creates.

This is the only module that spells a label key or builds a child name, so the controller,
the templates and the tests agree on them (the API group and the GPU-type label, which the planner
reads back from pods, come from :mod:`glm_operator.api.v1alpha1`).

Rules (after the prometheus-community charts' ``_helpers.tpl``):
- child names are DNS-1035 labels (lowercase alphanumerics and '-', starting with a letter),
  at most 63 characters; a longer name keeps a readable prefix and ends with a hash of the full
  name, so two long names never collide after truncation;
- label values are at most 63 characters, truncated the same way;
- selector labels are stable: no hash, no version, nothing that changes when the spec changes
  (a Deployment's selector is immutable);
- the spec-hash label goes on pod templates only, so a spec change rolls the pods and the
  controller can count up-to-date pods.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from glm_operator.api.v1alpha1 import GROUP
from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT as LABEL_GPU_PRODUCT

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_DEPLOYMENT = f"{GROUP}/deployment"
LABEL_VARIANT = f"{GROUP}/variant"
LABEL_SPEC_HASH = f"{GROUP}/spec-hash"

ANNOTATION_PLAN = f"{GROUP}/plan"

APP_NAME = "vllm"
PART_OF = "glm-operator"
MANAGED_BY = "glm-operator"
COMPONENT_INFERENCE = "inference"
# LeaderWorkerSet workers run headless vLLM (pipeline stages > 0) and serve no HTTP: a different
# component keeps them out of the Service and out of the scale subresource's selector.
COMPONENT_WORKER = "worker"
# The Gateway API Inference Extension's endpoint picker of a GLMDeployment's InferencePool
# (render.inference_pool): a child, not a vLLM pod.
COMPONENT_ENDPOINT_PICKER = "endpoint-picker"
# The ConfigMap of a recorded load test (glm-operator loadtest --record): written by the CLI, owned
# by the GLMDeployment, read by the reconciler.
COMPONENT_LOAD_TEST = "load-test"

MAX_DNS_LABEL_LENGTH = 63  # a child object's name (DNS-1035 label)
MAX_LABEL_VALUE_LENGTH = 63
# A LeaderWorkerSet makes one StatefulSet per group named "<lws>-<group index>"; the StatefulSet
# controller labels its pods with controller-revision-hash "<statefulset>-<hash of ~10 chars>",
# a label value limited to 63 characters. 45 leaves room for both suffixes.
MAX_LEADERWORKERSET_NAME_LENGTH = 45

_HASH_SUFFIX_LENGTH = 8
_INVALID_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def short_hash(text: str, length: int = _HASH_SUFFIX_LENGTH) -> str:
    """First ``length`` hex digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def truncate_name(name: str, max_length: int = MAX_DNS_LABEL_LENGTH) -> str:
    """``name`` if it fits, else a prefix + '-' + hash of the whole name, at most ``max_length``."""
    if len(name) <= max_length:
        return name
    keep = max_length - _HASH_SUFFIX_LENGTH - 1
    prefix = name[:keep].rstrip("-._")
    return f"{prefix}-{short_hash(name)}"


def dns_label(name: str, max_length: int = MAX_DNS_LABEL_LENGTH) -> str:
    """A DNS-1035 label made from ``name``: lowercase, invalid runs turned into '-', starts with a letter.

    Custom resource names are DNS-1123 subdomains (dots allowed, up to 253 characters, may start
    with a digit); Services and LeaderWorkerSets need DNS-1035 labels.
    """
    label = _INVALID_NAME_CHARS.sub("-", name.lower()).strip("-")
    if not label:
        raise ValueError(f"cannot make a DNS label from {name!r}")
    if not label[0].isalpha():
        label = f"x-{label}"
    if label != name:
        # The cleaned form lost information: suffix a hash of the original to keep names unique.
        return truncate_name(f"{label}-{short_hash(name)}", max_length)
    return truncate_name(label, max_length)


def label_value(value: str) -> str:
    """A valid label value for ``value`` (at most 63 characters, alphanumeric at both ends)."""
    cleaned = _INVALID_LABEL_CHARS.sub("-", value).strip("-._")
    if cleaned != value:
        cleaned = f"{cleaned}-{short_hash(value)}" if cleaned else short_hash(value)
    return truncate_name(cleaned, MAX_LABEL_VALUE_LENGTH)


def workload_name(deployment_name: str, variant_name: str, *, multi_node: bool = False) -> str:
    """Name of the Deployment (or LeaderWorkerSet when ``multi_node``) serving one variant."""
    limit = MAX_LEADERWORKERSET_NAME_LENGTH if multi_node else MAX_DNS_LABEL_LENGTH
    return dns_label(f"{deployment_name}-{variant_name}", limit)


def service_name(deployment_name: str) -> str:
    """Name of the one Service of a GLMDeployment (over all its variants)."""
    return dns_label(deployment_name)


def service_selector(deployment_name: str) -> dict[str, str]:
    """Labels that select every serving pod of a GLMDeployment, all variants included.

    Also the selector of the scale subresource (``status.selector``).
    """
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: label_value(deployment_name),
        LABEL_COMPONENT: COMPONENT_INFERENCE,
    }


def selector_labels(deployment_name: str, variant_name: str) -> dict[str, str]:
    """Immutable selector of one variant's Deployment: the Service selector plus the variant."""
    return {**service_selector(deployment_name), LABEL_VARIANT: label_value(variant_name)}


def common_labels(
    deployment_name: str,
    variant_name: str,
    gpu_product: str,
    *,
    component: str = COMPONENT_INFERENCE,
) -> dict[str, str]:
    """Labels on every object and pod of one variant (Kubernetes recommended labels + ours)."""
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: label_value(deployment_name),
        LABEL_COMPONENT: component,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: label_value(deployment_name),
        LABEL_VARIANT: label_value(variant_name),
        LABEL_GPU_PRODUCT: label_value(gpu_product),
    }


def service_labels(deployment_name: str) -> dict[str, str]:
    """Labels of the Service (no variant: it spans all of them)."""
    return {
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: label_value(deployment_name),
        LABEL_COMPONENT: COMPONENT_INFERENCE,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: label_value(deployment_name),
    }


def load_test_name(deployment_name: str) -> str:
    """Name of the ConfigMap that holds a GLMDeployment's recorded load test."""
    return dns_label(f"{deployment_name}-loadtest")


def load_test_labels(deployment_name: str) -> dict[str, str]:
    """Labels of that ConfigMap: the operator's child labels (so its child watch sees it), no variant."""
    return {
        LABEL_INSTANCE: label_value(deployment_name),
        LABEL_COMPONENT: COMPONENT_LOAD_TEST,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_DEPLOYMENT: label_value(deployment_name),
    }


def selector_string(labels: Mapping[str, str]) -> str:
    """``k=v,k=v`` form of an equality selector (``status.selector`` of the scale subresource)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def compute_spec_hash(data: object, default: Callable[[Any], Any] | None = None) -> str:
    """Stable 10-hex-digit hash of JSON-serialisable ``data`` (key order does not matter).

    ``default`` is json.dumps's: what an object JSON cannot encode becomes."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:10]
