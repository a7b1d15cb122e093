"""Render tests: whole objects compared as parsed YAML, plus the rules of DESIGN.md's workload section."""

from __future__ import annotations

import dataclasses
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glm_operator.render import names
from glm_operator.render.context import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OwnerReference,
    SecretKeyRef,
    WorkloadContext,
    resolve_model_location,
)
from glm_operator.render.objects import (
    build_vllm_args,
    multi_node_args,
    render_all,
    render_deployment,
    render_leaderworkerset,
    render_pod_disruption_budget,
    render_service,
    render_workload,
    template_environment,
)

H100 = "NVIDIA-H100-80GB-HBM3"


def make_ctx(**overrides: Any) -> WorkloadContext:
    values: dict[str, Any] = {
        "namespace": "llm",
        "deployment_name": "glm-air",
        "variant_name": "h100-80gb",
        "owner": OwnerReference(name="glm-air", uid="0b5e6c1e-1111-2222-3333-444455556666"),
        "image": "vllm/vllm-openai:v0.10.1",
        "model_id": "zai-org/GLM-4.5-Air",
        "served_model_name": "glm-4.5-air",
        "gpu_product": H100,
        "tensor_parallel_size": 1,
        "gpus_per_replica": 1,
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 64,
        "replicas": 2,
    }
    values.update(overrides)
    return WorkloadContext(**values)


H100_AFFINITY_TERMS = (NodeSelectorTerm((NodeSelectorRequirement("nvidia.com/gpu.product", "In", (H100,)),)),)

OWNER_REFS = [
    {
        "apiVersion": "inference.glm.dev/v1alpha1",
        "kind": "GLMDeployment",
        "name": "glm-air",
        "uid": "0b5e6c1e-1111-2222-3333-444455556666",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]

LABELS = {
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "glm-air",
    "app.kubernetes.io/component": "inference",
    "app.kubernetes.io/part-of": "glm-operator",
    "app.kubernetes.io/managed-by": "glm-operator",
    "inference.glm.dev/deployment": "glm-air",
    "inference.glm.dev/variant": "h100-80gb",
    "inference.glm.dev/gpu-product": H100,
}

PROBE = {"httpGet": {"path": "/health", "port": "http"}}


def test_deployment_whole_object_tp2_with_api_key_cache_and_affinity() -> None:
    ctx = make_ctx(
        tensor_parallel_size=2,
        gpus_per_replica=2,
        api_key_secret=SecretKeyRef(name="glm-api", key="token"),
        model_cache_claim="hf-cache",
        node_selector_terms=H100_AFFINITY_TERMS,
        resources={"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "128Gi"}},
        tolerations=({"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},),
        annotations={names.ANNOTATION_PLAN: "TP=2 is the smallest that holds 1 x 32768 tokens"},
    )
    expected = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "glm-air-h100-80gb",
            "namespace": "llm",
            "labels": LABELS,
            "annotations": {"inference.glm.dev/plan": "TP=2 is the smallest that holds 1 x 32768 tokens"},
            "ownerReferences": OWNER_REFS,
        },
        "spec": {
            "replicas": 2,
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 1800,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "vllm",
                    "app.kubernetes.io/instance": "glm-air",
                    "app.kubernetes.io/component": "inference",
                    "inference.glm.dev/variant": "h100-80gb",
                }
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {**LABELS, "inference.glm.dev/spec-hash": ctx.spec_hash}},
                "spec": {
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 120,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "nvidia.com/gpu.product",
                                                "operator": "In",
                                                "values": [H100],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.10.1",
                            "command": ["vllm", "serve"],
                            "args": [
                                "zai-org/GLM-4.5-Air",
                                "--served-model-name",
                                "glm-4.5-air",
                                "--host",
                                "0.0.0.0",
                                "--port",
                                "8000",
                                "--tensor-parallel-size",
                                "2",
                                "--max-model-len",
                                "32768",
                                "--gpu-memory-utilization",
                                "0.9",
                                "--max-num-seqs",
                                "64",
                            ],
                            "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                            "env": [
                                {
                                    "name": "VLLM_API_KEY",
                                    "valueFrom": {"secretKeyRef": {"name": "glm-api", "key": "token"}},
                                },
                                {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
                            ],
                            "resources": {
                                "limits": {"memory": "128Gi", "nvidia.com/gpu": "2"},
                                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"},
                            },
                            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "10"]}}},
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "volumeMounts": [
                                {"name": "model-cache", "mountPath": "/root/.cache/huggingface"},
                                {"name": "dshm", "mountPath": "/dev/shm"},
                            ],
                            "startupProbe": {
                                **PROBE,
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 120,
                            },
                            "readinessProbe": {
                                **PROBE,
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 3,
                            },
                            "livenessProbe": {
                                **PROBE,
                                "periodSeconds": 15,
                                "timeoutSeconds": 10,
                                "failureThreshold": 4,
                            },
                        }
                    ],
                    "volumes": [
                        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                    ],
                },
            },
        },
    }
    assert render_deployment(ctx) == expected


