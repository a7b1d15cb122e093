"""The plan pages in a real browser: Debian's Chromium, headless, against the operator's metrics
port on 127.0.0.1 and against the file ``glm-operator plan --output html`` writes.

The samples are reconciled by the real reconciler (an in-memory API stand-in, no apiserver), its
plans served by ``controller.metrics.serve`` exactly as ``glm-operator run --metrics-port`` serves
them; the DOM Chromium builds must show the numbers of the status.plan the reconciler wrote.
``GLM_WRITE_SCREENSHOTS=1`` writes the screenshots to docs/images/ (committed) instead of a
temporary directory.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api.v1alpha1 import API_VERSION, KIND
from glm_operator.controller import metrics
from glm_operator.controller.config import OperatorConfig
from glm_operator.controller.pages import PlanPages
from tests.harness.browser import dump_dom, png_size, screenshot
from tests.harness.cluster import free_port, repo_root
from tests.harness.controller import reconciling
from tests.harness.fake_api import FakeApi
from tests.harness.plan_dom import expected_from_status, read_plan_dom
from tests.harness.scenarios import NODES

SAMPLES = ("glm-4.7-flash", "glm-5.1", "glm-5.3")  # two GPU types; one replica over two nodes; a rejection
NAMESPACE = "llm"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeApi]]:
    api = FakeApi()
    pages = PlanPages()
    r = reconciling(api, OperatorConfig(leader_election=False), NODES, pages=pages)
    for sample in SAMPLES:
        doc = yaml.safe_load((repo_root() / "manifests" / "samples" / f"{sample}.yaml").read_text())
        doc["metadata"] = {**doc["metadata"], "namespace": NAMESPACE, "uid": f"uid-{sample}"}
        r.wired.handlers.on_glmdeployment("ADDED", api.put(copy.deepcopy(doc)))
        r.reconcile((NAMESPACE, doc["metadata"]["name"]))
    port = free_port()
    server = metrics.serve(port, "127.0.0.1", pages=pages)
    try:
        yield f"http://127.0.0.1:{port}", api
    finally:
        server.shutdown()
        server.server_close()


def status_plan(api: FakeApi, name: str) -> dict[str, Any]:
    obj = api.get_object(API_VERSION, KIND, NAMESPACE, name)
    assert obj is not None
    plan: dict[str, Any] = obj["status"]["plan"]
    return plan


def screenshot_dir(tmp_path: Path) -> Path:
    return repo_root() / "docs" / "images" if os.environ.get("GLM_WRITE_SCREENSHOTS") else tmp_path


@pytest.mark.parametrize("sample", SAMPLES)
def test_chromium_shows_the_numbers_of_status_plan(
    served: tuple[str, FakeApi], sample: str, tmp_path: Path
) -> None:
    url, api = served
    name = sample.replace(".", "-")
    page = f"{url}/plans/{NAMESPACE}/{name}"
    dom = read_plan_dom(dump_dom(page))
    plan = status_plan(api, name)
    expected = expected_from_status(plan)
    assert dom["variants"] == expected["variants"], page
    assert dom["pools"] == expected["pools"]
    assert dom["license"] == expected["license"] and plan["license"]
    assert set(dom["rejected"]) == set(expected["rejected"])
    for gpu, shown in dom["rejected"].items():
        assert expected["rejected"][gpu].startswith(shown["why"]) and shown["fix"]
    for variant in plan["variants"]:  # a bar per GPU type, weights and KV cache as status says
        parts = dom["parts"][variant["gpuProduct"]]
        assert parts["weights"] == pytest.approx(variant["weightsGiBPerGPU"], abs=0.01)
        assert parts["kv-cache"] > 0 and parts["headroom"] > 0

    shot = screenshot(page, screenshot_dir(tmp_path) / f"plan-{sample}.png")
    assert png_size(shot) == (1150, 1500)
    assert shot.stat().st_size > 40_000, "a near-blank screenshot"  # bars, tables and text


def test_the_index_and_an_unknown_name_in_chromium(served: tuple[str, FakeApi]) -> None:
    url, _ = served
    index = dump_dom(f"{url}/plans/")
    for sample in SAMPLES:
        assert f'href="/plans/{NAMESPACE}/{sample.replace(".", "-")}"' in index
    assert "planned no GLMDeployment of that name" in dump_dom(f"{url}/plans/{NAMESPACE}/nope")


def test_the_offline_page_in_chromium(tmp_path: Path) -> None:
    sample = repo_root() / "manifests" / "samples" / "glm-5.3-flash.yaml"
    nodes = repo_root() / "tests" / "fixtures" / "gpu-cluster.yaml"
    out = tmp_path / "plan.html"
    argv = ["plan", "-f", str(sample), "--nodes", str(nodes), "--output", "html"]
    with out.open("w") as f:
        subprocess.run(
            [sys.executable, "-m", "glm_operator.cli", *argv],
            stdout=f,
            check=True,
            timeout=120,
        )
    dom = read_plan_dom(dump_dom(out.as_uri()))
    assert dom["license"] == "MIT (unverified)"
    assert dom["variants"]["NVIDIA-H100-80GB-HBM3"]["tensorParallelSize"] == "8"
    assert dom["pools"]["NVIDIA-H100-80GB-HBM3"]["replicas"] == "1"
