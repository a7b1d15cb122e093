"""The parse cache of rendered objects (render.objects._ParsedTexts)."""

from __future__ import annotations

import datetime as dt

from glm_operator.render.objects import _ParsedTexts

TEXT = 'kind: Service\nmetadata:\n  name: a\n  labels: {x: "1"}\nspec:\n  ports: [{port: 8000}]\n'


def test_the_same_text_gives_equal_objects_that_callers_own() -> None:
    cache = _ParsedTexts(size=4)
    first = cache.load(TEXT)
    second = cache.load(TEXT)
    assert (
        first
        == second
        == {
            "kind": "Service",
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"ports": [{"port": 8000}]},
        }
    )
    second["metadata"]["labels"]["x"] = "changed"  # a caller mutating its copy
    assert cache.load(TEXT)["metadata"]["labels"]["x"] == "1"


def test_it_keeps_only_the_last_texts_and_skips_what_json_cannot_carry() -> None:
    cache = _ParsedTexts(size=2)
    for i in range(5):
        cache.load(f"a: {i}\n")
    assert len(cache._items) == 2
    assert cache.load("when: 2026-11-30\n") == {"when": dt.date(2026, 11, 30)}
    assert cache.load("1: one\n") == {1: "one"}  # a non-string key is not turned into "1"
    assert len(cache._items) == 2
