"""Parsers from a teacher's raw text to a label. They never invent a value: an answer that is not
what was asked for gets a failure status and no value; out-of-range numbers are kept, flagged.

Formats asked for (see the prompt files): one `key: value` line per field, as ERPv's prompts ask
for `throttle:` and `steer:` (fig. 12-14). Named fields on one line separated by commas or
semicolons (`throttle: 0.3, steer: -0.2`) are the same format, and so is a JSON object (structured
output). Markdown emphasis around keys (`**steer:** 0`, as in ERPv fig. 14) is accepted. A field
given twice with different values is `ambiguous` (a model changing its mind, or a repetition
loop), never "the last one wins".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pipeline.labels.schema import EnvLabelSchema
from pipeline.labels.status import ParseStatus

# Part of every cache key: bump it when a parser changes what it returns for some text.
PARSER_VERSION = "3"

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NON_FINITE = r"[-+]?(?:nan|inf(?:inity)?)"
_NUMBER_RE = re.compile(rf"(?<![\w.])(?:{_NUMBER}|{_NON_FINITE})(?![\w.])", re.IGNORECASE)
_BRACKETS_RE = re.compile(r"[\[(]([^\])]*)[\])]")


@dataclass(frozen=True)
class ParseResult:
    status: ParseStatus
    value: Any = None  # the parsed label; None unless the status carries one (or out_of_range)
    detail: str = ""  # why, for the audit


def _key_line(key: str) -> re.Pattern[str]:
    """`key: value` on its own line, tolerating markdown (`**key:** v`, `- key = v`)."""
    return re.compile(
        rf"^[\s>*_`#-]*{re.escape(key)}[\s*_`]*[:=][\s*_`]*(?P<value>[^\n]*?)[\s*_`.]*$",
        re.IGNORECASE | re.MULTILINE,
    )


def _to_float(token: str) -> float:
    return float(token.lower().replace("infinity", "inf"))


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def _json_as_lines(text: str) -> str:
    """A JSON object answer (structured output) read as `key: value` lines; other text as is."""
    stripped = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    if not stripped.startswith("{"):
        return text
    try:
        obj = json.loads(stripped)
    except json.JSONDecodeError:
        return text
    if not isinstance(obj, dict):
        return text
    lines = []
    for key, value in obj.items():
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


# `, steer:` / `; milestone =`: a separator followed by a field name and its `:` or `=`
_NEXT_FIELD = re.compile(r"\s*[,;]\s*(?=[*_`]*[A-Za-z][A-Za-z_ ]{0,24}?[*_`]*\s*[:=])")


def _normalise(text: str) -> str:
    """JSON objects and one-line `a: 1, b: 2` answers as one `key: value` line per field."""
    return "\n".join(_NEXT_FIELD.sub("\n", line) for line in _json_as_lines(text).split("\n"))


def _field(text: str, key: str) -> tuple[str | None, ParseResult | None]:
    """The value of `key` (None: absent), or an `ambiguous` result when the answer gives the
    field more than once with different values."""
    values = [v.strip() for v in _key_line(key).findall(text)]
    if not values:
        return None, None
    distinct = list(dict.fromkeys(v.lower() for v in values))
    if len(distinct) > 1:
        return None, ParseResult(
            ParseStatus.AMBIGUOUS,
            detail=f"{key} given {len(values)} times with different values: {distinct[:3]}",
        )
    return values[-1], None


def parse_action(
    text: str | None, schema: EnvLabelSchema, action_space: dict[str, Any]
) -> ParseResult:
    """Continuous: one number per named dimension. Discrete: one of the named choices."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    text = _normalise(text)
    if schema.action_choices is not None:
        return _parse_discrete_action(text, schema, action_space)

    values: list[float] = []
    missing: list[str] = []
    for name in schema.action_names:
        value, conflict = _field(text, name)
        if conflict is not None:
            return conflict
        numbers = _NUMBER_RE.findall(value) if value is not None else []
        if len(numbers) != 1:
            missing.append(name)
        else:
            values.append(_to_float(numbers[0]))
    status = ParseStatus.OK
    if missing:
        fallback = _fallback_numbers(text, len(schema.action_names))
        if fallback is None:
            found = len(schema.action_names) - len(missing)
            if found:
                return ParseResult(
                    ParseStatus.WRONG_ARITY, detail=f"no single number for {', '.join(missing)}"
                )
            any_numbers = _NUMBER_RE.findall(text)
            if any_numbers:
                return ParseResult(
                    ParseStatus.WRONG_ARITY,
                    detail=f"{len(any_numbers)} loose numbers, expected {len(schema.action_names)} "
                    f"named values ({', '.join(schema.action_names)})",
                )
            return ParseResult(ParseStatus.FORMAT_COLLAPSE, detail="no action values in the answer")
        values, status = fallback, ParseStatus.REGEX_FALLBACK
    if not all(math.isfinite(v) for v in values):
        return ParseResult(ParseStatus.NON_FINITE, detail=f"values {values}")
    low, high = action_space["low"], action_space["high"]
    outside = [
        f"{name}={v} not in [{lo}, {hi}]"
        for name, v, lo, hi in zip(schema.action_names, values, low, high, strict=True)
        if not lo <= v <= hi
    ]
    if outside:
        return ParseResult(ParseStatus.OUT_OF_RANGE, values, "; ".join(outside))
    return ParseResult(status, values)


