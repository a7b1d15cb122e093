"""The ``serving.extraArgs`` guard: vLLM flags the operator derives from the spec, in every spelling.

``vllm serve`` accepts one setting under several spellings: long options (``--tensor-parallel-size``),
short aliases (``-tp``), underscores for dashes (``--tensor_parallel_size``, vLLM rewrites ``_`` to
``-`` in the option name before parsing), ``--opt=value`` and ``-o=value``, a one-letter alias glued to
its value (``-qfp8``), and ``--config FILE`` that loads any of them from a YAML file. The option
strings come from vLLM's own parser: ``glm_operator/api/vllm_flags.py`` is generated from it
(``make vllm-flags``, ``devtools.vllm_flags`` in the checkout) for the release of the default image, and
the vLLM contract test fails when that file drifts from the parser.

``MANAGED_DESTS`` is the policy: the argparse destinations whose value the plan decides (model,
parallelism, memory, precision, the server's address and key). ``managed_flag(arg)`` is the check
the pydantic validator uses; ``managed_flag_cel_rule()`` the same check as a CEL rule in the CRD.

Beyond the managed flags, the list is read as vLLM's parser reads it, so that what it cannot parse
is refused when the GLMDeployment is applied instead of crash-looping the pods:

- every entry is a flag, or the value of the flag before it: an entry that is not a flag and
  follows no flag taking a value would reach vLLM as a stray positional argument and stop it
  (there is no shell: ``$(rm -rf /)`` or ``; curl ... | sh`` reach vLLM as that text), and a flag
  that needs a value must have one (:func:`structure_error`, :func:`structure_cel_rule`);
- with the default image's release (``serving.image`` unset, or its tag naming that release), every
  flag is one of that release's ``vllm serve`` options, spelled out in full (argparse also reads a
  unique prefix, which another release can make ambiguous); a switch takes no ``=value``, only a
  JSON option takes ``.field`` (:func:`unknown_flag_error`, :func:`known_flags_cel_rule`). With
  an image of another release the operator cannot know its options, so only the structure is
  checked, with that release's flags read as taking an optional value.

Which options exist and how many values each takes (:data:`VALUES_SWITCH` ...) comes from the same
generated file. Python and CEL spell each rule once, side by side; tests hold them to the same
answers on a real apiserver.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from glm_operator.api import kube_validation as kv
from glm_operator.api import vllm_flags
from glm_operator.api.safe_text import UNSAFE_CHARACTER_RE2

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
    # MTP speculative decoding (spec.speculativeDecoding): the drafter's memory is in the plan
    "speculative_config",
    "spec_method",
    "spec_model",
    "spec_tokens",
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


def option_name(arg: str) -> str:
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
    name = option_name(arg)
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
    return any(arg.startswith("--") and option_name(arg) == option for arg in args)


def flag_value(args: Sequence[str], option: str) -> str | None:
    """The value the last ``option`` (a canonical long option) in ``args`` takes, ``--opt=v`` or
    ``--opt v``, as vLLM's parser would read it; None when it is not set or has no value."""
    found = None
    for i, arg in enumerate(args):
        if not arg.startswith("--") or option_name(arg) != option or "." in arg.split("=", 1)[0]:
            continue
        if "=" in arg:
            found = arg.split("=", 1)[1]
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            found = args[i + 1]
    return found


#: Longest option name the CEL rules look at. They read only this many leading characters of an
#: argument, which keeps their cost within the apiserver's budget for 64 arguments of 1,024
#: characters; every vLLM option is shorter (the generator checks), so a longer name can neither
#: equal nor be a prefix of an option and the result is the same as the Python functions'.
CEL_NAME_LIMIT = 64
#: Most entries of ``serving.extraArgs`` (the CRD's maxItems; the CEL rules index the list up to it).
MAX_EXTRA_ARGS = 64

# How many values an option takes after it (vllm_flags.OPTION_VALUES): the codes are small ints so
# that the CRD carries the table once, as a CEL map.
VALUES_SWITCH = 0  # none: a switch (store_true, --x/--no-x)
VALUES_ONE = 1  # exactly one
VALUES_OPTIONAL = 2  # one or none
VALUES_ONE_OR_MORE = 3  # nargs "+" (or a fixed count above one)
VALUES_ANY = 4  # nargs "*"
VALUES_JSON = 5  # exactly one JSON value; vLLM also takes its fields as --option.field value
VALUES_EXITS = 6  # --help and the like: vLLM prints and exits instead of serving

_NEGATIVE_INTEGER = r"^-[0-9]+$"


