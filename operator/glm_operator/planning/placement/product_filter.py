"""``spec.gpu.products``: which GPU types a deployment may use, in order of preference.

A name in the list is, in this order:

1. a catalog GPU type (its GFD product name, a catalog alias or a label value the catalog maps to
   it): allowed whether or not a node has it now (an autoscaler may add one; until then the plan
   says "no schedulable node has ...");
2. otherwise the GPU product label (``nvidia.com/gpu.product``, compared case-insensitively) of nodes
   in the cluster whose GPU is not in the catalog but is estimated from their labels (memory and
   compute capability, see :mod:`glm_operator.catalog.estimated_gpus`);
3. anything else is an input error naming the field: a label of nodes that cannot be estimated
   (the reason is given: which labels they lack), or a name that is neither in the catalog nor on any
   node (a typo, or nodes that are gone: the deployment plans again when a node with it appears).

An estimated product can only be named while its nodes exist, since nothing else says what it is.
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
