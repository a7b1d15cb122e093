"""The measured and fitted constants of vLLM's non-KV memory, a row per profiling run and graph estimate
(pure).

:class:`ProfilingConstants` rows (``older``, ``mid``, ``v1``, ``v2``) and :class:`GraphConstants` rows, chosen
by the budget's :class:`~.settings.ProfilingRun`; each figure's comment says whether it is measured or
fitted and on which start-ups. ``benchmarks/calibration`` refits them by the dotted names :func:`constant` and
:func:`with_constants` read and write. docs/memory-model.md ("The constants") lists them with their rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from glm_operator.planning.memory.settings import ProfilingRun

GIB = 1024**3
MIB = 2**20


@dataclass(frozen=True)
class ProfilingConstants:
    """The torch peak of one profiling run."""

    # x the structural live bytes of one layer per scheduled token (activation.activation_bytes_per_token)
    forward_scale: float
    # per sampled row and vocabulary entry; 0 where the pass is modelled from its buffers (the V1 runner)
    sampler_bytes: float
    # x the fused-MoE buffers of the workspace manager (0 before vLLM 0.18: moe_workspace_gib)
    moe_workspace_scale: float


@dataclass(frozen=True)
class GraphConstants:
    """One CUDA-graph estimate: PIECEWISE graphs per layer and capture size, FULL graphs per request."""

    bytes_per_piece: float  # per layer on the rank and capture size
    bytes_per_decode_seq: float = 0.0  # per request of the largest FULL decode graph
    mla_bytes_per_decode_seq: float = 0.0  # what an MLA model's FULL decode graphs add per request
    # per request and query element on the rank (heads / TP x head_dim) of a GQA/MHA model's FULL decode
    # graph: FlashAttention's split-KV accumulators (fp32 x up to 32 splits = 128 B per set)
    bytes_per_decode_q_element: float = 0.0


@dataclass(frozen=True)
class NonTorchConstants:
    """Memory outside PyTorch's allocator that grows after vLLM's first memory snapshot, GiB per rank."""

    # vLLM 0.18 on, before the cuBLAS handles moved before the snapshot (0.27): measured, "non-torch forward
    # increase memory" 0.24-0.27 GiB at TP 1 (llm-d-planner logs); 0.22-0.25 on the H200 with 0.26
    gib: float = 0.25
    # from 0.27 (cuBLAS handles before the snapshot): fitted, ~0 on the 0.27.1 rows
    cublas_before_snapshot_gib: float = 0.0
    # TP > 1 on 0.18 on, beyond the fusion workspace (vLLM's custom all-reduce, NCCL): fitted
    tp_gib: float = 0.40
    # PP > 1 on Model Runner V2, every rank: not fitted, the budget error of the only >= 0.20 PP start-up
    # (sp-qwen3-32b-rtxpro6000-pp2, vLLM 0.27.1, first stage) without it
    pp_gib: float = 0.44
    # NCCL without vLLM's custom all-reduce (PCIe, multi-node), or PP before 0.18: fitted (L40S TP8 logs 0.21)
    nccl_gib: float = 0.105
    # before vLLM 0.18: measured (llm-d logs), cuBLAS/cuDNN workspaces at TP 1 and the custom all-reduce
    older_gib: float = 0.13
    older_custom_all_reduce_gib: float = 0.41


@dataclass(frozen=True)
class BudgetConstants:
    """Every free constant of the budget model, by profiling run and graph estimate."""

    # before vLLM 0.18: fitted on the 22 used start-ups of those releases (PyTorch's sort sampler, 38.8 B
    # per entry, measured 38.5-38.9 on the llm-d H100 logs)
    older: ProfilingConstants = ProfilingConstants(
        forward_scale=0.371, sampler_bytes=38.79, moe_workspace_scale=0.0
    )
    # vLLM 0.18-0.19: fitted on that generation's rows
    mid: ProfilingConstants = ProfilingConstants(
        forward_scale=0.462, sampler_bytes=16.04, moe_workspace_scale=1.059
    )
    # vLLM >= 0.20 on the V1 model runner: the forward at 0.18-0.19's rate (MLA and dense models apart,
    # activation.forward_peak_bytes), the sampler pass from its buffers (activation.v1_sampler_pass_bytes),
    # the TritonExperts workspace as vLLM 0.26 requests it (read, not fitted)
    v1: ProfilingConstants = ProfilingConstants(
        forward_scale=0.462, sampler_bytes=0.0, moe_workspace_scale=1.0
    )
    # Model Runner V2: the forward measured (1628 MiB / (106,496 B x 16384 tokens), Qwen3-8B on the H200),
    # the sampler's bf16 logits measured; the MoE workspace scale fitted on FP8 experts (GLM-5.2-FP8 at TP 8)
    v2: ProfilingConstants = ProfilingConstants(
        forward_scale=0.978, sampler_bytes=2.0, moe_workspace_scale=6.706
    )
    # before vLLM 0.18 (captured after the KV cache): not fitted, 0.50 GiB / (28 layers x 67 sizes),
    # Qwen2-7B on an A100 (dennislee22 logs)
    graphs_older: GraphConstants = GraphConstants(bytes_per_piece=0.27 * MIB)
    # vLLM 0.18-0.19's estimate (not subtracted there): least squares on that generation's 28 logged estimates
    graphs_mid: GraphConstants = GraphConstants(
        bytes_per_piece=0.3389 * MIB,
        bytes_per_decode_seq=0.3932 * MIB,
        mla_bytes_per_decode_seq=1.3687 * MIB,
        bytes_per_decode_q_element=75.94,
    )
    # the V1 runner's estimate from 0.20: least squares on the logged "Estimated CUDA graph memory" of
    # vLLM 0.21-0.26 (a component fit on no KV-token figure)
    graphs_v1: GraphConstants = GraphConstants(
        bytes_per_piece=0.1576 * MIB,
        bytes_per_decode_seq=0.2615 * MIB,
        mla_bytes_per_decode_seq=2.0722 * MIB,
        bytes_per_decode_q_element=120.82,
    )
    # Model Runner V2's estimate off Hopper, per layer and capture size divided by TP: fitted on the three
    # Qwen3-32B start-ups of vLLM 0.27.1 on an RTX PRO 6000
    graphs_v2: GraphConstants = GraphConstants(bytes_per_piece=0.5982 * MIB)
    # Model Runner V2 on Hopper (FlashAttention 3), not divided by TP: least squares on the graph memory
    # eleven H200 start-ups on Model Runner V2 took (vLLM 0.26 captures what 0.33's estimate measures)
    graphs_v2_hopper: GraphConstants = GraphConstants(
        bytes_per_piece=0.1699 * MIB, bytes_per_decode_q_element=348.7
    )
    # the V1 runner's per-piece figure on Ampere and Ada (compute capability 8.x), fitted on their three
    # logged estimates (RTX 4090, RTX A5000): vLLM's per-graph sample is larger there
    pre_hopper_graph_bytes_per_piece: float = 0.2610 * MIB
    # what the V1 runner's estimate adds per layer on the rank when an MLA model's bf16 checkpoint is
    # quantized at load (--quantization fp8): fitted on the two GLM-4.7-Flash FP8-online H200 start-ups
    fp8_online_mla_graph_bytes_per_layer: float = 20.85 * MIB
    # DSA (GLM-5.x) FULL decode graphs with a bf16 KV cache, per decode request, index head and token of
    # max_model_len (the indexer's fp32 logits, 4 B at most): fitted on the bf16-KV GLM-5 / GLM-5-FP8 rows
    dsa_graph_bytes_per_index_head_token: float = 1.4076
    non_torch: NonTorchConstants = NonTorchConstants()
    # before vLLM 0.18: FlashInfer's top-k/top-p sampler per row and entry (fitted), and the fused-MoE
    # workspace on Hopper or newer with TP > 1 (a fitted residual, GiB)
    older_flashinfer_sampler_bytes: float = 13.51
    older_moe_workspace_gib: float = 1.945

    def profiling(self, run: ProfilingRun) -> ProfilingConstants:
        """The row of one profiling run."""
        rows = {
            ProfilingRun.OLDER: self.older,
            ProfilingRun.MID: self.mid,
            ProfilingRun.V1: self.v1,
            ProfilingRun.V2: self.v2,
        }
        return rows[run]


DEFAULT_CONSTANTS = BudgetConstants()


def constant(c: BudgetConstants, name: str) -> float:
    """The constant a dotted name gives (``v2.forward_scale``, ``older_moe_workspace_gib``)."""
    value: object = c
    for part in name.split("."):
        value = getattr(value, part)
    if not isinstance(value, float | int):
        raise AttributeError(f"{name} is not a constant")
    return float(value)


def with_constants(c: BudgetConstants, values: Mapping[str, float]) -> BudgetConstants:
    """``c`` with the constants of dotted ``values`` replaced (what a fit tries)."""
    for name, value in values.items():
        head, _, rest = name.partition(".")
        new: Any = replace(getattr(c, head), **{rest: value}) if rest else value
        c = replace(c, **{head: new})
    return c
