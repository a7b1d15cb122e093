"""The start-up cases of the H200 fit-truth harness and the vLLM argv each one runs with.

A case is a config.json kept under ``configs/`` (with its ``SOURCE``) plus the GLMDeployment knobs that
reach ``vllm serve``: context length, quantization, KV-cache dtype, max-num-seqs, max-num-batched-tokens
(``serving.extraArgs``, the operator does not set it) and gpu-memory-utilization. The argv is the pod's:
:func:`glm_operator.render.objects.build_vllm_args` renders it from a
:class:`glm_operator.render.context.WorkloadContext` built from the knobs, with the tool-call and reasoning
parsers the catalog gives the architecture, exactly as the controller does
(``glm_operator.controller.desired._context``). Only then is the model id swapped for the local config
directory, the API server's tool-call and reasoning parser flags dropped and ``--load-format dummy
--skip-tokenizer-init --generation-config vllm`` appended. The parsers go because vLLM 0.26 builds them in
the API server from the tokenizer's vocabulary before it starts the engine (``vllm/parser/engine/
parser_engine.py`` ``vocab``: ``self.model_tokenizer.get_vocab()``), which ``--skip-tokenizer-init`` leaves
out ("AttributeError: 'NoneType' object has no attribute 'get_vocab'", the first GLM start-ups of
2026-12-02); they live in the API server process and take no GPU memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm_operator.catalog.models import resolve_model
from glm_operator.catalog.vllm import serving_defaults
from glm_operator.render.context import OwnerReference, WorkloadContext, speculative_config
from glm_operator.render.objects import build_vllm_args

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
LOGS = HERE / "logs"
#: the release the device runs (the newest pinned to the device's torch 2.11, /work/shared/gpu/README.md)
VLLM_VERSION = "0.26.0"
IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
GPU = "H200"
GPU_PRODUCT = "NVIDIA-H200"
#: torch.cuda.get_device_properties(0).total_memory on the device: 150,109,880,320 B
GPU_MEMORY_GIB = 139.80


@dataclass(frozen=True)
class Device:
    """A GPU the device tool lends: the CSV's name for it, its GFD product label, torch's total memory and
    the id prefix of its rows."""

    csv_name: str
    product: str
    memory_gib: float
    row_prefix: str


DEVICES = {
    "H200": Device(GPU, GPU_PRODUCT, GPU_MEMORY_GIB, "h200-"),
    # torch reports 79.18 GiB on the device's H100 80GB HBM3 (/work/shared/gpu/README.md)
    "H100": Device("H100 80GB", "NVIDIA-H100-80GB-HBM3", 79.18, "h100-"),
}
#: where the device runner finds the config directories (copied there in the first device call)
DEVICE_MODELS = "/tmp/acc/models"
#: flags only the harness adds (no weights, no tokenizer files on the device)
HARNESS_FLAGS = ("--load-format", "dummy", "--skip-tokenizer-init", "--generation-config", "vllm")
#: API-server flags that need the tokenizer (dropped, with the value that follows the valued ones)
PARSER_FLAGS = {"--enable-auto-tool-choice": 0, "--tool-call-parser": 1, "--reasoning-parser": 1}


@dataclass(frozen=True)
class Sweep:
    """A load-test sweep the device runs against a case's server once it is up (issue 32's H200
    measurements): ``glm-operator loadtest`` with token-id prompts of ``input_tokens``, answers of exactly
    ``output_tokens`` (``ignore_eos``) and ``requests_per_worker`` requests per worker at each level."""

    shape: str  # chat | long: the name in the results
    input_tokens: int
    output_tokens: int
    concurrencies: tuple[int, ...]
    requests_per_worker: int = 4

    def loadtest_args(self) -> list[str]:
        return [
            "--input-tokens", str(self.input_tokens), "--output-tokens", str(self.output_tokens),
            "--concurrency", ",".join(str(c) for c in self.concurrencies),
            "--requests-per-worker", str(self.requests_per_worker),
        ]  # fmt: skip


def perf_sweeps(max_num_seqs: int) -> tuple[Sweep, ...]:
    """The two shapes of issue 32 at levels up to the batch vLLM runs at once (a chat-like 512 -> 128 and
    a long prompt 4096 -> 128), plus twice the batch where that is small, to see requests queue."""
    chat = {c for c in (1, 4, 16, 64, 256) if c <= max_num_seqs} | {min(max_num_seqs, 256)}
    if 2 * max_num_seqs <= 64:
        chat.add(2 * max_num_seqs)
    long = {c for c in (1, 4, 16, 64) if c <= max_num_seqs} | {min(max_num_seqs, 64)}
    return (
        Sweep("chat", 512, 128, tuple(sorted(chat))),
        Sweep("long", 4096, 128, tuple(sorted(long))),
    )


@dataclass(frozen=True)
class Case:
    """One start-up: a config directory and the knobs a GLMDeployment gives vLLM."""

    name: str
    config: str  # directory under configs/
    model_id: str  # the Hugging Face id the config belongs to (served name, catalog architecture)
    context_length: int
    max_num_seqs: int
    gpu_memory_utilization: float
    quantization: str = "auto"  # auto | fp8 (online, on a bf16 config)
    kv_cache_dtype: str = "auto"
    max_num_batched_tokens: int | None = None  # None: vLLM's default (8192 on an H200)
    family: str = ""  # the CSV's family column
    sweeps: tuple[Sweep, ...] = ()  # load tests run once the server is up (none: stop at the memory lines)
    # "v1": the V1 model runner forced (VLLM_USE_V2_MODEL_RUNNER=0) for a dense model 0.26 would profile with
    # Model Runner V2, to measure what the releases before 0.26 (and a user setting that variable) run;
    # "v2": Model Runner V2 forced (=1) for a model 0.26 runs on V1 (GLM-4.x), as 0.33 runs every model
    model_runner: str = ""
    # True: PyTorch's top-k/top-p sampler (VLLM_USE_FLASHINFER_SAMPLER=0), not the release's FlashInfer one
    native_sampler: bool = False
    # more vLLM flags, as a GLMDeployment's serving.extraArgs passes them (e.g. FlashAttention 2 on the H200)
    extra_args: tuple[str, ...] = ()
    # MTP draft tokens (spec.speculativeDecoding numSpeculativeTokens: the pod's --speculative-config)
    speculative_tokens: int = 0
    # dummy weights accept no drafts: vLLM's synthetic rejection sampler accepts this many tokens per step
    # on average (1 .. 1 + speculative_tokens; harness only, in the device argv's --speculative-config)
    synthetic_acceptance_length: float | None = None
    gpu: str = "H200"  # a key of DEVICES: the card the case runs on
    # routers re-drawn so that tokens spread over the experts as trained routing does (the device plugin
    # device/memtrace/gpu_truth_router.py, GPU_TRUTH_SPREAD_ROUTER=1); dummy weights alone pick the same ones
    spread_router: bool = False

    @property
    def device(self) -> Device:
        return DEVICES[self.gpu]

    @property
    def env(self) -> dict[str, str]:
        """Environment variables the case's server starts with (beside run_cases.sh's own)."""
        runner = {"v1": "0", "v2": "1"}.get(self.model_runner)
        env = {"VLLM_USE_V2_MODEL_RUNNER": runner} if runner else {}
        if self.native_sampler:
            env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
        if self.spread_router:
            env["GPU_TRUTH_SPREAD_ROUTER"] = "1"
        return env

    @property
    def config_path(self) -> Path:
        return CONFIGS / self.config / "config.json"

    def config_json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.config_path.read_text(encoding="utf-8"))
        return value

    @property
    def architecture(self) -> str:
        return str(self.config_json()["architectures"][0])

    def checkpoint_quantization(self) -> str | None:
        """The precision the checkpoint is stored in when its config.json says it is quantized."""
        qc = self.config_json().get("quantization_config")
        if not isinstance(qc, dict):
            return None
        method = str(qc.get("quant_method", ""))
        return "fp8" if method == "fp8" else method or None

    def context(self) -> WorkloadContext:
        """The WorkloadContext the controller would build for this case (one GPU, TP 1)."""
        defaults = serving_defaults(self.architecture)
        extra: tuple[str, ...] = self.extra_args
        if self.max_num_batched_tokens is not None:
            extra = ("--max-num-batched-tokens", str(self.max_num_batched_tokens), *extra)
        return WorkloadContext(
            namespace="gpu-truth",
            deployment_name=self.name,
            variant_name="h200",
            owner=OwnerReference(name=self.name, uid=""),
            image=IMAGE,
            model_id=self.model_id,
            served_model_name=self.model_id.rsplit("/", 1)[-1].lower(),
            gpu_product=self.device.product,
            tensor_parallel_size=1,
            gpus_per_replica=1,
            max_model_len=self.context_length,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            replicas=1,
            quantization=None if self.quantization == "auto" else self.quantization,  # fp8: on a bf16 config
            kv_cache_dtype=None if self.kv_cache_dtype in ("auto", "") else self.kv_cache_dtype,
            extra_args=extra,
            trust_remote_code=defaults.trust_remote_code,
            tool_call_parser=defaults.tool_call_parser,
            reasoning_parser=defaults.reasoning_parser,
            speculative_config=speculative_config(self.speculative_tokens),
        )

    def speculative_config(self) -> str | None:
        """The device's ``--speculative-config``: the pod's, with the synthetic acceptance the dummy weights
        need (``rejection_sample_method: synthetic``, vLLM 0.26 ``config/speculative.py``)."""
        rendered = speculative_config(self.speculative_tokens)
        if rendered is None or self.synthetic_acceptance_length is None:
            return rendered
        value = json.loads(rendered)
        value["rejection_sample_method"] = "synthetic"
        value["synthetic_acceptance_length"] = self.synthetic_acceptance_length
        return json.dumps(value, separators=(",", ":"))

    def pod_args(self) -> list[str]:
        """The argv after ``vllm serve`` exactly as the pod gets it."""
        return build_vllm_args(self.context())

    def device_args(self, models_dir: str = DEVICE_MODELS) -> list[str]:
        """The pod's argv with the model id swapped for the config directory, the parser flags dropped and
        the harness flags appended."""
        args = self.pod_args()
        assert args[0] == self.model_id, (args[0], self.model_id)
        kept: list[str] = [f"{models_dir}/{self.config}"]
        skip = 0
        for arg in args[1:]:
            if kept[-1] == "--speculative-config":
                kept.append(self.speculative_config() or arg)
            elif skip:
                skip -= 1
            elif arg in PARSER_FLAGS:
                skip = PARSER_FLAGS[arg]
            else:
                kept.append(arg)
        return [*kept, *HARNESS_FLAGS]

    def resolved(self) -> Any:
        return resolve_model(self.config_json(), self.model_id)


def _case(name: str, config: str, model_id: str, family: str, perf: bool = False, **knobs: Any) -> Case:
    if perf:
        knobs["sweeps"] = perf_sweeps(knobs["max_num_seqs"])
    return Case(name=name, config=config, model_id=model_id, family=family, **knobs)


FLASH = ("glm-4.7-flash", "zai-org/GLM-4.7-Flash", "glm-mla-moe")
GLM5_FP8 = ("glm-5-fp8-l10", "zai-org/GLM-5-FP8", "glm-mla-dsa")
GLM5 = ("glm-5-l6", "zai-org/GLM-5", "glm-mla-dsa")
GLM5_L4 = ("glm-5-l4", "zai-org/GLM-5", "glm-mla-dsa")
GLM45_AIR = ("glm-4.5-air-l20", "zai-org/GLM-4.5-Air", "glm-moe-gqa")
GLM47 = ("glm-4.7-l12", "zai-org/GLM-4.7", "glm-moe-gqa")
GLM47_L6 = ("glm-4.7-l6", "zai-org/GLM-4.7", "glm-moe-gqa")
GLM47_TP2_RANK = ("glm-4.7-l12-tp2", "zai-org/GLM-4.7", "glm-moe-gqa")
GLM47_H80 = ("glm-4.7-l12-h80", "zai-org/GLM-4.7", "glm-moe-gqa")
#: FlashAttention 2 where the H200 would take 3: the attention kernels vLLM runs on Ampere and Ada GPUs
#: (fa_utils.get_flash_attn_version: 3 only on compute capability 9.x); the device needs the FA2 library,
#: which the pack leaves out (see README "Ninth session")
FA2 = ("--attention-config.flash_attn_version=2",)
QWEN3_8B = ("qwen3-8b", "Qwen/Qwen3-8B", "dense-gqa")
QWEN3_MOE_FP8 = ("qwen3-30b-a3b-fp8", "Qwen/Qwen3-30B-A3B-FP8", "moe-gqa")
QWEN3_MOE = ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "moe-gqa")
GPT_OSS = ("gpt-oss-20b", "openai/gpt-oss-20b", "moe-gqa-swa")
QWEN25_7B = ("qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct", "dense-gqa")
QWEN25_05B = ("qwen2.5-0.5b-instruct", "Qwen/Qwen2.5-0.5B-Instruct", "dense-gqa")
#: the hzk rows' server (vLLM 0.24 on an RTX 4090): --max-model-len 2048, utilization 0.85, and the
#: defaults below 70 GiB of GPU memory, 2048 batched tokens and 256 sequences
#: GLM-4.7's shapes at 256 sequences and 8192 tokens (glm47-l12-b8k's knobs, which its variants repeat)
GLM47_KNOBS: dict[str, Any] = {
    "context_length": 65536,
    "max_num_seqs": 256,
    "gpu_memory_utilization": 0.92,
    "max_num_batched_tokens": 8192,
    "native_sampler": True,
}
HZK_KNOBS: dict[str, Any] = {
    "context_length": 2048,
    "max_num_seqs": 256,
    "gpu_memory_utilization": 0.85,
    "max_num_batched_tokens": 2048,
}

#: in the order they are run (the device runner takes them in groups; see README.md)
CASES: tuple[Case, ...] = (
    _case("flash-c32k", *FLASH, context_length=32768, max_num_seqs=256, gpu_memory_utilization=0.92),
    _case(
        "qwen3-8b-fp8online-b16k",
        *QWEN3_8B,
        context_length=16384,
        max_num_seqs=1024,
        gpu_memory_utilization=0.95,
        quantization="fp8",
        max_num_batched_tokens=16384,
    ),
    _case(
        "qwen3-8b-s16-b2k",
        *QWEN3_8B,
        perf=True,
        context_length=8192,
        max_num_seqs=16,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
    ),
    _case(
        "glm5fp8-b2k",
        *GLM5_FP8,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
    ),
    _case("glm5fp8-b8k", *GLM5_FP8, context_length=32768, max_num_seqs=256, gpu_memory_utilization=0.92),
    _case(
        "glm5fp8-b16k",
        *GLM5_FP8,
        context_length=32768,
        max_num_seqs=512,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=16384,
    ),
    _case(
        "flash-c128k-kvfp8-b2k",
        *FLASH,
        context_length=131072,
        max_num_seqs=64,
        gpu_memory_utilization=0.85,
        kv_cache_dtype="fp8",
        max_num_batched_tokens=2048,
    ),
    _case(
        "qwen3moe-fp8-kvfp8-b4k",
        *QWEN3_MOE_FP8,
        context_length=32768,
        max_num_seqs=512,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="fp8",
        max_num_batched_tokens=4096,
    ),
    _case("gptoss20b-swa", *GPT_OSS, context_length=32768, max_num_seqs=128, gpu_memory_utilization=0.92),
    _case(
        "glm5-c128k-kvfp8",
        *GLM5,
        context_length=131072,
        max_num_seqs=128,
        gpu_memory_utilization=0.95,
        kv_cache_dtype="fp8",
        max_num_batched_tokens=8192,
    ),
    _case(
        "flash-s1024-b16k",
        *FLASH,
        perf=True,
        context_length=16384,
        max_num_seqs=1024,
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=16384,
    ),
    _case(
        "glm5fp8-b4k-c64k",
        *GLM5_FP8,
        context_length=65536,
        max_num_seqs=128,
        gpu_memory_utilization=0.93,
        max_num_batched_tokens=4096,
    ),
    _case(
        "glm5-b2k",
        *GLM5,
        context_length=32768,
        max_num_seqs=32,
        gpu_memory_utilization=0.88,
        max_num_batched_tokens=2048,
    ),
    _case(
        "glm5-b16k",
        *GLM5,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=16384,
    ),
    _case(
        "qwen3moe-fp8-b16k",
        *QWEN3_MOE_FP8,
        context_length=32768,
        max_num_seqs=1024,
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=16384,
    ),
    _case(
        "flash-fp8online",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        quantization="fp8",
    ),
    _case(
        "gptoss20b-c128k",
        *GPT_OSS,
        context_length=131072,
        max_num_seqs=64,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=4096,
    ),
    _case(
        "qwen3-8b-kvfp8-c40k",
        *QWEN3_8B,
        context_length=40960,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        kv_cache_dtype="fp8",
    ),
    _case(
        "glm5fp8-c128k-kvfp8",
        *GLM5_FP8,
        context_length=131072,
        max_num_seqs=128,
        gpu_memory_utilization=0.95,
        kv_cache_dtype="fp8",
    ),
    _case(
        "flash-s8-b1k",
        *FLASH,
        context_length=65536,
        max_num_seqs=8,
        gpu_memory_utilization=0.88,
        max_num_batched_tokens=1024,
    ),
    # issue 32: GLM-4.7-Flash bf16 and fp8 at max-num-seqs 16 / 64 / 256 under load (flash-c32k-perf
    # repeats flash-c32k's knobs: the two start-ups also show how repeatable vLLM's numbers are)
    _case(
        "flash-s64-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
    ),
    # flash-s64-perf with the routers spread (issue 50): its load test against uniform routing's prediction
    _case(
        "flash-spread-s64-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        spread_router=True,
    ),
    _case(
        "flash-c32k-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
    ),
    _case(
        "flash-fp8-s64-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        quantization="fp8",
    ),
    _case(
        "flash-s16-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=16,
        gpu_memory_utilization=0.92,
    ),
    # FP8 quantized at load on a second V1-runner model (48 GQA layers): is the FP8-online graph term
    # (fp8_online_mla_graph_bytes_per_layer, fitted on GLM-4.7-Flash) per layer or per model?
    _case(
        "qwen3moe-fp8online",
        *QWEN3_MOE,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        quantization="fp8",
    ),
    # Model Runner V2's profiling run apart (vLLM 0.26, Qwen3-8B): the forward at 16384 and 32768 tokens with
    # a small sampler, and the sampler over 8192 rows (max-num-seqs = max-num-batched-tokens), small forward
    _case(
        "qwen3-8b-b16k",
        *QWEN3_8B,
        context_length=16384,
        max_num_seqs=256,
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=16384,
    ),
    _case(
        "qwen3-8b-b32k",
        *QWEN3_8B,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=32768,
    ),
    _case(
        "qwen3-8b-s8k-b8k",
        *QWEN3_8B,
        context_length=8192,
        max_num_seqs=8192,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
    ),
    _case(
        "qwen3moe-fp8-s32-b2k",
        *QWEN3_MOE_FP8,
        context_length=16384,
        max_num_seqs=32,
        gpu_memory_utilization=0.85,
        max_num_batched_tokens=2048,
    ),
    # The small-budget public rows on the V1 model runner (vLLM 0.21-0.24), measured on the H200 with that
    # runner forced: hzk-qwen25-7b-rtx4090 / hzk-qwen25-05b-rtx4090 (2048 tokens, 256 sequences, the
    # defaults below 70 GiB) and lmcache3430-qwen3-8b-a5000 (16384 context, 8192 tokens, 256 sequences):
    # weights (memtrace of load_model), the graph estimate's first-capture split, the profiling peak
    _case("qwen25-7b-v1-b2k", *QWEN25_7B, model_runner="v1", **HZK_KNOBS),
    _case("qwen25-05b-v1-b2k", *QWEN25_05B, model_runner="v1", **HZK_KNOBS),
    _case(
        "qwen3-8b-v1-b8k",
        *QWEN3_8B,
        context_length=16384,
        max_num_seqs=256,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=8192,
        model_runner="v1",
    ),
    # the 7B case on Model Runner V2 (0.26's default for it): a dense model no V2 constant was fitted on
    _case("qwen25-7b-b2k", *QWEN25_7B, **HZK_KNOBS),
    # The V1 runner's dummy sampler pass over 1024 rows, where it is the profiling run's peak (a small model,
    # 2048 tokens): PyTorch's path (the Triton top-k/top-p kernel from 0.22; aws-qwen3-coder-30b-l40s-tp4
    # sets it) and FlashInfer's, which _dummy_sampler_run follows with a PyTorch pass
    # (memory.activation.v1_sampler_pass_bytes)
    _case(
        "qwen25-05b-v1-s1k-native",
        *QWEN25_05B,
        context_length=2048,
        max_num_seqs=1024,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        model_runner="v1",
        native_sampler=True,
    ),
    _case(
        "qwen25-05b-v1-s1k",
        *QWEN25_05B,
        context_length=2048,
        max_num_seqs=1024,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        model_runner="v1",
    ),
    # GLM-4.5-Air (glm4_moe, the GLM-4.5/4.6/4.7 architecture: GQA with partial rotary, an fp32 router, 128
    # experts), cut to 20 layers: the family had no start-up of vLLM >= 0.20
    _case(
        "air-l20-b8k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
    ),
    _case(
        "air-l20-s512-b16k-c128k",
        *GLM45_AIR,
        context_length=131072,
        max_num_seqs=512,
        gpu_memory_utilization=0.95,
        max_num_batched_tokens=16384,
    ),
    # the same at 16384 and 4096 tokens with air-l20-b8k's other knobs: is the attention piece's peak the
    # batched tokens' or the sequences' and context's? (PyTorch's sampler: no FlashInfer JIT on a fresh
    # machine, the same profiling peak)
    _case(
        "air-l20-b16k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=16384,
        native_sampler=True,
    ),
    # air-l20-s512-b16k-c128k held 19 query-width blocks where air-l20-b16k held 9: its 512 sequences, or its
    # 131072-token context?
    _case(
        "air-l20-s512-b16k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=512,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=16384,
        native_sampler=True,
    ),
    _case(
        "air-l20-b4k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=4096,
        native_sampler=True,
    ),
    # GLM-5's profiling peak split at 8192 tokens (memtrace): the MLA layer's activation blocks between the
    # 2048- and 16384-token start-ups (memory.activation.mla_attention_live_bytes)
    # Ninth session. Air at 1024 sequences (vLLM's default on GPUs >= 70 GiB): does the attention piece's
    # second set above 256 sequences (air-l20-s512-b16k) grow again?
    _case(
        "air-l20-s1024-b16k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=1024,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=16384,
        native_sampler=True,
    ),
    # air-l20-s1024-b16k held the single set (16 tokens a request in the profiling run, 32 at 512
    # sequences and 16384 tokens): the sequences, or the tokens per request?
    _case(
        "air-l20-s512-b8k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=512,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
        native_sampler=True,
    ),
    # GLM-4.7's own shapes (hidden 5120, 160 experts, qk-norm), 12 of its 92 layers, at vLLM's H200
    # defaults (1024 sequences, 8192 tokens) and at 256 sequences
    _case(
        "glm47-l12-s1024-b8k",
        *GLM47,
        context_length=65536,
        max_num_seqs=1024,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
        native_sampler=True,
    ),
    _case(
        "glm47-l12-b8k",
        *GLM47,
        **GLM47_KNOBS,
    ),
    # GLM-4.7's 24 MiB per piecewise graph (Air: 4): with half the layers (a buffer per layer halves it), with
    # the attention of one rank at TP 2 (half the query width: planned to halve), and on Model Runner V2 (what
    # 0.33 runs for every model; 0.26 runs glm4_moe on V1 unless told)
    _case(
        "glm47-l6-b8k",
        *GLM47_L6,
        **GLM47_KNOBS,
    ),
    _case(
        "glm47-l12-tp2-b8k",
        *GLM47_TP2_RANK,
        **GLM47_KNOBS,
    ),
    _case(
        "glm47-l12-v2-b8k",
        *GLM47,
        **GLM47_KNOBS,
        model_runner="v2",
    ),
    # glm47-l6-b8k sampled ~26 MiB per graph (not per layer), glm47-l12-tp2-b8k ~1 (not half of 24): a query
    # width of 10240 (9.8 MiB at 504 tokens, under the caching allocator's 10 MiB threshold) tells a step from
    # a rate
    _case(
        "glm47-l12-h80-b8k",
        *GLM47_H80,
        **GLM47_KNOBS,
    ),
    # The attention piece's second set: planned for > 256 profiling requests of >= 32 tokens (512 x 16384 held
    # two, 1024 x 16384 and 512 x 8192 one); 768 x 32768 (42 tokens a request) should hold two
    _case(
        "air-l20-s768-b32k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=768,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=32768,
        native_sampler=True,
    ),
    _case(
        "air-l20-v2-b8k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
        native_sampler=True,
        model_runner="v2",
    ),
    # Model Runner V2 captures 0.5 GiB more graph memory for GLM-4.x (96 query heads) than V1 does, Qwen
    # 0.08: with the query width of a TP-2 rank, and at 1024 sequences (FULL graphs up to 512), does it follow
    # the query width and the decode batch (the FULL graphs' split-KV accumulators)?
    _case(
        "glm47-l12-tp2-v2-b8k",
        *GLM47_TP2_RANK,
        **GLM47_KNOBS,
        model_runner="v2",
    ),
    _case("glm47-l12-v2-s1024-b8k", *GLM47, **{**GLM47_KNOBS, "max_num_seqs": 1024}, model_runner="v2"),
    # the attention piece's second set at 1024 x 32768: 32 tokens a request, an even split (planned two sets;
    # one would say the 512 x 16384 shape's second set is not about equal requests of >= 32 tokens)
    _case(
        "air-l20-s1024-b32k",
        *GLM45_AIR,
        context_length=32768,
        max_num_seqs=1024,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=32768,
        native_sampler=True,
    ),
    # The V1 graph estimate with FlashAttention 2: the RTX 4090 logs 0.53 GiB for Qwen2.5-7B and 0.28 for
    # Qwen2.5-0.5B where the H200 (FlashAttention 3) logs 0.36 and 0.32 for the same knobs (hzk rows)
    _case(
        "qwen25-7b-v1-b2k-fa2",
        *QWEN25_7B,
        model_runner="v1",
        native_sampler=True,
        extra_args=FA2,
        **HZK_KNOBS,
    ),
    _case(
        "qwen25-05b-v1-b2k-fa2",
        *QWEN25_05B,
        model_runner="v1",
        native_sampler=True,
        extra_args=FA2,
        **HZK_KNOBS,
    ),
    _case(
        "glm5-b8k",
        *GLM5,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=8192,
    ),
    # issue 49: MTP speculative decoding on vLLM 0.26 (the V1 runner for GLM: the drafter's layer, its KV
    # layer, capture sizes rounded to multiples of 1 + k). Dummy weights accept no draft: vLLM's synthetic
    # rejection sampler accepts the published rate (1.8 tokens a step with one draft: speed.speculative's
    # GLM-4.x figure) or, at k = 3, 2.5 tokens a step; flash-s64-perf is the same server without MTP
    _case(
        "flash-mtp1-s64-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        speculative_tokens=1,
        synthetic_acceptance_length=1.8,
    ),
    _case(
        "flash-mtp3-s64-perf",
        *FLASH,
        perf=True,
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        speculative_tokens=3,
        synthetic_acceptance_length=2.5,
    ),
    # GLM-5's drafter: a DSA layer with its indexer and its KV (glm5fp8-b8k and glm5-b2k without MTP)
    _case(
        "glm5fp8-mtp1-b8k",
        *GLM5_FP8,
        context_length=32768,
        max_num_seqs=256,
        gpu_memory_utilization=0.92,
        speculative_tokens=1,
        synthetic_acceptance_length=1.9,
    ),
    _case(
        "glm5-mtp3-b2k",
        *GLM5,
        context_length=32768,
        max_num_seqs=32,
        gpu_memory_utilization=0.88,
        max_num_batched_tokens=2048,
        speculative_tokens=3,
        synthetic_acceptance_length=2.0,
    ),
    # the same on the H100 (the H200 was not lent on 2026-12-06): GLM-4.7-Flash at 8192 tokens of context
    # without MTP, with one draft and with three (flash-*-s64-perf's knobs but the context: the H100 has
    # ~12 GiB for the KV cache), and GLM-5's drafter (bf16: a DSA MoE layer of ~18 GiB) on 4 of its layers
    _case(
        "flash-h100-s64-perf",
        *FLASH,
        perf=True,
        gpu="H100",
        context_length=8192,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
    ),
    # flash-h100-s64-perf with the routers spread (issue 50: what uniform routing reads at large batches)
    _case(
        "flash-h100-spread-s64-perf",
        *FLASH,
        perf=True,
        gpu="H100",
        context_length=8192,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        spread_router=True,
    ),
    _case(
        "flash-h100-mtp1-s64-perf",
        *FLASH,
        perf=True,
        gpu="H100",
        context_length=8192,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        speculative_tokens=1,
        synthetic_acceptance_length=1.8,
    ),
    _case(
        "glm5-l4-h100-mtp1-b2k",
        *GLM5_L4,
        gpu="H100",
        context_length=32768,
        max_num_seqs=32,
        gpu_memory_utilization=0.92,
        max_num_batched_tokens=2048,
        speculative_tokens=1,
        synthetic_acceptance_length=1.9,
    ),
    _case(
        "flash-h100-mtp3-s64-perf",
        *FLASH,
        perf=True,
        gpu="H100",
        context_length=8192,
        max_num_seqs=64,
        gpu_memory_utilization=0.92,
        speculative_tokens=3,
        synthetic_acceptance_length=2.5,
    ),
    # issue 50, item 7: the held-out H100 start-ups whose graph estimate the planner missed (100k context,
    # 48 sequences, 3072 batched tokens at utilization 0.88; and fp8 KV at 8192 batched tokens)
    _case(
        "flash-h100-c100k-s48-b3k",
        *FLASH,
        gpu="H100",
        context_length=102400,
        max_num_seqs=48,
        gpu_memory_utilization=0.88,
        max_num_batched_tokens=3072,
    ),
    _case(
        "flash-h100-c100k-kvfp8-b8k",
        *FLASH,
        gpu="H100",
        context_length=102400,
        max_num_seqs=48,
        gpu_memory_utilization=0.88,
        kv_cache_dtype="fp8",
        max_num_batched_tokens=8192,
    ),
    # issue 50, item 1: a dense model on the H100 with long prompts up to 16k (issue 32's shapes plus one)
    _case(
        "qwen3-8b-h100-perf",
        *QWEN3_8B,
        gpu="H100",
        context_length=32768,
        max_num_seqs=64,
        gpu_memory_utilization=0.9,
        sweeps=(*perf_sweeps(64), Sweep("long16k", 16384, 128, (1, 4, 16))),
    ),
)
BY_NAME = {c.name: c for c in CASES}
