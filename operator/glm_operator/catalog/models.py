"""GLM model catalog and HF ``config.json`` parsing.

The catalog is data (``catalog/data/models.yaml``); this module turns it, or any Hugging Face
``config.json`` given as a dict or a path, into a typed :class:`ModelArchitecture` that the memory
model in :mod:`glm_operator.planning.memory.fit` understands, plus the checkpoint's quantization
(``quantization_config``: fp8, awq, gptq, compressed-tensors), which decides the weights' precision.

Lookups are case-insensitive over the HF repo id, the display name and the aliases; the official
``-FP8`` checkpoint ids resolve to their base model with FP8 checkpoint quantization, and the
catalog's pre-quantized int4/int8 checkpoints (AWQ, GPTQ, compressed-tensors) to their base model
with the layout their ``quantization_config`` states. Loading is done once per process
(``functools.cache``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from glm_operator.catalog.vllm import ServingDefaults, serving_defaults

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "nvfp4")


class CatalogError(ValueError):
    """Bad or unknown catalog input (unknown model or GPU, malformed config); one line for the user."""


@dataclass(frozen=True)
class CheckpointQuantization:
    """How a checkpoint's linear layers are stored.

    ``precision`` is one of fp8 / int8 / int4 / nvfp4; ``group_size`` is the number of weights that
    share one scale (fp8 128x128 blocks = 16384, 0 = per output channel). Embeddings, lm_head, the MoE
    router and norms are never quantized by these schemes (they stay bf16/fp16). ``unquantized`` lists
    the further linear modules the checkpoint keeps in 16 bits (``modules_to_not_convert`` of AWQ/GPTQ,
    ``ignore`` of compressed-tensors), by the module names the weight model knows: ``shared_experts``
    and ``self_attn``.
    """

    method: str
    precision: str
    group_size: int = 128
    scale_bytes: float = 2.0
    zero_point_bits: int = 0
    unquantized: tuple[str, ...] = ()

    @classmethod
    def dynamic(cls, precision: str) -> CheckpointQuantization:
        """What vLLM's ``--quantization`` makes of a 16-bit checkpoint at load: one fp32 scale per output
        channel."""
        return cls("dynamic", precision, group_size=0, scale_bytes=4.0)

    @property
    def weight_bits(self) -> int:
        """Bits of one stored weight, without its scales."""
        return {"fp8": 8, "int8": 8, "int4": 4, "nvfp4": 4}[self.precision]

    @property
    def bytes_per_weight(self) -> float:
        """Storage bytes per quantized weight, including scales and packed zero points."""
        per_weight = self.weight_bits / 8
        if self.group_size > 0:
            per_weight += (self.scale_bytes + self.zero_point_bits / 8) / self.group_size
        return per_weight


def fp8_block_quantization() -> CheckpointQuantization:
    """The official zai-org ``-FP8`` layout: e4m3 weights, one fp32 scale per 128x128 block."""
    return CheckpointQuantization(method="fp8", precision="fp8", group_size=128 * 128, scale_bytes=4.0)


def _unquantized_modules(names: Any) -> tuple[str, ...]:
    """Which linear modules that change the weights' size a ``modules_to_not_convert`` / ``ignore`` list
    keeps in 16 bits: ``shared_experts`` (MoE layers' shared experts) and ``self_attn`` (attention
    projections); embeddings, lm_head, router, norms and the MTP head are 16-bit in every scheme (substring
    match like vLLM's; ``re:`` patterns of compressed-tensors are matched as text)."""
    if not isinstance(names, list):
        return ()
    text = [str(n) for n in names]
    out = []
    if any("shared_expert" in n for n in text):
        out.append("shared_experts")
    if any(_attention_projection(n) for n in text):
        out.append("self_attn")
    return tuple(out)


def _attention_projection(name: str) -> bool:
    """Whether a ``modules_to_not_convert`` entry keeps attention projections in 16 bits: the whole
    ``self_attn`` module, a pattern, or a ``*_proj`` of it. Norms under it (``self_attn.kv_a_layernorm``,
    ``self_attn.indexer.k_norm``) and the DSA indexer's tiny ``indexers_proj`` do not count: GLM-5-FP8's
    list names only those, and vLLM 0.26 loads its attention in FP8 (69.48 GiB for 10 of its layers on an
    H200, benchmarks/gpu_truth; counting the attention in 16 bits gave 70.71)."""
    if "self_attn" not in name:
        return False
    if name.startswith("re:") or "*" in name:
        return True
    last = name.rstrip(".").rsplit(".", 1)[-1]
    return last == "self_attn" or (last.endswith("proj") and "index" not in last)


def parse_quantization_config(qc: Mapping[str, Any]) -> CheckpointQuantization:
    """Map a HF ``quantization_config`` to a :class:`CheckpointQuantization`."""
    from dataclasses import replace

    layout = _parse_quantization_layout(qc)
    kept = _unquantized_modules(qc.get("modules_to_not_convert") or qc.get("ignore"))
    return replace(layout, unquantized=kept) if kept else layout


def _parse_quantization_layout(qc: Mapping[str, Any]) -> CheckpointQuantization:
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        block = qc.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2:
            return CheckpointQuantization("fp8", "fp8", int(block[0]) * int(block[1]), 4.0)
        return CheckpointQuantization("fp8", "fp8", 0, 4.0)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        group = int(qc.get("group_size", qc.get("q_group_size", 128)))
        if bits not in (4, 8):
            raise CatalogError(f"quantization_config.bits={bits} ({method}): only 4 or 8 bits are supported")
        # AWQ stores zero points when zero_point is true; GPTQ always stores packed qzeros (even sym=True)
        zero = bool(qc.get("zero_point", True)) if method.startswith("awq") else True
        return CheckpointQuantization(
            method.replace("_marlin", ""), f"int{bits}", max(group, 0), 2.0, bits if zero else 0
        )
    if method == "compressed-tensors":
        fmt = str(qc.get("format", ""))
        groups = qc.get("config_groups") or {}
        weights: Mapping[str, Any] = {}
        for group in groups.values() if isinstance(groups, Mapping) else []:
            if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
                weights = group["weights"]
                break
        bits = int(weights.get("num_bits", 8))
        kind = str(weights.get("type", "int"))
        strategy = str(weights.get("strategy", "channel"))
        gsize = int(weights.get("group_size") or 0)
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            gsize = int(block[0]) * int(block[1])
        elif strategy in ("channel", "tensor"):
            gsize = 0
        if "nvfp4" in fmt or (kind == "float" and bits == 4):
            return CheckpointQuantization("compressed-tensors", "nvfp4", 16, 1.0)
        if kind == "float" and bits == 8:
            return CheckpointQuantization("compressed-tensors", "fp8", gsize, 4.0)
        if bits in (4, 8):
            zero = not bool(weights.get("symmetric", True))
            return CheckpointQuantization("compressed-tensors", f"int{bits}", gsize, 2.0, bits if zero else 0)
        raise CatalogError(
            f"quantization_config: compressed-tensors with {bits}-bit {kind} weights is not supported"
        )
    if method in ("modelopt", "modelopt_fp4", "nvfp4"):
        return CheckpointQuantization("modelopt", "nvfp4", 16, 1.0)
    raise CatalogError(
        f"quantization_config.quant_method={method!r} is not supported; "
        "use fp8, awq, gptq or compressed-tensors"
    )


# Keys other config dialects use for the same fact (ChatGLM remote code, Mixtral/Qwen MoE).
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_layers", "n_layer"),
    "vocab_size": ("padded_vocab_size",),
    "num_key_value_heads": ("multi_query_group_num",),
    "head_dim": ("kv_channels",),
    "intermediate_size": ("ffn_hidden_size",),
    "max_position_embeddings": ("seq_length", "max_sequence_length"),
    "n_routed_experts": ("num_experts", "num_local_experts"),
    "torch_dtype": ("dtype",),
}


