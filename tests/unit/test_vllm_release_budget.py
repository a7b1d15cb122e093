"""The memory plan follows the vLLM release of the image the pods run (spec image, else the default).

GLM-4-9B on an L4 at 8k is the case that flips: vLLM 0.33 (>= 0.20) takes its 0.71 GiB CUDA-graph
estimate out of the KV budget and leaves 0.08 GiB (0.26 of an 8k sequence) at TP=1, where vLLM 0.11
left 0.79 GiB (2.52 sequences); so a 0.11 image plans TP=1 and the default image TP=2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import resolve_model
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE, VLLM_VERSION
from glm_operator.cli import main
from glm_operator.desired import Observed, compute_desired
from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, GIB
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import fit_input
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.releases import (
    DEFAULT_ENGINE,
    DEFAULT_VERSION,
    engine_for_image,
    engine_for_version,
    release_rules,
)
from glm_operator.planning.supply.nodes import parse_gpu_pools

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-cluster.yaml"
NODES = yaml.safe_load(FIXTURE.read_text())["items"]
# 24k on an L4: one GPU holds it with vLLM 0.33's leaner profiling run (1.21 sequences), not with 0.11's
# (0.84: its PyTorch top-k/top-p sampler peaks at ~1.4 GiB), so the release decides the TP.
# bf16 pinned: the TP each release's budget needs is the point (auto would take fp8 on the L4 for speed)
NINE_B_ON_L4 = {
    "model": {"id": "zai-org/glm-4-9b-chat"},
    "quantization": "bf16",
    "contextLength": 16384,
    "gpu": {"products": ["L4"]},
}


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.33.0", (0, 33, 0)),
        ("vllm/vllm-openai:0.20.2", (0, 20, 2)),
        ("registry.example:5000/vllm/vllm-openai:v0.21.0-cu129", (0, 21, 0)),
        ("vllm/vllm-openai:v0.11.0@sha256:" + "a" * 64, (0, 11, 0)),
    ],
)
def test_the_release_comes_from_the_image_tag(image: str, version: tuple[int, int, int]) -> None:
    engine = engine_for_image(image)
    assert engine.version == version and engine.image == image and not engine.notes


@pytest.mark.parametrize(
    "image", ["vllm/vllm-openai:latest", "vllm/vllm-openai@sha256:" + "b" * 64, "my/vllm:glm51"]
)
def test_a_tag_that_is_no_version_assumes_the_default_image_release_and_says_so(image: str) -> None:
    engine = engine_for_image(image, default_image="vllm/vllm-openai:v0.19.1")
    assert engine.version == (0, 19, 1) and engine.image == image
    (note,) = engine.notes
    assert image in note and "assumes vLLM 0.19.1" in note and "vllm/vllm-openai:v0.19.1" in note
    # and when the operator's default image is not versioned either: this release's default
    neither = engine_for_image(image, default_image="mirror/vllm:stable")
    assert neither.version == DEFAULT_VERSION and f"assumes vLLM {VLLM_VERSION}" in neither.notes[0]


def test_no_spec_image_is_the_operator_default() -> None:
    assert engine_for_image(None).image == DEFAULT_VLLM_IMAGE
    assert engine_for_image("", "vllm/vllm-openai:v0.12.0").version == (0, 12, 0)
    assert DEFAULT_ENGINE.version == DEFAULT_VERSION == tuple(int(p) for p in VLLM_VERSION.split("."))


def test_cudagraphs_count_in_the_budget_from_0_20() -> None:
    """0.20.0's vllm/envs.py turned VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on (0.19.x: off)."""
    assert not release_rules((0, 19, 9)).graphs_in_budget and release_rules((0, 20, 0)).graphs_in_budget
    assert release_rules(DEFAULT_VERSION).graphs_in_budget
    assert engine_for_version("v0.21").version == (0, 21, 0)
    with pytest.raises(ValueError):
        engine_for_version("latest")


