"""Memory outside PyTorch's allocator that vLLM counts against the KV cache, per rank (pure).

What grows after vLLM's first memory snapshot: cuBLAS handles (before 0.27), the custom all-reduce's
buffers, pipeline-parallel buffers and FlashInfer's all-reduce fusion workspace. docs/memory-model.md
("Non-torch memory").
"""

from __future__ import annotations

import math

from glm_operator.planning.memory.constants import DEFAULT_CONSTANTS, GIB, BudgetConstants
from glm_operator.planning.memory.settings import BudgetSettings, ProfilingRun
from glm_operator.planning.releases import Generation

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


def fusion_workspace_bytes(hidden_size: int, tp: int, pp: int, settings: BudgetSettings) -> float:
    """FlashInfer's all-reduce fusion workspace on one rank (vLLM >= 0.18; 0 when the pass is off).

    vLLM's ``AllReduceFusionPass`` is on by default with TP > 1 on compute capability 9.0 and 10.x and is
    built after the worker's memory snapshot, so its three buffers (``TP x max_token_num x hidden x 2 B``,
    the flags and the Lamport buffer) count as memory the profiling run took; FlashInfer <= 0.6.14
    (vLLM 0.18-0.26) rounds each up to 512 MiB. docs/memory-model.md, 6.1 ("FlashInfer's all-reduce fusion
    workspace") has the sizes, the sources and what is inferred.
    """
    if settings.generation == Generation.OLDER or settings.enforce_eager or tp <= 1 or hidden_size <= 0:
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

    One figure per profiling run (cuBLAS handles, the custom all-reduce or NCCL at TP > 1, PP buffers on
    Model Runner V2), plus :func:`fusion_workspace_bytes` from 0.18 on (``hidden_size`` of the model; 0
    leaves it out). docs/memory-model.md, 6 ("Non-torch memory") has each figure and the rows it is
    measured or fitted on.
    """
    nt = c.non_torch
    fusion = fusion_workspace_bytes(hidden_size, tp, pp, settings)
    run = settings.profiling_run
    if run == ProfilingRun.OLDER:
        extra = 0.0
        if tp > 1:
            extra = nt.older_custom_all_reduce_gib if settings.custom_all_reduce else nt.nccl_gib
        elif pp > 1:
            extra = nt.nccl_gib
        return (nt.older_gib + extra) * GIB
    # vLLM >= 0.20, either model runner: the worker creates the cuBLAS handles, before the snapshot from 0.27
    newer = settings.generation == Generation.NEWER
    base = nt.cublas_before_snapshot_gib if newer and settings.cublas_before_snapshot else nt.gib
    if run == ProfilingRun.V2:
        return (base + (nt.pp_gib if pp > 1 else 0.0)) * GIB + fusion
    # the custom all-reduce's buffers; without it (PCIe beyond two GPUs, multi-node) NCCL's alone
    custom = nt.tp_gib if settings.custom_all_reduce else nt.nccl_gib
    return (base + (custom if tp > 1 else 0.0)) * GIB + fusion
