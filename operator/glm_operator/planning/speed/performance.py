"""How fast one vLLM instance serves (pure): decode from the bytes a step reads, prefill from its FLOPs.

A decode step of a batch of ``B`` sequences at context ``L`` on one GPU of the instance::

    step = layers x layer_overhead + MoE layers x moe_layer_overhead
           + max(weights / (bandwidth x bandwidth_efficiency), flops / (tensor TFLOPS x compute_efficiency))
           + B x L x KV bytes per token / (bandwidth x bandwidth_efficiency)
           + B x sequence_overhead
    weights = non-expert weights + routed-expert weights x (1 - (1 - k/E)^B)

* the weights a step reads: everything but the input embedding (a lookup of B rows); of the routed
  experts only those some token of the batch picks, ``E x (1 - (1 - k/E)^B)`` per layer with uniform
  routing (top-k of E): 4 of 64 at B = 1, 98 % of them at B = 64 for GLM-4.7-Flash;
* ``flops``: 2 x the active parameters per token x B (the GEMMs; FP8 ones at ``fp8_compute_efficiency``
  of the FP8 TFLOPS). A GEMM streams its weights while it multiplies, so it takes the longer of the two
  (a roofline): a dense model stays bound by its weights up to B ~ 130 on the H100 (0.4 x 989 TFLOPS over
  0.9 x 3.35 TB/s). Adding the two instead predicted GLM-4-9B's step at 128 clients on the H100 at
  14.7 ms where issue 50's run measured 10.1 (now 11.4);
* the KV cache of every sequence, once per step (``fit.kv_bytes_per_token_per_stage``): attention kernels
  of their own, added;
* ``layer_overhead`` (+ ``moe_layer_overhead`` per MoE layer): kernel launches and small-batch kernels
  that reach neither bound. On the H200 it is most of a small MoE step: GLM-4.7-Flash decodes one
  sequence in 5.1 ms where reading its 7 GB takes 1.5 ms, bf16 and fp8 alike, while the dense
  Qwen3-8B's 5.2 ms are mostly its 15 GB (benchmarks/gpu_truth/perf).

Prefill of one prompt of ``n`` tokens alone (``prefill(n)``, :func:`prefill_terms`)::

    prefill(n) = (2 x active parameters x n + n^2 x (qk + v) head dims x heads x layers) FLOPs
                 / (bf16 TFLOPS x prefill_compute_efficiency)
                 + n x MoE layers x moe_prefill_token

The per-token MoE term is the routing and the fused-MoE kernels' token permutation, work that grows with
the tokens but is no GEMM: with it one GEMM efficiency fits both the dense Qwen3-8B (whose 512- and
4096-token prompts alone take 14 and 99 ms on the H200) and GLM-4.7-Flash (20 and ~120 ms, although it
multiplies a third of Qwen3-8B's parameters per token). FP8 GEMMs on FP8 tensor cores prefill at the share
of the bf16 rate that the decode fit measures (``fp8_compute_efficiency`` x FP8 TFLOPS over
``compute_efficiency`` x bf16 TFLOPS): on-the-fly FP8 prefills GLM-4.7-Flash's 4k prompts ~1.6x slower.

A closed loop of ``C`` clients that each send a prompt of ``I`` tokens and read ``O`` output tokens (what
``glm-operator loadtest`` drives) runs ``B = min(C, max-num-seqs)`` requests at once; per round of the B
requests it spends ``O`` decode steps at batch B and the prefill of B prompts (a step carries the running
decodes plus prefill chunks up to the token budget ``T``, ``--max-num-batched-tokens``, so the prompts'
GPU time adds to the decode steps')::

    output tokens/s = B x O / (request_overhead + O x step(B, I + O/2) + B x prefill(I))
    ITL (p50)      = step(B, I + O/2)

TTFT under load (p50). The closed loop's rounds stay in step: requests prefilled in the first steps of a
round finish their decode together with the others (their last steps are short decode steps), so the
clients come back as a wave and their prompts queue behind each other for the token budget. The median
prompt has ``(B - 1) / 2`` of its wave before it; they and it take ``ceil((B + 1) / 2 x I / T)`` steps,
each also decoding the running batch::

    wave    = (B - 1) / 2 x prefill(I) + (ceil((B + 1) / 2 x I / T) - ceil(I / T)) x step
    wait    = min(wave, wave_wait_limit x (O - 1) x step)
    TTFT(B) = request_overhead + prefill(I) + ceil(I / T) x step + wait
    TTFT    = TTFT(B) + (C / B - 1) x (TTFT(B) + (O - 1) x step)      (clients beyond max-num-seqs)

The cap: where the wave's prefill outlasts a fraction of the decode phase (4k prompts at 64 clients on
the H200: ~6 s of prefill against 1.3 s of decode), the first requests of the wave come back while it is
still being prefilled, the rounds fall out of step and a prompt waits for a few steps only (measured p50
0.7-1.2 s where a wave would give 3 s); ``wave_wait_limit`` is fitted. Clients beyond max-num-seqs wait
for a slot: each request of the others, its TTFT and its decode (Little's law over a full engine).
``step`` is the decode step at batch B, ``request_overhead`` what a request waits for besides the GPU
(HTTP, scheduling, streaming the first token). The load tests' p50 sees the steady state: the first
wave (clients all sending at once) is 1/4 to 1/2 of a level's requests and lies on both sides of it.

Constants (:class:`PerfConstants`) are calibrated on the H200 load tests
(``benchmarks/calibration/perf_model.py`` prints the fit and the held-out errors: linear least-squares
fits of ITL p50, then of TTFT p50 and the rounds' time for the prefill constants); GPU speeds are
datasheet figures (``catalog/data/gpus.yaml``).
With TP > 1 every layer ends its attention and its MLP with an all-reduce of the step's activations
(``tokens x hidden x 2`` bytes, bf16): ``2 x layers x (allreduce_latency + 2 (TP-1)/TP x bytes / link
bandwidth)`` is added to each decode step and each prefill (ring all-reduce traffic; NVLink or PCIe
by the catalog's interconnect). Those three constants are datasheet-level assumptions, not
calibrated: the device lends one GPU (NCCL's nccl-tests report ~360 GB/s bus bandwidth on 8 x H100
NVLink and ~20 GB/s over PCIe 4.0; vLLM's custom all-reduce takes a few microseconds for small
messages).

MTP speculative decoding: a step verifies 1 + k tokens per sequence and runs k drafter passes, and emits
the expected accepted tokens (:mod:`glm_operator.planning.speed.speculative`); ITL = step / tokens per step.

Not modelled: pipeline bubbles (PP stages are summed), prefix caching, DSA's sparse KV reads (the whole
context is read), the API server's own time under a burst (at 4-16 clients with 512-token prompts the
H200 runs' TTFT is 2-4x the GPU's share; ITL at 4 clients is 14 % above 16 clients' too).

The knee (:func:`modelled_knee`): the load-test rule of :mod:`glm_operator.planning.speed.knee` applied to
predicted levels 1, 2, 4, ... up to max-num-seqs, lowered to the most clients whose predicted TTFT meets
spec.slo's TTFT target where one is set; the autoscaler aims each replica at it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from glm_operator.catalog.gpus import GpuType
from glm_operator.catalog.models import ModelArchitecture
from glm_operator.planning.memory.constants import GIB
from glm_operator.planning.memory.instance import FitResult
from glm_operator.planning.memory.parallel import mtp_layers, routed_experts_per_rank
from glm_operator.planning.speed.knee import Knee, LevelResult, find_knee
from glm_operator.planning.speed.speculative import Acceptance, acceptance_for


@dataclass(frozen=True)
class PerfConstants:
    """Efficiencies and overheads; see the module docstring. Calibrated on the H200 (vLLM 0.26, TP 1)."""

    # a least-squares fit of the ITL p50 of the calibration runs (calibration/perf_model.py --refit)
    layer_overhead_s: float = 42.4e-6
    moe_layer_overhead_s: float = 46.0e-6  # more per MoE layer (routing, the fused-MoE kernels)
    bandwidth_efficiency: float = 0.9  # fixed: a decode GEMV reaches ~90 % of HBM peak at most
    compute_efficiency: float = 0.4  # of the datasheet dense bf16 TFLOPS, in a decode step's GEMMs
    # a least-squares fit of the TTFT p50 of the same runs (calibration/perf_model.py --refit): what a
    # request waits for besides the GPU (HTTP, scheduling, streaming the first token)
    request_overhead_s: float = 0.0031
    # prefill: its GEMMs and causal attention at this fraction of the datasheet dense bf16 TFLOPS
    prefill_compute_efficiency: float = 0.73
    # prefill: per prompt token and MoE layer (routing, the fused-MoE kernels' token permutation)
    moe_prefill_token_s: float = 355e-9
    # the longest a prompt waits behind its wave of the closed loop, in decode phases (module docstring)
    wave_wait_limit: float = 0.6
    # tensor-parallel all-reduce (module docstring): assumptions, not calibrated (one GPU on the device)
    allreduce_latency_s: float = 8e-6
    nvlink_allreduce_gbs: float = 300.0
    pcie_allreduce_gbs: float = 20.0
    # of the datasheet dense FP8 TFLOPS (on-the-fly FP8 also quantizes each step's activations)
    fp8_compute_efficiency: float = 0.17
    # per sequence of the batch and step: what grows with the batch beyond its KV and GEMMs (sampling,
    # the scheduler's and the output processor's per-request work, MLA/attention kernels' batch setup)
    sequence_overhead_s: float = 22.1e-6
    # per MTP step beyond the drafter's reads and compute: what vLLM 0.26's V1 runner does on the CPU for a
    # speculative step (the drafter's inputs and attention metadata, the accepted counts read back before
    # the next step is scheduled); the median gap of the GLM-4.7-Flash MTP 1 chat load test on the H200
    # (calibration/perf_model.py --refit), where MTP at acceptance length 1.8 ran no faster than without
    speculative_step_overhead_s: float = 0.0042


DEFAULT_PERF = PerfConstants()
# vLLM's --max-num-batched-tokens where a caller names none (its default for the API server on a large GPU)
DEFAULT_TOKEN_BUDGET = 8192


@dataclass(frozen=True)
class Workload:
    """A closed loop: ``concurrency`` clients, each sending ``input_tokens`` and reading ``output_tokens``."""

    concurrency: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Speed:
    """Predicted speed of one instance (all its GPUs) under a workload."""

    itl_s: float
    ttft_s: float
    output_tokens_per_s: float
    gpus: int
    workload: Workload  # what it was predicted for

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / max(1, self.gpus)

    def to_dict(self) -> dict[str, float]:
        return {
            "outputTokensPerSecond": round(self.output_tokens_per_s, 1),
            "outputTokensPerSecondPerGPU": round(self.output_tokens_per_s_per_gpu, 1),
            "itlMilliseconds": round(self.itl_s * 1000, 2),
            "ttftMilliseconds": round(self.ttft_s * 1000, 1),
        }


@dataclass(frozen=True)
class ModelWeights:
    """What one GPU of the instance holds and reads, in bytes and parameters."""

    read_bytes: float  # non-expert weights read by every step (input embedding excluded)
    expert_bytes: float  # routed experts on the GPU
    active_params: float  # non-expert parameters one of the GPU's own tokens multiplies (for FLOPs)
    layers: int
    moe_layers: int = 0
    # routed-expert parameters one token of the whole batch multiplies on this GPU: its k experts' share
    # here (1/TP of each, or with expert parallelism k/EP whole experts on average)
    expert_active_params: float = 0.0
    # the MTP drafter's layer (absent without speculative decoding) and the LM head it shares
    draft_read_bytes: float = 0.0
    draft_expert_bytes: float = 0.0
    head_bytes: float = 0.0


def model_weights(
    arch: ModelArchitecture,
    tp: int,
    weights_bytes: float,
    bytes_per_param: float,
    ep: int = 1,
    draft_layers: int = 0,
) -> ModelWeights:
    """Split the GPU's ``weights_bytes`` (the fit's figure) into what a step reads and the routed experts
    (``ep`` > 1: whole experts spread over that many expert-parallel GPUs); ``draft_layers`` MTP layers in
    ``weights_bytes`` are split off as the drafter's (each a decoder layer like the model's average)."""
    moe_layers = max(0, arch.num_layers - arch.first_k_dense_replace) if arch.is_moe else 0
    draft_moe = draft_layers if arch.is_moe else 0
    count, inter = routed_experts_per_rank(arch, tp, ep)
    per_expert = 3.0 * arch.hidden_size * inter
    expert_bytes = moe_layers * count * per_expert * bytes_per_param
    draft_expert_bytes = draft_moe * count * per_expert * bytes_per_param
    head_bytes = arch.vocab_size / tp * arch.hidden_size * 2.0
    embedding_bytes = 0.0 if arch.tie_word_embeddings else head_bytes
    non_expert = max(0.0, weights_bytes - expert_bytes - draft_expert_bytes - embedding_bytes)
    draft_read = draft_layers * max(0.0, non_expert - head_bytes) / (arch.num_layers + draft_layers)
    read_bytes = non_expert - draft_read
    dense_params = read_bytes / bytes_per_param
    share = count / arch.n_routed_experts if arch.n_routed_experts else 0.0
    expert_active = moe_layers * (arch.num_experts_per_tok or 0) * per_expert * share
    return ModelWeights(
        read_bytes,
        expert_bytes,
        dense_params,
        arch.num_layers,
        moe_layers,
        expert_active,
        draft_read,
        draft_expert_bytes,
        head_bytes,
    )


def experts_touched(arch: ModelArchitecture, batch: int, same_experts: bool = False) -> float:
    """Expected fraction of routed experts some token of ``batch`` picks (uniform top-k routing), or
    top-k of E whatever the batch with ``same_experts`` (every token routed alike: see ``predict_speed``)."""
    if not arch.is_moe or arch.n_routed_experts <= 0:
        return 0.0
    k = min(arch.num_experts_per_tok or 1, arch.n_routed_experts)
    return 1.0 - (1.0 - k / arch.n_routed_experts) ** (1 if same_experts else max(1, batch))


def tensor_tflops(gpu: GpuType, fp8: bool) -> float:
    return gpu.fp8_tflops if fp8 and gpu.fp8_tflops > 0 else gpu.bf16_tflops


def allreduce_s(arch: ModelArchitecture, tokens: float, tp: int, gpu: GpuType, c: PerfConstants) -> float:
    """The all-reduces of one forward pass over ``tokens`` tokens at tensor-parallel size ``tp``
    (0 at TP 1)."""
    if tp <= 1:
        return 0.0
    link = c.nvlink_allreduce_gbs if gpu.nvlink else c.pcie_allreduce_gbs
    per_call = c.allreduce_latency_s + 2.0 * (tp - 1) / tp * tokens * arch.hidden_size * 2.0 / (link * 1e9)
    return 2 * arch.num_layers * per_call


@dataclass(frozen=True)
class StepTerms:
    """What one decode step costs before the constants: each field is divided or multiplied by one
    constant. The GEMMs take the longer of their reads and FLOPs (``gemm_seconds``); the rest is linear in
    the overheads, which ``benchmarks/calibration/perf_model.py`` fits by least squares at each FP8 efficiency
    of a grid."""

    layers: int  # x layer_overhead_s
    moe_layers: int  # x moe_layer_overhead_s
    read_s: float  # the weights read at the full datasheet bandwidth; / bandwidth_efficiency
    gemm16_s: float  # 16-bit GEMM FLOPs at the datasheet bf16 TFLOPS; / compute_efficiency
    gemm8_s: float  # FP8 GEMM FLOPs at the datasheet FP8 TFLOPS; / fp8_compute_efficiency
    sequences: int  # x sequence_overhead_s
    kv_read_s: float = 0.0  # the KV cache read at the full datasheet bandwidth; / bandwidth_efficiency

    def gemm_seconds(self, c: PerfConstants) -> float:
        """The GEMMs: they stream the weights while they multiply, so the longer of the two."""
        flops_s = self.gemm16_s / c.compute_efficiency + self.gemm8_s / c.fp8_compute_efficiency
        return max(self.read_s / c.bandwidth_efficiency, flops_s)

    def seconds(self, c: PerfConstants) -> float:
        return (
            self.layers * c.layer_overhead_s
            + self.moe_layers * c.moe_layer_overhead_s
            + self.gemm_seconds(c)
            + self.kv_read_s / c.bandwidth_efficiency
            + self.sequences * c.sequence_overhead_s
        )


def _gemm_s(flops: float, gpu: GpuType, fp8: bool) -> tuple[float, float]:
    """(16-bit, FP8) GEMM seconds of ``flops`` at the datasheet peak; FP8 only with FP8 tensor cores."""
    if fp8 and gpu.fp8_tflops > 0:
        return 0.0, flops / (gpu.fp8_tflops * 1e12)
    return flops / (gpu.bf16_tflops * 1e12), 0.0


def decode_step_terms(
    arch: ModelArchitecture,
    weights: ModelWeights,
    kv_bytes_per_token: float,
    batch: int,
    context: float,
    gpu: GpuType,
    fp8: bool,
    same_experts: bool = False,
    replica_batch: int = 0,
    query_len: int = 1,
) -> StepTerms:
    """The terms of one decode step of ``batch`` sequences at ``context`` tokens each on one GPU; with data-
    parallel attention ``batch`` is the GPU's own rank's and ``replica_batch`` the tokens every rank's MoE
    layers route to its experts. ``query_len`` > 1: a speculative verify step, that many tokens of each
    sequence through the GEMMs and the experts, its KV read once."""
    tokens = (replica_batch or batch) * query_len
    read = weights.read_bytes + weights.expert_bytes * experts_touched(arch, tokens, same_experts)
    flops = 2.0 * (weights.active_params * batch * query_len + weights.expert_active_params * tokens)
    gemm16, gemm8 = _gemm_s(flops, gpu, fp8)
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    kv = batch * context * kv_bytes_per_token / bandwidth
    return StepTerms(weights.layers, weights.moe_layers, read / bandwidth, gemm16, gemm8, batch, kv)


def draft_pass_terms(
    arch: ModelArchitecture,
    weights: ModelWeights,
    kv_bytes_per_token: float,
    batch: int,
    context: float,
    gpu: GpuType,
    fp8: bool,
    same_experts: bool = False,
) -> StepTerms:
    """One pass of the MTP drafter over ``batch`` sequences: its layer (weights, the experts the batch
    touches, its layer's share of the KV) and the LM head it shares with the model (speculative module)."""
    moe = 1 if weights.draft_expert_bytes > 0 else 0
    read = weights.draft_read_bytes + weights.head_bytes
    read += weights.draft_expert_bytes * experts_touched(arch, batch, same_experts)
    per_layer = weights.expert_active_params / max(1, weights.moe_layers) * moe
    bytes_per_param = weights.read_bytes / max(weights.active_params, 1.0)
    params = (weights.draft_read_bytes + weights.head_bytes) / max(bytes_per_param, 1e-9) + per_layer
    gemm16, gemm8 = _gemm_s(2.0 * params * batch, gpu, fp8)
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    kv = batch * context * kv_bytes_per_token / max(1, arch.attention_layers) / bandwidth
    return StepTerms(1, moe, read / bandwidth, gemm16, gemm8, 0, kv)


def decode_context_parallel_s(
    arch: ModelArchitecture, batch: int, tp: int, dcp: int, gpu: GpuType, c: PerfConstants
) -> float:
    """What decode context parallelism adds to a decode step: per attention layer, the ranks gather each
    other's queries and combine their partial outputs with the log-sum-exp (``cp_lse_ag_out_rs`` in vLLM's
    attention layer), two collectives of ``batch x heads / TP x (latent + 1)`` bf16 values [inferred: the
    sizes from the code, the cost at the all-reduce's uncalibrated link figures]; 0 without DCP."""
    if dcp <= 1:
        return 0.0
    link = c.nvlink_allreduce_gbs if gpu.nvlink else c.pcie_allreduce_gbs
    width = (arch.kv_lora_rank + arch.qk_rope_head_dim) if arch.is_mla else arch.head_dim
    values = batch * max(1, arch.num_attention_heads // max(1, tp)) * (width + 1) * 2.0
    per_call = c.allreduce_latency_s + (dcp - 1) / dcp * values / (link * 1e9)
    return 2 * arch.attention_layers * per_call


def expert_parallel_s(arch: ModelArchitecture, tokens: int, dp: int, gpu: GpuType, c: PerfConstants) -> float:
    """The data-parallel ranks' MoE exchange of one forward over ``tokens`` tokens of the replica: vLLM's
    default allgather_reducescatter gathers every rank's hidden states before each MoE layer and reduce-
    scatters the outputs after it [inferred: the sizes from the code, the cost at the all-reduce's
    uncalibrated link figures]; 0 without data parallelism."""
    if dp <= 1 or not arch.is_moe:
        return 0.0
    link = c.nvlink_allreduce_gbs if gpu.nvlink else c.pcie_allreduce_gbs
    moe_layers = max(0, arch.num_layers - arch.first_k_dense_replace)
    per_call = c.allreduce_latency_s + (dp - 1) / dp * tokens * arch.hidden_size * 2.0 / (link * 1e9)
    return 2 * moe_layers * per_call


def decode_step_s(
    arch: ModelArchitecture,
    weights: ModelWeights,
    kv_bytes_per_token: float,
    batch: int,
    context: float,
    gpu: GpuType,
    fp8: bool,
    c: PerfConstants = DEFAULT_PERF,
    same_experts: bool = False,
    tp: int = 1,
    dcp: int = 1,
    dp: int = 1,
    draft_tokens: int = 0,
) -> float:
    """One decode step of ``batch`` sequences of the replica at ``context`` tokens each (seconds): with DCP
    each rank reads its 1/DCP of every sequence's KV cache; with data-parallel attention each rank decodes
    its 1/DP of the sequences, and its experts those of the whole batch; with ``draft_tokens`` the step
    verifies 1 + that many tokens per sequence and the drafter runs that many passes."""
    own = max(1, math.ceil(batch / dp))
    q = 1 + draft_tokens
    terms = decode_step_terms(
        arch, weights, kv_bytes_per_token, own, context / dcp, gpu, fp8, same_experts, batch, q
    )
    comms = allreduce_s(arch, own * q, tp, gpu, c) + decode_context_parallel_s(arch, own * q, tp, dcp, gpu, c)
    step = terms.seconds(c) + comms + expert_parallel_s(arch, batch * q, dp, gpu, c)
    if draft_tokens:
        draft = draft_pass_terms(
            arch, weights, kv_bytes_per_token, own, context / dcp, gpu, fp8, same_experts
        )
        # each pass all-reduces twice in its one layer, and a MoE drafter exchanges its tokens with DP
        moe_layers = max(1, arch.num_layers - arch.first_k_dense_replace)
        layer_comms = allreduce_s(arch, own, tp, gpu, c) / max(1, arch.num_layers)
        layer_comms += expert_parallel_s(arch, batch, dp, gpu, c) / moe_layers
        step += draft_tokens * (draft.seconds(c) + layer_comms) + c.speculative_step_overhead_s
    return step


@dataclass(frozen=True)
class PrefillTerms:
    """What one prompt's prefill costs before the constants: each field multiplies one constant (so the
    prefill constants are a linear least-squares fit of measured TTFT and throughput,
    ``benchmarks/calibration/perf_model.py``)."""

    flops_s: float  # GEMMs and causal attention at the datasheet bf16 TFLOPS; / prefill_compute_efficiency
    moe_token_layers: float  # prompt tokens x MoE layers; x moe_prefill_token_s
    comms_s: float = 0.0  # the all-reduces and the expert-parallel exchange (uncalibrated link figures)

    def seconds(self, c: PerfConstants) -> float:
        return (
            self.flops_s / c.prefill_compute_efficiency
            + self.moe_token_layers * c.moe_prefill_token_s
            + self.comms_s
        )


def prefill_terms(
    arch: ModelArchitecture, weights: ModelWeights, tokens: int, tp: int, gpu: GpuType, fp8: bool,
    c: PerfConstants = DEFAULT_PERF,
) -> PrefillTerms:  # fmt: skip
    """The terms of one prompt of ``tokens`` on one GPU: GEMMs (FP8 ones, on FP8 tensor cores, at the share of
    the bf16 rate that decode measures: on-the-fly FP8 prefills GLM-4.7-Flash's 4k prompts ~1.6x slower on
    the H200, ``benchmarks/gpu_truth/perf``), causal attention, the per-token MoE work and the collectives."""
    if arch.is_mla:
        head_dims = arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim
    else:
        head_dims = 2 * arch.head_dim
    attention = float(tokens) ** 2 * head_dims * arch.num_attention_heads / tp * arch.num_layers
    gemm = 2.0 * (weights.active_params + weights.expert_active_params) * tokens
    if fp8 and gpu.fp8_tflops > 0:
        # the FP8 rate relative to bf16, as the decode fit has it (fp8_compute_efficiency x FP8 TFLOPS over
        # compute_efficiency x bf16 TFLOPS)
        gemm *= (c.compute_efficiency * gpu.bf16_tflops) / (c.fp8_compute_efficiency * gpu.fp8_tflops)
    flops_s = (gemm + attention) / (gpu.bf16_tflops * 1e12)
    return PrefillTerms(flops_s, float(tokens) * weights.moe_layers, allreduce_s(arch, tokens, tp, gpu, c))


def prefill_compute_s(
    arch: ModelArchitecture, weights: ModelWeights, tokens: int, tp: int, gpu: GpuType, fp8: bool,
    c: PerfConstants = DEFAULT_PERF,
) -> float:  # fmt: skip
    """The GPU time of one prompt of ``tokens`` alone (:func:`prefill_terms`), on one GPU."""
    return prefill_terms(arch, weights, tokens, tp, gpu, fp8, c).seconds(c)


@dataclass(frozen=True)
class Queueing:
    """How a closed loop's prompts queue on one engine (module docstring, "TTFT under load")."""

    running: int  # the clients whose requests run at once: min(clients, max-num-seqs)
    prompts_ahead: float  # of the median prompt's wave, prefilled before it
    prompt_steps: int  # the steps one prompt takes alone: ceil(prompt / token budget)
    steps_ahead: int  # the extra steps those prompts take beyond the median prompt's own
    slot_rounds: float  # clients / running - 1: whole requests a client waits for a free sequence slot


def queueing(clients: int, max_num_seqs: int | None, token_budget: int, input_tokens: int) -> Queueing:
    """The shape of the median prompt's wait, before the constants (see :func:`ttft_under_load_s`)."""
    running = max(1, min(clients, max_num_seqs or clients))
    ahead = (running - 1) / 2
    own_steps = math.ceil(max(1, input_tokens) / max(1, token_budget))
    steps = math.ceil((ahead + 1) * max(1, input_tokens) / max(1, token_budget))
    return Queueing(running, ahead, own_steps, max(0, steps - own_steps), max(0.0, clients / running - 1))


def ttft_under_load_s(
    q: Queueing, prefill_s: float, step_s: float, output_tokens: int, c: PerfConstants
) -> tuple[float, bool]:
    """TTFT p50 of a closed loop (module docstring) from its queueing shape, one prompt's prefill and the
    decode step at the running batch; and whether the wave limit set the wait."""
    decode_phase = max(0, output_tokens - 1) * step_s
    wave = q.prompts_ahead * prefill_s + q.steps_ahead * step_s
    limit = c.wave_wait_limit * decode_phase
    wait = min(wave, limit)
    ttft = c.request_overhead_s + prefill_s + q.prompt_steps * step_s + wait
    return ttft + q.slot_rounds * (ttft + decode_phase), wave > limit


def predict_speed(
    arch: ModelArchitecture,
    tp: int,
    pp: int,
    weights_bytes_per_gpu: float,
    bytes_per_param: float,
    kv_bytes_per_token_per_gpu: float,
    workload: Workload,
    gpu: GpuType,
    fp8: bool,
    c: PerfConstants = DEFAULT_PERF,
    same_experts: bool = False,
    dcp: int = 1,
    dp: int = 1,
    draft_tokens: int = 0,
    acceptance: Acceptance | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int = DEFAULT_TOKEN_BUDGET,
) -> Speed | None:
    """Closed-loop speed of one instance (module docstring); None where the GPU's speed is unknown. With
    ``draft_tokens`` (MTP) a step emits ``acceptance.expected_tokens`` tokens per sequence
    (:mod:`glm_operator.planning.speed.speculative`): the ITL is the step over them. ``max_num_seqs`` (per
    data-parallel rank; None: no limit) and ``max_num_batched_tokens`` are the engine's: the clients beyond
    the first wait for a free sequence slot, and a step prefills at most the token budget.

    ``same_experts``: every token picks the same experts. That is what dummy weights do to GLM's router
    (sigmoid scores of ~0.5 from weights of 1e-3, so the 1e-3 ``e_score_correction_bias`` decides the
    top-k alike for all tokens): GLM-4.7-Flash's H200 runs decode 64 sequences in 7.5 ms, where reading
    the experts 64 tokens touch under uniform routing takes 11 ms at the full 4.8 TB/s. Plans assume real
    routing (uniform, the default); the calibration on dummy-weight runs uses ``same_experts``.
    """
    if gpu.memory_bandwidth_gbs <= 0 or tensor_tflops(gpu, fp8) <= 0:
        return None
    draft_layers = mtp_layers(arch) if draft_tokens else 0
    ep = dp * tp if dp > 1 else 1
    w = model_weights(arch, tp, weights_bytes_per_gpu * pp, bytes_per_param, ep, draft_layers)
    kv = kv_bytes_per_token_per_gpu * pp
    n, i, o = max(1, workload.concurrency), workload.input_tokens, max(1, workload.output_tokens)
    k = draft_tokens if draft_layers else 0
    per_step = acceptance.expected_tokens(k) if k and acceptance else 1.0
    # each data-parallel rank serves its share of the clients: prefills its prompts, holds its sequences
    q = queueing(math.ceil(n / dp), max_num_seqs, max_num_batched_tokens, i)
    batch = min(n, q.running * dp)
    step = decode_step_s(arch, w, kv, batch, i + o / 2, gpu, fp8, c, same_experts, tp, dcp, dp, k)
    prefill = prefill_compute_s(arch, w, i, tp, gpu, fp8, c) + expert_parallel_s(arch, i, dp, gpu, c)
    round_s = c.request_overhead_s + o / per_step * step + q.running * prefill
    ttft, _ = ttft_under_load_s(q, prefill, step, math.ceil(o / per_step), c)
    if not math.isfinite(round_s) or round_s <= 0:
        return None
    return Speed(
        itl_s=step / per_step,
        ttft_s=ttft,
        output_tokens_per_s=batch * o / round_s,
        gpus=tp * pp * dp,
        workload=workload,
    )


# the workload a plan's prediction is for: the chat-like shape of the H200 runs, at max-num-seqs clients
PLAN_INPUT_TOKENS = 512
PLAN_OUTPUT_TOKENS = 128


def plan_workload(max_num_seqs: int, max_model_len: int) -> Workload:
    """What ``status.plan`` predicts for: ``max_num_seqs`` clients sending 512-token prompts for 128 tokens
    (shorter where the context is)."""
    prompt = min(PLAN_INPUT_TOKENS, max(1, max_model_len - PLAN_OUTPUT_TOKENS))
    return Workload(max(1, max_num_seqs), prompt, PLAN_OUTPUT_TOKENS)


# bytes per weight of a precision (scales aside): what a step reads per parameter
BYTES_PER_PARAM = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "nvfp4": 0.5625}


def speed_of_fit(
    fit: FitResult,
    arch: ModelArchitecture,
    gpu: GpuType,
    workload: Workload,
    c: PerfConstants = DEFAULT_PERF,
    same_experts: bool = False,
    acceptance_rate: float | None = None,
    max_num_seqs: int | None = None,
) -> Speed | None:
    """:func:`predict_speed` for a planned instance (its weights and KV bytes per GPU and its token budget
    from the fit; with MTP the measured ``acceptance_rate`` or the published figures for the model).
    ``max_num_seqs``: the engine's, where the workload may bring more clients (a load test); a plan
    predicts at its own max-num-seqs and leaves it out."""
    precision = fit.quantization
    k = fit.num_speculative_tokens
    return predict_speed(
        arch,
        fit.tensor_parallel_size,
        fit.pipeline_parallel_size,
        fit.weights_gib_per_gpu * GIB,
        BYTES_PER_PARAM.get(precision, 2.0),
        fit.kv_cache_bytes_per_token_per_gpu,
        workload,
        gpu,
        fp8=precision == "fp8" and gpu.native_fp8,
        c=c,
        same_experts=same_experts,
        dcp=fit.decode_context_parallel_size,
        dp=fit.data_parallel_size,
        draft_tokens=k,
        acceptance=acceptance_for(arch, k, acceptance_rate) if k else None,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=fit.max_num_batched_tokens,
    )


def modelled_knee(
    speed_at: Callable[[int], Speed | None], max_num_seqs: int, ttft_ms: float | None = None
) -> Knee:
    """The knee rule (:func:`glm_operator.planning.speed.knee.find_knee`) on predicted levels 1, 2, 4, ... and
    ``max_num_seqs``; ``Knee(None, ...)`` when throughput still rises up to max-num-seqs or speed is
    unknown. With a TTFT target (``spec.slo``) the knee is at most the largest concurrency whose predicted
    TTFT meets it: TTFT grows with the clients (their prompts queue), so the autoscaler's target per replica
    must not be where the target is already missed."""
    top = max(1, max_num_seqs)
    levels = []
    for n in sorted({*(2**i for i in range(top.bit_length()) if 2**i < top), top}):
        speed = speed_at(n)
        if speed is None:
            return Knee(None, "no speed figures for this GPU type")
        levels.append(
            LevelResult(
                concurrency=n,
                requests=n,
                errors=0,
                wall_s=0.0,
                output_tokens=0,
                ttft_p50_s=speed.ttft_s,
                ttft_p95_s=speed.ttft_s,
                itl_p50_s=speed.itl_s,
                itl_p95_s=speed.itl_s,
                output_tokens_per_s=speed.output_tokens_per_s,
            )
        )
    knee = find_knee(levels) if len(levels) >= 2 else Knee(None, "max-num-seqs 1")
    if ttft_ms is None:
        return knee
    reached = knee.concurrency or top
    within, met = concurrency_within(1, reached, speed_at, None, ttft_ms)
    if within >= reached:
        return knee
    if not met:
        return Knee(1, f"{knee.reason}; lowered to 1: no concurrency meets spec.slo's TTFT {ttft_ms:g} ms")
    return Knee(
        within,
        f"{knee.reason}; lowered to {within}, the most clients whose predicted TTFT meets spec.slo's "
        f"{ttft_ms:g} ms",
    )


def step_terms_of_fit(
    fit: FitResult, arch: ModelArchitecture, gpu: GpuType, workload: Workload, same_experts: bool = False
) -> StepTerms:
    """The decode-step terms behind :func:`speed_of_fit`'s ITL (for the calibration's least squares)."""
    precision = fit.quantization
    pp = fit.pipeline_parallel_size
    w = model_weights(
        arch,
        fit.tensor_parallel_size,
        fit.weights_gib_per_gpu * GIB * pp,
        BYTES_PER_PARAM.get(precision, 2.0),
    )
    o = max(1, workload.output_tokens)
    return decode_step_terms(
        arch, w, fit.kv_cache_bytes_per_token_per_gpu * pp, max(1, workload.concurrency),
        workload.input_tokens + o / 2, gpu, precision == "fp8" and gpu.native_fp8, same_experts,
    )  # fmt: skip


def meets(speed: Speed | None, itl_ms: float | None, ttft_ms: float | None) -> bool:
    """Whether a predicted speed is within the latency targets (an unknown speed meets none)."""
    if speed is None:
        return False
    itl_ok = itl_ms is None or speed.itl_s * 1000 <= itl_ms
    return itl_ok and (ttft_ms is None or speed.ttft_s * 1000 <= ttft_ms)


def concurrency_within(
    low: int, high: int, speed_at: Callable[[int], Speed | None], itl_ms: float | None, ttft_ms: float | None
) -> tuple[int, bool]:
    """The largest concurrency in [low, high] whose predicted speed meets the targets (ITL and TTFT grow
    with the batch), and True; (low, False) when not even ``low`` does."""
    if not meets(speed_at(low), itl_ms, ttft_ms):
        return low, False
    lo, hi = low, max(low, high)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if meets(speed_at(mid), itl_ms, ttft_ms):
            lo = mid
        else:
            hi = mid - 1
    return lo, True
