"""Whole-scenario placement on tests/fixtures/gpu-cluster.yaml, spec mapping, and invariants."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from glm_operator.catalog.gpus import find_gpu, load_gpus
from glm_operator.catalog.models import resolve_model
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import fit_input, parallelism_error
from glm_operator.planning.placement import ranking as placement
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.ranking import GOODPUT_MARGIN
from glm_operator.planning.placement.request import (
    PlacementRequest,
    PlanningInputError,
    placement_request_from_spec,
)
from glm_operator.planning.placement.result import Plan
from glm_operator.planning.releases import DEFAULT_ENGINE
from glm_operator.planning.supply.nodes import GpuPool, parse_gpu_pools

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-cluster.yaml"
POOLS = parse_gpu_pools(yaml.safe_load(FIXTURE.read_text()))
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
L4 = "NVIDIA-L4"


def plan(spec: Mapping[str, Any], pools: tuple[GpuPool, ...] = POOLS) -> Plan:
    return plan_placement(placement_request_from_spec(spec, pools))


def variant(p: Plan, product: str) -> Any:
    return next(v for v in p.variants if v.gpu_product == product)


def fits_at(model: str, gpu: str, tp: int, quant: str, ctx: int, pp: int = 1) -> bool:
    return estimate_fit(
        fit_input(
            resolve_model(model),
            find_gpu(gpu),
            DEFAULT_ENGINE,
            max_model_len=ctx,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            quantization=quant,
        )
    ).fits


def test_glm45_air_bf16_32k_on_h100_serves_the_best_ranked_shape_that_fits() -> None:
    p = plan({"model": {"id": "zai-org/GLM-4.5-Air"}, "quantization": "bf16", "contextLength": 32768})
    assert p.fits
    v = variant(p, H100)
    assert v.node_selector == {"nvidia.com/gpu.product": H100} and v.resource_name == "nvidia.com/gpu"
    # the simplest shape that fits is TP 4: every smaller valid TP does not fit
    first = next(c for c in v.considered if c.first_fit)
    assert (first.quantization, first.tensor_parallel_size) == ("bf16", 4)
    arch = resolve_model("GLM-4.5-Air").architecture
    for tp in range(1, first.tensor_parallel_size):
        if parallelism_error(arch, tp) is None:
            assert not fits_at("GLM-4.5-Air", H100, tp, "bf16", 32768)
    # the one served is the best predicted per GPU: no shape compared beats it by the margin
    chosen = next(c for c in v.considered if c.chosen)
    assert (chosen.quantization, chosen.tensor_parallel_size) == (v.quantization, v.tensor_parallel_size)
    assert all(
        c.tokens_per_s_per_gpu <= chosen.tokens_per_s_per_gpu * (1 + GOODPUT_MARGIN) for c in v.considered
    )
    assert all(c.lost for c in v.considered if not c.chosen)
    assert p.replicas_planned == 1 and p.shortfall_replicas == 0
    assert v.max_num_seqs <= 256 and v.max_num_seqs >= 1


def test_glm47_flash_on_l4_needs_tp4_because_on_the_fly_fp8_loads_bf16_first() -> None:
    # GLM-4.7-Flash has no FP8 checkpoint and no int4/int8 one: at TP=2 on-the-fly FP8 would fit
    # after loading, but vLLM loads the 28 GiB bf16 shard per GPU first, more than an L4 holds.
    # bf16 at TP=4 keeps 2.89 GiB of KV cache per GPU after vLLM 0.33's 0.83 GiB of CUDA graphs:
    # 1.75 sequences of 32k, so bf16 is the first shape that fits; the L4 has FP8 tensor cores and
    # fp8 at TP=4 (its smallest TP that loads) reads half the bytes per step, so auto takes it.
    p = plan({"model": {"id": "GLM-4.7-Flash"}, "contextLength": 32768, "gpu": {"products": ["L4"]}})
    v = variant(p, L4)
    assert v.gpus_per_replica == 4 and v.quantization == "fp8" and v.quantization_flag == "fp8"
    assert "PCIe" in v.reason and "chosen over bf16 TP=4 (the first shape that fits)" in v.reason
    bf16_only = {"model": {"id": "GLM-4.7-Flash"}, "allowedQuantizations": ["bf16"], "contextLength": 32768}
    kept = variant(plan({**bf16_only, "gpu": {"products": ["L4"]}}), L4)
    assert kept.tensor_parallel_size == 4 and kept.quantization == "bf16"
    assert all(c.quantization == "bf16" for c in kept.considered)
    pinned = variant(
        plan(
            {
                "model": {"id": "GLM-4.7-Flash"},
                "quantization": "fp8",
                "contextLength": 32768,
                "gpu": {"products": ["L4"]},
            }
        ),
        L4,
    )
    assert pinned.gpus_per_replica == 4 and pinned.quantization_flag == "fp8"
    assert "on-the-fly FP8 loads the bf16 checkpoint first" in pinned.reason


def test_int4_without_a_checkpoint_is_not_a_candidate_and_pinned_is_an_input_error() -> None:
    p = plan({"model": {"id": "GLM-4-32B-0414"}, "gpu": {"products": ["L4"]}})
    assert p.variants and all(v.quantization in ("bf16", "fp8") for v in p.variants)
    with pytest.raises(PlanningInputError, match=r"no int4 checkpoint of GLM-4-32B-0414"):
        plan({"model": {"id": "GLM-4-32B-0414"}, "quantization": "int4", "gpu": {"products": ["L4"]}})


def test_auto_plans_the_catalogs_int4_checkpoint_where_only_int4_fits() -> None:
    p = plan({"model": {"id": "GLM-4.5-Air"}, "contextLength": 32768, "gpu": {"products": ["L4"]}})
    v = variant(p, L4)
    assert (v.quantization, v.model_id, v.tensor_parallel_size) == (
        "int4",
        "cyankiwi/GLM-4.5-Air-AWQ-4bit",
        4,
    )
    assert v.quantization_flag is None  # vLLM reads compressed-tensors from the checkpoint
    assert any("cyankiwi/GLM-4.5-Air-AWQ-4bit" in n and "huggingface.co" in n for n in v.notes)
    assert "higher precision does not fit" in v.reason


def test_pinned_int4_loads_the_awq_checkpoint_without_a_quantization_flag() -> None:
    p = plan({"model": {"id": "GLM-4.7"}, "quantization": "int4", "gpu": {"products": [H100]}})
    v = variant(p, H100)
    assert (v.quantization, v.model_id, v.quantization_flag) == ("int4", "QuantTrio/GLM-4.7-AWQ", None)
    assert any("shared_experts kept 16-bit" in n for n in v.notes)


def test_fp8_on_ampere_says_marlin() -> None:
    p = plan({"model": {"id": "GLM-4.5-Air"}, "quantization": "fp8", "gpu": {"products": [A100]}})
    v = variant(p, A100)
    assert v.model_id == "zai-org/GLM-4.5-Air-FP8" and v.quantization_flag is None
    assert any("Marlin" in n for n in v.notes) and "W8A16" in v.reason


def test_auto_takes_fp8_on_hopper_when_predicted_faster_per_gpu() -> None:
    # GLM-4.7-Flash at 32k on H100: bf16 fits first at TP=1 with room for 61 sequences; on-the-fly fp8
    # halves the weights, so the KV cache holds ~3x the sequences: more output tokens/s per GPU (the
    # H200 runs: fp8 GEMMs no faster than bf16 ones, the gain is the batch).
    p = plan({"model": {"id": "GLM-4.7-Flash"}, "gpu": {"products": [H100]}})
    v = variant(p, H100)
    assert (v.quantization, v.tensor_parallel_size, v.quantization_flag) == ("fp8", 1, "fp8")
    first = next(c for c in v.considered if c.first_fit)
    chosen = next(c for c in v.considered if c.chosen)
    assert (first.quantization, first.tensor_parallel_size) == ("bf16", 1)
    assert (chosen.quantization, chosen.tensor_parallel_size, chosen.max_num_seqs) == (
        "fp8",
        1,
        v.max_num_seqs,
    )
    assert chosen.max_num_seqs > 2 * first.max_num_seqs
    assert chosen.tokens_per_s_per_gpu > first.tokens_per_s_per_gpu * (1 + GOODPUT_MARGIN)
    assert v.speed is not None and v.speed.output_tokens_per_s_per_gpu == pytest.approx(
        chosen.tokens_per_s_per_gpu
    )
    assert f"{chosen.tokens_per_s_per_gpu:.0f} output tokens/s per GPU" in v.reason
    assert f"over its {first.tokens_per_s_per_gpu:.0f}" in v.reason


def test_air_on_h100_serves_the_fp8_checkpoint_at_tp4_not_its_smallest_tp() -> None:
    # The official FP8 checkpoint fits at TP=2, but a TP=2 replica holds 46 sequences: per GPU it is
    # predicted well below fp8 at TP=4, whose KV cache holds about twice bf16 TP=4's (vLLM's recipe
    # serves GLM-4.5-Air-FP8 on 4 GPUs too). Every shape that fits is ranked, not only the smallest TP.
    v = variant(plan({"model": {"id": "GLM-4.5-Air"}, "gpu": {"products": [H100]}}), H100)
    assert (v.quantization, v.tensor_parallel_size) == ("fp8", 4)
    by_shape = {c.shape: c for c in v.considered}
    chosen, tp2, first = by_shape["fp8 TP=4"], by_shape["fp8 TP=2"], by_shape["bf16 TP=4"]
    assert chosen.chosen and first.first_fit
    assert tp2.tokens_per_s_per_gpu < chosen.tokens_per_s_per_gpu and "fewer output tokens/s" in tp2.lost
    assert "chosen over bf16 TP=4 (the first shape that fits)" in v.reason


def test_auto_keeps_bf16_where_fp8_is_not_native_or_not_allowed() -> None:
    # A100: no FP8 tensor cores (fp8 would be Marlin W8A16): bf16 without a comparison
    a100 = variant(plan({"model": {"id": "GLM-4.5-Air"}, "gpu": {"products": [A100]}}), A100)
    assert a100.quantization == "bf16" and all(c.quantization == "bf16" for c in a100.considered)
    # allowedQuantizations [bf16] is a quality floor: bf16 TP=4 on the H100 as before
    spec = {"model": {"id": "GLM-4.5-Air"}, "allowedQuantizations": ["bf16"], "gpu": {"products": [H100]}}
    h100 = variant(plan(spec), H100)
    assert h100.quantization == "bf16" and all(c.quantization == "bf16" for c in h100.considered)
    # a model.source names the bf16 weights: no switch to the FP8 checkpoint
    sourced = {"model": {"id": "GLM-4.5-Air", "source": "pvc://weights/air"}, "gpu": {"products": [H100]}}
    assert variant(plan(sourced), H100).quantization == "bf16"


def test_auto_keeps_the_first_fit_when_fp8_gains_less_than_the_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GLM-4.7-Flash on H100 with a margin fp8's gain cannot reach: the first fit stays and the reason
    # gives the runner-up's figure
    monkeypatch.setattr(placement, "GOODPUT_MARGIN", 10.0)
    v = variant(plan({"model": {"id": "GLM-4.7-Flash"}, "gpu": {"products": [H100]}}), H100)
    assert (v.quantization, v.tensor_parallel_size) == ("bf16", 1)
    runner = next(c for c in v.considered if not c.chosen)
    assert (runner.quantization, runner.tensor_parallel_size) == ("fp8", 1)
    assert f"best other shape fp8 TP=1: {runner.tokens_per_s_per_gpu:.0f}" in v.reason
    assert "a shape must gain 1000 % to replace a simpler one" in v.reason


def test_allowed_quantizations_rule_out_a_checkpoint_and_name_the_fix() -> None:
    with pytest.raises(PlanningInputError, match=r"spec.allowedQuantizations \[bf16\]: the checkpoint"):
        plan({"model": {"id": "zai-org/GLM-4.5-Air-FP8"}, "allowedQuantizations": ["bf16"]})
    # auto limited to bf16 where only lower precisions fit: the fix adds the precision to the list
    p = plan({"model": {"id": "GLM-4.5-Air"}, "allowedQuantizations": ["bf16"], "gpu": {"products": [L4]}})
    assert not p.fits
    assert any(
        f.spec_patch.get("allowedQuantizations", [None])[-1] in ("fp8", "int8", "int4") for f in p.fixes
    )


def test_glm51_fp8_needs_two_h100_nodes() -> None:
    # Any GPU type: one 8-GPU H200 or B200 node holds the FP8 weights (no PP).
    spec: dict[str, Any] = {"model": {"id": "GLM-5.1"}, "quantization": "fp8", "contextLength": 32768}
    anywhere = plan(spec)
    assert anywhere.fits
    assert {v.gpu_product for v in anywhere.variants} == {"NVIDIA-B200", "NVIDIA-H200"}
    assert all(v.nodes_per_replica == 1 and v.gpus_per_replica == 8 for v in anywhere.variants)
    # Only 80 GB types: no single node fits.
    spec["gpu"] = {"products": [H100, A100]}
    p = plan(spec)
    assert not p.fits
    h100 = next(r for r in p.rejected if r.gpu_product == H100)
    assert "allowMultiNode: true would fit with TP=8 x PP=2" in h100.reason
    a100 = next(r for r in p.rejected if r.gpu_product == A100)
    assert "compute capability" in a100.reason
    spec["gpu"] = {"products": [H100, A100], "allowMultiNode": True}
    multi = plan(spec)
    v = variant(multi, H100)
    assert (v.tensor_parallel_size, v.pipeline_parallel_size, v.nodes_per_replica, v.gpus_per_replica) == (
        8,
        2,
        2,
        16,
    )
    assert v.model_id == "zai-org/GLM-5.1-FP8" and v.capacity_replicas == 2  # 4 H100 nodes


def test_context_no_type_can_hold_is_rejected_with_the_number() -> None:
    spec = {
        "model": {"id": "glm-4-9b-chat"},
        "quantization": "bf16",
        "contextLength": 131072,
        "gpu": {"products": ["RTX-4090"]},
    }
    p = plan(spec)
    assert not p.fits
    (rej,) = p.rejected
    assert rej.max_context_length is not None and 0 < rej.max_context_length < 131072
    assert str(rej.max_context_length) in rej.reason
    assert any(f"fix: contextLength <= {rej.max_context_length}" in d for d in p.details)
    # and that number really fits once
    assert fits_at("glm-4-9b-chat", "RTX-4090", 1, "bf16", rej.max_context_length)


def test_context_over_model_limit() -> None:
    with pytest.raises(PlanningInputError, match="131072"):
        plan({"model": {"id": "GLM-4.5-Air"}, "contextLength": 200000})


def test_mixed_node_gives_one_variant_per_type() -> None:
    p = plan(
        {
            "model": {"id": "glm-4-9b-chat"},
            "contextLength": 8192,
            "gpu": {"products": ["A100-80GB-PCIe", "RTX-4090"]},
            "replicas": 2,
        }
    )
    a, r = p.variants
    assert (a.gpu_product, a.resource_name) == ("NVIDIA-A100-80GB-PCIe", "nvidia.com/a100-80gb")
    assert (r.gpu_product, r.resource_name) == ("NVIDIA-GeForce-RTX-4090", "nvidia.com/rtx-4090")
    assert a.node_selector == {} and r.node_selector == {}
    assert a.replicas == 1 and r.replicas == 1 and p.shortfall_replicas == 0


def test_preference_order_and_fill() -> None:
    p = plan(
        {
            "model": {"id": "glm-4-9b-chat"},
            "contextLength": 32768,
            "replicas": 16,
            "gpu": {"products": ["L4", H100]},
        }
    )
    assert [v.gpu_product for v in p.variants] == [L4, H100]
    l4, h100 = p.variants
    assert l4.replicas == l4.capacity_replicas < 16  # preferred type filled first
    assert h100.replicas == 16 - l4.replicas
    assert any("not in gpu.products" in d for d in p.details)


def test_shortfall_when_replicas_exceed_capacity() -> None:
    p = plan({"model": {"id": "glm-4-9b-chat"}, "replicas": 100, "gpu": {"products": ["L4"]}})
    (v,) = p.variants
    assert v.capacity_replicas == sum(pool.gpu_count for pool in POOLS if pool.gpu_product == L4) // (
        v.gpus_per_replica
    )
    assert p.shortfall_replicas == 100 - v.capacity_replicas
    assert any("shortfall" in d for d in p.details)


def test_used_gpus_reduce_capacity() -> None:
    used = {f"h100-sxm-{i}": {"nvidia.com/gpu": 6} for i in range(4)}
    pools = parse_gpu_pools(yaml.safe_load(FIXTURE.read_text()), gpus_used=used)
    p = plan({"model": {"id": "GLM-4.5-Air"}, "quantization": "bf16", "gpu": {"products": [H100]}}, pools)
    assert variant(p, H100).capacity_replicas == 0 and p.shortfall_replicas == 1


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(PlanningInputError, match="tensorParallelSize"):
        plan({"model": {"id": "GLM-4.7-Flash"}, "gpu": {"tensorParallelSize": 8}})
    with pytest.raises(PlanningInputError, match=r"gpu\.products"):
        plan({"model": {"id": "GLM-4.5-Air"}, "gpu": {"products": ["TPU-v5"]}})
    with pytest.raises(PlanningInputError, match=r"spec\.model"):
        plan({"model": {"id": "GLM-99"}})
    with pytest.raises(ValidationError, match="quantization"):  # the API models refuse it first
        plan({"model": {"id": "GLM-4.5-Air"}, "quantization": "int3"})


def test_spec_defaults_and_inline_config() -> None:
    req = placement_request_from_spec({"model": {"id": "GLM-4.5-Air"}})
    assert req == PlacementRequest(model="GLM-4.5-Air", context_length=32768)  # the API's default
    inline = {
        "num_hidden_layers": 40,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "intermediate_size": 13696,
        "vocab_size": 151552,
        "max_position_embeddings": 131072,
    }
    p = plan({"model": {"id": "my-org/custom-9b", "config": inline}, "gpu": {"products": [H100]}})
    assert p.model_id == "my-org/custom-9b" and variant(p, H100).tensor_parallel_size == 1


def test_plan_to_dict_is_json_ready() -> None:
    import json

    d = plan({"model": {"id": "GLM-4.5-Air"}}).to_dict()
    json.dumps(d)
    assert {"fits", "variants", "rejected", "details", "shortfall_replicas"} <= d.keys()
    assert {"gpu_product", "tensor_parallel_size", "gpus_per_replica", "kv_cache_tokens"} <= d["variants"][
        0
    ].keys()


GPU_NAMES = [g.name for g in load_gpus()]


@st.composite
def pools_strategy(draw: st.DrawFn) -> tuple[GpuPool, ...]:
    n = draw(st.integers(min_value=0, max_value=12))
    out = []
    for i in range(n):
        product = draw(st.sampled_from(GPU_NAMES))
        count = draw(st.sampled_from([1, 2, 4, 8]))
        used = draw(st.integers(min_value=0, max_value=count))
        resource = draw(st.sampled_from(["nvidia.com/gpu", find_gpu(product).resource_names[0]]))
        selector = (("nvidia.com/gpu.product", product),) if resource == "nvidia.com/gpu" else ()
        out.append(GpuPool(f"n{i}", product, product, count, resource, selector, used))
    return tuple(out)


@settings(max_examples=40, deadline=None)
@given(
    pools=pools_strategy(),
    model=st.sampled_from(["glm-4-9b-chat", "GLM-4.5-Air", "GLM-4.7-Flash", "GLM-4-32B-0414", "GLM-5.1"]),
    ctx=st.sampled_from([4096, 32768, 131072]),
    replicas=st.integers(min_value=0, max_value=20),
    multi=st.booleans(),
    quant=st.sampled_from(["auto", "bf16", "fp8"]),
)
def test_plan_invariants(
    pools: tuple[GpuPool, ...], model: str, ctx: int, replicas: int, multi: bool, quant: str
) -> None:
    req = PlacementRequest(
        model=model,
        context_length=min(ctx, resolve_model(model).max_context),
        replicas=replicas,
        allow_multi_node=multi,
        quantization=quant,
        pools=pools,
    )
    p = plan_placement(req)
    arch = resolve_model(model).architecture
    assert p.fits == bool(p.variants)
    assert sum(v.replicas for v in p.variants) + p.shortfall_replicas == replicas
    for v in p.variants:
        members = [x for x in pools if x.gpu_product == v.gpu_product and x.resource_name == v.resource_name]
        assert members, "a variant uses exactly one GPU type from existing pools"
        assert v.gpus_per_replica == v.tensor_parallel_size * v.pipeline_parallel_size * v.data_parallel_size
        assert v.tensor_parallel_size <= max(x.gpu_count for x in members)  # never more than one node holds
        assert arch.num_attention_heads % v.tensor_parallel_size == 0
        assert parallelism_error(arch, v.tensor_parallel_size) is None
        free_slots = sum(x.gpus_free // v.tensor_parallel_size for x in members)
        assert v.capacity_replicas * v.pipeline_parallel_size <= free_slots
        assert 0 <= v.replicas <= v.capacity_replicas
        assert v.pipeline_parallel_size == 1 or multi
        assert v.max_concurrency >= 1
    assert len({v.key for v in p.variants}) == len(p.variants)


def test_same_type_on_whole_node_and_mixed_node_gets_distinct_keys() -> None:
    pools = (
        GpuPool(
            "a",
            "NVIDIA-A100-80GB-PCIe",
            "NVIDIA-A100-80GB-PCIe",
            2,
            "nvidia.com/gpu",
            (("nvidia.com/gpu.product", "NVIDIA-A100-80GB-PCIe"),),
        ),
        GpuPool("m", "NVIDIA-A100-80GB-PCIe", "nvidia.com/a100-80gb", 1, "nvidia.com/a100-80gb"),
    )
    p = plan({"model": {"id": "glm-4-9b-chat"}, "replicas": 3}, pools)
    assert sorted(v.key for v in p.variants) == ["nvidia-a100-80gb-pcie", "nvidia-a100-80gb-pcie-a100-80gb"]
    assert p.replicas_planned == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 8),  # gpu_count
            st.integers(0, 10),  # gpus_used
            st.one_of(st.none(), st.integers(0, 8)),  # held_gpus
            st.booleans(),  # elastic
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 3),
    st.booleans(),
)
def test_group_capacity_counts_like_walking_every_pool(
    shapes: list[tuple[int, int, int | None, bool]], tp: int, pp: int, when_available: bool
) -> None:
    """_Group counts replicas from (free GPUs, pools) pairs; the same as summing over pools."""
    from glm_operator.planning.placement.groups import Group as _Group

    pools = tuple(
        GpuPool(
            f"n{i}", "H100", "H100", count, gpus_used=used, held_gpus=held, elastic_pool="p" if el else ""
        )
        for i, (count, used, held, el) in enumerate(shapes)
    )
    group = _Group(find_gpu("H100"), "nvidia.com/gpu", (), pools)

    def free(p: GpuPool) -> int:
        return p.gpus_free_when_available if when_available else p.gpus_free

    every = sum(free(p) // tp for p in pools)
    existing = sum(free(p) // tp for p in pools if not p.elastic_pool)
    assert group.capacity(tp, pp, when_available) == (every if pp <= 1 else every // pp)
    assert group.existing_capacity(tp, pp, when_available) == existing // pp


def test_max_num_batched_tokens_in_extra_args_is_planned_with() -> None:
    # vLLM profiles a forward pass of max-num-batched-tokens: 16k tokens take more activation (and MoE
    # workspace) than the 8k default, so the same spec holds fewer KV tokens with it
    spec = {"model": {"id": "GLM-4.7-Flash"}, "quantization": "bf16", "gpu": {"products": [H100]}}
    default = variant(plan(spec), H100)
    for args in (["--max-num-batched-tokens=16384"], ["--max-num-batched-tokens", "16384"]):
        bigger = variant(plan({**spec, "serving": {"extraArgs": args}}), H100)
        assert bigger.activation_gib > default.activation_gib
        assert bigger.kv_cache_tokens < default.kv_cache_tokens
    with pytest.raises(PlanningInputError, match=r"spec.serving.extraArgs: --max-num-batched-tokens 'lots'"):
        plan({**spec, "serving": {"extraArgs": ["--max-num-batched-tokens=lots"]}})
