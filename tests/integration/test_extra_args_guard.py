"""The extraArgs guard on a real kube-apiserver: vLLM's other spellings of managed flags are refused
by the CRD's CEL rule (naming the field), as by the pydantic models; ordinary vLLM flags pass; the
rules over the whole list (its structure, the default release's flags) refuse exactly what the
models refuse, naming the same entry.

The spellings come from the attack run on the previous guard (``-tp=8``, ``-pp 2``, ``-q fp8``,
underscores, ``--config``, ``--data-parallel-size``); the vLLM contract test proves each is a real
vLLM spelling and that the generated list equals vLLM's parser.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from glm_operator.api import spec_from_dict
from tests.harness.cluster import SessionCluster
from tests.harness.hostile import create

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
    # the drafter is planned from spec.speculativeDecoding
    ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
    ["--spec-tokens=2"],
]
ACCEPTED = [
    ["--enable-prefix-caching"],
    ["--max-num-batched-tokens=8192"],
    ["--enable-expert-parallel"],
    ["--tool-call-parser", "hermes", "--enable-auto-tool-choice"],
    ["--trust-remote-code", "--seed", "0"],
    ["--kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'],
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


# Entries of every kind the rules tell apart: a switch, flags taking one, an optional, several
# values, a JSON field, a glued value, -O without and with its level, a flag this release lacks,
# a value, a negative integer (a value for argparse), a name past what the rules read.
TOKENS = [
    "--enable-prefix-caching",
    "--seed",
    "--hf-token",
    "--lora-modules",
    "--compilation-config.mode",
    "--seed=1",
    "-O",
    "-O3",
    "--nope",
    "v",
    "-1",
    "--" + "x" * 70 + ".y",  # a name longer than the rules read
]


def _python_verdict(extra_args: list[str], image: str | None) -> tuple[bool, str | None]:
    """(refused, the index the models name) for ``serving.extraArgs``."""
    serving: dict[str, Any] = {"extraArgs": extra_args, **({"image": image} if image else {})}
    try:
        spec_from_dict({"model": {"id": "zai-org/GLM-4.5-Air"}, "serving": serving})
    except ValidationError as exc:
        named = re.search(r"extraArgs\[\d+\]", str(exc))
        return True, named.group() if named else None
    return False, None


@pytest.mark.parametrize(
    "image", [None, "vllm/vllm-openai:v0.99.0"], ids=["default-release", "other-release"]
)
def test_the_crd_and_the_models_agree_on_every_short_list(
    cluster: SessionCluster,
    namespace: str,  # noqa: F811
    image: str | None,
) -> None:
    """Every list of up to three entries over TOKENS: the apiserver refuses exactly what the models
    refuse, naming the same entry. With an image of another release, unknown flags pass and only the
    structure is checked."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    lists = [list(c) for n in (1, 2, 3) for c in itertools.product(TOKENS, repeat=n)]
    disagree, refused = [], 0
    try:
        for i, extra_args in enumerate(lists):
            serving: dict[str, Any] = {"extraArgs": extra_args, **({"image": image} if image else {})}
            obj = manifest({"model": {"id": "zai-org/GLM-4.5-Air"}, "serving": serving}, name=f"p{i}")
            try:
                create(api, namespace, obj)
                apiserver: tuple[bool, str] = (False, "")
            except ApiException as exc:
                apiserver = (True, json.loads(exc.body).get("message", ""))
            python_refused, entry = _python_verdict(extra_args, image)
            refused += python_refused
            if apiserver[0] != python_refused or (entry is not None and entry not in apiserver[1]):
                disagree.append((extra_args, python_refused, entry, apiserver[1][:300]))
    finally:
        api.close()
    print(f"\n{len(lists)} lists ({image or 'default image'}): {refused} refused by both")
    assert not disagree, disagree[:10]
    assert 0 < refused < len(lists)