def test_the_fit_subtracts_cuda_graphs_for_the_default_release_only_from_0_20() -> None:
    model, l4 = resolve_model("glm-4-9b-chat"), find_gpu("L4")
    new, old = (
        estimate_fit(fit_input(model, l4, engine, max_model_len=16384))
        for engine in (DEFAULT_ENGINE, engine_for_version("0.17.0"))
    )
    assert (new.vllm_version, old.vllm_version) == (VLLM_VERSION, "0.17.0")
    # 40 layers x 51 capture sizes of vLLM 0.33 x the fitted per-piece figure
    per_piece = DEFAULT_CONSTANTS.graphs_v2.bytes_per_piece
    assert new.cudagraph_gib == pytest.approx(40 * 51 * per_piece / GIB, abs=0.01) and old.cudagraph_gib == 0
    # 0.33 takes its graph estimate off the budget; 0.17 captures after the KV cache, in the headroom
    assert old.fits and not new.fits
    assert new.available_kv_cache_gib_per_gpu < old.available_kv_cache_gib_per_gpu
    assert any("counted by vLLM 0.33.0" in r for r in new.reasons)
    # older releases capture the graphs in the 1 - utilization headroom: checked there instead
    tight = {"max_model_len": 8192, "gpu_memory_utilization": 0.98}  # 0.44 GiB of headroom
    warned = estimate_fit(fit_input(model, l4, engine_for_version("0.17.0"), **tight))
    counted = estimate_fit(fit_input(model, l4, DEFAULT_ENGINE, **tight))
    assert any("captured after the KV cache" in u for u in warned.uncertain)
    assert not any("captured after the KV cache" in u for u in counted.uncertain)


def _plan(spec: dict[str, Any], default_image: str = DEFAULT_VLLM_IMAGE) -> Any:
    return plan_placement(placement_request_from_spec(spec, parse_gpu_pools(NODES), default_image))


def _simplest_fit(plan: Plan) -> str:
    """The shape of the simplest candidate that fits the plan's one variant."""
    (variant,) = plan.variants
    return next(c.shape for c in variant.considered if c.first_fit)


def test_placement_follows_the_spec_image_else_the_default_image() -> None:
    default = _plan(NINE_B_ON_L4)
    assert default.vllm_version == VLLM_VERSION
    assert any("CUDA-graph memory counted in the KV-cache budget" in d for d in default.details)
    # 0.33 counts its CUDA graphs in the budget: TP 1 holds a 16k sequence only at the raised utilization
    assert _simplest_fit(default) == "bf16 TP=1 at utilization 0.95"
    old_spec = {**NINE_B_ON_L4, "serving": {"image": "vllm/vllm-openai:v0.11.0"}}
    old = _plan(old_spec)
    # 0.11 captures them after the KV cache: TP 1 fits at its own default utilization
    assert old.vllm_version == "0.11.0" and _simplest_fit(old) == "bf16 TP=1"
    assert _simplest_fit(_plan(NINE_B_ON_L4, default_image="vllm/vllm-openai:v0.11.0")) == "bf16 TP=1"
    # the spec's image wins over the operator's default
    assert _plan(old_spec, default_image=DEFAULT_VLLM_IMAGE).vllm_version == "0.11.0"


