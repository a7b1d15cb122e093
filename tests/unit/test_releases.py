"""The vLLM release table: one row per release where a budget rule changes, and what each release gets."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from glm_operator.catalog.models import resolve_model
from glm_operator.planning.placement.compatibility import check_image
from glm_operator.planning.releases import (
    NEWEST_READ,
    OLDEST_SUPPORTED,
    RELEASES,
    Generation,
    ReleaseRules,
    V2Runner,
    VllmEngine,
    release_rules,
    unsupported_release,
)


def test_rows_are_ordered_and_each_changes_a_rule() -> None:
    starts = [r.since for r in RELEASES]
    assert starts == sorted(set(starts))
    for before, row in itertools.pairwise(RELEASES):
        changed = [
            f.name
            for f in dataclasses.fields(row)
            if f.name != "since" and getattr(before, f.name) != getattr(row, f.name)
        ]
        assert changed, f"row {row.since} repeats the row before it"


@pytest.mark.parametrize(
    ("version", "since"),
    [
        ((0, 9, 2), (0, 9, 0)),
        ((0, 17, 1), (0, 9, 0)),
        ((0, 19, 0), (0, 18, 0)),
        ((0, 25, 0), (0, 24, 0)),
        ((0, 33, 2), (0, 33, 0)),
        ((0, 40, 0), (0, 33, 0)),
    ],
)
def test_a_release_between_rows_follows_the_row_below_it(
    version: tuple[int, int, int], since: tuple[int, int, int]
) -> None:
    assert release_rules(version).since == since


def test_the_rules_of_the_default_release() -> None:
    rules = release_rules((0, 33, 0))
    assert rules.generation == Generation.NEWER and rules.graphs_in_budget
    assert rules.v2_runner == V2Runner.ALL and rules.uses_model_runner_v2("Glm4MoeForCausalLM", is_moe=True)
    assert rules.gpu_memory_utilization == 0.92 and rules.large_gpu_batch
    assert not rules.fusion_workspace_rounded and not rules.dsa_shared_workspace
    # 0.26 is the one release whose DSA profiling run was read, and its V2 runner estimates no graphs
    assert release_rules((0, 26, 0)).dsa_shared_workspace and not release_rules((0, 26, 0)).v2_graph_estimate


def test_an_image_older_than_the_memory_model_is_refused_naming_the_minimum() -> None:
    assert unsupported_release(OLDEST_SUPPORTED) is None
    why = unsupported_release((0, 8, 5))
    assert why is not None and "0.9.0" in why
    # GLM-4-9B-Chat runs on vLLM 0.4, but the memory plan does not cover 0.8
    check = check_image("vllm/vllm-openai:v0.8.5", resolve_model("zai-org/glm-4-9b-chat"))
    assert check.error is not None and "spec.serving.image" in check.error and "0.9.0" in check.error


def test_a_release_newer_than_the_table_is_planned_with_the_newest_rules_and_says_so() -> None:
    newer = VllmEngine((NEWEST_READ[0], NEWEST_READ[1] + 1, 0), "vllm/vllm-openai:v0.34.0")
    assert newer.rules == release_rules(NEWEST_READ)
    assert any("newer than the newest release" in n for n in newer.notes)
    assert not VllmEngine((0, 33, 1), "vllm/vllm-openai:v0.33.1").notes


def _table_row(rules: ReleaseRules) -> str:
    """A row of docs/memory-model.md's release table, as written there."""
    yes = {True: "yes", False: "no"}
    runner = {
        V2Runner.NONE: "none",
        V2Runner.LISTED: "listed",
        V2Runner.LISTED_AND_DENSE: "listed + dense",
        V2Runner.ALL: "all",
    }
    cells = [
        ".".join(map(str, rules.since[:2])),
        rules.generation.name.lower(),
        yes[rules.graphs_in_budget],
        runner[rules.v2_runner],
        yes[rules.v2_graph_estimate],
        yes[rules.cublas_before_snapshot],
        yes[rules.fusion_workspace_rounded],
        yes[rules.dsa_shared_workspace],
        yes[rules.load_max_split],
        yes[rules.deep_gemm_pdl],
        yes[rules.flashinfer_sampler],
        f"{rules.gpu_memory_utilization:.2f}",
        yes[rules.large_gpu_batch],
    ]
    return "| " + " | ".join(cells) + " |"


def test_the_documented_release_table_is_the_code_s() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory-model.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| 0.")][-len(RELEASES) :]
    assert rows == [_table_row(r) for r in RELEASES]
