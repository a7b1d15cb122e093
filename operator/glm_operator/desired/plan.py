"""Step 1 of the pipeline: the plan (pure).

The replica total is ``spec.replicas``, or the autoscaler's ``status.desiredReplicas`` when
``spec.autoscaling`` is set (clamped to its bounds). The GPU supply is the nodes' free GPUs plus
what node autoscalers can add (``planning.supply.capacity``); while the spec is unchanged, replicas on a
NotReady/Unknown node keep their GPUs for the node grace period and on a cordoned node until they
are drained (``planning.supply.outages``). ``plan_placement`` spreads the total over the GPU types, those
its workloads run on now first when ``gpu.products`` states no order (``running_on``).

The result is a ``PlanStep``: either a fitting plan with what the later steps need, or a
``Failure`` whose reason and message say which field to change and how.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glm_operator.api.v1alpha1 import LABEL_GPU_PRODUCT, GLMDeploymentSpec
from glm_operator.desired.model import WORKLOAD_KIND_NAMES, Observed
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.placement.compatibility import ImageCheck, check_request_image
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import PlacementRequest, PlanningInputError, placement_request
from glm_operator.planning.placement.result import Plan, Variant
from glm_operator.planning.supply.capacity import ObservedCapacity, largest_machines_note, observed_capacity
from glm_operator.planning.supply.nodes import parse_gpu_pools
from glm_operator.planning.supply.outages import NodeOutage, held_gpus, node_outages, parse_time

NO_FIT_FIX = (
    "fix: one replica must fit on one machine: allow a GPU type with more memory per machine "
    "(gpu.products), a lower quantization or a shorter contextLength, gpu.allowMultiNode: true, or give "
    "the NodePool larger instance types or higher limits."
)
MAX_FIXES_SHOWN = 3  # in the one-line summary (status.plan.fixes has them all)


@dataclass(frozen=True)
class Failure:
    """No usable plan: the Planned=False reason and a message naming the field and the fix."""

    reason: str
    message: str


@dataclass(frozen=True)
class PlanStep:
    replicas: int  # the replica total asked for
    now: dt.datetime
    outages: Mapping[str, NodeOutage] = field(default_factory=dict)
    held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node -> GPUs kept in a grace
    capacity: ObservedCapacity | None = None
    request: PlacementRequest | None = None
    plan: Plan | None = None
    image_check: ImageCheck = field(default_factory=ImageCheck)
    failure: Failure | None = None

    @property
    def fits(self) -> bool:
        return self.failure is None and self.plan is not None


def total_replicas(spec: GLMDeploymentSpec, status: Mapping[str, Any]) -> int:
    """``spec.replicas``, or the autoscaler's ``status.desiredReplicas`` within its bounds."""
    if spec.autoscaling is None:
        return int(spec.replicas)
    a = spec.autoscaling
    wanted = status.get("desiredReplicas")
    value = int(wanted) if isinstance(wanted, int) else int(a.min_replicas)
    return max(int(a.min_replicas), min(int(a.max_replicas), value))


def plan_summary(plan: Plan) -> str:
    """One line: what was placed where, or why nothing fits."""
    if not plan.fits:
        rejected = "; ".join(f"{r.gpu_product}: {r.reason}" for r in plan.rejected)
        return "does not fit: " + _fixes_text(plan) + (rejected[:900] or "no GPU type to plan on")
    parts = [
        f"{v.replicas}x {v.gpu_product} TP={v.tensor_parallel_size}"
        + (f" PP={v.pipeline_parallel_size}" if v.pipeline_parallel_size > 1 else "")
        + f" {v.quantization} ({v.max_concurrency:.1f} seqs of {v.max_model_len} tokens)"
        for v in plan.variants
        if v.replicas > 0
    ]
    text = ", ".join(parts) or "0 replicas"
    waiting = [
        f"{v.new_node_replicas} on new nodes from {', '.join(v.node_pools)}"
        for v in plan.variants
        if v.new_node_replicas
    ]
    if waiting:
        text += f" ({'; '.join(waiting)})"
    if plan.shortfall_replicas:
        text += f"; {plan.shortfall_replicas} replica(s) short of GPUs"
    return text