def _fallback_numbers(text: str, dim: int) -> list[float] | None:
    """A bracketed list of exactly `dim` numbers, or an `action:` line with exactly `dim`."""
    candidates = [m.group(1) for m in _BRACKETS_RE.finditer(text)]
    candidates += _key_line("action").findall(text)
    for candidate in candidates:
        numbers = _NUMBER_RE.findall(candidate)
        if len(numbers) == dim and numbers == _NUMBER_RE.findall(candidate.replace(",", " ")):
            return [_to_float(n) for n in numbers]
    return None


def _parse_discrete_action(
    text: str, schema: EnvLabelSchema, action_space: dict[str, Any]
) -> ParseResult:
    choices = schema.action_choices
    assert choices is not None
    (name,) = schema.action_names
    value, conflict = _field(text, name)
    if conflict is not None:
        return conflict
    if value is not None:
        answer = value.strip("\"'").lower()
        if answer in choices:
            return ParseResult(ParseStatus.OK, choices.index(answer) + action_space["start"])
        if re.fullmatch(r"\d+", answer):
            index = int(answer) - action_space["start"]
            if 0 <= index < len(choices):
                return ParseResult(ParseStatus.REGEX_FALLBACK, int(answer), "index instead of name")
            return ParseResult(
                ParseStatus.OUT_OF_RANGE,
                int(answer),
                f"index {answer} not in 0..{len(choices) - 1}",
            )
        return ParseResult(
            ParseStatus.INVALID_CHOICE, detail=f"{name}: {answer!r} not in {list(choices)}"
        )
    found = _choices_in(text, choices)
    if len(found) == 1:
        return ParseResult(
            ParseStatus.REGEX_FALLBACK, choices.index(found[0]) + action_space["start"]
        )
    if len(found) > 1:
        return ParseResult(ParseStatus.AMBIGUOUS, detail=f"mentions {found}")
    return ParseResult(ParseStatus.FORMAT_COLLAPSE, detail=f"no `{name}:` line and no choice named")


def _choices_in(text: str, choices: tuple[str, ...]) -> list[str]:
    """Allowed choices mentioned as words (`LEFT_SLOPE` also as `left slope`), in choice order."""
    found = []
    for choice in choices:
        pattern = re.escape(choice).replace("_", "[_ -]")
        if re.search(rf"(?<![\w]){pattern}(?![\w])", text, re.IGNORECASE):
            found.append(choice)
    return found


