"""vLLM's non-KV memory on one GPU rank at start-up: activation peak, non-torch memory, CUDA graphs (pure).

vLLM V1 sizes the KV cache in ``Worker.determine_available_memory``
(``vllm/v1/worker/gpu_worker.py``, vllm-project/vllm 0.10-0.12)::

    available_kv = total_memory x gpu_memory_utilization
                   - weights                 # "Model loading took X GiB"
                   - torch_peak_increase     # activation peak of profile_run()
                   - non_torch_increase      # cudaMemGetInfo used - torch reserved, since init_device
                   - cudagraph_estimate      # only >= 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)

This module models the three middle terms, for three engine generations with their own constants
(``BudgetSettings.generation`` picks one; :func:`glm_operator.planning.releases.budget_generation` says
which release is which). The vLLM < 0.18 constants were fitted on public start-up logs from 0.9-0.15
(the rows of ``tests/fixtures/vllm-startups.csv``: llm-d/llm-d-benchmark ``config_explorer/empirical-vllm-
memory-results.md`` on H100, dennislee22/vLLM-benchmarking ``log/*.log`` on A100, hawkoli1987/mech-util
``experiment_plan.md`` on H200, vllm-project/vllm#21348 and #32105, a vLLM 0.10.2 log of
Qwen3-235B-FP8 on 8x L40S); the ``mid_*`` constants on vLLM 0.19.0 (the llm-d-planner accuracy sweep on
H100, jgchn/llm-d-planner ``accuracy/results/v0.19.0``, and a gpt-oss-20b start on an A100); the
``newer_*`` constants on the Model Runner V2 rows from 0.27 on (Qwen3-32B on RTX PRO 6000 Blackwell,
GLM-5.2 on H200). The >= 0.20 rows profiled by the V1 model runner (0.21-0.28: Qwen3-8B on an RTX A5000,
Qwen2.5 on an RTX 4090, Qwen3-Coder-30B-A3B on L40S, gpt-oss-120b on RTX PRO 4500 Blackwell) are planned
with the ``mid_*`` constants (``BudgetSettings.profiling_run``; the graph estimate still subtracted) and
fitted on none: they are predictions. Refit and print the errors with ``benchmarks/fit_errors.py``.

vLLM 0.18-0.19 (read in the 0.18.0 and 0.19.0 releases): ``determine_available_memory`` runs
``profile_cudagraph_memory`` inside ``memory_profiling`` but, with ``VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS`` defaulting to 0, does not subtract it (``available = requested - non_torch_increase -
torch_peak_increase - weights``, the torch peak taken before the graph profiling). Its "non-torch forward
increase memory" is 0.24-0.27 GiB at TP 1 (``mid_non_torch_gib``, measured) and 2.06-2.21 GiB at TP 2-4
on H100, where 0.10-0.12 logged 0.54: the difference is FlashInfer's all-reduce fusion workspace
(:func:`fusion_workspace_bytes`), which the fusion pass allocates while the profiling run compiles the
model, three buffers each rounded up to 512 MiB by FlashInfer 0.6.6 = 1.5 GiB at any TP, plus
``mid_non_torch_tp_gib`` (fitted, 0.40; the custom all-reduce's 0.41 of 0.10-0.12). vLLM >= 0.20 does
not show it on the rows we have because none is an H100/H200/B200 at TP > 1 with a release that rounds
(0.20-0.26); from 0.27 the workspace is its own size (0.5 GiB at TP 2 on Hopper, a few MiB at TP 8).
The profiling run's activation peak follows the same structure as 0.10-0.12 (forward or sampler, plus
the fused-MoE workspace of the workspace manager) with ``mid_forward_scale``, ``mid_sampler_bytes``
(16 bytes per row and vocabulary entry, FlashInfer's top-k/top-p) and ``mid_moe_workspace_scale``.

vLLM >= 0.20 (read in the 0.20.0, 0.21.0 and 0.33.0 releases; 0.33.0 is the operator's default image)::

    available = requested - non_kv_cache_memory - cudagraph_estimate
    non_kv_cache_memory = total_consumed + transient_peak_headroom     (mem_utils.memory_profiling)

``total_consumed`` is what cudaMemGetInfo says the worker took since its first snapshot (weights,
buffers that outlive the profiling run, memory outside PyTorch), ``transient_peak_headroom`` the torch
peak above what stays allocated. Per component:

* the snapshot is taken after NCCL, the custom all-reduce and the cuBLAS handles exist
  (``Worker.init_device`` in ``vllm/v1/worker/gpu_worker.py`` creates the cuBLAS/cuBLASLt handles
  "before the snapshot, so they count as baseline like the NCCL buffers"): ``newer_non_torch_gib``
  for any TP/PP (fitted: ~0), plus the fusion workspace (:func:`fusion_workspace_bytes`).
* a cold torch.compile inside the profiling run holds about the embedding table
  (:func:`compile_transient_bytes`); the peak is the larger of that and the forward's or sampler's.
* the profiling run is Model Runner V2's by default (``VllmConfig.use_v2_model_runner``;
  ``vllm/v1/worker/gpu/model_runner.py`` ``profile_run``): one dummy forward of
  ``max_num_batched_tokens`` tokens with attention skipped (``newer_forward_scale`` x the structural
  bytes per token), then, on the last PP stage only, one sampler pass over min(max_num_seqs, tokens)
  rows that keeps nothing of the vocabulary's size beside the bf16 logits (:func:`sampler_peak_bytes`).
  Both measured allocation by allocation on the H200 (vLLM 0.26.0, Qwen3-8B, ``gpu_truth memtrace``):
  at 16384 tokens the forward peaks at 1628 MiB inside one compiled layer piece (the gate/up output
  768 MiB, its SiLU product 384, three hidden-size tensors of 128), 0.978 of the structural 106,496 B per
  token; at 8192 rows the sampler at 2548 MiB, 2374 of them the logits. These replace fitted 1.543 and
  9.11 B per entry, which the 0.27.1 rows alone had pinned (with a graph estimate half the size).
* fused-MoE scratch comes from the worker's workspace manager, which keeps its high-water mark
  (``moe_workspace_bytes``), sized by max_num_batched_tokens x top-k x hidden on every GPU.
* CUDA graphs: see "CUDA graphs, vLLM >= 0.18" below; subtracted unless
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0``.

vLLM >= 0.20, the V1 model runner (``BudgetSettings.profiling_run`` is ``PROFILING_V1_NEWER``; GLM-4.x/5.x
and every other MoE model off V2's list up to 0.32). Read in the 0.26.0 wheel: ``Worker.
determine_available_memory`` (``vllm/v1/worker/gpu_worker.py``) still takes the 0.21 form, ``available =
requested - (non_torch_increase + torch_peak_increase + weights) - cudagraph_estimate``, and prints the first
two as "Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory" (after the
graph capture, in ``compile_or_warm_up_model``); ``GPUModelRunner.profile_run`` (``vllm/v1/worker/
gpu_model_runner.py``) is one dummy forward of max_num_batched_tokens and one ``_dummy_sampler_run``, with
FlashInfer's top-k/top-p by default ("Using FlashInfer for top-p & top-k sampling"). The H200 start-ups of
benchmarks/gpu_truth split the budget so (0.26.0, TP 1): peak activation 1.63 GiB for GLM-4.7-Flash at 8192
tokens, 4.06 for GLM-5-FP8 (10 layers) at 2048 and about 5.6 at 8192 (that log ends before the split; from
its budget), 1.39 for Qwen3-30B-A3B-FP8 at 4096 (512 sequences: a 1.16 GiB sampler pass at the 0.19 rate),
1.17 for gpt-oss-20b; non-torch 0.22-0.25 at TP 1 (``mid_non_torch_gib``'s 0.25). The model keeps 0.18-0.19's
forward rate (``v1_forward_scale`` = ``mid_forward_scale``; MLA models their attention layer's blocks,
:func:`mla_attention_live_bytes`), the sampler pass as read (:func:`v1_sampler_pass_bytes`) and:

* the fused-MoE workspace as 0.26 requests it (:func:`triton_experts_workspace_bytes`: TritonExperts' two
  buffers, M x k x max(I/TP, hidden) and M x k x max(2 I/TP, hidden) in bf16 at M = max_num_batched_tokens;
  0.26 runs bf16 and block-FP8 experts through it on H200, "Using TRITON Fp8 MoE backend"), at
  ``v1_moe_workspace_scale`` 1, not fitted (fitted, it came out at 0.92 on the V1 rows without
  h200-glm5fp8-b16k, at 1.88 with it). It replaced a fitted 0.598 x k x (max(2 I/TP, hidden) + I/TP) x 2 B,
  which for GLM-5 was 78 KiB per token where 0.26 takes 192 KiB: 1.2 GiB short at 16384 tokens.
* DSA models on 0.26 (``planning.engine.dsa_shared_workspace``; other releases keep the 0.33 form below):
  the indexer's K-gather rows share the workspace manager's one buffer with the fused-MoE layers, its 512 MiB
  logits stand-in is freed before the MLA stand-in (:func:`v1_dsa_indexer_workspace_bytes`), and what the
  model reserves while it is built, the indexer's top-k buffer and FlashMLA-sparse's workspace (fp8 KV on
  Hopper), counts as weights (:func:`flashmla_sparse_load_workspace_bytes`): GLM-5 with fp8 KV at 131,072
  tokens loads 62.37 GiB where bf16 KV at 2048 tokens loads 61.08.

GLM-5-FP8 (10 layers, TP 1) then gives peak activation 4.03 GiB at 2048 tokens (logged 4.06), 5.60 at 8192
(GLM-5 bf16 logs 5.63) and 7.71 at 16384 (logged 7.74 for both). What vLLM holds at that peak, read allocation
by allocation (``gpu_truth memtrace``, GLM-5 at 16384 tokens): the MLA stand-in below (3584 MiB), the
workspace manager's buffer (3072 MiB) and six activation blocks of the attention layer (1266 MiB, 81 KB per
token: :func:`mla_attention_live_bytes`, where the structural estimate at ``v1_forward_scale`` gave 114, 0.5
GiB over). A start-up whose torch.compile fails to load its cached AOT artifact ("Compiling model
again due to a load failure ... Kernel index 1 not found in id_to_kernel") compiles again inside the profiling
run and holds 20 such blocks instead of 6, 3.1 GiB more (GLM-5 and GLM-5-FP8 at 16384 tokens, both seen on
the H200 after a start-up was cut mid-compile; logs in ``benchmarks/gpu_truth/logs/repeats``): a stale
compile cache costs KV cache, which is one reason the operator keeps none. The first GLM-5-FP8 start-up at
16384 tokens was such a run (+5.8 % KV tokens against it); from a fresh cache ours is 0.9 % under.

MLA models (GLM-4.7-Flash, GLM-5.x, DeepSeek) also hold, at the forward's peak, the tensor MLA allocates in
place of the chunked-context up-projection (:func:`mla_profile_upprojection_bytes`: 64K rows x heads/TP x
(qk_nope + v) from max_model_len 8192 on, whatever the batch). That term is why GLM-4.7-Flash peaks at
1.63 GiB at max-num-seqs 64 and 256 alike, and it is what a fitted "DSA residual" of 3.27 GiB per rank
stood for on GLM-5-FP8 at TP 1 (3.50 GiB); refitted with it, that residual came out at 0.13 GiB and was
dropped. [open: GLM-5.3-FP8 on vLLM 0.28 at TP 8 and 1M tokens logs 25.94 GiB of KV budget without its
utilization; ours is 24.2 at 0.92 (the release's default) and 28.4 at 0.95]

CUDA graphs, vLLM >= 0.18 (read in the 0.33.0 release; line numbers from its wheel). After the profiling
run, ``Worker.determine_available_memory`` (``vllm/v1/worker/gpu_worker.py`` L707-717) calls
``profile_cudagraph_memory`` whenever ``cudagraph_mode != NONE`` and (L720-757) takes the result off the
budget: ``available = requested - non_kv_cache_memory - cudagraph_estimate``. What that estimate is:

* capture sizes (``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py`` L2398-): 1, 2, 4, every 8
  below 256, every 16 up to ``min(2 x max_num_seqs x decode_query_len, 512)`` (1024 on data-center
  Blackwell; ``decode_query_len`` = 1 + speculative tokens), plus ``max_num_batched_tokens`` when it
  fits (:func:`newer_cudagraph_capture_sizes`).
* FULL_AND_PIECEWISE (the default) captures one PIECEWISE graph set per capture size (every layer piece
  between attention calls is its own graph) and one FULL decode graph per capture size up to
  ``max_num_seqs x decode_query_len`` (``ModelCudaGraphManager._init_candidates``,
  ``vllm/v1/worker/gpu/cudagraph_utils.py`` L256-380), all into one graph pool, largest first, PIECEWISE
  before FULL ("FULL activations should fit in already allocated buffers in the graph pool", L442-445).
* Model Runner V2 (0.33's default, ``profile_cudagraph_memory`` in ``cudagraph_utils.py`` L922-1028):
  builds a minimal KV cache (``min(max_num_seqs, largest capture size)`` blocks, L1042-1062), captures
  every PIECEWISE graph and the two largest FULL graphs into a throwaway pool, measured by
  ``cudaMemGetInfo`` around ``capture_model`` (``vllm/v1/worker/gpu/model_runner.py`` L1106, L1152,
  L1161), and replaces the FULL samples by ``first + (n_full - 1) x max(second, 1 MiB)``
  (``_extrapolate_full_graph_memory`` L1031-1039; ``_MIN_PER_GRAPH_BYTES`` L918)::

      estimate = PIECEWISE(all sizes, measured) + FULL_first + (n_full - 1) x max(FULL_second, 1 MiB)

* the V1 runner (0.18-0.32 for models off V2's list; ``GPUModelRunner.profile_cudagraph_memory``,
  ``vllm/v1/worker/gpu_model_runner.py`` L6268-6414 in 0.33, L5862 in 0.19.0, L6780 in 0.28.0: the same
  extrapolation) extrapolates both modes from their two largest graphs and overlays the first captures
  (one pool)::

      estimate = max(PW_first, FULL_first) + (n_pw - 1) x max(PW_second, 1 MiB)
                 + (n_full - 1) x max(FULL_second, 1 MiB)

What depends on TP [inferred from the code and the 0.19 logs]: the pool holds the largest batch's
activations between pieces, and the residual stream and norms are full hidden size on every rank (only
attention and MLP intermediates are hidden / TP); the rest is CUDA driver memory per instantiated graph
(kernel nodes per piece, which TP does not reduce; the custom all-reduce only IPC-registers the graphs'
buffers, ``custom_all_reduce.py`` L464-494, no new allocation). vLLM 0.19 on H100 logs 0.91 / 0.76 /
0.67 GiB for Llama-3.1-8B at TP 1 / 2 / 4, 1.61 / 1.51 for Qwen2.5-72B at TP 2 / 4, 0.81 / 0.84 for
phi-4 at TP 1 / 2 and 1.09 / 1.09 for gpt-oss-20b at TP 2 / 4: only the FULL decode graphs' attention
term divides by TP (below).

The V1 runner's ``profile_cudagraph_memory`` is the same code in 0.19.0 and 0.28.0 (both wheels read),
so :func:`cudagraph_bytes` models it for every release that profiles with the V1 runner (0.18-0.19, and
0.20-0.32 for models off Model Runner V2's list, GLM-4.x/5.x among them)::

    graphs = graph_bytes_per_piece x layers on the rank x capture sizes            (PIECEWISE sets)
             + (graph_bytes_per_decode_seq + graph_bytes_per_decode_q_element x heads / TP x head_dim)
               x min(max_num_seqs, largest capture size)                           (FULL decode graphs)

The query-width term is FlashAttention's split-KV accumulators in the FULL decode graph, fp32 x up to 32
splits (128 B per request and query element): the first FULL capture logs 440 / 770 MiB for GLM-4.5-Air (96
heads of 128) at 256 / 512 requests, 114 MiB for Qwen2.5-7B (28 heads), 28 / 56 MiB for Qwen2.5-0.5B (14 of
64) at 256 / 512 on the H200 (DEBUG "Estimated FULL CUDA graph memory"); fitted at 120 B on >= 0.20 and 76 B
on 0.19 (whose Llama-3.1-8B estimate falls 0.15 / 0.09 GiB from TP 1 to 2 to 4). Without it GLM-4.5-Air's
estimate came out 0.36 GiB under (0.30 against 0.66 logged). FlashAttention 2 (Ampere, Ada and the
Blackwell parts that are not 10.x, ``planning.engine.flash_attn_version``) keeps none: its first FULL capture
is 0 MiB on the H200 with ``--attention-config.flash_attn_version=2``. Two more terms (>= 0.20): Ampere and
Ada GPUs take ``pre_hopper_graph_bytes_per_piece`` (0.26 MiB) for the per-piece one, since the RTX 4090 and
A5000 log 0.52-0.53 GiB for 7-8B models where the H200 logs 0.36-0.39 with either FlashAttention (the
driver's per-graph sample, not the kernels [inferred]); and a query-normed glm4_moe model (GLM-4.5/4.6/4.7)
adds two query buffers of the second capture size per capture but the first where they are large
allocations for PyTorch's caching allocator (:func:`qk_norm_graph_bytes_per_capture`).
MLA models take ``mla_graph_bytes_per_decode_seq`` per request instead, plus the DSA term below; least squares
on the logged estimates of each generation apart (``tests/fit_truth.py`` ``fit_graph_constants``). The same
code captures more in 0.19 than from 0.20 on: with the constants of the 24 bf16 estimates of vLLM 0.21-0.26
the 28 of 0.19 come out 0.25 GiB under on average (worst 0.80), so 0.18-0.19 keep their own ``mid_graph_*``
constants (0.34 / 0.39 / 1.37 MiB and 76 B; rms 0.12 GiB, worst Qwen3-30B-A3B at TP 1, 1.41 logged and 1.16
ours; not subtracted in that generation, so they move no budget) and >= 0.20 has ``graph_bytes_per_piece``
0.16 MiB, ``graph_bytes_per_decode_seq`` 0.27 MiB and ``mla_graph_bytes_per_decode_seq`` 2.06 MiB (rms 0.10
GiB, worst GLM-4.7-Flash at 32k tokens and at 1024 sequences, 0.75 / 1.74 logged and 0.95 / 1.53 ours, and its
FP8-online starts, 0.20 either way). One set fitted on both generations was rms 0.17 GiB, 0.3-0.4 GiB high on
Qwen3-30B-A3B-FP8 and GLM-4.7-Flash at 256 sequences on the H200. With one per-request constant for every
attention the fit was rms 0.22 GiB and DeepSeek-V2-Lite 0.78 GiB under: MLA decode graphs hold more per
request (GLM-4.7-Flash logs 0.32 / 0.75 GiB at 64 / 256 sequences) and gpt-oss's FlashAttention ones almost
nothing (0.49 GiB at 64 and at 128). The DEBUG lines of the V1 estimate show where it comes from (GLM-5-FP8 at
512 sequences, "Estimated PIECEWISE CUDA graph memory: 178.00 MiB first-capture + (51-1) x 1.00 MiB
per-graph", "FULL ...: 1858.00 MiB first-capture + (51-1) x 1.00 MiB per-graph", 1.91 GiB in all): the later
graphs sit at the 1 MiB floor, and the first FULL capture at the largest decode batch is most of it, which is
why the per-request terms carry the estimate. Capture sizes are the model's own where vLLM's model config sets
them (:data:`MODEL_MAX_CAPTURE_SIZE`: gpt-oss captures up to 1024 tokens whatever max_num_seqs).

Model Runner V2 (vLLM 0.33 for every model) keeps ``newer_cudagraph_bytes_per_piece`` per layer and
capture size divided by TP, fitted (0.60 MiB) on the start-ups that subtract it: Qwen3-32B on an RTX PRO
6000 with vLLM 0.27.1 at TP 1, TP 2 and PP 2 (their budgets leave 3.86, 1.66 and 3.03 GiB beside weights
and KV cache) and GLM-5.2-FP8 at TP 8, with the forward and sampler measured on the H200. The H200's 0.26
runner estimates nothing but logs what its graphs took after capture: 0.60-1.0 GiB for Qwen3-8B's 36
layers at 51 sizes, 0.33-0.56 MiB per layer and size, so the fitted figure is at the top of what was
measured [inferred: the estimate captures the same graphs]. Divided by TP because the TP 2 row cannot hold
the TP 1 figure (TP-free, it would keep 1 GiB more than it logs) [open: a start-up at TP > 1 that logs
"Estimated CUDA graph memory" would settle it]. For GLM-4-9B on one 24 GB GPU this is 1.19 GiB of graphs;
at TP 8 on 0.33 GLM-5.x keeps about 0.3 GiB.

On Hopper that per-layer figure fell short where the attention is wide. 0.33's estimate
(``profile_cudagraph_memory``, ``v1/worker/gpu/cudagraph_utils.py`` L922-1040) captures every PIECEWISE
graph and the two largest FULL ones into one throwaway pool and extrapolates the rest from the second FULL
sample, so it is about what the runner's capture then takes, which vLLM 0.26's V2 runner logs ("Graph
capturing finished ... took"). Eleven H200 start-ups on V2 took 0.15-1.0 GiB for Qwen3-8B / Qwen2.5-7B
(where 0.60 MiB per layer and size planned 0.83-1.07) and 1.22 / 2.01 GiB for GLM-4.7's shapes at 256 /
1024 sequences, 0.80 with a TP-2 rank's attention, 1.32 for GLM-4.5-Air at 20 layers (planned 0.36-0.60:
up to 1.6 GiB short, an over-promise). What grows is the query width x the decode batch, like the FULL
graphs' FlashAttention 3 split-KV accumulators: Hopper takes ``hopper_v2_graph_bytes_per_piece`` (0.17
MiB) per layer and size plus ``hopper_v2_graph_bytes_per_decode_q_element`` (349 B) per query element on
the rank and request of the largest FULL graph (rms 0.09 GiB on those eleven, worst 0.19 under). The
per-layer term is not divided by TP, as the V1 runner's is not [open: no Hopper start-up at TP > 1 on V2
measured; the one public Hopper V2 row at TP 8, GLM-5.2-FP8 on 8 H200s, is planned 0.32 GiB under (-1.4 %
KV, -0.02 % with the per-layer form divided by TP, which was fitted on it): conservative until one is].
Not modelled: speculative decoding
(``decode_query_len`` > 1 multiplies the FULL sizes), LoRA capture cases, encoder graphs.

Why the 0.10-0.12 constants failed there: Qwen3-32B at TP=2 on an RTX PRO 6000 with vLLM 0.27.1 keeps
8.22 GiB for the KV cache of a 40.47 GiB budget with 30.59 GiB of weights, so everything else is
1.66 GiB; the old model spent 1.96 GiB on the sampler alone (38.8 bytes x 1024 rows x 151,936
entries at the PyTorch path's rate, or 13.5 at FlashInfer's in 0.10) plus 0.54 GiB of custom
all-reduce buffers (now before the snapshot) and 1.13 GiB of graphs (0.10-0.12 sizes), 22.9 % short
on tokens. The same log's PP=2 first stage (no sampler, all 64 layers' width) keeps 3.03 GiB, TP=1
3.86 GiB: only a forward peak near the structural estimate (0.98 of it, measured), graphs that shrink
with TP and a small sampler explain all three.

Activation peak, vLLM < 0.18 (``profile_run``: one dummy forward of ``max_num_batched_tokens`` tokens,
then, on the last PP stage, one dummy sampler step over ``min(max_num_seqs, max_num_batched_tokens)``
requests)::

    activation = max(forward, sampler) + moe_workspace
    forward    = FORWARD_SCALE x max_num_batched_tokens x activation_bytes_per_token(arch, TP)
    sampler    = SAMPLER_BYTES x rows x vocab (padded to 64)

The sampler term dominates on large-vocabulary models: vLLM's PyTorch top-k/top-p path
(``vllm/v1/sample/ops/topk_topp_sampler.py`` ``forward_native``) sorts fp32 logits (value + int64
index), takes a softmax and a cumulative sum over the full vocabulary, about 38 bytes per
(request, vocabulary entry): on an H100 (default ``max_num_seqs`` 1024) the llm-d logs show 4.76 GiB
for Llama-3.1-8B (vocabulary 128256), 5.56/5.64 GiB for Qwen3-0.6B/32B (151936, the same at TP 1
and 2: logits are gathered in full on every rank) and 7.38 GiB for gpt-oss-20b (201088), i.e.
38.5-38.9 bytes each. The logs where vLLM says "Using FlashInfer for top-p & top-k sampling"
(FlashInfer installed) need far less (``SAMPLER_BYTES_FLASHINFER``): vLLM 0.10.x-0.11.0 take FlashInfer's
sampler whenever it is installed (``VLLM_USE_FLASHINFER_SAMPLER`` unset counts as on; 0.11.0
``topk_topp_sampler.py`` L46-57); 0.11.1 only with ``VLLM_USE_FLASHINFER_SAMPLER=1`` (its L34-46).
Mistral-Small-3.2 on 0.11.0 (2.12 GiB peak with a 131,072-entry vocabulary, 1024 rows) is the former.

``activation_bytes_per_token`` is a structural estimate of one layer's live tensors per token
(residual stream, attention projections, MLP or routed-expert intermediates on this rank);
``FORWARD_SCALE`` calibrates it. MoE models with several ranks on Hopper or newer (compute
capability >= 9.0) add a fixed fused-MoE workspace (``MOE_WORKSPACE_GIB``, fitted on GLM-4.6 TP8
with expert parallel on H200 and Qwen3-235B-FP8 TP4 on H100). On Ada/Ampere it is not added: the
vLLM 0.10.2 DEBUG log of Qwen3-235B-A22B-2507-FP8 TP8 with expert parallel on 8x L40S reports
1.40 GiB peak activation, the sampler term alone (1.41 GiB). The two Hopper models take different
paths (GLM-4.6 bf16 experts with expert parallel, Qwen3-235B FP8 block-quantised experts TP-sharded)
and the flat constant is a compromise: held out, each is predicted from the other alone (Qwen3-235B-FP8
+6.2 %, an over-promise, with GLM-4.6's 1.44 GiB against its own 1.95).

What the fused-MoE layer allocates in these releases (read in the 0.9.2 wheel, the Qwen3-235B-FP8 row,
and the 0.12.0 wheel, the GLM-4.6 rows; :func:`triton_fused_moe_bytes`; paths under
``vllm/model_executor/layers/``, ``envs.py`` and ``v1/`` under ``vllm/``) does not explain that gap:

* Kernel choice. Both models run the Triton ``fused_experts_impl`` on every GPU here. FP8
  block-quantised experts (0.9.2 ``quantization/fp8.py`` L493-499: ``fused_experts`` with
  ``use_fp8_w8a8`` and the 128x128 ``block_shape``) leave it only for DeepGEMM
  (``VLLM_USE_DEEP_GEMM``, default 0: L462, ``envs.py`` L867-868) or CUTLASS block-scaled grouped
  GEMMs, which need compute capability 10.0 (L481-486; 0.10.2 L567-576), so H100 logs the same
  "CutlassBlockScaledGroupedGemm not supported on the current platform" as the L40S; Marlin only
  below 8.9 (L454). bf16 experts (0.12.0 ``fused_moe/unquantized_fused_moe_method.py`` L382-394)
  leave it only for FlashInfer CUTLASS with ``VLLM_USE_FLASHINFER_MOE_FP16`` (default off, L62-68).
  So the capability gate below is empirical (the L40S row), not a kernel difference.
* Allocations per call (0.9.2 ``fused_moe/fused_moe.py``; 0.12.0 the same lines at L1762-1819), with
  M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) (L1266-1267; default 32768 in 0.9.2-0.10.2
  ``envs.py`` L547-548, 16384 in 0.12.0 L789-790: one chunk at 8192 tokens), k = top-k, h = hidden,
  I = moe_intermediate_size / TP (the full size with expert parallel: each rank holds whole experts and
  the buffers cover all M x k slots, ``expert_map`` only skips the foreign ones)::

      cache13 = M x k x max(2 I, h) x 2 B         L1291-1295 (caches 1 and 3 share it)
      cache2  = M x k x I x 2 B                    L1298-1300
      output  = M x h x 2 B, only out of place     L1311-1314 (0.12.0 L1816-1819: torch >= 2.9,
                                                   which 0.12.0 pins, forces it: fused_moe/utils.py L331-332)
      FP8 w8a8 block b: a1q = M x h x 1 B + scales M x h / b x 4 B      L1340-1345, a2q = M x k x I
                        x 1 B + scales M x k x I / b x 4 B              L1381-1386 (fused_moe/utils.py L43,
                        quantization/utils/fp8_utils.py L392, L402: fp32 scales per group)
      sorted ids  = 4 B x (M x k + experts x (BLOCK_SIZE_M - 1)), < 1 MiB
                                                   fused_moe/moe_align_block_size.py L202-205

  They are ``torch.empty`` inside the call, freed on return and reused by the caching allocator for
  the next layer: no buffer is shared or kept across layers, the peak holds one layer's. At 8192
  tokens: Qwen3-235B-FP8 TP4 (h 4096, I 384, k 8) 617.75 MiB, of which the FP8 copies and scales are
  57.75 MiB; GLM-4.6 with expert parallel on 0.12.0 (h 5120, I 1536, k 8, out of place) 912 MiB. The
  FP8 path adds 0.06 GiB, not the 0.51 GiB the fit asks, and the bf16 GLM-4.6 buffers are the larger.
* Timing. ``profile_run`` (0.9.2 ``v1/worker/gpu_model_runner.py`` L2273-2283) runs the dummy forward,
  then the dummy sampler on its output; the MoE buffers are gone by the sampler step. On the
  Qwen3-235B-FP8 row the PyTorch sampler term (5.6 GiB: 1024 rows) is the peak, so by the source none
  of its 1.95 GiB above the sampler is fused-MoE scratch; on GLM-4.6 (one sequence, no sampler peak)
  the 912 MiB sit inside the measured forward peak. The sampler code is the same in 0.9.2 and 0.11.0
  (``v1/sample/sampler.py``, ``ops/topk_topp_sampler.py``: only the logprobs modes differ).
  [not verified, left open: that row's engine (``~0.9.2``) and its sampler are inferred, its weights
  are ours (not logged), and it ran LMCacheConnectorV1; any of these can hold the 0.5 GiB.]

So the constant stays a fitted residual on Hopper rows with TP > 1, not a model of the MoE kernels;
a third Hopper MoE start-up on vLLM < 0.18 with a logged peak activation would settle it.

DSA models (GLM-5.x, DeepSeek-V3.2: a sparse-attention indexer) reserve prefill workspaces sized
by ``max_model_len`` during the profiling run, so their activation grows with the context (vLLM
0.33.0 ``vllm/model_executor/layers/sparse_attn_indexer.py`` L483-505, ``vllm/v1/attention/
backends/mla/indexer.py`` ``get_max_prefill_buffer_size`` L916-927, ``flashmla_sparse.py``
``get_prefill_workspace_size`` L337-344)::

    dsa_workspace = max_model_len x factor x 8 x 132          indexer K-gather rows (any backend)
                  + 512 MiB                                   VLLM_SPARSE_INDEXER_MAX_LOGITS_MB
                  + max_model_len x factor x 576 x 2 / DCP    FlashMLA-sparse prefill rows (SM90/SM100)

0.33.0 takes ``factor`` = 5 up to 256K tokens and 2 above (``vllm/config/vllm.py`` L1866-1874,
``sparse_mla_prefill_workspace_factor``), and so do we: two 1M-token starts on 8x H200 fit it once the
weights are vLLM's own figure (94.46 GiB per rank for the GLM-5.x FP8 checkpoint, vllm-project/recipes#893;
see the catalog's ``loaded_weights``): GLM-5.2-FP8 at util 0.95 left 26.5 GiB for the KV cache (factor 2:
26.3; factor 5: 20.2) and GLM-5.3-FP8 left 25.94 GiB (factor 2: 26.1 at util 0.95 [inferred: the
recipe's utilization is not in that report]). (The first fit kept 5 at every length: with the
under-counted weights factor 5 matched the GLM-5.2 row, each error hiding the other.)

Non-torch memory is what grew outside PyTorch's allocator *after* the worker's first memory snapshot,
which vLLM takes after NCCL is initialised, so NCCL's own buffers do not count: ~0.13 GiB on one GPU
(cuBLAS/cuDNN workspaces; llm-d H100 logs 0.13-0.14), +0.41 GiB per rank when TP > 1 uses vLLM's
custom all-reduce (its IPC buffers; llm-d logs 0.54-0.55 at TP 2), less when it is disabled (PCIe
without peer-to-peer, or TP across nodes: "Custom allreduce is disabled" in the log).

CUDA graphs are captured after the KV cache is allocated (``compile_or_warm_up_model``) and logged
as ``Graph capturing finished in S secs, took G GiB``. vLLM < 0.20 does not subtract them from the
budget, they live in the ``1 - gpu_memory_utilization`` headroom; >= 0.20 subtracts its own estimate.
Piecewise capture records one graph per captured batch size per layer piece::

    cudagraph = CUDAGRAPH_BYTES_PER_PIECE x layers on the rank x capture sizes

with vLLM's default sizes 1, 2, 4, 8, 16, ... (step 8) up to ``min(2 x max_num_seqs, 512)``; the
A100 logs (Qwen2-7B, 28 layers x 67 sizes: 0.50 GiB at TP 1, 0.65 GiB at TP 2) give ~0.27 MiB per
piece. ``--enforce-eager`` captures none.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.releases import GENERATION_MID, GENERATION_NEWER, GENERATION_OLDER

#: the profiling run of vLLM >= 0.20 under the V1 model runner (BudgetSettings.profiling_run): not a budget
#: generation, its own constants (v1_*)
PROFILING_V1_NEWER = 3

GIB = 1024**3
VOCAB_PADDING = 64
MAX_CAPTURE_SIZE = 512
#: models whose vLLM config raises the largest CUDA-graph capture size whatever max_num_seqs (vLLM 0.26
#: ``GptOssForCausalLMConfig.verify_and_update_config``, ``vllm/model_executor/models/config.py``
#: L366-379, 0.33 L549-559: "Increase the max capture size from 512 to 1024 for performance"; the H200
#: logs of gpt-oss-20b at 64 and 128 sequences both say "PIECEWISE=83 (largest=1024)")
MODEL_MAX_CAPTURE_SIZE = {"GptOssForCausalLM": 1024}
# DSA prefill workspaces (vLLM 0.33.0, sources in the module docstring)
DSA_WORKSPACE_FACTOR_SHORT = 5  # max_model_len <= DSA_WORKSPACE_FACTOR_SWITCH
DSA_WORKSPACE_FACTOR_LONG = 2
DSA_WORKSPACE_FACTOR_SWITCH = 256 * 1024
DSA_INDEXER_ROWS_PER_FACTOR = 576 * 2 // 132  # 8
DSA_INDEXER_ROW_BYTES = 132  # fp8 key 128 + fp32 scale
DSA_PREFILL_ROW_BYTES = 576 * 2  # bf16 MLA latent + rope
DSA_MAX_LOGITS_BYTES = 512 * 2**20  # VLLM_SPARSE_INDEXER_MAX_LOGITS_MB default
DSA_RADIX_TOPK_WORKSPACE_BYTES = 2**20  # RADIX_TOPK_WORKSPACE_SIZE, vLLM 0.26 sparse_attn_indexer.py L42
# vLLM 0.26 get_max_prefill_buffer_size (v1/attention/backends/mla/indexer.py L231-241): 40 x max_model_len
V1_DSA_GATHER_ROWS_PER_CONTEXT_TOKEN = 40
# vLLM 0.26 flashmla_sparse.py get_prefill_workspace_size (L222-229): 5 x max_model_len
FLASHMLA_SPARSE_PREFILL_ROWS_PER_CONTEXT_TOKEN = 5
DSA_INDEX_TOPK = 2048  # config index_topk of GLM-5.x and DeepSeek-V3.2 (not in ModelArchitecture)
# MLA's profile-run stand-in for the chunked-context up-projection (mla_profile_upprojection_bytes)
MLA_CHUNKED_CONTEXT_MAX_ROWS = 64 * 1024
#: query-width bf16 buffers a GQA/MHA attention piece holds per token (attention_piece_bytes_per_token)
ATTENTION_PIECE_Q_BUFFERS = 5
#: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): an allocation of kMinLargeAlloc or
#: more gets a segment of its own, rounded up to kRoundLarge; smaller ones share 2 / 20 MiB segments
ALLOCATOR_MIN_LARGE_ALLOC = 10 * 2**20
ALLOCATOR_ROUND_LARGE = 2 * 2**20
#: bf16 query buffers a query-normed glm4_moe piecewise graph keeps per capture once they are large
#: allocations (qk_norm_graph_bytes_per_capture): GLM-4.7's 24 MiB per graph is two of 12 MiB
QK_NORM_GRAPH_QUERY_BUFFERS = 2
#: tokens per profiling request from which 257-512 requests held two attention-piece sets (Air, 0.26; one
#: set at 768 and 1024 requests: attention_piece_bytes_per_token)
ATTENTION_PIECE_TWO_SETS_TOKENS_PER_REQUEST = 32
ATTENTION_PIECE_TWO_SETS_MAX_REQUESTS = 512
#: The V1 runner's dummy sampler pass per row and vocabulary entry (vLLM 0.22-0.28 read): the bf16 logits,
#: their fp32 copy (``Sampler.forward``), the probabilities and the exponential noise (``random_sample``),
#: 2 + 4 + 4 + 4
V1_SAMPLER_BYTES_PER_ENTRY = 14
#: ``apply_top_k_top_p_triton`` (``vllm/v1/sample/ops/topk_topp_triton.py``) runs from 8 rows on; below that
#: PyTorch's sort path (``sampler_bytes_native``)
TOPK_TOPP_TRITON_MIN_ROWS = 8
#: its cached fp32 scratch has one vocabulary row per program, min(next power of 2 >= rows, SMs): the SMs of
#: an H100/H200 (132); a GPU with fewer keeps up to 0.04 GiB less at a 152K vocabulary
TOPK_TOPP_TRITON_PROGRAMS = 132
MLA_BLOCK_SIZE = 16  # vLLM's default KV block size: the rows' lower bounds (4 and 1 pages per request)
FLASHMLA_SPARSE_CAPABILITIES = (9, 10)  # FlashMLA's sparse kernels: Hopper and datacenter Blackwell
# the fitted vLLM < 0.18 fused-MoE residual only on these GPUs (empirical, see the module docstring)
MOE_WORKSPACE_MIN_COMPUTE_CAPABILITY = 9.0
# FlashInfer all-reduce fusion (see fusion_workspace_bytes): the largest all-reduce it fuses, MiB, by
# compute capability and TP size (vLLM 0.33 FI_ALLREDUCE_FUSION_MAX_SIZE_MB in
# vllm/compilation/passes/fusion/allreduce_rms_fusion.py; 0.19 has the same figures but 2 for 10.3 at TP 8)
FUSION_MAX_SIZE_MIB: dict[tuple[int, int], dict[int, float]] = {
    (9, 0): {2: 64, 4: 2, 8: 0.5},
    (10, 0): {2: 64, 4: 32, 8: 1},
    (10, 3): {2: 64, 4: 64, 8: 4},
}
FUSION_BUFFER_ALIGN = 2 * 2**20  # the allocation granularity FlashInfer rounds each buffer to
FUSION_MULTICAST_GRANULARITY = 512 * 2**20  # what FlashInfer <= 0.6.14 rounds each buffer up to
FUSION_SIGNAL_PAD_BYTES = 2048  # flashinfer/comm/mnnvl.py SIGNAL_PAD_SIZE
FUSION_FLAG_BYTES_PER_RANK = 256 * 4  # BarrierFlagCount int32 flags


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


@dataclass(frozen=True)
class BudgetSettings:
    """The engine settings the non-KV memory depends on (beyond the model and TP/PP).

    Data parallelism is not among them: every budget here is for one engine with DP = 1, the only layout
    the operator renders (``--data-parallel-*`` are managed flags that ``serving.extraArgs`` may not set,
    ``glm_operator.api.vllm_args``). What DP > 1 would add per rank in vLLM 0.33, not modelled: with expert
    parallel the fused-MoE layers switch to all-to-all kernels (``use_all2all_kernels`` is ``use_ep and
    dp_size > 1``, ``vllm/model_executor/layers/fused_moe/config.py`` L1035-1038) and their dispatch/combine
    buffers, and the DP ranks pad each step, the captured graphs included, to a common batch
    (``vllm/v1/worker/gpu/dp_utils.py``).
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    flashinfer_sampler: bool = False
    custom_all_reduce: bool = True
    enforce_eager: bool = False
    # torch.compile loads its artifacts instead of compiling in the profiling run (compile_transient_bytes)
    compile_cache_warm: bool = False
    # the cuBLAS handles exist before vLLM's first memory snapshot (planning.engine.cublas_before_snapshot:
    # 0.33, assumed from 0.27); before that they are non-torch memory (mid_non_torch_gib)
    cublas_before_snapshot: bool = True
    max_model_len: int = 0
    compute_capability: float = 9.0
    decode_context_parallel_size: int = 1
    # which constant set (planning.engine.budget_generation): GENERATION_NEWER (vLLM >= 0.20) has the
    # CUDA-graph estimate in the budget and the newer profiling run (constants newer_*), GENERATION_MID
    # (0.18-0.19) the mid_* constants
    generation: int = GENERATION_OLDER
    # FlashInfer <= 0.6.14 (vLLM 0.18-0.26): fusion buffers rounded up to 512 MiB, no fusion with PP
    fusion_workspace_rounded: bool = False
    # vLLM >= 0.20 profiling with the V1 model runner (planning.engine.model_runner_v2 is False): its
    # profiling run is 0.18-0.19's (the mid_* constants; see profiling_run), the graph estimate aside
    model_runner_v1: bool = False
    # FP8 expert weights (vLLM >= 0.18: the fused-MoE workspace at newer_moe_workspace_scale, else mid_*)
    fp8_experts: bool = False
    # bf16/fp16 expert weights (unquantized: Model Runner V2 on Hopper runs them through TritonExperts)
    unquantized_experts: bool = False
    # an MLA model's bf16 checkpoint quantized to FP8 at load (--quantization fp8): its graphs take more
    # (V1 runner; see v1_fp8_online_graph_bytes_per_layer)
    fp8_online_mla: bool = False
    # Model Runner V2 estimates its CUDA graphs (planning.engine.v2_graph_estimate: not in vLLM 0.26)
    v2_graph_estimate: bool = True
    # --kv-cache-dtype fp8 (a DSA model then takes FlashMLA-sparse with fp8_ds_mla on Hopper, see
    # flashmla_sparse_load_workspace_bytes)
    kv_cache_fp8: bool = False
    # vLLM 0.26's DSA profiling run (planning.engine.dsa_shared_workspace; see v1_dsa_indexer_workspace_bytes)
    dsa_shared_workspace: bool = False
    # multi-head latent attention (FULL decode graphs take more per request: mla_graph_bytes_per_decode_seq)
    mla: bool = False
    # a model's own largest capture size (MODEL_MAX_CAPTURE_SIZE; 0: vLLM's default from max_num_seqs)
    max_cudagraph_capture_size: int = 0
    # DSA index heads whose decode logits the V1 runner's FULL graphs hold per request (0: not DSA, or an
    # fp8 KV cache, whose FlashMLA-sparse path the H200 log shows without them)
    dsa_graph_index_heads: int = 0
    # query elements per token on one rank (heads / TP x head_dim) of a GQA/MHA model whose FULL graphs keep
    # FlashAttention 3's split-KV accumulators; 0 for MLA and FlashAttention 2
    graph_q_width: int = 0
    # the same for a query-normed glm4_moe model (use_qk_norm: GLM-4.5/4.6/4.7), whose piecewise graphs
    # can take more (qk_norm_graph_bytes_per_capture); 0 for every other model
    qk_norm_q_width: int = 0

    @property
    def graph_profiling(self) -> bool:
        """vLLM >= 0.20: the CUDA-graph estimate is in the budget."""
        return self.generation == GENERATION_NEWER

    @property
    def profiling_run(self) -> int:
        """Whose constants model the profiling run: vLLM >= 0.20 with the V1 model runner has its own
        (``PROFILING_V1_NEWER``, the v1_* constants; the graph estimate and non-torch memory as 0.18-0.19)."""
        if self.generation == GENERATION_NEWER and self.model_runner_v1:
            return PROFILING_V1_NEWER
        return self.generation