def is_value(arg: str) -> bool:
    """True when vLLM's parser reads ``arg`` as a value, not as a flag: it does not start with ``-``,
    or it is a negative integer (argparse's rule; a negative decimal such as ``-0.5`` is not one for
    vLLM, which reads ``-0.5`` as the field ``5`` of an option ``-0``)."""
    return not arg.startswith("-") or re.match(_NEGATIVE_INTEGER, arg[:CEL_NAME_LIMIT]) is not None


def _glued_short(arg: str) -> bool:
    """``-Xvalue``: a one-letter option that takes a value, with its value glued on (``-O3``)."""
    code = vllm_flags.OPTION_VALUES.get(arg[:2], VALUES_SWITCH)
    return not arg.startswith("--") and len(arg) > 2 and VALUES_ONE <= code <= VALUES_JSON


def _dotted(arg: str) -> bool:
    """``--option.field[=value]``: a field of a JSON option, which vLLM folds into ``--option JSON``
    (looked for in the name's first CEL_NAME_LIMIT characters, as the CEL rules do)."""
    return "." in arg[:CEL_NAME_LIMIT].split("=", 1)[0]


def values_after(arg: str) -> int:
    """How the entries after the flag ``arg`` are read (a ``VALUES_*`` code): none when the flag
    carries its value (``=``, ``-O3``), exactly one after ``--option.field`` (vLLM takes the next
    argument whatever it is), else the option's own; an option this release does not have is read
    leniently, as taking an optional value."""
    if "=" in arg or _glued_short(arg):
        return VALUES_SWITCH
    if _dotted(arg):
        return VALUES_ONE
    code = vllm_flags.OPTION_VALUES.get(option_name(arg), VALUES_OPTIONAL)
    return {VALUES_JSON: VALUES_ONE, VALUES_EXITS: VALUES_SWITCH}.get(code, code)


def _takes(code: int) -> bool:
    return code != VALUES_SWITCH


def _needs(code: int) -> bool:
    return code in (VALUES_ONE, VALUES_ONE_OR_MORE)


def _takes_many(code: int) -> bool:
    return code in (VALUES_ONE_OR_MORE, VALUES_ANY)


STRAY_VALUE_MESSAGE = (
    "is not a flag, and no flag before it takes it as its value: vLLM would read it as a stray "
    "positional argument and stop (there is no shell: $(...), `...`, ; and | reach vLLM as text); "
    "remove it, or put it right after the flag whose value it is"
)
MISSING_VALUE_MESSAGE = "needs a value: give it as the next entry or with '=' (--flag=value)"


def _entry(args: Sequence[str], i: int) -> str:
    return f"extraArgs[{i}] {args[i][:80]!r}"


def structure_error(args: Sequence[str]) -> str | None:
    """The first entry of ``args`` vLLM's parser would stop on for its place in the list (a value
    no flag takes, a flag without its value), as a message naming its index; None when none.

    A value is taken by the flag right before it when that flag takes a value and does not carry
    it already; a further value only by a flag taking several (``nargs`` ``+``/``*``). Local rules
    (each entry against the two before it and the one after it) say the same, which is what lets
    the CEL form stay linear in the list's length.
    """
    for i, arg in enumerate(args):
        if is_value(arg):
            if i == 0:
                ok = False
            elif not is_value(args[i - 1]):
                ok = _takes(values_after(args[i - 1]))
            else:
                ok = i > 1 and (is_value(args[i - 2]) or _takes_many(values_after(args[i - 2])))
            if not ok:
                return f"{_entry(args, i)} {STRAY_VALUE_MESSAGE}"
        elif _needs(values_after(arg)) and not (i + 1 < len(args) and is_value(args[i + 1])):
            return f"{_entry(args, i)} {MISSING_VALUE_MESSAGE}"
    return None


UNKNOWN_FLAG_MESSAGE = (
    f"is not a flag of vLLM {vllm_flags.VLLM_VERSION}, the default image's release: spell flags out "
    "in full as `vllm serve --help=all` lists them (vLLM also reads a unique prefix, which another "
    "release can make ambiguous); with an image of another release, set serving.image to it"
)
SWITCH_VALUE_MESSAGE = "is a switch and takes no value: give it alone (its --no- form turns it off)"
DOTTED_MESSAGE = (
    "is not a JSON option: only options taking JSON accept --option.field=value; give the value as "
    "the next entry or with '='"
)
EXITS_MESSAGE = "makes vLLM print and exit instead of serving: remove it"


