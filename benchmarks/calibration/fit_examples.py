"""The rows of tests/fixtures/fit-examples.csv (public vLLM start-up figures) as cases for the fit model.

Every CSV row is classified: USED rows (with what is compared) or NOT_USED (why). For used rows the
KV bytes per token, the weights per GPU and the KV-cache tokens from the logged "Available KV cache memory"
are compared (tests/unit/test_fit_examples.py asserts them); end-to-end KV-cache tokens (our own budget
from GPU memory and utilisation) are printed by benchmarks/calibration/fit_errors.py for rows whose GPU is
known. Non-GLM rows use the models' public config.json values given inline (the "any other model" path).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.calibration.fit_truth import CONFIGS
from glm_operator.catalog.models import ResolvedModel, resolve_model
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import FitInput, FitResult

CSV_PATH = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "fit-examples.csv"

QWEN25_72B_GPTQ_INT4: dict[str, Any] = {
    "_name_or_path": "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4",
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 29568,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "attention_bias": True,
    "max_position_embeddings": 32768,
    "torch_dtype": "float16",
    "quantization_config": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
    },
}
QWEN3_14B: dict[str, Any] = {
    "_name_or_path": "Qwen/Qwen3-14B",
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 17408,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
LLAMA31_8B: dict[str, Any] = {
    "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
    **CONFIGS["meta-llama/Llama-3.1-8B-Instruct"],
}


@dataclass(frozen=True)
class EndToEnd:
    """Our own budget for a row whose GPU is known (torch total memory, utilisation, engine knobs)."""

    gpu_memory_gib: float
    gpu_memory_utilization: float
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    cudagraph_estimate: bool = True
    assumption: str = ""


@dataclass(frozen=True)
class Case:
    row: int
    label: str
    model: str | dict[str, Any]
    max_model_len: int
    quantization: str = "auto"
    kv_cache_dtype: str = "auto"
    tp: int = 1
    pp: int = 1
    dcp: int = 1
    extra_kv_layers: int = 0
    available_kv_gib: float | None = None
    logged_tokens: int | None = None
    logged_weights_gib: float | None = None
    logged_bytes_per_token: float | None = None  # measured per-token figure when the row states one
    e2e: EndToEnd | None = None
    why: str = ""

    def resolved(self) -> ResolvedModel:
        return resolve_model(self.model)

    @property
    def implied_bytes_per_token(self) -> float | None:
        if self.logged_bytes_per_token is not None:
            return self.logged_bytes_per_token
        if self.available_kv_gib is not None and self.logged_tokens:
            return self.available_kv_gib * 1024**3 * self.dcp / self.logged_tokens
        return None

    def fit(self, end_to_end: bool = False) -> FitResult:
        e2e = self.e2e if end_to_end else None
        return estimate_fit(
            FitInput(
                model=self.resolved(),
                max_model_len=self.max_model_len,
                gpu_memory_gib=e2e.gpu_memory_gib if e2e else 80.0,
                tensor_parallel_size=self.tp,
                pipeline_parallel_size=self.pp,
                decode_context_parallel_size=self.dcp,
                quantization=self.quantization,
                kv_cache_dtype=self.kv_cache_dtype,
                gpu_memory_utilization=e2e.gpu_memory_utilization if e2e else 0.9,
                max_num_batched_tokens=e2e.max_num_batched_tokens if e2e else None,
                max_num_seqs=e2e.max_num_seqs if e2e else None,
                available_kv_cache_gib=None if e2e else self.available_kv_gib,
                extra_kv_layers=self.extra_kv_layers,
                cudagraph_estimate=e2e.cudagraph_estimate if e2e else True,
                compute_capability=12.0 if "GLM-5" in str(self.model) else 9.0,
            )
        )


USED: tuple[Case, ...] = (
    Case(
        row=1,
        label="GLM-5.1 bf16 TP16 DCP8 fp8 KV, RTX PRO 6000",
        model="zai-org/GLM-5.1",
        max_model_len=202752,
        kv_cache_dtype="fp8",
        tp=16,
        dcp=8,
        available_kv_gib=1.49,
        logged_tokens=208383,
        e2e=EndToEnd(95.13, 0.976, 1024, 1, True, "RTX PRO 6000 memory estimated; custom dev build"),
        why="78 MLA+DSA layers, fp8_ds_mla 656 B + indexer 132 B; KV memory logged",
    ),
    Case(
        row=3,
        label="GLM-5.1-NVFP4-MTP TP8 DCP4 fp8 KV (+1 MTP layer)",
        model="zai-org/GLM-5.1",
        max_model_len=202752,
        kv_cache_dtype="fp8",
        tp=8,
        dcp=4,
        extra_kv_layers=1,
        available_kv_gib=7.58,
        logged_tokens=523008,
        why="KV memory logged; weights are NVFP4 of a community checkpoint (layout unknown): not compared",
    ),
    Case(
        row=7,
        label="GLM-5.2-class fp8_ds_mla (+1 MTP layer), measured bytes/token",
        model="zai-org/GLM-5.2",
        max_model_len=240000,
        kv_cache_dtype="fp8",
        tp=4,
        extra_kv_layers=1,
        logged_bytes_per_token=54728,
        why="PR states 54,728 B/token for all layers with fp8_ds_mla (79 x 656 + 22 indexer layers x 132)",
    ),
    Case(
        row=15,
        label="Qwen2.5-72B GPTQ-Int4 TP1 (vLLM 0.6.4 V0)",
        model=QWEN25_72B_GPTQ_INT4,
        max_model_len=8192,
        available_kv_gib=0.39,
        logged_tokens=1280,
        logged_weights_gib=38.526,
        e2e=EndToEnd(
            47.74, 0.95, 8192, 256, False, "V0 engine; the issue is a non-torch regression (4.09 GiB)"
        ),
        why="weights logged ('GB' = GiB in V0); kv_cache_size 0.39 GiB logged",
    ),
    Case(
        row=17,
        label="Qwen3-14B TP1 (~0.10.2)",
        model=QWEN3_14B,
        max_model_len=32768,
        available_kv_gib=6.51,
        logged_tokens=42656,
        why="KV memory logged",
    ),
    Case(
        row=19,
        label="Llama 3.1 8B + EAGLE draft layer, H100",
        model=LLAMA31_8B,
        max_model_len=131072,
        extra_kv_layers=1,
        available_kv_gib=51.63,
        logged_tokens=410128,
        e2e=EndToEnd(
            79.19, 0.9, 8192, 256, False, "util 0.9 assumed (not logged); draft weights not counted"
        ),
        why="KV memory logged; 1 draft layer with its own KV",
    ),
    Case(
        row=13,
        label="glm-4-9b-chat TP1 RTX 4090 (V0 engine)",
        model="zai-org/glm-4-9b-chat",
        max_model_len=131072,
        logged_tokens=53376,
        e2e=EndToEnd(
            23.53, 0.9, 2048, 256, False, "util/max_num_batched_tokens not logged (defaults assumed)"
        ),
        why="only an end-to-end figure: GPU known, utilisation and engine settings assumed",
    ),
)

#: rows checked for structure only (block size / record size), no token or byte totals
STRUCTURE_ROWS = {
    8: "GLM-5-FP8 LMCache dims [158][4372, 64, 132]: block 64, 132-byte indexer entries, 79 x 2 tensors"
}

NOT_USED: dict[int, str] = {
    2: "NVFP4 community checkpoint, DCP4 + 3 MTP tokens, custom B12X arena (2.21 GiB): no KV memory logged",
    4: "DGX Spark unified memory (4 nodes), no utilisation or KV memory logged",
    5: "A100 40GB TP2 PP16 on an unmerged PR branch: weights precision and utilisation not stated",
    6: "same as row 5 (TP4 PP12)",
    9: "GLM-5.3-Flash EXL3 on a fork, UMA GPU, drafter groups; tokens are concurrency x len, not pool",
    10: "GLM-5.3-Flash EXL3 fork, UMA GPU; pool size as stated by the author, budget not logged",
    11: "GLM-5.3-Flash NVFP4 fork; capacity depends on the hybrid page size (256 vs 2048)",
    12: "Tenstorrent (not NVIDIA); format example only",
    14: "no numbers (fit observation only)",
    16: "model not named: bytes per token cannot be computed",
    18: "gemma-4 config not known here; approximate values; SWA/shared-KV layout",
    20: "MiniMax-M2.7 config and GPU not known",
    21: "DeepSeek V4 Flash config and GPU not known",
    22: "Qwen3.6 hybrid GDN model, CPU offload; config not known",
    23: "Qwen3.6 NVFP4 prototype KV dtype; hybrid",
    24: "MiMo-V2.5 config not known",
    25: "model not named (only '# GPU blocks' x 16 = tokens, which is the block arithmetic itself)",
}

E2E_ASSERTED: frozenset[int] = frozenset()
