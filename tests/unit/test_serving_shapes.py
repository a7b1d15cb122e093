"""Serving shapes beyond TP: decode context parallelism, the ranking of every shape that fits, MTP and DP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.request import placement_request_from_spec
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools


def gpu_nodes(product: str, count: int = 1, gpus: int = 8) -> tuple[GpuPool, ...]:
    """``count`` Ready nodes of ``gpus`` GPUs of ``product`` (GPU Feature Discovery labels)."""
    return parse_gpu_pools(
        [
            {
                "metadata": {"name": f"{product.lower()}-{i}", "labels": {"nvidia.com/gpu.product": product}},
                "status": {
                    "allocatable": {"nvidia.com/gpu": str(gpus)},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
            for i in range(count)
        ]
    )


def plan(spec: dict[str, Any], pools: tuple[GpuPool, ...]) -> Plan:
    return plan_placement(placement_request_from_spec(spec, pools))


GLM52_64K = {
    "model": {"id": "zai-org/GLM-5.2"},
    "quantization": "fp8",
    "contextLength": 65536,
    "minConcurrency": 8,
}


def test_glm52_fp8_at_64k_for_8_sequences_fits_one_8_h200_node() -> None:
    # TP 8 keeps MLA's latent on every rank: 4.5 sequences. DCP 8 keeps 1/8 of each sequence per rank;
    # data-parallel attention keeps each rank's own requests only.
    tp_only = {"decodeContextParallelSize": 1, "dataParallelSize": 1}
    assert not plan({**GLM52_64K, "gpu": tp_only}, gpu_nodes("NVIDIA-H200")).fits
    p = plan(GLM52_64K, gpu_nodes("NVIDIA-H200"))
    assert p.fits
    (v,) = p.variants
    assert (v.gpus_per_replica, v.pipeline_parallel_size, v.nodes_per_replica) == (8, 1, 1)
    assert v.max_concurrency >= 8
    assert v.decode_context_parallel_size > 1 or v.data_parallel_size > 1
    shapes = {c.shape for c in v.considered}
    assert "fp8 TP=8 DCP=8" in shapes  # decode context parallelism alone holds it too
    dcp = plan({**GLM52_64K, "gpu": {"dataParallelSize": 1}}, gpu_nodes("NVIDIA-H200"))
    (d,) = dcp.variants
    assert (d.tensor_parallel_size, d.data_parallel_size) == (8, 1) and d.decode_context_parallel_size > 1


def test_a_dsa_model_takes_dcp_on_hopper_only_from_four_ranks_and_vllm_033() -> None:
    from glm_operator.catalog.models import resolve_model
    from glm_operator.planning.memory.parallel import decode_context_parallel_error

    arch = resolve_model("zai-org/GLM-5.2").architecture
    assert decode_context_parallel_error(arch, 8, 8, 9.0, (0, 33, 0)) is None
    assert "fewer than 32 heads" in (decode_context_parallel_error(arch, 2, 2, 9.0, (0, 33, 0)) or "")
    assert "0.33" in (decode_context_parallel_error(arch, 8, 8, 9.0, (0, 26, 0)) or "")
    assert decode_context_parallel_error(arch, 2, 2, 10.0, (0, 33, 0)) is None  # Blackwell: FlashInfer-sparse
    # GLM-4.5 (GQA, 8 KV heads): DCP only above TP 8
    gqa = resolve_model("zai-org/GLM-4.5").architecture
    assert decode_context_parallel_error(gqa, 8, 2, 9.0, (0, 33, 0)) is not None
    assert decode_context_parallel_error(gqa, 16, 2, 9.0, (0, 33, 0)) is None


def test_the_utilization_knob_is_ranked_where_vllms_default_falls_short() -> None:
    # glm-4-9b-chat at 8k on an L4: TP 1 holds 0.99 of the one sequence asked at vLLM 0.33's 0.92; at
    # 0.95 it holds 3: that shape is ranked, and the variant says what the knob costs
    spec = {"model": {"id": "zai-org/glm-4-9b-chat"}, "quantization": "bf16", "contextLength": 8192}
    (v,) = plan(spec, gpu_nodes("NVIDIA-L4", gpus=4)).variants
    by_shape = {c.shape: c for c in v.considered}
    knob = by_shape["bf16 TP=1 at utilization 0.95"]
    assert knob.first_fit and knob.max_concurrency > 1
    assert "bf16 TP=1" not in by_shape  # at vLLM's own utilization it does not hold one sequence
    # ranked, it loses to TP 2 (four times the KV cache): the L4's default token budget is no knob (2048)
    assert v.tensor_parallel_size == 2 and "fewer output tokens/s" in knob.lost
    assert not any("batched tokens" in shape for shape in by_shape)
    # with one L4 per node it is the shape served, and the variant says what the knob costs
    (one,) = plan(spec, gpu_nodes("NVIDIA-L4", gpus=1)).variants
    assert (one.tensor_parallel_size, one.gpu_memory_utilization) == (1, 0.95)
    assert any(n.startswith("--gpu-memory-utilization 0.95") and "headroom" in n for n in one.notes)
    # a utilization the spec sets is never raised
    pinned = plan({**spec, "gpu": {"memoryUtilization": 0.92}}, gpu_nodes("NVIDIA-L4", gpus=4))
    assert all(c.gpu_memory_utilization is None for c in pinned.variants[0].considered)


def test_data_parallel_attention_is_offered_only_to_models_that_need_several_gpus() -> None:
    flash = {"model": {"id": "zai-org/GLM-4.7-Flash"}, "quantization": "fp8", "contextLength": 32768}
    (one,) = plan(flash, gpu_nodes("NVIDIA-H100-80GB-HBM3")).variants
    assert all(c.data_parallel_size == 1 for c in one.considered)  # it fits one GPU: replicas, not DP
    big = plan(GLM52_64K, gpu_nodes("NVIDIA-H200")).variants[0]
    assert any(c.data_parallel_size > 1 for c in big.considered)
    dp = next(c for c in big.considered if c.data_parallel_size > 1)
    assert dp.gpus == dp.tensor_parallel_size * dp.data_parallel_size <= 8


def test_auto_quantization_across_h100_nodes_serves_the_shape_it_ranks_first() -> None:
    # issue 49: with PP > 1 the ranking was skipped and bf16 TP 8 x PP 3 (24 GPUs) served where fp8 on 16
    # GPUs ranked first; now the plan serves the ranking's first shape, fp8 on two nodes
    spec = {"model": {"id": "zai-org/GLM-5.2"}, "contextLength": 32768, "gpu": {"allowMultiNode": True}}
    p = plan(spec, gpu_nodes("NVIDIA-H100-80GB-HBM3", count=3))
    assert p.fits
    (v,) = p.variants
    first = v.considered[0]
    assert first.chosen and first.shape.startswith("fp8 TP=8")
    assert (v.quantization, v.tensor_parallel_size, v.pipeline_parallel_size) == ("fp8", 8, 2)
    assert v.gpus_per_replica == first.gpus == 16 and v.nodes_per_replica == 2
    best = max(c.tokens_per_s_per_gpu for c in v.considered)
    assert first.tokens_per_s_per_gpu >= best / 1.05  # within the simplicity margin of the fastest
    bf16 = [c for c in v.considered if c.quantization == "bf16"]
    assert bf16 and all("fewer output tokens/s per GPU" in c.lost for c in bf16)


def test_a_source_pinned_to_the_fp8_checkpoint_still_ranks_its_fp8_shapes() -> None:
    # the glm-5.2 sample names zai-org/GLM-5.2-FP8 as its source: every fp8 shape loads that checkpoint
    # and competes (the rule against switching checkpoints dropped all but the first fit)
    import yaml

    sample = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "glm-5.2.yaml"
    spec = yaml.safe_load(sample.read_text())["spec"]
    spec["gpu"]["products"] = ["H200"]
    (v,) = plan(spec, gpu_nodes("NVIDIA-H200")).variants
    assert len(v.considered) > 1
    assert {c.quantization for c in v.considered} == {"fp8"}
    assert v.data_parallel_size > 1 or v.decode_context_parallel_size > 1
    # the 16-bit repository pinned: its weights are what the pod loads, so fp8 means vLLM's load-time
    # quantization of them (which loads bf16 first: 176 GiB a GPU at TP 8, so not on one node), never the
    # FP8 sibling's figures
    bf16 = {**spec, "model": {**spec["model"], "source": "hf://zai-org/GLM-5.2"}, "quantization": "auto"}
    (b,) = plan(bf16, gpu_nodes("NVIDIA-H200", count=2)).variants
    assert b.model_id == "zai-org/GLM-5.2" and b.nodes_per_replica == 2
    assert b.quantization == "bf16" or b.quantization_flag == "fp8"


def test_the_replicas_asked_come_before_tokens_per_gpu() -> None:
    # two 8 x A100 nodes, 4 replicas of GLM-4.5-Air: TP 8 is predicted faster per GPU, but only 2 of
    # its replicas fit; TP 4 places all 4, and TP 8 is listed with why it lost
    spec = {"model": {"id": "zai-org/GLM-4.5-Air"}, "contextLength": 32768, "replicas": 4}
    p = plan(spec, gpu_nodes("NVIDIA-A100-SXM4-80GB", count=2))
    (v,) = p.variants
    assert (v.tensor_parallel_size, v.replicas, p.shortfall_replicas) == (4, 4, 0)
    tp8 = next(c for c in v.considered if c.tensor_parallel_size == 8)
    assert (
        tp8.lost == "holds 2 of the 4 replicas asked"
        and tp8.tokens_per_s_per_gpu > v.considered[0].tokens_per_s_per_gpu
    )
    # one replica asked: TP 8 is judged on tokens/s per GPU alone (served, or within rule 3's margin)
    (one,) = plan({**spec, "replicas": 1}, gpu_nodes("NVIDIA-A100-SXM4-80GB", count=2)).variants
    tp8_one = next(c for c in one.considered if c.tensor_parallel_size == 8)
    assert tp8_one.chosen or ("replicas" not in tp8_one.lost and "margin" in tp8_one.lost)
