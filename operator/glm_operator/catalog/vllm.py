"""vLLM releases: the default image, which release serves each GLM architecture, GLM's parsers.

The data is ``catalog/data/vllm.yaml`` (per architecture) plus the optional ``vllm:`` key of a model
in ``models.yaml`` (per-model overrides). ``serving_defaults(architecture, model_id)`` gives what
the renderer and the image check need for one model: the minimum vLLM release, the
``--tool-call-parser``/``--reasoning-parser`` defaults and whether ``--trust-remote-code`` is needed.

``image_version("vllm/vllm-openai:v0.33.0")`` reads a release out of an image reference's tag
(``v0.33.0``, ``0.33.0``, ``v0.33.0-cu130``, ``v0.33.1rc1``); a digest-only reference or a tag that
is not a version (``latest``, ``glm51``) gives None: the caller can only warn then.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

Version = tuple[int, int, int]

#: The vLLM release of the default image (and of the contract test's vLLM; see hack/vllm.sh).
VLLM_VERSION = "0.33.0"
DEFAULT_VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"

_TAG_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?(?:rc|post|dev|a|b)?\d*)*(?:-.*)?$")


def parse_version(text: str) -> Version:
    """``"0.10.1"`` -> ``(0, 10, 1)``; raises ValueError on anything else."""
    parts = text.strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a release number: {text!r}")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return (nums[0], nums[1], nums[2])


def format_version(version: Version) -> str:
    return ".".join(str(n) for n in version)


def image_tag(image: str) -> str | None:
    """The tag of an image reference (``registry:5000/org/name:tag@sha256:...`` -> ``tag``)."""
    ref = image.strip().split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.rsplit(":", 1)[1] or None


def image_version(image: str) -> Version | None:
    """The vLLM release an image's tag names, or None when the tag is absent or not a version."""
    tag = image_tag(image)
    if tag is None:
        return None
    match = _TAG_VERSION.match(tag)
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


@dataclass(frozen=True)
class ServingDefaults:
    """What vLLM needs to serve one model, and since which release."""

    architecture: str
    min_version: Version | None  # None: architecture unknown to the catalog
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    trust_remote_code: bool = False
    source: str = ""


def _data() -> Mapping[str, Any]:
    text = resources.files("glm_operator.catalog").joinpath("data", "vllm.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, Mapping):
        raise ValueError("catalog/data/vllm.yaml must be a mapping")
    return data


@functools.cache
def architecture_table() -> dict[str, ServingDefaults]:
    """Architecture name -> defaults, from ``vllm.yaml``."""
    table: dict[str, ServingDefaults] = {}
    for name, item in (_data().get("architectures") or {}).items():
        table[str(name)] = ServingDefaults(
            architecture=str(name),
            min_version=parse_version(str(item["min_version"])),
            tool_call_parser=item.get("tool_call_parser"),
            reasoning_parser=item.get("reasoning_parser"),
            trust_remote_code=bool(item.get("trust_remote_code", False)),
            source=" ".join(str(item.get("source", "")).split()),
        )
    return table


@functools.cache
def catalog_default_version() -> str:
    """The ``default_version`` written in ``vllm.yaml`` (a unit test keeps it equal to VLLM_VERSION)."""
    return str(_data()["default_version"])


def serving_defaults(architecture: str, overrides: Mapping[str, Any] | None = None) -> ServingDefaults:
    """Defaults for an architecture, with a catalog model's own ``vllm:`` overrides applied."""
    base = architecture_table().get(architecture) or ServingDefaults(
        architecture=architecture, min_version=None
    )
    if not overrides:
        return base
    min_version = base.min_version
    if overrides.get("min_version"):
        min_version = parse_version(str(overrides["min_version"]))
    return ServingDefaults(
        architecture=architecture,
        min_version=min_version,
        tool_call_parser=overrides.get("tool_call_parser", base.tool_call_parser),
        reasoning_parser=overrides.get("reasoning_parser", base.reasoning_parser),
        trust_remote_code=bool(overrides.get("trust_remote_code", base.trust_remote_code)),
        source=base.source,
    )