@functools.lru_cache(maxsize=4096)
def activation_bytes_per_token(arch: ModelArchitecture, tp: int) -> float:
    """Live bytes per scheduled token in one layer on one rank (structural estimate, see docstring)."""
    h = arch.hidden_size
    heads = arch.num_attention_heads / tp
    residual = 4.0 * h * 2
    if arch.is_mla:
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        attn = (
            heads * qk
            + arch.kv_lora_rank
            + arch.qk_rope_head_dim
            + heads * (arch.qk_nope_head_dim + arch.v_head_dim)
            + heads * arch.v_head_dim
            + arch.q_lora_rank
        ) * 2.0
    else:
        q = heads * arch.head_dim
        kv = max(1.0, arch.num_kv_heads / tp) * arch.head_dim
        attn = (2 * q + 2 * kv) * 2.0
    if arch.linear_attention_layers:
        attn = max(attn, 5.0 * arch.linear_num_heads * arch.linear_head_dim / tp * 2)
    mlp = 3.0 * arch.intermediate_size / tp * 2
    if arch.is_moe:
        k = arch.num_experts_per_tok or 1
        moe = k * (3.0 * arch.moe_intermediate_size / tp + h) * 2 + arch.n_routed_experts * 4.0
        mlp = max(mlp if arch.first_k_dense_replace else 0.0, moe)
    return residual + max(attn, mlp)


