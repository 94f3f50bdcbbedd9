"""Parsers from a teacher's raw text to a label. They never invent a value: an answer that is not
what was asked for gets a failure status and no value; out-of-range numbers are kept, flagged.

Formats asked for (see the prompt files): one `key: value` line per field, as ERPv's prompts ask
for `throttle:` and `steer:` (fig. 12-14). Named fields on one line separated by commas or
semicolons (`throttle: 0.3, steer: -0.2`) are the same format, and so is a JSON object (structured
output). Markdown emphasis around keys (`**steer:** 0`, as in ERPv fig. 14) is accepted. A field
given twice with different values is `ambiguous` (a model changing its mind, or a repetition
loop), never "the last one wins"; so is an answer that gives its fields, then corrects itself in
free text after them (`push: left. Wait, actually right`): never "the first one wins" either.

Every pattern here runs in time linear in the answer: a repetition loop up to the token limit (a
run of blank lines, of `*`, of `[`) must not make one regex backtrack over the run at every offset.
An answer longer than `MAX_ANSWER_CHARS` is `too_long` and not read at all.

What current chat models add around an answer is taken off first (`_answer_text`): a reasoning
block (`<think>...</think>`: what a model says while thinking is never the answer, even when it
is the only place a label appears), end-of-turn tokens and anything after them, and typographic
signs (U+2212 minus, en dash, full-width forms) before a number, read as the signs they stand
for. A field may also be given as `key value` when the value is the line's only other word
(`steer -0.2`; not for objects, whose phrases have spaces), and several one-word fields may share
a line without commas (`throttle: 0.3 steer: -0.2`).

Why one module of this length: every task's parser goes through the same answer cleaning
(`_answer_text`) and the same linear-time field patterns; the guarantees above (no invented
value, linear time) are properties of the two together, and the property tests read them as one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pipeline.teach.labels.schema import EnvLabelSchema
from pipeline.teach.labels.status import ParseStatus

# Part of every cache key: bump it when a parser changes what it returns for some text.
# Not in the cache key (raw answers do not depend on the parser, so a new parser re-reads the
# cached answers instead of asking again); recorded in every label row.
PARSER_VERSION = "5"
# The longest answer read: max_tokens is at most 4,096, so an honest answer is far shorter; a
# longer one is an attack or a runaway server and is stored raw, its status `too_long`.
MAX_ANSWER_CHARS = 32_768
# What is stored of an answer over the cap (`clip_answer`): its first characters and its size,
# never the whole (44 answers of 10 MB once held 8.3 GB). The marker is read back as too_long.
CLIP_KEEP_CHARS = 1_024
_CLIPPED = re.compile(r"\n\[clipped: (?P<size>[0-9,]+ (?:characters|bytes|bytes or more))\]\Z")

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NON_FINITE = r"[-+]?(?:nan|inf(?:inity)?)"
# A number may end a sentence (`force: 0.5. The car is slow.`), but not be a piece of `1.2.3`.
_NUMBER_RE = re.compile(rf"(?<![\w.])(?:{_NUMBER}|{_NON_FINITE})(?!\w|\.\d)", re.IGNORECASE)
# innermost brackets only: an unclosed run of `[` is scanned once, not once per `[`
_BRACKETS_RE = re.compile(r"[\[(]([^\[\]()]*)[\])]")
_OBJECTS_KEY = r"(?:key[ \t_]+)?objects?"  # `objects:`, `Key objects:`, `object:`


@dataclass(frozen=True)
class ParseResult:
    status: ParseStatus
    value: Any = None  # the parsed label; None unless the status carries one (or out_of_range)
    detail: str = ""  # why, for the audit


def _key_line(key: str, bare: bool = False) -> re.Pattern[str]:
    """`key: value` on its own line, tolerating markdown (`**key:** v`, `- key = v`); `key` is a
    regex. The value may start on the next line (`steer:\n0.5`); read it with `_values`. `bare`:
    also `key value` where the value is the line's only other word (`steer -0.2`)."""
    separator = r"[ \t*_`]*[:=][\s*_`]*"
    if bare:  # the lookahead reads one line once per line start: linear
        separator = rf"(?:{separator}|[ \t]+(?=[^\s:=]+[ \t\r]*$))"
    return re.compile(
        rf"^[ \t>*_`#-]*(?:{key}){separator}(?P<value>[^\n]*)",
        re.IGNORECASE | re.MULTILINE,
    )


