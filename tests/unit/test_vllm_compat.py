"""vLLM release compatibility: default image, per-architecture minimum, parser defaults, image check."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.catalog.models import load_models, resolve_model
from glm_operator.catalog.vllm import (
    DEFAULT_VLLM_IMAGE,
    VLLM_VERSION,
    architecture_table,
    catalog_default_version,
    image_version,
    parse_version,
)
from glm_operator.controller.config import OperatorConfig
from glm_operator.desired import Observed, compute_desired
from glm_operator.planning.placement.compatibility import check_image
from glm_operator.render.context import resolve_model_location
from tests.harness.scenarios import observed

ROOT = Path(__file__).resolve().parents[2]
NODES = yaml.safe_load((ROOT / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))


def test_one_vllm_version_everywhere() -> None:
    assert f"vllm/vllm-openai:v{VLLM_VERSION}" == DEFAULT_VLLM_IMAGE
    assert OperatorConfig().default_image == DEFAULT_VLLM_IMAGE
    assert catalog_default_version() == VLLM_VERSION
    script = (ROOT / "hack" / "vllm.sh").read_text()
    assert re.search(rf"^VLLM_VERSION={re.escape(VLLM_VERSION)}$", script, re.M), (
        "hack/vllm.sh pins another vLLM"
    )
    values = yaml.safe_load((ROOT / "charts" / "glm-operator" / "values.yaml").read_text())
    assert values["vllm"]["image"] == DEFAULT_VLLM_IMAGE


def test_every_catalog_model_has_a_minimum_vllm_release_and_the_default_image_serves_it() -> None:
    default = parse_version(VLLM_VERSION)
    for entry in load_models():
        defaults = resolve_model(entry.id).serving_defaults
        assert defaults.min_version is not None, f"{entry.id}: {defaults.architecture} not in vllm.yaml"
        assert defaults.min_version <= default, entry.id
        assert defaults.source, entry.id
    for arch in architecture_table().values():
        assert arch.source and arch.min_version is not None


@pytest.mark.parametrize(
    "image,version",
    [
        ("vllm/vllm-openai:v0.33.0", (0, 33, 0)),
        ("vllm/vllm-openai:0.10.1", (0, 10, 1)),
        ("docker.io/vllm/vllm-openai:v0.23.0-cu129", (0, 23, 0)),
        ("registry.local:5000/vllm/vllm-openai:v0.14.1rc1", (0, 14, 1)),
        ("vllm/vllm-openai:v0.19", (0, 19, 0)),
        ("vllm/vllm-openai:v0.33.0@sha256:" + "a" * 64, (0, 33, 0)),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai:glm51", None),
        ("vllm/vllm-openai", None),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None),
        ("registry.local:5000/vllm", None),
    ],
)
def test_image_version(image: str, version: tuple[int, int, int] | None) -> None:
    assert image_version(image) == version


def test_image_older_than_the_model_is_an_error_with_the_fix() -> None:
    flash = resolve_model("zai-org/GLM-4.7-Flash")
    check = check_image("vllm/vllm-openai:v0.11.0", flash)
    assert check.error is not None and check.warning is None
    assert "vLLM 0.11.0" in check.error and "0.15.0 or newer" in check.error
    assert "spec.serving.image" in check.error and DEFAULT_VLLM_IMAGE in check.error
    assert check_image("vllm/vllm-openai:v0.15.0", flash).error is None
    assert check_image(DEFAULT_VLLM_IMAGE, flash) == type(check)()


def test_untagged_image_and_unknown_architecture_are_warnings() -> None:
    air = resolve_model("zai-org/GLM-4.5-Air")
    check = check_image("vllm/vllm-openai:latest", air)
    assert check.error is None and check.warning is not None and "0.10.1" in check.warning
    inline = resolve_model(
        {
            "architectures": ["MyGlmForCausalLM"],
            "hidden_size": 1024,
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "vocab_size": 1000,
            "max_position_embeddings": 4096,
        },
        "me/custom",
    )
    check = check_image(DEFAULT_VLLM_IMAGE, inline)
    assert check.error is None and check.warning is not None and "MyGlmForCausalLM" in check.warning


def _observe(spec: dict[str, Any], image: str = DEFAULT_VLLM_IMAGE, name: str = "g") -> Observed:
    return observed(spec, NODES, name=name, image=image)


def _containers(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        spec = obj["spec"]
        if obj["kind"] == "Deployment":
            out.append(spec["template"]["spec"]["containers"][0])
        elif obj["kind"] == "LeaderWorkerSet":
            out.append(spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0])
    return out


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_every_sample_applied_with_defaults_renders_an_image_that_serves_its_model(sample: Path) -> None:
    manifest = yaml.safe_load(sample.read_text())
    desired = compute_desired(_observe(manifest["spec"], name=manifest["metadata"]["name"]))
    containers = _containers(desired.objects)
    assert containers, desired.status
    minimum = resolve_model(manifest["spec"]["model"]["id"]).serving_defaults.min_version
    assert minimum is not None
    for container in containers:
        version = image_version(container["image"])
        assert version is not None and version >= minimum, (container["image"], minimum)


def test_too_old_image_is_planned_false_and_creates_nothing() -> None:
    spec = {"model": {"id": "zai-org/GLM-4.7-Flash"}, "serving": {"image": "vllm/vllm-openai:v0.11.0"}}
    desired = compute_desired(_observe(spec))
    assert desired.objects == ()
    planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
    assert planned["status"] == "False" and planned["reason"] == "VLLMImageTooOld"
    assert "spec.serving.image" in planned["message"]
    assert desired.status["phase"] == "Failed"
    assert [e.reason for e in desired.events] == ["VLLMImageTooOld"]


def test_unversioned_image_plans_with_a_warning_event() -> None:
    spec = {"model": {"id": "zai-org/GLM-4.5-Air"}, "serving": {"image": "vllm/vllm-openai:nightly"}}
    desired = compute_desired(_observe(spec))
    assert desired.objects
    assert "VLLMImageUnchecked" in [e.reason for e in desired.events]


def _args(spec: dict[str, Any]) -> list[str]:
    desired = compute_desired(_observe(spec))
    containers = _containers(desired.objects)
    assert containers, desired.status
    return list(containers[0]["args"])


def test_parser_defaults_follow_the_model_and_yield_to_extra_args() -> None:
    air = _args({"model": {"id": "zai-org/GLM-4.5-Air"}})
    assert air[air.index("--tool-call-parser") + 1] == "glm45"
    assert air[air.index("--reasoning-parser") + 1] == "glm45"
    assert "--enable-auto-tool-choice" in air
    glm47 = _args({"model": {"id": "zai-org/GLM-4.7-Flash"}})
    assert glm47[glm47.index("--tool-call-parser") + 1] == "glm47"
    own = _args(
        {"model": {"id": "zai-org/GLM-4.5-Air"}, "serving": {"extraArgs": ["--tool_call_parser=hermes"]}}
    )
    assert "--tool-call-parser" not in own and "--enable-auto-tool-choice" not in own
    assert own[-1] == "--tool_call_parser=hermes"
    assert own[own.index("--reasoning-parser") + 1] == "glm45"
    chat = _args({"model": {"id": "zai-org/glm-4-9b-chat"}})
    assert "--trust-remote-code" in chat and "--tool-call-parser" not in chat


def test_revision_from_the_source_and_expert_parallel_from_the_plan() -> None:
    location = resolve_model_location("hf://zai-org/GLM-4.5-Air@a1b2c3d", "zai-org/GLM-4.5-Air")
    assert (location.model_arg, location.revision) == ("zai-org/GLM-4.5-Air", "a1b2c3d")
    args = _args({"model": {"id": "zai-org/GLM-4.5-Air", "source": "hf://zai-org/GLM-4.5-Air@v1.0"}})
    assert args[0] == "zai-org/GLM-4.5-Air" and args[args.index("--revision") + 1] == "v1.0"
    # FP8 block-quantized experts: 1408 / TP 4 = 352 is not a multiple of 128 -> expert parallel.
    spec = {
        "model": {"id": "zai-org/GLM-4.5-Air"},
        "quantization": "fp8",
        "gpu": {"products": ["H100"], "tensorParallelSize": 4},
    }
    desired = compute_desired(_observe(spec))
    assert desired.plan is not None and desired.plan.variants[0].enable_expert_parallel
    assert "--enable-expert-parallel" in _containers(desired.objects)[0]["args"]
    assert "--enable-expert-parallel" not in _args(
        {"model": {"id": "zai-org/GLM-4.5-Air"}, "quantization": "bf16"}
    )
