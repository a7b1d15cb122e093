"""compute_desired on whole scenarios: the fixture cluster, no apiserver."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api.v1alpha1 import spec_from_dict
from glm_operator.desired import Observed, compute_desired
from glm_operator.desired.children import variant_slug
from glm_operator.desired.plan import total_replicas
from glm_operator.desired.status import own_fields as own_status_fields
from glm_operator.planning.diagnosis.conditions import MetricsStatus

ROOT = Path(__file__).resolve().parents[2]
NODES = yaml.safe_load((ROOT / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]
NOW = "2026-11-30T00:00:00Z"


def body(
    name: str = "g", generation: int = 1, status: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "metadata": {"name": name, "namespace": "llm", "uid": "uid-1", "generation": generation},
        "spec": spec,
        "status": status or {},
    }


def observe(b: dict[str, Any], **kw: Any) -> Observed:
    args: dict[str, Any] = {
        "body": b,
        "nodes": NODES,
        "gpus_used": {},
        "children": [],
        "pods": [],
        "default_image": "vllm/vllm-openai:v0.33.0-test",
        "now": NOW,
    }
    args.update(kw)
    return Observed(**args)


def args_of(deployment: dict[str, Any]) -> list[str]:
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    return list(c.get("command", [])) + list(c.get("args", []))


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


def test_glm_4_5_air_on_h100_renders_one_deployment_and_the_service() -> None:
    d = compute_desired(
        observe(body(model={"id": "zai-org/GLM-4.5-Air"}, contextLength=32768, gpu={"products": ["H100"]}))
    )
    assert d.plan is not None and d.plan.fits
    kinds = sorted(o["kind"] for o in d.objects)
    assert kinds == ["Deployment", "PodDisruptionBudget", "Service"]
    dep = next(o for o in d.objects if o["kind"] == "Deployment")
    v = d.plan.variants[0]
    a = args_of(dep)
    assert flag(a, "--tensor-parallel-size") == str(v.tensor_parallel_size)
    assert flag(a, "--max-model-len") == "32768"
    assert flag(a, "--served-model-name") == "glm-4.5-air"
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.33.0-test"
    assert dep["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert d.status["phase"] == "Deploying"  # nothing is ready yet
    conds = by_type(d.status["conditions"])
    assert conds["Planned"]["status"] == "True" and conds["Available"]["status"] == "False"
    assert d.status["selector"].startswith("app.kubernetes.io/component=inference")
    assert [e.reason for e in d.events] == ["Planned"]
    assert d.status["plan"]["license"] == "MIT"  # from the catalog, shown to the user
    predicted = d.status["plan"]["variants"][0]["predicted"]
    assert predicted["kneeConcurrency"] == v.knee_concurrency and 1 <= v.knee_concurrency <= v.max_num_seqs
    assert predicted["outputTokensPerSecondPerGPU"] > 0


def test_unfit_model_creates_nothing_and_keeps_running_children() -> None:
    running = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "g-l4"},
        "status": {"replicas": 1},
    }
    b = body(
        model={"id": "zai-org/GLM-4.6"}, quantization="bf16", contextLength=131072, gpu={"products": ["L4"]}
    )
    d = compute_desired(observe(b, children=[running]))
    assert d.objects == () and d.prune == ()  # the last good configuration keeps serving
    conds = by_type(d.status["conditions"])
    assert conds["Planned"]["status"] == "False"
    assert conds["Planned"]["reason"] == "NoGPUFits"
    assert d.status["phase"] == "Failed"
    assert d.events and d.events[0].type == "Warning"


def test_same_failure_twice_posts_no_second_event() -> None:
    b = body(
        model={"id": "zai-org/GLM-4.6"}, quantization="bf16", contextLength=131072, gpu={"products": ["L4"]}
    )
    first = compute_desired(observe(b))
    again = compute_desired(observe({**b, "status": first.status}))
    assert first.events and not again.events


def test_shortfall_goes_to_the_preferred_type_so_it_shows_pending() -> None:
    # GLM-4-9B bf16 needs TP=2 on an L4 at 64k: at TP=1 vLLM 0.33 leaves ~1.6 GiB of KV cache, about
    # 41k tokens (0.63 of a sequence). 12 free L4s hold 6 replicas of 14.
    b = body(
        model={"id": "zai-org/glm-4-9b-chat"},
        quantization="bf16",
        contextLength=65536,
        gpu={"products": ["L4"]},
        replicas=14,
    )
    d = compute_desired(observe(b))
    assert d.plan is not None
    (variant,) = d.plan.variants
    assert (variant.tensor_parallel_size, variant.replicas, variant.capacity_replicas) == (2, 6, 6)
    assert d.plan.shortfall_replicas == 8
    (dep,) = [o for o in d.objects if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 14
    assert any(e.reason == "InsufficientGPU" for e in d.events)


def test_gpus_held_by_other_workloads_reduce_capacity() -> None:
    b = body(model={"id": "zai-org/glm-4-9b-chat"}, contextLength=8192, gpu={"products": ["L4"]}, replicas=12)
    used = {f"l4-{i}": {"nvidia.com/gpu": 4} for i in range(3)}
    d = compute_desired(observe(b, gpus_used=used))
    assert d.plan is not None and d.plan.shortfall_replicas == 12


def test_children_the_plan_no_longer_wants_are_pruned() -> None:
    stale = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "g-a100-sxm4-80gb"}}
    b = body(model={"id": "zai-org/glm-4-9b-chat"}, contextLength=8192, gpu={"products": ["L4"]})
    d = compute_desired(observe(b, children=[stale]))
    assert d.prune == (("apps/v1", "Deployment", "g-a100-sxm4-80gb"),)


def test_multi_node_variant_without_leaderworkerset_is_degraded_not_created() -> None:
    b = body(
        model={"id": "zai-org/GLM-5.2"},
        quantization="fp8",
        kvCacheDtype="fp8",
        contextLength=65536,
        minConcurrency=4,
        gpu={"products": ["NVIDIA-H100-80GB-HBM3"], "tensorParallelSize": 8, "allowMultiNode": True},
    )
    without = compute_desired(observe(b, lws_available=False))
    assert not [o for o in without.objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]
    assert by_type(without.status["conditions"])["Degraded"]["reason"] == "LeaderWorkerSetMissing"
    with_lws = compute_desired(observe(b, lws_available=True))
    lws = [o for o in with_lws.objects if o["kind"] == "LeaderWorkerSet"]
    assert len(lws) == 1 and lws[0]["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_mixed_machine_variants_use_the_per_type_resource_name() -> None:
    b = body(
        model={"id": "zai-org/glm-4-9b-chat"},
        contextLength=8192,
        gpu={"products": ["A100-80GB-PCIe", "RTX-4090"]},
        replicas=2,
    )
    d = compute_desired(observe(b))
    deps = [o for o in d.objects if o["kind"] == "Deployment"]
    resources = {
        k
        for dep in deps
        for k in dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        if k.startswith("nvidia.com/")
    }
    assert resources == {"nvidia.com/a100-80gb", "nvidia.com/rtx-4090"}
    assert len({dep["metadata"]["name"] for dep in deps}) == 2


def test_invalid_spec_is_reported_with_the_field() -> None:
    d = compute_desired(observe(body(model={"id": "zai-org/GLM-4.5-Air"}, contextLength=10)))
    planned = by_type(d.status["conditions"])["Planned"]
    assert planned["reason"] == "InvalidSpec" and "contextLength" in planned["message"]
    assert d.objects == ()


def test_autoscaling_total_comes_from_status_and_is_clamped() -> None:
    spec = spec_from_dict(
        {"model": {"id": "zai-org/GLM-4.5-Air"}, "autoscaling": {"minReplicas": 2, "maxReplicas": 5}}
    )
    assert total_replicas(spec, {}) == 2
    assert total_replicas(spec, {"desiredReplicas": 4}) == 4
    assert total_replicas(spec, {"desiredReplicas": 9}) == 5


def test_metrics_condition_is_carried_into_status() -> None:
    b = body(
        model={"id": "zai-org/glm-4-9b-chat"},
        contextLength=8192,
        gpu={"products": ["L4"]},
        autoscaling={"minReplicas": 1, "maxReplicas": 3},
    )
    d = compute_desired(
        observe(b, metrics=MetricsStatus(False, "MetricsUnavailable", "prometheus unreachable"))
    )
    cond = by_type(d.status["conditions"])["MetricsAvailable"]
    assert cond["status"] == "False" and "unreachable" in cond["message"]


def test_status_is_stable_when_nothing_changes() -> None:
    b = body(model={"id": "zai-org/glm-4-9b-chat"}, contextLength=8192, gpu={"products": ["L4"]})
    first = compute_desired(observe(b))
    second = compute_desired(
        observe({**copy.deepcopy(b), "status": first.status}, now="2026-11-30T01:00:00Z")
    )
    assert second.status == first.status  # lastTransitionTime does not move without a flip
    assert not second.events


@pytest.mark.parametrize(
    ("product", "slug"),
    [
        ("NVIDIA-H100-80GB-HBM3", "h100-80gb-hbm3"),
        ("nvidia-l4", "l4"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ],
)
def test_variant_slug(product: str, slug: str) -> None:
    assert variant_slug(product) == slug


def test_reconcile_leaves_desired_replicas_to_a_running_autoscaler_only() -> None:
    body = {"spec": {"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}}
    status = {"phase": "Ready", "desiredReplicas": 2, "autoscaler": {"state": {}}}
    assert own_status_fields(body, status, autoscaler_running=True) == {"phase": "Ready"}
    assert own_status_fields(body, status, autoscaler_running=False) == status
    assert own_status_fields({"spec": {}}, status, autoscaler_running=True) == status


def test_status_shows_the_shapes_auto_compared_and_the_args_follow_the_chosen_one() -> None:
    d = compute_desired(observe(body(model={"id": "zai-org/GLM-4.7-Flash"}, gpu={"products": ["H100"]})))
    (variant,) = d.status["plan"]["variants"]
    considered = variant["considered"]
    shapes = [(c["quantization"], c["tensorParallelSize"], c["chosen"], c["firstFit"]) for c in considered]
    assert shapes[0] == ("fp8", 1, True, False) and ("bf16", 1, False, True) in shapes
    assert all(c["lost"] for c in considered[1:]) and not considered[0].get("lost")
    per_gpu = [c["outputTokensPerSecondPerGPU"] for c in considered[1:]]
    assert per_gpu == sorted(per_gpu, reverse=True)
    assert considered[0]["outputTokensPerSecondPerGPU"] == variant["predicted"]["outputTokensPerSecondPerGPU"]
    assert considered[0]["maxNumSeqs"] == variant["maxNumSeqs"] and considered[0]["meetsSLO"] is True
    dep = next(o for o in d.objects if o["kind"] == "Deployment")
    a = args_of(dep)
    assert flag(a, "--quantization") == "fp8" and flag(a, "--max-num-seqs") == str(variant["maxNumSeqs"])
    # with bf16 as the floor only bf16 shapes are compared and no --quantization is rendered
    floor = compute_desired(
        observe(
            body(
                model={"id": "zai-org/GLM-4.7-Flash"},
                allowedQuantizations=["bf16"],
                gpu={"products": ["H100"]},
            )
        )
    )
    (kept,) = floor.status["plan"]["variants"]
    assert kept["quantization"] == "bf16" and all(c["quantization"] == "bf16" for c in kept["considered"])
    assert "--quantization" not in args_of(next(o for o in floor.objects if o["kind"] == "Deployment"))
