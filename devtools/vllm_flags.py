"""``python -m devtools vllm-flags``: regenerate ``glm_operator/api/vllm_flags.py`` from vLLM's parser.

The extraArgs guard (``glm_operator.api.vllm_args``) must know every spelling of the flags the
operator manages. Rather than a hand-kept list, this command asks the real vLLM package (the
release of the default image, installed by ``hack/vllm.sh`` into its own virtualenv) for the
options of ``vllm serve`` and writes them down. ``--check`` fails when the committed file differs
(the vLLM contract test does the same). ``probe`` runs one request in that virtualenv; the contract
tests use it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glm_operator.api import vllm_args as va
from glm_operator.api.vllm_args import CEL_NAME_LIMIT, MANAGED_DESTS

REPO_ROOT = Path(__file__).resolve().parents[1]
FLAGS_MODULE = REPO_ROOT / "operator" / "glm_operator" / "api" / "vllm_flags.py"
PROBE_SCRIPT = REPO_ROOT / "tests" / "harness" / "vllm_probe.py"  # runs in the vLLM virtualenv


def vllm_python() -> str:
    """The vLLM virtualenv's python: ``$VLLM_PYTHON``, else installed/located by ``hack/vllm.sh``."""
    if os.environ.get("VLLM_PYTHON"):
        return os.environ["VLLM_PYTHON"]
    script = REPO_ROOT / "hack" / "vllm.sh"
    out = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def probe(request: Mapping[str, Any], python: str | None = None, timeout: float = 900) -> Any:
    """Run one probe request in the vLLM virtualenv and return its JSON answer."""
    proc = subprocess.run(
        [python or vllm_python(), "-P", str(PROBE_SCRIPT)],  # -P: not its own directory on sys.path
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"vLLM probe {request.get('op')} failed ({proc.returncode}): {proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout)


def _canonical_long(option_strings: list[str]) -> str:
    longs = [o for o in option_strings if o.startswith("--") and not o.startswith("--no-")]
    return longs[0] if longs else option_strings[0]


#: argparse actions that print and exit.
_EXITING_ACTIONS = frozenset({"_HelpAction", "_VersionAction"})
#: vLLM's parser rewrites ``-O<level>``, ``-O=<level>`` and ``-O <0-3>`` to ``--optimization-level``
#: before argparse sees them (FlexibleArgumentParser.parse_args): ``-O`` is an option in all but name.
OPTIMIZATION_LEVEL_ALIAS = ("-O", "--optimization-level")


def values_code(action: Mapping[str, Any]) -> int:
    """How many values an option takes (a ``VALUES_*`` code of glm_operator.api.vllm_args)."""
    nargs = action["nargs"]
    if action["action"] in _EXITING_ACTIONS:
        return va.VALUES_EXITS
    if nargs == 0:
        return va.VALUES_SWITCH
    if nargs == "?":
        return va.VALUES_OPTIONAL
    if nargs == "*":
        return va.VALUES_ANY
    if nargs == "+" or (isinstance(nargs, int) and nargs > 1):
        return va.VALUES_ONE_OR_MORE
    if nargs in (None, 1):
        return va.VALUES_JSON if action["json"] else va.VALUES_ONE
    raise RuntimeError(f"option {action['option_strings']} has nargs {nargs!r}, which the guard cannot read")


def render_flags_module(options: Mapping[str, Any]) -> str:
    """The text of ``vllm_flags.py`` for the options dump of one vLLM release."""
    managed: dict[str, str] = {}
    all_options: set[str] = set()
    option_values: dict[str, int] = {}
    for action in options["actions"]:
        strings = list(action["option_strings"])
        all_options.update(strings)
        for option in [*strings, *action["hidden_option_strings"]]:
            option_values[option] = values_code(action)
        if action["dest"] in MANAGED_DESTS and strings:
            canonical = _canonical_long(strings)
            for option in strings:
                managed[option] = canonical
    alias, target = OPTIMIZATION_LEVEL_ALIAS
    if target in option_values:
        option_values[alias] = option_values[target]
    too_long = sorted(o for o in option_values if len(o) >= CEL_NAME_LIMIT)
    if too_long:
        raise RuntimeError(f"options longer than the CEL rule reads ({CEL_NAME_LIMIT}): {too_long}")
    one_letter = {o: c for o, c in managed.items() if len(o) == 2 and o[0] == "-" and o[1] != "-"}
    # Unmanaged options that start like a managed one-letter alias, or are a prefix of a managed
    # option (argparse would take them exactly, not as an abbreviation): the guard lets them through.
    others = sorted(
        o
        for o in all_options
        if o not in managed
        and (
            any(o.startswith(s) for s in one_letter)
            or any(m.startswith(o) and m.startswith("--") == o.startswith("--") for m in managed)
        )
    )
    lines = [
        f'"""Generated by `make vllm-flags` from the `vllm serve` parser of vLLM {options["version"]}.',
        "",
        "MANAGED_OPTIONS maps every option string of the managed destinations (glm_operator.api.vllm_args)",
        "to its canonical long spelling; MANAGED_ONE_LETTER the one-letter aliases, which argparse also",
        "accepts glued to their value; OTHER_OPTIONS_WITH_MANAGED_PREFIX the unmanaged options that start",
        "like a managed one (the guard lets them through); ALLOW_ABBREV whether the parser accepts unique",
        "prefixes of long options. OPTION_VALUES maps every option string the parser accepts (hidden ones",
        "such as --no-enable-x included) to how many values it takes, a VALUES_* code of",
        'glm_operator.api.vllm_args.\n"""',
        "",
        "from __future__ import annotations",
        "",
        f'VLLM_VERSION = "{options["version"]}"',
        f"ALLOW_ABBREV = {bool(options['allow_abbrev'])}",
        "MANAGED_OPTIONS: dict[str, str] = {",
        *[f'    "{o}": "{c}",' for o, c in sorted(managed.items())],
        "}",
        "MANAGED_ONE_LETTER: dict[str, str] = {",
        *[f'    "{o}": "{c}",' for o, c in sorted(one_letter.items())],
        "}",
        "OTHER_OPTIONS_WITH_MANAGED_PREFIX: frozenset[str] = frozenset(",
        "    {",
        *[f'        "{o}",' for o in others],
        "    }",
        ")",
        "OPTION_VALUES: dict[str, int] = {",
        *[f'    "{o}": {c},' for o, c in sorted(option_values.items())],
        "}",
        "",
    ]
    return "\n".join(lines)


def regenerate(check: bool) -> int:
    """Write ``FLAGS_MODULE`` from vLLM's parser, or (``check``) fail when the committed one differs."""
    text = render_flags_module(probe({"op": "options"}))
    if check:
        if FLAGS_MODULE.read_text(encoding="utf-8") != text:
            print(f"{FLAGS_MODULE} differs from vLLM's parser: run `make vllm-flags`", file=sys.stderr)
            return 1
        return 0
    FLAGS_MODULE.write_text(text, encoding="utf-8")
    print(f"wrote {FLAGS_MODULE}")
    return 0
