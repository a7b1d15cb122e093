"""``spec.model.config``: an inline Hugging Face config.json, free-form but bounded.

The planner reads a model's architecture from these keys; its work grows with the number of
layers (about 0.7 ms per layer per plan), so a config of a million layers would hold the operator
for minutes. The keys the planner reads are typed and bounded here, well above every published
decoder (GLM-5.x: 92 layers, 96 heads, 288 experts); every other key is kept as given
(``extra="allow"``, ``x-kubernetes-preserve-unknown-fields`` in the CRD), so a real config.json
pastes in unchanged. Bounds are OpenAPI ``minimum``/``maximum``/``maxItems`` in the generated CRD,
so the apiserver refuses an out-of-range value naming the field, and pydantic refuses the same
values offline (``glm-operator plan``) and in the operator. Integers are strict: a string ``"80"``
is refused by the apiserver's structural schema, and here too.

HF key names are snake_case, so these models do not use the camelCase aliases of the rest of the
API.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

MAX_LAYERS = 256
MAX_HEADS = 1024
MAX_EXPERTS = 4096
MAX_HIDDEN_SIZE = 131072
MAX_HEAD_DIM = 8192
MAX_INTERMEDIATE_SIZE = 1 << 20
MAX_VOCAB_SIZE = 1 << 22
MAX_LORA_RANK = 65536
MAX_POSITIONS = 1 << 27


def _int(low: int, high: int, what: str) -> Any:
    return Field(None, strict=True, ge=low, le=high, description=f"{what} ({low} to {high}).")


LayerList = list[Annotated[str, Field(max_length=64)]] | None


def _per_layer(what: str) -> Any:
    return Field(
        None, max_length=MAX_LAYERS, description=f"{what}, one entry per layer (at most {MAX_LAYERS})."
    )


class _Free(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=(), populate_by_name=True)


class QuantizationConfig(_Free):
    """The checkpoint's ``quantization_config``: the keys the planner reads are typed."""

    quant_method: str | None = Field(
        None, max_length=64, description="fp8, awq, gptq, compressed-tensors, modelopt, ..."
    )
    bits: int | None = _int(1, 16, "Bits per quantized weight (AWQ/GPTQ)")
    w_bit: int | None = _int(1, 16, "Bits per quantized weight (AWQ's own key)")
    group_size: int | None = _int(-1, 1 << 20, "Weights sharing one scale; -1 per channel")
    q_group_size: int | None = _int(-1, 1 << 20, "Weights sharing one scale (AWQ's own key)")
    weight_block_size: list[Annotated[int, Field(strict=True, ge=1, le=1 << 16)]] | None = Field(
        None, min_length=2, max_length=2, description="FP8 block shape, two positive integers."
    )
    zero_point: bool | None = Field(None, description="AWQ stores zero points.")
    format: str | None = Field(None, max_length=128, description="compressed-tensors format.")
    config_groups: dict[str, Any] | None = Field(
        None, description="compressed-tensors groups (free-form; the first group's weights are read)."
    )


