"""The free constants of vLLM's non-KV memory, one field per measured or fitted figure (pure).

Each figure says in its comment whether it is measured (a log or memtrace line) or fitted, and on which
start-ups; ``benchmarks/calibration`` refits them and prints the errors. docs/memory-model.md explains
every term they enter.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class BudgetConstants:
    """The free constants of the budget model (fitted by ``benchmarks/fit_errors.py``)."""

    # free constants: fitted on the 22 used rows of tests/fixtures/vllm-startups.csv from vLLM < 0.18
    # (benchmarks/fit_errors.py --refit prints the fit)
    sampler_bytes_native: float = 38.79
    sampler_bytes_flashinfer: float = 13.51
    forward_scale: float = 0.371
    moe_workspace_gib: float = 1.945
    non_torch_gib: float = 0.13  # measured (llm-d logs), not fitted
    non_torch_custom_all_reduce_gib: float = 0.41  # measured (llm-d logs), not fitted
    # NCCL without vLLM's custom all-reduce (PCIe, multi-node) or PP: fitted; the L40S TP8 log says 0.21
    non_torch_multi_gpu_gib: float = 0.105
    # not fitted: 0.50 GiB / (28 layers x 67 sizes), Qwen2-7B on an A100 (dennislee22 logs)
    cudagraph_bytes_per_piece: float = 0.27 * 2**20
    # vLLM >= 0.20 (graph estimate in the budget, the newer profiling run): fitted apart on the rows
    # of that generation (benchmarks/fit_errors.py --refit); see "vLLM >= 0.20" in the docstring. The
    # forward's scale is measured, not fitted: 1628 MiB / (106,496 B x 16384 tokens), Qwen3-8B on the H200
    newer_forward_scale: float = 0.978
    # Model Runner V2's sampler: the bf16 logits (measured, not fitted; see sampler_peak_bytes)
    newer_sampler_bytes: float = 2.0
    newer_non_torch_gib: float = 0.0
    # pipeline parallel, on every rank when PP > 1 (see non_torch_bytes): not fitted, the budget error
    # of the only >= 0.20 PP start-up (Qwen3-32B PP=2, vLLM 0.27.1, first stage; sp-qwen3-32b-
    # rtxpro6000-pp2 in tests/fixtures/vllm-startups.csv) without it: ours +0.44 GiB
    newer_pp_non_torch_gib: float = 0.44
    # Model Runner V2's graph estimate per layer and capture size, divided by TP (see cudagraph_bytes and
    # "Model Runner V2 (vLLM 0.33 ...)" in the docstring): fitted with the constants above
    newer_cudagraph_bytes_per_piece: float = 0.5982 * 2**20
    # the same on Hopper (FlashAttention 3): per layer and capture size, not divided by TP, plus per
    # request of the largest FULL graph and query element on the rank (split-KV accumulators, about 2.7 x
    # one set's 128 B): least squares on the graph memory eleven H200 start-ups on Model Runner V2 took
    # (vLLM 0.26, which estimates nothing but captures what 0.33's profile_cudagraph_memory measures;
    # tests/fit_truth.py fit_hopper_v2_graph_constants)
    hopper_v2_graph_bytes_per_piece: float = 0.1699 * 2**20
    hopper_v2_graph_bytes_per_decode_q_element: float = 348.7
    # the V1 model runner's graph estimate (vLLM >= 0.20; see cudagraph_bytes): least squares on the logged
    # "Estimated CUDA graph memory" figures of vLLM 0.21-0.26 (tests/fit_truth.py fit_graph_constants;
    # benchmarks/fit_errors.py --refit prints them), a component fit on no KV-token figure
    graph_bytes_per_piece: float = 0.1555 * 2**20  # per layer on the rank and capture size
    # the same on Ampere and Ada GPUs (compute capability 8.x), fitted on their three logged estimates
    # (RTX 4090, RTX A5000): vLLM's per-graph sample is larger there for 7-8B models than on the H200
    # with either FlashAttention (see cudagraph_bytes)
    pre_hopper_graph_bytes_per_piece: float = 0.2593 * 2**20
    graph_bytes_per_decode_seq: float = 0.2717 * 2**20  # per request of the largest FULL decode graph
    # per request and query element on the rank (heads / TP x head_dim) of a GQA/MHA model's FULL decode
    # graph: FlashAttention's split-KV accumulators, fp32 x up to 32 splits = 128 B
    graph_bytes_per_decode_q_element: float = 120.26
    # what an MLA model's FULL decode graphs add per request (fitted with the three above)
    mla_graph_bytes_per_decode_seq: float = 2.0648 * 2**20
    # the same four for vLLM 0.18-0.19, fitted on that generation's 28 logged estimates alone (not
    # subtracted there, so they move no budget; the fit result reports them)
    mid_graph_bytes_per_piece: float = 0.3389 * 2**20
    mid_graph_bytes_per_decode_seq: float = 0.3932 * 2**20
    mid_graph_bytes_per_decode_q_element: float = 75.94
    mid_mla_graph_bytes_per_decode_seq: float = 1.3687 * 2**20
    # what the V1 runner's estimate adds per layer on the rank when an MLA model's bf16 checkpoint is
    # quantized at load (--quantization fp8: per-tensor FP8 through CUTLASS scaled_mm): fitted on the two
    # GLM-4.7-Flash start-ups of benchmarks/gpu_truth (1.70 and 1.44 GiB logged where bf16 logs 0.75 and
    # 0.32; tests/fit_truth.py fit_fp8_online_graph_bytes). Not GQA: Qwen3-30B-A3B quantized the same way
    # logs 0.46 GiB, no more than its FP8 checkpoint [inferred: MLA's path; one MLA model measured]
    v1_fp8_online_graph_bytes_per_layer: float = 20.85 * 2**20
    # DSA (GLM-5.x) FULL decode graphs with a bf16 KV cache, per decode request, index head and token of
    # max_model_len (see cudagraph_bytes): fitted with the per-piece and per-request terms (the bf16-KV
    # GLM-5 / GLM-5-FP8 rows, 32 to 512 requests at 32k to 64k tokens, land within 0.15 GiB); the shape is the
    # indexer's fp32 logits, 4 B per index head and token at most
    dsa_graph_bytes_per_index_head_token: float = 1.4076
    newer_moe_workspace_scale: float = 6.706
    # vLLM >= 0.20 profiled by the V1 model runner (see "vLLM >= 0.20, the V1 model runner" in the docstring):
    # fitted on that generation's V1 rows, the H200 start-ups of vLLM 0.26 (benchmarks/gpu_truth) among them
    v1_forward_scale: float = 0.462
    v1_moe_workspace_scale: float = 1.0
    # vLLM 0.18-0.19 (the profiling run also profiles CUDA graphs, which are not subtracted): fitted on
    # that generation's rows (benchmarks/fit_errors.py --refit); see "vLLM 0.18-0.19" in the docstring
    mid_forward_scale: float = 0.462
    mid_sampler_bytes: float = 16.04
    mid_moe_workspace_scale: float = 1.059
    # measured, not fitted: "non-torch forward increase memory" 0.24-0.27 GiB at TP 1 (llm-d-planner logs)
    mid_non_torch_gib: float = 0.25
    # TP > 1 beyond the fusion workspace (vLLM's custom all-reduce, NCCL): fitted
    mid_non_torch_tp_gib: float = 0.40


DEFAULT_CONSTANTS = BudgetConstants()