def test_service_whole_object() -> None:
    assert render_service(make_ctx()) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "glm-air",
            "namespace": "llm",
            "labels": {
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/instance": "glm-air",
                "app.kubernetes.io/component": "inference",
                "app.kubernetes.io/part-of": "glm-operator",
                "app.kubernetes.io/managed-by": "glm-operator",
                "inference.glm.dev/deployment": "glm-air",
            },
            "ownerReferences": OWNER_REFS,
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/instance": "glm-air",
                "app.kubernetes.io/component": "inference",
            },
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP", "appProtocol": "http"}
            ],
        },
    }


BASE_ARGS_TAIL = ["--max-model-len", "32768", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "64"]


def args_head(model: str = "zai-org/GLM-4.5-Air", port: str = "8000") -> list[str]:
    return [model, "--served-model-name", "glm-4.5-air", "--host", "0.0.0.0", "--port", port]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {},
            [*args_head(), "--tensor-parallel-size", "1", *BASE_ARGS_TAIL],
            id="tp1-defaults",
        ),
        pytest.param(
            {
                "tensor_parallel_size": 4,
                "gpus_per_replica": 4,
                "quantization": "fp8",
                "kv_cache_dtype": "fp8",
                "max_model_len": 131072,
                "gpu_memory_utilization": 0.95,
                "max_num_seqs": 16,
                "port": 9000,
                "extra_args": ("--enable-auto-tool-choice", "--tool-call-parser", "glm45"),
            },
            [
                *args_head(port="9000"),
                *(
                    "--tensor-parallel-size",
                    "4",
                    "--max-model-len",
                    "131072",
                    "--gpu-memory-utilization",
                    "0.95",
                ),
                *("--max-num-seqs", "16", "--quantization", "fp8", "--kv-cache-dtype", "fp8"),
                *("--enable-auto-tool-choice", "--tool-call-parser", "glm45"),
            ],
            id="tp4-fp8-online-fp8-kv-extra-args-last",
        ),
        pytest.param(
            {"model_source": "pvc://models-rwx/zai-org/GLM-4.5-Air-FP8", "dtype": "float16"},
            [
                *args_head(model="/models/zai-org/GLM-4.5-Air-FP8"),
                *("--tensor-parallel-size", "1", *BASE_ARGS_TAIL, "--dtype", "float16"),
            ],
            id="pvc-source-dtype",
        ),
        pytest.param(
            {"model_source": "s3://weights/glm-4.5-air/"},
            [
                *args_head(model="s3://weights/glm-4.5-air/"),
                *("--tensor-parallel-size", "1", *BASE_ARGS_TAIL, "--load-format", "runai_streamer"),
            ],
            id="s3-source-runai-streamer",
        ),
        pytest.param(
            {
                "tensor_parallel_size": 8,
                "pipeline_parallel_size": 2,
                "gpus_per_replica": 16,
                "nodes_per_replica": 2,
            },
            [
                *args_head(),
                *("--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"),
                *("--distributed-executor-backend", "mp", *BASE_ARGS_TAIL),
            ],
            id="multi-node-pp2-mp",
        ),
    ],
)
def test_vllm_args_exact(overrides: dict[str, Any], expected: list[str]) -> None:
    ctx = make_ctx(**overrides)
    assert build_vllm_args(ctx) == expected
    workload = render_workload(ctx)
    if ctx.multi_node:
        container = workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        expected = [*expected, *multi_node_args(ctx, leader=True)]
    else:
        container = workload["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == expected


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def test_no_shm_volume_when_tp1() -> None:
    pod = _pod_spec(render_deployment(make_ctx()))
    assert "volumes" not in pod
    assert "volumeMounts" not in pod["containers"][0]


def test_shm_volume_when_tp_above_one_with_configured_size() -> None:
    pod = _pod_spec(render_deployment(make_ctx(tensor_parallel_size=2, gpus_per_replica=2, shm_size="32Gi")))
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_api_key_only_through_secret_env() -> None:
    ctx = make_ctx(api_key_secret=SecretKeyRef(name="glm-api", key="token"))
    container = _pod_spec(render_deployment(ctx))["containers"][0]
    assert not any("api-key" in arg or "glm-api" in arg for arg in container["args"] + container["command"])
    assert container["env"] == [
        {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "glm-api", "key": "token"}}}
    ]


