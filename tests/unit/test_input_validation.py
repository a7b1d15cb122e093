"""The validators added after the hostile-input review: exact messages, and the CRD carries the same rules.

Image references, model sources, vLLM arguments, env values and inline configs that cannot work
are refused naming the field and the fix (tests/integration/test_hostile_specs.py sends the same
cases to a real apiserver); the planner's "does not fit" rejections name the field to change and the fix.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import pytest
import yaml
from devtools import crd
from pydantic import ValidationError

from glm_operator.api import kube_validation, safe_text, spec_from_dict, v1alpha1, vllm_args
from glm_operator.api.gateway import GLMGatewaySpec
from glm_operator.api.inline_config import InlineModelConfig
from glm_operator.catalog.models import _data_text
from glm_operator.desired import compute_desired
from tests.harness.hostile import INLINE_CONFIG

from .test_desired import body, observe

IMAGE_FIX = (
    "must be a container image reference [registry[:port]/]repository[:tag][@sha256:digest]: the "
    "repository in lowercase letters and digits ('.', '_' or '-' between them), a tag of at most 128 "
    "letters, digits, '_', '.' or '-', a digest of 'sha256:' and 64 lowercase hex digits, no whitespace; "
    "for example docker.io/vllm/vllm-openai:v0.11.0"
)
SOURCE_FIX = (
    "source must be hf://<org>/<repo>[@<revision>], pvc://<claim>[/<path>] or s3://<bucket>[/<prefix>]: "
    "repo names of letters, digits and '_' with single '.' or '-' between them, a revision (branch, tag "
    "or commit) of such names separated by '/', paths without whitespace, control characters or empty "
    "segments ('//')"
)
MODEL_PARENT = v1alpha1.MODEL_SOURCE_PARENT_MESSAGE
FLAG_FIX = (
    "a flag must be spelled as vLLM spells it: --<name> or --<name>=<value>, the name in lower-case "
    "letters, digits, '-' or '_' (-O<level> for the optimization level), no whitespace; give a flag and "
    'its value as two entries ("--max-num-batched-tokens", "8192") or as one with "=" '
    '("--max-num-batched-tokens=8192")'
)


def error_of(spec: dict[str, Any]) -> tuple[str, str]:
    """(location, message) of the first error of ``spec``, as compute_desired reports it."""
    with pytest.raises(ValidationError) as info:
        spec_from_dict(spec)
    first = info.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


def serving(**fields: Any) -> dict[str, Any]:
    return {"model": {"id": "zai-org/glm-4-9b-chat"}, "serving": fields}


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:v0.11.0",
        "docker.io/library/haproxy:2.6",
        "registry.example.com:5000/vllm/vllm-openai@sha256:" + "a" * 64,
        "localhost:5000/team/vllm__x:tag_1.0-rc",
        "Registry.Example.com/vllm/vllm-openai:Latest",  # a host may have capitals, a tag too
        "[::1]:5000/vllm",
    ],
)
def test_image_references_the_kubelet_pulls_are_accepted(image: str) -> None:
    spec_from_dict(serving(image=image))
    GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "keys"}, "image": image})


@pytest.mark.parametrize(
    "image",
    [
        "UPPER/Case:tag",  # repository names are lowercase
        "name@sha256:zzz",  # a digest is sha256: and 64 lowercase hex digits
        "name@sha256:" + "A" * 64,
        "name@md5:" + "a" * 32,
        "vllm/vllm-openai:v0.11.0\n",
        "vllm//openai",
        "vllm/vllm-openai:" + "t" * 129,
        "-vllm/openai",
    ],
)
def test_image_references_the_kubelet_refuses_are_refused(image: str) -> None:
    quoted = repr(image[:80])  # long values are cut in the message
    assert error_of(serving(image=image)) == ("serving.image", f"Value error, image {quoted} {IMAGE_FIX}")
    with pytest.raises(ValidationError, match="must be a container image reference"):
        GLMGatewaySpec.model_validate({"apiKeys": {"secretName": "keys"}, "image": image})


@pytest.mark.parametrize(
    "source",
    [
        "hf://zai-org/GLM-4.5-Air@main",
        "hf://zai-org/GLM-4.5-Air@refs/pr/12",
        "hf://zai-org/GLM-4.5-Air@0123456789abcdef0123456789abcdef01234567",
        "hf://glm_4-9b",
        "pvc://models",
        "pvc://models/glm/4.5/",
        "s3://my-bucket/a..b/glm",
    ],
)
def test_model_sources_are_accepted(source: str) -> None:
    spec_from_dict({"model": {"id": "zai-org/GLM-4.5-Air", "source": source}})


@pytest.mark.parametrize(
    "source,message",
    [
        ("hf://zai-org/glm@../../x", MODEL_PARENT),
        ("pvc://models/../../etc", MODEL_PARENT),
        ("s3://bucket/a/..", MODEL_PARENT),
        ("hf://zai-org/glm@main//x", SOURCE_FIX),
        ("hf://zai-org/glm@-x", SOURCE_FIX),  # would read as a vLLM flag
        ("hf://zai-org/glm..4", SOURCE_FIX),
        ("hf://zai-org/glm--4", SOURCE_FIX),
        ("hf://zai-org/glm@v1 ", SOURCE_FIX),
        ("pvc://models/a//b", SOURCE_FIX),
    ],
)
def test_model_sources_that_traverse_or_a_hub_cannot_have_are_refused(source: str, message: str) -> None:
    assert MODEL_PARENT == (
        "source must not contain a '..' segment (path traversal): give the path inside the claim or bucket"
    )
    spec = {"model": {"id": "zai-org/GLM-4.5-Air", "source": source}}
    assert error_of(spec) == ("model.source", f"Value error, {source!r}: {message}")


@pytest.mark.parametrize(
    "args",
    [
        ["--enable-prefix-caching", "--max-num-batched-tokens", "8192"],
        ["--tool_call_parser=hermes"],
        ["-O3"],
        ["--compilation-config.cudagraph_capture_sizes+=1,2"],
        ["--seed", "-1"],
        ["--chat-template", "{% for m in messages %}\n\t{{ m.content }}\n{% endfor %}"],
        ["--kv-transfer-config", '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'],
        ["--lora-modules", "a=/loras/a", "b=/loras/b", "--enable-lora"],
        ["--hf-token"],  # an optional value
        ["-O", "3"],
        ["-Odecode"],
        ["--compilation-config.mode", "3", "--compilation-config.cudagraph_capture_sizes+", "1,2"],
        ["--no-enable-prefix-caching", "--disable-log-stats"],
    ],
)
def test_extra_args_vllm_parses_are_accepted(args: list[str]) -> None:
    spec_from_dict(serving(extraArgs=args))


@pytest.mark.parametrize(
    "args,field",
    [
        (
            ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
            "spec.speculativeDecoding",
        ),
        (["--speculative-config.num_speculative_tokens=3"], "spec.speculativeDecoding"),
        (["--spec-tokens", "2"], "spec.speculativeDecoding.numSpeculativeTokens"),
        (["--data-parallel-size", "8"], "spec.gpu.dataParallelSize"),
        (["-dcp", "8"], "spec.gpu.decodeContextParallelSize"),
        (["--max_model_len=9"], "spec.contextLength"),
    ],
)
def test_a_managed_flag_is_refused_naming_the_spec_field_that_sets_it(args: list[str], field: str) -> None:
    # the drafter, the layout and the context are planned (their memory is in the plan): extraArgs would
    # run what the plan did not budget, or stop vLLM ("mutually exclusive" with --spec-*)
    with pytest.raises(ValidationError, match=f"from {re.escape(field)}; set that instead"):
        spec_from_dict(serving(extraArgs=args))


@pytest.mark.parametrize(
    "args,index,message",
    [
        (["--max-model-len 99999"], 0, f"'--max-model-len 99999': {FLAG_FIX}"),
        (["--MAX-MODEL-LEN=1"], 0, f"'--MAX-MODEL-LEN=1': {FLAG_FIX}"),
        (["--max-model-len\t=1"], 0, f"'--max-model-len\\t=1': {FLAG_FIX}"),
        (["--seed", "1", "-TP=8"], 2, f"'-TP=8': {FLAG_FIX}"),
        (
            ["--enable-prefix-caching", ""],
            1,
            "an empty argument reaches vLLM as a stray positional argument and stops it; remove the entry",
        ),
        (["--"], 0, f"'--': {FLAG_FIX}"),
        (["-"], 0, f"'-': {FLAG_FIX}"),
        (
            ["a\x00b"],
            0,
            f"'a\\x00b' has U+0000 control character at character 1: it {safe_text.UNSAFE_TEXT_MESSAGE}",
        ),
        (
            ["--x=\u202e..."],
            0,
            f"'--x=\\u202e...' has U+202E RIGHT-TO-LEFT OVERRIDE at character 4: it "
            f"{safe_text.UNSAFE_TEXT_MESSAGE}",
        ),
    ],
)
def test_extra_args_vllm_cannot_parse_are_refused_naming_the_entry(
    args: list[str], index: int, message: str
) -> None:
    assert error_of(serving(extraArgs=args)) == (f"serving.extraArgs.{index}", f"Value error, {message}")
    desired = compute_desired(observe(body(generation=1, **serving(extraArgs=args))))
    planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
    assert planned["message"] == f"spec.serving.extraArgs[{index}]: Value error, {message}"


def test_a_managed_flag_with_a_json_field_is_the_managed_flag() -> None:
    """vLLM reads --opt.field=value as the JSON option --opt: the guard does too."""
    assert vllm_args.managed_flag("--max-model-len.x=1") == "--max-model-len"
    assert vllm_args.managed_flag("-tp.x=1") == "--tensor-parallel-size"
    assert vllm_args.managed_flag("--compilation-config.mode=3") is None
    assert "split('=')[0].split('.')[0]" in vllm_args.managed_flag_cel_rule()


@pytest.mark.parametrize("value", ["plain", "two\nlines\twith a tab\r\n", "ünïcode", "中文 😀"])
def test_env_values_with_tabs_and_newlines_are_accepted(value: str) -> None:
    spec_from_dict(serving(env=[{"name": "A", "value": value}]))


@pytest.mark.parametrize(
    "value,at,name",
    [
        ("a\x00b", 1, "U+0000 control character"),
        ("\x1b[2J", 0, "U+001B control character"),
        ("bell\x07", 4, "U+0007 control character"),
        ("del\x7f", 3, "U+007F control character"),
        ("abc\u202edcba", 3, "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("admin\u200b", 5, "U+200B ZERO WIDTH SPACE"),
        ("\ufeffkey", 0, "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
        ("x\U000e0041", 1, "U+E0041 TAG LATIN CAPITAL LETTER A"),
        ("a\u2067b", 1, "U+2067 RIGHT-TO-LEFT ISOLATE"),
        ("\ue000", 0, "U+E000 control character"),  # private use: no name
    ],
)
def test_env_values_with_hidden_characters_are_refused_naming_the_character(
    value: str, at: int, name: str
) -> None:
    assert error_of(serving(env=[{"name": "A", "value": value}])) == (
        "serving.env.0.value",
        f"Value error, {value!r} has {name} at character {at}: it {safe_text.UNSAFE_TEXT_MESSAGE}",
    )


def test_the_refused_characters_are_unicode_category_c_but_tab_newline_and_return() -> None:
    """The CEL rule is RE2's category class (short, so cheap); Python asks unicodedata for the same
    categories, unassigned code points left to the apiserver (Python's tables may be older)."""
    refused = {c for c in range(0x30000) if safe_text.unsafe_character(chr(c)) is not None}
    expected = {
        c
        for c in range(0x30000)
        if unicodedata.category(chr(c)) in ("Cc", "Cf", "Co", "Cs") and chr(c) not in "\t\n\r"
    }
    assert refused == expected
    assert {0x202E, 0x2066, 0x200B, 0x200D, 0xFEFF, 0x00AD} <= refused
    assert safe_text.UNSAFE_CHARACTER_RE2 == r"[^\P{C}\t\n\r]"


MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


@pytest.mark.parametrize(
    "changes,location,message",
    [
        (
            {"quantization_config": {"quant_method": "awq", "bits": None}},
            "model.config.quantization_config",
            "Value error, quantization_config.bits is required with quant_method awq or gptq (AWQ's own key "
            "w_bit also counts): give the checkpoint's bits per weight (4 or 8) from its config.json",
        ),
        (
            {"kv_lora_rank": 512},
            "model.config",
            "Value error, kv_lora_rank (MLA attention) needs qk_rope_head_dim, qk_nope_head_dim and "
            "v_head_dim: give all four from the model's config.json",
        ),
        (
            {**MLA, "index_n_heads": 32},
            "model.config",
            "Value error, index_n_heads and index_head_dim (the sparse-attention indexer) go together and "
            "need MLA (kv_lora_rank): give both, with the MLA keys, from the model's config.json",
        ),
        (
            {"n_routed_experts": 8, "num_experts_per_tok": 9},
            "model.config",
            "Value error, num_experts_per_tok is required with n_routed_experts (num_experts, "
            "num_local_experts) > 0, at least 1 and at most the number of experts: give it from the "
            "model's config.json",
        ),
        (
            {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 0},
            "model.config.moe_intermediate_size",
            "Input should be greater than or equal to 1",
        ),
        ({**MLA, "index_n_heads": 32, "index_head_dim": 0}, "model.config.index_head_dim", None),
        ({**MLA, "v_head_dim": 0}, "model.config.v_head_dim", None),
    ],
)
def test_inline_configs_that_are_nonsense_are_refused_naming_the_key(
    changes: dict[str, Any], location: str, message: str | None
) -> None:
    spec = {"model": {"id": "example/inline", "config": {**INLINE_CONFIG, **changes}}}
    found = error_of(spec)
    assert found[0] == location
    assert found[1] == (message or "Input should be greater than or equal to 1")


def test_inline_configs_of_real_models_pass_the_rules() -> None:
    """Every catalog config (GLM-5.3-Flash's NoPE MLA has qk_rope_head_dim 0), with the
    quantization_config of each published checkpoint, is a valid inline config."""
    checked = 0
    for item in yaml.safe_load(_data_text("models.yaml"))["models"]:
        InlineModelConfig.model_validate(item["config"])
        checked += 1
        for ckpt in (item.get("checkpoints") or {}).values():
            if isinstance(ckpt, dict) and ckpt.get("quantization_config"):
                qc = ckpt["quantization_config"]
                InlineModelConfig.model_validate({**item["config"], "quantization_config": qc})
                checked += 1
    assert checked >= 15


def validations(node: dict[str, Any]) -> list[str]:
    return [rule["rule"] for rule in node.get("x-kubernetes-validations", [])]


def test_the_crd_carries_the_same_rules() -> None:
    spec = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    serving_props = spec["properties"]["serving"]["properties"]
    image_rule = f"self.matches({kube_validation.cel_string(kube_validation.IMAGE_PATTERN)})"
    assert validations(serving_props["image"]) == [image_rule]
    assert validations(serving_props["extraArgs"]["items"]) == [
        safe_text.NO_UNSAFE_CHARACTER_CEL,
        *(r for r, _ in vllm_args.EXTRA_ARG_CEL_RULES),
        vllm_args.managed_flag_cel_rule(),
    ]
    assert validations(serving_props["extraArgs"]) == [vllm_args.structure_cel_rule()[0]]
    assert validations(spec["properties"]["serving"]) == [vllm_args.known_flags_cel_rule()[0]]
    env_value = serving_props["env"]["items"]["properties"]["value"]
    assert validations(env_value) == [safe_text.NO_UNSAFE_CHARACTER_CEL]
    config = spec["properties"]["model"]["properties"]["config"]
    assert len(validations(config)) == 5 and len(validations(config["properties"]["text_config"])) == 5
    assert "has(self.bits) || has(self.w_bit)" in validations(config["properties"]["quantization_config"])[0]
    assert config["properties"]["moe_intermediate_size"]["minimum"] == 1
    gateway = crd.build_gateway_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert validations(gateway["properties"]["spec"]["properties"]["image"]) == [image_rule]


NOT_FIT = {"model": {"id": "zai-org/glm-4-9b-chat"}, "contextLength": 8192}


@pytest.mark.parametrize(
    "changes,fix",
    [
        (
            {"model": {"id": "zai-org/GLM-5"}, "gpu": {"products": ["L4"]}},
            "GLM-5 needs vLLM's sparse-MLA (DSA) kernels, available from compute capability 9.0; NVIDIA-L4 "
            "is 8.9. fix: gpu.products with GPU types of compute capability 9.0 or newer (NVIDIA-H200, "
            "NVIDIA-H100-80GB-HBM3, NVIDIA-H100-PCIe, NVIDIA-H20)",
        ),
        (
            {"gpu": {"products": ["L4"], "tensorParallelSize": 8}},
            "no valid shape on NVIDIA-L4: gpu.tensorParallelSize 8 exceeds the 4 NVIDIA-L4 GPUs on one "
            "node. fix: gpu.tensorParallelSize 4 or less (0 lets the planner choose), or gpu.products with "
            "nodes of 8 or more GPUs",
        ),
        (
            {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16", "gpu": {"products": ["L4"]}},
            "nothing fits on NVIDIA-L4; best is TP=4 bf16: weights 164.6 GiB per GPU leave no KV cache "
            "(short by 146.4 GiB). fix: gpu.products with more GPU memory per node than 4 x 22.03 GiB of "
            "NVIDIA-L4, quantization auto (a lower precision), or gpu.allowMultiNode: true with more nodes",
        ),
        (
            {"gpu": {"products": ["L40S"]}},
            "no schedulable node has NVIDIA-L40S GPUs. fix: add NVIDIA-L40S nodes (or a node pool that "
            "provides them), or list the GPU types the cluster has in gpu.products",
        ),
    ],
)
def test_does_not_fit_rejections_name_the_field_and_the_fix(changes: dict[str, Any], fix: str) -> None:
    desired = compute_desired(observe(body(generation=1, **{**NOT_FIT, **changes})))
    planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
    assert planned["status"] == "False" and planned["reason"] == "NoGPUFits"
    assert fix in planned["message"], planned["message"]


def test_no_gpu_nodes_at_all_names_the_fix() -> None:
    desired = compute_desired(observe(body(generation=1, **NOT_FIT), nodes=[]))
    planned = next(c for c in desired.status["conditions"] if c["type"] == "Planned")
    assert planned["reason"] == "NoGPUNodes"
    assert planned["message"] == (
        "does not fit: no GPU type to plan on. no schedulable GPU nodes of a known type. fix: add GPU "
        "nodes labelled by GPU Feature Discovery (nvidia.com/gpu.product) of a type gpu.products allows "
        "(any catalog type when it is empty), or a node pool that provides them"
    )


@pytest.mark.parametrize(
    "path,message",
    [
        ("/models\n", "must be one line"),
        ("/mo\x00dels", safe_text.UNSAFE_TEXT_MESSAGE),
        ("/hf\x1b[2J", safe_text.UNSAFE_TEXT_MESSAGE),
        ("/hf\u202e", safe_text.UNSAFE_TEXT_MESSAGE),
        ("relative/path", v1alpha1.MOUNT_PATH_ABSOLUTE_MESSAGE),
        ("/data/../etc", v1alpha1.MOUNT_PATH_SEGMENTS_MESSAGE),
        ("/", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
        ("/dev/shm", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
        ("/etc/", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
        ("/usr/local/hf", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
        ("/models", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
        ("/root", v1alpha1.MOUNT_PATH_RESERVED_MESSAGE),
    ],
)
def test_model_cache_mount_paths_that_hide_system_or_operator_files_are_refused(
    path: str, message: str
) -> None:
    field, got = error_of(serving(modelCache={"claimName": "hf-cache", "mountPath": path}))
    assert field == "serving.modelCache.mountPath"
    assert message in got


@pytest.mark.parametrize("path", ["/root/.cache/huggingface", "/data/hf-cache/", "/opt/hf", "/var/lib/hf"])
def test_model_cache_mount_paths_of_their_own_are_accepted(path: str) -> None:
    spec_from_dict(serving(modelCache={"claimName": "hf-cache", "mountPath": path}))


@pytest.mark.parametrize("key", ["gpu\n", "example.com/gpu\n"])
def test_label_keys_with_a_trailing_newline_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not a valid label key"):
        kube_validation.check_qualified_name(key, "nodeSelector key")
    assert kube_validation.check_qualified_name(key.rstrip("\n"), "nodeSelector key") == key.rstrip("\n")