def _values(pattern: re.Pattern[str], text: str) -> list[str]:
    """The values of every `key: value` line, without trailing markdown and punctuation (stripped
    here, not by the regex: a lazy value before a trailing class backtracks quadratically)."""
    return [m.group("value").rstrip(" \t\r*_`.,;") for m in pattern.finditer(text)]


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
    except (json.JSONDecodeError, RecursionError):  # nested past the decoder's recursion limit
        return text
    if not isinstance(obj, dict):
        return text
    lines = []
    for key, value in obj.items():
        if isinstance(value, list) and re.fullmatch(_OBJECTS_KEY, key.strip(), re.IGNORECASE):
            value = json.dumps(value, ensure_ascii=False)  # each string one phrase, as it stands
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        lines.append(f"{key}: {value}")
    return "\n".join(lines)


# `, steer:` / `; milestone =`: a separator followed by a field name and its `:` or `=` (matched
# only from the start of a whitespace run, so a long run is not rescanned from each of its offsets)
_NEXT_FIELD = re.compile(r"(?<!\s)\s*[,;]\s*(?=[*_`]*[A-Za-z][A-Za-z_ ]{0,24}?[*_`]*[ \t]*[:=])")


# a field name and its `:` / `=` inside a line (`throttle: 0.3 steer: -0.2`)
_INLINE_KEY = re.compile(r"(?:^|(?<=\s))[*_`]*[A-Za-z][A-Za-z_]{0,24}[*_`]*[ \t]*[:=]")


def _split_pairs(line: str) -> list[str]:
    """`throttle: 0.3 steer: -0.2` as two lines when every field on the line has a one-word value;
    any other line (prose, a phrase list, `objects: light: red`) as it is."""
    keys = list(_INLINE_KEY.finditer(line))
    if len(keys) < 2 or line[: keys[0].start()].strip(" \t>*_`#-"):
        return [line]
    if re.search(_OBJECTS_KEY, keys[0].group(), re.IGNORECASE):
        return [line]  # phrases may hold a colon: `objects: traffic light: red`
    starts = [key.start() for key in keys]
    parts = [line[a:b] for a, b in zip(starts, [*starts[1:], len(line)], strict=True)]
    values = [_INLINE_KEY.sub("", part, count=1).strip(" \t\r*_`.,;") for part in parts]
    if not all(value and len(value.split()) == 1 for value in values):
        return [line]
    return [part.rstrip() for part in parts]


def _normalise(text: str) -> str:
    """JSON objects and one-line `a: 1, b: 2` or `a: 1 b: 2` answers as one `key: value` line
    per field."""
    lines = (_NEXT_FIELD.sub("\n", line) for line in _json_as_lines(text).split("\n"))
    return "\n".join(
        part for line in lines for sub in line.split("\n") for part in _split_pairs(sub)
    )


# ---- what chat models wrap an answer in -------------------------------------------------------

# A reasoning block's tags (DeepSeek-R1, Qwen3, QwQ: `think`; others: `thinking`, `reasoning`).
_REASONING_TAG = re.compile(r"<(/?)(?:think|thinking|reasoning|reflection)>", re.IGNORECASE)
# End-of-turn and end-of-text tokens (ChatML, Llama 3, Gemma, Phi, SentencePiece) and turn starts
_TURN_TOKEN = re.compile(
    r"<\|(?:im_end|im_start|eot_id|eom_id|end|endoftext|end_of_text|start_header_id)\|>"
    r"|</s>|<eos>|<end_of_turn>|<start_of_turn>",
    re.IGNORECASE,
)
# A minus or plus sign written typographically, directly before a number (an en dash between
# two numbers is a range, not a sign)
_TYPOGRAPHIC_SIGN = re.compile(
    r"(?<![\w.])([\u2212\u2012\u2013\ufe63\uff0d\u2796]|\uff0b)(?=\.?\d)"
)


def _outside_reasoning(text: str) -> tuple[str, bool]:
    """The text outside reasoning blocks, and whether there was one. A closing tag with no
    opening one (a chat template that opens the block in the prompt) ends reasoning that began
    at the start; an opening tag never closed (generation stopped while thinking) runs to the
    end. One pass over the tags: linear."""
    kept: list[str] = []
    depth, position, found = 0, 0, False
    for tag in _REASONING_TAG.finditer(text):
        found = True
        if tag.group(1):  # closing
            if depth == 0:
                kept = []  # everything so far was reasoning
            depth = max(depth - 1, 0)
        else:
            if depth == 0:
                kept.append(text[position : tag.start()])
            depth += 1
        position = tag.end()
    if depth == 0:
        kept.append(text[position:])
    return "".join(kept), found