class _Architecture(_Free):
    """Keys of a decoder config.json the planner reads, with their bounds."""

    architectures: list[Annotated[str, Field(max_length=256)]] | None = Field(
        None, max_length=16, description="Model class names, for example Glm4MoeForCausalLM."
    )
    model_type: str | None = Field(None, max_length=128, description="HF model type, for example glm4_moe.")
    torch_dtype: str | None = Field(None, max_length=32, description="Weights dtype, for example bfloat16.")
    dtype: str | None = Field(None, max_length=32, description="Weights dtype (newer transformers key).")
    hidden_size: int | None = _int(1, MAX_HIDDEN_SIZE, "Hidden size")
    num_hidden_layers: int | None = _int(1, MAX_LAYERS, "Decoder layers")
    num_layers: int | None = _int(1, MAX_LAYERS, "Decoder layers (ChatGLM's key)")
    n_layer: int | None = _int(1, MAX_LAYERS, "Decoder layers (GPT-style key)")
    num_attention_heads: int | None = _int(1, MAX_HEADS, "Attention heads")
    num_key_value_heads: int | None = _int(1, MAX_HEADS, "Key/value heads (GQA)")
    multi_query_group_num: int | None = _int(1, MAX_HEADS, "Key/value heads (ChatGLM's key)")
    head_dim: int | None = _int(1, MAX_HEAD_DIM, "Dimension of one attention head")
    kv_channels: int | None = _int(1, MAX_HEAD_DIM, "Dimension of one attention head (ChatGLM's key)")
    intermediate_size: int | None = _int(1, MAX_INTERMEDIATE_SIZE, "MLP intermediate size")
    ffn_hidden_size: int | None = _int(1, MAX_INTERMEDIATE_SIZE, "MLP intermediate size (ChatGLM's key)")
    vocab_size: int | None = _int(1, MAX_VOCAB_SIZE, "Vocabulary size")
    padded_vocab_size: int | None = _int(1, MAX_VOCAB_SIZE, "Vocabulary size (ChatGLM's key)")
    max_position_embeddings: int | None = _int(1, MAX_POSITIONS, "Longest context the model supports")
    seq_length: int | None = _int(1, MAX_POSITIONS, "Longest context (ChatGLM's key)")
    max_sequence_length: int | None = _int(1, MAX_POSITIONS, "Longest context (another dialect's key)")
    n_routed_experts: int | None = _int(0, MAX_EXPERTS, "Routed MoE experts")
    num_experts: int | None = _int(0, MAX_EXPERTS, "Routed MoE experts (Qwen's key)")
    num_local_experts: int | None = _int(0, MAX_EXPERTS, "Routed MoE experts (Mixtral's key)")
    n_shared_experts: int | None = _int(0, 64, "Shared MoE experts")
    num_experts_per_tok: int | None = _int(0, MAX_EXPERTS, "Experts active per token")
    moe_intermediate_size: int | None = _int(0, MAX_INTERMEDIATE_SIZE, "Intermediate size of one expert")
    shared_expert_intermediate_size: int | None = _int(
        0, MAX_INTERMEDIATE_SIZE, "Intermediate size of the shared experts"
    )
    first_k_dense_replace: int | None = _int(0, MAX_LAYERS, "Leading dense (non-MoE) layers")
    q_lora_rank: int | None = _int(0, MAX_LORA_RANK, "MLA query LoRA rank")
    kv_lora_rank: int | None = _int(0, MAX_LORA_RANK, "MLA key/value LoRA rank")
    qk_nope_head_dim: int | None = _int(0, MAX_HEAD_DIM, "MLA non-rotary query/key head dimension")
    qk_rope_head_dim: int | None = _int(0, MAX_HEAD_DIM, "MLA rotary query/key head dimension")
    v_head_dim: int | None = _int(0, MAX_HEAD_DIM, "MLA value head dimension")
    index_n_heads: int | None = _int(0, MAX_HEADS, "Sparse-attention indexer heads")
    index_head_dim: int | None = _int(0, MAX_HEAD_DIM, "Sparse-attention indexer head dimension")
    linear_num_heads: int | None = _int(0, MAX_HEADS, "Linear-attention heads")
    linear_head_dim: int | None = _int(0, MAX_HEAD_DIM, "Linear-attention head dimension")
    linear_conv_kernel_dim: int | None = _int(0, 64, "Linear-attention convolution kernel")
    num_nextn_predict_layers: int | None = _int(0, 16, "Multi-token-prediction layers")
    x_linear_attention_layers: int | None = _int(0, MAX_LAYERS, "Linear-attention layers")
    x_indexer_cache_layers: int | None = _int(0, MAX_LAYERS, "Layers with an indexer key cache")
    x_indexer_key_pool: int | None = _int(1, 64, "Indexer key pool size")
    layer_types: LayerList = _per_layer("Attention type of each layer")
    indexer_types: LayerList = _per_layer("Indexer cache type of each layer")
    quantization_config: QuantizationConfig | None = Field(
        None, description="How the checkpoint's weights are quantized (absent: not quantized)."
    )


class InlineTextConfig(_Architecture):
    """``text_config`` of a multimodal config.json: the language model's architecture."""


class InlineModelConfig(_Architecture):
    """A Hugging Face config.json: the keys the planner reads are bounded, the rest kept as given."""

    text_config: InlineTextConfig | None = Field(
        None, description="Language-model part of a multimodal config (read instead of the top level)."
    )
