"""The plan as one self-contained HTML page (pure): jinja2, inline CSS, no script, no external asset.

``glm-operator plan --output html`` writes it for a plan made offline; the operator serves the same
page for each live GLMDeployment at ``/plans/<namespace>/<name>`` on its metrics port, from the
plan its last reconcile computed (``controller.pages``). Per GPU type: a bar of one GPU's memory
budget (weights, activation, non-torch, CUDA graphs, KV cache, and the headroom vLLM leaves beyond
``gpu_memory_utilization``), the shape and numbers of the variant (the fields of ``status.plan``,
marked ``data-field="<status field>"`` so a test can read them back from the DOM), its replicas per
pool; then the rejected GPU types with the reason and the fix, and the planner's details.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import jinja2

from glm_operator.planning.placement.result import Plan, Rejection, Variant

__all__ = ["BudgetPart", "IndexEntry", "budget_parts", "render_index", "render_plan_page", "split_fix"]


@dataclass(frozen=True)
class BudgetPart:
    """One segment of a GPU's memory bar."""

    key: str  # CSS class and data-part
    label: str
    gib: float
    percent: float  # of the GPU's memory


@dataclass(frozen=True)
class IndexEntry:
    """One GLMDeployment on the operator's index of plan pages."""

    namespace: str
    name: str
    phase: str
    summary: str


def budget_parts(v: Variant) -> list[BudgetPart]:
    """The bar of one GPU of ``v``: the budget's parts, then the headroom; widths in % of the GPU."""
    total = v.gpu_memory_gib
    parts = [
        ("weights", "weights", v.weights_gib_per_gpu),
        ("activation", "activation peak", v.activation_gib),
        ("non-torch", "non-torch (NCCL, CUDA context)", v.non_torch_gib),
        ("cuda-graphs", "CUDA graphs", v.cudagraph_gib),
        ("kv-cache", "KV cache", max(0.0, v.available_kv_cache_gib_per_gpu)),
        (
            "headroom",
            f"headroom (beyond gpu_memory_utilization {v.gpu_memory_utilization:g})",
            v.headroom_gib,
        ),
    ]
    return [
        BudgetPart(key, label, gib, round(100 * gib / total, 2) if total > 0 else 0.0)
        for key, label, gib in parts
    ]


def split_fix(reason: str) -> tuple[str, str]:
    """(why, fix) of a rejection: the planner writes "<why>. fix: <fix>" or "<why>; fix: <fix>"."""
    lowered = reason.lower()
    index = lowered.find("fix:")
    if index < 0:
        return reason, ""
    return reason[:index].rstrip(" .;:"), reason[index + len("fix:") :].strip()


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("glm_operator.render", "templates"),
        autoescape=True,  # every text comes from a spec or a model card: escape it all
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["thousands"] = lambda n: f"{int(n):,}"
    env.filters["gib"] = lambda x: f"{float(x):.2f}"
    return env


def render_plan_page(
    plan: Plan | None,
    *,
    title: str,
    facts: Sequence[tuple[str, str]] = (),
    message: str = "",
) -> str:
    """The page for one plan; ``facts`` are extra (label, value) lines of the header (phase,
    replicas ready); ``message`` a failure to show when there is no plan (an invalid spec)."""
    rejected: list[tuple[Rejection, str, str]] = []
    if plan is not None:
        rejected = [(r, *split_fix(r.reason)) for r in plan.rejected]
    variants = [(v, budget_parts(v)) for v in plan.variants] if plan is not None else []
    return (
        _environment()
        .get_template("plan.html.j2")
        .render(
            title=title,
            plan=plan,
            variants=variants,
            rejected=rejected,
            facts=list(facts),
            message=message,
        )
    )


def render_index(entries: Sequence[IndexEntry]) -> str:
    """The operator's list of plan pages, one line per GLMDeployment it planned."""
    return _environment().get_template("plan_index.html.j2").render(entries=list(entries))