def mla_attention_live_bytes(arch: ModelArchitecture, tp: int) -> float:
    """Bytes per scheduled token an MLA layer holds at the V1 runner's profiling peak, on one rank.

    The peak of an MLA model's dummy forward is inside its attention op, where ``MLAAttention.forward_impl``
    allocates the chunked-context stand-in (:func:`mla_profile_upprojection_bytes`) beside the op's inputs and
    output (``vllm/model_executor/layers/attention/mla_attention.py`` 0.26.0 L661 and L706-716): the
    queries, heads/TP x (qk_nope + qk_rope), the output, heads/TP x v_head, the compressed KV and its rope
    part, kv_lora + qk_rope, and the layer's hidden states, all bf16. The fused-MoE intermediates live in the
    workspace manager's buffer, counted apart (:func:`moe_workspace_bytes`). GLM-5 (64 heads of 192 + 64
    and 256, kv_lora 512, hidden 6144): 78,976 B per token; memtrace on the H200 (vLLM 0.26.0) holds six
    blocks of 649 MiB at 8192 tokens and 1266 MiB at 16384 (83,072 and 81,024 B per token, block rounding
    included), where ``v1_forward_scale`` x the structural estimate gave 114 KB per token (0.5 GiB over at
    16384).
    """
    heads = arch.num_attention_heads / max(1, tp)
    per_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim
    return (heads * per_head + arch.kv_lora_rank + arch.qk_rope_head_dim + arch.hidden_size) * 2.0


