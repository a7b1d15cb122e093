"""The ``serving.extraArgs`` guard: vLLM flags the operator derives from the spec, in every spelling.

``vllm serve`` accepts one setting under several spellings: long options (``--tensor-parallel-size``),
short aliases (``-tp``), underscores for dashes (``--tensor_parallel_size``, vLLM rewrites ``_`` to
``-`` in the option name before parsing), ``--opt=value`` and ``-o=value``, a one-letter alias glued to
its value (``-qfp8``), and ``--config FILE`` that loads any of them from a YAML file. The option
strings come from vLLM's own parser: ``glm_operator/api/vllm_flags.py`` is generated from it
(``make vllm-flags``, ``glm_operator.commands.vllm_flags``) for the release of the default image, and
the vLLM contract test fails when that file drifts from the parser.

``MANAGED_DESTS`` is the policy: the argparse destinations whose value the plan decides (model,
parallelism, memory, precision, the server's address and key). ``managed_flag(arg)`` is the check
the pydantic validator uses; ``extra_args_cel_rule()`` the same check as a CEL rule in the CRD.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from glm_operator.api import kube_validation as kv
from glm_operator.api import vllm_flags

#: argparse destinations of ``vllm serve`` that the operator sets from the spec (or that would
#: contradict the plan: data/context parallelism multiplies the GPUs a replica uses, a fixed KV-cache
#: size or block count overrides the memory plan, another address or socket breaks the probes and
#: the Service, ``--config`` can set any of them from a file). ``--enable-expert-parallel`` and
#: ``--trust-remote-code`` stay allowed: the operator adds them when needed, a user may add them too.
MANAGED_DESTS: tuple[str, ...] = (
    "model_tag",
    "model",
    "served_model_name",
    "revision",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_rank",
    "data_parallel_start_rank",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "data_parallel_backend",
    "data_parallel_hybrid_lb",
    "data_parallel_external_lb",
    "data_parallel_multi_port_external_lb",
    "decode_context_parallel_size",
    "prefill_context_parallel_size",
    "distributed_executor_backend",
    "nnodes",
    "node_rank",
    "headless",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "max_num_seqs",
    "quantization",
    "kv_cache_dtype",
    "dtype",
    "load_format",
    "host",
    "port",
    "uds",
    "api_key",
    "config",
)


def _canonical(arg: str) -> str:
    """The option name as vLLM's parser sees it: before ``=`` and before ``.`` (``--opt.field=v`` sets
    a field of the JSON option ``--opt``), ``_`` -> ``-`` in long options."""
    name = arg.split("=", 1)[0].split(".", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def managed_flag(arg: str) -> str | None:
    """The managed option ``arg`` sets (its canonical long spelling), or None.

    ``arg`` is one element of ``serving.extraArgs``; elements that do not start with ``-`` are
    values, never flags. argparse, which vLLM's parser is, also takes a one-letter alias glued to its
    value (``-qfp8``), and unique prefixes of options (``-t 8`` for ``-tp``, and ``--tensor-par=8``
    when the parser allows abbreviations): those count as the option they would select. A prefix that
    is ambiguous is refused too (vLLM would stop on it anyway).
    """
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = _canonical(arg)
    hit = vllm_flags.MANAGED_OPTIONS.get(name)
    if hit is not None:
        return hit
    if name in vllm_flags.OTHER_OPTIONS_WITH_MANAGED_PREFIX:
        return None  # exactly another option
    for short, long_name in vllm_flags.MANAGED_ONE_LETTER.items():
        if arg.startswith(short):
            return long_name
    is_long = name.startswith("--")
    if is_long and not vllm_flags.ALLOW_ABBREV:
        return None
    for option, long_name in vllm_flags.MANAGED_OPTIONS.items():
        if option.startswith(name) and option.startswith("--") == is_long:
            return long_name
    return None


def sets_flag(args: Iterable[str], option: str) -> bool:
    """True when ``args`` set ``option`` (a canonical long option) in any spelling vLLM accepts."""
    return any(arg.startswith("--") and _canonical(arg) == option for arg in args)


def flag_value(args: Sequence[str], option: str) -> str | None:
    """The value the last ``option`` (a canonical long option) in ``args`` takes, ``--opt=v`` or
    ``--opt v``, as vLLM's parser would read it; None when it is not set or has no value."""
    found = None
    for i, arg in enumerate(args):
        if not arg.startswith("--") or _canonical(arg) != option or "." in arg.split("=", 1)[0]:
            continue
        if "=" in arg:
            found = arg.split("=", 1)[1]
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found = args[i + 1]
    return found


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values) + "]"


