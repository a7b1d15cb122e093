"""The plan page (glm_operator.render.plan_page): self-contained, escaped, and showing exactly the
numbers of status.plan. Chromium renders the same pages in tests/integration/test_plan_page_browser.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from glm_operator.cli import main
from glm_operator.desired import compute_desired
from glm_operator.planning.placement.result import Plan
from glm_operator.render.plan_page import IndexEntry, budget_parts, render_index, render_plan_page, split_fix
from tests.harness import scenarios
from tests.harness.plan_dom import expected_from_status, read_plan_dom
from tests.harness.samples import sample_files

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-cluster.yaml"


def desired_for(sample: Path) -> tuple[Plan, dict[str, object]]:
    doc = yaml.safe_load(sample.read_text())
    observed = scenarios.observed(doc["spec"], scenarios.NODES, name=doc["metadata"]["name"])
    desired = compute_desired(observed)
    assert desired.plan is not None
    return desired.plan, desired.status


@pytest.mark.parametrize("sample", sample_files(), ids=lambda p: p.stem)
def test_the_page_shows_the_numbers_of_status_plan(sample: Path) -> None:
    plan, status = desired_for(sample)
    html = render_plan_page(plan, title=f"llm/{sample.stem}")
    dom = read_plan_dom(html)
    expected = expected_from_status(status["plan"])  # type: ignore[arg-type]
    assert dom["license"] == expected["license"]
    assert dom["variants"] == expected["variants"]
    assert dom["pools"] == expected["pools"]
    assert set(dom["rejected"]) == set(expected["rejected"])
    for gpu, shown in dom["rejected"].items():
        reason = expected["rejected"][gpu]
        assert reason.startswith(shown["why"]) and shown["why"]
        if "fix:" in reason:
            assert reason.endswith(shown["fix"]) and shown["fix"] != "-"
    # one bar per variant, its parts adding up to the GPU's memory
    for v in plan.variants:
        assert sum(dom["parts"][v.gpu_product].values()) == pytest.approx(v.gpu_memory_gib, abs=0.05)


def test_the_budget_parts_add_up_to_the_gpu() -> None:
    plan, _ = desired_for(ROOT / "manifests" / "samples" / "glm-4.7-flash.yaml")
    for v in plan.variants:
        parts = budget_parts(v)
        assert [p.key for p in parts] == [
            "weights", "activation", "non-torch", "cuda-graphs", "kv-cache", "headroom",
        ]  # fmt: skip
        assert sum(p.gib for p in parts) == pytest.approx(v.gpu_memory_gib, abs=0.05)
        assert sum(p.percent for p in parts) == pytest.approx(100, abs=0.1)
        assert parts[0].gib == v.weights_gib_per_gpu and parts[4].gib == v.available_kv_cache_gib_per_gpu


def test_the_page_is_self_contained_and_escapes_what_it_shows() -> None:
    plan, _ = desired_for(ROOT / "manifests" / "samples" / "glm-5.3.yaml")
    hostile = dataclasses.replace(plan, details=('<script>alert("x")</script>', *plan.details))
    html = render_plan_page(hostile, title="llm/<b>x</b>", facts=[("phase", "Ready")])
    assert "<script" not in html and "&lt;script&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    # nothing fetched: no script, stylesheet link, image, frame, font or url() anywhere
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b|url\(|@import|https?://", html)
    assert 'data-fact="phase">Ready<' in html


def test_a_spec_without_a_plan_shows_the_message() -> None:
    html = render_plan_page(None, title="llm/x", message="spec.contextLength: above the model's limit")
    assert "not planned" in html and "spec.contextLength: above the model&#39;s limit" in html


@pytest.mark.parametrize(
    ("reason", "why", "fix"),
    [
        (
            "needs 9.0; A100 is 8.0. fix: gpu.products with H100",
            "needs 9.0; A100 is 8.0",
            "gpu.products with H100",
        ),
        ("short by 3 GiB; fix: contextLength <= 4096", "short by 3 GiB", "contextLength <= 4096"),
        ("no free GPUs", "no free GPUs", ""),
    ],
)
def test_split_fix(reason: str, why: str, fix: str) -> None:
    assert split_fix(reason) == (why, fix)


def test_the_index_links_every_plan() -> None:
    html = render_index(
        [IndexEntry("llm", "glm-4-7-flash", "Ready", "2x A100"), IndexEntry("a b", "c", "-", "")]
    )
    assert 'href="/plans/llm/glm-4-7-flash"' in html and 'href="/plans/a%20b/c"' in html
    assert "No GLMDeployment planned yet" in render_index([])


def test_plan_output_html(capsys: pytest.CaptureFixture[str]) -> None:
    sample = ROOT / "manifests" / "samples" / "glm-5.3-flash.yaml"
    code = main(["plan", "-f", str(sample), "--nodes", str(FIXTURE), "--output", "html"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    dom = read_plan_dom(out)
    assert dom["license"] == "MIT (unverified)"
    assert dom["variants"]["NVIDIA-H100-80GB-HBM3"]["replicas"] == "1"
    assert "<title>Plan: glm-5-3-flash</title>" in out


def test_the_page_lists_every_compared_shape_and_marks_the_served_one() -> None:
    plan, status = desired_for(ROOT / "manifests" / "samples" / "glm-5.2.yaml")
    html = render_plan_page(plan, title="llm/glm-5.2")
    shown = re.findall(r'<tr data-shape="([^"]+)"( class="chosen")?>', html)
    wire = [c for v in status["plan"]["variants"] for c in v["considered"]]  # type: ignore[index]
    assert [s for s, _ in shown] == [c["shape"] for c in wire]
    assert [bool(chosen) for _, chosen in shown] == [bool(c.get("chosen")) for c in wire]
    assert sum(1 for _, chosen in shown if chosen) == len(plan.variants)
    assert "predicted tokens/s per GPU" in html
