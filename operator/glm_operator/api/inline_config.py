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

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


#: quant_method values whose checkpoints store ``bits`` (or AWQ's ``w_bit``) per weight.
BITS_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin")
BITS_MESSAGE = (
    "bits is required with quant_method awq or gptq (AWQ's own key w_bit also counts): give the "
    "checkpoint's bits per weight (4 or 8) from its config.json"
)
MLA_MESSAGE = (
    "kv_lora_rank (MLA attention) needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim: give all "
    "four from the model's config.json"
)
INDEXER_MESSAGE = (
    "index_n_heads and index_head_dim (the sparse-attention indexer) go together and need MLA "
    "(kv_lora_rank): give both, with the MLA keys, from the model's config.json"
)
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
EXPERTS_MESSAGE = (
    "num_experts_per_tok is required with n_routed_experts (num_experts, num_local_experts) > 0, "
    "at least 1 and at most the number of experts: give it from the model's config.json"
)


def _cel(rule: str, message: str, field_path: str) -> dict[str, Any]:
    return {"rule": rule, "message": message, "fieldPath": field_path}


class QuantizationConfig(_Free):
    """The checkpoint's ``quantization_config``: the keys the planner reads are typed."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    f"!has(self.quant_method) || !(self.quant_method.lowerAscii() in {list(BITS_METHODS)}) "
                    "|| has(self.bits) || has(self.w_bit)",
                    BITS_MESSAGE,
                    ".bits",
                )
            ]
        }
    )

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

    @model_validator(mode="after")
    def _bits_given(self) -> QuantizationConfig:
        method = (self.quant_method or "").lower()
        if method in BITS_METHODS and self.bits is None and self.w_bit is None:
            raise ValueError(f"quantization_config.{BITS_MESSAGE}")
        return self


class _Architecture(_Free):
    """Keys of a decoder config.json the planner reads, with their bounds.

    Sizes are positive when given (``qk_rope_head_dim`` may be 0: NoPE MLA layers, GLM-5.3-Flash),
    and the keys that only make sense together must come together: the MLA ranks and head
    dimensions, the indexer's heads and dimension (with MLA), the experts and experts per token.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.kv_lora_rank) || (has(self.qk_rope_head_dim) && has(self.qk_nope_head_dim) "
                    "&& has(self.v_head_dim))",
                    MLA_MESSAGE,
                    ".kv_lora_rank",
                ),
                _cel(
                    "has(self.index_n_heads) == has(self.index_head_dim) && "
                    "(!has(self.index_n_heads) || has(self.kv_lora_rank))",
                    INDEXER_MESSAGE,
                    ".index_n_heads",
                ),
                *(
                    _cel(
                        f"!has(self.{key}) || self.{key} == 0 || (has(self.num_experts_per_tok) && "
                        f"self.num_experts_per_tok >= 1 && self.num_experts_per_tok <= self.{key})",
                        EXPERTS_MESSAGE,
                        ".num_experts_per_tok",
                    )
                    for key in EXPERT_KEYS
                ),
            ]
        }
    )

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
    moe_intermediate_size: int | None = _int(1, MAX_INTERMEDIATE_SIZE, "Intermediate size of one expert")
    shared_expert_intermediate_size: int | None = _int(
        0, MAX_INTERMEDIATE_SIZE, "Intermediate size of the shared experts"
    )
    first_k_dense_replace: int | None = _int(0, MAX_LAYERS, "Leading dense (non-MoE) layers")
    q_lora_rank: int | None = _int(1, MAX_LORA_RANK, "MLA query LoRA rank")
    kv_lora_rank: int | None = _int(1, MAX_LORA_RANK, "MLA key/value LoRA rank")
    qk_nope_head_dim: int | None = _int(1, MAX_HEAD_DIM, "MLA non-rotary query/key head dimension")
    qk_rope_head_dim: int | None = _int(0, MAX_HEAD_DIM, "MLA rotary query/key head dimension (0: NoPE)")
    v_head_dim: int | None = _int(1, MAX_HEAD_DIM, "MLA value head dimension")
    index_n_heads: int | None = _int(1, MAX_HEADS, "Sparse-attention indexer heads")
    index_head_dim: int | None = _int(1, MAX_HEAD_DIM, "Sparse-attention indexer head dimension")
    linear_num_heads: int | None = _int(1, MAX_HEADS, "Linear-attention heads")
    linear_head_dim: int | None = _int(1, MAX_HEAD_DIM, "Linear-attention head dimension")
    linear_conv_kernel_dim: int | None = _int(0, 64, "Linear-attention convolution kernel")
    num_nextn_predict_layers: int | None = _int(0, 16, "Multi-token-prediction layers")
    x_linear_attention_layers: int | None = _int(0, MAX_LAYERS, "Linear-attention layers")
    index_topk_freq: int | None = _int(1, MAX_LAYERS, "Layers sharing one sparse indexer")
    index_skip_topk_offset: int | None = _int(0, MAX_LAYERS, "Layers before the first shared indexer")
    index_topk_pattern: str | None = Field(
        None,
        max_length=MAX_LAYERS,
        pattern="^[FS]*$",
        description=f"Per layer, F (own indexer) or S (shares the previous one); at most {MAX_LAYERS}.",
    )
    x_indexer_key_pool: int | None = _int(1, 64, "Indexer key pool size")
    layer_types: LayerList = _per_layer("Attention type of each layer")
    indexer_types: LayerList = _per_layer("Indexer type of each layer (vLLM reads index_topk_*)")
    quantization_config: QuantizationConfig | None = Field(
        None, description="How the checkpoint's weights are quantized (absent: not quantized)."
    )

    @model_validator(mode="after")
    def _companions(self) -> _Architecture:
        mla = (self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if self.kv_lora_rank is not None and None in mla:
            raise ValueError(MLA_MESSAGE)
        indexer = (self.index_n_heads is None, self.index_head_dim is None)
        if indexer[0] != indexer[1] or (not indexer[0] and self.kv_lora_rank is None):
            raise ValueError(INDEXER_MESSAGE)
        per_token = self.num_experts_per_tok
        for experts in (getattr(self, key) for key in EXPERT_KEYS):
            if experts and (per_token is None or not 1 <= per_token <= experts):
                raise ValueError(EXPERTS_MESSAGE)
        return self


class InlineTextConfig(_Architecture):
    """``text_config`` of a multimodal config.json: the language model's architecture."""


class InlineModelConfig(_Architecture):
    """A Hugging Face config.json: the keys the planner reads are bounded, the rest kept as given."""

    text_config: InlineTextConfig | None = Field(
        None, description="Language-model part of a multimodal config (read instead of the top level)."
    )
