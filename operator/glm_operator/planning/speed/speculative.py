"""What MTP speculative decoding buys (pure): the tokens a step emits, from the draft acceptance.

With ``k`` draft tokens the model's MTP layer proposes ``k`` tokens per sequence (``k`` passes of that one
layer), and the next step of the target model verifies ``1 + k`` tokens per sequence at once. A step emits
the tokens up to the first rejected draft plus one::

    tokens per step E = 1 + p_1 + ... + p_k

``p_i`` is the share of drafts whose position ``i`` was accepted (vLLM's "Per-position acceptance rate",
which counts position ``i`` only when 1 .. i-1 were accepted too). A user's ``acceptanceRate`` ``a`` is the
chance that a draft is accepted once those before it were, the same at every position (the usual model
of speculative decoding): ``p_i = a^i``. Measured with one draft token, it is vLLM's "Avg Draft acceptance
rate". The decode step then costs the verify pass (``1 + k`` query tokens per
sequence: more GEMM rows and experts touched, the same KV read) plus ``k`` drafter passes
(:func:`glm_operator.planning.speed.performance.draft_pass_s`), and the inter-token latency is
``step / E``.

The published figures below are where the planner starts without a measured rate. GLM-4.x's MTP layer was
trained for the next token only: positions after the first fall off fast in vLLM, so the figures make
``Auto`` draft one token there, as the published recipes do (HF GLM-4.7 card, vLLM's GLM recipe: MTP 1).
GLM-5.x's later drafts are still accepted now and then (0.30, 0.10): where a step is bound by its weight
reads, verifying them costs little and ``Auto`` drafts two or three (docs/recipes.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from glm_operator.catalog.models import ModelArchitecture


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance of draft tokens and where the figures come from."""

    per_position: tuple[float, ...]
    source: str

    def expected_tokens(self, draft_tokens: int) -> float:
        """Tokens one step emits per sequence with ``draft_tokens`` drafts (positions past the table: 0)."""
        return 1.0 + sum(self.per_position[: max(0, draft_tokens)])

    def rate(self, draft_tokens: int) -> float:
        """vLLM's average draft acceptance rate at ``draft_tokens`` drafts (accepted / drafted)."""
        if draft_tokens <= 0:
            return 0.0
        return (self.expected_tokens(draft_tokens) - 1.0) / draft_tokens


#: Published per-position acceptance by ``model_type`` (vLLM on GPUs unless said).
PUBLISHED_ACCEPTANCE: dict[str, Acceptance] = {
    # GLM-4.5/4.6/4.7: 0.84 for one draft on GLM-4.5-Air (ikawrakow/ik_llama.cpp#1992, main branch);
    # "the second draft token received near 0 accept rate" (vllm-project/vllm#25993, GLM-4.6 on 8 x H200)
    "glm4_moe": Acceptance((0.80, 0.05), "GLM-4.x: vllm-project/vllm#25993, ikawrakow/ik_llama.cpp#1992"),
    # GLM-4.7-Flash carries the same single next-token layer
    "glm4_moe_lite": Acceptance(
        (0.80, 0.05), "GLM-4.x: vllm-project/vllm#25993, ikawrakow/ik_llama.cpp#1992"
    ),
    # GLM-5: mean acceptance length 1.95 with one draft on gsm8k (vllm-project/vllm#34385, 4 x B300), so
    # 0.95 on math prompts; 0.90 taken for chat. Drafts after the first collapse in vLLM's DeepSeek MTP
    # path, the third ("position 2", counted from 0) ~10 % (vllm-project/vllm#46075, closed unmerged);
    # the second [inferred] between them
    "glm_moe_dsa": Acceptance(
        (0.90, 0.30, 0.10), "GLM-5.x: vllm-project/vllm#34385, vllm-project/vllm#46075"
    ),
}

#: Where the model type has no published figure: a next-token layer's first draft, little after it
UNKNOWN_ACCEPTANCE = Acceptance((0.70, 0.10), "no published figure for the model type: assumed")


def acceptance_for(arch: ModelArchitecture, draft_tokens: int, measured_rate: float | None) -> Acceptance:
    """The acceptance the planner predicts with: the user's measured rate where given (``p_i = rate^i`` over
    ``draft_tokens`` positions), else the published figures for the model type."""
    if measured_rate is not None:
        rates = tuple(measured_rate ** (i + 1) for i in range(max(1, draft_tokens)))
        return Acceptance(rates, "spec.speculativeDecoding.acceptanceRate")
    return PUBLISHED_ACCEPTANCE.get(arch.model_type, UNKNOWN_ACCEPTANCE)
