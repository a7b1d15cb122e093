"""Catalog data: every model/GPU parses, lookups are case-insensitive, facts carry sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glm_operator.catalog.gpus import find_gpu, gpu_from_labels, gpu_from_resource_name, load_gpus
from glm_operator.catalog.models import (
    CatalogError,
    ModelArchitecture,
    load_models,
    parse_quantization_config,
    resolve_model,
    resolve_model_or_file,
)
from glm_operator.planning.memory.weights import count_parameters

from .test_cli_planning import LLAMA_LIKE_CONFIG

REQUIRED_MODELS = [
    "zai-org/glm-4-9b-chat",
    "zai-org/GLM-4-9B-0414",
    "zai-org/GLM-4-32B-0414",
    "zai-org/GLM-4.5",
    "zai-org/GLM-4.5-Air",
    "zai-org/GLM-4.6",
    "zai-org/GLM-4.7",
    "zai-org/GLM-4.7-Flash",
    "zai-org/GLM-5",
    "zai-org/GLM-5.1",
    "zai-org/GLM-5.2",
    "zai-org/GLM-5.3",
    "zai-org/GLM-5.3-Flash",
]
REQUIRED_GPUS = [
    "H200",
    "H100-SXM",
    "H100-PCIe",
    "H20",
    "A100-SXM4-80GB",
    "A100-80GB-PCIe",
    "A100-SXM4-40GB",
    "A100-PCIe-40GB",
    "L40S",
    "L4",
    "A10G",
    "RTX-4090",
    "RTX-PRO-6000",
    "B200",
]


@pytest.mark.parametrize("model_id", REQUIRED_MODELS)
def test_required_models_resolve_case_insensitively(model_id: str) -> None:
    assert resolve_model(model_id).model_id == model_id
    assert resolve_model(model_id.upper()).model_id == model_id
    assert resolve_model(model_id.split("/")[1].lower()).model_id == model_id


def test_every_model_has_sources_licence_and_context() -> None:
    for entry in load_models():
        assert entry.sources and dict(entry.sources).get("config"), entry.id
        assert entry.license and entry.max_context > 0, entry.id


@pytest.mark.parametrize(
    ("model_id", "billions"),
    # published totals / ref's own counts: 106.9, 352.8, 29.9, 743.9, 32.57, 9.4
    [
        ("GLM-4.5-Air", 106.9),
        ("GLM-4.5", 352.8),
        ("GLM-4.7-Flash", 29.9),
        ("GLM-5", 743.9),
        ("GLM-4-32B-0414", 32.57),
        ("glm-4-9b-chat", 9.4),
    ],
)
def test_parameter_counts_match_published(model_id: str, billions: float) -> None:
    assert count_parameters(resolve_model(model_id).architecture) / 1e9 == pytest.approx(billions, rel=0.01)


def test_attention_kinds() -> None:
    kinds = {e.name: e.architecture.attention for e in load_models()}
    assert kinds["GLM-4.5-Air"] == "gqa"
    assert kinds["GLM-4.7-Flash"] == "mla"
    assert kinds["GLM-5.1"] == "mla+dsa"
    assert kinds["GLM-5.3-Flash"] == "hybrid"
    flash = resolve_model("GLM-5.3-Flash")
    assert flash.architecture.linear_attention_layers == 34 and flash.architecture.attention_layers == 11
    assert any("hybrid" in n for n in flash.notes)


def test_uncertain_facts_are_marked() -> None:
    notes = " ".join(resolve_model("GLM-4-32B-0414").notes)
    assert "KV heads conflict" in notes


def test_fp8_checkpoint_ids_resolve_to_fp8_weights() -> None:
    m = resolve_model("zai-org/GLM-4.5-Air-FP8")
    assert m.model_id == "zai-org/GLM-4.5-Air-FP8"
    assert m.checkpoint_quantization is not None and m.checkpoint_quantization.precision == "fp8"
    assert m.base_id == "zai-org/GLM-4.5-Air"


def test_unknown_model_is_one_line_error() -> None:
    with pytest.raises(CatalogError, match="not in the catalog") as exc:
        resolve_model("GLM-9")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_required_gpus(name: str) -> None:
    gpu = find_gpu(name)
    assert gpu.memory_gib > 10 and gpu.memory_source
    assert gpu.interconnect in ("nvlink", "pcie")


def test_measured_gpu_memory_figures() -> None:
    assert find_gpu("H200").memory_gib == pytest.approx(139.80)
    assert find_gpu("NVIDIA-H100-80GB-HBM3").memory_gib == pytest.approx(79.19)
    assert find_gpu("A100-SXM4-80GB").memory_gib == pytest.approx(79.15)
    assert find_gpu("L4").memory_gib == pytest.approx(22.03)
    assert find_gpu("RTX-4090").memory_gib == pytest.approx(23.53)


def test_fp8_native_only_from_8_9() -> None:
    assert find_gpu("L4").native_fp8 and find_gpu("H100").native_fp8
    assert not find_gpu("A100-SXM4-80GB").native_fp8


def test_gpu_from_labels_each_labeller() -> None:
    assert gpu_from_labels({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})[0] == find_gpu("H100")
    assert gpu_from_labels({"nvidia.com/gpu.product": "NVIDIA-L4-SHARED"})[0] == find_gpu("L4")
    assert gpu_from_labels({"cloud.google.com/gke-accelerator": "nvidia-l4"})[0] == find_gpu("L4")
    assert gpu_from_labels({"k8s.amazonaws.com/accelerator": "nvidia-a10g"})[0] == find_gpu("A10G")
    a100_40 = {
        "karpenter.k8s.aws/instance-gpu-name": "a100",
        "karpenter.k8s.aws/instance-gpu-memory": "40960",
    }
    assert gpu_from_labels(a100_40)[0] == find_gpu("A100-SXM4-40GB")
    gpu, key, value = gpu_from_labels({"nvidia.com/gpu.product": "Tesla-V100"})
    assert gpu is None and (key, value) == ("nvidia.com/gpu.product", "Tesla-V100")


def test_every_gpu_label_maps_back() -> None:
    for gpu in load_gpus():
        gfd = gpu.label("gfd")
        assert gfd and gpu_from_labels({"nvidia.com/gpu.product": gfd})[0] == gpu
        for resource in gpu.resource_names:
            assert gpu_from_resource_name(resource) == gpu


def test_quantization_configs() -> None:
    fp8 = parse_quantization_config({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert fp8.precision == "fp8" and fp8.bytes_per_weight == pytest.approx(1 + 4 / 16384)
    awq = parse_quantization_config({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True})
    assert awq.precision == "int4" and awq.bytes_per_weight == pytest.approx(0.5 + 2.5 / 128)
    ct = parse_quantization_config(
        {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
        }
    )
    assert ct.precision == "fp8"
    ct4 = parse_quantization_config(
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}
            },
        }
    )
    assert ct4.precision == "int4"
    with pytest.raises(CatalogError, match="quant_method"):
        parse_quantization_config({"quant_method": "bitsandbytes"})


def test_inline_config_with_chatglm_keys() -> None:
    arch = ModelArchitecture.from_hf_config(
        {
            "num_layers": 40,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "multi_query_group_num": 2,
            "kv_channels": 128,
            "ffn_hidden_size": 13696,
            "padded_vocab_size": 151552,
            "seq_length": 131072,
        }
    )
    assert (arch.num_layers, arch.num_kv_heads, arch.head_dim, arch.vocab_size) == (40, 2, 128, 151552)


def test_inline_config_missing_field_names_it() -> None:
    with pytest.raises(CatalogError, match="hidden_size"):
        resolve_model({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10})


def test_int4_checkpoint_ids_resolve_to_their_published_layout() -> None:
    m = resolve_model("QuantTrio/GLM-4.7-AWQ")
    assert m.model_id == "QuantTrio/GLM-4.7-AWQ" and m.base_id == "zai-org/GLM-4.7"
    q = m.checkpoint_quantization
    assert q is not None and (q.method, q.precision, q.group_size, q.zero_point_bits) == (
        "awq",
        "int4",
        128,
        4,
    )
    assert q.unquantized == ("shared_experts",)  # modules_to_not_convert of its config.json


def test_every_quantized_checkpoint_has_a_hugging_face_source_and_matching_precision() -> None:
    checkpoints = [c for m in load_models() for c in m.quantized_checkpoints]
    assert len(checkpoints) >= 4
    for c in checkpoints:
        assert c.url == f"https://huggingface.co/{c.id}" or c.url.startswith(
            f"https://huggingface.co/{c.id}/"
        )
        assert c.layout.precision == c.precision
        assert resolve_model(c.id).checkpoint_quantization == c.layout


def test_compressed_tensors_ignore_list_and_awq_skip_list_mark_16_bit_modules() -> None:
    ct = parse_quantization_config(
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}
            },
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"],
        }
    )
    assert (ct.precision, ct.group_size, ct.unquantized) == ("int4", 32, ("self_attn",))
    awq = parse_quantization_config({"quant_method": "awq", "bits": 4, "group_size": 128})
    assert awq.unquantized == ()


def test_a_model_id_never_reads_the_operators_own_files(tmp_path: Path) -> None:
    """What a GLMDeployment names is a catalog id or an inline config: a path that exists on the
    operator's filesystem is not opened (only the CLI's --model takes a config.json path)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_LIKE_CONFIG))
    assert resolve_model_or_file(str(config)).architecture.num_layers == 32
    for name in (str(config), "/etc/hostname", "/proc/self/environ"):
        with pytest.raises(CatalogError):
            resolve_model(name)
    with pytest.raises(CatalogError, match="file not found"):
        resolve_model_or_file(str(tmp_path / "missing.json"))
    assert resolve_model_or_file("glm-4-9b-chat").model_id == "zai-org/glm-4-9b-chat"
