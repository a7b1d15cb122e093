"""The vLLM release a plan is made for, and the memory-budget rules that depend on it (pure).

vLLM's start-up memory accounting changed between releases, so the planner needs the release the
pods will run. It comes from the image they are given: ``spec.serving.image``, else the operator's
default image (``--default-image``, Helm value ``vllm.image``), read with
:func:`glm_operator.catalog.vllm.image_version` (``v0.33.0``, ``0.33.0``, ``v0.33.0-cu129``, a tag
with a digest). A tag that is not a version (``latest``, a digest only) cannot tell: the plan then
assumes the default image's release (or this operator's default release, ``VLLM_VERSION``, when the
default image is not versioned either) and says so in its notes.

Version-dependent budget rules (applied by :func:`glm_operator.planning.memory.fit.estimate_fit`):

- vLLM >= 0.20.0 estimates CUDA-graph memory in its profiling run and subtracts it from the KV-cache
  budget (``gpu_worker.py`` ``determine_available_memory``: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  defaults to 1 in 0.20.0's and 0.21.0's ``vllm/envs.py``, 0 in 0.18.0's and 0.19.0's; the 0.20-0.33 log
  line says "CUDA graph memory profiling is enabled (default since v0.21.0)", but the default changed
  in 0.20.0).
- Older releases capture the graphs after the KV cache is allocated, in the
  ``1 - gpu_memory_utilization`` headroom: not subtracted, the headroom is checked instead.
- Three sets of budget constants (:mod:`glm_operator.planning.memory.budget`), by :func:`budget_generation`:
  before 0.18 (fitted on 0.9-0.15 start-ups); 0.18-0.19, where the profiling run also profiles the
  CUDA graphs (``profile_cudagraph_memory`` inside ``memory_profiling``) without subtracting them and
  FlashInfer's all-reduce fusion workspace lands in "non-torch" memory; >= 0.20, the graph estimate in
  the budget, a leaner profiling run (FlashInfer sampling, Model Runner V2 in 0.33) and 0.33's capture
  sizes. The boundary at 0.18 is the first release read with that profiling run (0.13-0.17 were not
  read and keep the older constants).
- Within >= 0.20 the profiling run depends on the model runner (:func:`model_runner_v2`): Model Runner V2
  is modelled by the ``newer_*`` constants; the V1 runner, still the default for every model in 0.20-0.23,
  for models outside V2's list in 0.24-0.25 (Qwen2, Qwen3-MoE) and for MoE models outside it up to 0.32
  (GLM-4.x/5.x, Qwen3-MoE, gpt-oss), profiles with the 0.18-0.19 forward and sampler rates and its own
  fused-MoE and DSA terms (``v1_*``, ``BudgetSettings.profiling_run``), with the graph estimate subtracted.
  Fitted on ten such start-ups (0.21-0.28, five of them GLM-4.7-Flash, GLM-5-FP8, Qwen3-30B-A3B-FP8 and
  gpt-oss-20b on one H200 with 0.26.0, benchmarks/gpu_truth); errors by ``benchmarks/fit_errors.py``.
- vLLM 0.26's Model Runner V2 subtracts no graph estimate (:func:`v2_graph_estimate`); from 0.22 vLLM
  samples with FlashInfer by default (:func:`flashinfer_sampler_default`); from 0.26 its default
  ``gpu_memory_utilization`` is 0.92 (:func:`default_gpu_memory_utilization`), which plans use when the
  spec sets none.
- FlashInfer's all-reduce fusion workspace (:func:`~.memory.non_torch.fusion_workspace_bytes`)
  is rounded up to the 512 MiB multicast granularity per buffer by FlashInfer <= 0.6.14, which vLLM
  0.18-0.26 pin (0.18/0.19: 0.6.6, 0.20/0.21: 0.6.8.post1, 0.25: 0.6.13, 0.26: 0.6.14); vLLM 0.27 pins
  0.6.16.post3 and 0.33 pins 0.7.2.post1, which allocate the buffers' own size (FlashInfer 0.6.15 moved
  the rounding under ``if self._enable_multicast`` in ``flashinfer/comm/mnnvl.py``). Up to 0.21 the
  fusion pass is off with pipeline or data parallelism (``enable_allreduce_rms_fusion`` in
  ``vllm/config/vllm.py``); 0.33 has no such condition; the releases in between were not read and are
  assumed to change with the FlashInfer pin.
- The default ``max_num_batched_tokens`` of the OpenAI server (the profiling run's batch, so the
  activation peak; the operator does not set it) is 16384 on GPUs with >= 160 GiB (B200, B300) in
  0.33.0 (``arg_utils.py`` ``get_batch_defaults``), 8192 on the other >= 70 GiB GPUs but the A100,
  else 2048. The first release with the 160 GiB tier is not pinned here: releases before 0.33.0 are
  planned with 8192 there, as before.

Settings that are not a release rule here: the sampler of the profiling run (FlashInfer is vLLM's
default top-k/top-p sampler again in 0.33.0, but its profiling run also warms the PyTorch path,
whose peak is what the budget models, so ``flashinfer_sampler`` stays an explicit setting).
"""

