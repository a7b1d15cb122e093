"""docs/recipes.md: the operator's plan for each catalog GLM model on common GPU servers, next to the
published recipes.

Usage: .venv/bin/python -m benchmarks.recipes [--write]

Prints the page's markdown (``--write`` writes ``docs/recipes.md`` instead); the generation time goes
to stderr. Every figure on the page comes from the operator's own code, run as the operator runs it:

* the plan and the vLLM flags: ``compute_desired`` (the operator's reconcile of a new GLMDeployment:
  spec validation, ``placement_request`` and ``plan_placement`` on the GPU pools parsed from node dicts
  labelled as GPU Feature Discovery labels them, the rendered children), and the container args of
  the Deployment, or of the LeaderWorkerSet's leader;
* a published recipe's shape "planned for this request": ``placement_request_from_spec`` and
  ``plan_placement`` on the same pools, for the same request with the recipe's precision, TP / PP / DP /
  DCP, MTP, KV-cache dtype and memory utilization pinned in the spec.

The published recipes are a small table transcribed by hand (``PUBLISHED``), each entry with its
source and how it was read: from a file of this repository, or from memory and not verified. The
findings at the end of the page are checks over the results (each prints only while it holds), so
the page says what the planner does today, not what it did when this was written.

``tests/unit/test_recipes_doc.py`` fails when docs/recipes.md differs from this output.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.contract.matrix import desired_for, gpu_nodes, vllm_containers

from glm_operator.catalog.gpus import find_gpu
from glm_operator.catalog.models import ModelEntry, load_models, resolve_model
from glm_operator.catalog.vllm import DEFAULT_VLLM_IMAGE
from glm_operator.planning.memory.parallel import supports_data_parallel_attention
from glm_operator.planning.placement.plan import plan_placement
from glm_operator.planning.placement.ranking import MAX_NUM_SEQS_CAP, TYPICAL_SEQUENCE_TOKENS
from glm_operator.planning.placement.request import PlanningInputError, placement_request_from_spec
from glm_operator.planning.placement.result import Considered, Plan, Variant
from glm_operator.planning.supply.nodes import parse_gpu_pools

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "recipes.md"
MIN_CONCURRENCY = 8
FROM_MEMORY = "from memory, not verified"
H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"
B200 = "NVIDIA-B200"
A100 = "NVIDIA-A100-SXM4-80GB"

# --------------------------------------------------------------------------------------------
# the hardware and the requests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """A GPU server (or two): nodes of ``gpus_per_node`` GPUs of one catalog product."""

    label: str
    product: str
    nodes: int = 1
    gpus_per_node: int = 8

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_dicts(self) -> list[dict[str, Any]]:
        return gpu_nodes(find_gpu(self.product), self.nodes, self.gpus_per_node)


HARDWARE = (
    Hardware("8 x H100", H100),
    Hardware("8 x H200", H200),
    Hardware("8 x B200", B200),
    Hardware("2 x 8 x H100", H100, nodes=2),
)


@dataclass(frozen=True)
class Request:
    """One standard GLMDeployment request: a context (capped at the model's limit), the rest fixed."""

    key: str
    context: int

    def context_for(self, model: ModelEntry) -> int:
        return min(self.context, model.max_context)

    def spec(self, model: ModelEntry, hardware: Hardware) -> dict[str, Any]:
        return {
            "model": {"id": model.id},
            "contextLength": self.context_for(model),
            "minConcurrency": MIN_CONCURRENCY,
            "speculativeDecoding": {"mode": "Auto"},
            "gpu": {"products": [hardware.product], "allowMultiNode": hardware.nodes > 1},
        }


REQUESTS = (Request("chat", 32768), Request("long", 131072))

# --------------------------------------------------------------------------------------------
# the published recipes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A serving shape as a recipe states it (what the planner's spec fields can pin)."""

    precision: str  # bf16 or fp8 (the checkpoint served)
    tp: int
    pp: int = 1
    dp: int = 1
    dcp: int = 1
    # draft tokens per step (SGLang's EAGLE steps with top-k 1 counted as MTP draft tokens); None: not
    # stated, the planner's Auto decides in the recipe's planned shape
    mtp: int | None = 0
    ep: bool | None = None  # --enable-expert-parallel under TP (None: not stated); the planner decides it
    kv_cache_dtype: str = "auto"
    memory_utilization: float | None = None

    @property
    def text(self) -> str:
        text = Considered(
            quantization=self.precision,
            tensor_parallel_size=self.tp,
            max_num_seqs=0,
            speed=None,
            meets_slo=True,
            pipeline_parallel_size=self.pp,
            decode_context_parallel_size=self.dcp,
            data_parallel_size=self.dp,
            speculative_tokens=self.mtp or 0,
        ).shape
        if self.ep and self.dp == 1:
            text += " (EP)"
        if self.kv_cache_dtype != "auto":
            text += f", {self.kv_cache_dtype} KV"
        return text + (", MTP not stated" if self.mtp is None else "")

    def spec(self, base: Mapping[str, Any], min_concurrency: int) -> dict[str, Any]:
        """``base`` (a standard request) with this shape pinned."""
        gpu = {
            **base["gpu"],
            "tensorParallelSize": self.tp,
            "pipelineParallelSize": self.pp,
            "dataParallelSize": self.dp,
            "decodeContextParallelSize": self.dcp,
        }
        if self.memory_utilization is not None:
            gpu["memoryUtilization"] = self.memory_utilization
        spec = {
            **base,
            "quantization": self.precision,
            "kvCacheDtype": self.kv_cache_dtype,
            "minConcurrency": min_concurrency,
            "gpu": gpu,
            "speculativeDecoding": (
                {"mode": "Auto"}
                if self.mtp is None
                else {"mode": "On", "numSpeculativeTokens": self.mtp}
                if self.mtp
                else {"mode": "Off"}
            ),
        }
        return spec


@dataclass(frozen=True)
class Recipe:
    """One published way to serve a model, transcribed by hand."""

    key: str  # a short name for the comparisons
    source: str  # who published it, and which page
    url: str  # "" where no address is known
    provenance: str  # how it was read: a file of this repository, or FROM_MEMORY
    models: tuple[str, ...]  # catalog ids
    hardware: str  # as the source states it ("" when it names none)
    gpu: str | None  # the catalog product, None when the source names no GPU type
    gpus: int  # GPUs one instance uses
    shape: Shape | None  # None: no shape is known here
    flags: str  # the serving flags as published ("" when none are known here)
    requests: tuple[str, ...] = ("chat", "long")  # which request rows it is compared with
    note: str = ""

    def matches(self, model: ModelEntry, hardware: Hardware, request: Request) -> bool:
        """Compared in this cell: the model, the request, and a GPU type and count the hardware has."""
        if self.shape is None or model.id not in self.models or request.key not in self.requests:
            return False
        if self.gpu is not None and self.gpu != hardware.product:
            return False
        fits_nodes = self.gpus <= hardware.gpus_per_node or hardware.nodes > 1
        return self.gpus <= hardware.gpus and fits_nodes


GLM45, GLM45_AIR, GLM46, GLM47, GLM47_FLASH = (
    "zai-org/GLM-4.5",
    "zai-org/GLM-4.5-Air",
    "zai-org/GLM-4.6",
    "zai-org/GLM-4.7",
    "zai-org/GLM-4.7-Flash",
)
GLM5, GLM51, GLM52, GLM53, GLM53_FLASH = (
    "zai-org/GLM-5",
    "zai-org/GLM-5.1",
    "zai-org/GLM-5.2",
    "zai-org/GLM-5.3",
    "zai-org/GLM-5.3-Flash",
)
GLM45_CARD = "https://huggingface.co/zai-org/GLM-4.5"
CARD_NOTE = "GPU counts only: TP read as the count (16: TP 8 x PP 2, the operator's two-node split)"


def _card(model: str, precision: str, product: str, gpus: int, full_context: bool) -> Recipe:
    """One row of the GLM-4.5 model card's hardware table (minimum, or the full 128k context)."""
    short = "H100" if product == H100 else "H200"
    shape = Shape(precision, 8, pp=gpus // 8, mtp=None) if gpus > 8 else Shape(precision, gpus, mtp=None)
    which = "full 128k context" if full_context else "minimum (not the full context)"
    return Recipe(
        key="card 128k" if full_context else "card min",
        source=f"zai-org GLM-4.5 model card, hardware table: {which}",
        url=GLM45_CARD,
        provenance=FROM_MEMORY,
        models=(model,),
        hardware=f"{gpus} x {short}",
        gpu=product,
        gpus=gpus,
        shape=shape,
        flags="",
        requests=("long",) if full_context else ("chat",),
        note=CARD_NOTE,
    )


PUBLISHED: tuple[Recipe, ...] = (
    # zai-org's GLM-4.5 model card (and the README of github.com/zai-org/GLM-4.5): the hardware table
    *(
        _card(model, precision, product, gpus, full)
        for model, precision, full, h100, h200 in (
            (GLM45, "fp8", False, 8, 4),
            (GLM45, "bf16", False, 16, 8),
            (GLM45, "fp8", True, 16, 8),
            (GLM45_AIR, "fp8", False, 2, 1),
            (GLM45_AIR, "bf16", False, 4, 2),
            (GLM45_AIR, "fp8", True, 4, 2),
            (GLM45_AIR, "bf16", True, 8, 4),
        )
        for product, gpus in ((H100, h100), (H200, h200))
    ),
    Recipe(
        key="SGLang (README)",
        source="zai-org GLM-4.5 README: SGLang command",
        url="https://github.com/zai-org/GLM-4.5",
        provenance=FROM_MEMORY,
        models=(GLM45_AIR,),
        hardware="",
        gpu=None,
        gpus=8,
        shape=Shape("bf16", 8, mtp=3),
        flags=(
            "--tp-size 8 --tool-call-parser glm45 --reasoning-parser glm45 --speculative-algorithm EAGLE "
            "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
            "--mem-fraction-static 0.7"
        ),
        note="EAGLE on the model's MTP layer, 3 steps of top-k 1: read as 3 draft tokens",
    ),
    Recipe(
        key="vLLM recipe (MTP)",
        source="vLLM recipes, GLM-4.5/4.6/4.7 page (its MTP section)",
        url="https://docs.vllm.ai/projects/recipes/en/latest/GLM/GLM.html",
        provenance=(
            f"{FROM_MEMORY}; MTP with one draft token as the repository reads it "
            "(operator/glm_operator/planning/speed/speculative.py)"
        ),
        models=(GLM45_AIR,),
        hardware="",
        gpu=None,
        gpus=4,
        shape=Shape("fp8", 4, mtp=1, ep=True),
        flags=(
            "zai-org/GLM-4.5-Air-FP8 --tensor-parallel-size 4 --speculative-config.method mtp "
            "--speculative-config.num_speculative_tokens 1 --tool-call-parser glm45 --reasoning-parser glm45 "
            "--enable-auto-tool-choice (FP8 block-quantized experts: --enable-expert-parallel where "
            "moe_intermediate_size / TP is not a multiple of 128)"
        ),
    ),
    Recipe(
        key="vLLM recipe",
        source="vLLM recipes, GLM-4.5/4.6/4.7 page",
        url="https://docs.vllm.ai/projects/recipes/en/latest/GLM/GLM.html",
        provenance=FROM_MEMORY,
        models=(GLM45, GLM46, GLM47),
        hardware="8 x H100 or H200",
        gpu=None,
        gpus=8,
        shape=Shape("fp8", 8, mtp=1, ep=True),
        flags=(
            "zai-org/GLM-4.x-FP8 --tensor-parallel-size 8 --enable-expert-parallel "
            "--speculative-config.method mtp --speculative-config.num_speculative_tokens 1 "
            "--tool-call-parser glm45|glm47 "
            "--reasoning-parser glm45 --enable-auto-tool-choice"
        ),
    ),
    Recipe(
        key="mech-util",
        source="public experiment plan (hawkoli1987/mech-util), vLLM 0.12.0",
        url="https://github.com/hawkoli1987/mech-util/blob/main/experiment_plan.md",
        provenance="in this repository: tests/fixtures/vllm-startups.csv (rows mechutil-glm46-*)",
        models=(GLM46,),
        hardware="8 x H200",
        gpu=H200,
        gpus=8,
        shape=Shape("bf16", 8, ep=True, kv_cache_dtype="fp8", memory_utilization=0.95),
        flags=(
            "zai-org/GLM-4.6 --tensor-parallel-size 8 --enable-expert-parallel --kv-cache-dtype fp8 "
            "--gpu-memory-utilization 0.95 --enforce-eager --max-model-len 16384|32768|65536"
        ),
        note="a memory probe (max-num-seqs 1), not a serving recommendation",
    ),
    Recipe(
        key="card (vLLM)",
        source="zai-org GLM-4.7 model card: vLLM command",
        url="https://huggingface.co/zai-org/GLM-4.7",
        provenance=(
            f"{FROM_MEMORY}; TP 4 + MTP 1 as the repository reads it "
            "(operator/glm_operator/planning/speed/speculative.py)"
        ),
        models=(GLM47,),
        hardware="",
        gpu=None,
        gpus=4,
        shape=Shape("fp8", 4, mtp=1),
        flags=(
            "zai-org/GLM-4.7-FP8 --tensor-parallel-size 4 --speculative-config.method mtp "
            "--speculative-config.num_speculative_tokens 1 --tool-call-parser glm47 --reasoning-parser glm45 "
            "--enable-auto-tool-choice"
        ),
    ),
    Recipe(
        key="card (SGLang)",
        source="zai-org GLM-4.7 model card: SGLang command",
        url="https://huggingface.co/zai-org/GLM-4.7",
        provenance=FROM_MEMORY,
        models=(GLM47,),
        hardware="",
        gpu=None,
        gpus=8,
        shape=Shape("fp8", 8, mtp=3),
        flags=(
            "--tp-size 8 --tool-call-parser glm47 --reasoning-parser glm45 --speculative-algorithm EAGLE "
            "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
        ),
        note="EAGLE on the model's MTP layer, 3 steps of top-k 1: read as 3 draft tokens",
    ),
    Recipe(
        key="card (vLLM)",
        source="zai-org GLM-4.7-Flash model card: vLLM command",
        url="https://huggingface.co/zai-org/GLM-4.7-Flash",
        provenance=FROM_MEMORY,
        models=(GLM47_FLASH,),
        hardware="",
        gpu=None,
        gpus=4,
        shape=Shape("bf16", 4, mtp=1),
        flags=(
            "zai-org/GLM-4.7-Flash --tensor-parallel-size 4 --speculative-config.method mtp "
            "--speculative-config.num_speculative_tokens 1 --tool-call-parser glm47 --reasoning-parser glm45 "
            "--enable-auto-tool-choice"
        ),
    ),
    Recipe(
        key="vLLM GLM5.md",
        source="vLLM recipes, GLM/GLM5.md (GLM-5 and GLM-5.1)",
        url="https://github.com/vllm-project/recipes/blob/main/GLM/GLM5.md",
        provenance=(
            "in this repository: FP8 on 8 x H200 or H20, 'use the 0.19.0 stable release', the parsers "
            "(operator/glm_operator/catalog/data/models.yaml, catalog/data/vllm.yaml); TP 8 and MTP 1: "
            f"{FROM_MEMORY}"
        ),
        models=(GLM5, GLM51),
        hardware="8 x H200 (or H20)",
        gpu=H200,
        gpus=8,
        shape=Shape("fp8", 8, mtp=1),
        flags=(
            "zai-org/GLM-5-FP8 --tensor-parallel-size 8 --speculative-config.method mtp "
            "--speculative-config.num_speculative_tokens 1 --tool-call-parser glm47 --reasoning-parser glm45 "
            "--enable-auto-tool-choice"
        ),
    ),
    Recipe(
        key="recipes.vllm.ai",
        source="vLLM recipes, recipes.vllm.ai GLM-5.2 page",
        url="https://recipes.vllm.ai/zai-org/GLM-5.2",
        provenance="in this repository (catalog sources): 'vLLM 0.23.0+' only",
        models=(GLM52,),
        hardware="",
        gpu=None,
        gpus=0,
        shape=None,
        flags="",
    ),
    Recipe(
        key="aws-samples",
        source="aws-samples sample-claude-code-multi-model: GLM-5.2 on p5en.48xlarge",
        url=(
            "https://github.com/aws-samples/sample-claude-code-multi-model/blob/"
            "ca1363bc9f6cd44ab9b4be14118819fe9c21df74/self-hosted/vllm/models/glm-5.2.md"
        ),
        provenance="in this repository: tests/fixtures/vllm-startups.csv (row aws-glm52-fp8-h200-tp8)",
        models=(GLM52,),
        hardware="8 x H200",
        gpu=H200,
        gpus=8,
        shape=Shape("fp8", 8, memory_utilization=0.95),
        flags=(
            "zai-org/GLM-5.2-FP8 --tensor-parallel-size 8 --gpu-memory-utilization 0.95 "
            "--max-model-len 1000000 --enable-prefix-caching --trust-remote-code"
        ),
        note="its 1M-token start fails: vLLM estimates at most 307,840 tokens",
    ),
    Recipe(
        key="recipes PR 893",
        source="vllm-project/recipes pull request 893: GLM-5.3 (vLLM 0.28.0)",
        url="https://github.com/vllm-project/recipes/pull/893",
        provenance="in this repository: tests/fixtures/vllm-startups.csv (row recipes893-glm53-fp8-h200-tp8)",
        models=(GLM53,),
        hardware="8 x H200",
        gpu=H200,
        gpus=8,
        shape=Shape("fp8", 8, kv_cache_dtype="fp8"),
        flags="zai-org/GLM-5.3-FP8 --tensor-parallel-size 8 --kv-cache-dtype fp8",
        note="without --max-model-len the native 1,048,576-token context does not start",
    ),
    Recipe(
        key="vLLM PR 54062",
        source="vllm-project/vllm pull request 54062: GLM-5.3-Flash support (its recipe command)",
        url="https://github.com/vllm-project/vllm/pull/54062",
        provenance="in this repository (catalog/data/vllm.yaml): the parsers only",
        models=(GLM53_FLASH,),
        hardware="",
        gpu=None,
        gpus=0,
        shape=None,
        flags="--tool-call-parser glm47 --reasoning-parser glm45",
    ),
    Recipe(
        key="article",
        source="blog article '从API到多卡生产：GLM-5.3-Flash部署全攻略与避坑指南' (Chinese)",
        url="",
        provenance="read from a copy of the article, URL not recorded",
        models=(GLM53_FLASH,),
        hardware="8 x A100 (NVLink)",
        gpu=A100,
        gpus=8,
        shape=Shape("bf16", 8, memory_utilization=0.9),
        flags=(
            "--tensor-parallel-size 8 --max-num-seqs 128 --max-model-len 32768 --gpu-memory-utilization 0.9 "
            "--served-model-name glm-5.3-flash"
        ),
        note="weights' precision not stated (no --quantization): read as the bf16 checkpoint",
    ),
)

#: Named sources of which nothing usable is on this machine (no copy, or no shape in the copy).
NOT_TRANSCRIBED = (
    "TensorRT-LLM's GLM-5 deployment guide (nvidia.github.io/TensorRT-LLM, "
    "deployment-guide-for-glm-5-on-trtllm): no copy here",
    "SGLang's GLM-5 documentation / cookbook: no copy here; its commands are not recalled well enough "
    "to transcribe",
    "llm-d's well-lit-path guides (wide expert parallelism): no GLM guide known here",
    "GKE's GLM-5.1 README (catalog sources: 753B MoE, 202,752-token context, ~1.5 TB of BF16 weights): "
    "no serving shape recorded",
)

# --------------------------------------------------------------------------------------------
# planning the cells
# --------------------------------------------------------------------------------------------


def plan_spec(spec: Mapping[str, Any], hardware: Hardware) -> Plan:
    """The planner as the operator runs it: pools parsed from the node dicts, the spec validated."""
    pools = parse_gpu_pools(hardware.node_dicts())
    return plan_placement(placement_request_from_spec(spec, pools))


@dataclass(frozen=True)
class Pinned:
    """A recipe's shape planned for a request: the plan, or why the planner refuses it."""

    plan: Plan | None
    refused: str = ""
    min_concurrency: int = MIN_CONCURRENCY  # what the plan was asked (1 when the shape holds fewer than 8)

    @property
    def variant(self) -> Variant | None:
        return self.plan.variants[0] if self.plan and self.plan.fits else None


def plan_pinned(shape: Shape, base: Mapping[str, Any], hardware: Hardware) -> Pinned:
    """``shape`` pinned on the request ``base``; asked for one sequence when it cannot hold eight."""
    reason = ""
    for min_concurrency in (MIN_CONCURRENCY, 1):
        try:
            plan = plan_spec(shape.spec(base, min_concurrency), hardware)
        except (PlanningInputError, ValueError) as err:  # pydantic's ValidationError is a ValueError
            return Pinned(None, refused=str(err).splitlines()[0])
        if plan.fits:
            return Pinned(plan, min_concurrency=min_concurrency)
        reason = reason or rejection_text(plan)
    return Pinned(None, refused=reason)


def rejection_text(plan: Plan) -> str:
    return "; ".join(r.reason for r in plan.rejected) or (plan.details[-1] if plan.details else "")


@dataclass(frozen=True)
class Cell:
    """One model on one hardware for one request: the plan and the rendered vLLM arguments."""

    model: ModelEntry
    hardware: Hardware
    request: Request
    plan: Plan
    argv: tuple[str, ...]

    @property
    def context(self) -> int:
        return self.request.context_for(self.model)

    @property
    def variant(self) -> Variant | None:
        return self.plan.variants[0] if self.plan.fits else None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model.id, self.hardware.label, self.request.key)

    @property
    def where(self) -> str:
        return f"on {self.hardware.label} at {self.context}"

    @property
    def chosen(self) -> Considered | None:
        return chosen_of(self.variant) if self.variant is not None else None

    def recipes(self) -> list[Recipe]:
        return [r for r in PUBLISHED if r.matches(self.model, self.hardware, self.request)]


def chosen_of(v: Variant) -> Considered:
    """The variant's shape as the ranking lists it (every plan that fits ranks its shapes)."""
    return next(c for c in v.considered if c.chosen)


def plan_cell(model: ModelEntry, hardware: Hardware, request: Request) -> Cell:
    """The operator's reconcile of a new GLMDeployment (``compute_desired``: validation, the plan through
    ``placement_request`` and ``plan_placement``, the rendered children) on the machine's nodes."""
    desired = desired_for(request.spec(model, hardware), hardware.node_dicts(), name="recipes")
    plan = desired.plan
    assert plan is not None, f"{model.name} on {hardware.label}: {desired.status}"
    argv: tuple[str, ...] = ()
    if plan.fits:
        container = next(c for obj in desired.objects for c in vllm_containers(obj))
        argv = (*container.get("command", ()), *container["args"])
    return Cell(model, hardware, request, plan, argv)


@dataclass(frozen=True)
class Report:
    cells: tuple[Cell, ...]
    dense: tuple[Cell, ...]
    pinned: Mapping[tuple[int, str, str, str], Pinned] = field(default_factory=dict)
    own_hardware: Mapping[int, Pinned] = field(default_factory=dict)  # recipe index -> on its own GPUs
    # recipe index -> its shape on a machine of ours with the same GPU memory, where its own GPUs refuse it
    same_memory: Mapping[int, tuple[Hardware, Pinned]] = field(default_factory=dict)
    # the findings' re-plans: each cell's request with kvCacheDtype: fp8; one-GPU replicas with
    # data-parallel attention over the node
    what_if_fp8_kv: Mapping[tuple[str, str, str], Plan] = field(default_factory=dict)
    what_if_dp: Mapping[tuple[str, str, str], Plan] = field(default_factory=dict)

    def cell(self, model: str, hardware: str, request: str) -> Cell:
        return next(
            c
            for c in self.cells
            if (c.model.id, c.hardware.label, c.request.key) == (model, hardware, request)
        )


def is_glm_moe(model: ModelEntry) -> bool:
    return model.architecture.is_moe


def generate() -> Report:
    models = load_models()
    cells = tuple(plan_cell(m, hw, rq) for m in models if is_glm_moe(m) for hw in HARDWARE for rq in REQUESTS)
    dense = tuple(plan_cell(m, hw, REQUESTS[0]) for m in models if not is_glm_moe(m) for hw in HARDWARE)
    pinned: dict[tuple[int, str, str, str], Pinned] = {}
    for cell in cells:
        for recipe in cell.recipes():
            assert recipe.shape is not None
            key = (PUBLISHED.index(recipe), cell.model.id, cell.hardware.label, cell.request.key)
            pinned[key] = plan_pinned(
                recipe.shape, cell.request.spec(cell.model, cell.hardware), cell.hardware
            )
    own: dict[int, Pinned] = {}
    same: dict[int, tuple[Hardware, Pinned]] = {}
    standard = {hw.product for hw in HARDWARE}
    for i, recipe in enumerate(PUBLISHED):
        if recipe.shape is not None and recipe.gpu is not None and recipe.gpu not in standard:
            model = next(m for m in models if m.id == recipe.models[0])
            hardware = own_hardware(recipe)
            own[i] = plan_pinned(recipe.shape, REQUESTS[0].spec(model, hardware), hardware)
            twin = same_memory_machine(hardware)
            if own[i].variant is None and twin is not None:
                same[i] = (twin, plan_pinned(recipe.shape, REQUESTS[0].spec(model, twin), twin))
    fits = [c for c in cells if c.plan.fits]  # a plan where nothing fits searches every fix: not redone
    fp8_kv = {
        c.key: plan_spec({**c.request.spec(c.model, c.hardware), "kvCacheDtype": "fp8"}, c.hardware)
        for c in fits
    }
    dp = {
        c.key: plan_spec(
            _with_gpu(c.request.spec(c.model, c.hardware), dataParallelSize=c.hardware.gpus_per_node),
            c.hardware,
        )
        for c in fits
        if c.variant is not None
        and c.variant.gpus_per_replica == 1
        and supports_data_parallel_attention(resolve_model(c.model.id).architecture)
    }
    return Report(cells, dense, pinned, own, same, fp8_kv, dp)


def _with_gpu(spec: Mapping[str, Any], **gpu: Any) -> dict[str, Any]:
    return {**spec, "gpu": {**spec["gpu"], **gpu}}


def same_memory_machine(hardware: Hardware) -> Hardware | None:
    """One of our machines whose GPUs have the same memory (within 1 GiB) and the same count, if any."""
    memory = find_gpu(hardware.product).memory_gib
    for ours in HARDWARE:
        if ours.gpus == hardware.gpus and abs(find_gpu(ours.product).memory_gib - memory) < 1.0:
            return ours
    return None


def own_hardware(recipe: Recipe) -> Hardware:
    assert recipe.gpu is not None
    nodes = math.ceil(recipe.gpus / 8)
    return Hardware(
        f"{recipe.gpus} x {recipe.gpu}", recipe.gpu, nodes=nodes, gpus_per_node=min(8, recipe.gpus)
    )


# --------------------------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------------------------


def tokens(n: float) -> str:
    return f"{n:,.0f}"


def speed_text(c: Considered | Variant | None) -> tuple[str, str]:
    """(output tokens/s per GPU, ITL ms) at max-num-seqs, '-' without a prediction."""
    speed = c.speed if c is not None else None
    if speed is None:
        return "-", "-"
    return f"{speed.output_tokens_per_s_per_gpu:,.0f}", f"{speed.itl_s * 1000:.1f}"


def seqs_text(v: Variant) -> str:
    if v.data_parallel_size > 1:
        return f"{v.max_num_seqs} per rank ({v.max_num_seqs * v.data_parallel_size})"
    return str(v.max_num_seqs)


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(md_cell(x) for x in row) + " |" for row in rows]
    return lines


