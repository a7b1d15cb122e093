"""The repository paths the documents name in backticks exist, so a moved or renamed file shows up here.

A backticked word (or each word of a backticked command) that starts with a top-level folder of the
repository or a package of ``glm_operator`` is a path; it must exist relative to the repository root,
to ``operator/glm_operator/``, to ``operator/glm_operator/planning/`` (docs/memory-model.md names the
planning modules from there) or to the document's own folder. ``python -m pkg.module`` names a module
the same way. Globs must match at least one file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "glm_operator"
DOCUMENTS = sorted(
    [*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("benchmarks/**/README.md")],
)
# first segments that make a word a path: the repository's top-level folders, the package's
# subpackages, and the planning subpackages
REPO_DIRS = ("benchmarks", "charts", "crds", "docs", "hack", "manifests", "operator", "tests", "tools")
PACKAGE_DIRS = tuple(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_"))
PLANNING_DIRS = tuple(
    p.name for p in (PACKAGE / "planning").iterdir() if p.is_dir() and not p.name.startswith("_")
)
FIRST_SEGMENTS = frozenset(REPO_DIRS + PACKAGE_DIRS + PLANNING_DIRS)

SPAN = re.compile(r"`([^`\n]+)`")
MODULE = re.compile(r"-m\s+((?:benchmarks|tests|glm_operator)(?:\.\w+)+)")


def named_paths(text: str) -> list[str]:
    """The path-like words of every backticked span of ``text``, without a trailing ``/`` or ``:line``."""
    found = []
    for span in SPAN.findall(text):
        for word in span.split():
            word = word.strip("()[],;").split("::")[0]
            word = re.sub(r":\d+(-\d+)?$", "", word).rstrip("/")
            if "/" in word and word.split("/")[0] in FIRST_SEGMENTS and "<" not in word:
                found.append(word)
        for module in MODULE.findall(span):
            found.append("/".join(module.split(".")) + ".py")
    return found


def exists(path: str, document: Path) -> bool:
    if path.startswith("glm_operator/"):
        path = "operator/" + path
    bases = (ROOT, PACKAGE, PACKAGE / "planning", document.parent)
    if any(c in path for c in "*?["):
        return any(any(base.glob(path)) for base in bases)
    # a module named with -m may be a package (pkg/module.py or pkg/module/__main__.py)
    candidates = [path, path.removesuffix(".py")] if path.endswith(".py") else [path]
    return any((base / c).exists() for base in bases for c in candidates)


def test_paths_are_found_in_backticks() -> None:
    text = "see `operator/glm_operator/planning/memory/fit.py` and `planning/budget.py`, run\n"
    text += "`.venv/bin/python -m benchmarks.fit_errors` or `benchmarks/gpu_truth/logs/` (`git log`)"
    assert named_paths(text) == [
        "operator/glm_operator/planning/memory/fit.py",
        "planning/budget.py",
        "benchmarks/fit_errors.py",
        "benchmarks/gpu_truth/logs",
    ]
    stale = [p for p in named_paths(text) if not exists(p, ROOT / "docs" / "x.md")]
    assert stale == ["planning/budget.py", "benchmarks/fit_errors.py"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(document: Path) -> None:
    missing = sorted({p for p in named_paths(document.read_text()) if not exists(p, document)})
    assert not missing, f"{document.relative_to(ROOT)} names paths that do not exist: {missing}"
