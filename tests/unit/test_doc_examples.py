"""The ``glm-operator estimate`` and ``plan`` examples in the docs are what the commands print today.

A fenced block's line ``$ .venv/bin/glm-operator estimate|plan ...`` is run in-process; every line shown
after it (up to the next ``$`` line or the end of the block) must appear in its output. ``…`` marks
what a doc trims: each piece of a line between the ``…`` must appear. So a planner change that moves a
figure the docs quote fails here, as the recipes page's drift test does for ``docs/recipes.md``;
update the doc from the command's output.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from glm_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
COMMAND = re.compile(r"^\$ (?:\.venv/bin/)?glm-operator (estimate|plan) ")


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    argv: tuple[str, ...]
    shown: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def _blocks(lines: list[str]) -> list[list[tuple[int, str]]]:
    """The fenced blocks of a Markdown file, as (line number, text) pairs."""
    blocks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None
    for number, line in enumerate(lines, start=1):
        if line.startswith("```"):
            if current is not None:
                blocks.append(current)
            current = None if current is not None else []
        elif current is not None:
            current.append((number, line))
    return blocks


def examples() -> list[Example]:
    found: list[Example] = []
    for path in DOCS:
        for block in _blocks(path.read_text(encoding="utf-8").splitlines()):
            starts = [i for i, (_, line) in enumerate(block) if line.startswith("$ ")] + [len(block)]
            for start, end in itertools.pairwise(starts):
                number, command = block[start]
                shown = tuple(line for _, line in block[start + 1 : end] if line.strip())
                if COMMAND.match(command) and shown:
                    argv = tuple(shlex.split(command[2:], comments=True)[1:])
                    found.append(Example(path.name, number, argv, shown))
    return found


EXAMPLES = examples()


def test_the_docs_have_examples_to_check() -> None:
    assert {e.doc for e in EXAMPLES} >= {"planning.md", "serving-shapes.md"}
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_a_doc_example_is_what_the_command_prints(
    example: Example, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    main(list(example.argv))
    output = capsys.readouterr().out
    missing = [
        piece.strip()
        for line in example.shown
        for piece in line.split("…")
        if piece.strip() and piece.strip() not in output
    ]
    assert not missing, (
        f"{example.id} shows lines that `glm-operator {' '.join(example.argv)}` no longer prints "
        f"(update the doc from its output):\n" + "\n".join(missing)
    )