def is_hopper(compute_capability: float) -> bool:
    """Compute capability 9.x (H100, H200, GH200): FlashAttention 3, Triton first for bf16 experts."""
    return 9 <= compute_capability < 10


def padded_vocab(arch: ModelArchitecture) -> int:
    return math.ceil(arch.vocab_size / VOCAB_PADDING) * VOCAB_PADDING


def forward_peak_bytes(
    arch: ModelArchitecture, tp: int, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS
) -> float:
    """The dummy forward's live activations: a scale per profiling run x the structural bytes per token.

    A dense GQA model's forward is the same compiled layer piece under either model runner of vLLM >= 0.20,
    so the V1 runner takes Model Runner V2's measured ``newer_forward_scale`` for it: memtrace of Qwen3-8B on
    the V1 runner at 8192 tokens with a warm compile cache (``benchmarks/gpu_truth/logs/repeats/
    qwen3-8b-v1-b8k-s7call11-warm.log.gz``) holds gate/up 384 + SiLU 192 + 3 x 64 + 32 MiB = 800 MiB at the
    peak, V2 at 16384 tokens 1628 MiB of the same blocks. ``v1_forward_scale`` stays for MoE and MLA
    models; an MLA model's peak on the V1 runner is its attention layer (:func:`mla_attention_live_bytes`).
    The other way round, a GQA MoE model under Model Runner V2 takes ``v1_forward_scale``: GLM-4.7's shapes
    and GLM-4.5-Air forced onto V2 (vLLM 0.26, memtrace) peak at the same blocks as on V1, the workspace
    manager's buffer and the attention piece's nine (1009 / 977 MiB at 8192 tokens), where
    ``newer_forward_scale`` x the structural bytes came to 0.5 / 0.3 GiB more."""
    if settings.profiling_run == PROFILING_V1_NEWER and arch.is_mla:
        return mla_attention_live_bytes(arch, tp) * settings.max_num_batched_tokens
    scale = {
        GENERATION_NEWER: c.newer_forward_scale,
        GENERATION_MID: c.mid_forward_scale,
        PROFILING_V1_NEWER: c.v1_forward_scale,
    }.get(settings.profiling_run, c.forward_scale)
    dense = not (arch.is_moe or arch.is_mla or arch.linear_attention_layers)
    if settings.profiling_run == PROFILING_V1_NEWER and dense:
        scale = c.newer_forward_scale
    gqa_moe = arch.is_moe and not (arch.is_mla or arch.linear_attention_layers)
    if settings.profiling_run == GENERATION_NEWER and gqa_moe:
        scale = c.v1_forward_scale
    per_token = scale * activation_bytes_per_token(arch, tp)
    if settings.generation == GENERATION_NEWER:
        piece = attention_piece_bytes_per_token(
            arch, tp, settings.max_num_seqs, settings.max_num_batched_tokens
        )
        per_token = max(per_token, piece)
    return per_token * settings.max_num_batched_tokens