def test_per_type_resource_name_on_mixed_machine() -> None:
    ctx = make_ctx(
        variant_name="a100-80gb-pcie",
        gpu_product="NVIDIA-A100-PCIE-80GB",
        resource_name="nvidia.com/a100-80gb",
        # the user asked for a generic GPU too: it must not end up next to the per-type one
        resources={"limits": {"nvidia.com/gpu": 4, "memory": "96Gi"}},
    )
    pod = _pod_spec(render_deployment(ctx))
    assert pod["containers"][0]["resources"] == {
        "limits": {"memory": "96Gi", "nvidia.com/a100-80gb": "1"},
        "requests": {"nvidia.com/a100-80gb": "1"},
    }
    assert "affinity" not in pod  # the resource name alone pins the GPU type


def test_user_env_overrides_ours_by_name_without_duplicates() -> None:
    ctx = make_ctx(
        model_cache_claim="hf-cache",
        env=(
            {"name": "HF_HOME", "value": "/cache"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}},
        ),
    )
    env = _pod_spec(render_deployment(ctx))["containers"][0]["env"]
    assert env == [
        {"name": "HF_HOME", "value": "/cache"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}},
    ]


def test_pvc_model_source_mounts_claim_read_only() -> None:
    pod = _pod_spec(render_deployment(make_ctx(model_source="pvc://models-rwx/glm/air")))
    assert pod["volumes"] == [
        {"name": "models", "persistentVolumeClaim": {"claimName": "models-rwx", "readOnly": True}}
    ]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "models", "mountPath": "/models", "readOnly": True}
    ]
    assert pod["containers"][0]["args"][0] == "/models/glm/air"


def test_strings_that_look_like_yaml_scalars_stay_strings() -> None:
    ctx = make_ctx(
        served_model_name="yes", extra_args=("--seed", "0", "--override-generation-config", '{"a": 1}')
    )
    args = _pod_spec(render_deployment(ctx))["containers"][0]["args"]
    assert args[2] == "yes"
    assert args[-3:] == ["0", "--override-generation-config", '{"a": 1}']


