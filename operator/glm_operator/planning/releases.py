"""The vLLM release a plan is made for, and what its memory accounting does, as one table (pure).

vLLM's start-up accounting changed between releases, so the planner needs the release the pods will run,
read from their image (an unversioned tag is planned as the default image's release, and the plan says
so). :data:`RELEASES` has one row per release where a rule of the budget changes, each column a rule read
in vLLM's source; :func:`release_rules` gives the row a release falls in. Images older than
:data:`OLDEST_SUPPORTED` are refused naming it; releases newer than :data:`NEWEST_READ` are planned with
the newest row and a note. docs/memory-model.md, 1.2 ("The release table") has the table and the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, IntEnum
from typing import Any

from glm_operator.catalog.vllm import (
    DEFAULT_VLLM_IMAGE,
    VLLM_VERSION,
    Version,
    format_version,
    image_version,
    parse_version,
)


class Generation(IntEnum):
    """The budget constant families (``memory.constants``): fitted on start-ups of their own releases."""

    OLDER = 0  # before 0.18: graphs captured after the KV cache, fitted on 0.9-0.15 start-ups
    MID = 1  # 0.18-0.19: the profiling run also profiles the graphs, without subtracting them
    NEWER = 2  # 0.20 on: the CUDA-graph estimate is subtracted from the KV budget


class V2Runner(Enum):
    """Which models Model Runner V2 profiles by default (``VllmConfig.use_v2_model_runner``)."""

    NONE = "no model"
    LISTED = "the listed architectures"
    LISTED_AND_DENSE = "the listed architectures and every dense, non-hybrid model"
    ALL = "every model"


#: 0.24.0's ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` (0.27.1 keeps the MoE ones of these)
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


@dataclass(frozen=True)
class ReleaseRules:
    """What the releases from ``since`` on (up to the next row) do that the memory budget depends on."""

    since: Version
    generation: Generation
    # the CUDA-graph estimate is taken off the KV budget (``determine_available_memory``;
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from 0.20.0's ``vllm/envs.py``)
    graphs_in_budget: bool
    v2_runner: V2Runner
    # Model Runner V2 estimates its graphs for the budget (0.26.0's ``profile_cudagraph_memory`` returns 0;
    # 0.27.1's start-ups fit with an estimate, 0.33.0's ``cudagraph_utils.py`` has it)
    v2_graph_estimate: bool
    # ``Worker.init_device`` creates the cuBLAS handles before the first memory snapshot (0.33.0 read;
    # 0.26.0 does not; the 0.27.1 start-ups fit ~0 non-torch memory, so assumed from 0.27)
    cublas_before_snapshot: bool
    # FlashInfer <= 0.6.14 (pinned by 0.18-0.26) rounds each all-reduce fusion buffer up to 512 MiB and
    # the fusion pass is off with PP (0.27 pins 0.6.16, 0.33 pins 0.7.2: the buffers' own size)
    fusion_workspace_rounded: bool
    # a DSA model's profiling run as read in 0.26.0: the indexer shares the workspace manager's buffer and
    # FlashMLA-sparse reserves its workspace while the model is built (other releases: 0.33.0's form)
    dsa_shared_workspace: bool
    # the model is built under ``max_split_size_mb:20`` (read in 0.22, 0.24, 0.26; absent in 0.19)
    load_max_split: bool
    # DeepGEMM's 32 MiB PDL workspace is allocated while loading on SM90+ (read in 0.24, 0.26; not 0.22)
    deep_gemm_pdl: bool
    # FlashInfer's top-k/top-p sampler unless VLLM_USE_FLASHINFER_SAMPLER=0 (``vllm/envs.py`` of 0.22 on)
    flashinfer_sampler: bool
    # ``CacheConfig.gpu_memory_utilization``'s default (0.92 in 0.26.0 and 0.33.0, 0.9 in 0.10-0.21)
    gpu_memory_utilization: float
    # ``get_batch_defaults`` gives 16384 batched tokens on GPUs with >= 160 GiB (read in 0.33.0)
    large_gpu_batch: bool

    def uses_model_runner_v2(self, architecture: str, is_moe: bool, hybrid: bool = False) -> bool:
        """Whether this release profiles ``architecture`` with Model Runner V2 by default."""
        listed = architecture in V2_RUNNER_ARCHITECTURES
        return {
            V2Runner.NONE: False,
            V2Runner.LISTED: listed,
            V2Runner.LISTED_AND_DENSE: listed or not (is_moe or hybrid),
            V2Runner.ALL: True,
        }[self.v2_runner]


_OLDER = ReleaseRules(
    since=(0, 9, 0),
    generation=Generation.OLDER,
    graphs_in_budget=False,
    v2_runner=V2Runner.NONE,
    v2_graph_estimate=False,
    cublas_before_snapshot=False,
    fusion_workspace_rounded=False,
    dsa_shared_workspace=False,
    load_max_split=False,
    deep_gemm_pdl=False,
    flashinfer_sampler=False,
    gpu_memory_utilization=0.9,
    large_gpu_batch=False,
)


def _from(since: Version, previous: ReleaseRules, **changes: Any) -> ReleaseRules:
    """The row from ``since`` on: the previous row with what changed in that release."""
    return replace(previous, since=since, **changes)


_MID = _from((0, 18, 0), _OLDER, generation=Generation.MID, fusion_workspace_rounded=True)
_NEWER = _from((0, 20, 0), _MID, generation=Generation.NEWER, graphs_in_budget=True)
_SAMPLER = _from((0, 22, 0), _NEWER, load_max_split=True, flashinfer_sampler=True)
# 0.23 was not read
_V2_LISTED = _from((0, 24, 0), _SAMPLER, v2_runner=V2Runner.LISTED, deep_gemm_pdl=True)
# 0.25 was not read
_V2_DENSE = _from(
    (0, 26, 0),
    _V2_LISTED,
    v2_runner=V2Runner.LISTED_AND_DENSE,
    gpu_memory_utilization=0.92,
    dsa_shared_workspace=True,
)
_V2_ESTIMATE = _from(
    (0, 27, 0),
    _V2_DENSE,
    v2_graph_estimate=True,
    cublas_before_snapshot=True,
    fusion_workspace_rounded=False,
    dsa_shared_workspace=False,
)
# 0.29-0.32 were not read
_V2_EVERYWHERE = _from((0, 33, 0), _V2_ESTIMATE, v2_runner=V2Runner.ALL, large_gpu_batch=True)

#: The rules, oldest first: each row holds from its ``since`` up to the next row.
RELEASES: tuple[ReleaseRules, ...] = (
    _OLDER,
    _MID,
    _NEWER,
    _SAMPLER,
    _V2_LISTED,
    _V2_DENSE,
    _V2_ESTIMATE,
    _V2_EVERYWHERE,
)
OLDEST_SUPPORTED: Version = RELEASES[0].since
#: The newest release read; its patch releases follow the same rules.
NEWEST_READ: Version = (0, 33, 0)
DEFAULT_VERSION: Version = parse_version(VLLM_VERSION)
#: GPUs at least this large (torch total, GiB) get the largest default token budget where
#: ``ReleaseRules.large_gpu_batch`` says so.
LARGEST_BATCH_GPU_GIB = 160.0


def release_rules(version: Version) -> ReleaseRules:
    """The row of :data:`RELEASES` that ``version`` falls in (the oldest for an unsupported release)."""
    found = RELEASES[0]
    for rules in RELEASES:
        if version >= rules.since:
            found = rules
    return found


def unsupported_release(version: Version) -> str | None:
    """Why ``version`` cannot be planned (older than :data:`OLDEST_SUPPORTED`), or None."""
    if version >= OLDEST_SUPPORTED:
        return None
    return (
        f"vLLM {format_version(version)} is older than the oldest release the memory plan covers "
        f"({format_version(OLDEST_SUPPORTED)}: the oldest whose start-ups its constants are fitted on)"
    )


def beyond_newest_read(version: Version) -> bool:
    """Whether ``version`` is a minor release newer than any the table was read in."""
    return version[:2] > NEWEST_READ[:2]


def flash_attn_version(compute_capability: float) -> int:
    """The FlashAttention generation vLLM runs on a GPU unless ``--attention-config.flash_attn_version``
    says otherwise (``get_flash_attn_version``, ``vllm/v1/attention/backends/fa_utils.py``, read in 0.26.0):
    3 on Hopper (compute capability 9.x), 4 on data-center Blackwell (10.x), 2 on Ampere, Ada and the
    other Blackwell parts (8.x, 12.x)."""
    major = int(compute_capability)
    return {9: 3, 10: 4}.get(major, 2)


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
    def rules(self) -> ReleaseRules:
        return release_rules(self.version)

    @property
    def notes(self) -> tuple[str, ...]:
        """What a plan must say about the release: that it was assumed, or newer than the table."""
        notes = []
        if self.assumed_from:
            notes.append(
                f"image {self.image} has no version tag: the memory plan assumes vLLM {self.version_text}, "
                f"{self.assumed_from}; use a versioned tag (such as v{VLLM_VERSION}) to plan for the release "
                "the pods run"
            )
        if beyond_newest_read(self.version):
            newest = format_version(NEWEST_READ)
            notes.append(
                f"vLLM {self.version_text} is newer than the newest release whose memory accounting the "
                f"planner follows ({newest}): planned with {newest}'s rules; the KV-cache figures may be off"
            )
        return tuple(notes)

    def describe(self) -> str:
        graphs = (
            "CUDA-graph memory counted in the KV-cache budget"
            if self.rules.graphs_in_budget
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