def _fixes_text(plan: Plan) -> str:
    """The cheapest changes that fit, first in the message so that no truncation loses them."""
    if not plan.fixes:
        return ""
    first, *others = plan.fixes[:MAX_FIXES_SHOWN]
    text = f"cheapest fix: {first.describe()}"
    if others:
        text += "; other fixes: " + "; ".join(f.describe() for f in others)
    return text + ". Rejected: "


def placed_variants(plan: Plan) -> list[Variant]:
    """Variants with replicas; the shortfall goes to the preferred variant so it shows as Pending."""
    variants = list(plan.variants)
    if plan.shortfall_replicas > 0 and variants:
        first = variants[0]
        variants[0] = dataclasses.replace(first, replicas=first.replicas + plan.shortfall_replicas)
    return [v for v in variants if v.replicas > 0]


def running_on(children: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The GPU types the deployment runs on now: those of its workloads with replicas that are not
    being deleted, by their label (a workload in the middle of a rollout, whose old pod is gone and
    whose new one is not bound yet, still counts)."""
    types = {
        str((child["metadata"].get("labels") or {}).get(LABEL_GPU_PRODUCT) or "")
        for child in children
        if child.get("kind") in WORKLOAD_KIND_NAMES
        and (child.get("spec") or {}).get("replicas")
        and not child["metadata"].get("deletionTimestamp")
    }
    return tuple(sorted(types - {""}))


def plan_step(observed: Observed, spec: GLMDeploymentSpec) -> PlanStep:
    replicas = total_replicas(spec, observed.previous_status)
    now = parse_time(observed.now) or dt.datetime.now(dt.UTC)
    outages = node_outages(observed.nodes, now, observed.node_grace_seconds)
    spec_unchanged = observed.previous_status.get("observedGeneration") == observed.generation
    held = held_gpus(outages, observed.pods, now) if spec_unchanged else {}
    capacity = observed_capacity(
        parse_gpu_pools(observed.nodes, observed.gpus_used, held), observed.nodes, observed.elastic,
        observed.pods, observed.now, replicas, spec.gpu.allow_multi_node,
    )  # fmt: skip
    step = PlanStep(replicas=replicas, now=now, outages=outages, held=held, capacity=capacity)
    try:
        request = placement_request(spec, capacity.pools, observed.default_image, replicas=replicas)
        request = dataclasses.replace(request, running_on=running_on(observed.children))
        plan = plan_placement(request)
    except (PlanningInputError, FitInputError, ValueError, KeyError) as exc:
        return dataclasses.replace(step, failure=Failure("InvalidSpec", str(exc)))
    except Exception as exc:  # a planner bug on an odd spec: say so in status, never retry in a loop
        where = "spec.model.config" if spec.model.config is not None else "spec"
        message = f"{where}: the planner failed on this spec ({type(exc).__name__}: {str(exc)[:300]})"
        return dataclasses.replace(step, failure=Failure("InvalidSpec", message))
    step = dataclasses.replace(step, request=request, plan=plan)
    if not plan.fits:
        message = plan_summary(plan)
        if plan.details:  # the last rejection's details, or why there was nothing to reject
            message += ". " + " ".join(plan.details[-2:] if plan.rejected else plan.details[-1:])
        machines = [largest_machines_note(capacity.elastic, r.gpu_product) for r in plan.rejected]
        if any(machines):
            message += " Node pools: " + "; ".join(m for m in machines if m) + ". " + NO_FIT_FIX
        reason = "NoGPUFits" if capacity.pools else "NoGPUNodes"
        return dataclasses.replace(step, failure=Failure(reason, message))
    image_check = check_request_image(spec.serving.image or observed.default_image, request)
    if image_check.error is not None:
        return dataclasses.replace(
            step, image_check=image_check, failure=Failure("VLLMImageTooOld", image_check.error)
        )
    return dataclasses.replace(step, image_check=image_check)