def unknown_flag_error(arg: str) -> str | None:
    """Why the default image's vLLM would not take the flag ``arg`` (a message), or None."""
    if is_value(arg):
        return None
    code = vllm_flags.OPTION_VALUES.get(option_name(arg))
    if code is None:
        return None if _glued_short(arg) else UNKNOWN_FLAG_MESSAGE
    if code == VALUES_EXITS:
        return EXITS_MESSAGE
    if _dotted(arg):
        return None if code == VALUES_JSON else DOTTED_MESSAGE
    if code == VALUES_SWITCH and "=" in arg:
        return SWITCH_VALUE_MESSAGE
    return None


def first_unknown_flag(args: Sequence[str]) -> str | None:
    """The first entry the default image's vLLM has no such flag for, as a message naming its index."""
    for i, arg in enumerate(args):
        reason = unknown_flag_error(arg)
        if reason is not None:
            return f"{_entry(args, i)} {reason}"
    return None


#: A tag that names the release the option table was generated from (``v0.33.0``, ``0.33.1-cu130``).
RELEASE_TAG_PATTERN = (
    r":v?"
    + re.escape(".".join(vllm_flags.VLLM_VERSION.split(".")[:2]))
    + r"(\.[0-9]+)?([-+._][^/:@]*)?(@.*)?$"
)


def checks_known_flags(image: str | None) -> bool:
    """True when the flags are checked against the option table: the default image (``image`` unset)
    or an image whose tag names the table's release (its major.minor)."""
    return image is None or re.search(RELEASE_TAG_PATTERN, image) is not None


# --- the same rules as CEL ------------------------------------------------------------------------


def _head(a: str) -> str:
    return f"({a}.size() > {CEL_NAME_LIMIT} ? {a}.substring(0, {CEL_NAME_LIMIT}) : {a})"


def _cel_key(a: str) -> str:
    """The part of ``a`` before ``=`` (of its first CEL_NAME_LIMIT characters)."""
    return f"{_head(a)}.split('=')[0]"


def _cel_name(a: str) -> str:
    """:func:`option_name` of ``a``."""
    key = f"{_cel_key(a)}.split('.')[0]"
    return f"({a}.startsWith('--') ? '--' + {key}.substring(2).replace('_', '-') : {key})"


def _cel_is_value(a: str) -> str:
    return f"(!{a}.startsWith('-') || {_head(a)}.matches({kv.cel_string(_NEGATIVE_INTEGER)}))"


def _cel_glued_short(a: str) -> str:
    return (
        f"(!{a}.startsWith('--') && {a}.size() > 2 && [{a}.substring(0, 2)].all(s, s in m && "
        f"m[s] >= {VALUES_ONE} && m[s] <= {VALUES_JSON}))"
    )


def _cel_values_after(a: str) -> str:
    """:func:`values_after` of ``a`` as a CEL int (``m`` is the option table)."""
    return (
        f"({a}.contains('=') || {_cel_glued_short(a)} ? {VALUES_SWITCH} : "
        f"{_cel_key(a)}.contains('.') ? {VALUES_ONE} : "
        f"[{_cel_name(a)}].map(n, !(n in m) ? {VALUES_OPTIONAL} : m[n] == {VALUES_JSON} ? {VALUES_ONE} : "
        f"m[n] == {VALUES_EXITS} ? {VALUES_SWITCH} : m[n])[0])"
    )


def _cel_quoted(a: str) -> str:
    """``'<a's first characters>' `` for a message, or nothing when ``a`` holds characters the shared
    text rule refuses (that rule reports them; echoed, they would garble the message)."""
    return f"(!{a}.matches({kv.cel_string(UNSAFE_CHARACTER_RE2)}) ? '\\'' + {_head(a)} + '\\' ' : '')"


def _cel_option_table() -> str:
    """vllm_flags.OPTION_VALUES as a CEL map literal."""
    items = sorted(vllm_flags.OPTION_VALUES.items())
    return "{" + ", ".join(f"{kv.cel_string(o)}: {c}" for o, c in items) + "}"


_INDEXES = "[" + ", ".join(str(i) for i in range(MAX_EXTRA_ARGS)) + "]"
# The indexes as strings for messages: CEL's string(int) has no size bound in the apiserver's cost
# estimate, so a message built with it would be refused as too costly; a list of literals has one.
_INDEX_NAMES = "[" + ", ".join(f"'{i}'" for i in range(MAX_EXTRA_ARGS)) + "]"


