"""What the apiserver checks on Pods, restated for fields copied from the spec into the pod template.

``serving.env``, ``resources``, ``tolerations``, ``nodeSelector`` and ``image`` end up in the child
Deployment. If the GLMDeployment accepted a value the Pod validation refuses (``cpu: lots``, a
``fieldRef`` to a field the downward API does not offer, ``tolerationSeconds`` with ``NoSchedule``,
a 100 KB label value), the operator's apply would fail with 422 on every reconcile. So the same
rules are checked when the GLMDeployment is applied: as OpenAPI patterns and CEL rules in the CRD
(the regular expressions below are valid in both Go's RE2 and Python's ``re``), and as pydantic
validators (offline commands and the operator itself). The rules follow
``k8s.io/kubernetes/pkg/apis/core/validation`` (quantities, qualified names, label values, the
downward API's field paths, toleration rules).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(values: Iterable[str]) -> str:
    """``values`` as a CEL list literal of strings."""
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


# resource.Quantity's syntax, non-negative (requests and limits must be >= 0).
_DECIMAL = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_PATTERN = rf"^\+?{_DECIMAL}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_DECIMAL}))?$"
MAX_QUANTITY_LENGTH = 64
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
# A label key / taint key / resource name: an optional DNS-subdomain prefix and a name of <= 63.
QUALIFIED_NAME_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME}$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
MAX_LABEL_VALUE_LENGTH = 63
MAX_QUALIFIED_NAME_LENGTH = 317  # 253 (prefix) + "/" + 63 (name)
# Resource names the user may set: cpu, memory, ephemeral-storage. GPUs (nvidia.com/*) come from the
# plan (a value written here is replaced); hugepages and other extended resources carry extra Pod
# rules (whole numbers, requests == limits, cpu or memory alongside) and are not offered.
RESOURCE_NAME_PATTERN = r"^(cpu|memory|ephemeral-storage|nvidia\.com/[-A-Za-z0-9_.]+)$"
# Keys of Secrets and ConfigMaps.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# The downward API's fields for container env (validEnvDownwardAPIFieldPathExpressions).
ENV_FIELD_PATH_PATTERN = (
    rf"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['({_DNS_SUBDOMAIN}/)?{_NAME}'\]"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)
ENV_RESOURCE_PATTERN = r"^(limits|requests)\.(cpu|memory|ephemeral-storage)$"
# A container image reference, distribution/reference's grammar: [host[:port]/]path[:tag][@digest].
# The kubelet refuses anything else (InvalidImageName), so the pods could never start.
_IMAGE_HOST_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
_IMAGE_HOST = rf"({_IMAGE_HOST_LABEL}(\.{_IMAGE_HOST_LABEL})*|\[[0-9A-Fa-f:]+\])(:[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (
    rf"^({_IMAGE_HOST}/)?{_IMAGE_PATH}(/{_IMAGE_PATH})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
IMAGE_MESSAGE = (
    "must be a container image reference [registry[:port]/]repository[:tag][@sha256:digest]: the "
    "repository in lowercase letters and digits ('.', '_' or '-' between them), a tag of at most 128 "
    "letters, digits, '_', '.' or '-', a digest of 'sha256:' and 64 lowercase hex digits, no whitespace; "
    "for example docker.io/vllm/vllm-openai:v0.11.0"
)
# A ".." segment of a path (path traversal): refused in subPath and in model sources.
PARENT_SEGMENT_PATTERN = r"(^|/)\.\.(/|$)"
SUB_PATH_NO_PARENT_CEL = f"!self.matches({cel_string(PARENT_SEGMENT_PATTERN)})"

_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_value(value: int | str) -> Decimal:
    """The number a Kubernetes quantity stands for; ValueError naming the value if it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative; requests and limits must be >= 0")
        return Decimal(value)
    if len(value) > MAX_QUANTITY_LENGTH or not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (for example 500m, 16, 64Gi, 1.5)")
    match = re.match(r"^\+?([0-9.]+)(.*)$", value)
    assert match is not None
    number, suffix = match.groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * Decimal(_SUFFIXES[suffix])
    except (InvalidOperation, KeyError):
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def check_image(value: str) -> str:
    """``value`` if it is an image reference the kubelet can pull, else ValueError saying the format."""
    if not re.fullmatch(IMAGE_PATTERN, value):
        raise ValueError(f"image {value[:80]!r} {IMAGE_MESSAGE}")
    return value


def check_qualified_name(key: str, what: str) -> str:
    if len(key) > MAX_QUALIFIED_NAME_LENGTH or not re.fullmatch(QUALIFIED_NAME_PATTERN, key):
        raise ValueError(
            f"{what} {key[:80]!r} is not a valid label key: an optional DNS prefix and '/', then at most "
            "63 characters of letters, digits, '-', '_' or '.', starting and ending alphanumeric"
        )
    prefix, _, name = key.rpartition("/")
    if len(name) > 63 or len(prefix) > 253:
        raise ValueError(f"{what} {key[:80]!r} is too long (prefix <= 253, name <= 63 characters)")
    return key
