"""From what was observed to what should be: plan, child objects, prune list, status, Events.

``compute_desired(observed) -> Desired`` is a purely computational function with no side
effects: the reconcile loop gathers ``Observed`` (the GLMDeployment, GPU nodes, GPUs held by
other workloads, current children and pods), calls this, and only then does I/O
(``glm_operator.controller.reconcile``). Tests call it on whole scenarios without a cluster.

Rules:
- The replica total is ``spec.replicas``, or the autoscaler's ``status.desiredReplicas`` when
  ``spec.autoscaling`` is set (clamped to its bounds). The planner spreads it over GPU types.
- A plan that does not fit creates nothing. Children of an earlier, fitting generation are left
  running (a bad edit must not take down a serving model); the Planned/Degraded conditions say so.
- Replicas the free GPUs cannot host (the plan's shortfall) still go to the preferred GPU type:
  their pods stay Pending, and the Degraded condition and an Event say how many and why.
- A multi-node variant needs the LeaderWorkerSet API; without it that variant is not created
  and Degraded says what to install.
- Placement is sticky through short node outages (``glm_operator.planning.outages``): while the spec
  is unchanged, a NotReady/Unknown node keeps the replicas running on it for the node grace period
  (Degraded ``GPUNodesUnavailable`` meanwhile, and ``requeue_after`` asks for a reconcile when the
  grace ends), a cordoned node keeps them until they are drained. New replicas go where capacity is.
- Children that the plan no longer wants (a GPU type that lost all its replicas) are pruned; while
  the spec is unchanged (a capacity change moved them), one with Ready replicas is pruned only once
  the replicas that replace it are Ready (make before break).
- Events are emitted only when something changed compared with the previous status.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from glm_operator.api.v1alpha1 import GLMDeploymentSpec, spec_from_dict
from glm_operator.catalog.vllm import ServingDefaults
from glm_operator.planning.capacity import (
    ElasticCapacityInput,
    is_waiting_for_node,
    largest_machines_note,
    observed_capacity,
    pool_limits_note,
)
from glm_operator.planning.compatibility import check_request_image, request_model
from glm_operator.planning.conditions import PLANNED, MetricsStatus, get_condition, summarize
from glm_operator.planning.diagnosis import Diagnosis, Reason, diagnose_pods
from glm_operator.planning.fit import FitInputError
from glm_operator.planning.nodes import parse_gpu_pools
from glm_operator.planning.outages import (
    DEFAULT_NODE_GRACE_SECONDS,
    NodeOutage,
    format_time,
    held_gpus,
    next_expiry,
    node_outages,
    parse_time,
)
from glm_operator.planning.placement import Plan, Variant, plan_placement
from glm_operator.planning.request import PlanningInputError, placement_request_from_spec
from glm_operator.render import names, sizing
from glm_operator.render.context import (
    HF_CACHE_MOUNT_PATH,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    SecretKeyRef,
    WorkloadContext,
)
from glm_operator.render.monitoring import render_pod_monitor
from glm_operator.render.objects import render_all

WORKLOAD_KINDS = (("apps/v1", "Deployment"), ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"))
WORKLOAD_KIND_NAMES = frozenset(kind for _, kind in WORKLOAD_KINDS)


@dataclass(frozen=True)
class Observed:
    body: Mapping[str, Any]  # the GLMDeployment as read from the apiserver
    nodes: Sequence[Mapping[str, Any]]
    gpus_used: Mapping[str, Mapping[str, int]]  # GPUs held by other workloads, node -> resource -> n
    children: Sequence[Mapping[str, Any]]  # our Deployments / LeaderWorkerSets of this GLMDeployment
    pods: Sequence[Mapping[str, Any]]  # its vLLM pods
    default_image: str
    now: str  # RFC 3339
    metrics: MetricsStatus | None = None  # autoscaler's view of Prometheus, when autoscaling is on
    lws_available: bool = True  # LeaderWorkerSet CRD served (multi-node variants)
    node_grace_seconds: float = DEFAULT_NODE_GRACE_SECONDS  # outage a running replica waits out
    elastic: ElasticCapacityInput = field(default_factory=ElasticCapacityInput)  # node autoscalers
    # Render a PodMonitor (controller.pod_monitors decides from --pod-monitor and API discovery),
    # and the PodMonitors of this GLMDeployment that exist now (pruned when not wanted).
    pod_monitor: bool = False
    pod_monitors: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Desired:
    plan: Plan | None
    objects: tuple[dict[str, Any], ...]
    prune: tuple[tuple[str, str, str], ...]  # (apiVersion, kind, name)
    status: dict[str, Any]
    events: tuple[Event, ...] = field(default=())
    requeue_after: float | None = None  # seconds: reconcile again then (a node grace period ends)
    # object_digest of each of ``objects``, in order, when computed with them (reconcile.plan does,
    # in the planning thread); empty: the caller computes them
    digests: tuple[str, ...] = ()


def variant_slug(gpu_product: str) -> str:
    """Short DNS-safe name of a GPU type: NVIDIA-H100-80GB-HBM3 -> h100-80gb-hbm3."""
    slug = re.sub(r"^nvidia[-_ ]", "", gpu_product.strip().lower())
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-") or "gpu"
    return names.dns_label(slug, 30)


def served_model_name(spec: GLMDeploymentSpec) -> str:
    if spec.model.served_model_name:
        return spec.model.served_model_name
    if spec.model.id:
        return spec.model.id.rsplit("/", 1)[-1].lower()
    return "model"


def total_replicas(spec: GLMDeploymentSpec, status: Mapping[str, Any]) -> int:
    if spec.autoscaling is None:
        return int(spec.replicas)
    a = spec.autoscaling
    wanted = status.get("desiredReplicas")
    value = int(wanted) if isinstance(wanted, int) else int(a.min_replicas)
    return max(int(a.min_replicas), min(int(a.max_replicas), value))


def _context(
    body: Mapping[str, Any],
    spec: GLMDeploymentSpec,
    variant: Variant,
    default_image: str,
    plan_text: str,
    vllm_defaults: ServingDefaults | None = None,
) -> WorkloadContext:
    meta = body["metadata"]
    serving = spec.serving
    requirements = tuple(
        NodeSelectorRequirement(key=k, operator="In", values=(v,))
        for k, v in sorted(variant.node_selector.items())
    )
    source = spec.model.source or ""
    if source.startswith("hf://") and spec.model.id and variant.model_id != spec.model.id:
        source = ""  # the planner picked the official quantized checkpoint of the same model
    api_key = None
    if serving and serving.api_key_secret_ref is not None:
        api_key = SecretKeyRef(name=serving.api_key_secret_ref.name, key=serving.api_key_secret_ref.key)
    hf_token = None
    if serving.hf_token_secret_ref is not None:
        hf_token = SecretKeyRef(name=serving.hf_token_secret_ref.name, key=serving.hf_token_secret_ref.key)
    cache = serving.model_cache
    checkpoint = sizing.checkpoint_gib(variant.weights_gib_per_gpu, variant.gpus_per_replica)
    downloads = cache is None and (source or f"hf://{variant.model_id}").startswith("hf://")
    gpus_per_pod = variant.gpus_per_replica // max(1, variant.nodes_per_replica)
    return WorkloadContext(
        namespace=str(meta["namespace"]),
        deployment_name=str(meta["name"]),
        variant_name=variant_slug(variant.key),  # unique per plan, even for one type via two resources
        owner=OwnerReference(name=str(meta["name"]), uid=str(meta.get("uid", ""))),
        image=(serving.image if serving and serving.image else default_image),
        model_id=variant.model_id,
        served_model_name=served_model_name(spec),
        gpu_product=variant.gpu_product,
        tensor_parallel_size=variant.tensor_parallel_size,
        gpus_per_replica=variant.gpus_per_replica,
        max_model_len=variant.max_model_len,
        gpu_memory_utilization=variant.gpu_memory_utilization,
        max_num_seqs=variant.max_num_seqs,
        replicas=variant.replicas,
        model_source=source,
        pipeline_parallel_size=variant.pipeline_parallel_size,
        nodes_per_replica=variant.nodes_per_replica,
        port=serving.port if serving else 8000,
        quantization=variant.quantization_flag,
        kv_cache_dtype=None if variant.kv_cache_dtype in ("auto", "") else variant.kv_cache_dtype,
        extra_args=tuple(serving.extra_args) if serving else (),
        enable_expert_parallel=variant.enable_expert_parallel,
        trust_remote_code=bool(vllm_defaults and vllm_defaults.trust_remote_code),
        tool_call_parser=vllm_defaults.tool_call_parser if vllm_defaults else None,
        reasoning_parser=vllm_defaults.reasoning_parser if vllm_defaults else None,
        env=tuple(e.model_dump(by_alias=True, exclude_none=True) for e in serving.env) if serving else (),
        resources=(
            serving.resources.model_dump(by_alias=True, exclude_none=True)
            if serving and serving.resources
            else {}
        ),
        resource_name=variant.resource_name,
        node_selector_terms=(NodeSelectorTerm(match_expressions=requirements),) if requirements else (),
        tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True) for t in serving.tolerations)
        if serving
        else (),
        node_selector=dict(serving.node_selector) if serving else {},
        api_key_secret=api_key,
        hf_token_secret=hf_token,
        model_cache_claim=cache.claim_name if cache else None,
        model_cache_mount_path=cache.mount_path if cache else HF_CACHE_MOUNT_PATH,
        model_cache_sub_path=cache.sub_path if cache else None,
        model_cache_read_only=cache.read_only if cache else False,
        default_cache_size=sizing.gib(checkpoint * 1.1) if downloads else None,
        default_requests=sizing.default_requests(
            variant.weights_gib_per_gpu, gpus_per_pod, checkpoint if downloads else None
        ),
        service_account_name=serving.service_account_name,
        image_pull_secrets=tuple(serving.image_pull_secrets),
        startup_timeout_seconds=serving.startup_timeout_seconds
        or sizing.default_startup_timeout_seconds(checkpoint),
        annotations={names.ANNOTATION_PLAN: plan_text},
    )


def _variant_status(v: Variant) -> dict[str, Any]:
    return {
        "gpuProduct": v.gpu_product,
        "tensorParallelSize": v.tensor_parallel_size,
        "pipelineParallelSize": v.pipeline_parallel_size,
        "gpusPerReplica": v.gpus_per_replica,
        "nodesPerReplica": v.nodes_per_replica,
        "quantization": v.quantization,
        "kvCacheDtype": v.kv_cache_dtype,
        "weightsGiBPerGPU": round(v.weights_gib_per_gpu, 2),
        "kvCacheTokens": v.kv_cache_tokens,
        "maxConcurrency": round(v.max_concurrency, 2),
        "maxNumSeqs": v.max_num_seqs,
        "replicas": v.replicas,
        "newNodeReplicas": v.new_node_replicas,
        "nodePools": list(v.node_pools),
        "reason": v.reason,
        "checkpoint": v.model_id + (f" --quantization {v.quantization_flag}" if v.quantization_flag else ""),
        "notes": list(v.notes),
    }


def plan_summary(plan: Plan) -> str:
    if not plan.fits:
        rejected = "; ".join(f"{r.gpu_product}: {r.reason}" for r in plan.rejected)
        return "does not fit: " + (rejected[:900] or "no GPU type to plan on")
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


def _sum(children: Sequence[Mapping[str, Any]], field_name: str) -> int:
    return sum(int((c.get("status") or {}).get(field_name) or 0) for c in children)


def _child_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(obj["apiVersion"]), str(obj["kind"]), str(obj["metadata"]["name"]))


def _failed(observed: Observed, reason: str, message: str, generation: int) -> Desired:
    """No valid plan: create nothing, keep what runs, say why."""
    prev_status = dict(observed.body.get("status") or {})
    prev_conditions = list(prev_status.get("conditions") or [])
    degraded = diagnose_pods(observed.pods)
    ready = _sum(observed.children, "readyReplicas")
    phase, conditions = summarize(
        False, reason, 0, ready, 0, degraded, generation, prev_conditions, observed.now,
        plan_message=message, metrics=observed.metrics,
    )  # fmt: skip
    status = {
        **_base_status(observed, generation),
        "phase": str(phase),
        "conditions": conditions,
    }
    events: tuple[Event, ...] = ()
    previous = get_condition(prev_conditions, PLANNED) or {}
    if previous.get("status") != "False" or previous.get("message") != message:
        events = (Event("Warning", reason, message),)
    return Desired(plan=None, objects=(), prune=(), status=status, events=events)


def _base_status(observed: Observed, generation: int) -> dict[str, Any]:
    name = str(observed.body["metadata"]["name"])
    return {
        "observedGeneration": generation,
        "replicas": _sum(observed.children, "replicas"),
        "readyReplicas": _sum(observed.children, "readyReplicas"),
        "selector": names.selector_string(names.service_selector(name)),
    }


def compute_desired(observed: Observed) -> Desired:
    body = observed.body
    generation = int(body["metadata"].get("generation") or 0)
    prev_status = dict(body.get("status") or {})
    try:
        spec = spec_from_dict(body.get("spec") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.get("loc", ()))
        return _failed(observed, "InvalidSpec", f"{where}: {first.get('msg')}", generation)

    replicas = total_replicas(spec, prev_status)
    now = parse_time(observed.now) or dt.datetime.now(dt.UTC)
    outages = node_outages(observed.nodes, now, observed.node_grace_seconds)
    spec_unchanged = prev_status.get("observedGeneration") == generation
    held = held_gpus(outages, observed.pods, now) if spec_unchanged else {}
    capacity = observed_capacity(
        parse_gpu_pools(observed.nodes, observed.gpus_used, held), observed.nodes, observed.elastic,
        observed.pods, observed.now, replicas, spec.gpu.allow_multi_node,
    )  # fmt: skip
    pools = capacity.pools
    spec_dict = spec.model_dump(by_alias=True, exclude_none=True)
    spec_dict["replicas"] = replicas
    try:
        request = placement_request_from_spec(spec_dict, pools, observed.default_image)
        plan = plan_placement(request)
    except (PlanningInputError, FitInputError, ValueError, KeyError) as exc:
        return _failed(observed, "InvalidSpec", str(exc), generation)
    except Exception as exc:  # a planner bug on an odd spec: say so in status, never retry in a loop
        where = "spec.model.config" if spec.model.config is not None else "spec"
        message = f"{where}: the planner failed on this spec ({type(exc).__name__}: {str(exc)[:300]})"
        return _failed(observed, "InvalidSpec", message, generation)
    if not plan.fits:
        reason = "NoGPUFits" if pools else "NoGPUNodes"
        message = plan_summary(plan)
        if plan.details:  # the last rejection's details, or why there was nothing to reject
            message += ". " + " ".join(plan.details[-2:] if plan.rejected else plan.details[-1:])
        machines = [largest_machines_note(capacity.elastic, r.gpu_product) for r in plan.rejected]
        if any(machines):
            message += (
                " Node pools: " + "; ".join(m for m in machines if m) + ". fix: one replica must fit on one "
                "machine: allow a GPU type with more memory per machine (gpu.products), a lower quantization "
                "or a shorter contextLength, gpu.allowMultiNode: true, or give the NodePool larger instance "
                "types or higher limits."
            )
        desired = _failed(observed, reason, message, generation)
        status = {**desired.status, "plan": _plan_status(plan), "desiredReplicas": replicas}
        return Desired(plan=plan, objects=(), prune=(), status=status, events=desired.events)

    image = spec.serving.image or observed.default_image
    image_check = check_request_image(image, request)
    if image_check.error is not None:
        desired = _failed(observed, "VLLMImageTooOld", image_check.error, generation)
        status = {**desired.status, "plan": _plan_status(plan), "desiredReplicas": replicas}
        return Desired(plan=plan, objects=(), prune=(), status=status, events=desired.events)

    summary = plan_summary(plan)
    placed = _with_overflow(plan)
    extra_findings = _outage_findings([outages[n] for n in sorted(held)], observed.node_grace_seconds)
    if not observed.lws_available and any(v.nodes_per_replica > 1 for v in placed):
        extra_findings.append(
            Diagnosis(
                reason="LeaderWorkerSetMissing",
                message="the plan needs replicas spanning several nodes, run as a LeaderWorkerSet, "
                "but the LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1) is not installed.",
                fix="install LeaderWorkerSet (kubernetes-sigs/lws), or give GPUs that fit one node "
                "(gpu.products), a lower quantization, a shorter contextLength or a lower minConcurrency.",
                pods=(),
            )
        )
        placed = [v for v in placed if v.nodes_per_replica == 1]
    model = request_model(request)
    vllm_defaults = model.serving_defaults if model is not None else None
    contexts = [_context(body, spec, v, observed.default_image, summary, vllm_defaults) for v in placed]
    objects = tuple(render_all(contexts)) if contexts else ()
    if observed.pod_monitor and contexts:
        interval = spec.autoscaling.interval_seconds if spec.autoscaling is not None else None
        objects += (render_pod_monitor(contexts[0], interval_seconds=interval),)
    wanted = {_child_key(o) for o in objects}
    unwanted = [c for c in observed.children if _child_key(c) not in wanted]

    # Replica counts from the children that will remain, compared with what we now want.
    kept = [c for c in observed.children if _child_key(c) in wanted]
    ready = _sum(kept, "readyReplicas")
    updated = _updated_replicas(kept, objects)
    planned = sum(v.replicas for v in placed)
    if spec_unchanged and ready < planned:  # make before break: the replacement is not ready yet
        unwanted = [c for c in unwanted if _sum([c], "readyReplicas") == 0]
    unwanted += [m for m in observed.pod_monitors if _child_key(m) not in wanted]
    prune = tuple(sorted(_child_key(c) for c in unwanted))
    waiting = _waiting_for_nodes(observed, placed, {w.name for w in capacity.waiting})
    limits = pool_limits_note(capacity.elastic, [v.gpu_product for v in plan.variants])
    if plan.shortfall_replicas and limits:
        extra_findings.append(
            Diagnosis(
                reason="InsufficientGPU",
                message=f"{plan.shortfall_replicas} of {replicas} replicas fit neither on free GPUs nor "
                f"on the nodes the node pools can still add: {limits}.",
                fix="raise the node pool's limits (NodePool spec.limits), allow more gpu.products, "
                "or lower replicas / autoscaling.maxReplicas.",
                pods=(),
            )
        )
    degraded: list[Diagnosis] = extra_findings + diagnose_pods(
        [p for p in observed.pods if str((p.get("metadata") or {}).get("name", "")) not in waiting]
    )
    phase, conditions = summarize(
        True, "Planned", planned, ready, updated, degraded, generation,
        list(prev_status.get("conditions") or []), observed.now,
        plan_message=summary, metrics=observed.metrics,
    )  # fmt: skip
    new_status: dict[str, Any] = {
        **_base_status(observed, generation),
        "readyReplicas": ready,
        "phase": str(phase),
        "conditions": conditions,
        "plan": _plan_status(plan),
        "desiredReplicas": replicas,
        "model": served_model_name(spec),
        "gpu": ", ".join(f"{v.replicas}x {v.gpu_product}" for v in placed) or "-",
        "tensorParallelSize": ",".join(str(v.tensor_parallel_size) for v in placed) or "-",
        "quantization": ",".join(sorted({v.quantization for v in placed})) or "-",
    }
    events: list[Event] = []
    previous_summary = (prev_status.get("plan") or {}).get("summary")
    if previous_summary != summary:
        detail = " ".join(v.reason + "".join(f" Note: {n}." for n in v.notes) for v in placed)
        events.append(Event("Normal", "Planned", f"{summary}. {detail}"[:1000]))
        if image_check.warning is not None:
            events.append(Event("Warning", "VLLMImageUnchecked", image_check.warning))
        if plan.shortfall_replicas:
            events.append(
                Event(
                    "Warning",
                    "InsufficientGPU",
                    f"{plan.shortfall_replicas} of {replicas} replicas cannot be placed on free GPUs"
                    + (f" ({limits})" if limits else "")
                    + "; their pods stay Pending. Add GPU nodes, allow more gpu.products, or lower replicas.",
                )
            )
        new_nodes = [v for v in placed if v.new_node_replicas]
        if new_nodes:
            events.append(
                Event(
                    "Normal",
                    "WaitingForNodes",
                    "; ".join(
                        f"{v.new_node_replicas} {v.gpu_product} replica(s) wait for new nodes from "
                        f"{', '.join(v.node_pools)}"
                        for v in new_nodes
                    ),
                )
            )
    previous_degraded = get_condition(prev_status.get("conditions") or [], "Degraded") or {}
    for d in degraded:
        if previous_degraded.get("reason") != d.reason or previous_degraded.get("status") != "True":
            events.append(Event("Warning", d.reason, f"{d.message} Fix: {d.fix}"))
    expiry = next_expiry((outages[n] for n in held), now, held)
    return Desired(
        plan=plan,
        objects=objects,
        prune=prune,
        status=new_status,
        events=tuple(events),
        requeue_after=None if expiry is None else expiry + 1.0,
    )


def _outage_findings(held: Sequence[NodeOutage], grace: float) -> list[Diagnosis]:
    """Degraded GPUNodesUnavailable for replicas kept on NotReady/Unknown nodes (a cordon is not)."""
    down = [o for o in held if o.expires is not None]
    if not down:
        return []
    until = min(o.expires for o in down if o.expires is not None)
    return [
        Diagnosis(
            reason=Reason.GPU_NODES_UNAVAILABLE,
            message=f"GPU nodes {', '.join(o.describe() for o in down)} are unavailable; the replicas "
            f"on them keep their place for the node grace period of {grace:g} s (until "
            f"{format_time(until)}), then they are re-planned onto available GPUs.",
            fix="nothing, if the nodes come back; otherwise check them (kubectl describe node) or delete "
            "them to re-plan at once.",
            pods=(),
        )
    ]


def _waiting_for_nodes(observed: Observed, placed: Sequence[Variant], waiting: set[str]) -> set[str]:
    """Pods that wait for a node a node autoscaler launches (not a degradation, within the grace
    period): those the capacity kept for a launching node, and per variant as many Pending pods
    as it has replicas planned on new nodes."""
    out = set(waiting)
    for v in placed:
        label = names.label_value(variant_slug(v.key))
        pending = sorted(
            str(p["metadata"]["name"])
            for p in observed.pods
            if (p.get("metadata", {}).get("labels") or {}).get(names.LABEL_VARIANT) == label
            and is_waiting_for_node(p, observed.now, observed.elastic.grace_seconds)
        )
        out.update(pending[: v.new_node_replicas])
    return out


def _with_overflow(plan: Plan) -> list[Variant]:
    """Variants with replicas; the shortfall goes to the preferred variant so it shows as Pending."""
    variants = list(plan.variants)
    if plan.shortfall_replicas > 0 and variants:
        first = variants[0]
        variants[0] = dataclasses.replace(first, replicas=first.replicas + plan.shortfall_replicas)
    return [v for v in variants if v.replicas > 0]


def _plan_status(plan: Plan) -> dict[str, Any]:
    return {
        "variants": [_variant_status(v) for v in plan.variants],
        "rejected": [{"gpuProduct": r.gpu_product, "reason": r.reason} for r in plan.rejected],
        "summary": plan_summary(plan),
    }


def _updated_replicas(children: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]]) -> int:
    """Replicas of children whose pod template already carries the wanted spec hash."""
    wanted_hash = {}
    for obj in objects:
        labels = template_labels(obj)
        if names.LABEL_SPEC_HASH in labels:
            wanted_hash[_child_key(obj)] = labels[names.LABEL_SPEC_HASH]
    total = 0
    for child in children:
        key = _child_key(child)
        if wanted_hash.get(key) and template_labels(child).get(names.LABEL_SPEC_HASH) == wanted_hash[key]:
            status = child.get("status") or {}
            if int(status.get("observedGeneration") or 0) >= int(child["metadata"].get("generation") or 0):
                total += int(status.get("updatedReplicas") or 0)
    return total


def template_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    spec = obj.get("spec") or {}
    template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
    return dict((template.get("metadata") or {}).get("labels") or {})