def _without_turn_tokens(text: str) -> str:
    """The first stretch of text between turn tokens that says anything: what follows an
    end-of-turn token after the answer is another turn, not the answer."""
    return next((piece for piece in _TURN_TOKEN.split(text) if piece.strip()), "")


def clip_answer(text: str, size: str | None = None) -> str:
    """An answer over `MAX_ANSWER_CHARS` as it is stored: its first `CLIP_KEEP_CHARS` characters
    and its size (`size`, e.g. "300,000 bytes or more", where the whole was never read)."""
    return f"{text[:CLIP_KEEP_CHARS]}\n[clipped: {size or f'{len(text):,} characters'}]"


def _answer_text(text: str) -> tuple[str | None, ParseResult | None]:
    """The answer a parser reads (reasoning, turn tokens and typographic signs dealt with), or
    the result for an answer with nothing to read."""
    clipped = _CLIPPED.search(text) if len(text) <= CLIP_KEEP_CHARS + 64 else None
    if len(text) > MAX_ANSWER_CHARS or clipped:
        size = clipped["size"] if clipped else f"{len(text):,} characters"
        return None, ParseResult(
            ParseStatus.TOO_LONG, detail=f"{size}, over {MAX_ANSWER_CHARS:,} characters"
        )
    answer, reasoned = _outside_reasoning(text)
    answer = _without_turn_tokens(answer)
    if _blank(answer):
        if reasoned:
            return None, ParseResult(
                ParseStatus.FORMAT_COLLAPSE, detail="only a reasoning block, no answer after it"
            )
        return None, ParseResult(ParseStatus.EMPTY)
    answer = _TYPOGRAPHIC_SIGN.sub(lambda m: "+" if m.group(1) == "\uff0b" else "-", answer)
    return answer, None


def _field(
    text: str, key: str, pattern: str | None = None, bare: bool = True
) -> tuple[str | None, ParseResult | None]:
    """The value of `key` (None: absent), or an `ambiguous` result when the answer gives the
    field more than once with different values. `pattern`: a regex for the key, else `key`.
    `bare`: also read `key value` lines (see `_key_line`)."""
    values = [v.strip() for v in _values(_key_line(pattern or re.escape(key), bare), text)]
    if not values:
        return None, None
    distinct = list(dict.fromkeys(v.lower() for v in values))
    if len(distinct) > 1:
        return None, ParseResult(
            ParseStatus.AMBIGUOUS,
            detail=f"{key} given {len(values)} times with different values: {distinct[:3]}",
        )
    return values[-1], None


# ---- self-corrections -------------------------------------------------------------------------

# Words with which an answer takes back what it just said. `actually`, `wait` and the like only
# where a clause begins (after punctuation, a line break, or `no` / `but` / `oh`...): "the car is
# actually moving left" is a description, "push: right. Actually, left" a correction. `or rather`,
# `I was wrong` and the like anywhere, and `instead`, which follows the new value (`use -0.3
# instead`; not `instead of`, which names the value not chosen).
_CORRECTION = re.compile(
    r"(?:^|[\n.,;:!?(\-\u2013\u2014\u2026\"'*]|\b(?:no|oh|hmm+|um+|uh|ah|ok|okay|but))[ \t]*"
    r"(?P<word>wait|actually|i mean|sorry|correction|scratch that|on second thought|final answer"
    r"|revised)\b"
    r"|\b(?P<anywhere>or rather|my (?:mistake|bad)|i was wrong"
    r"|let me (?:correct|fix|revise|reconsider|rethink|re-?check|double[- ]check)"
    r"|change (?:it|that|this|my answer) to|correct(?:ed|ing)? (?:that|myself|it))\b"
    r"|\b(?P<instead>instead)\b(?! of)",
    re.IGNORECASE | re.MULTILINE,
)
# where the clause of an `instead` begins: `force: 0.5, use -0.3 instead` (not a decimal point)
_CLAUSE_START = re.compile(r"[\n;!?,]|\.(?!\d)|\s[-\u2013\u2014]+\s")
_INTERJECTION = re.compile(r"\b(?:no|oh|hmm+|um+|uh|ah|ok|okay|well|but)$", re.IGNORECASE)
_CLAUSE_END = " \t\r\n,;:.!?(-\u2013\u2014"