def query_width_per_rank(arch: ModelArchitecture, tp: int) -> int:
    """Query elements per token on one rank of a GQA/MHA model: heads / TP x head_dim."""
    return max(1, arch.num_attention_heads // max(1, tp)) * arch.head_dim


def attention_piece_bytes_per_token(
    arch: ModelArchitecture, tp: int, max_num_seqs: int = 256, max_num_batched_tokens: int = 0
) -> float:
    """What the compiled layer piece around a GQA/MHA attention holds per token at the profiling run's peak,
    on one rank (vLLM >= 0.20; 0 for MLA, :func:`mla_attention_live_bytes`): ``ATTENTION_PIECE_Q_BUFFERS``
    bf16 buffers of the query width (heads / TP x head_dim): the fused qkv output, the normed and rotated
    queries, the attention output. Where the query is wider than the MLP's share of a token it is the
    forward's peak: GLM-4.5-Air (96 heads of 128 over a 4096 hidden, the GLM-4.5/4.6/4.7 attention) holds
    977 / 1921 MiB in it at 8192 / 16384 tokens and 256 sequences on the H200 (memtrace, vLLM 0.26.0: the
    224 MiB qkv output and 192 MiB query blocks among nine), 4.97 / 4.89 query widths per token, where the
    fitted MoE forward rate gave 3.1; GLM-4.7's shapes (12 of its layers) 1009 MiB at 8192 tokens.

    One Air start-up shape holds two such sets (19 blocks of the same compiled kernels, the qkv output
    twice) and two hidden-size outputs beside them: 512 sequences at 16384 tokens, 4073 + 256 MiB, at 32768
    and at 131072 tokens of context alike. The single set held at 256 sequences (4096, 8192 and 16384
    tokens), at 512 sequences with 8192 tokens, at 1024 with 16384 (there the profiling peak is the
    sampler pass, which the doubled set would have passed), at 768 and at 1024 with 32768 (memtrace: the
    workspace manager's 4096 MiB beside 9 blocks, 3809 MiB; 42-43 and 32 tokens a request). The profiling
    run gives min(max_num_seqs, tokens) requests tokens // requests each and the remainder to the last
    (``_dummy_run``, vLLM 0.26 ``gpu_model_runner.py`` L5859-5862), so the doubled shape is the only one
    measured with 257-512 requests of 32 tokens or more each: planned so, which keeps the doubled set for
    the unmeasured shapes of that kind (384 x 16384, 512 x 32768) [open: why the run keeps two layers'
    buffers there; neither "more than 256 requests of >= 32 tokens" nor "of equal length" held at 768 and
    1024 x 32768; measured on vLLM 0.26's V1 runner alone].
    """
    if arch.is_mla:
        return 0.0
    piece = ATTENTION_PIECE_Q_BUFFERS * query_width_per_rank(arch, tp) * 2.0
    if (
        256 < max_num_seqs <= ATTENTION_PIECE_TWO_SETS_MAX_REQUESTS
        and max_num_batched_tokens >= ATTENTION_PIECE_TWO_SETS_TOKENS_PER_REQUEST * max_num_seqs
    ):
        return 2 * piece + 2 * arch.hidden_size * 2.0
    return piece


def sampler_peak_bytes(
    arch: ModelArchitecture, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS, tp: int = 1
) -> float:
    """The profiling run's dummy sampler pass over min(max_num_seqs, max_num_batched_tokens) rows.

    Model Runner V2 (vLLM >= 0.20 where it is the default; ``_dummy_sampler_run`` in ``vllm/v1/worker/gpu/
    model_runner.py``, read in 0.26.0): the logits of the rows in bf16 and nothing of the vocabulary's
    size beside them (temperature, min-p and top-k/top-p work in place, the Gumbel sample keeps a few
    values per row), ``newer_sampler_bytes`` = 2 per row and vocabulary entry, plus the model's last
    hidden states and the rows picked from them. At TP > 1 ``LogitsProcessor._gather_logits`` all-gathers
    the rank's slice into a [TP x rows, vocabulary / TP] buffer and reshapes it into a copy
    (``all_gather`` in ``base_device_communicator.py``): 2 + 2 / TP bytes more per entry at its peak.
    Measured (``gpu_truth memtrace``, Qwen3-8B on the H200, 8192 rows): 2374 MiB of bf16 logits, 8192 x
    151,936 x 2 B, and 160 MiB of hidden states, 2548 MiB in all.

    The V1 runner, which vLLM 0.20-0.32 still use for some models
    (:func:`glm_operator.planning.releases.model_runner_v2`): :func:`v1_sampler_pass_bytes`, the same with
    FlashInfer's sampler or PyTorch's, beside the same hidden states (GLM-4.7-Flash at 16384 tokens and 1024
    rows, memtrace: the 2195.5 MiB pass, the 640 MiB fused-MoE workspace and the forward's 64 MiB output).
    """
    rows = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    native_on_v1 = settings.model_runner_v1 and not settings.flashinfer_sampler
    # the forward's hidden states stay alive through the pass, beside the rows picked from them
    hidden = (rows + settings.max_num_batched_tokens) * arch.hidden_size * 2.0
    if settings.profiling_run == GENERATION_NEWER:
        gather = 2.0 + 2.0 / tp if tp > 1 else 0.0
        return (c.newer_sampler_bytes + gather) * rows * padded_vocab(arch) + hidden
    if settings.profiling_run == PROFILING_V1_NEWER:
        return v1_sampler_pass_bytes(rows, padded_vocab(arch), c) + hidden
    if settings.profiling_run == GENERATION_MID and not native_on_v1:
        per = c.mid_sampler_bytes
    else:
        per = c.sampler_bytes_flashinfer if settings.flashinfer_sampler else c.sampler_bytes_native
    return per * rows * padded_vocab(arch)


def v1_sampler_pass_bytes(rows: int, vocab: int, c: BudgetConstants = DEFAULT_CONSTANTS) -> float:
    """The V1 runner's ``_dummy_sampler_run`` over ``rows`` rows (read in vLLM 0.22.0, 0.24.0, 0.26.0, 0.28.0,
    ``vllm/v1/worker/gpu_model_runner.py``): one sampler pass with the release's top-k/top-p sampler, then
    ("Also warm forward_native") one with PyTorch's, whatever ``VLLM_USE_FLASHINFER_SAMPLER`` says. The
    peak is the PyTorch pass: the bf16 logits, their fp32 copy (``Sampler.forward``), the probabilities and
    the exponential noise of ``random_sample``, ``V1_SAMPLER_BYTES_PER_ENTRY`` = 14 B per row and vocabulary
    entry (FlashInfer's pass holds the same: its masked logits in place of the noise), plus from 8 rows on
    the fp32 scratch of the Triton top-k/top-p kernel, min(next power of 2 >= rows, SMs) vocabulary rows,
    which it caches. Measured (``gpu_truth memtrace``, vLLM 0.26.0 on the H200, 1024 rows of 151,936
    entries): 296.8 + 3 x 593.5 + 76.5 = 2153.8 MiB for Qwen2.5-0.5B with either sampler and for
    Qwen3-30B-A3B-FP8. Below 8 rows PyTorch sorts the logits (``sampler_bytes_native``). It replaces a rate of
    16.04 B per entry (0.18-0.19's, fitted), which is this at 256 rows and 14 % over it at 1024, and the sort
    path's 38.8 B for ``VLLM_USE_FLASHINFER_SAMPLER=0``, which the Triton kernel ended in 0.22."""
    if rows < TOPK_TOPP_TRITON_MIN_ROWS:
        return c.sampler_bytes_native * rows * vocab
    programs = min(1 << (rows - 1).bit_length(), TOPK_TOPP_TRITON_PROGRAMS)
    return float((V1_SAMPLER_BYTES_PER_ENTRY * rows + 4 * programs) * vocab)


def moe_workspace_bytes(
    arch: ModelArchitecture,
    tp: int,
    c: BudgetConstants = DEFAULT_CONSTANTS,
    compute_capability: float = 9.0,
    settings: BudgetSettings | None = None,
) -> float:
    """Fused-MoE workspace held through the profiling run.

    vLLM >= 0.18 (``settings.generation`` mid or newer): the fused-MoE kernels take their scratch buffers
    from the worker's workspace manager, which keeps the high-water mark for the whole process (0.33
    ``vllm/model_executor/layers/fused_moe/modular_kernel.py``: ``current_workspace_manager()
    .get_simultaneous`` of workspace13 (tokens, top-k, max(2 x I/TP, hidden)) and workspace2 (tokens,
    top-k, I/TP)), on every GPU; sized at max_num_batched_tokens, scaled by the fitted
    ``newer_moe_workspace_scale`` for FP8 experts and under Model Runner V2 (bf16 experts on Hopper aside,
    which take TritonExperts' buffers under either runner; no V2 row with other experts: kept
    conservative), else ``mid_moe_workspace_scale`` (the
    block-scaled FP8 grouped GEMMs add quantized copies, scales and per-expert padding: GLM-5.2-FP8 on
    H200 and GLM-5.3-FP8 on vLLM 0.28 need the larger scale, bf16 Qwen3-MoE on 0.24 and MXFP4 gpt-oss on
    0.28 the 0.19 one). Older releases: a fixed fitted workspace on Hopper or newer with TP > 1 (see the
    module docstring).
    """
    if not arch.is_moe:
        return 0.0
    if settings is not None and settings.generation != GENERATION_OLDER:
        # the workspace manager exists from 0.18 on (0.19 ``Worker.init_device``: init_workspace_manager)
        inter = arch.moe_intermediate_size / tp
        k = arch.num_experts_per_tok or 1
        per_token = k * (max(2 * inter, arch.hidden_size) + inter) * 2
        # the workspace manager is the fused-MoE layer's, whichever model runner profiles; its size follows
        # the expert kernels: FP8 block-scaled grouped GEMMs (GLM-5.x FP8 on H200 with vLLM 0.28 and 0.33)
        # hold far more than the bf16 / MXFP4 kernels (0.19 sweep; Qwen3-MoE bf16 on 0.24, gpt-oss on 0.28)
        # (no Model Runner V2 row has MXFP4/NVFP4 experts, nor bf16 ones off Hopper: V2 keeps the larger
        # scale for them)
        # bf16 experts on Hopper run through TritonExperts whichever runner profiles: the unquantized MoE
        # oracle puts Triton first on compute capability 9.x (``_get_priority_backends`` in
        # ``fused_moe/oracle/unquantized.py``, read in 0.26.0 and 0.33.0, the same workspace shapes in both);
        # GLM-4.7's shapes and GLM-4.5-Air on Model Runner V2 (0.26, forced) peak at 2.24 / 1.95 GiB as on V1
        hopper_bf16 = settings.unquantized_experts and is_hopper(compute_capability)
        if settings.profiling_run == PROFILING_V1_NEWER or (
            settings.profiling_run == GENERATION_NEWER and hopper_bf16
        ):
            # the V1 runner of vLLM >= 0.20 (H200, 0.26: the Triton fused-MoE backend for bf16 and FP8 experts
            # alike, "Using TRITON Fp8 MoE backend" in the GLM-5-FP8 and Qwen3-30B-A3B-FP8 logs): the
            # TritonExperts buffers as vLLM 0.26 requests them (triton_experts_workspace_bytes)
            tokens = settings.max_num_batched_tokens
            return c.v1_moe_workspace_scale * triton_experts_workspace_bytes(arch, tp, tokens)
        large = settings.fp8_experts or settings.profiling_run == GENERATION_NEWER
        scale = c.newer_moe_workspace_scale if large else c.mid_moe_workspace_scale
        return scale * per_token * settings.max_num_batched_tokens
    if tp <= 1 or compute_capability < MOE_WORKSPACE_MIN_COMPUTE_CAPABILITY:
        return 0.0
    return c.moe_workspace_gib * GIB


def triton_experts_workspace_bytes(arch: ModelArchitecture, tp: int, tokens: int) -> float:
    """The fused-MoE workspace vLLM 0.26's modular Triton experts take from the workspace manager.

    ``FusedMoEModularKernel._allocate_buffers`` (``vllm/model_executor/layers/fused_moe/modular_kernel.py``
    L1051-1110, 0.26.0) asks ``current_workspace_manager().get_simultaneous`` for one buffer of
    max(workspace13, output) elements and one of workspace2, in the activation dtype (bf16), with the shapes
    of ``TritonExperts.workspace_shapes`` (``experts/triton_moe.py`` L181-195), M = max_num_batched_tokens (no
    chunking), k = top-k, K = hidden, N = 2 x I/TP (gate and up)::

        workspace13 = M x k x max(N / 2, K)       (cache2 of the activation, then the output view)
        output      = M x K
        workspace2  = M x k x max(N, K)           (cache1 of w13, then cache3 of w2)

    For GLM-5 (K 6144, I 2048, k 8) that is 2 x M x 8 x 6144 x 2 B = 192 KiB per token, 3.0 GiB at 16384
    tokens; the buffer stays allocated at its high-water mark (``vllm/v1/worker/workspace.py``
    ``_ensure_workspace_size``), so the profiling run's peak holds it beside the next layer's attention.
    """
    if not arch.is_moe:
        return 0.0
    m, k, h = tokens, arch.num_experts_per_tok or 1, arch.hidden_size
    inter = arch.moe_intermediate_size / tp
    workspace13 = max(m * k * max(inter, h), m * h)
    workspace2 = m * k * max(2 * inter, h)
    return float((workspace13 + workspace2) * 2)


def triton_fused_moe_bytes(
    arch: ModelArchitecture,
    tp: int,
    tokens: int,
    *,
    expert_parallel: bool = False,
    fp8_block: int | None = None,
    out_of_place: bool = False,
    chunk_size: int = 32768,
) -> float:
    """Scratch one call of vLLM < 0.18's Triton ``fused_experts_impl`` allocates (module docstring:
    the formula and its source lines; the moe_align_block_size ids, < 1 MiB, left out).

    Not part of the budget: it documents why ``moe_workspace_gib`` is a fitted residual.
    ``fp8_block``: the activation group size of FP8 w8a8 block-quantised experts (128), None for bf16.
    """
    if not arch.is_moe:
        return 0.0
    m = min(tokens, chunk_size)
    k = arch.num_experts_per_tok or 1
    h = arch.hidden_size
    inter = arch.moe_intermediate_size if expert_parallel else arch.moe_intermediate_size / tp
    total = m * k * max(2 * inter, h) * 2 + m * k * inter * 2
    if out_of_place:
        total += m * h * 2
    if fp8_block:
        total += m * h * (1 + 4 / fp8_block) + m * k * inter * (1 + 4 / fp8_block)
    return float(total)


def dsa_workspace_factor(max_model_len: int) -> int:
    """vLLM 0.33's ``sparse_mla_prefill_workspace_factor`` default: 5 up to 256K tokens, 2 above."""
    return (
        DSA_WORKSPACE_FACTOR_SHORT
        if max_model_len <= DSA_WORKSPACE_FACTOR_SWITCH
        else DSA_WORKSPACE_FACTOR_LONG
    )


def dsa_workspace_bytes_per_context_token(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """How much the DSA prefill workspaces grow per token of max_model_len at ``settings.max_model_len``'s
    factor (0 for other models)."""
    if not arch.index_head_dim:
        return 0.0
    per_row = float(DSA_INDEXER_ROWS_PER_FACTOR * DSA_INDEXER_ROW_BYTES)
    if int(settings.compute_capability) in FLASHMLA_SPARSE_CAPABILITIES:
        per_row += DSA_PREFILL_ROW_BYTES / max(1, settings.decode_context_parallel_size)
    return dsa_workspace_factor(settings.max_model_len) * per_row


def dsa_workspace_bytes(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """Sparse-attention (DSA) prefill workspaces reserved by the profiling run, on every rank."""
    if not arch.index_head_dim or settings.max_model_len <= 0:
        return 0.0
    per_token = dsa_workspace_bytes_per_context_token(arch, settings)
    return per_token * settings.max_model_len + DSA_MAX_LOGITS_BYTES


def v1_dsa_shared_workspace(settings: BudgetSettings) -> bool:
    """vLLM 0.26's V1 runner (the release whose DSA profiling run was read)."""
    return settings.dsa_shared_workspace and settings.profiling_run == PROFILING_V1_NEWER


def v1_flashmla_sparse(arch: ModelArchitecture, settings: BudgetSettings) -> bool:
    """Whether vLLM 0.26's V1 runner serves this DSA model with FlashMLA-sparse (``FlashMLASparseImpl``).

    0.26 tries ``FLASH_ATTN_MLA_SPARSE`` first, which takes compute capability 9.x only, a bf16 KV cache and
    no decode context parallel (``vllm/v1/attention/backends/mla/flashattn_mla_sparse.py`` L70-104); the H200
    logs show it for GLM-5 and GLM-5-FP8 with ``auto`` KV and ``FLASHMLA_SPARSE`` with fp8 KV.
    """
    if not arch.index_head_dim or not v1_dsa_shared_workspace(settings):
        return False
    hopper = int(settings.compute_capability) == 9
    return settings.kv_cache_fp8 or settings.decode_context_parallel_size > 1 or not hopper


def flashmla_sparse_load_workspace_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """What a DSA model reserves while it is built beyond its weights, so inside "Model loading took": the
    indexer's top-k buffer, and with FlashMLA-sparse its workspace (vLLM 0.26, the V1 runner).

    ``FlashMLASparseImpl.__init__`` (``vllm/v1/attention/backends/mla/flashmla_sparse.py`` L559-583, 0.26.0)
    takes from the workspace manager a q_concat buffer of (max_num_batched_tokens, heads / TP, 576) bf16 and,
    with the fp8_ds_mla KV cache, a bf16 prefill workspace of ``get_prefill_workspace_size`` = 5 x
    max_model_len rows of 576 (L222-229); every layer asks the same shapes, so one buffer. GLM-5 at 8192
    tokens and 131,072 of context with fp8 KV: 604 + 720 MiB = 1.29 GiB, what its H200 start-up loads above
    the same config with bf16 KV at 2048 tokens (62.37 against 61.08 GiB). The layers keep views of that
    buffer, so when the profiling run's fused-MoE layers grow the workspace past it the new buffer is
    allocated beside it (:func:`activation_peak_bytes`).
    """
    if not arch.index_head_dim or not v1_dsa_shared_workspace(settings):
        return 0.0
    # DeepseekV2Model.__init__ (vllm/model_executor/models/deepseek_v2.py L1359-1366): the indexer's top-k
    # output, (max_num_batched_tokens, index_topk) int32, for every backend (GLM-5-FP8's H200 start-ups load
    # 0.05 and 0.06 GiB more at 8192 and 16384 tokens than at 2048)
    topk = settings.max_num_batched_tokens * DSA_INDEX_TOPK * 4
    if not v1_flashmla_sparse(arch, settings):
        return float(topk)
    row = (arch.kv_lora_rank + arch.qk_rope_head_dim) * 2
    heads = arch.num_attention_heads / max(1, tp)
    q_concat = settings.max_num_batched_tokens * heads * row
    prefill = FLASHMLA_SPARSE_PREFILL_ROWS_PER_CONTEXT_TOKEN * settings.max_model_len * row
    return float(topk + q_concat + (prefill if settings.kv_cache_fp8 else 0))


def v1_dsa_indexer_workspace_bytes(arch: ModelArchitecture, settings: BudgetSettings) -> float:
    """The DSA indexer's share of the workspace manager in vLLM 0.26's profiling run (0 for other models).

    With no attention metadata, ``sparse_attn_indexer`` (``vllm/model_executor/layers/sparse_attn_indexer.py``
    L325-345, 0.26.0) reserves through ``current_workspace_manager().get_simultaneous`` the K-gather rows,
    (max_total_seq_len, 128) fp8 + (max_total_seq_len, 4) scale bytes, and ``RADIX_TOPK_WORKSPACE_SIZE``
    (1 MiB, L42), where max_total_seq_len = 40 x max_model_len (``get_max_prefill_buffer_size``,
    ``vllm/v1/attention/backends/mla/indexer.py`` L231-241). That is the same single buffer the fused-MoE
    layers grow (``vllm/v1/worker/workspace.py`` ``get_simultaneous``/``_ensure_workspace_size``), so
    the profiling run holds the larger of the two, not their sum. Then ``_ = torch.empty(
    VLLM_SPARSE_INDEXER_MAX_LOGITS_MB MiB)`` (L337-341) is freed when the op returns; the FlashMLA-sparse
    prefill workspace belongs to the attention metadata builder, which the V1 runner builds with the KV cache,
    after the profiling run ("DSA indexer decode path" is logged just before "Profiling CUDA graph memory").
    """
    if not arch.index_head_dim or settings.max_model_len <= 0:
        return 0.0
    rows = V1_DSA_GATHER_ROWS_PER_CONTEXT_TOKEN * settings.max_model_len
    return float(rows * DSA_INDEXER_ROW_BYTES + DSA_RADIX_TOPK_WORKSPACE_BYTES)


def mla_profile_upprojection_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """The tensor MLA allocates in the profiling run in place of the chunked-context up-projection.

    With no attention metadata (the profiling run skips attention), ``MLAAttention.forward_impl``
    (``vllm/model_executor/layers/attention/mla_attention.py``: 0.26.0 L706-716, 0.33.0 L936-948; since
    vllm-project/vllm#12639) allocates what ``kv_b_proj(kv_c)`` of ``_compute_prefill_context`` would
    produce at its largest, ``(chunked_prefill_workspace_size, heads / TP, qk_nope + v_head)`` in the model
    dtype, so the peak holds it beside the layer's other activations. The rows
    (``MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size``) are
    ``min(max(8 x max_model_len, 4 x max_num_seqs x block), 64K)``, at least one block per request: 64K
    from max_model_len 8192 on, whatever max_num_batched_tokens. GLM-4.7-Flash: 65536 x 20 x 448 x 2 B =
    1.09 GiB (its H200 start-ups peak at 1.63 GiB at max-num-seqs 64 and 256 alike); GLM-5.x at TP 1:
    3.50 GiB, at TP 8 0.44 GiB.
    """
    if not arch.is_mla:
        return 0.0
    context = settings.max_model_len or MLA_CHUNKED_CONTEXT_MAX_ROWS
    rows = min(max(8 * context, 4 * settings.max_num_seqs * MLA_BLOCK_SIZE), MLA_CHUNKED_CONTEXT_MAX_ROWS)
    rows = max(rows, settings.max_num_seqs * MLA_BLOCK_SIZE)
    heads = arch.num_attention_heads / max(1, tp)
    return rows * heads * (arch.qk_nope_head_dim + arch.v_head_dim) * 2.0


def compile_transient_bytes(arch: ModelArchitecture, tp: int, settings: BudgetSettings) -> float:
    """What a cold ``torch.compile`` allocates inside vLLM's profiling run, on one rank (vLLM >= 0.20).

    The first forward of the profiling run compiles the model (``compilation/compiler_interface.py`` L376
    in 0.26.0, ``standalone_compile`` with the real example inputs), and what Inductor allocates there counts
    in the torch peak. The H200 start-ups of ``benchmarks/gpu_truth`` (every one a cold compile, as in a
    pod: the operator keeps no compile cache) show it, allocation by allocation in the ``gpu_truth
    memtrace`` lines, as the peak of every run whose forward and sampler are small: Qwen3-30B-A3B-FP8 at
    2048 tokens and 32 sequences peaks at 609.5 MiB, all of it inside that call, where its embedding is
    151,936 x 2048 x 2 B = 594.5 MiB; Qwen3-8B peaks at 1.19 / 1.29 GiB at 2048 / 8192 tokens (embedding
    1.16 GiB) and gpt-oss-20b at 1.12 / 1.17 GiB at 4096 / 8192 (embedding 1.08 GiB)::

        compile_transient = padded vocab / TP x hidden x 2 B + 2 x max_num_batched_tokens x hidden x 2 B

    [inferred: the block sizes inside the compile were not printed; the figure is the embedding table's and
    two hidden-state buffers of the batch, within 0.02 GiB on those five start-ups]. A warm compile cache
    skips it: the two Qwen2.5 logs on an RTX 4090 (vLLM 0.24, "torch.compile took 3-4 s", a partial cache
    hit) keep less than their embedding. With ``--enforce-eager`` nothing is compiled.
    """
    if settings.enforce_eager or settings.compile_cache_warm or settings.generation != GENERATION_NEWER:
        return 0.0
    hidden = arch.hidden_size
    return (
        padded_vocab(arch) / max(1, tp) * hidden * 2.0 + 2.0 * settings.max_num_batched_tokens * hidden * 2.0
    )


def activation_peak_bytes(
    arch: ModelArchitecture,
    tp: int,
    settings: BudgetSettings,
    c: BudgetConstants = DEFAULT_CONSTANTS,
    last_stage: bool = True,
) -> float:
    """torch peak increase of vLLM's profiling run on one rank: the forward's peak (and the sampler's on the
    last stage) or, when larger, the cold compile's (:func:`compile_transient_bytes`).

    Only the last pipeline stage runs the dummy sampler (``profile_run``: ``if get_pp_group().is_last_rank``
    in ``vllm/v1/worker/gpu_model_runner.py``, ``if self.is_last_pp_rank`` in the 0.33 runner
    ``vllm/v1/worker/gpu/model_runner.py``); earlier stages peak at the forward pass.
    """
    return max(
        _run_peak_bytes(arch, tp, settings, c, last_stage), compile_transient_bytes(arch, tp, settings)
    )


def _run_peak_bytes(
    arch: ModelArchitecture, tp: int, settings: BudgetSettings, c: BudgetConstants, last_stage: bool
) -> float:
    mla = mla_profile_upprojection_bytes(arch, tp, settings)
    moe = moe_workspace_bytes(arch, tp, c, settings.compute_capability, settings)
    if arch.index_head_dim and v1_dsa_shared_workspace(settings):
        # vLLM 0.26's V1 runner on a DSA model (read in the 0.26.0 wheel): the indexer's 512 MiB logits
        # stand-in is a transient inside the indexer op, freed before the MLA stand-in of the same layer, and
        # its K-gather rows share the workspace manager's one buffer with the fused-MoE workspace
        forward = forward_peak_bytes(arch, tp, settings, c) + max(mla, float(DSA_MAX_LOGITS_BYTES))
        peak = max(forward, sampler_peak_bytes(arch, settings, c, tp)) if last_stage else forward
        # the workspace grows only past what FlashMLA-sparse reserved at load (counted as weights)
        workspace = max(moe, v1_dsa_indexer_workspace_bytes(arch, settings))
        grows = workspace > flashmla_sparse_load_workspace_bytes(arch, tp, settings)
        return peak + (workspace if grows else 0.0)
    forward = forward_peak_bytes(arch, tp, settings, c) + mla
    peak = max(forward, sampler_peak_bytes(arch, settings, c, tp)) if last_stage else forward
    return peak + moe + dsa_workspace_bytes(arch, settings)


def fusion_workspace_bytes(hidden_size: int, tp: int, pp: int, settings: BudgetSettings) -> float:
    """FlashInfer's all-reduce fusion workspace on one rank (vLLM >= 0.18; 0 when the pass is off).

    vLLM's ``AllReduceFusionPass`` (``vllm/compilation/passes/fusion/allreduce_rms_fusion.py``) is on by
    default with TP > 1 on compute capability 9.0 and 10.x when FlashInfer is installed
    (``enable_allreduce_rms_fusion`` in ``vllm/config/vllm.py``; 0.18-0.21 also require PP = 1 and
    DP = 1; off with ``--enforce-eager``, which disables torch.compile). The pass is built while the
    profiling run compiles the model, after the worker's memory snapshot, so its workspace counts as
    memory the profiling run took: "non-torch forward increase memory" in 0.18-0.21, ``total_consumed``
    in 0.33. It sizes ``max_token_num = min(FUSION_MAX_SIZE_MIB / (hidden x 2 B), max_num_batched_tokens)``
    and FlashInfer's ``trtllm_create_ipc_workspace_for_all_reduce_fusion``
    (``flashinfer/comm/trtllm_ar.py``) allocates three buffers through ``SymmDeviceMemory``
    (``flashinfer/comm/mnnvl.py``, cuMemCreate, outside PyTorch)::

        buffer  = TP x max_token_num x hidden x 2 B
        flags   = TP x 256 x 4 B
        lamport = 3 x TP x max_token_num x hidden x 2 B

    each plus a 2 KiB signal pad, rounded up to 2 MiB; FlashInfer <= 0.6.14 (vLLM 0.18-0.26) also rounds
    each one up to the recommended multicast granularity, 512 MiB on Hopper and Blackwell [inferred from
    the logs: 3 x 512 MiB = 1.5 GiB is what vLLM 0.19 on H100 logs above the 0.10-0.12 figures at TP 2 and
    TP 4 alike, llm-d-planner sweep], although multicast is not used. FlashInfer 0.6.x refuses GPUs without
    multicast (``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``: NVSwitch systems have it, PCIe cards do not);
    this model counts the workspace on every 9.0/10.x GPU (an H100 PCIe pair plans 1.5 GiB too little KV
    on vLLM 0.18-0.26, never too much).
    """
    if settings.generation == GENERATION_OLDER or settings.enforce_eager or tp <= 1 or hidden_size <= 0:
        return 0.0
    if settings.fusion_workspace_rounded and pp > 1:
        return 0.0
    cc = settings.compute_capability
    key = (int(cc), round(10 * (cc - int(cc))))
    max_mib = FUSION_MAX_SIZE_MIB.get(key, {}).get(tp)
    if max_mib is None:
        return 0.0
    tokens = min(int(max_mib * 2**20) // (hidden_size * 2), settings.max_num_batched_tokens)
    buffer = tp * tokens * hidden_size * 2
    sizes = (buffer, tp * FUSION_FLAG_BYTES_PER_RANK, 3 * buffer)
    granularity = FUSION_MULTICAST_GRANULARITY if settings.fusion_workspace_rounded else FUSION_BUFFER_ALIGN
    return float(sum(math.ceil((b + FUSION_SIGNAL_PAD_BYTES) / granularity) * granularity for b in sizes))


def non_torch_bytes(
    tp: int,
    pp: int,
    settings: BudgetSettings,
    c: BudgetConstants = DEFAULT_CONSTANTS,
    hidden_size: int = 0,
) -> float:
    """Memory outside PyTorch's allocator that grows after vLLM's first snapshot, per rank.

    vLLM >= 0.20: everything the instance holds after profiling beyond weights and the transient peak
    (0.33 ``memory_profiling``: ``total_consumed`` from cudaMemGetInfo, so persistent buffers of the
    profiling run count here too); NCCL, custom all-reduce and cuBLAS handles are created before the
    snapshot (0.33 ``Worker.init_device``), so one fitted figure for any TP. Pipeline parallel adds
    ``newer_pp_non_torch_gib`` on every rank, measured, not derived: the one PP log (Qwen3-32B PP=2,
    first stage) keeps 0.25 GiB less than the model says while the TP=2 log of the same box keeps
    0.13 GiB more. Candidates [inferred, not separated by the data]: the PP-only buffers of the 0.33
    runner (``vllm/v1/worker/gpu/model_runner.py``: ``PPHandler``, ``make_empty_intermediate_tensors``
    of hidden + residual x max_num_batched_tokens on non-first stages) and NCCL's point-to-point
    buffers, which NCCL sets up lazily at the first send/recv, after the snapshot.

    vLLM 0.18-0.19: ``mid_non_torch_gib`` (measured at TP 1), plus at TP > 1 ``mid_non_torch_tp_gib``
    (fitted; the custom all-reduce's 0.41 GiB of 0.10-0.12 is the same size) and the fusion workspace.
    Both generations from 0.18 on add :func:`fusion_workspace_bytes` (``hidden_size`` of the model; 0
    leaves it out).
    """
    fusion = fusion_workspace_bytes(hidden_size, tp, pp, settings)
    # vLLM >= 0.20, either model runner: the worker creates the cuBLAS handles, before the snapshot from 0.27
    newer = settings.generation == GENERATION_NEWER
    base = c.newer_non_torch_gib if newer and settings.cublas_before_snapshot else c.mid_non_torch_gib
    if settings.profiling_run == GENERATION_NEWER:
        pp_extra = c.newer_pp_non_torch_gib if pp > 1 else 0.0
        return (base + pp_extra) * GIB + fusion
    if settings.profiling_run in (GENERATION_MID, PROFILING_V1_NEWER):
        # the custom all-reduce's buffers; without it (PCIe beyond two GPUs, multi-node) NCCL's alone
        custom = c.mid_non_torch_tp_gib if settings.custom_all_reduce else c.non_torch_multi_gpu_gib
        tp_extra = custom if tp > 1 else 0.0
        return (base + tp_extra) * GIB + fusion
    extra = 0.0
    if tp > 1:
        extra = c.non_torch_custom_all_reduce_gib if settings.custom_all_reduce else c.non_torch_multi_gpu_gib
    elif pp > 1:
        extra = c.non_torch_multi_gpu_gib
    return (c.non_torch_gib + extra) * GIB


@functools.lru_cache(maxsize=256)
def cudagraph_capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM's default capture sizes (0.10-0.12): 1, 2, 4, then every 8 up to min(2 x seqs, 512)."""
    largest = min(MAX_CAPTURE_SIZE, 2 * max_num_seqs)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, largest + 1, 8))
    return tuple(sizes)


@functools.lru_cache(maxsize=256)  # pure; asked for every candidate of every plan
def newer_cudagraph_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int = 0,
    compute_capability: float = 9.0,
    max_capture_size: int = 0,
) -> tuple[int, ...]:
    """vLLM 0.33's default capture sizes (``VllmConfig._set_cudagraph_sizes``, ``vllm/config/vllm.py``;
    0.26.0 L1783-1843 the same but for the Blackwell ceiling).

    1, 2, 4, every 8 below 256, then every 16 up to min(2 x max_num_seqs, 512) (1024 on data-center
    Blackwell, compute capability 10.x) or the model's own ``max_capture_size``
    (:data:`MODEL_MAX_CAPTURE_SIZE`), at most max_num_batched_tokens, plus max_num_batched_tokens when
    it is below that ceiling.
    """
    ceiling = 1024 if int(compute_capability) == 10 else MAX_CAPTURE_SIZE
    largest = max_capture_size or min(2 * max_num_seqs, ceiling)
    if max_num_batched_tokens > 0:
        largest = min(largest, max_num_batched_tokens)
    sizes = {s for s in (1, 2, 4) if s <= largest}
    sizes |= set(range(8, min(largest + 1, 256), 8))
    sizes |= set(range(256, largest + 1, 16))
    if 0 < max_num_batched_tokens <= largest:
        sizes.add(max_num_batched_tokens)
    return tuple(sorted(sizes))


def qk_norm_graph_bytes_per_capture(q_width: int, tokens: int) -> float:
    """What each piecewise capture after the first keeps for a query-normed glm4_moe model (GLM-4.5/4.6/4.7,
    ``use_qk_norm``), above what the same attention without the norm keeps (GLM-4.5-Air), on one rank of
    the V1 runner's estimate: ``QK_NORM_GRAPH_QUERY_BUFFERS`` bf16 query buffers of ``tokens`` (the sampled
    capture size) x ``q_width`` (heads / TP x head_dim), each rounded up as PyTorch's caching allocator
    rounds a large allocation, and nothing while such a buffer stays under its 10 MiB large-allocation
    threshold (then it shares a segment).

    Measured (DEBUG "Estimated PIECEWISE CUDA graph memory", vLLM 0.26 on the H200, 504-token sample):
    GLM-4.7's shapes at query width 12288 (11.8 MiB a buffer) sample 24 MiB per graph at 12 layers, 256
    and 1024 sequences alike, and ~26 at 6 layers (from the total), so not per layer; at 10240 (80 heads,
    9.8 MiB) and at 6144 (the attention of a TP-2 rank, 5.9 MiB) 1 MiB, as Air (4). A rate per query
    element fitted on the two 12288 rows (3.74 B) planned 0.55 / 0.90 GiB of graphs those two shapes do
    not take. So GLM-4.5/4.6/4.7 take it at TP 1 only with vLLM's 512-token ceiling, and at TP 2 where the
    capture sizes reach 1024 (data-center Blackwell) [inferred: why large blocks stay per graph and small
    ones are reused is not read in the allocator].
    """
    buffer = q_width * tokens * 2
    if buffer < ALLOCATOR_MIN_LARGE_ALLOC:
        return 0.0
    rounded = math.ceil(buffer / ALLOCATOR_ROUND_LARGE) * ALLOCATOR_ROUND_LARGE
    return float(QK_NORM_GRAPH_QUERY_BUFFERS * rounded)


def cudagraph_bytes(
    layers_on_rank: int, settings: BudgetSettings, c: BudgetConstants = DEFAULT_CONSTANTS, tp: int = 1
) -> float:
    """Memory of CUDA graphs on one rank (0 with --enforce-eager); see "CUDA graphs, vLLM >= 0.18" in the
    module docstring.

    vLLM < 0.18 (graphs captured after the KV cache): ``cudagraph_bytes_per_piece`` per layer and
    capture size. vLLM >= 0.18, the V1 model runner's estimate (0.18-0.19, and 0.20-0.32 for models off
    Model Runner V2's list), not divided by TP::

        graph_bytes_per_piece x layers on the rank x capture sizes
        + (graph_bytes_per_decode_seq [+ mla_graph_bytes_per_decode_seq for MLA])
          x min(max_num_seqs, largest capture size)

    (capture sizes: :func:`newer_cudagraph_capture_sizes`, with the model's own ceiling where its vLLM config
    sets one, :data:`MODEL_MAX_CAPTURE_SIZE`) plus ``v1_fp8_online_graph_bytes_per_layer`` per layer when
    an MLA model's bf16 checkpoint is quantized at load, and, for DSA models with a bf16 KV cache,
    ``dsa_graph_bytes_per_index_head_token`` x index heads x max_model_len per decode request: the FULL
    decode graph keeps the indexer's paged-MQA logits
    (``fp8_fp4_paged_mqa_logits``, ``model_executor/layers/sparse_attn_indexer.py`` 0.26 L582-590, output
    [B, max_model_len] fp32 per index head before the weighted sum, as the logged estimates scale:
    GLM-5-FP8 0.28 / 1.01 / 1.91 GiB at 64 / 256 / 512 requests, GLM-5 0.13 GiB at 32, all at 32k
    tokens; fitted at 1.41 B, under the 4 B of fp32 logits). With an fp8 KV cache the one H200 log
    (GLM-5, 128 requests at 128k tokens, 0.22 GiB) shows no such term: FlashMLA-sparse's fp8 path
    reserves its buffers when the model is built.
    FULL decode graphs under FlashAttention 2 (Ampere, Ada; ``graph_q_width`` 0) keep no split-KV
    accumulators: on the H200 with ``--attention-config.flash_attn_version=2`` the FULL first capture is
    0 MiB for Qwen2.5-7B and -0.5B (114 and 28 with FlashAttention 3) and each further graph 2 MiB (1).
    A query-normed glm4_moe model (GLM-4.5/4.6/4.7) can sample far more per piecewise graph than any other
    model measured: :func:`qk_norm_graph_bytes_per_capture` for every capture but the first.
    Model Runner V2 on Hopper: ``hopper_v2_graph_bytes_per_piece`` per layer and capture size plus
    ``hopper_v2_graph_bytes_per_decode_q_element`` per query element on the rank and decode request (see
    "Model Runner V2 (vLLM 0.33 ...)" in the module docstring); elsewhere (0.33 for every model):
    ``newer_cudagraph_bytes_per_piece`` per layer and capture
    size, divided by TP.
    """
    if settings.enforce_eager:
        return 0.0
    if settings.generation == GENERATION_OLDER:
        pieces = layers_on_rank * len(cudagraph_capture_sizes(settings.max_num_seqs))
        return c.cudagraph_bytes_per_piece * pieces
    sizes = newer_cudagraph_capture_sizes(
        settings.max_num_seqs,
        settings.max_num_batched_tokens,
        settings.compute_capability,
        settings.max_cudagraph_capture_size,
    )
    decode = min(settings.max_num_seqs, sizes[-1]) if sizes else 0
    if settings.profiling_run == GENERATION_NEWER:
        if not settings.v2_graph_estimate:
            return 0.0  # vLLM 0.26's Model Runner V2: profile_cudagraph_memory returns 0
        if is_hopper(settings.compute_capability):
            v2_pieces = c.hopper_v2_graph_bytes_per_piece * layers_on_rank * len(sizes)
            return v2_pieces + c.hopper_v2_graph_bytes_per_decode_q_element * settings.graph_q_width * decode
        return c.newer_cudagraph_bytes_per_piece * layers_on_rank * len(sizes) / max(1, tp)
    fp8_online = c.v1_fp8_online_graph_bytes_per_layer * layers_on_rank if settings.fp8_online_mla else 0.0
    if settings.generation == GENERATION_MID:
        per_piece, per_seq, mla_per_seq, per_q = (
            c.mid_graph_bytes_per_piece,
            c.mid_graph_bytes_per_decode_seq,
            c.mid_mla_graph_bytes_per_decode_seq,
            c.mid_graph_bytes_per_decode_q_element,
        )
    else:
        per_piece, per_seq, mla_per_seq, per_q = (
            c.pre_hopper_graph_bytes_per_piece
            if settings.compute_capability < 9
            else c.graph_bytes_per_piece,
            c.graph_bytes_per_decode_seq,
            c.mla_graph_bytes_per_decode_seq,
            c.graph_bytes_per_decode_q_element,
        )
    piecewise = per_piece * layers_on_rank * len(sizes)
    if settings.generation == GENERATION_NEWER and len(sizes) > 1:
        second = sizes[-2]  # the capture vLLM samples "per-graph" from (after the largest)
        piecewise += qk_norm_graph_bytes_per_capture(settings.qk_norm_q_width, second) * (len(sizes) - 1)
    dsa = c.dsa_graph_bytes_per_index_head_token * settings.dsa_graph_index_heads * settings.max_model_len
    per_request = per_seq + (mla_per_seq if settings.mla else 0.0) + per_q * settings.graph_q_width
    return piecewise + (per_request + dsa) * decode + fp8_online
