"""What each weight precision would give, by the performance model (pure; shown by ``glm-operator plan``).

The planner's ``quantization: auto`` compares only a bf16 first fit with native fp8 (``placement.ranking``).
This module plans the same request once per pinned precision and ranks the results by predicted
output tokens/s per GPU, so a user also sees what int8/int4 (or fp8 where auto does not compare it)
would buy before choosing it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from glm_operator.catalog.models import CatalogError
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import PlacementRequest, PlanningInputError
from glm_operator.planning.placement.result import Variant

PRECISIONS = ("bf16", "fp8", "int8", "int4")


@dataclass(frozen=True)
class Alternative:
    quantization: str
    variant: Variant  # the preferred GPU type's variant of that precision

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.variant.speed.output_tokens_per_s_per_gpu if self.variant.speed else 0.0


def rank_precisions(request: PlacementRequest) -> list[Alternative]:
    """One plan per precision that fits (the first variant with replicas, else the first), best
    predicted tokens/s per GPU first; precisions that do not plan are left out."""
    out = []
    for precision in PRECISIONS:
        try:
            plan = plan_placement(replace(request, quantization=precision))
        except (CatalogError, PlanningInputError, FitInputError):
            continue
        if not plan.fits or not plan.variants:
            continue
        variant = next((v for v in plan.variants if v.replicas > 0), plan.variants[0])
        out.append(Alternative(precision, variant))
    return sorted(out, key=lambda a: -a.tokens_per_s_per_gpu)