def _self_corrected(
    text: str,
    keys: Iterable[str],
    parse: Callable[[str], ParseResult],
    renamed: Callable[[Any, str], str | None],
) -> ParseResult:
    """`parse(text)`, unless the answer corrects itself after its fields (`force: 0.5. Actually,
    -0.3`): then it is `ambiguous` when the part before the correction word reads differently from
    the whole answer, or the rest names another value (`renamed(value, rest)`: the first value it
    names that is not in `value`, or None). A correction that repeats the value changes nothing.

    The correction word is looked for from the first field's value on (`keys`: regexes of the
    field names), or anywhere when no field is named: a description before the fields may muse
    ("the car should actually brake") without taking anything back."""
    full = parse(text)
    starts = [m.start("value") for key in keys if (m := _key_line(key).search(text))]
    start = min(starts, default=0)
    found = _CORRECTION.search(text, start)
    if found is None:
        return full
    group = next(g for g in ("word", "anywhere", "instead") if found.group(g) is not None)
    marker, (cut, resume) = found.group(group), found.span(group)
    if group == "instead":  # the new value is before the word: cut where its clause begins
        clauses = _CLAUSE_START.finditer(text, start, cut)
        cut = resume = max((m.end() for m in clauses), default=start)
    head_text = text[:cut].rstrip(_CLAUSE_END)
    head = parse(head_text)
    if head.value is None:  # `push: left. No, wait: right`: the `no` begins the correction
        head = parse(_INTERJECTION.sub("", head_text).rstrip(_CLAUSE_END))
    first = head.value if head.value is not None else full.value
    if first is None:
        return full
    if head.value is not None and full.value != head.value:
        whole = repr(full.value) if full.value is not None else f"{full.status} ({full.detail})"
        detail = f"{first!r} before {marker!r}, the whole answer reads {whole}"
    else:
        then = renamed(first, _CORRECTION.sub(" ", text[resume:]))
        if then is None:
            return full
        detail = f"{first!r}, then {then!r} after {marker!r}"
    return ParseResult(ParseStatus.AMBIGUOUS, detail=f"two values given: {detail}")


def _renamed_numbers(names: tuple[str, ...]) -> Callable[[Any, str], str | None]:
    """A number after a correction that is not one of the values, or that a field name (`steer
    should be -0.3`) gives for a field that has another."""

    def renamed(values: list[float], rest: str) -> str | None:
        for name, value in zip(names, values, strict=True):
            pattern = rf"(?<!\w){re.escape(name)}(?!\w)[^\d\n+.-]{{0,30}}?({_NUMBER_RE.pattern})"
            for m in re.finditer(pattern, rest, re.IGNORECASE):
                if _to_float(m.group(1)) != value:
                    return f"{name} {m.group(1)}"
        return next((n for n in _NUMBER_RE.findall(rest) if _to_float(n) not in values), None)

    return renamed


def _fields_after(key: str, rest: str) -> list[str]:
    """The values of `key: value` anywhere in the free text after a correction word."""
    pattern = rf"(?<!\w){re.escape(key)}[ \t*_`]*[:=][ \t*_`]*([^\n,;.!?*_`]*)"
    return [v.strip(" \t\"'") for v in re.findall(pattern, rest, re.IGNORECASE)]


def _renamed_choice(key: str, choices: tuple[str, ...], said: str | None, rest: str) -> str | None:
    """A choice named after a correction other than `said`, or another `key:` value."""
    for value in _fields_after(key, rest):
        if value.upper().replace(" ", "_").replace("-", "_") != (said or "").upper():
            return f"{key}: {value}"
    return next((c for c in _choices_in(rest, choices) if c != said), None)


# ---- actions ----------------------------------------------------------------------------------


