"""The vLLM release a plan is made for, and the memory-budget rules that depend on it (pure).

vLLM's start-up memory accounting changed between releases, so the planner needs the release the
pods will run. It comes from the image they are given: ``spec.serving.image``, else the operator's
default image (``--default-image``, Helm value ``vllm.image``), read with
:func:`glm_operator.catalog.vllm.image_version` (``v0.33.0``, ``0.33.0``, ``v0.33.0-cu129``, a tag
with a digest). A tag that is not a version (``latest``, a digest only) cannot tell: the plan then
assumes the default image's release (or this operator's default release, ``VLLM_VERSION``, when the
default image is not versioned either) and says so in its notes.

Version-dependent budget rules (applied by :func:`glm_operator.planning.fit.estimate_fit`):

- vLLM >= 0.21.0 estimates CUDA-graph memory in its profiling run and subtracts it from the KV-cache
  budget (``gpu_worker.py`` ``determine_available_memory``: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  defaults to 1; 0.33.0 logs "CUDA graph memory profiling is enabled (default since v0.21.0)").
- Older releases capture the graphs after the KV cache is allocated, in the
  ``1 - gpu_memory_utilization`` headroom: not subtracted, the headroom is checked instead.
- The same boundary separates the two sets of budget constants (:mod:`glm_operator.planning.budget`):
  >= 0.21 runs a leaner profiling run (FlashInfer sampling, NCCL/custom all-reduce/cuBLAS before the
  memory snapshot, Model Runner V2 in 0.33) and captures graphs at 0.33's capture sizes.
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
CUDAGRAPH_IN_BUDGET_SINCE: Version = (0, 21, 0)
DEFAULT_VERSION: Version = parse_version(VLLM_VERSION)
#: GPUs at least this large (torch total, GiB) get vLLM 0.33's largest default token budget.
LARGEST_BATCH_GPU_GIB = 160.0
LARGE_GPU_BATCH_SINCE: Version = (0, 33, 0)


def cudagraph_in_budget(version: Version) -> bool:
    """Whether vLLM ``version`` takes CUDA-graph memory out of the KV-cache budget."""
    return version >= CUDAGRAPH_IN_BUDGET_SINCE


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
