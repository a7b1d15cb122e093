"""``spec.gpu.products``: which GPU types a deployment may use, in order of preference.

A name is a catalog GPU type (allowed whether or not a node has it now, since an autoscaler may add one),
else the product label of nodes whose GPU is estimated from their labels (only while they exist), else an
input error naming the field and why. docs/planning.md ("Which GPU types").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from glm_operator.catalog.gpus import GFD_PRODUCT_LABEL, find_gpu, gpu_names
from glm_operator.catalog.models import CatalogError
from glm_operator.planning.placement.request import PlanningInputError


def allowed_products(
    requested: Sequence[str], estimated: Iterable[str], unestimable: Mapping[str, str]
) -> list[str]:
    """The GPU type names ``requested`` allows, in its order.

    ``estimated``: names of the estimated (not in catalog) GPU types present in the cluster (their
    GFD product label); ``unestimable``: product label -> why its nodes cannot be planned on.
    """
    present = {name.lower(): name for name in estimated}
    unknown = {label.lower(): why for label, why in unestimable.items()}
    out: list[str] = []
    for name in requested:
        key = name.strip().lower()
        try:
            resolved = find_gpu(name).name
        except CatalogError:
            if key in present:
                resolved = present[key]
            elif key in unknown:
                raise PlanningInputError(f"spec.gpu.products: {unknown[key]}") from None
            else:
                labels = ", ".join(sorted(present.values())) or "none"
                raise PlanningInputError(
                    f"spec.gpu.products: GPU {name!r} is neither in the catalog nor the {GFD_PRODUCT_LABEL} "
                    f"label of a node in the cluster; use a catalog GPU ({', '.join(gpu_names())}) or the "
                    f"label of GPU nodes the catalog does not know (in the cluster now: {labels})"
                ) from None
        if resolved not in out:
            out.append(resolved)
    return out