def _get(config: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key in config and config[key] is not None:
        return config[key]
    for alias in _KEY_ALIASES.get(key, ()):
        if alias in config and config[alias] is not None:
            return config[alias]
    return default


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = _get(config, key, default)
    if value is None:
        raise CatalogError(f"model config: required field {key!r} is missing from config.json")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise CatalogError(f"model config: field {key!r} must be an integer, got {value!r}") from None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config's ``text_config``, with the top level's quantization, architectures and
    dtype where it lacks them; any other config as it is."""
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        return config
    merged = dict(text)
    for key in ("quantization_config", "architectures", "torch_dtype", "dtype"):
        if key in config and key not in merged:
            merged[key] = config[key]
    return merged


def _linear_attention_layers(
    config: Mapping[str, Any], model_type: str, layers: int, notes: list[str]
) -> int:
    """Linear-attention (KDA) layers: given, counted in ``layer_types``, or GLM-5.3-Flash's share
    (said in ``notes``)."""
    linear_layers = _int(config, "x_linear_attention_layers", 0)
    layer_types = config.get("layer_types")
    if not linear_layers and isinstance(layer_types, list):
        linear_layers = sum(1 for t in layer_types if "linear" in str(t) or "kda" in str(t).lower())
    if not linear_layers and model_type.startswith("glm5_next"):
        linear_layers = round(layers * 34 / 45)
        notes.append("linear-attention layer count not in config; assumed 34 of 45 like GLM-5.3-Flash")
    return linear_layers


def _attention_kind(config: Mapping[str, Any], linear_layers: int, kv_lora: int, index_heads: int) -> str:
    """``hybrid``, ``mla+dsa``, ``mla`` or ``gqa`` (see :class:`ModelArchitecture`)."""
    if linear_layers:
        return "hybrid"
    if kv_lora > 0 and (index_heads > 0 or config.get("index_topk")):
        return "mla+dsa"
    if kv_lora > 0:
        return "mla"
    return "gqa"


def _index_topk_pattern(config: Mapping[str, Any]) -> str:
    """``index_topk_pattern`` as one string, F (the layer has its own indexer) or S (it shares one)."""
    pattern = config.get("index_topk_pattern")
    if isinstance(pattern, list):
        return "".join(str(p) for p in pattern)
    return str(pattern) if isinstance(pattern, str) else ""


def _dtype(config: Mapping[str, Any]) -> str:
    """The checkpoint's dtype as bf16/fp16/fp32 (bf16 where absent or unknown)."""
    dtype_raw = str(_get(config, "torch_dtype", "bfloat16")).lower()
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}.get(dtype_raw, "bf16")


