"""Step 2 of the pipeline: the child objects of a fitting plan (pure).

Each placed variant (one GPU type with its TP/PP, quantization and replicas) becomes a
``WorkloadContext``; the renderer turns the contexts into a Deployment or LeaderWorkerSet per
variant and one Service and PodDisruptionBudget per GLMDeployment, plus a PodMonitor when the
operator renders them. Workloads come first in ``objects``: the apply step sends them first, they
start the long path (scheduling, image pull, model load).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from glm_operator.api.v1alpha1 import HF_CACHE_MOUNT_PATH, GLMDeploymentSpec
from glm_operator.catalog.vllm import ServingDefaults
from glm_operator.desired.model import WORKLOAD_KIND_NAMES, ChildRef
from glm_operator.planning.placement.result import Variant
from glm_operator.render import names, sizing
from glm_operator.render.context import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    SecretKeyRef,
    WorkloadContext,
    speculative_config,
)
from glm_operator.render.monitoring import render_pod_monitor
from glm_operator.render.objects import render_all


def variant_slug(gpu_product: str) -> str:
    """Short DNS-safe name of a GPU type: NVIDIA-H100-80GB-HBM3 -> h100-80gb-hbm3."""
    slug = re.sub(r"^nvidia[-_ ]", "", gpu_product.strip().lower())
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-") or "gpu"
    return names.dns_label(slug, 30)


def served_model_name(spec: GLMDeploymentSpec) -> str:
    """vLLM --served-model-name: the spec's, else the last segment of the model id, lower-cased."""
    if spec.model.served_model_name:
        return spec.model.served_model_name
    if spec.model.id:
        return spec.model.id.rsplit("/", 1)[-1].lower()
    return "model"


def child_ref(obj: Mapping[str, Any]) -> ChildRef:
    return (str(obj["apiVersion"]), str(obj["kind"]), str(obj["metadata"]["name"]))


def template_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The pod template's labels of a Deployment or a LeaderWorkerSet (its leader template)."""
    spec = obj.get("spec") or {}
    template = spec.get("template") or (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
    return dict((template.get("metadata") or {}).get("labels") or {})


def workload_context(
    body: Mapping[str, Any],
    spec: GLMDeploymentSpec,
    variant: Variant,
    default_image: str,
    plan_text: str,
    vllm_defaults: ServingDefaults | None = None,
) -> WorkloadContext:
    """Everything the renderer needs for one placed variant."""
    meta = body["metadata"]
    serving = spec.serving
    requirements = tuple(
        NodeSelectorRequirement(key=k, operator="In", values=(v,))
        for k, v in sorted(variant.node_selector.items())
    )
    source = spec.model.source or ""
    if source.startswith("hf://") and spec.model.id and variant.model_id != spec.model.id:
        source = ""  # the planner picked the official quantized checkpoint of the same model
    api_key = hf_token = None
    if serving.api_key_secret_ref is not None:
        api_key = SecretKeyRef(name=serving.api_key_secret_ref.name, key=serving.api_key_secret_ref.key)
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
        image=serving.image or default_image,
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
        port=serving.port,
        quantization=variant.quantization_flag,
        kv_cache_dtype=None if variant.kv_cache_dtype in ("auto", "") else variant.kv_cache_dtype,
        extra_args=tuple(serving.extra_args),
        enable_expert_parallel=variant.enable_expert_parallel,
        decode_context_parallel_size=variant.decode_context_parallel_size,
        data_parallel_size=variant.data_parallel_size,
        speculative_config=speculative_config(variant.speculative_tokens),
        max_num_batched_tokens=variant.max_num_batched_tokens,
        trust_remote_code=bool(vllm_defaults and vllm_defaults.trust_remote_code),
        tool_call_parser=vllm_defaults.tool_call_parser if vllm_defaults else None,
        reasoning_parser=vllm_defaults.reasoning_parser if vllm_defaults else None,
        env=tuple(e.model_dump(by_alias=True, exclude_none=True) for e in serving.env),
        resources=serving.resources.model_dump(by_alias=True, exclude_none=True) if serving.resources else {},
        resource_name=variant.resource_name,
        node_selector_terms=(NodeSelectorTerm(match_expressions=requirements),) if requirements else (),
        tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True) for t in serving.tolerations),
        node_selector=dict(serving.node_selector),
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


def render_children(
    contexts: Sequence[WorkloadContext], spec: GLMDeploymentSpec, pod_monitor: bool
) -> tuple[dict[str, Any], ...]:
    """The child objects of the placed variants, workloads first; a PodMonitor when wanted."""
    if not contexts:
        return ()
    objects = render_all(contexts)
    if pod_monitor:
        interval = spec.autoscaling.interval_seconds if spec.autoscaling is not None else None
        objects.append(render_pod_monitor(contexts[0], interval_seconds=interval))
    objects.sort(key=lambda obj: obj["kind"] not in WORKLOAD_KIND_NAMES)  # stable: order kept otherwise
    return tuple(objects)


def updated_replicas(children: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]]) -> int:
    """Replicas of children whose pod template already carries the wanted spec hash."""
    wanted_hash = {}
    for obj in objects:
        labels = template_labels(obj)
        if names.LABEL_SPEC_HASH in labels:
            wanted_hash[child_ref(obj)] = labels[names.LABEL_SPEC_HASH]
    total = 0
    for child in children:
        ref = child_ref(child)
        if wanted_hash.get(ref) and template_labels(child).get(names.LABEL_SPEC_HASH) == wanted_hash[ref]:
            status = child.get("status") or {}
            if int(status.get("observedGeneration") or 0) >= int(child["metadata"].get("generation") or 0):
                total += int(status.get("updatedReplicas") or 0)
    return total


def replica_sum(children: Sequence[Mapping[str, Any]], field_name: str) -> int:
    """``status.<field_name>`` summed over workloads (replicas, readyReplicas)."""
    return sum(int((c.get("status") or {}).get(field_name) or 0) for c in children)