from __future__ import annotations

from dataclasses import dataclass

from glm_operator.catalog.vllm import (
    DEFAULT_VLLM_IMAGE,
    VLLM_VERSION,
    Version,
    format_version,
    image_version,
    parse_version,
)

#: First release that subtracts its CUDA-graph estimate from the KV-cache budget.
CUDAGRAPH_IN_BUDGET_SINCE: Version = (0, 20, 0)
#: First release read whose profiling run also profiles the CUDA graphs (the 0.18-0.19 constants).
GRAPH_PROFILING_RUN_SINCE: Version = (0, 18, 0)
#: First release pinning a FlashInfer (>= 0.6.15) that does not round the fusion workspace up to 512 MiB.
EXACT_FUSION_WORKSPACE_SINCE: Version = (0, 27, 0)
#: The budget constant sets (``glm_operator.planning.memory.budget``).
GENERATION_OLDER, GENERATION_MID, GENERATION_NEWER = 0, 1, 2
DEFAULT_VERSION: Version = parse_version(VLLM_VERSION)
#: GPUs at least this large (torch total, GiB) get vLLM 0.33's largest default token budget.
LARGEST_BATCH_GPU_GIB = 160.0
LARGE_GPU_BATCH_SINCE: Version = (0, 33, 0)
#: Model Runner V2 (the profiling run the >= 0.20 constants describe) is the default for the
#: architectures of ``V2_RUNNER_ARCHITECTURES`` from 0.24, for every dense model too from 0.27, and for
#: every model in 0.33 (``VllmConfig.use_v2_model_runner`` in ``vllm/config/vllm.py``; 0.21 defaults
#: ``VLLM_USE_V2_MODEL_RUNNER`` to 0). Releases between those read are planned with the older rule.
V2_RUNNER_LISTED_SINCE: Version = (0, 24, 0)
#: read in the 0.26.0 wheel (``VllmConfig._is_default_v2_model_runner_model``: a listed architecture "or not
#: model_config.is_moe", hybrid and attention-free models excluded) and in 0.27.1; 0.25 was not read
V2_RUNNER_DENSE_SINCE: Version = (0, 26, 0)
V2_RUNNER_EVERYWHERE_SINCE: Version = (0, 33, 0)
#: Model Runner V2 estimates its CUDA graphs for the budget: 0.33.0 does (``vllm/v1/worker/gpu/
#: cudagraph_utils.py`` ``profile_cudagraph_memory``); 0.26.0's ``GPUModelRunner.profile_cudagraph_memory``
#: (``vllm/v1/worker/gpu/model_runner.py``) returns 0 ("It is TBD whether we keep this API or not"), and its
#: H200 start-ups log no "Estimated CUDA graph memory" (benchmarks/gpu_truth). 0.27-0.32 were not read: the
#: 0.27.1 rows were fitted with the estimate, so it is assumed from 0.27.
V2_GRAPH_ESTIMATE_SINCE: Version = (0, 27, 0)
#: ``Worker.init_device`` creates the cuBLAS/cuBLASLt handles before vLLM's first memory snapshot, so they
#: are baseline, not "non-torch memory": 0.33.0 does (``vllm/v1/worker/gpu_worker.py``, "Create the handles
#: now, before the snapshot"); 0.26.0 does not, and its H200 start-ups log 0.22-0.25 GiB of non-torch memory
#: at TP 1 with either model runner. 0.27-0.32 were not read: the 0.27.1 rows fit ~0, so assumed from 0.27.
CUBLAS_BEFORE_SNAPSHOT_SINCE: Version = (0, 27, 0)
#: A DSA model's profiling run as read in the 0.26.0 wheel (``planning.budget``
#: ``v1_dsa_indexer_workspace_bytes``, ``flashmla_sparse_load_workspace_bytes``): the indexer's K-gather
#: rows share the workspace manager's buffer with the fused-MoE layers and FlashMLA-sparse reserves its
#: workspace while the model is built. Other releases were not read and keep the 0.33.0 form
#: (``dsa_workspace_bytes``): the GLM-5.3-FP8 start on 0.28.0 is fitted with it.
DSA_SHARED_WORKSPACE_READ: tuple[Version, Version] = ((0, 26, 0), (0, 27, 0))
#: vLLM builds the model under ``max_split_size_mb:20`` (``Worker._scoped_allocator_max_split``,
#: ``vllm/v1/worker/gpu_worker.py``): read in 0.22.0, 0.24.0 and 0.26.0, absent in 0.19.0 (0.20-0.21 unread).
#: Weights of 20 MiB or more then take whole 2 MiB-rounded blocks (planning.load_memory).
LOAD_MAX_SPLIT_SINCE: Version = (0, 22, 0)
#: DeepGEMM's PDL workspace (32 MiB), allocated while the first MoE or FP8 layer is built on SM90+
#: (``_apply_pdl`` in ``vllm/utils/deep_gemm.py``): read in 0.24.0 and 0.26.0, absent in 0.22.0 (0.23 unread)
DEEP_GEMM_PDL_SINCE: Version = (0, 24, 0)
#: vLLM's top-k/top-p sampler is FlashInfer's unless VLLM_USE_FLASHINFER_SAMPLER=0: the default of
#: ``VLLM_USE_FLASHINFER_SAMPLER`` is True in the ``vllm/envs.py`` of 0.22.0, 0.24.0, 0.26.0 (the 0.26 H200
#: logs say "Using FlashInfer for top-p & top-k sampling"), 0.28.0 and 0.33.0; 0.11.1 needed it set (0.11.1
#: ``topk_topp_sampler.py``). 0.12-0.21 were not read and keep the PyTorch default. (The V1 runner's profiling
#: peak is the same with either from 0.22: ``planning.budget.v1_sampler_pass_bytes``.)
FLASHINFER_SAMPLER_DEFAULT_SINCE: Version = (0, 22, 0)
#: ``CacheConfig.gpu_memory_utilization``'s default: 0.92 in 0.26.0 (``vllm/config/cache.py``,
#: ``Field(default=0.92, gt=0, le=1)``) and 0.33.0, 0.9 in the releases read before (0.10-0.21); 0.22-0.25
#: were not read and keep 0.9.
DEFAULT_UTILIZATION_092_SINCE: Version = (0, 26, 0)
#: 0.24.0's ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` (0.27.1's list keeps the MoE ones of these)
V2_RUNNER_ARCHITECTURES = frozenset(
    {
        "Qwen3ForCausalLM",
        "DeepseekV2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "GraniteMoeForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
    }
)


