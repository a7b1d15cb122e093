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

    vLLM >= 0.20: everything the instance holds after profiling beyond weights and the transient peak
    (0.33 ``memory_profiling``: ``total_consumed`` from cudaMemGetInfo, so persistent buffers of the
    profiling run count here too); NCCL, custom all-reduce and cuBLAS handles are created before the
    snapshot (0.33 ``Worker.init_device``), so one fitted figure for any TP. Pipeline parallel adds
    ``non_torch.pp_gib`` on every rank, measured, not derived: the one PP log (Qwen3-32B PP=2,
    first stage) keeps 0.25 GiB less than the model says while the TP=2 log of the same box keeps
    0.13 GiB more. Candidates [inferred, not separated by the data]: the PP-only buffers of the 0.33
    runner (``vllm/v1/worker/gpu/model_runner.py``: ``PPHandler``, ``make_empty_intermediate_tensors``
    of hidden + residual x max_num_batched_tokens on non-first stages) and NCCL's point-to-point
    buffers, which NCCL sets up lazily at the first send/recv, after the snapshot.

    vLLM 0.18-0.19: ``non_torch.gib`` (measured at TP 1), plus at TP > 1 ``non_torch.tp_gib``
    (fitted; the custom all-reduce's 0.41 GiB of 0.10-0.12 is the same size) and the fusion workspace.
    Both generations from 0.18 on add :func:`fusion_workspace_bytes` (``hidden_size`` of the model; 0
    leaves it out).
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