def shape_of(cell: Cell) -> str:
    chosen = cell.chosen
    return chosen.shape if chosen is not None else "-"


def link(recipe: Recipe) -> str:
    return f"[{recipe.source}]({recipe.url})" if recipe.url else recipe.source


def header(report: Report) -> list[str]:
    plan = report.cells[0].plan
    speeds = [c.variant.speed for c in report.cells if c.variant is not None and c.variant.speed is not None]
    w = speeds[0].workload
    workload = f"{w.input_tokens} prompt and {w.output_tokens} output tokens"
    return [
        "# Recipes: the operator's plan next to the published ones",
        "",
        "Generated by `python -m benchmarks.recipes --write` (`make recipes`) from the planner itself; "
        "`tests/unit/test_recipes_doc.py` fails when this page differs from the generator's output, so a "
        "planner change that moves a shape or a figure shows up here. Do not edit by hand.",
        "",
        "What a plan is judged by: the shape an expert would pick for the model and the hardware, and "
        "speed predictions that hold on real runs. For each catalog GLM MoE model on four machines, this "
        "page prints what the operator serves, the published recipes for the model with their flags, and "
        "where the two differ and why. The speed figures are the planner's predictions (a model calibrated "
        "on H200 load tests, `benchmarks/calibration/perf_model.py`), not measurements; data-parallel "
        "attention, expert parallelism and decode context parallelism are modelled from vLLM's code, not "
        "measured on a multi-GPU machine.",
        "",
        "## The requests",
        "",
        "Every cell is the operator's reconcile of one new GLMDeployment (`compute_desired`: spec "
        "validation, `placement_request` and `plan_placement` on the GPU pools parsed from nodes labelled as "
        "GPU Feature Discovery labels them, the rendered children; the flags are the args of the "
        "Deployment's container, or of the LeaderWorkerSet leader's), with the vLLM release of the default "
        f"image (`{DEFAULT_VLLM_IMAGE}`, planned as vLLM {plan.vllm_version}):",
        "",
        "```yaml",
        "model: {id: <the model>}",
        "contextLength: 32768        # 'chat' rows; 131072 in the 'long' rows (capped at the model's limit)",
        f"minConcurrency: {MIN_CONCURRENCY}            # full-length sequences one replica must hold",
        "speculativeDecoding: {mode: Auto}   # MTP where the model predicts a gain",
        "gpu: {products: [<the GPU>], allowMultiNode: <true on the two-node machine>}",
        "# quantization: auto (the default): the planner picks bf16 / fp8, int4 / int8 only to fit",
        "```",
        "",
        "Why these: 32k is the planner's default context and a common chat length; the published commands "
        "mostly leave `--max-model-len` at the model's full context, which the 128k rows approach (128k is "
        "the GLM-4.5 card's 'full context' table, and long enough that the MLA models, GLM-4.7-Flash and "
        "GLM-5.x, meet the latent cache that tensor parallelism duplicates on every rank). Eight "
        "full-length sequences per replica is issue 49's bar (GLM-5.2 at 64k with `minConcurrency: 8`) and "
        "a small production load; MTP and the weights' precision are left to the planner, as a new user "
        "would leave them. No `slo` is set: max-num-seqs is the KV cache's tokens over "
        f"{TYPICAL_SEQUENCE_TOKENS:,} per sequence, capped at the planner's {MAX_NUM_SEQS_CAP}, and the "
        f"speed is predicted at that many concurrent requests of {workload}.",
        "",
        "MTP acceptance: the planner starts from published figures (GLM-4.x about 0.8 for the first draft "
        "token and near 0 for the second, vllm-project/vllm#25993 on 8 x H200; GLM-5 a mean acceptance "
        "length of 1.95 with one draft, vllm-project/vllm#34385 on 4 x B300, later drafts ~0.30 and ~0.10), "
        "so `Auto` drafts one token on GLM-4.x, as the published recipes do; on GLM-5.x it drafts two or "
        "three where a step is bound by its weight reads (verifying more tokens per sequence then costs "
        "little), as SGLang's MTP=3 does.",
        "",
        "## The machines",
        "",
        *table(
            ("machine", "GPU product label", "nodes x GPUs"),
            ((hw.label, f"`{hw.product}`", f"{hw.nodes} x {hw.gpus_per_node}") for hw in HARDWARE),
        ),
        "",
    ]


