"""What vLLM's "Model loading took" counts on one rank of each pipeline stage (pure).

Parameters are counted from the config the way vLLM shards them: tensor parallel splits attention heads,
MLP and expert intermediate sizes and the padded vocabulary; MLA's down-projections, the DSA indexer,
the router and norms are replicated; pipeline parallel splits the layers (embeddings on the first stage,
lm_head on the last). Quantized checkpoints store their linear layers in the checkpoint's layout
(``CheckpointQuantization``), everything else in 16 bits. Beyond the parameters, loading holds the RoPE
cache, glm4_moe's fp32 router, MLA's dequantized ``kv_b_proj`` copies and the caching allocator's
rounding (``memory.load``). docs/memory-model.md ("Weights").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from glm_operator.catalog.models import (
    WEIGHT_PRECISIONS,
    CheckpointQuantization,
    ModelArchitecture,
    ResolvedModel,
)
from glm_operator.planning.memory.instance import FitInputError
from glm_operator.planning.memory.layers import layer_kinds, pp_layer_ranges
from glm_operator.planning.memory.load import (
    allocator_waste_bytes,
    rope_cache_bytes,
    router_fp32_extra_bytes,
    weight_tensor_sizes,
)
from glm_operator.planning.memory.parallel import mtp_layers, routed_experts_per_rank
from glm_operator.planning.memory.settings import VOCAB_PADDING


def resolve_weight_precision(
    model: ResolvedModel, quantization: str
) -> tuple[str, CheckpointQuantization | None]:
    """Weights precision for ``quantization`` ('auto' follows the checkpoint) and its storage layout."""
    ckpt = model.checkpoint_quantization
    q = quantization.lower()
    if q == "auto":
        if ckpt is not None:
            return ckpt.precision, ckpt
        return ("fp16" if model.architecture.dtype == "fp16" else "bf16"), None
    if q not in WEIGHT_PRECISIONS:
        raise FitInputError(f"quantization {quantization!r}: use auto, {', '.join(WEIGHT_PRECISIONS)}")
    if ckpt is not None and q in ("bf16", "fp16"):
        raise FitInputError(
            f"quantization {q}: checkpoint {model.model_id} is already {ckpt.precision} ({ckpt.method}); "
            "use quantization auto or a bf16 checkpoint"
        )
    if ckpt is not None and ckpt.precision == q:
        return q, ckpt
    if q == "fp8":
        # vLLM quantizes a bf16 checkpoint on the fly (--quantization fp8): per-channel scales
        return q, CheckpointQuantization("fp8-dynamic", "fp8", 0, 4.0)
    if q in ("int8", "int4", "nvfp4"):
        bits = 8 if q == "int8" else 4
        if q == "nvfp4":
            return q, CheckpointQuantization("modelopt", "nvfp4", 16, 1.0)
        # a pre-quantized GPTQ/AWQ-style checkpoint: group 128, fp16 scales (+ zero points for int4)
        return q, CheckpointQuantization("gptq", q, 128, 2.0, bits if bits == 4 else 0)
    return q, None


@dataclass(frozen=True)
class _Elements:
    """Parameter elements on one rank: quantizable linear weights vs. always-bf16 parameters."""

    linear: float = 0.0
    other: float = 0.0

    def __add__(self, o: _Elements) -> _Elements:
        return _Elements(self.linear + o.linear, self.other + o.other)

    def scale(self, k: float) -> _Elements:
        return _Elements(self.linear * k, self.other * k)


def _attention_elements(arch: ModelArchitecture, tp: int, with_indexer: bool) -> _Elements:
    h = arch.hidden_size
    heads = arch.num_attention_heads / tp
    if arch.is_mla:
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        linear = 0.0
        other = 2.0 * h  # input + post-attention layernorm
        if arch.q_lora_rank:
            linear += h * arch.q_lora_rank + arch.q_lora_rank * heads * qk
            other += arch.q_lora_rank
        else:
            linear += h * heads * qk
        linear += h * (arch.kv_lora_rank + arch.qk_rope_head_dim)  # kv_a_proj_with_mqa (replicated)
        linear += arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim)
        linear += heads * arch.v_head_dim * h
        other += arch.kv_lora_rank
        if with_indexer and arch.index_n_heads:
            q_in = arch.q_lora_rank or h
            linear += q_in * arch.index_n_heads * arch.index_head_dim + h * arch.index_head_dim
            other += h * arch.index_n_heads + 2 * arch.index_head_dim
        return _Elements(linear, other)
    kv_rank = max(1.0, arch.num_kv_heads / tp) * arch.head_dim
    q_rank = heads * arch.head_dim
    linear = h * (q_rank + 2 * kv_rank) + q_rank * h
    other = 2.0 * h
    if arch.attention_bias:
        other += q_rank + 2 * kv_rank
    if arch.qk_norm:
        other += 2 * arch.head_dim
    return _Elements(linear, other)


def _linear_attention_elements(arch: ModelArchitecture, tp: int) -> _Elements:
    """KDA (gated delta) layer [inferred]: q/k/v/o projections, gates, short convolution."""
    h = arch.hidden_size
    inner = arch.linear_num_heads * arch.linear_head_dim / tp
    heads = arch.linear_num_heads / tp
    linear = 4 * h * inner + 2 * h * heads + 2 * h * arch.linear_head_dim
    other = 3 * inner * arch.linear_conv_kernel_dim + 2.0 * h + heads
    return _Elements(linear, other)


def _mlp_elements(arch: ModelArchitecture, tp: int, layer: int, ep: int = 1) -> _Elements:
    h = arch.hidden_size
    # GLM-5.x's MoE under data-parallel attention with TP > 1 runs sequence-parallel: its dense MLPs and
    # shared experts are whole on every rank (vLLM 0.33 ``models/deepseek_v32/nvidia/model.py`` L78-116)
    mlp_tp = 1 if ep > 1 and tp > 1 and arch.attention == "mla+dsa" else tp
    if not arch.is_moe or layer < arch.first_k_dense_replace:
        return _Elements(3.0 * h * arch.intermediate_size / mlp_tp, 0.0)
    count, inter = routed_experts_per_rank(arch, tp, ep)
    experts = count * 3.0 * h * inter
    shared = 3.0 * h * arch.shared_expert_intermediate_size / mlp_tp
    router = arch.n_routed_experts * h + arch.n_routed_experts
    return _Elements(experts + shared, float(router))


def mtp_weights_bytes(
    arch: ModelArchitecture,
    tp: int,
    precision: str,
    layout: CheckpointQuantization | None,
    ep: int = 1,
    own_embedding: bool = False,
) -> float:
    """What the MTP drafter adds to the weights of the last pipeline stage's ranks: per MTP layer one decoder
    layer sharded like the model's MoE layers (its attention always with an indexer on a DSA model), the
    replicated bf16 ``eh_proj`` (2 h x h) and three norms (vLLM 0.33 ``glm4_moe_mtp.py`` L90-93,
    ``deepseek_mtp``); the embedding and LM head are the target's, except with PP > 1 where the last stage
    keeps an embedding of its own (``own_embedding``; ``spec_decode/eagle/utils.py`` L41-78)."""
    layers = mtp_layers(arch)
    if not layers:
        return 0.0
    other_bytes, linear_bytes = element_bytes(arch, precision, layout)
    h = arch.hidden_size
    layer = _attention_elements(arch, tp, with_indexer=True) + _mlp_elements(arch, tp, arch.num_layers, ep)
    per_layer = layer.linear * linear_bytes + layer.other * other_bytes + (2.0 * h * h + 3.0 * h) * 2.0
    embedding = (
        math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING / tp * h * 2.0 if own_embedding else 0.0
    )
    return layers * per_layer + embedding


def count_parameters(arch: ModelArchitecture) -> float:
    """Total parameters (embeddings and lm_head included, MTP layers excluded)."""
    total = _stage_elements(arch, 1, 0, arch.num_layers, first=True, last=True)
    return total.linear + total.other


def _stage_elements(
    arch: ModelArchitecture, tp: int, start: int, end: int, first: bool, last: bool, ep: int = 1
) -> _Elements:
    kinds = layer_kinds(arch)
    total = _Elements()
    for layer in range(start, end):
        is_linear, has_idx = kinds[layer]
        if is_linear:
            total = total + _linear_attention_elements(arch, tp)
        else:
            total = total + _attention_elements(arch, tp, has_idx)
        total = total + _mlp_elements(arch, tp, layer, ep)
    vocab_rank = math.ceil(math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING / tp)
    if first:
        total = total + _Elements(0.0, float(vocab_rank * arch.hidden_size))
    if last:
        if not arch.tie_word_embeddings or not first:
            total = total + _Elements(0.0, float(vocab_rank * arch.hidden_size))
        total = total + _Elements(0.0, float(arch.hidden_size))
    return total


@functools.lru_cache(maxsize=4096)
def weights_bytes_per_stage(
    arch: ModelArchitecture,
    tp: int,
    pp: int,
    precision: str,
    layout: CheckpointQuantization | None,
    ep: int = 1,
) -> tuple[float, ...]:
    """Weight bytes held by one rank of each pipeline stage (``ep`` > 1: whole routed experts spread over
    that many expert-parallel ranks, everything else sharded by ``tp`` alone)."""
    other_bytes, linear_bytes = element_bytes(arch, precision, layout)
    layout = stored_layout(precision, layout)
    kept = layout.unquantized if layout is not None else ()
    out = []
    ranges = pp_layer_ranges(arch.num_layers, pp)
    for stage, (start, end) in enumerate(ranges):
        el = _stage_elements(arch, tp, start, end, first=stage == 0, last=stage == pp - 1, ep=ep)
        k = _unquantized_linear(arch, tp, start, end, kept) if kept else 0.0
        copies = 0.0
        if precision not in ("bf16", "fp16") and "self_attn" not in kept:
            copies = _mla_dequantized_copies(arch, tp, start, end)
        out.append((el.linear - k) * linear_bytes + el.other * other_bytes + (k + copies) * 2.0)
    return tuple(out)


def element_bytes(
    arch: ModelArchitecture, precision: str, layout: CheckpointQuantization | None
) -> tuple[float, float]:
    """(bytes per norm/embedding element, bytes per linear weight) in ``precision``."""
    other_bytes = 4.0 if arch.dtype == "fp32" and precision not in ("bf16", "fp16") else 2.0
    stored = stored_layout(precision, layout)
    return other_bytes, (stored.bytes_per_weight if stored else 2.0)


def stored_layout(precision: str, layout: CheckpointQuantization | None) -> CheckpointQuantization | None:
    """How the linear weights are stored in ``precision``: the checkpoint's layout, vLLM's online
    quantization where the checkpoint is 16-bit, or None for 16-bit weights."""
    if precision in ("bf16", "fp16"):
        return None
    return layout or CheckpointQuantization.dynamic(precision)


@functools.lru_cache(maxsize=4096)
def load_extra_bytes_per_stage(
    arch: ModelArchitecture,
    tp: int,
    pp: int,
    precision: str,
    layout: CheckpointQuantization | None,
    scoped_max_split: bool,
    ep: int = 1,
) -> tuple[float, ...]:
    """What "Model loading took" counts beyond the weights on one rank of each pipeline stage: the RoPE
    cache, glm4_moe's fp32 router and the caching allocator's rounding of the weight tensors
    (:mod:`glm_operator.planning.memory.load`; DeepGEMM's workspace is added by the caller)."""
    other_bytes, _ = element_bytes(arch, precision, layout)
    # the weight tensors alone (their scales are tensors apart, too small to round)
    stored = stored_layout(precision, layout)
    tensor_bytes = stored.weight_bits / 8 if stored else 2.0
    kinds = layer_kinds(arch)
    out = []
    for stage, (start, end) in enumerate(pp_layer_ranges(arch.num_layers, pp)):
        first, last = stage == 0, stage == pp - 1
        moe_layers = sum(1 for n in range(start, end) if arch.is_moe and n >= arch.first_k_dense_replace)
        sizes = weight_tensor_sizes(arch, tp, kinds[start:end], start, first, last, tensor_bytes, ep)
        out.append(
            rope_cache_bytes(arch, other_bytes)
            + router_fp32_extra_bytes(arch, moe_layers, other_bytes)
            + allocator_waste_bytes(sizes, scoped_max_split)
        )
    return tuple(out)


def _mla_dequantized_copies(arch: ModelArchitecture, tp: int, start: int, end: int) -> float:
    """16-bit elements MLA keeps beside a quantized ``kv_b_proj`` in layers [start, end).

    vLLM's MLA attention (``MLACommonImpl.process_weights_after_loading``,
    ``vllm/v1/attention/backends/mla/common.py``, 0.8-0.33) dequantizes ``kv_b_proj`` into ``W_UK_T`` and
    ``W_UV`` ("we currently do not have quantized bmm's ... we just store fp16/bf16 copies") and keeps
    them next to the quantized weight; with a bf16 ``kv_b_proj`` they are views of it. They count in
    "Model loading took": GLM-4.7-Flash with --quantization fp8 loads 29.02 GiB on the H200 where its
    parameters count 28.48 (47 layers x 512 x 20 x 448 x 2 B = 0.40 GiB of copies), GLM-5-FP8 cut to 10
    layers 69.48 where they count 69.09 (0.27 GiB) (benchmarks/gpu_truth logs).
    """
    if not arch.is_mla:
        return 0.0
    kinds = layer_kinds(arch)
    attention_layers = sum(1 for layer in range(start, end) if not kinds[layer][0])
    heads = arch.num_attention_heads / tp
    per_layer = arch.kv_lora_rank * heads * (arch.qk_nope_head_dim + arch.v_head_dim)
    return attention_layers * per_layer


def _unquantized_linear(
    arch: ModelArchitecture, tp: int, start: int, end: int, kept: tuple[str, ...]
) -> float:
    """Linear elements of layers [start, end) a quantized checkpoint keeps in 16 bits
    (``CheckpointQuantization.unquantized``: shared experts, attention projections)."""
    total = 0.0
    kinds = layer_kinds(arch)
    for layer in range(start, end):
        if "shared_experts" in kept and arch.is_moe and layer >= arch.first_k_dense_replace:
            total += 3.0 * arch.hidden_size * arch.shared_expert_intermediate_size / tp
        if "self_attn" in kept:
            is_linear, has_idx = kinds[layer]
            el = _linear_attention_elements(arch, tp) if is_linear else _attention_elements(arch, tp, has_idx)
            total += el.linear
    return total


@dataclass(frozen=True)
class LoggedWeights:
    """vLLM's own "Model loading took" for a model in one precision, where it is above the config's count."""

    tensor_parallel_size: int
    gib_per_gpu: float
    source: str


#: Start-up logs whose "Model loading took" the config's parameters do not explain: the planner scales its
#: count up to them at every TP/PP (``memory.fit``), assuming the difference shards with TP like the rest.
#: Keyed by the catalog's model id (its checkpoints included) and the weights' precision.
LOGGED_WEIGHTS: dict[tuple[str, str], LoggedWeights] = {
    ("zai-org/GLM-5.3", "fp8"): LoggedWeights(
        8, 94.46, "vllm-project/recipes#893: 'FP8 weights take 94.46 GiB per rank' (TP8 H200, vLLM 0.28.0)"
    ),
    # [inferred] the same architecture and parameter count as GLM-5.3; with it a 1M-token GLM-5.2-FP8 start
    # on 8x H200 (26.5 GiB of KV cache) is matched within 1 %
    ("zai-org/GLM-5.2", "fp8"): LoggedWeights(8, 94.46, "GLM-5.3-FP8's figure (vllm-project/recipes#893)"),
}


def logged_weights(model: ResolvedModel, precision: str) -> LoggedWeights | None:
    """The logged "Model loading took" of ``model`` (or its catalog entry's checkpoints) in ``precision``."""
    if model.entry is None:
        return None
    return LOGGED_WEIGHTS.get((model.entry.id, precision))