#: Longest option name the CEL rule looks at. The rule reads only this many leading characters of
#: an argument, which keeps its cost within the apiserver's budget for 64 arguments of 1,024
#: characters; every vLLM option is shorter (the generator checks), so a longer name can neither
#: equal nor be a prefix of a managed option and the result is the same as :func:`managed_flag`'s.
CEL_NAME_LIMIT = 64


def extra_args_cel_rule() -> str:
    """The CEL form of :func:`managed_flag` over the list ``self`` (``serving.extraArgs``)."""
    head = f"(a.size() > {CEL_NAME_LIMIT} ? a.substring(0, {CEL_NAME_LIMIT}) : a)"
    key = f"{head}.split('=')[0].split('.')[0]"
    name = f"(a.startsWith('--') ? '--' + {key}.substring(2).replace('_', '-') : {key})"
    managed = _cel_list(sorted(vllm_flags.MANAGED_OPTIONS))
    others = _cel_list(sorted(vllm_flags.OTHER_OPTIONS_WITH_MANAGED_PREFIX))
    one_letter = _cel_list(sorted(vllm_flags.MANAGED_ONE_LETTER))
    abbreviation = f"{managed}.exists(o, o.startsWith({name}) && o.startsWith('--') == a.startsWith('--'))"
    if not vllm_flags.ALLOW_ABBREV:
        abbreviation = f"(!a.startsWith('--') && {abbreviation})"
    refused = (
        f"{name} in {managed} || (!({name} in {others}) && "
        f"({one_letter}.exists(s, a.startsWith(s)) || {abbreviation}))"
    )
    return f"self.all(a, !a.startsWith('-') || a == '-' || a == '--' || !({refused}))"


#: How a flag is spelled, the part of an argument before ``=``: vLLM's option names are lower case
#: (argparse is case-sensitive), digits and ``-`` (``_`` too: vLLM rewrites it); ``.`` starts a field
#: of a JSON option (``--compilation-config.mode=3``), a final ``+`` appends to a list field;
#: ``-O<level>`` is the optimization level. A space inside (``"--max-model-len 8192"`` as one
#: argument) makes argparse read it as a positional argument, and vLLM stops.
FLAG_NAME_PATTERN = r"-O[A-Za-z0-9._-]*|--?[a-z0-9][a-z0-9_-]*((\.[A-Za-z0-9_-]+)+\+?)?"
EMPTY_ARG_MESSAGE = (
    "an empty argument reaches vLLM as a stray positional argument and stops it; remove the entry"
)
CONTROL_ARG_MESSAGE = (
    "an argument must not contain control characters (NUL, ESC, ...; tabs and newlines are allowed); "
    "remove them"
)
FLAG_SYNTAX_MESSAGE = (
    "a flag must be spelled as vLLM spells it: --<name> or --<name>=<value>, the name in lower-case "
    "letters, digits, '-' or '_' (-O<level> for the optimization level), no whitespace; give a flag and "
    'its value as two entries ("--max-num-batched-tokens", "8192") or as one with "=" '
    '("--max-num-batched-tokens=8192")'
)
#: The per-argument rules as CEL (rule, message) pairs, the same as :func:`check_extra_arg`.
EXTRA_ARG_CEL_RULES: tuple[tuple[str, str], ...] = (
    ("self != ''", EMPTY_ARG_MESSAGE),
    (kv.NO_CONTROL_CHARACTER_CEL, CONTROL_ARG_MESSAGE),
    (
        "!self.startsWith('-') || self == '-' || self == '--' || "
        f"self.matches({kv.cel_string(f'^({FLAG_NAME_PATTERN})(=|$)')})",
        FLAG_SYNTAX_MESSAGE,
    ),
)


def check_extra_arg(arg: str) -> str:
    """``arg`` (one element of ``serving.extraArgs``) if vLLM can parse it, else ValueError saying why.

    A value (not starting with ``-``) may be any text without control characters; a flag must be
    spelled as vLLM spells it (:data:`FLAG_NAME_PATTERN`). Managed flags are refused apart
    (:func:`managed_flag`).
    """
    if arg == "":
        raise ValueError(EMPTY_ARG_MESSAGE)
    if re.search(kv.CONTROL_CHARACTER_PATTERN, arg):
        raise ValueError(f"{arg[:80]!r}: {CONTROL_ARG_MESSAGE}")
    flag = arg.startswith("-") and arg not in ("-", "--")
    if flag and not re.fullmatch(FLAG_NAME_PATTERN, arg.split("=", 1)[0]):
        raise ValueError(f"{arg[:80]!r}: {FLAG_SYNTAX_MESSAGE}")
    return arg