def summary(report: Report) -> list[str]:
    out = ["## Summary", ""]
    for request in REQUESTS:
        out += [
            f"Request '{request.key}' (contextLength {request.context}, capped at the model's limit): the "
            "shape served, replicas of it the machine holds, and predicted output tokens/s per GPU.",
            "",
        ]
        rows = []
        for model in _moe_models(report):
            row = [model.name]
            for hw in HARDWARE:
                cell = report.cell(model.id, hw.label, request.key)
                v = cell.variant
                if v is None:
                    row.append("does not fit")
                else:
                    per_gpu, _ = speed_text(v)
                    row.append(f"{shape_of(cell)}, x{v.capacity_replicas}: {per_gpu}")
            rows.append(row)
        out += [*table(("model", *(hw.label for hw in HARDWARE)), rows), ""]
    return out


def _moe_models(report: Report) -> list[ModelEntry]:
    seen: dict[str, ModelEntry] = {}
    for c in report.cells:
        seen.setdefault(c.model.id, c.model)
    return list(seen.values())


def model_section(report: Report, model: ModelEntry) -> list[str]:
    cells = [c for c in report.cells if c.model.id == model.id]
    out = [
        f"## {model.name}",
        "",
        f"`{model.id}`: {model.params}; context limit {model.max_context:,} tokens.",
        "",
        "Published:",
        "",
    ]
    published = [(i, r) for i, r in enumerate(PUBLISHED) if model.id in r.models]
    if published:
        rows = [
            (
                f"**{r.key}**",
                link(r),
                r.hardware or "not stated",
                r.shape.text if r.shape else "not recorded here",
                f"`{r.flags}`" if r.flags else "-",
                r.provenance + (f"; {r.note}" if r.note else ""),
            )
            for _, r in published
        ]
        out += table(("", "source", "hardware", "shape", "flags as published", "how it was read"), rows)
    else:
        out.append("No published recipe for this model is on this machine.")
    out += ["", "Planned:", ""]
    planned: list[tuple[str, ...]] = []
    for c in cells:
        v = c.variant
        if v is None:
            planned.append((c.hardware.label, str(c.context), "nothing fits: " + rejection_text(c.plan)))
            continue
        per_gpu, itl = speed_text(v)
        planned.append(
            (
                c.hardware.label,
                str(c.context),
                f"`{v.model_id}`",
                shape_of(c),
                str(v.gpus_per_replica),
                str(v.capacity_replicas),
                seqs_text(v),
                tokens(v.kv_cache_tokens),
                f"{v.max_concurrency:.1f}",
                per_gpu,
                itl,
            )
        )
    out += _ragged_table(
        (
            "machine",
            "context",
            "checkpoint",
            "shape",
            "GPUs / replica",
            "replicas it holds",
            "max-num-seqs",
            "KV tokens / replica",
            "full-length seqs / replica",
            "tok/s / GPU",
            "ITL ms",
        ),
        planned,
    )
    out += ["", "vLLM arguments as rendered:", ""]
    for c in cells:
        if c.argv:
            out.append(f"- {c.hardware.label}, {c.context}: `{shlex.join(c.argv)}`")
    out += [
        "",
        "Against the published recipes (the recipe's shape 'planned here' is the same request with its "
        "shape pinned; 'plan Nx': the plan's predicted tokens/s per GPU over the recipe shape's):",
        "",
    ]
    out += [f"- {c.hardware.label}, {c.context}: {compare_line(report, c)}" for c in cells]
    for i, r in published:
        if i in report.own_hardware:
            out.append(f"- {r.key} on its own hardware ({r.hardware}): {own_text(report.own_hardware[i])}")
    return [*out, ""]


