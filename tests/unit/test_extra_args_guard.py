"""The extraArgs guard without vLLM: the spellings from the attack run, and ordinary flags.

The contract test (tests/contract) proves the generated list is vLLM's own and checks every
spelling against vLLM's parser; tests/integration/test_extra_args_guard.py runs the CEL form on a
real apiserver.
"""

from __future__ import annotations

import pytest

from glm_operator.api import vllm_flags
from glm_operator.api.vllm_args import MANAGED_DESTS, managed_flag, managed_flag_cel_rule, sets_flag


@pytest.mark.parametrize(
    "arg,canonical",
    [
        ("-tp=8", "--tensor-parallel-size"),
        ("-tp", "--tensor-parallel-size"),
        ("-t", "--tensor-parallel-size"),  # argparse takes a unique prefix of a short option
        ("-pp", "--pipeline-parallel-size"),
        ("-q", "--quantization"),
        ("-qfp8", "--quantization"),  # one-letter alias glued to its value
        ("--tensor_parallel_size=8", "--tensor-parallel-size"),
        ("--max_model_len=1000000", "--max-model-len"),
        ("--max-model=1000", "--max-model-len"),  # unique prefix of a long option
        ("--config", "--config"),
        ("--data-parallel-size", "--data-parallel-size"),
        ("-dp=2", "--data-parallel-size"),
        ("--device-memory-utilization=0.99", "--gpu-memory-utilization"),
        ("-n2", "--nnodes"),
        ("--uds=/tmp/s", "--uds"),
    ],
)
def test_managed_spellings_are_refused(arg: str, canonical: str) -> None:
    assert managed_flag(arg) == canonical


@pytest.mark.parametrize(
    "arg",
    [
        "--enable-prefix-caching",
        "--max-num-batched-tokens=8192",
        "--enable-expert-parallel",
        "--tool-call-parser",
        "-dc",  # another option (--diffusion-config) although -dcp is managed
        "fp8",  # a value, never a flag
        "-O3",
        "--",
    ],
)
def test_ordinary_arguments_pass(arg: str) -> None:
    assert managed_flag(arg) is None


def test_sets_flag_knows_underscores_and_equals() -> None:
    assert sets_flag(["--tool_call_parser=hermes"], "--tool-call-parser")
    assert not sets_flag(["--tool-call-parser-x"], "--tool-call-parser")


def test_generated_list_covers_the_policy_and_the_cel_rule_uses_it() -> None:
    assert vllm_flags.VLLM_VERSION == "0.33.0"
    assert {"--tensor-parallel-size", "--config", "--data-parallel-size"} <= set(vllm_flags.MANAGED_OPTIONS)
    assert len(MANAGED_DESTS) >= 30
    rule = managed_flag_cel_rule()
    assert rule.startswith("!self.startsWith('-')") and "'-tp'" in rule and "'-dc'" in rule
    assert "replace('_', '-')" in rule
