"""Read the plan page's numbers back from its DOM, and what ``status.plan`` says they must be.

The page (``glm_operator.render.plan_page``) marks every number of ``status.plan`` with
``data-field="<status field>"`` inside the element of its variant (``data-variant``) or rejected
GPU type (``data-rejected``). ``read_plan_dom`` parses a page with the standard library's HTML
parser (the unit test reads the rendered text, the browser test what Chromium's DOM holds after
layout); ``expected_from_status`` turns a ``status.plan`` into the same shape, formatted the way the
page shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

#: Fields of status.plan.variants[] the page shows, and how it formats each.
VARIANT_FIELDS = (
    "gpuProduct",
    "tensorParallelSize",
    "pipelineParallelSize",
    "gpusPerReplica",
    "nodesPerReplica",
    "quantization",
    "kvCacheDtype",
    "weightsGiBPerGPU",
    "kvCacheTokens",
    "maxConcurrency",
    "maxNumSeqs",
    "replicas",
    "newNodeReplicas",
    "checkpoint",
    "reason",
)
#: Shown only past their default (1: one rank, no drafter), as the page shows them.
SHAPE_FIELDS = ("decodeContextParallelSize", "dataParallelSize", "speculativeTokens")
#: Fields of status.plan.variants[].predicted the page shows, with their decimals.
PREDICTED_FIELDS = {
    "outputTokensPerSecondPerGPU": 1,
    "itlMilliseconds": 2,
    "ttftMilliseconds": 1,
    "kneeConcurrency": 0,
}


class _PlanParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.top: dict[str, str] = {}
        self.variants: dict[str, dict[str, str]] = {}
        self.pools: dict[str, dict[str, str]] = {}
        self.rejected: dict[str, dict[str, str]] = {}
        self.parts: dict[str, dict[str, float]] = {}
        self._scope: list[tuple[str, str, str] | None] = []  # per open element: (kind, key, tag)
        self._field: list[tuple[str, list[str]]] = []
        self._stack: list[str] = []

    def _current(self) -> tuple[str, str] | None:
        for scope in reversed(self._scope):
            if scope is not None:
                return scope[0], scope[1]
        return None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        scope: tuple[str, str, str] | None = None
        if "data-variant" in a:
            kind = "variant" if tag == "section" else "pool"
            scope = (kind, a["data-variant"], tag)
        elif "data-rejected" in a:
            scope = ("rejected", a["data-rejected"], tag)
        if tag in ("br", "meta", "img", "input", "link", "hr"):
            return
        self._stack.append(tag)
        self._scope.append(scope)
        if "data-part" in a:
            where = self._current()
            if where is not None:
                self.parts.setdefault(where[1], {})[a["data-part"]] = float(a.get("data-gib") or 0)
        if "data-field" in a:
            self._field.append((a["data-field"], []))
        else:
            self._field.append(("", []))

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._stack:
            return
        while self._stack:
            open_tag = self._stack.pop()
            self._scope.pop()
            name, chunks = self._field.pop()
            if name:
                text = " ".join("".join(chunks).split())
                self._store(name, text)
                if self._field:  # a field's text is also its parent's
                    self._field[-1][1].append("".join(chunks))
            elif self._field:
                self._field[-1][1].extend(chunks)
            if open_tag == tag:
                break

    def _store(self, name: str, text: str) -> None:
        where = self._current()
        if where is None:
            self.top[name] = text
            return
        kind, key = where
        table = {"variant": self.variants, "pool": self.pools, "rejected": self.rejected}[kind]
        table.setdefault(key, {})[name] = text

    def handle_data(self, data: str) -> None:
        if self._field:
            self._field[-1][1].append(data)


def read_plan_dom(html: str) -> dict[str, Any]:
    """{"license", "modelId", "contextLength", "variants": {gpu: {field: text}}, "pools": {gpu:
    {field: text}}, "rejected": {gpu: {"why", "fix"}}, "parts": {gpu: {part: GiB}}}."""
    parser = _PlanParser()
    parser.feed(html)
    parser.close()
    return {
        **parser.top,
        "variants": parser.variants,
        "pools": parser.pools,
        "rejected": parser.rejected,
        "parts": parser.parts,
    }


def _shown(field: str, value: Any) -> str:
    if field == "weightsGiBPerGPU":
        return f"{float(value):.2f}"
    if field == "maxConcurrency":
        return f"{float(value):.2f}"
    if field == "kvCacheTokens":
        return f"{int(value):,}"
    return " ".join(str(value).split())


def expected_from_status(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What the page must show for a ``status.plan`` (wire form), in ``read_plan_dom``'s shape."""
    variants = {
        v["gpuProduct"]: {
            **{f: _shown(f, v[f]) for f in VARIANT_FIELDS if f in v},
            **{
                f: str(v[f])
                for f in SHAPE_FIELDS
                if v.get(f, 0) > 1 or (f == "speculativeTokens" and v.get(f))
            },
            **{
                f: f"{float(value):.{decimals}f}" if decimals else str(value)
                for f, decimals in PREDICTED_FIELDS.items()
                if (value := (v.get("predicted") or {}).get(f)) is not None
            },
        }
        for v in plan["variants"]
    }
    return {
        "license": plan.get("license") or "not in the catalog: read the model card",
        "variants": variants,
        "pools": {
            v["gpuProduct"]: {
                "gpuProduct": v["gpuProduct"],
                "replicas": str(v["replicas"]),
                "newNodeReplicas": str(v.get("newNodeReplicas", 0)),
            }
            for v in plan["variants"]
        },
        "rejected": {r["gpuProduct"]: " ".join(r["reason"].split()) for r in plan["rejected"]},
    }