def _ragged_table(head: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    """A table whose 'nothing fits' rows span the remaining columns."""
    padded = [row if len(row) == len(head) else (*row, *([""] * (len(head) - len(row)))) for row in rows]
    return table(head, padded)


def compare_line(report: Report, cell: Cell) -> str:
    """One line per cell: what the plan serves, then each published recipe for the machine against it."""
    v = cell.variant
    if v is None:
        head = "nothing fits"
    else:
        per_gpu, _ = speed_text(v)
        head = (
            f"plan {shape_of(cell)} x{v.capacity_replicas}, {v.max_concurrency:.1f} seqs, {per_gpu} tok/s/GPU"
        )
    recipes = cell.recipes()
    if not recipes:
        return head + "; no published recipe here for this machine."
    return head + ". " + "; ".join(compare(report, cell, r) for r in recipes) + "."


def compare(report: Report, cell: Cell, recipe: Recipe) -> str:
    """The recipe against the plan: where the shapes part, and the recipe's shape planned here."""
    assert recipe.shape is not None
    pinned = report.pinned[(PUBLISHED.index(recipe), cell.model.id, cell.hardware.label, cell.request.key)]
    text = f"**{recipe.key}** {recipe.shape.text}: "
    v = cell.variant
    if v is not None:
        differ = shape_diff(v, recipe.shape)
        text += "the same shape" if not differ else "differs in " + ", ".join(differ)
        text += ", "
    return text + pinned_text(pinned, v) + why(cell, recipe.shape, pinned)


def shape_diff(v: Variant, s: Shape) -> list[str]:
    """Where the plan and the recipe part, as 'what the plan has (the recipe's)'; what the recipe does not
    state is not compared."""
    ours_ep = v.enable_expert_parallel or v.data_parallel_size > 1
    pairs: list[tuple[str, object, object]] = [
        ("precision", v.quantization, s.precision),
        ("TP", v.tensor_parallel_size, s.tp),
        ("PP", v.pipeline_parallel_size, s.pp),
        ("DP", v.data_parallel_size, s.dp),
        ("DCP", v.decode_context_parallel_size, s.dcp),
        ("KV", v.kv_cache_dtype, s.kv_cache_dtype),
    ]
    if s.mtp is not None:
        pairs.append(("MTP", v.speculative_tokens, s.mtp))
    if s.ep is not None:
        pairs.append(("EP", "on" if ours_ep else "off", "on" if s.ep or s.dp > 1 else "off"))
    return [f"{name} {ours} (recipe {theirs})" for name, ours, theirs in pairs if ours != theirs]


def short_reason(text: str) -> str:
    """A rejection without its list of fixes."""
    return re.split(r"\. (?:fix|cheapest fix): |; Cheapest ", text)[0]


def pinned_text(pinned: Pinned, ours: Variant | None) -> str:
    """The recipe's shape planned for the request, against the plan's figures."""
    pv = pinned.variant
    if pv is None:
        return "does not plan here: " + short_reason(pinned.refused or "does not fit")
    per_gpu, _ = speed_text(pv)
    held = f"{pv.max_concurrency:.1f} seqs"
    if pinned.min_concurrency < MIN_CONCURRENCY:
        held = f"only {held} (< {MIN_CONCURRENCY})"
    text = f"planned here {held}, {per_gpu} tok/s/GPU"
    if ours is not None and ours.speed is not None and pv.speed is not None:
        ratio = ours.speed.output_tokens_per_s_per_gpu / pv.speed.output_tokens_per_s_per_gpu
        text += f" (plan {ratio:.2f}x)"
    return text


def why(cell: Cell, shape: Shape, pinned: Pinned) -> str:
    """The plan's own word on the recipe's shape: the ranking's verdict where it ranked it."""
    v, pv = cell.variant, pinned.variant
    if v is None or pv is None or pinned.min_concurrency < MIN_CONCURRENCY:
        return ""
    if shape.kv_cache_dtype != v.kv_cache_dtype or shape.memory_utilization is not None:
        return ""  # the ranking's shape of that name ran with other memory settings than the recipe's
    target = chosen_of(pv)
    ranked = next((c for c in v.considered if c.shape == target.shape), None)
    if ranked is None:
        return ", not among the shapes the plan ranked"
    return f", ranked: {ranked.lost}" if ranked.lost and not ranked.chosen else ""


def own_text(pinned: Pinned) -> str:
    if pinned.variant is None:
        return "the planner refuses the recipe's shape: " + (pinned.refused or "does not fit")
    return "the recipe's shape " + pinned_text(pinned, None)


def dense_section(report: Report) -> list[str]:
    out = [
        "## The dense GLM-4 models",
        "",
        "Request 'chat' only; no published recipe is compared.",
        "",
    ]
    rows: list[tuple[str, ...]] = []
    for c in report.dense:
        v = c.variant
        if v is None:
            rows.append((c.model.name, c.hardware.label, "nothing fits: " + rejection_text(c.plan)))
            continue
        per_gpu, itl = speed_text(v)
        rows.append((c.model.name, c.hardware.label, shape_of(c), str(v.capacity_replicas), per_gpu, itl))
    out += _ragged_table(("model", "machine", "shape", "replicas it holds", "tok/s / GPU", "ITL ms"), rows)
    return [*out, ""]


# --------------------------------------------------------------------------------------------
# findings: checks over the results, each printed only while it holds
# --------------------------------------------------------------------------------------------

Finding = Callable[[Report], str | None]


def grouped(items: Iterable[tuple[str, str]]) -> str:
    """(model, text) pairs as 'A, B text; C text': models that share a text named together."""
    texts: dict[str, list[str]] = {}
    for name, text in items:
        texts.setdefault(text, []).append(name)
    return "; ".join(f"{', '.join(names)} {text}" for text, names in texts.items())


def finding_int4_before_fp8_kv(report: Report) -> str | None:
    items = []
    for c in report.cells:
        v = c.variant
        if v is None or v.quantization not in ("int4", "int8"):
            continue
        alt = report.what_if_fp8_kv[c.key]
        alt_text = "nothing fits either"
        if alt.fits:
            av = alt.variants[0]
            alt_text = f"`{av.model_id}` {chosen_of(av).shape}, {speed_text(av)[0]} tok/s per GPU"
        items.append(
            (
                c.model.name,
                f"{c.where}: {shape_of(c)} (`{v.model_id.split('/')[0]}`), {speed_text(v)[0]} tok/s per GPU; "
                f"with `kvCacheDtype: fp8`: {alt_text}",
            )
        )
    if not items:
        return None
    return (
        "**`quantization: auto` serves a third-party int4 checkpoint before it tries an fp8 KV cache.** "
        "Where bf16 and fp8 weights cannot hold the request, the planner falls to a community AWQ checkpoint "
        "(the README: int4/int8 are 'only ever chosen to fit'), without MTP; it never considers "
        "`--kv-cache-dtype fp8`, which published deployments use (vllm-project/recipes pull request 893 on "
        "8 x H200, the mech-util GLM-4.6 runs). With two nodes allowed it still serves int4 on one node "
        "rather than fp8 over two (the GLM-4.5 card's full-context answer is FP8 on 16 x H100): "
        + grouped(items)
        + "."
    )


def finding_fp8_kv_gain(report: Report) -> str | None:
    items = []
    for c in report.cells:
        v = c.variant
        alt = report.what_if_fp8_kv.get(c.key)
        if v is None or v.speed is None or v.quantization in ("int4", "int8") or alt is None:
            continue  # int4 cells: the finding above
        av = alt.variants[0] if alt.fits else None
        if av is None or av.speed is None:
            continue
        gain = av.speed.output_tokens_per_s_per_gpu / v.speed.output_tokens_per_s_per_gpu
        if gain < 1.2:
            continue
        shape = chosen_of(av).shape
        change = "the same shape" if shape == shape_of(c) else shape
        items.append(
            (
                c.model.name,
                f"{c.where}: {change}, {av.max_concurrency:.1f} seqs (not {v.max_concurrency:.1f}), "
                f"{gain:.2f}x the tokens/s per GPU",
            )
        )
    if not items:
        return None
    return (
        "**An fp8 KV cache is a knob the ranking does not try.** `kvCacheDtype` stays what the spec says "
        "(`auto`: the model's dtype; GLM-5.x's latent at 1,152 bytes per token and layer instead of the "
        "656-byte `fp8_ds_mla` record, GQA at twice fp8's bytes). Planned again with `kvCacheDtype: fp8`, "
        "these cells are predicted at least 20 % faster per GPU (where nothing fits, not re-planned): "
        + grouped(items)
        + ". Whether the accuracy cost is acceptable is the user's call, as `allowedQuantizations` is for "
        "the weights; a field that allows it, and the ranking trying it, would serve the published shape "
        "here."
    )


def finding_dp_only_when_needed(report: Report) -> str | None:
    items = []
    for c in report.cells:
        v, alt = c.variant, report.what_if_dp.get(c.key)
        if v is None or v.speed is None or alt is None or not alt.fits:
            continue
        av = alt.variants[0]
        if av.speed is None or av.data_parallel_size == 1:
            continue
        gain = av.speed.output_tokens_per_s_per_gpu / v.speed.output_tokens_per_s_per_gpu
        if gain >= 1.2:
            items.append(
                (
                    c.model.name,
                    f"{c.where}: served {shape_of(c)} at {speed_text(v)[0]} tok/s per GPU; pinned "
                    f"{chosen_of(av).shape} {speed_text(av)[0]} ({gain:.2f}x)",
                )
            )
    one_gpu = {c.model.id for c in report.cells if c.variant is not None and c.variant.gpus_per_replica == 1}
    served_dp = [
        (c.model.name, f"{c.where}: {shape_of(c)}, {speed_text(c.variant)[0]} tok/s per GPU")
        for c in report.cells
        if c.variant is not None and c.variant.data_parallel_size > 1 and c.model.id in one_gpu
    ]
    if not items:
        return None
    text = (
        "**Data-parallel attention is offered only where one GPU cannot hold the request, yet the ranking's "
        "own model predicts it faster wherever it is pinned.** With `gpu.dataParallelSize` set to the "
        "node's GPUs, one-GPU replicas become DP + EP replicas predicted well above the independent replicas "
        "served: " + grouped(items) + "."
    )
    if served_dp:
        text += " Where the request needs several GPUs the planner does serve it: " + grouped(served_dp) + "."
    return (
        text + " Either the rule leaves throughput on the table or the DP + EP speed model (shared expert "
        "reads, a modelled all-to-all, never measured on a multi-GPU machine) is optimistic: measure before "
        "changing either (issue 49, item 7)."
    )


def finding_knobs_over_fp8(report: Report) -> str | None:
    items = []
    for c in report.cells:
        v, chosen = c.variant, c.chosen
        if v is None or chosen is None or chosen.speed is None:
            continue
        if chosen.gpu_memory_utilization is None and chosen.max_num_batched_tokens is None:
            continue
        plain = [
            x
            for x in v.considered
            if x.gpu_memory_utilization is None
            and x.max_num_batched_tokens is None
            and x.speed is not None
            and x.tokens_per_s_per_gpu >= 0.95 * chosen.tokens_per_s_per_gpu
            and x.max_concurrency > v.max_concurrency
        ]
        if plain:
            x = plain[0]
            items.append(
                (
                    c.model.name,
                    f"{c.where}: serves {chosen.shape} ({v.max_concurrency:.1f} seqs, {speed_text(v)[0]} "
                    f"tok/s per GPU) over {x.shape} ({x.max_concurrency:.1f} seqs, "
                    f"{x.tokens_per_s_per_gpu:,.0f})",
                )
            )
    if not items:
        return None
    return (
        "**Engine knobs do not count against a shape.** The ranking keeps the simpler shape (the higher "
        "precision, no DCP or MTP) unless another wins by 5 %, even when the simpler one reaches "
        "`minConcurrency` only with `--gpu-memory-utilization 0.95` and a smaller batched-token budget "
        "(less headroom, slower prefill under load) while the other holds more sequences at vLLM's defaults "
        "and the same predicted speed: " + grouped(items) + ". A policy question rather than a bug; the "
        "published GLM-4.x recipes serve the FP8 checkpoint at vLLM's defaults."
    )


_REASON_CONCURRENCY = re.compile(r"(\d+\.\d+) concurrent \d+-token sequences \(>= minConcurrency (\d+)\)")


def finding_dp_reason_text(report: Report) -> str | None:
    hits = []
    for c in report.cells:
        v = c.variant
        if v is None or v.data_parallel_size == 1:
            continue
        m = _REASON_CONCURRENCY.search(v.reason)
        if m and float(m.group(1)) < float(m.group(2)):
            hits.append(f"{c.model.name} {c.where} ('{m.group(0)}')")
    if not hits:
        return None
    shown = "; ".join(hits[:4]) + ("; and more" if len(hits) > 4 else "")
    return (
        "**The reason of a data-parallel variant reads as if it failed its own check.** It prints one "
        "rank's full-length sequences against the replica's `minConcurrency` while `max_concurrency` and "
        "the KV tokens are the replica's (ranks x one rank's): " + shown + ". A text bug "
        "(status.plan and Events carry it), not a planning one."
    )


def finding_no_mtp(report: Report) -> str | None:
    names = sorted({c.model.name for c in report.cells if c.model.architecture.num_nextn_predict_layers == 0})
    if not names:
        return None
    return (
        "**MTP is never planned for " + ", ".join(names) + ".** The catalog's config has no "
        "`num_nextn_predict_layers`, so `speculativeDecoding: Auto` has no drafter to offer; the catalog's "
        "own KV-layout source for GLM-5.3-Flash names a drafter group in vLLM's hybrid cache. A catalog gap "
        "to check against the released config.json, not a ranking bug."
    )


def finding_multi_node(report: Report) -> str | None:
    items = []
    margin_mtp = False
    for c in report.cells:
        v = c.variant
        if c.hardware.nodes == 1 or v is None or v.nodes_per_replica == 1 or v.speed is None:
            continue
        one_node = report.cell(c.model.id, "8 x H200", c.request.key)
        if one_node.variant is None or one_node.variant.speed is None:
            continue
        ratio = one_node.variant.speed.output_tokens_per_s_per_gpu / v.speed.output_tokens_per_s_per_gpu
        items.append(
            (
                c.model.name,
                f"at {c.context}: {shape_of(c)}, {speed_text(v)[0]} tok/s per GPU, ITL {speed_text(v)[1]} ms "
                f"({ratio:.1f}x less per GPU than {shape_of(one_node)} on one 8 x H200)",
            )
        )
        margin_mtp |= v.speculative_tokens == 0 and any(
            x.speculative_tokens > 0 and "margin" in x.lost for x in v.considered
        )
    if not items:
        return None
    mtp = (
        " MTP is dropped there because it gains less than the 5 % margin over the simpler shape."
        if margin_mtp
        else ""
    )
    return (
        "**Across two H100 nodes the only split is pipeline parallelism.** Data-parallel attention is "
        "planned on one node only and tensor parallelism never spans nodes, so the flagship models get "
        "TP 8 x PP 2 (with DCP) at a fraction of the per-GPU throughput of one H200 node." + mtp + " Experts "
        "serve DeepSeek-style MLA MoE models on two 8-GPU nodes with DP 16 + EP or TP 16 "
        f"({FROM_MEMORY}); neither is planned: " + grouped(items) + "."
    )


def finding_own_hardware(report: Report) -> str | None:
    parts = []
    for i, pinned in report.own_hardware.items():
        if pinned.variant is not None:
            continue
        r = PUBLISHED[i]
        text = f"{link(r)} ({r.hardware}, {r.shape.text if r.shape else ''}): {short_reason(pinned.refused)}"
        if i in report.same_memory:
            twin, on_twin = report.same_memory[i]
            text += f"; the same shape on {twin.label}, the same memory per GPU: " + (
                "plans" if on_twin.variant is not None else short_reason(on_twin.refused)
            )
        parts.append(text)
    if not parts:
        return None
    return (
        "**A published deployment the planner refuses on its own hardware.** " + "; ".join(parts) + ". "
        "Nothing on this machine shows the article's command running; the planner says it cannot start "
        "as written (the catalog's minimum compute capability for the sparse-attention models may be "
        "stricter than vLLM's, which only a start-up on an A100 would tell)."
    )


def finding_reason_names_mtp3(report: Report) -> str | None:
    hits = sorted(
        {
            f"{c.model.name} on {c.hardware.label}"
            for c in report.cells
            if c.variant is not None
            and c.variant.speculative_tokens != 3
            and re.search(r"TP=\d+( x PP=\d+)? \+ MTP=3 \w+: ", c.variant.reason)
        }
    )
    if not hits:
        return None
    return (
        "**The 'why not a smaller shape' part of a reason names an MTP 3 candidate** (for example "
        "'TP=4 + MTP=3 fp8: weights ... leave no KV cache') where the plan serves MTP 0 or 1: it quotes the "
        "last smaller candidate tried, which is the MTP 3 variant. Cosmetic, but it reads as if MTP 3 were "
        "the alternative. Seen in: " + ", ".join(hits[:6]) + (", ..." if len(hits) > 6 else "") + "."
    )


FINDINGS: tuple[Finding, ...] = (
    finding_int4_before_fp8_kv,
    finding_fp8_kv_gain,
    finding_multi_node,
    finding_dp_only_when_needed,
    finding_knobs_over_fp8,
    finding_no_mtp,
    finding_own_hardware,
    finding_dp_reason_text,
    finding_reason_names_mtp3,
)


def findings_section(report: Report) -> list[str]:
    texts = [text for check in FINDINGS if (text := check(report))]
    out = ["## Findings", ""]
    if not texts:
        return [*out, "None of the checks holds today.", ""]
    for n, text in enumerate(texts, 1):
        out += [f"{n}. {text}", ""]
    return out


def render(report: Report) -> str:
    lines = [*header(report), *summary(report)]
    for model in _moe_models(report):
        lines += model_section(report, model)
    lines += dense_section(report)
    lines += findings_section(report)
    lines += ["## Named but not transcribed", ""]
    lines += [f"- {text}" for text in NOT_TRANSCRIBED]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    text = render(generate())
    elapsed = time.perf_counter() - start
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    print(f"generated in {elapsed:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
