"""The argv sets the contract test checks: every sample, and a generated matrix of plans.

Everything goes through the operator's own code path (``compute_desired``: spec validation, the
planner, the renderer), so what is checked is exactly what a pod would run: the container args of
every Deployment and of every LeaderWorkerSet leader (whose args are ``vllm serve``'s too).

The matrix: each catalog model x each catalog GPU type (a synthetic cluster of two 8-GPU nodes of
that type, multi-node allowed, so large models plan a pipeline over both) x quantization
(auto, bf16, fp8, int4) x KV-cache dtype (auto, fp8); combinations the planner cannot place are
skipped (they render nothing). A few model sources (revision, S3, PVC) and extra args are added.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from glm_operator.catalog.gpus import GpuType, load_gpus
from glm_operator.catalog.models import load_models
from glm_operator.desired import Desired, compute_desired
from tests.harness.scenarios import observed

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
FIXTURE_NODES = yaml.safe_load((ROOT / "tests" / "fixtures" / "gpu-cluster.yaml").read_text())["items"]
QUANTIZATIONS = ("auto", "bf16", "fp8", "int4")
KV_CACHE_DTYPES = ("auto", "fp8")


@dataclass(frozen=True)
class RenderedArgv:
    """One container's ``vllm serve`` arguments and what the plan meant them to say."""

    label: str
    argv: tuple[str, ...]
    model_id: str  # catalog id of the model (for its config.json)
    expected: Mapping[str, Any]  # parsed value vLLM must end up with, by argparse dest


def gpu_nodes(gpu: GpuType, count: int = 2, gpus_per_node: int = 8) -> list[dict[str, Any]]:
    """Ready nodes labelled like GPU Feature Discovery labels that GPU type."""
    labels = dict(gpu.labels)
    product = labels.get("gfd", gpu.name)
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"{product.lower()}-{i}"[:63],
                "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus_per_node)},
            },
            "spec": {},
            "status": {
                "allocatable": {
                    "cpu": "96",
                    "memory": "1Ti",
                    "pods": "110",
                    "nvidia.com/gpu": str(gpus_per_node),
                },
                "capacity": {
                    "cpu": "96",
                    "memory": "1Ti",
                    "pods": "110",
                    "nvidia.com/gpu": str(gpus_per_node),
                },
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(count)
    ]


def desired_for(spec: Mapping[str, Any], nodes: list[dict[str, Any]], name: str = "contract") -> Desired:
    return compute_desired(observed(spec, nodes, name=name, namespace="contract"))


def vllm_containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``vllm serve`` container of a Deployment, or of a LeaderWorkerSet's leader; none elsewhere."""
    spec = obj["spec"]
    if obj["kind"] == "Deployment":
        return [spec["template"]["spec"]["containers"][0]]
    if obj["kind"] == "LeaderWorkerSet":
        return [spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]]
    return []


def argvs_of(label: str, desired: Desired, model_id: str) -> Iterator[RenderedArgv]:
    assert desired.plan is not None
    by_name = {}
    for variant in desired.plan.variants:
        by_name[variant.gpu_product] = variant
    for obj in desired.objects:
        for container in vllm_containers(obj):
            product = obj["metadata"]["labels"].get("inference.glm.dev/gpu-product", "")
            variant = by_name.get(product) or desired.plan.variants[0]
            expected: dict[str, Any] = {
                "tensor_parallel_size": variant.tensor_parallel_size,
                "pipeline_parallel_size": variant.pipeline_parallel_size,
                "max_model_len": variant.max_model_len,
                "max_num_seqs": variant.max_num_seqs,
                "quantization": variant.quantization_flag,
                "enable_expert_parallel": variant.enable_expert_parallel,
                "speculative_config": (
                    {"method": "mtp", "num_speculative_tokens": variant.speculative_tokens}
                    if variant.speculative_tokens
                    else None
                ),
            }
            # vLLM's parser leaves a flag it was not given at None: the planned 1 is its engine default
            if variant.decode_context_parallel_size > 1:
                expected["decode_context_parallel_size"] = variant.decode_context_parallel_size
            if variant.data_parallel_size > 1:
                expected["data_parallel_size"] = variant.data_parallel_size
            if variant.max_num_batched_tokens is not None:
                expected["max_num_batched_tokens"] = variant.max_num_batched_tokens
            yield RenderedArgv(
                label=f"{label} {obj['kind']}/{obj['metadata']['name']}",
                argv=tuple(container["args"]),
                model_id=model_id,
                expected=expected,
            )


def sample_argvs() -> list[RenderedArgv]:
    out: list[RenderedArgv] = []
    for sample in SAMPLES:
        manifest = yaml.safe_load(sample.read_text())
        desired = desired_for(manifest["spec"], FIXTURE_NODES, manifest["metadata"]["name"])
        assert desired.objects, f"{sample.name} renders nothing on the fixture cluster: {desired.status}"
        out.extend(argvs_of(f"sample {sample.stem}", desired, manifest["spec"]["model"]["id"]))
    return out


