"""One rule for every string of the spec that reaches a process: no hidden characters.

A string the operator copies into a command line (``serving.extraArgs``, the model's path), an
environment variable, a label value or a file path must read as what it does. Control characters
(C0, DEL, C1; tab, newline and carriage return are allowed, so a chat template or a JSON config may
span lines) garble logs, and a NUL cannot be passed to a process at all. Unicode *format* characters
(category Cf) are invisible: bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069)
show ``--x=\u202egpj.exe`` as something else in a terminal or a review, zero-width characters
(U+200B..U+200D, U+2060, U+FEFF) make two equal-looking strings differ, tag characters
(U+E0000..U+E007F) carry invisible text. Neither kind is ever meant in such a string.

The rule is the same everywhere: :data:`SafeText` (a pydantic type carrying both the validator and
the CRD's CEL rule) is the type of every such field, so the apiserver refuses the string when it is
applied, naming the field, and pydantic refuses it offline and in the operator.

The CEL rule is RE2's category C ("other") but tab, line feed and carriage return: control,
format, private-use, surrogate and unassigned code points. A short regular expression matters: the
apiserver's cost estimate of ``matches`` grows with the regex's length times the string's maximum
size, and ``serving.env`` allows 128 values of 32 KiB (a longer class of explicit ranges is over the
budget). Python's ``re`` has no categories, so the validator asks ``unicodedata`` for the same
categories except unassigned: Python's Unicode tables may be older than Go's, and a character
assigned since (a newer emoji) must not be refused by the operator once the apiserver stored it. A
code point unassigned in both is refused by the apiserver, which sees every spec first.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.config import JsonDict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema as cs

from glm_operator.api.kube_validation import cel_string

#: Control characters refused: every one of Unicode category Cc but tab, line feed and carriage return.
CONTROL_CHARACTER_PATTERN = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
#: Unicode categories the validator refuses besides those control characters: format (Cf),
#: private use (Co), surrogates (Cs).
UNSAFE_CATEGORIES = frozenset({"Cf", "Co", "Cs"})
#: The rule for RE2 (the CEL rule): every character of category C ("other": Cc, Cf, Co, Cs and Cn,
#: unassigned) but tab, line feed and carriage return.
UNSAFE_CHARACTER_RE2 = r"[^\P{C}\t\n\r]"
UNSAFE_TEXT_MESSAGE = (
    "must not contain control characters (tab, newline and carriage return are allowed), invisible "
    "Unicode format characters (bidirectional overrides and isolates such as U+202E, zero-width "
    "characters such as U+200B or U+FEFF, tag characters), private-use or unassigned code points: they "
    "hide what the text says; remove them"
)
_CONTROL = re.compile(CONTROL_CHARACTER_PATTERN)


NO_UNSAFE_CHARACTER_CEL = f"!self.matches({cel_string(UNSAFE_CHARACTER_RE2)})"


def unsafe_character(text: str) -> tuple[int, str] | None:
    """The position and the first character of ``text`` the rule refuses, or None."""
    control = _CONTROL.search(text)
    first = (control.start(), control.group()) if control else None
    for i, char in enumerate(text if first is None else text[: first[0]]):
        if char > "\x7f" and unicodedata.category(char) in UNSAFE_CATEGORIES:
            return i, char
    return first


def describe_character(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'control character')}"


def check_safe_text(value: str) -> str:
    """``value`` unchanged, or ValueError naming the first hidden character and where it is."""
    found = unsafe_character(value)
    if found is not None:
        at, char = found
        raise ValueError(
            f"{value[:80]!r} has {describe_character(char)} at character {at}: it {UNSAFE_TEXT_MESSAGE}"
        )
    return value


@dataclass(frozen=True)
class CelRule:
    """An ``x-kubernetes-validations`` entry carried by a type (``Annotated[str, CelRule(...)]``).

    Entries add up: a field typed ``Annotated[SafeText, CelRule(...)]`` carries both rules, so the
    shared rule never has to be copied into a field's own list.
    """

    rule: str
    message: str
    field_path: str | None = None
    message_expression: str | None = None
    reason: str | None = None

    def entry(self) -> JsonDict:
        entry: JsonDict = {"rule": self.rule, "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry

    def __get_pydantic_json_schema__(
        self, core_schema: cs.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema: dict[str, Any] = handler(core_schema)
        schema.setdefault("x-kubernetes-validations", []).append(self.entry())
        return schema


SAFE_TEXT_RULE = CelRule(NO_UNSAFE_CHARACTER_CEL, UNSAFE_TEXT_MESSAGE)

SafeText = Annotated[str, AfterValidator(check_safe_text), SAFE_TEXT_RULE]
"""A string that reaches a command line, an environment variable, a label or a file path."""

LINE_BREAK_PATTERN = r"[\t\n\r]"
SINGLE_LINE_MESSAGE = "must be one line: no tab, newline or carriage return"


def check_single_line(value: str) -> str:
    if re.search(LINE_BREAK_PATTERN, value):
        raise ValueError(f"{value[:80]!r} {SINGLE_LINE_MESSAGE}")
    return value


#: The rule as a pattern, for a word of visible characters (no whitespace, no character of category C:
#: tab and newlines are refused too). A pattern costs nothing in the apiserver's CEL budget, which
#: cannot afford a CEL rule on every one of many strings (a GLMGateway allows 256 served names for
#: each of 1,000 clients). pydantic's regex engine knows the categories as RE2 does.
VISIBLE_WORD_PATTERN = r"^[^\s\p{Z}\p{C}]+$"

SafeLine = Annotated[
    SafeText,
    AfterValidator(check_single_line),
    CelRule(f"!self.matches({cel_string(LINE_BREAK_PATTERN)})", SINGLE_LINE_MESSAGE),
]
"""A :data:`SafeText` of one line: a path, a name, a key."""