def parse_action(
    text: str | None, schema: EnvLabelSchema, action_space: dict[str, Any]
) -> ParseResult:
    """Continuous: one number per named dimension. Discrete: one of the named choices."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    answer, failed = _answer_text(text)
    if failed is not None:
        return failed
    text = _normalise(answer)
    keys = [re.escape(name) for name in schema.action_names] + ["action"]
    choices = schema.action_choices
    if choices is not None:
        start = action_space["start"]

        def renamed(index: int, rest: str) -> str | None:
            said = choices[index - start] if 0 <= index - start < len(choices) else None
            return _renamed_choice(schema.action_names[0], choices, said, rest)

        return _self_corrected(
            text, keys, lambda t: _parse_discrete_action(t, schema, action_space), renamed
        )
    return _self_corrected(
        text,
        keys,
        lambda t: _parse_continuous_action(t, schema, action_space),
        _renamed_numbers(schema.action_names),
    )


def _parse_continuous_action(
    text: str, schema: EnvLabelSchema, action_space: dict[str, Any]
) -> ParseResult:
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
    candidates += _values(_key_line("action"), text)
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


# ---- milestones -------------------------------------------------------------------------------


def parse_milestone(text: str | None, schema: EnvLabelSchema) -> ParseResult:
    """One label of the env's milestone set; value = (label, Phi_raw)."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    answer, failed = _answer_text(text)
    if failed is not None:
        return failed
    labels = tuple(schema.milestones)
    return _self_corrected(
        _normalise(answer),
        ["milestone"],
        lambda t: _parse_milestone(t, schema),
        lambda value, rest: _renamed_choice("milestone", labels, value[0], rest),
    )


def _parse_milestone(text: str, schema: EnvLabelSchema) -> ParseResult:
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


# ---- objects ----------------------------------------------------------------------------------

MAX_OBJECT_WORDS = 6
# `objects:` alone on its line: the list is on the lines below
_OBJECTS_HEADER = re.compile(
    rf"^[ \t>*_`#-]*{_OBJECTS_KEY}[ \t*_`]*[:=][ \t*_`]*$", re.IGNORECASE | re.MULTILINE
)
# one item of a bulleted (`- `, `* `, `• `) or numbered (`1. `, `2) `) list
_LIST_ITEM = re.compile(r"(?:[^\S\n]|>)*(?:[-*•+]|\d{1,3}[.)])[^\S\n]+(?P<item>\S.*)")
# `1. car, 2. road` / `1. car 2. road`: enumerators inside one line (from the start of a run of
# separators only, so a long run is not rescanned from each of its offsets)
_INLINE_NUMBER = re.compile(r"(?:^|(?<![\s,;])[\s,;]+)\d{1,3}[.)]\s+")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")
# what ends a list without naming anything: `car, road, etc.` / `car, road, ...`
_LIST_END = frozenset({"", "etc", "and so on", "and more", "and others"})
# A "none" where phrases were asked for: the model says it sees no object (or only punctuation).
_NONE_LIKE = re.compile(
    r"(?:there (?:are|is) )?"
    r"(?:none|no|nothing|null|nil|n/?a|not applicable|unknown|empty|no answer"
    r"|no (?:key |relevant |important |visible |notable |other |such |specific |particular )?"
    r"(?:objects?|things?|items?))"
    r"(?: (?:visible|found|detected|present|relevant|important|notable|of note"
    r"|to (?:list|report|name|attend to)))?"
    r"(?: (?:in|on) (?:the|this) (?:image|frame|scene|picture))?"
    r"|[\W_]*"
)
# The template words for the prompt's placeholders (`object1, object2`, `phrase`, `xxx`, `short
# noun phrases`), or digits and no letter: the whole phrase is one.
_PLACEHOLDER = re.compile(
    r"x{2,}|[\W_]*\d[\W\d_]*"
    r"|(?:(?:short|key) )?(?:noun )?(?:objects?|phrases?|items?|things?|obj)"
    r"(?: ?[_#-]? ?(?:\d{1,3}|[a-z]|n))?"
    r"|(?:as )?(?:short )?noun phrases?"
)
# The prompt's own slots echoed back (`objects: <phrase>, <phrase>, ...`), anywhere in a phrase.
_TEMPLATE_SLOT = re.compile(r"<[^<>\n]*>|\{[^{}\n]*\}")
_COLOUR_PAIR = re.compile(
    r"\b(?:red|white|black|grey|gray|green|blue|yellow|orange|brown|purple|pink|silver)"
    r" (?:and|&) (?=\w)"
)
# `the car and the road`: a determiner after `and` starts a second noun phrase
_AND_NEXT_PHRASE = re.compile(r" (?:and|&) (?=(?:the|a|an|its|their) )")
# words a corrected objects list may add without naming another object
_FILLER = frozenset(
    {"a", "an", "the", "and", "or", "also", "plus", "too", "as", "well", "of", "key", "object",
     "objects"}
)  # fmt: skip