def matrix_argvs() -> tuple[list[RenderedArgv], int]:
    """(rendered argvs, number of (model, GPU, quantization, kv dtype) combinations tried)."""
    out: list[RenderedArgv] = []
    tried = 0
    for model in load_models():
        for gpu in load_gpus():
            nodes = gpu_nodes(gpu)
            for quantization in QUANTIZATIONS:
                for kv in KV_CACHE_DTYPES:
                    tried += 1
                    spec = {
                        "model": {"id": model.id},
                        "quantization": quantization,
                        "kvCacheDtype": kv,
                        "contextLength": min(32768, model.max_context),
                        "gpu": {"products": [gpu.name], "allowMultiNode": True},
                    }
                    desired = desired_for(spec, nodes)
                    if desired.objects:
                        label = f"{model.name} on {gpu.name} {quantization}/kv {kv}"
                        out.extend(argvs_of(label, desired, model.id))
    return out, tried


def extra_argvs() -> list[RenderedArgv]:
    """Sources and user arguments the matrix does not cover."""
    nodes = FIXTURE_NODES
    specs = {
        "hf revision": {"model": {"id": "zai-org/GLM-4.5-Air", "source": "hf://zai-org/GLM-4.5-Air@main"}},
        "s3 streamer": {"model": {"id": "zai-org/GLM-4.5-Air", "source": "s3://weights/glm-4.5-air"}},
        "pvc path": {"model": {"id": "zai-org/GLM-4.5-Air", "source": "pvc://weights/glm-4.5-air"}},
        "user parsers and caching": {
            "model": {"id": "zai-org/GLM-4.5-Air"},
            "serving": {
                "extraArgs": [
                    "--enable-prefix-caching",
                    "--tool_call_parser=hermes",
                    "--max-num-batched-tokens=8192",
                ]
            },
        },
    }
    out: list[RenderedArgv] = []
    for label, spec in specs.items():
        desired = desired_for(spec, nodes)
        assert desired.objects, f"{label}: {desired.status}"
        out.extend(argvs_of(label, desired, "zai-org/GLM-4.5-Air"))
    return out + shape_argvs()


def shape_argvs() -> list[RenderedArgv]:
    """Serving shapes beyond TP (issue 49): data-parallel attention with expert parallelism, decode context
    parallelism, MTP speculative decoding, the token-budget knob; each is asserted to be in its plan."""
    h200 = next(g for g in load_gpus() if g.name == "NVIDIA-H200")
    l4 = next(g for g in load_gpus() if g.name == "NVIDIA-L4")
    glm52 = {
        "model": {"id": "zai-org/GLM-5.2"},
        "quantization": "fp8",
        "contextLength": 65536,
        "minConcurrency": 8,
    }
    flash = {"model": {"id": "zai-org/GLM-4.7-Flash"}, "contextLength": 32768, "minConcurrency": 8}
    cases: list[tuple[str, dict[str, Any], list[dict[str, Any]], str]] = [
        ("GLM-5.2 data-parallel attention", glm52, gpu_nodes(h200, 1), "data_parallel_size"),
        (
            "GLM-5.2 decode context parallel",
            {**glm52, "gpu": {"dataParallelSize": 1}},
            gpu_nodes(h200, 1),
            "decode_context_parallel_size",
        ),
        (
            "GLM-4.7-Flash MTP auto",
            {**flash, "speculativeDecoding": {"mode": "Auto"}},
            gpu_nodes(h200, 1),
            "mtp",
        ),
        (
            "GLM-5.2 MTP 3 with DP",
            {**glm52, "speculativeDecoding": {"mode": "On", "numSpeculativeTokens": 3}},
            gpu_nodes(h200, 1),
            "mtp",
        ),
        (
            "glm-4-9b token budget knob",
            {"model": {"id": "zai-org/glm-4-9b-chat"}, "quantization": "bf16", "contextLength": 8192},
            gpu_nodes(l4, 1, 4),
            "",
        ),
    ]
    out: list[RenderedArgv] = []
    for label, spec, nodes, shape in cases:
        desired = desired_for(spec, nodes)
        assert desired.objects and desired.plan, f"{label}: {desired.status}"
        variant = desired.plan.variants[0]
        held = {
            "data_parallel_size": variant.data_parallel_size > 1,
            "decode_context_parallel_size": variant.decode_context_parallel_size > 1,
            "mtp": variant.speculative_tokens > 0,
            "": True,
        }
        chosen = next((c.shape for c in variant.considered if c.chosen), "")
        assert held[shape], f"{label}: the plan does not serve it ({chosen})"
        out.extend(argvs_of(label, desired, spec["model"]["id"]))
    return out


def catalog_config(model_id: str, checkpoint: str) -> dict[str, Any]:
    """The catalog's config.json for ``checkpoint`` (the model's base repo, its FP8 sibling or one of
    its pre-quantized int4/int8 checkpoints).

    ``x_*`` keys are catalog extensions, not config.json keys, and are dropped. The official FP8
    checkpoints carry a block-wise ``quantization_config`` like the real repositories; the int4/int8
    ones the ``quantization_config`` and ``torch_dtype`` the catalog records for them.
    """
    raw = yaml.safe_load(
        (ROOT / "operator" / "glm_operator" / "catalog" / "data" / "models.yaml").read_text()
    )
    item = next(m for m in raw["models"] if m["id"] == model_id)
    config = {k: v for k, v in item["config"].items() if not str(k).startswith("x_")}
    fp8 = (item.get("checkpoints") or {}).get("fp8")
    if fp8 and checkpoint == fp8:
        config["quantization_config"] = {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "weight_block_size": [128, 128],
        }
    for quantized in next(m for m in load_models() if m.id == model_id).quantized_checkpoints:
        if checkpoint == quantized.id:
            config["quantization_config"] = quantized.quantization_config
            config["torch_dtype"] = quantized.torch_dtype
    return config
