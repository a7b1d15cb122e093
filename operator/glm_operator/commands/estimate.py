"""``glm-operator estimate``: the memory fit of one vLLM instance, offline.

Exit codes: 0 fits, 1 does not fit (concurrency below --min-concurrency), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import CatalogError, ResolvedModel, resolve_model_or_file
from glm_operator.catalog.vllm import Version, parse_version
from glm_operator.cli import UserError
from glm_operator.commands.engine_args import add_engine_arguments, engine_from_args
from glm_operator.planning.memory.explain import max_context_for
from glm_operator.planning.memory.fit import estimate_fit
from glm_operator.planning.memory.instance import FitInputError, FitResult, GpuFigures, GpuMemory, fit_input
from glm_operator.planning.releases import DEFAULT_VERSION, release_rules
from glm_operator.planning.speed.performance import Workload, speed_of_fit


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "estimate",
        help="weights, KV cache and concurrency per GPU for one vLLM configuration",
        description=(
            "Estimate vLLM's memory accounting for one instance (exit 0 fits, 1 does not fit, 2 bad input)."
        ),
    )
    parser.add_argument(
        "--model", required=True, help="catalog id/alias (zai-org/GLM-4.5-Air) or a config.json path"
    )
    gpu = parser.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu", help="catalog GPU name or GFD product label (H100, NVIDIA-L4, ...)")
    gpu.add_argument(
        "--gpu-memory-gib", type=float, help="GPU memory as torch reports it (total_memory, GiB)"
    )
    parser.add_argument("--tensor-parallel-size", "--tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "--pp", type=int, default=1)
    parser.add_argument("--decode-context-parallel-size", "--dcp", type=int, default=1)
    parser.add_argument(
        "--data-parallel-size",
        "--dp",
        type=int,
        default=1,
        help="data-parallel attention ranks with expert parallelism (figures are one rank's)",
    )
    parser.add_argument(
        "--speculative-config",
        default=None,
        help='vLLM\'s JSON, MTP only: \'{"method":"mtp","num_speculative_tokens":1}\' '
        "(the drafter's weights, KV layer, buffers and capture sizes are planned)",
    )
    parser.add_argument(
        "--quantization", default="auto", help="auto (follow checkpoint) | bf16 | fp16 | fp8 | int8 | int4"
    )
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto (model dtype) | fp8")
    parser.add_argument("--max-model-len", type=int, required=True)
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="default: the planned vLLM release's own (0.92 from 0.26, 0.9 before)",
    )
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--min-concurrency", type=float, default=1.0)
    parser.add_argument(
        "--available-kv-cache-gib",
        type=float,
        default=None,
        help="use this KV budget (as vLLM logs it) instead",
    )
    parser.add_argument(
        "--extra-kv-layers",
        type=int,
        default=0,
        help="KV layers of a draft model other than MTP (for MTP: --speculative-config)",
    )
    parser.add_argument("--block-size", type=int, default=None)
    add_engine_arguments(parser)
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (vLLM --enforce-eager)")
    parser.add_argument(
        "--flashinfer-sampler",
        action="store_true",
        help="VLLM_USE_FLASHINFER_SAMPLER=1 (the default from vLLM 0.22)",
    )
    parser.add_argument(
        "--native-sampler",
        action="store_true",
        help="VLLM_USE_FLASHINFER_SAMPLER=0: PyTorch's top-k/top-p sampler",
    )
    parser.add_argument(
        "--model-runner",
        choices=("v1", "v2"),
        default=None,
        help="VLLM_USE_V2_MODEL_RUNNER=0/1 (vLLM >= 0.20); default: the release's choice for the model",
    )
    load = parser.add_argument_group("predicted speed (with --gpu: the performance model of planning/speed)")
    load.add_argument("--concurrency", type=int, default=None, help="clients in a closed loop")
    load.add_argument("--input-tokens", type=int, default=512, help="prompt tokens per request (512)")
    load.add_argument("--output-tokens", type=int, default=128, help="output tokens per request (128)")
    load.add_argument(
        "--acceptance-rate",
        type=float,
        default=None,
        help="MTP draft acceptance (spec.speculativeDecoding.acceptanceRate); default: published figures",
    )
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")
    parser.set_defaults(func=run)


def compute(args: argparse.Namespace) -> tuple[dict[str, Any], FitResult]:
    engine = engine_from_args(args)
    try:
        model = resolve_model_or_file(args.model)
        gpu: GpuMemory
        if args.gpu:
            gpu = find_gpu(args.gpu)
            gpu_name = gpu.name
        else:
            if args.gpu_memory_gib <= 0:
                raise UserError("--gpu-memory-gib must be > 0")
            gpu, gpu_name = GpuFigures(args.gpu_memory_gib), f"{args.gpu_memory_gib:g} GiB GPU"
        result = estimate_fit(
            fit_input(
                model,
                gpu,
                engine,
                max_model_len=args.max_model_len,
                tensor_parallel_size=args.tensor_parallel_size,
                pipeline_parallel_size=args.pipeline_parallel_size,
                decode_context_parallel_size=args.decode_context_parallel_size,
                data_parallel_size=args.data_parallel_size,
                num_speculative_tokens=speculative_tokens(args.speculative_config),
                quantization=args.quantization,
                kv_cache_dtype=args.kv_cache_dtype,
                gpu_memory_utilization=args.gpu_memory_utilization,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_num_seqs=args.max_num_seqs,
                min_concurrency=args.min_concurrency,
                available_kv_cache_gib=args.available_kv_cache_gib,
                extra_kv_layers=args.extra_kv_layers,
                enforce_eager=args.enforce_eager,
                flashinfer_sampler=False if args.native_sampler else (args.flashinfer_sampler or None),
                block_size=args.block_size,
                model_runner_v2=None if args.model_runner is None else args.model_runner == "v2",
            )
        )
    except (CatalogError, FitInputError) as exc:
        raise UserError(str(exc)) from None
    out = {"model": model.model_id, "gpu": gpu_name, **result.to_dict(), "image": engine.image}
    if engine.notes:
        out["notes"] = [*out["notes"], *engine.notes]
    out["max_context_at_concurrency_1"] = min(max_context_for(result, 1.0), model.max_context)
    if args.concurrency is not None:
        out["predicted"] = predicted(args, model, result)
    return out, result


def predicted(args: argparse.Namespace, model: ResolvedModel, result: FitResult) -> dict[str, Any]:
    """The predicted speed of the instance under ``--concurrency`` clients (``status.plan``'s keys)."""
    if args.concurrency < 1 or args.input_tokens < 1 or args.output_tokens < 1:
        raise UserError("--concurrency, --input-tokens and --output-tokens must be >= 1")
    if not args.gpu:
        raise UserError(
            "--concurrency needs --gpu (the GPU's bandwidth and TFLOPS; --gpu-memory-gib has none)"
        )
    if args.acceptance_rate is not None and not 0 < args.acceptance_rate < 1:
        raise UserError("--acceptance-rate must be between 0 and 1")
    workload = Workload(args.concurrency, args.input_tokens, args.output_tokens)
    speed = speed_of_fit(
        result,
        model.architecture,
        find_gpu(args.gpu),
        workload,
        acceptance_rate=args.acceptance_rate,
        max_num_seqs=result.max_num_seqs,  # clients beyond it wait for a slot
    )
    if speed is None:
        raise UserError(f"no speed figures for {args.gpu} in the catalog (memory_bandwidth / TFLOPS)")
    return {
        "concurrency": workload.concurrency,
        "inputTokens": workload.input_tokens,
        "outputTokens": workload.output_tokens,
        **speed.to_dict(),
    }


def speculative_tokens(config: str | None) -> int:
    """The draft tokens of a ``--speculative-config`` JSON (vLLM's flag): MTP only, 1 by default (vLLM takes
    the model's ``num_nextn_predict_layers``, 1 for GLM)."""
    if config is None:
        return 0
    try:
        value = json.loads(config)
    except json.JSONDecodeError as exc:
        raise UserError(
            f'--speculative-config is not JSON ({exc.msg}): pass \'{{"method":"mtp"}}\''
        ) from None
    if not isinstance(value, dict) or value.get("method") != "mtp":
        raise UserError(
            '--speculative-config: only {"method":"mtp", ...} (the model\'s own MTP layers) is planned'
        )
    tokens = value.get("num_speculative_tokens", 1)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise UserError("--speculative-config: num_speculative_tokens must be an integer >= 1")
    return tokens


# the release that logs the KV-cache size and the concurrency on one line (read in 0.33.0)
ONE_LINE_KV_REPORT_SINCE: Version = (0, 33, 0)
# the release whose MemoryProfilingResult reports "total consumed (from mem_get_info)" where 0.20-0.26 report
# "non-torch forward increase memory" (``vllm/utils/mem_utils.py`` ``__repr__``, read in 0.26.0 and 0.27.1)
TOTAL_CONSUMED_REPORT_SINCE: Version = (0, 27, 0)


def vllm_log_lines(result: FitResult) -> list[str]:
    """The budget as vLLM V1 logs it at start-up (per GPU), to hold against the engine's own log.

    vLLM >= 0.20, wording of 0.33.0: ``Model loading took`` (``vllm/v1/worker/gpu/model_runner.py``),
    the DEBUG ``MemoryProfilingResult`` line of ``vllm/utils/mem_utils.py`` ("Total non KV cache memory",
    "torch peak memory increase", "total consumed (from mem_get_info)" from 0.27, "non-torch forward increase
    memory" before, "weights memory"),
    ``Estimated CUDA graph memory`` (``vllm/v1/worker/gpu/cudagraph_utils.py`` via the runner),
    ``Available KV cache memory`` and the graph-profiling note (``vllm/v1/worker/gpu_worker.py``),
    then ``GPU KV cache size ..., Maximum concurrency ...`` (``vllm/v1/core/kv_cache_utils.py``
    ``update_kv_cache_capacity``; one line from 0.33, two before). Older releases: the 0.10-0.12
    wording (DEBUG "torch peak memory increase" / "non-torch forward increase memory", "Graph
    capturing finished" after the KV cache).
    """
    r = result
    version = parse_version(r.vllm_version) if r.vllm_version else DEFAULT_VERSION
    if not release_rules(version).graphs_in_budget:
        return _older_log_lines(r)
    consumed = r.weights_gib_per_gpu + r.non_torch_gib
    if version >= TOTAL_CONSUMED_REPORT_SINCE:
        third = f"total consumed (from mem_get_info): {consumed:.2f}GiB; "
    else:
        third = f"non-torch forward increase memory: {r.non_torch_gib:.2f}GiB; "
    lines = [
        f"Model loading took {r.weights_gib_per_gpu:.2f} GiB memory",
        f"Requested memory: {r.requested_gib:.2f} GiB "
        f"({r.gpu_memory_gib:.2f} GiB x gpu_memory_utilization {r.gpu_memory_utilization})",
        f"Total non KV cache memory: {consumed + r.activation_gib:.2f}GiB; "
        f"torch peak memory increase: {r.activation_gib:.2f}GiB; "
        f"{third}"
        f"weights memory: {r.weights_gib_per_gpu:.2f}GiB. "
        f"(profile run: max_num_batched_tokens {r.max_num_batched_tokens}, max_num_seqs {r.max_num_seqs})",
    ]
    if r.cudagraph_gib:
        lines.append(f"Estimated CUDA graph memory: {r.cudagraph_gib:.2f} GiB total")
    lines.append(f"Available KV cache memory: {r.available_kv_cache_gib_per_gpu:.2f} GiB")
    if r.cudagraph_gib:
        util = r.gpu_memory_utilization
        delta = r.cudagraph_gib / r.gpu_memory_gib
        lines.append(
            "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={util:.4f} is equivalent to "
            f"--gpu-memory-utilization={round(util - delta, 4):.4f} without CUDA graph memory profiling."
        )
    size = f"GPU KV cache size: {r.kv_cache_tokens:,} tokens"
    concurrency = f"Maximum concurrency for {r.max_model_len:,} tokens per request: {r.max_concurrency:.2f}x"
    if version >= ONE_LINE_KV_REPORT_SINCE:
        lines.append(f"{size}, {concurrency}")
    else:
        lines += [size, concurrency]
    return lines


def _older_log_lines(r: FitResult) -> list[str]:
    """vLLM < 0.20 (0.10-0.12 wording; 0.18-0.19 log the same figures); graphs captured after the KV cache."""
    lines = [
        f"Model loading took {r.weights_gib_per_gpu:.2f} GiB memory",
        f"Requested memory: {r.requested_gib:.2f} GiB "
        f"({r.gpu_memory_gib:.2f} GiB x gpu_memory_utilization {r.gpu_memory_utilization})",
        f"torch peak memory increase: {r.activation_gib:.2f} GiB "
        f"(profile run: max_num_batched_tokens {r.max_num_batched_tokens}, max_num_seqs {r.max_num_seqs})",
        f"non-torch forward increase memory: {r.non_torch_gib:.2f} GiB",
    ]
    if r.cudagraph_gib:  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 on 0.18-0.19
        lines.append(f"Estimated CUDA graph memory: {r.cudagraph_gib:.2f} GiB total")
    lines += [
        f"Available KV cache memory: {r.available_kv_cache_gib_per_gpu:.2f} GiB",
        f"GPU KV cache size: {r.kv_cache_tokens:,} tokens",
        f"Maximum concurrency for {r.max_model_len:,} tokens per request: {r.max_concurrency:.2f}x",
    ]
    if r.cudagraph_capture_gib and not r.cudagraph_gib:
        lines.append(
            f"Graph capturing finished in <n> secs, took {r.cudagraph_capture_gib:.2f} GiB "
            "(after the KV cache, outside gpu_memory_utilization)"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    out, result = compute(args)
    if args.output == "json":
        out["vllm_log_lines"] = vllm_log_lines(result)
        print(json.dumps(out, indent=2))
        return 0 if result.fits else 1
    rows = [
        ("model", out["model"]),
        ("vllm", f"{result.vllm_version} ({out['image']})"),
        ("gpu", f"{out['gpu']} ({result.gpu_memory_gib:.2f} GiB x {result.gpu_memory_utilization})"),
        (
            "parallel",
            f"TP={result.tensor_parallel_size} PP={result.pipeline_parallel_size} "
            f"DCP={result.decode_context_parallel_size}"
            + (f" DP={result.data_parallel_size} (figures per rank)" if result.data_parallel_size > 1 else "")
            + (f" MTP={result.num_speculative_tokens}" if result.num_speculative_tokens else ""),
        ),
        ("weights", f"{result.quantization}, {result.weights_gib_per_gpu:.2f} GiB per GPU"),
        (
            "KV bytes per token per GPU",
            f"{result.kv_cache_bytes_per_token_per_gpu} ({result.kv_cache_dtype})",
        ),
        ("block size", str(result.block_size)),
        ("max context at concurrency 1", str(out["max_context_at_concurrency_1"])),
        ("fits", f"{'yes' if result.fits else 'no'} (minConcurrency {result.min_concurrency:g})"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("vLLM start-up log lines expected (per GPU):")
    for line in vllm_log_lines(result):
        print(f"  {line}")
    if "predicted" in out:
        p = out["predicted"]
        print(
            f"predicted at {p['concurrency']} clients, {p['inputTokens']} -> {p['outputTokens']} tokens: "
            f"{p['outputTokensPerSecond']} output tokens/s ({p['outputTokensPerSecondPerGPU']} per GPU), "
            f"ITL {p['itlMilliseconds']} ms, TTFT {p['ttftMilliseconds']} ms (p50 of a closed loop, prompts "
            "queued behind the token budget)"
        )
    for reason in result.reasons:
        print(f"- {reason}")
    for note in (*out["notes"], *result.uncertain):
        print(f"! {note}")
    return 0 if result.fits else 1