def parse_objects(text: str | None) -> ParseResult:
    """Key object phrases (Semore): `objects: a, b, c`, each a CLIP query and a mask downstream.

    The requested line (`ok`) may also carry a JSON array (`objects: ["car", "road"]`), a bracketed
    list, quoted phrases, inline numbers (`1. car, 2. road`) or `and` before its last phrase (`car,
    road, and grass`). A bulleted or numbered list (under an `objects:` line or not), the next line
    after a bare `objects:`, or a bare JSON array is `regex_fallback`. The strings of a JSON array
    and quoted phrases are phrases as they stand (`["road and grass"]` is one).

    Nothing is a phrase that names no object: an answer of only "none"-like phrases (`none`, `N/A`,
    `no key objects`, `-`, `[]`) is `empty`; the prompt's placeholders echoed back (`<phrase>`,
    `object1`, `xxx`), or a "none" beside real phrases, is `format_collapse`. `road and grass` (one
    phrase or two?) is `ambiguous` (unless quoted), but `the car and the road` is two phrases, and
    a colour pair (`red and white kerb`) one.
    """
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    answer, failed = _answer_text(text)
    if failed is not None:
        return failed
    return _self_corrected(_normalise(answer), [_OBJECTS_KEY], _parse_objects, _renamed_phrases)


def _parse_objects(text: str) -> ParseResult:
    value, conflict = _field(text, "objects", _OBJECTS_KEY, bare=False)
    if conflict is not None:
        return conflict
    header = _OBJECTS_HEADER.search(text)
    if value is not None and header is None:
        return _phrases(*_split_line(value), ParseStatus.OK)
    items = _list_items(text[header.end() :] if header is not None else text)
    if items:
        return _phrases(items, False, ParseStatus.REGEX_FALLBACK)
    if value is not None:  # `objects:` with its list on the next line
        return _phrases(*_split_line(value), ParseStatus.REGEX_FALLBACK)
    bare = _json_list(text.strip().removeprefix("```json").removeprefix("```").removesuffix("```"))
    if bare is not None:
        return _phrases(bare, True, ParseStatus.REGEX_FALLBACK)
    if _NONE_LIKE.fullmatch(_clean_phrase(text)):
        return ParseResult(ParseStatus.EMPTY, detail=f"no object named: {text.strip()[:40]!r}")
    return ParseResult(ParseStatus.FORMAT_COLLAPSE, detail="no `objects:` line and no list")