def test_an_unversioned_image_plans_for_the_default_release_with_a_note_in_status() -> None:
    spec = {**NINE_B_ON_L4, "serving": {"image": "vllm/vllm-openai:nightly"}}
    body = {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": "g", "namespace": "llm", "uid": "uid-1", "generation": 1},
        "spec": spec,
        "status": {},
    }
    observed = Observed(
        body=body,
        nodes=NODES,
        gpus_used={},
        children=[],
        pods=[],
        default_image="vllm/vllm-openai:v0.11.0",
        now="2026-11-30T00:00:00Z",
    )
    desired = compute_desired(observed)
    assert desired.plan is not None and desired.plan.vllm_version == "0.11.0"
    (variant,) = [v for v in desired.status["plan"]["variants"] if v["replicas"]]
    assert _simplest_fit(desired.plan) == "bf16 TP=1"  # 0.11.0's plan: 0.33.0's needs a raised utilization
    assert any("vllm/vllm-openai:nightly has no version tag" in n for n in variant["notes"])
    planned = next(e for e in desired.events if e.reason == "Planned")
    assert "assumes vLLM 0.11.0" in planned.message


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_takes_the_release_from_vllm_version_or_image(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("estimate", "--model", "glm-4-9b-chat", "--gpu", "L4", "--max-model-len", "16384", "-o", "json")
    code, out, _ = _run(capsys, *args)
    default = json.loads(out)
    assert code == 1 and default["vllm_version"] == VLLM_VERSION and default["image"] == DEFAULT_VLLM_IMAGE
    assert any(line.startswith("Estimated CUDA graph memory") for line in default["vllm_log_lines"])
    code, out, _ = _run(capsys, *args, "--vllm-version", "0.17.0")
    old = json.loads(out)
    assert code == 0 and old["vllm_version"] == "0.17.0" and old["cudagraph_gib"] == 0
    assert old["kv_cache_tokens"] > default["kv_cache_tokens"]
    code, out, _ = _run(capsys, *args, "--image", "vllm/vllm-openai:latest")
    assumed = json.loads(out)
    assert assumed["vllm_version"] == VLLM_VERSION and any("no version tag" in n for n in assumed["notes"])
    code, _, err = _run(capsys, *args, "--vllm-version", "newest")
    assert code == 2 and "--vllm-version" in err and err.count("\n") == 1


def test_plan_takes_the_default_image_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = tmp_path / "g.yaml"
    doc.write_text(yaml.safe_dump({"kind": "GLMDeployment", "metadata": {"name": "g"}, "spec": NINE_B_ON_L4}))
    base = ("plan", "-f", str(doc), "--nodes", str(FIXTURE), "-o", "json")

    def simplest(plan: dict[str, Any]) -> str:
        return next(c["shape"] for c in plan["variants"][0]["considered"] if c["first_fit"])

    code, out, _ = _run(capsys, *base)
    assert code == 0 and simplest(json.loads(out)) == "bf16 TP=1 at utilization 0.95"
    code, out, _ = _run(capsys, *base, "--image", "vllm/vllm-openai:v0.11.0")
    plan = json.loads(out)
    assert code == 0 and plan["vllm_version"] == "0.11.0" and simplest(plan) == "bf16 TP=1"
    code, out, _ = _run(capsys, "plan", "-f", str(doc), "--nodes", str(FIXTURE), "--vllm-version", "0.11.0")
    assert code == 0 and "vLLM 0.11.0" in out


def test_the_default_token_budget_of_the_profiling_run_follows_the_release_on_the_largest_gpus() -> None:
    # vLLM 0.33.0 (arg_utils.py get_batch_defaults): 16384 on >= 160 GiB GPUs, 8192 on H100/H200.
    # With 16 sequences the sampler's peak is small and the forward pass's, which grows with the
    # batch, is the activation peak.
    model = resolve_model("GLM-4.5-Air")
    b200, h200 = find_gpu("B200"), find_gpu("H200")
    new, old = (
        estimate_fit(
            fit_input(model, b200, engine, max_model_len=32768, tensor_parallel_size=2, max_num_seqs=16)
        )
        for engine in (DEFAULT_ENGINE, engine_for_version("0.32.0"))
    )
    assert (new.max_num_batched_tokens, old.max_num_batched_tokens) == (16384, 8192)
    assert new.activation_gib > old.activation_gib  # the forward term grows with the batch
    on_h200 = estimate_fit(
        fit_input(model, h200, DEFAULT_ENGINE, max_model_len=32768, tensor_parallel_size=2)
    )
    assert on_h200.max_num_batched_tokens == 8192
    pinned = estimate_fit(
        fit_input(
            model,
            b200,
            DEFAULT_ENGINE,
            max_model_len=32768,
            tensor_parallel_size=2,
            max_num_batched_tokens=4096,
        )
    )
    assert pinned.max_num_batched_tokens == 4096
