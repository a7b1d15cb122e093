"""docs/recipes.md is what ``benchmarks.recipes`` generates from the planner, and the page holds what it
promises: a row per catalog GLM MoE model and machine, a source for every published recipe, flags that
say what the plan says.

The page is generated once per module (the planner over 80 cells, the recipes' shapes and the findings'
re-plans: a few seconds).
"""

from __future__ import annotations

import difflib

import pytest
from benchmarks import recipes

from glm_operator.catalog.models import load_models

# the models the page was asked for (issue 49); a catalog that drops one should fail here, not thin the page
EXPECTED_MODELS = {
    "GLM-4.5-Air",
    "GLM-4.5",
    "GLM-4.6",
    "GLM-4.7",
    "GLM-4.7-Flash",
    "GLM-5",
    "GLM-5.1",
    "GLM-5.2",
    "GLM-5.3",
    "GLM-5.3-Flash",
}


@pytest.fixture(scope="module")
def report() -> recipes.Report:
    return recipes.generate()


@pytest.fixture(scope="module")
def page(report: recipes.Report) -> str:
    return recipes.render(report)


def test_the_committed_page_is_the_generators_output(page: str) -> None:
    committed = recipes.DOC.read_text() if recipes.DOC.exists() else ""
    if committed != page:
        diff = list(
            difflib.unified_diff(
                committed.splitlines(), page.splitlines(), "committed", "generated", lineterm=""
            )
        )
        pytest.fail(
            "docs/recipes.md differs from the planner's output: run `python -m benchmarks.recipes --write` "
            "(make recipes) and commit it. First differences:\n" + "\n".join(d[:300] for d in diff[:20])
        )


def _section(page: str, title: str) -> str:
    start = page.index(f"\n## {title}\n")
    end = page.find("\n## ", start + 1)
    return page[start:end]


def test_every_catalog_glm_moe_model_has_a_row_for_every_machine_and_request(
    report: recipes.Report, page: str
) -> None:
    moe = [m for m in load_models() if m.architecture.is_moe]
    assert {m.name for m in moe} >= EXPECTED_MODELS
    for model in moe:
        section = _section(page, model.name)
        for hardware in recipes.HARDWARE:
            for request in recipes.REQUESTS:
                cell = report.cell(model.id, hardware.label, request.key)
                row = f"| {hardware.label} | {cell.context} | "
                assert row in section, f"{model.name}: no row {row!r}"
                if cell.variant is None:  # where nothing fits, the plan's own reason is printed
                    assert f"{row}nothing fits: {recipes.rejection_text(cell.plan)}" in section


def test_every_published_entry_says_where_it_comes_from() -> None:
    for recipe in recipes.PUBLISHED:
        where = recipe.url or recipe.provenance
        assert recipe.url.startswith("https://") or "from memory" in where or "URL not recorded" in where, (
            recipe.source
        )
        assert recipe.provenance, recipe.source
        assert set(recipe.models) <= {m.id for m in load_models()}, recipe.source


def _flag(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_rendered_flags_of_each_fitting_cell_say_what_the_plan_says(report: recipes.Report) -> None:
    fitting = [c for c in report.cells if c.variant is not None]
    assert len(fitting) > len(report.cells) // 2
    for cell in fitting:
        v = cell.variant
        assert v is not None
        label = f"{cell.model.name} {cell.where}"
        assert cell.argv[:3] == ("vllm", "serve", v.model_id), label
        assert _flag(cell.argv, "--tensor-parallel-size") == str(v.tensor_parallel_size), label
        assert _flag(cell.argv, "--max-num-seqs") == str(v.max_num_seqs), label
        assert _flag(cell.argv, "--max-model-len") == str(cell.context), label
        if v.data_parallel_size > 1:
            assert _flag(cell.argv, "--data-parallel-size") == str(v.data_parallel_size), label
        if v.speculative_tokens:
            assert f'"num_speculative_tokens":{v.speculative_tokens}' in (
                _flag(cell.argv, "--speculative-config") or ""
            ), label


def test_a_finding_prints_only_while_it_holds() -> None:
    empty = recipes.Report(cells=(), dense=())
    assert recipes.findings_section(empty) == ["## Findings", "", "None of the checks holds today.", ""]