@dataclass(frozen=True)
class ModelArchitecture:
    """The parts of a decoder config that decide weights and KV-cache size.

    ``attention`` is ``gqa`` (standard/grouped-query), ``mla`` (DeepSeek-style latent attention),
    ``mla+dsa`` (MLA plus the DeepSeek sparse-attention indexer, GLM-5.x) or ``hybrid`` (linear
    attention layers with a fixed per-request state plus sparse MLA layers, GLM-5.3-Flash).
    """

    model_type: str
    architecture: str
    attention: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    dtype: str = "bf16"
    max_position_embeddings: int = 0
    # the part of a head's dimensions RoPE rotates (GLM-4.x: 0.5); sizes the cos/sin cache
    partial_rotary_factor: float = 1.0
    # MoE
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    num_experts_per_tok: int = 0
    first_k_dense_replace: int = 0
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DSA indexer
    index_n_heads: int = 0
    index_head_dim: int = 0
    # IndexShare (GLM-5.2/5.3): which layers build their own indexer, as config.json says it to vLLM
    # (``index_topk_freq``, ``index_skip_topk_offset`` with vLLM's default 2, ``index_topk_pattern``)
    index_topk_freq: int = 1
    index_skip_topk_offset: int = 2
    index_topk_pattern: str = ""
    indexer_key_pool: int = 1
    # hybrid linear attention
    linear_attention_layers: int = 0
    linear_num_heads: int = 0
    linear_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    num_nextn_predict_layers: int = 0
    notes: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention in ("mla", "mla+dsa", "hybrid")

    @property
    def attention_layers(self) -> int:
        """Layers with a per-token KV cache (all layers except linear-attention ones)."""
        return self.num_layers - self.linear_attention_layers

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelArchitecture:
        """Parse a HF ``config.json`` dict (text config of multimodal models is used)."""
        if not isinstance(config, Mapping):
            raise CatalogError("model config must be a JSON object (the model's config.json)")
        config = _text_config(config)
        archs = config.get("architectures") or []
        architecture = str(archs[0]) if isinstance(archs, list) and archs else ""
        model_type = str(config.get("model_type", ""))
        hidden = _int(config, "hidden_size")
        layers = _int(config, "num_hidden_layers")
        heads = _int(config, "num_attention_heads")
        kv_heads = _int(config, "num_key_value_heads", heads)
        head_dim = _int(config, "head_dim", hidden // heads if heads else 0)
        kv_lora = _int(config, "kv_lora_rank", 0)
        index_heads = _int(config, "index_n_heads", 0)
        notes: list[str] = []
        linear_layers = _linear_attention_layers(config, model_type, layers, notes)
        attention = _attention_kind(config, linear_layers, kv_lora, index_heads)
        inter = _int(config, "intermediate_size", 4 * hidden)
        experts = _int(config, "n_routed_experts", 0)
        moe_inter = _int(config, "moe_intermediate_size", inter if experts else 0)
        n_shared = _int(config, "n_shared_experts", 0)
        shared_inter = _int(config, "shared_expert_intermediate_size", n_shared * moe_inter)
        if shared_inter and not n_shared:
            n_shared = 1
        first_dense = _int(config, "first_k_dense_replace", 0)
        dtype = _dtype(config)
        vocab = _int(config, "vocab_size")
        if min(hidden, layers, heads, vocab) <= 0:
            raise CatalogError(
                "model config: hidden_size, num_hidden_layers, num_attention_heads, vocab_size must be > 0"
            )
        return cls(
            model_type=model_type,
            architecture=architecture,
            attention=attention,
            hidden_size=hidden,
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=max(1, kv_heads),
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=vocab,
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases (vLLM's Qwen2Attention, bias=True); its config has no such key
            attention_bias=model_type == "qwen2"
            or bool(config.get("attention_bias", config.get("add_qkv_bias", False))),
            qk_norm=bool(config.get("use_qk_norm", False)),
            dtype=dtype,
            max_position_embeddings=_int(config, "max_position_embeddings", 0),
            partial_rotary_factor=float(config.get("partial_rotary_factor") or 1.0),
            n_routed_experts=experts,
            n_shared_experts=n_shared,
            moe_intermediate_size=moe_inter,
            shared_expert_intermediate_size=shared_inter,
            num_experts_per_tok=_int(config, "num_experts_per_tok", 0),
            first_k_dense_replace=first_dense,
            q_lora_rank=_int(config, "q_lora_rank", 0),
            kv_lora_rank=kv_lora,
            qk_nope_head_dim=_int(config, "qk_nope_head_dim", 0),
            qk_rope_head_dim=_int(config, "qk_rope_head_dim", 0),
            v_head_dim=_int(config, "v_head_dim", 0),
            index_n_heads=index_heads,
            index_head_dim=_int(config, "index_head_dim", 128 if index_heads else 0),
            index_topk_freq=max(1, _int(config, "index_topk_freq", 1)),
            index_skip_topk_offset=_int(config, "index_skip_topk_offset", 2),
            index_topk_pattern=_index_topk_pattern(config),
            indexer_key_pool=max(1, _int(config, "x_indexer_key_pool", 1)),
            linear_attention_layers=linear_layers,
            linear_num_heads=_int(config, "linear_num_heads", heads if linear_layers else 0),
            linear_head_dim=_int(config, "linear_head_dim", 128 if linear_layers else 0),
            linear_conv_kernel_dim=_int(config, "linear_conv_kernel_dim", 4 if linear_layers else 0),
            num_nextn_predict_layers=_int(config, "num_nextn_predict_layers", 0),
            notes=tuple(notes),
        )


@dataclass(frozen=True)
class QuantizedCheckpoint:
    """A pre-quantized checkpoint of a catalog model published by its own repository.

    ``quantization_config`` is the checkpoint's config.json ``quantization_config`` as published (kept
    as JSON text so the entry stays hashable); ``torch_dtype`` the config's dtype (AWQ checkpoints are
    float16); ``source`` where the facts were read.
    """

    id: str
    precision: str
    quantization_config_json: str
    torch_dtype: str
    source: str

    @property
    def quantization_config(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.quantization_config_json)
        return value

    @property
    def url(self) -> str:
        """The checkpoint's Hugging Face page (the first word of ``source``)."""
        return self.source.split()[0]

    @property
    def layout(self) -> CheckpointQuantization:
        return parse_quantization_config(self.quantization_config)


@dataclass(frozen=True)
class ModelEntry:
    """One catalog model (a base checkpoint id, optionally with an official FP8 sibling and
    pre-quantized int4/int8 checkpoints)."""

    id: str
    name: str
    aliases: tuple[str, ...]
    license: str
    max_context: int
    params: str
    architecture: ModelArchitecture
    fp8_checkpoint: str | None = None
    quantized_checkpoints: tuple[QuantizedCheckpoint, ...] = ()
    min_compute_capability: float = 8.0
    sources: tuple[tuple[str, str], ...] = ()
    uncertain: tuple[str, ...] = ()
    vllm: tuple[tuple[str, str], ...] = ()  # per-model overrides of catalog/data/vllm.yaml


@dataclass(frozen=True)
class ResolvedModel:
    """A model as the planner uses it: architecture, limits and the checkpoint it would load."""

    model_id: str
    name: str
    architecture: ModelArchitecture
    max_context: int
    checkpoint_quantization: CheckpointQuantization | None = None
    entry: ModelEntry | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def fp8_checkpoint(self) -> str | None:
        return self.entry.fp8_checkpoint if self.entry else None

    def quantized_checkpoint(self, precision: str) -> QuantizedCheckpoint | None:
        """The catalog's pre-quantized checkpoint of this model in ``precision`` (int4/int8), if any."""
        if self.entry is None:
            return None
        return next((c for c in self.entry.quantized_checkpoints if c.precision == precision), None)

    @property
    def min_compute_capability(self) -> float:
        return self.entry.min_compute_capability if self.entry else 8.0

    @property
    def base_id(self) -> str:
        return self.entry.id if self.entry else self.model_id

    @property
    def serving_defaults(self) -> ServingDefaults:
        """Minimum vLLM release and parser defaults for this model (architecture + catalog overrides)."""
        overrides = dict(self.entry.vllm) if self.entry else None
        return serving_defaults(self.architecture.architecture, overrides)


def _data_text(name: str) -> str:
    return resources.files("glm_operator.catalog").joinpath("data", name).read_text(encoding="utf-8")


@functools.cache
def load_models() -> tuple[ModelEntry, ...]:
    """All catalog models, parsed once per process."""
    raw = yaml.safe_load(_data_text("models.yaml"))
    entries = []
    for item in raw["models"]:
        ckpts = item.get("checkpoints") or {}
        entries.append(
            ModelEntry(
                id=str(item["id"]),
                name=str(item.get("name", item["id"])),
                aliases=tuple(str(a) for a in item.get("aliases", [])),
                license=str(item.get("license", "unknown")),
                max_context=int(item["max_context"]),
                params=str(item.get("params", "")),
                architecture=ModelArchitecture.from_hf_config(item["config"]),
                fp8_checkpoint=str(ckpts["fp8"]) if ckpts.get("fp8") else None,
                quantized_checkpoints=tuple(
                    _quantized_checkpoint(precision, ckpts[precision])
                    for precision in ("int8", "int4")
                    if ckpts.get(precision)
                ),
                min_compute_capability=float(item.get("min_compute_capability", 8.0)),
                sources=tuple((str(k), str(v)) for k, v in (item.get("sources") or {}).items()),
                uncertain=tuple(str(u) for u in item.get("uncertain") or []),
                vllm=tuple((str(k), str(v)) for k, v in (item.get("vllm") or {}).items()),
            )
        )
    return tuple(entries)


def _quantized_checkpoint(precision: str, item: Mapping[str, Any]) -> QuantizedCheckpoint:
    qc = item["quantization_config"]
    ckpt = QuantizedCheckpoint(
        id=str(item["id"]),
        precision=precision,
        quantization_config_json=json.dumps(qc, sort_keys=True),
        torch_dtype=str(item.get("torch_dtype", "bfloat16")),
        source=str(item["source"]),
    )
    if ckpt.layout.precision != precision:
        raise CatalogError(
            f"catalog: checkpoints.{precision} {ckpt.id} has a {ckpt.layout.precision} quantization_config"
        )
    return ckpt


@functools.cache
def _model_index() -> dict[str, tuple[ModelEntry, str | None]]:
    """lower-cased name -> (entry, precision of the quantized checkpoint it names or None)."""
    index: dict[str, tuple[ModelEntry, str | None]] = {}
    for entry in load_models():
        for key in (entry.id, entry.name, *entry.aliases, entry.id.split("/")[-1]):
            index.setdefault(key.lower(), (entry, None))
        if entry.fp8_checkpoint:
            short = entry.fp8_checkpoint.split("/")[-1]
            for key in (entry.fp8_checkpoint, short, f"{entry.name}-FP8"):
                index.setdefault(key.lower(), (entry, "fp8"))
        for ckpt in entry.quantized_checkpoints:
            index.setdefault(ckpt.id.lower(), (entry, ckpt.precision))
    return index


def model_names() -> list[str]:
    return [e.id for e in load_models()]


def find_model(name: str) -> tuple[ModelEntry, str | None]:
    """Catalog entry for an id/alias (case-insensitive) and the precision of the pre-quantized
    checkpoint it names (``fp8`` for the official -FP8 sibling, ``int4``/``int8``), None for the base."""
    key = name.strip().lower()
    if key.startswith("hf://"):
        key = key[len("hf://") :]
    hit = _model_index().get(key)
    if hit is None:
        raise CatalogError(
            f"model {name!r} is not in the catalog; use one of {', '.join(model_names())} "
            "or give the model's config.json (model.config / a path)"
        )
    return hit


def resolve_model_or_file(model: str) -> ResolvedModel:
    """For the CLI: a catalog id/alias, or a path to a config.json (``glm-operator estimate``)."""
    if model.endswith(".json") or Path(model).is_file():
        path = Path(model)
        if not path.is_file():
            raise CatalogError(f"--model {model}: file not found (give a catalog id or a config.json path)")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"--model {model}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return _resolve_config(config, str(config.get("_name_or_path", path.parent.name or path.name)))
    return resolve_model(model)


def resolve_model(model: str | Mapping[str, Any], model_id: str | None = None) -> ResolvedModel:
    """Resolve a catalog id/alias or an inline config dict. Never a file: what a GLMDeployment
    names must not make the operator read (or probe for) files on its own filesystem, and a stat
    per plan was a sixth of the operator's CPU in the 1,000-node benchmark."""
    if isinstance(model, Mapping):
        return _resolve_config(model, model_id or str(model.get("_name_or_path", "inline-config")))
    entry, precision = find_model(model)
    if precision in ("int4", "int8"):
        ckpt = next(c for c in entry.quantized_checkpoints if c.precision == precision)
        return ResolvedModel(
            model_id=ckpt.id,
            name=ckpt.id.split("/")[-1],
            architecture=entry.architecture,
            max_context=entry.max_context,
            checkpoint_quantization=ckpt.layout,
            entry=entry,
            notes=entry.uncertain + entry.architecture.notes,
        )
    is_fp8 = precision == "fp8"
    return ResolvedModel(
        model_id=entry.fp8_checkpoint if is_fp8 and entry.fp8_checkpoint else entry.id,
        name=f"{entry.name}-FP8" if is_fp8 else entry.name,
        architecture=entry.architecture,
        max_context=entry.max_context,
        checkpoint_quantization=fp8_block_quantization() if is_fp8 else None,
        entry=entry,
        notes=entry.uncertain + entry.architecture.notes,
    )


def _resolve_config(config: Mapping[str, Any], model_id: str) -> ResolvedModel:
    arch = ModelArchitecture.from_hf_config(config)
    qc = config.get("quantization_config")
    if qc is None and isinstance(config.get("text_config"), Mapping):
        qc = config["text_config"].get("quantization_config")
    quant = parse_quantization_config(qc) if isinstance(qc, Mapping) else None
    if not arch.max_position_embeddings:
        raise CatalogError(
            "model config: max_position_embeddings (or seq_length) is required to check the context"
        )
    return ResolvedModel(
        model_id=model_id,
        name=model_id.split("/")[-1],
        architecture=arch,
        max_context=arch.max_position_embeddings,
        checkpoint_quantization=quant,
        entry=None,
        notes=arch.notes,
    )