def parse_milestone(text: str | None, schema: EnvLabelSchema) -> ParseResult:
    """One label of the env's milestone set; value = (label, Phi_raw)."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    text = _normalise(text)
    labels = tuple(schema.milestones)
    value, conflict = _field(text, "milestone")
    if conflict is not None:
        return conflict
    if value is not None:
        answer = value.strip("\"'").upper().replace(" ", "_").replace("-", "_")
        if answer in schema.milestones:
            return ParseResult(ParseStatus.OK, (answer, schema.milestones[answer]))
        found = _choices_in(value, labels)
        if len(found) > 1:
            return ParseResult(ParseStatus.AMBIGUOUS, detail=f"milestone line names {found}")
        if not answer:
            return ParseResult(ParseStatus.EMPTY, detail="empty milestone line")
        return ParseResult(ParseStatus.INVALID_CHOICE, detail=f"{answer!r} not in {list(labels)}")
    found = _choices_in(text, labels)
    if len(found) == 1:
        return ParseResult(ParseStatus.REGEX_FALLBACK, (found[0], schema.milestones[found[0]]))
    if len(found) > 1:
        return ParseResult(ParseStatus.AMBIGUOUS, detail=f"mentions {found}")
    return ParseResult(
        ParseStatus.FORMAT_COLLAPSE, detail="no `milestone:` line and no label named"
    )


MAX_OBJECT_WORDS = 6


def parse_objects(text: str | None) -> ParseResult:
    """Key object phrases (Semore): `objects: a, b, c`; a bulleted list is the fallback."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    text = _normalise(text)
    value, conflict = _field(text, "objects")
    if conflict is not None:
        return conflict
    if value is not None:
        phrases, status = re.split(r"[,;]", value), ParseStatus.OK
    else:
        phrases = re.findall(r"^\s*(?:[-*•]|\d+[.)])\s+(.+?)\s*$", text, re.MULTILINE)
        status = ParseStatus.REGEX_FALLBACK
    cleaned: list[str] = []
    for phrase in phrases:
        phrase = re.sub(r"\s+", " ", phrase.strip().strip("\"'*`.").strip()).lower()
        if phrase and phrase not in cleaned:
            cleaned.append(phrase)
    if not cleaned:
        if value is not None:
            return ParseResult(ParseStatus.EMPTY, detail="empty objects line")
        return ParseResult(ParseStatus.FORMAT_COLLAPSE, detail="no `objects:` line and no list")
    too_long = [p for p in cleaned if len(p.split()) > MAX_OBJECT_WORDS]
    if too_long:
        return ParseResult(
            ParseStatus.FORMAT_COLLAPSE,
            detail=f"phrases of over {MAX_OBJECT_WORDS} words: {too_long[:2]}",
        )
    return ParseResult(status, cleaned)


_YES = ("yes", "true", "reasonable")
_NO = ("no", "false", "unreasonable")


def parse_judge(text: str | None) -> ParseResult:
    """Semore's selective-buffer judgement: is the stored action reasonable here? value = bool."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    text = _normalise(text)
    value, conflict = _field(text, "reasonable")
    if conflict is not None:
        return conflict
    if value is not None:
        answer = value.strip("\"'").lower()
        if answer in _YES:
            return ParseResult(ParseStatus.OK, True)
        if answer in _NO:
            return ParseResult(ParseStatus.OK, False)
        return ParseResult(
            ParseStatus.INVALID_CHOICE, detail=f"reasonable: {answer!r} is not yes/no"
        )
    words = set(re.findall(r"[a-z]+", text.lower()))
    yes, no = bool(words & {"yes"}), bool(words & {"no"})
    if yes and no:
        return ParseResult(ParseStatus.AMBIGUOUS, detail="says both yes and no")
    if yes or no:
        return ParseResult(ParseStatus.REGEX_FALLBACK, yes)
    return ParseResult(ParseStatus.FORMAT_COLLAPSE, detail="no `reasonable:` line and no yes/no")