def _cel_entry_ok(args: str) -> str:
    """The per-index condition of :func:`structure_error`, over the CEL list ``args`` at index ``i``."""
    here, before, before2, after = (f"{args}[i]", f"{args}[i - 1]", f"{args}[i - 2]", f"{args}[i + 1]")
    value_ok = (
        f"i > 0 && ({_cel_is_value(before)} ? "
        f"(i > 1 && ({_cel_is_value(before2)} || {_cel_values_after(before2)} >= {VALUES_ONE_OR_MORE})) : "
        f"{_cel_values_after(before)} != {VALUES_SWITCH})"
    )
    flag_ok = (
        f"[{_cel_values_after(here)}].all(c, c != {VALUES_ONE} && c != {VALUES_ONE_OR_MORE} || "
        f"(i + 1 < {args}.size() && {_cel_is_value(after)}))"
    )
    return f"({_cel_is_value(here)} ? ({value_ok}) : {flag_ok})"


def structure_cel_rule() -> tuple[str, str]:
    """(rule, messageExpression) of :func:`structure_error` on the list ``self``."""
    ok = _cel_entry_ok("self")
    rule = f"[{_cel_option_table()}].all(m, {_INDEXES}.all(i, i >= self.size() || {ok}))"
    message = (
        f"[{_cel_option_table()}].map(m, {_INDEXES}.filter(i, i < self.size() && !{ok}).map(i, "
        f"'extraArgs[' + {_INDEX_NAMES}[i] + '] ' + {_cel_quoted('self[i]')} + "
        f"({_cel_is_value('self[i]')} ? {kv.cel_string(STRAY_VALUE_MESSAGE)} : "
        f"{kv.cel_string(MISSING_VALUE_MESSAGE)})))[0][0]"
    )
    return rule, message


def _cel_unknown_reason(a: str) -> str:
    """:func:`unknown_flag_error` of the flag ``a`` as a CEL string ('' when vLLM takes it)."""
    unknown = f"({_cel_glued_short(a)} ? '' : {kv.cel_string(UNKNOWN_FLAG_MESSAGE)})"
    return (
        f"[{_cel_name(a)}].map(n, !(n in m) ? {unknown} : "
        f"m[n] == {VALUES_EXITS} ? {kv.cel_string(EXITS_MESSAGE)} : "
        f"{_cel_key(a)}.contains('.') ? (m[n] == {VALUES_JSON} ? '' : {kv.cel_string(DOTTED_MESSAGE)}) : "
        f"m[n] == {VALUES_SWITCH} && {a}.contains('=') ? {kv.cel_string(SWITCH_VALUE_MESSAGE)} : '')[0]"
    )


def known_flags_cel_rule() -> tuple[str, str]:
    """(rule, messageExpression) of :func:`first_unknown_flag` on ``serving`` (``self``), applied
    when :func:`checks_known_flags` says so."""
    other_release = f"(has(self.image) && !self.image.matches({kv.cel_string(RELEASE_TAG_PATTERN)}))"
    bad = f"!{_cel_is_value('a')} && {_cel_unknown_reason('a')} != ''"
    table = _cel_option_table()
    rule = f"!has(self.extraArgs) || {other_release} || [{table}].all(m, !self.extraArgs.exists(a, {bad}))"
    where = f"'extraArgs[' + {_INDEX_NAMES}[self.extraArgs.indexOf(a)] + '] ' + {_cel_quoted('a')}"
    says = f"{where} + {_cel_unknown_reason('a')}"
    message = f"[{table}].map(m, self.extraArgs.filter(a, {bad}).map(a, {says}))[0][0]"
    return rule, message


def managed_flag_cel_rule() -> str:
    """The CEL form of :func:`managed_flag` on one argument (``self``)."""
    a = "self"
    name = _cel_name(a)
    managed = kv.cel_list(sorted(vllm_flags.MANAGED_OPTIONS))
    others = kv.cel_list(sorted(vllm_flags.OTHER_OPTIONS_WITH_MANAGED_PREFIX))
    one_letter = kv.cel_list(sorted(vllm_flags.MANAGED_ONE_LETTER))
    abbreviation = f"{managed}.exists(o, o.startsWith(n) && o.startsWith('--') == {a}.startsWith('--'))"
    if not vllm_flags.ALLOW_ABBREV:
        abbreviation = f"(!{a}.startsWith('--') && {abbreviation})"
    refused = (
        f"n in {managed} || (!(n in {others}) && "
        f"({one_letter}.exists(s, {a}.startsWith(s)) || {abbreviation}))"
    )
    return f"!{a}.startsWith('-') || {a} == '-' || {a} == '--' || [{name}].all(n, !({refused}))"