def test_user_node_selector_image_pull_secrets_and_service_account() -> None:
    ctx = make_ctx(
        node_selector={"topology.kubernetes.io/zone": "eu-west-1a"},
        image_pull_secrets=("regcred",),
        service_account_name="vllm-s3",
    )
    pod = _pod_spec(render_deployment(ctx))
    assert pod["nodeSelector"] == {"topology.kubernetes.io/zone": "eu-west-1a"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "vllm-s3"


def test_extra_labels_never_override_ours() -> None:
    ctx = make_ctx(labels={"team": "ml", "app.kubernetes.io/component": "hacked"})
    obj = render_deployment(ctx)
    assert obj["metadata"]["labels"]["team"] == "ml"
    assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "inference"
    assert obj["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_startup_probe_budget_follows_timeout() -> None:
    obj = render_deployment(make_ctx(startup_timeout_seconds=3600))
    probe = _pod_spec(obj)["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 3600
    assert obj["spec"]["progressDeadlineSeconds"] > 3600


def test_leaderworkerset_multi_node() -> None:
    ctx = make_ctx(
        deployment_name="glm-46",
        owner=OwnerReference(name="glm-46", uid="u-46"),
        tensor_parallel_size=8,
        pipeline_parallel_size=2,
        gpus_per_replica=16,
        nodes_per_replica=2,
        replicas=1,
        api_key_secret=SecretKeyRef(name="glm-api", key="token"),
        node_selector_terms=H100_AFFINITY_TERMS,
    )
    lws = render_leaderworkerset(ctx)
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["kind"] == "LeaderWorkerSet"
    assert lws["metadata"]["name"] == "glm-46-h100-80gb"
    spec = lws["spec"]
    assert spec["replicas"] == 1
    assert spec["startupPolicy"] == "LeaderCreated"
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"

    leader = template["leaderTemplate"]
    worker = template["workerTemplate"]
    assert leader["metadata"]["labels"]["app.kubernetes.io/component"] == "inference"
    assert worker["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    assert leader["metadata"]["labels"][names.LABEL_SPEC_HASH] == ctx.spec_hash
    assert worker["metadata"]["labels"][names.LABEL_SPEC_HASH] == ctx.spec_hash

    # vLLM's own multi-node mode: same model arguments everywhere, rank 0 serves the API.
    model_args = build_vllm_args(ctx)
    assert model_args[model_args.index("--distributed-executor-backend") + 1] == "mp"
    assert model_args[model_args.index("--pipeline-parallel-size") + 1] == "2"
    leader_container = leader["spec"]["containers"][0]
    assert leader_container["command"] == ["vllm", "serve"]
    assert leader_container["args"] == [
        *model_args,
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "$(LWS_LEADER_ADDRESS)",
    ]  # fmt: skip
    assert leader_container["resources"]["limits"] == {"nvidia.com/gpu": "8"}  # GPUs per node
    assert leader_container["env"][0]["name"] == "VLLM_API_KEY"
    assert "startupProbe" in leader_container and "readinessProbe" in leader_container
    assert leader["spec"]["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]
    assert (
        leader["spec"]["affinity"]
        == _pod_spec(render_deployment(make_ctx(node_selector_terms=H100_AFFINITY_TERMS)))["affinity"]
    )

    worker_container = worker["spec"]["containers"][0]
    assert worker_container["name"] == "vllm-worker"
    assert worker_container["command"] == ["vllm", "serve"]
    assert worker_container["args"] == [
        *model_args,
        "--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--headless",
    ]  # fmt: skip
    assert "env" not in worker_container  # the API key stays on the leader, which serves HTTP
    assert "ports" not in worker_container and "readinessProbe" not in worker_container
    assert worker_container["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert worker["spec"]["volumes"] == leader["spec"]["volumes"]


def test_multi_node_args_follow_the_group_size() -> None:
    ctx = make_ctx(tensor_parallel_size=4, pipeline_parallel_size=4, gpus_per_replica=16, nodes_per_replica=4)
    assert multi_node_args(ctx, leader=True)[:2] == ["--nnodes", "4"]
    worker = multi_node_args(ctx, leader=False)
    assert worker[:4] == ["--nnodes", "4", "--node-rank", "$(LWS_WORKER_INDEX)"]
    assert worker[-1] == "--headless"
    assert "--nnodes" not in build_vllm_args(make_ctx())  # single node: no multi-node flags
    assert "--distributed-executor-backend" not in build_vllm_args(make_ctx())


def test_workload_kind_follows_nodes_per_replica() -> None:
    assert render_workload(make_ctx())["kind"] == "Deployment"
    multi = make_ctx(
        tensor_parallel_size=8, pipeline_parallel_size=2, gpus_per_replica=16, nodes_per_replica=2
    )
    assert render_workload(multi)["kind"] == "LeaderWorkerSet"
    with pytest.raises(ValueError, match="LeaderWorkerSet"):
        render_deployment(multi)
    with pytest.raises(ValueError, match="Deployment"):
        render_leaderworkerset(make_ctx())


def test_render_all_one_workload_per_variant_and_one_service() -> None:
    h100 = make_ctx(replicas=2)
    a100 = make_ctx(variant_name="a100-80gb", gpu_product="NVIDIA-A100-SXM4-80GB", replicas=1)
    objects = render_all([h100, a100])
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Deployment", "glm-air-h100-80gb"),
        ("Deployment", "glm-air-a100-80gb"),
        ("Service", "glm-air"),
        ("PodDisruptionBudget", "glm-air"),
    ]
    # the Service selects the pods of both variants
    selector = objects[2]["spec"]["selector"]
    for deployment in objects[:2]:
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
    # but the Deployments' selectors do not overlap
    assert objects[0]["spec"]["selector"] != objects[1]["spec"]["selector"]
    assert render_all(h100) == [
        render_deployment(h100),
        render_service(h100),
        render_pod_disruption_budget(h100),
    ]
    assert render_service(a100) == render_service(h100)


def test_render_all_rejects_variants_of_different_glmdeployments() -> None:
    other = make_ctx(deployment_name="other", owner=OwnerReference(name="other", uid="u2"))
    with pytest.raises(ValueError, match="one GLMDeployment"):
        render_all([make_ctx(), other])
    with pytest.raises(ValueError, match="same workload name"):
        render_all([make_ctx(), make_ctx()])
    with pytest.raises(ValueError, match="at least one"):
        render_all([])


def test_strict_undefined_raises_on_missing_field() -> None:
    env = template_environment()
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("service.yaml.j2").render(name="x", namespace="y")
    assert env.undefined is jinja2.StrictUndefined


def test_a_missing_value_named_like_a_jinja_global_raises() -> None:
    """The environment has no default globals: ``namespace`` is not jinja's Namespace class."""
    env = template_environment()
    assert not env.globals
    values = {"name": "x", "labels": {}, "owner_references": [], "selector": {}, "port": 8000}
    with pytest.raises(jinja2.UndefinedError, match="namespace"):
        env.get_template("service.yaml.j2").render(**values)


def test_render_is_deterministic() -> None:
    ctx = make_ctx(tensor_parallel_size=2, gpus_per_replica=2, model_cache_claim="c")
    first = render_all(ctx)
    again = render_all(dataclasses.replace(ctx))
    assert first == again
    assert template_environment().get_template("deployment.yaml.j2") is not None


LONG_NAME = "a-very-long-glmdeployment-name-for-the-production-inference-of-glm-4-5-air-fp8"


@pytest.mark.parametrize("multi_node", [False, True])
def test_names_and_label_values_at_most_63_chars(multi_node: bool) -> None:
    extra: dict[str, Any] = {}
    if multi_node:
        extra = {
            "tensor_parallel_size": 8,
            "pipeline_parallel_size": 2,
            "gpus_per_replica": 16,
            "nodes_per_replica": 2,
        }
    ctx = make_ctx(
        deployment_name=LONG_NAME,
        variant_name="nvidia-rtx-pro-6000-blackwell-server-edition-96gb",
        owner=OwnerReference(name=LONG_NAME, uid="u"),
        **extra,
    )
    for obj in render_all(ctx):
        name = obj["metadata"]["name"]
        assert len(name) <= 63
        assert name[0].isalpha() and name.replace("-", "").isalnum() and name == name.lower()
        for value in obj["metadata"]["labels"].values():
            assert len(value) <= 63
    if multi_node:
        assert len(ctx.workload_name) <= names.MAX_LEADERWORKERSET_NAME_LENGTH


def test_truncation_keeps_names_distinct() -> None:
    a = names.workload_name(LONG_NAME, "h100-80gb-variant-one-with-a-long-suffix")
    b = names.workload_name(LONG_NAME, "h100-80gb-variant-two-with-a-long-suffix")
    assert a != b and len(a) == len(b) == 63


@pytest.mark.parametrize(
    ("raw", "expected_prefix"),
    [("glm-air", "glm-air"), ("4air", "x-4air-"), ("glm.air", "glm-air-"), ("GLM", "glm-")],
)
def test_dns_label(raw: str, expected_prefix: str) -> None:
    label = names.dns_label(raw)
    assert label.startswith(expected_prefix)
    assert label == raw or len(label) > len(raw)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=253))
def test_dns_label_property(raw: str) -> None:
    if not raw.strip("-."):
        return
    label = names.dns_label(raw)
    assert 1 <= len(label) <= 63
    assert label[0].isalpha() and label[-1].isalnum()
    assert set(label) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


@given(st.text(min_size=1, max_size=300))
def test_label_value_property(raw: str) -> None:
    value = names.label_value(raw)
    assert len(value) <= 63
    assert value == "" or (value[0].isalnum() and value[-1].isalnum())


def test_selector_string() -> None:
    assert names.selector_string(names.service_selector("glm-air")) == (
        "app.kubernetes.io/component=inference,app.kubernetes.io/instance=glm-air,app.kubernetes.io/name=vllm"
    )


# --- spec hash --------------------------------------------------------------------------------

HASH_CHANGES: list[tuple[str, Any]] = [
    ("image", "vllm/vllm-openai:v0.11.0"),
    ("model_id", "zai-org/GLM-4.5"),
    ("model_source", "pvc://models/glm"),
    ("served_model_name", "air"),
    ("max_model_len", 65536),
    ("gpu_memory_utilization", 0.92),
    ("max_num_seqs", 32),
    ("port", 8080),
    ("quantization", "fp8"),
    ("kv_cache_dtype", "fp8"),
    ("dtype", "float16"),
    ("extra_args", ("--enable-prefix-caching",)),
    ("env", ({"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},)),
    ("resources", {"limits": {"memory": "100Gi"}}),
    ("resource_name", "nvidia.com/h100"),
    ("node_selector_terms", H100_AFFINITY_TERMS),
    ("tolerations", ({"key": "a", "operator": "Exists"},)),
    ("node_selector", {"a": "b"}),
    ("api_key_secret", SecretKeyRef("s", "k")),
    ("model_cache_claim", "cache"),
    ("image_pull_secrets", ("regcred",)),
    ("shm_size", "8Gi"),
    ("labels", {"team": "ml"}),
]


@pytest.mark.parametrize(("field_name", "value"), HASH_CHANGES, ids=[c[0] for c in HASH_CHANGES])
def test_spec_hash_changes_when_a_pod_setting_changes(field_name: str, value: Any) -> None:
    base = make_ctx()
    changed = dataclasses.replace(base, **{field_name: value})
    assert changed.spec_hash != base.spec_hash
    base_labels = render_deployment(base)["spec"]["template"]["metadata"]["labels"]
    changed_labels = render_deployment(changed)["spec"]["template"]["metadata"]["labels"]
    assert base_labels[names.LABEL_SPEC_HASH] != changed_labels[names.LABEL_SPEC_HASH]


def test_spec_hash_changes_with_parallelism() -> None:
    base = make_ctx()
    assert make_ctx(tensor_parallel_size=2, gpus_per_replica=2).spec_hash != base.spec_hash


def test_spec_hash_ignores_replicas_and_object_annotations() -> None:
    base = make_ctx()
    assert dataclasses.replace(base, replicas=7).spec_hash == base.spec_hash
    assert dataclasses.replace(base, annotations={names.ANNOTATION_PLAN: "x"}).spec_hash == base.spec_hash


def _asdict_spec_hash(ctx: WorkloadContext) -> str:
    """The spec hash as the operator computed it up to 2026-11 (dataclasses.asdict, three keys out)."""
    data = dataclasses.asdict(ctx)
    for excluded in ("replicas", "annotations", "owner"):
        del data[excluded]
    # fields added since, at their defaults, are left out (so an upgrade rolls no pod)
    for added, default in (("decode_context_parallel_size", 1), ("data_parallel_size", 1)):
        if data[added] == default:
            del data[added]
    for added in ("speculative_config", "max_num_batched_tokens"):
        if data[added] is None:
            del data[added]
    return names.compute_spec_hash(data)


HASH_CONTEXTS: list[dict[str, Any]] = [
    {},
    {"owner": OwnerReference(name="other", uid="u-2"), "replicas": 0, "annotations": {"a": "b"}},
    {
        "api_key_secret": SecretKeyRef("api", "key"),
        "hf_token_secret": SecretKeyRef("hf", "token"),
        "node_selector_terms": (
            *H100_AFFINITY_TERMS,
            NodeSelectorTerm(
                (NodeSelectorRequirement("zone", "Exists"), NodeSelectorRequirement("a", "In", ("x", "y")))
            ),
        ),
    },
    {
        "env": (
            {"name": "A", "value": 'ü \u2028 "quoted"'},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}},
        ),
        "resources": {"limits": {"memory": "100Gi", "cpu": 8}, "requests": {"cpu": "4"}},
        "labels": {"team": "ml", "z": "1", "a": "2"},
        "node_selector": {"pool": "gpu"},
        "tolerations": ({"key": "a", "operator": "Exists", "tolerationSeconds": 30},),
    },
    {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "gpus_per_replica": 8,
        "nodes_per_replica": 2,
        "gpu_memory_utilization": 0.925,
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
        "extra_args": ("--enable-prefix-caching", "--max-num-batched-tokens=8192"),
        "enable_expert_parallel": True,
        "trust_remote_code": True,
        "tool_call_parser": "glm45",
        "reasoning_parser": "glm45",
        "model_source": "pvc://weights/glm",
        "model_cache_claim": "cache",
        "model_cache_sub_path": "hf",
        "model_cache_read_only": True,
        "default_cache_size": "300Gi",
        "default_requests": {"cpu": "8", "memory": "64Gi"},
        "image_pull_secrets": ("regcred", "other"),
        "service_account_name": "sa",
        "startup_timeout_seconds": 3600,
    },
]


@pytest.mark.parametrize("overrides", HASH_CONTEXTS)
def test_spec_hash_is_the_asdict_hash(overrides: dict[str, Any]) -> None:
    """A different hash would roll every user's pods on an operator upgrade."""
    ctx = make_ctx(**overrides)
    assert ctx.spec_hash == _asdict_spec_hash(ctx)
    assert ctx.spec_hash == _asdict_spec_hash(ctx)  # the cached value


def test_spec_hash_value_is_pinned() -> None:
    ctx = make_ctx(**HASH_CONTEXTS[2], **HASH_CONTEXTS[3])
    assert ctx.spec_hash == "90aaabcbd6"
    # a shape that uses the added fields hashes them (and so rolls its pods when they change)
    dcp = make_ctx(**HASH_CONTEXTS[2], **HASH_CONTEXTS[3], decode_context_parallel_size=1)
    assert dcp.spec_hash == "90aaabcbd6"
    mtp = make_ctx(**HASH_CONTEXTS[2], **HASH_CONTEXTS[3], speculative_config='{"method":"mtp"}')
    assert mtp.spec_hash != "90aaabcbd6"


@settings(max_examples=50)
@given(
    st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-=0123456789", min_size=1, max_size=20), max_size=5),
    st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz-=0123456789", min_size=1, max_size=20), max_size=5),
)
def test_spec_hash_tracks_extra_args(first: list[str], second: list[str]) -> None:
    a = make_ctx(extra_args=tuple(first))
    b = make_ctx(extra_args=tuple(second))
    assert (a.spec_hash == b.spec_hash) == (first == second)


# --- context rules ----------------------------------------------------------------------------


def test_model_location() -> None:
    assert resolve_model_location("", "zai-org/GLM-4.5-Air").model_arg == "zai-org/GLM-4.5-Air"
    assert resolve_model_location("hf://zai-org/GLM-4.5", "x").model_arg == "zai-org/GLM-4.5"
    pvc = resolve_model_location("pvc://claim", "x")
    assert (pvc.model_arg, pvc.pvc_claim) == ("/models", "claim")
    with pytest.raises(ValueError, match="not supported"):
        resolve_model_location("ftp://host/model", "x")
    with pytest.raises(ValueError, match="scheme"):
        resolve_model_location("just-a-path", "x")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tensor_parallel_size": 2}, "gpus_per_replica"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"replicas": -1}, "replicas"),
        ({"tensor_parallel_size": 3, "gpus_per_replica": 3, "nodes_per_replica": 2}, "split evenly"),
        ({"model_source": "ftp://x/y"}, "not supported"),
        ({"port": 0}, "port"),
    ],
)
def test_context_validation(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_ctx(**overrides)


@settings(max_examples=200)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=4), st.text(max_size=30))
def test_any_user_string_round_trips_through_yaml(extra_args: list[str], env_value: str) -> None:
    ctx = make_ctx(extra_args=tuple(extra_args), env=({"name": "X", "value": env_value},))
    container = _pod_spec(render_deployment(ctx))["containers"][0]
    assert container["args"][-len(extra_args) :] == extra_args
    assert container["env"] == [{"name": "X", "value": env_value}]


@pytest.mark.parametrize(
    "value", ["x\x85y", "del\x7f", "😀", "a\u2028b", "tab\tnl\n", "a: b", "- x", "#c", "null"]
)
def test_awkward_strings_round_trip(value: str) -> None:
    args = _pod_spec(render_deployment(make_ctx(extra_args=(value,))))["containers"][0]["args"]
    assert args[-1] == value