def _json_list(text: str) -> list[str] | None:
    """`["car", "road"]` as its strings; None when the text is not a JSON array of strings."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # nested past the decoder's recursion limit
        return None
    if isinstance(items, list) and all(isinstance(item, str) for item in items):
        return items
    return None


def _split_line(value: str) -> tuple[list[str], bool]:
    """The phrases of one `objects:` line, and whether they are delimited for certain (a JSON
    array, quoted phrases): then each is one phrase as it stands, `and` or not."""
    value = value.strip()
    as_json = _json_list(value)
    if as_json is not None:
        return as_json, True
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]  # `[car, road]`
    quoted = [a or b for a, b in _QUOTED.findall(value)]
    if quoted and not _QUOTED.sub("", value).strip(" \t,;"):
        return quoted, True  # `"car" "road"`: only quoted phrases and separators
    if re.match(r"1[.)]\s", value):
        return _INLINE_NUMBER.split(value), False
    return re.split(r"[,;]", value), False


def _list_items(text: str) -> list[str]:
    """The items of the first bulleted or numbered list in `text`, up to its first other line; an
    item `**car**: the red vehicle` or `car - the red vehicle` is its head, `car`."""
    items: list[str] = []
    for line in text.split("\n"):
        m = _LIST_ITEM.match(line)
        if m is None:
            if items and line.strip():
                break
            continue
        item = m.group("item").split(":", 1)[0]
        item = re.split("\\s[-\u2013\u2014]\\s", item, maxsplit=1)[0]
        items.append(item)
    return items


def _clean_phrase(phrase: str) -> str:
    """Lower case, single spaces, no quotes, markdown, list marker or leading `and`."""
    phrase = phrase.strip().strip("\"'*`.…").strip()
    phrase = re.sub(r"^(?:[-*•+]|\d{1,3}[.)])\s+", "", phrase)
    phrase = re.sub(r"^(?:and|&)\s+", "", phrase, flags=re.IGNORECASE)
    phrase = " ".join(phrase.split()).lower().strip("\"'*`.…").strip()
    # the bracket of a cut-off `[car, road`, but `[]` itself is a "none"
    return phrase.strip("[]").strip() if re.search(r"[^\W\d_]", phrase) else phrase


def _phrases(raw: list[str], delimited: bool, status: ParseStatus) -> ParseResult:
    """Clean, split (`the car and the road`, unless `delimited`), deduplicate and check the phrases
    of a list."""
    unique: dict[str, None] = {}  # ordered, and a lookup in constant time: linear in the list
    for part in raw:
        part = _clean_phrase(part)
        for phrase in [part] if delimited else _AND_NEXT_PHRASE.split(part):
            if phrase not in _LIST_END:
                unique.setdefault(phrase)
    phrases = list(unique)
    if not phrases:
        return ParseResult(ParseStatus.EMPTY, detail="empty objects line")
    corrected = [p for p in phrases if _CORRECTION.search(p)]
    if corrected:
        return ParseResult(
            ParseStatus.AMBIGUOUS,
            detail=f"two values given: the list corrects itself at {corrected[0]!r}",
        )
    placeholders = [p for p in phrases if _PLACEHOLDER.fullmatch(p) or _TEMPLATE_SLOT.search(p)]
    if placeholders:
        return ParseResult(
            ParseStatus.FORMAT_COLLAPSE,
            detail=f"the prompt's placeholders, no object named: {placeholders[:3]}",
        )
    nones = [p for p in phrases if _NONE_LIKE.fullmatch(p)]
    if len(nones) == len(phrases):
        return ParseResult(ParseStatus.EMPTY, detail=f"no object named: {nones[0]!r}")
    if nones:
        return ParseResult(
            ParseStatus.FORMAT_COLLAPSE, detail=f"{nones[0]!r} among the object phrases"
        )
    joined = [
        p for p in phrases if not delimited and re.search(r" (?:and|&) ", _COLOUR_PAIR.sub("", p))
    ]
    if joined:
        return ParseResult(
            ParseStatus.AMBIGUOUS, detail=f"{joined[0]!r}: one phrase or two (`and`)"
        )
    too_long = [p for p in phrases if len(p.split()) > MAX_OBJECT_WORDS]
    if too_long:
        return ParseResult(
            ParseStatus.FORMAT_COLLAPSE,
            detail=f"phrases of over {MAX_OBJECT_WORDS} words: {too_long[:2]}",
        )
    return ParseResult(status, phrases)


def _renamed_phrases(phrases: list[str], rest: str) -> str | None:
    """A word after a correction that is in none of the phrases (`car, road. Actually, grass`)."""
    known = {word for phrase in phrases for word in phrase.split()} | _FILLER
    return next((w for w in re.findall(r"[a-z]+", rest.lower()) if w not in known), None)


# ---- judgements -------------------------------------------------------------------------------

_YES = ("yes", "true", "reasonable")
_NO = ("no", "false", "unreasonable")
# yes / no in free text after a correction (`reasonable: yes. Wait, it is not reasonable`)
_JUDGEMENT = re.compile(
    r"\b(?:(?P<yes>yes|true)|no|false|unreasonable|(?:not|isn't|is not) (?:a )?reasonable)\b",
    re.IGNORECASE,
)


def parse_judge(text: str | None) -> ParseResult:
    """Semore's selective-buffer judgement: is the stored action reasonable here? value = bool."""
    if _blank(text):
        return ParseResult(ParseStatus.EMPTY)
    answer, failed = _answer_text(text)
    if failed is not None:
        return failed
    return _self_corrected(_normalise(answer), ["reasonable"], _parse_judge, _renamed_judgement)


def _renamed_judgement(said: bool, rest: str) -> str | None:
    for value in _fields_after("reasonable", rest):
        if value.lower() not in (_YES if said else _NO):
            return f"reasonable: {value}"
    return next(
        (m.group() for m in _JUDGEMENT.finditer(rest) if (m.group("yes") is not None) != said),
        None,
    )


def _parse_judge(text: str) -> ParseResult:
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