def cudagraph_in_budget(version: Version) -> bool:
    """Whether vLLM ``version`` takes CUDA-graph memory out of the KV-cache budget."""
    return version >= CUDAGRAPH_IN_BUDGET_SINCE


def budget_generation(version: Version) -> int:
    """Which budget constants plan vLLM ``version``: before 0.18, 0.18-0.19, or >= 0.20."""
    if cudagraph_in_budget(version):
        return GENERATION_NEWER
    if version >= GRAPH_PROFILING_RUN_SINCE:
        return GENERATION_MID
    return GENERATION_OLDER


def model_runner_v2(version: Version, architecture: str, is_moe: bool, hybrid: bool = False) -> bool:
    """Whether vLLM ``version`` profiles ``architecture`` with Model Runner V2 by default (>= 0.20 only).

    0.20-0.23: never; 0.24-0.25: the listed architectures; 0.26-0.32: those and every dense model that is
    not hybrid; 0.33: every model. The V1 runner's profiling run samples like 0.10-0.12
    (``_dummy_sampler_run``: one top-k/top-p pass over min(max_num_seqs, max_num_batched_tokens) rows),
    so its sampler peak is the older one (:func:`glm_operator.planning.memory.activation.sampler_peak_bytes`).
    """
    if version >= V2_RUNNER_EVERYWHERE_SINCE:
        return True
    listed = architecture in V2_RUNNER_ARCHITECTURES
    if version >= V2_RUNNER_DENSE_SINCE:
        return listed or not (is_moe or hybrid)
    return listed and version >= V2_RUNNER_LISTED_SINCE


def v2_graph_estimate(version: Version) -> bool:
    """Whether Model Runner V2 of vLLM ``version`` takes a CUDA-graph estimate off the budget (not 0.26)."""
    return version >= V2_GRAPH_ESTIMATE_SINCE


def load_max_split(version: Version) -> bool:
    """Whether vLLM ``version`` builds the model under max_split_size_mb:20 (``LOAD_MAX_SPLIT_SINCE``)."""
    return version >= LOAD_MAX_SPLIT_SINCE


