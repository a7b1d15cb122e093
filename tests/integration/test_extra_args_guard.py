"""The extraArgs guard on a real kube-apiserver: vLLM's other spellings of managed flags are refused
by the CRD's CEL rule (naming the field), as by the pydantic models; ordinary vLLM flags pass.

The spellings come from the attack run on the previous guard (``-tp=8``, ``-pp 2``, ``-q fp8``,
underscores, ``--config``, ``--data-parallel-size``); the vLLM contract test proves each is a real
vLLM spelling and that the generated list equals vLLM's parser.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from glm_operator.api import spec_from_dict
from tests.harness.cluster import SessionCluster

from .test_api_crd import dry_run, manifest, namespace  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

REFUSED = [
    ["-tp=8"],
    ["-tp", "8"],
    ["-pp", "2"],
    ["-q", "fp8"],
    ["-qfp8"],
    ["--tensor_parallel_size=8"],
    ["--tensor-parallel_size", "8"],
    ["--max_model_len=1000000"],
    ["--config", "/etc/vllm.yaml"],
    ["--data-parallel-size", "4"],
    ["-dp=4"],
    ["--kv-cache-memory-bytes=10G"],
    ["--served_model_name", "other"],
    ["--port=9000"],
    ["--uds", "/tmp/vllm.sock"],
]
ACCEPTED = [
    ["--enable-prefix-caching"],
    ["--max-num-batched-tokens=8192"],
    ["--enable-expert-parallel"],
    ["--tool-call-parser", "hermes", "--enable-auto-tool-choice"],
    ["--trust-remote-code", "--seed", "0"],
    ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
]


def spec_with(extra_args: list[str]) -> dict[str, Any]:
    return {"model": {"id": "zai-org/GLM-4.5-Air"}, "serving": {"extraArgs": extra_args}}


@pytest.mark.parametrize("extra_args", REFUSED, ids=[" ".join(a) for a in REFUSED])
def test_managed_flag_spellings_are_refused_at_apply(
    cluster: SessionCluster,
    namespace: str,  # noqa: F811
    extra_args: list[str],
) -> None:
    result = dry_run(cluster, namespace, manifest(spec_with(extra_args)))
    assert result.returncode != 0, f"accepted: {extra_args}"
    assert "spec.serving.extraArgs" in result.stderr and "extraArgs must not set" in result.stderr, (
        result.stderr
    )
    with pytest.raises(ValidationError, match="extraArgs must not set"):
        spec_from_dict(spec_with(extra_args))


@pytest.mark.parametrize("extra_args", ACCEPTED, ids=[" ".join(a) for a in ACCEPTED])
def test_ordinary_vllm_flags_are_accepted(
    cluster: SessionCluster,
    namespace: str,  # noqa: F811
    extra_args: list[str],
) -> None:
    result = dry_run(cluster, namespace, manifest(spec_with(extra_args)))
    assert result.returncode == 0, result.stderr
    spec_from_dict(spec_with(extra_args))


def test_the_guard_holds_the_maximum_extra_args_within_the_cel_cost_budget(
    cluster: SessionCluster,
    namespace: str,  # noqa: F811
) -> None:
    """64 arguments of 1,024 characters (the schema's bounds) are evaluated, not refused for cost."""
    long_args = [f"--override-generation-config={'x' * 990}{i:04d}" for i in range(64)]
    result = dry_run(cluster, namespace, manifest(spec_with(long_args)))
    assert result.returncode == 0, result.stderr
