"""The GLMDeployment pydantic models: defaults, bounds, aliases, cross-field rules."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from glm_operator.api import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    GLMDeployment,
    GLMDeploymentSpec,
    GLMDeploymentStatus,
    spec_from_dict,
    status_from_dict,
)

MINIMAL: dict[str, Any] = {"model": {"id": "zai-org/GLM-4.5-Air"}}


def with_changes(**changes: Any) -> dict[str, Any]:
    """MINIMAL with nested changes given as dotted camelCase paths (``gpu__tensorParallelSize``)."""
    spec: dict[str, Any] = {"model": dict(MINIMAL["model"])}
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = spec
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return spec


def test_constants() -> None:
    assert (GROUP, VERSION, KIND, PLURAL) == (
        "inference.glm.dev",
        "v1alpha1",
        "GLMDeployment",
        "glmdeployments",
    )
    assert API_VERSION == "inference.glm.dev/v1alpha1"


def test_defaults() -> None:
    spec = spec_from_dict(MINIMAL)
    assert spec.quantization == "auto"
    assert spec.kv_cache_dtype == "auto"
    assert spec.context_length == 32768
    assert spec.min_concurrency == 1
    assert spec.replicas == 1
    assert spec.autoscaling is None
    assert spec.gpu.products == []
    assert spec.gpu.memory_utilization is None  # the vLLM release's own default
    assert spec.gpu.tensor_parallel_size == 0
    assert spec.gpu.pipeline_parallel_size == 0
    assert spec.gpu.allow_multi_node is False
    assert spec.serving.port == 8000
    assert spec.serving.image is None
    assert spec.serving.max_num_seqs is None
    assert spec.effective_source == "hf://zai-org/GLM-4.5-Air"


def test_autoscaling_defaults() -> None:
    spec = spec_from_dict(with_changes(autoscaling={}))
    assert spec.autoscaling is not None
    assert (spec.autoscaling.min_replicas, spec.autoscaling.max_replicas) == (1, 8)
    assert spec.autoscaling.target_queue_length == 4
    assert spec.autoscaling.scale_up_stabilization_seconds == 0
    assert spec.autoscaling.scale_down_stabilization_seconds == 300
    assert spec.autoscaling.interval_seconds == 15


def test_camel_case_on_the_wire_snake_case_in_python() -> None:
    wire = {
        "model": {"id": "zai-org/GLM-4.7-Flash", "servedModelName": "glm-flash"},
        "kvCacheDtype": "fp8",
        "contextLength": 65536,
        "minConcurrency": 4,
        "gpu": {"memoryUtilization": 0.85, "tensorParallelSize": 2, "products": ["L4"]},
        "serving": {
            "apiKeySecretRef": {"name": "glm-key"},
            "maxNumSeqs": 64,
            "modelCache": {"claimName": "hf-cache"},
            "nodeSelector": {"pool": "gpu"},
        },
    }
    spec = spec_from_dict(wire)
    assert spec.model.served_model_name == "glm-flash"
    assert spec.kv_cache_dtype == "fp8"
    assert spec.gpu.tensor_parallel_size == 2
    assert spec.serving.api_key_secret_ref is not None
    assert spec.serving.api_key_secret_ref.key == "api-key"
    assert spec.serving.model_cache is not None
    assert spec.serving.model_cache.mount_path == "/root/.cache/huggingface"
    out = spec.to_wire()
    assert out["contextLength"] == 65536
    assert out["gpu"]["memoryUtilization"] == 0.85
    assert out["serving"]["modelCache"]["claimName"] == "hf-cache"
    assert "context_length" not in out
    # snake_case is accepted on input too (populate_by_name), and round-trips.
    snake = spec.model_dump()
    assert GLMDeploymentSpec.model_validate(snake) == spec
    assert spec_from_dict(out) == spec


def test_plan_variant_aliases() -> None:
    status = status_from_dict(
        {
            "observedGeneration": 2,
            "phase": "Ready",
            "plan": {
                "variants": [
                    {
                        "gpuProduct": "H100-80GB",
                        "tensorParallelSize": 2,
                        "gpusPerReplica": 2,
                        "quantization": "bf16",
                        "kvCacheDtype": "auto",
                        "weightsGiBPerGPU": 99.6,
                        "kvCacheTokens": 500000,
                        "maxConcurrency": 15.2,
                        "maxNumSeqs": 64,
                        "replicas": 2,
                    }
                ],
                "rejected": [{"gpuProduct": "L4", "reason": "weights do not fit"}],
            },
            "conditions": [
                {"type": "Available", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}
            ],
        }
    )
    assert status.plan is not None
    variant = status.plan.variants[0]
    assert variant.weights_gib_per_gpu == 99.6
    assert variant.pipeline_parallel_size == 1
    assert variant.to_wire()["weightsGiBPerGPU"] == 99.6
    assert status_from_dict(None) == GLMDeploymentStatus()


def test_whole_object() -> None:
    obj = GLMDeployment.model_validate(
        {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "glm"}, "spec": MINIMAL}
    )
    assert obj.spec.model.id == "zai-org/GLM-4.5-Air"
    with pytest.raises(ValidationError):
        GLMDeployment.model_validate({"apiVersion": "v1", "kind": KIND, "spec": MINIMAL})


GOOD_SPECS: list[dict[str, Any]] = [
    MINIMAL,
    {"model": {"config": {"num_hidden_layers": 2}}},
    with_changes(model__source="hf://zai-org/GLM-4.5-Air@main"),
    with_changes(model__source="pvc://models/glm/air"),
    with_changes(model__source="s3://my-bucket/glm-4.5-air/"),
    with_changes(gpu__memoryUtilization=0.5),
    with_changes(gpu__memoryUtilization=0.95),
    with_changes(gpu__tensorParallelSize=8),
    with_changes(gpu__pipelineParallelSize=2, gpu__allowMultiNode=True),
    with_changes(contextLength=256),
    with_changes(replicas=0),
    with_changes(autoscaling={"minReplicas": 3, "maxReplicas": 3}),
    with_changes(minConcurrency=8, serving__maxNumSeqs=8),
    with_changes(serving__extraArgs=["--enable-prefix-caching", "--max-num-batched-tokens=8192"]),
    with_changes(
        serving__env=[
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
    ),
    with_changes(serving__resources={"requests": {"cpu": 8, "memory": "64Gi"}}),
    with_changes(serving__tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
]


@pytest.mark.parametrize("spec", GOOD_SPECS)
def test_good_specs(spec: dict[str, Any]) -> None:
    spec_from_dict(spec)


BAD_SPECS: dict[str, tuple[dict[str, Any], str]] = {
    "missing model": ({}, "model"),
    "model without id or config": ({"model": {"servedModelName": "x"}}, "model.id or model.config"),
    "unknown quantization": (with_changes(quantization="fp4"), "quantization"),
    "unknown kv cache dtype": (with_changes(kvCacheDtype="int8"), "kvCacheDtype"),
    "context too short": (with_changes(contextLength=255), "contextLength"),
    "negative context": (with_changes(contextLength=-1), "contextLength"),
    "context as string": (with_changes(contextLength="long"), "contextLength"),
    "memory utilisation too high": (with_changes(gpu__memoryUtilization=0.99), "memoryUtilization"),
    "memory utilisation too low": (with_changes(gpu__memoryUtilization=0.4), "memoryUtilization"),
    "tp 3": (with_changes(gpu__tensorParallelSize=3), "tensorParallelSize"),
    "tp 64": (with_changes(gpu__tensorParallelSize=64), "tensorParallelSize"),
    "pp without multi node": (with_changes(gpu__pipelineParallelSize=2), "allowMultiNode"),
    "min above max": (with_changes(autoscaling={"minReplicas": 5, "maxReplicas": 2}), "minReplicas"),
    "min replicas negative": (with_changes(autoscaling={"minReplicas": -1}), "minReplicas"),
    "idle without zero": (with_changes(autoscaling={"minReplicas": 1, "idleSeconds": 60}), "idleSeconds"),
    "negative replicas": (with_changes(replicas=-1), "replicas"),
    "bad source scheme": (with_changes(model__source="http://example.com/glm"), "source"),
    "unknown field": (with_changes(gpu__count=8), "count"),
    "unknown top-level field": (with_changes(tensorParallelSize=8), "tensorParallelSize"),
    "port out of range": (with_changes(serving__port=70000), "port"),
    "maxNumSeqs below minConcurrency": (with_changes(minConcurrency=8, serving__maxNumSeqs=4), "maxNumSeqs"),
    "managed flag in extraArgs": (
        with_changes(serving__extraArgs=["--max-model-len=4096"]),
        "--max-model-len",
    ),
    "env value and valueFrom": (
        with_changes(
            serving__env=[
                {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
            ]
        ),
        "mutually exclusive",
    ),
    "products not a list": (with_changes(gpu__products="H100"), "products"),
}


@pytest.mark.parametrize("spec,needle", BAD_SPECS.values(), ids=list(BAD_SPECS))
def test_bad_specs(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        spec_from_dict(spec)
    assert needle in str(info.value)


def test_every_field_has_a_description() -> None:
    from glm_operator.api import v1alpha1

    models = [
        obj
        for obj in vars(v1alpha1).values()
        if isinstance(obj, type) and issubclass(obj, v1alpha1._APIModel) and obj is not v1alpha1._APIModel
    ]
    assert len(models) > 15
    for model in models:
        assert model.__doc__, model.__name__
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