#: The spec field that sets a managed flag, where one does (the others are the operator's own: the
#: model, the server's address, the multi-node wiring).
SPEC_FIELD_OF: dict[str, str] = {
    "--tensor-parallel-size": "spec.gpu.tensorParallelSize",
    "--pipeline-parallel-size": "spec.gpu.pipelineParallelSize",
    "--data-parallel-size": "spec.gpu.dataParallelSize",
    "--decode-context-parallel-size": "spec.gpu.decodeContextParallelSize",
    "--speculative-config": "spec.speculativeDecoding",
    "--spec-method": "spec.speculativeDecoding",
    "--spec-model": "spec.speculativeDecoding",
    "--spec-tokens": "spec.speculativeDecoding.numSpeculativeTokens",
    "--max-model-len": "spec.contextLength",
    "--gpu-memory-utilization": "spec.gpu.memoryUtilization",
    "--max-num-seqs": "spec.serving.maxNumSeqs",
    "--quantization": "spec.quantization",
    "--kv-cache-dtype": "spec.kvCacheDtype",
    "--served-model-name": "spec.model.servedModelName",
    "--revision": "spec.model.source (hf://repo@revision)",
}

MANAGED_FLAG_MESSAGE = (
    "extraArgs must not set flags the operator derives from the spec, in any spelling vLLM accepts "
    "(short options such as -tp, underscores, --opt=value, --config): "
    + ", ".join(sorted(set(vllm_flags.MANAGED_OPTIONS.values())))
    + "; use the spec fields instead ("
    + ", ".join(f"{flag}: {field}" for flag, field in SPEC_FIELD_OF.items())
    + ")"
)


def check_not_managed(arg: str) -> str:
    """``arg`` unless it sets a managed flag (ValueError naming the flag, its canonical spelling and the
    spec field that sets it)."""
    managed = managed_flag(arg)
    if managed is not None:
        field = SPEC_FIELD_OF.get(managed)
        raise ValueError(
            f"extraArgs must not set {arg.split('=', 1)[0]} (vLLM {managed}): the operator derives it "
            + (f"from {field}; set that instead" if field else "from the spec; use the spec fields instead")
        )
    return arg


#: How a flag is spelled, the part of an argument before ``=``: vLLM's option names are lower case
#: (argparse is case-sensitive), digits and ``-`` (``_`` too: vLLM rewrites it); ``.`` starts a field
#: of a JSON option (``--compilation-config.mode=3``), a final ``+`` appends to a list field;
#: ``-O<level>`` is the optimization level. A space inside (``"--max-model-len 8192"`` as one
#: argument) makes argparse read it as a positional argument, and vLLM stops.
FLAG_NAME_PATTERN = r"-O[A-Za-z0-9._-]*|--?[a-z0-9][a-z0-9_-]*((\.[A-Za-z0-9_-]+)+\+?)?"
EMPTY_ARG_MESSAGE = (
    "an empty argument reaches vLLM as a stray positional argument and stops it; remove the entry"
)
FLAG_SYNTAX_MESSAGE = (
    "a flag must be spelled as vLLM spells it: --<name> or --<name>=<value>, the name in lower-case "
    "letters, digits, '-' or '_' (-O<level> for the optimization level), no whitespace; give a flag and "
    'its value as two entries ("--max-num-batched-tokens", "8192") or as one with "=" '
    '("--max-num-batched-tokens=8192")'
)
#: The per-argument rules as CEL (rule, message) pairs, the same as :func:`check_extra_arg` (the
#: shared rule against hidden characters comes with the type, glm_operator.api.safe_text).
EXTRA_ARG_CEL_RULES: tuple[tuple[str, str], ...] = (
    ("self != ''", EMPTY_ARG_MESSAGE),
    (
        f"!self.startsWith('-') || self.matches({kv.cel_string(f'^({FLAG_NAME_PATTERN})(=|$)')})",
        FLAG_SYNTAX_MESSAGE,
    ),
)


def check_extra_arg(arg: str) -> str:
    """``arg`` (one element of ``serving.extraArgs``) if vLLM can parse it, else ValueError saying why.

    A value (not starting with ``-``) may be any text (the hidden characters of
    glm_operator.api.safe_text aside); a flag must be spelled as vLLM spells it
    (:data:`FLAG_NAME_PATTERN`). Managed flags, unknown flags and the list's structure are checked
    apart (:func:`managed_flag`, :func:`unknown_flag_error`, :func:`structure_error`).
    """
    if arg == "":
        raise ValueError(EMPTY_ARG_MESSAGE)
    if arg.startswith("-") and not re.fullmatch(FLAG_NAME_PATTERN, arg.split("=", 1)[0]):
        raise ValueError(f"{arg[:80]!r}: {FLAG_SYNTAX_MESSAGE}")
    return arg