def deep_gemm_pdl(version: Version) -> bool:
    """Whether vLLM ``version`` allocates DeepGEMM's PDL workspace while loading (``DEEP_GEMM_PDL_SINCE``)."""
    return version >= DEEP_GEMM_PDL_SINCE


def cublas_before_snapshot(version: Version) -> bool:
    """Whether vLLM ``version`` counts its cuBLAS handles as baseline (``CUBLAS_BEFORE_SNAPSHOT_SINCE``)."""
    return version >= CUBLAS_BEFORE_SNAPSHOT_SINCE


def dsa_shared_workspace(version: Version) -> bool:
    """Whether vLLM ``version`` profiles DSA models as read in 0.26.0 (``DSA_SHARED_WORKSPACE_READ``)."""
    first, after = DSA_SHARED_WORKSPACE_READ
    return first <= version < after


def flashinfer_sampler_default(version: Version) -> bool:
    """Whether vLLM ``version`` samples top-k/top-p with FlashInfer unless told otherwise (0.22 and later)."""
    return version >= FLASHINFER_SAMPLER_DEFAULT_SINCE


def flash_attn_version(compute_capability: float) -> int:
    """The FlashAttention generation vLLM runs on a GPU unless ``--attention-config.flash_attn_version``
    says otherwise (``get_flash_attn_version``, ``vllm/v1/attention/backends/fa_utils.py``, read in 0.26.0):
    3 on Hopper (compute capability 9.x), 4 on data-center Blackwell (10.x), 2 on Ampere, Ada and the
    other Blackwell parts (8.x, 12.x)."""
    major = int(compute_capability)
    return {9: 3, 10: 4}.get(major, 2)


def default_gpu_memory_utilization(version: Version) -> float:
    """vLLM ``version``'s own default ``--gpu-memory-utilization``: 0.92 from 0.26, 0.9 before."""
    return 0.92 if version >= DEFAULT_UTILIZATION_092_SINCE else 0.9


def fusion_workspace_rounded(version: Version) -> bool:
    """Whether ``version``'s FlashInfer rounds each all-reduce fusion buffer up to 512 MiB (0.18-0.26)."""
    return GRAPH_PROFILING_RUN_SINCE <= version < EXACT_FUSION_WORKSPACE_SINCE


def large_gpu_batch_tier(version: Version) -> bool:
    """Whether vLLM ``version`` defaults to 16384 batched tokens on >= 160 GiB GPUs (verified: 0.33.0)."""
    return version >= LARGE_GPU_BATCH_SINCE


@dataclass(frozen=True)
class VllmEngine:
    """The vLLM release an instance runs, the image it was read from, and whether it was assumed."""

    version: Version = DEFAULT_VERSION
    image: str = DEFAULT_VLLM_IMAGE
    assumed_from: str = ""  # where an assumed version came from; empty when the image tag names it

    @property
    def version_text(self) -> str:
        return format_version(self.version)

    @property
    def notes(self) -> tuple[str, ...]:
        """What a plan must say about the release (only when it had to be assumed)."""
        if not self.assumed_from:
            return ()
        return (
            f"image {self.image} has no version tag: the memory plan assumes vLLM {self.version_text}, "
            f"{self.assumed_from}; use a versioned tag (such as v{VLLM_VERSION}) to plan for the release "
            "the pods run",
        )

    def describe(self) -> str:
        graphs = (
            "CUDA-graph memory counted in the KV-cache budget"
            if cudagraph_in_budget(self.version)
            else "CUDA graphs captured outside the budget, in the 1 - memoryUtilization headroom"
        )
        assumed = " (assumed)" if self.assumed_from else ""
        return f"vLLM {self.version_text}{assumed}, image {self.image}: {graphs}"


DEFAULT_ENGINE = VllmEngine()


def engine_for_image(image: str | None, default_image: str = DEFAULT_VLLM_IMAGE) -> VllmEngine:
    """The release of ``image`` (``None``/empty: the default image), assumed when its tag is no version."""
    chosen = image or default_image
    version = image_version(chosen)
    if version is not None:
        return VllmEngine(version, chosen)
    fallback = image_version(default_image)
    if fallback is not None:
        return VllmEngine(fallback, chosen, f"the release of the operator's default image {default_image}")
    return VllmEngine(
        DEFAULT_VERSION,
        chosen,
        f"this operator's default release (its default image {default_image} has no version tag either)",
    )


def engine_for_version(text: str) -> VllmEngine:
    """A release given as a number (``0.33.0``, ``v0.21``): the official image of that release."""
    version = parse_version(text.strip().removeprefix("v"))
    return VllmEngine(version, f"vllm/vllm-openai:v{format_version(version)}")
