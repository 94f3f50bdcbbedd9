"""Parsers under any text (hypothesis): never an exception, never a value for text that lacks the
fields; a field given twice with different values is ambiguous; one-line `a: 1, b: 2` answers are
the requested format; object phrases come back exactly in every list format read, and never from a
placeholder or a "none"; an answer that corrects itself is never read as its first values."""

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.teach.labels.parsers import MAX_ANSWER_CHARS
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.status import ParseStatus as S
from pipeline.teach.labels.tasks import answer_text, parse_answer

CAR = "CarRacing-v3"
CAR_SPACE = {"type": "box", "shape": [3], "low": [-1.0, 0.0, 0.0], "high": [1.0, 1.0, 1.0]}
MCC = "MountainCarContinuous-v0"
MCC_SPACE = {"type": "box", "shape": [1], "low": [-1.0], "high": [1.0]}
MC = "MountainCar-v0"
MC_SPACE = {"type": "discrete", "n": 3, "start": 0}
CASES = [("action", CAR, CAR_SPACE), ("action", MC, MC_SPACE), ("action", MCC, MCC_SPACE),
         ("milestone", MC, MC_SPACE), ("objects", MC, MC_SPACE), ("judge", MC, MC_SPACE)]  # fmt: skip

# Text that looks like answers: field names, separators, numbers, words, markdown, JSON braces.
FRAGMENTS = st.sampled_from(
    ["steer", "gas", "brake", "milestone", "objects", "reasonable", "action", ":", "=", ",", ";",
     "\n", " ", "**", "-", "{", "}", '"', "[", "]", "0.5", "-1", "1e9", "nan", "inf", "yes", "no",
     "LEFT", "GOAL", "car", "road", "the", "Describe"]
)  # fmt: skip
ANSWERISH = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=40).map("".join)


# Any code point: control characters, line separators, lone (invalid) surrogates.
ANY_CHARS = st.text(st.characters(exclude_categories=()), max_size=300)
# A repetition loop up to the token limit, tens of thousands of characters long.
LOOPS = st.builds(lambda s, n: (s * n)[:60_000], ANSWERISH.filter(bool), st.integers(200, 6000))


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), ANSWERISH, ANY_CHARS))
@pytest.mark.parametrize(("task", "env", "space"), CASES)
def test_any_text_parses_to_a_status_never_an_exception(task, env, space, text):
    result = parse_answer(task, text, env, space)
    assert isinstance(result.status, S)
    if not (result.status.has_value or result.status == S.OUT_OF_RANGE):
        assert result.value is None  # no value invented for a failure


@settings(max_examples=15, deadline=None)
@given(text=LOOPS)
@pytest.mark.parametrize(("task", "env", "space"), CASES)
def test_a_repetition_loop_parses_to_a_status(task, env, space, text):
    assert isinstance(parse_answer(task, text, env, space).status, S)


# Runs of one character: regexes that backtrack over a run at every position of it take minutes.
LONG_RUNS = [" " * 50_000, "\n" * 50_000, "\t \n" * 20_000, "steer: " + "* " * 25_000 + "x",
             "steer: 0" + "." * 50_000 + "x", "[" * 50_000, "(" * 50_000, ", " * 25_000,
             "objects:\n" + "- " * 25_000, "1" * 50_000, "actually " * 10_000 + "steer: 0.1",
             "- car\n" * 10_000, "objects: " + "car and the " * 5_000, "objects: " + "<" * 50_000,
             "objects: " + "'\"" * 25_000, "objects: " + "1. " * 15_000,
             "force: 0.5" + ", instead" * 5_000, "[" * 50_000 + "]" * 50_000,
             '{"a": ' * 50_000 + "1" + "}" * 50_000, 'objects: ["' + "[" * 50_000 + "]" * 50_000]  # fmt: skip


# cut to the longest answer read, so that the parser itself (not the length cap) meets each run
LONG_RUNS = [run[:MAX_ANSWER_CHARS] for run in LONG_RUNS]


@pytest.mark.parametrize("text", LONG_RUNS, ids=lambda t: f"{t[:12]!r}x{len(t)}")
@pytest.mark.parametrize(("task", "env", "space"), CASES)
def test_long_runs_parse_to_a_status(task, env, space, text):
    assert isinstance(parse_answer(task, text, env, space).status, S)


# No digits, no field names, no choice words, no list bullets: nothing to read a label from.
PLAIN = st.text(alphabet=string.ascii_lowercase[:10] + " .!?", max_size=200)


@settings(max_examples=300, deadline=None)
@given(text=PLAIN)
def test_text_without_the_fields_gives_no_value(text):
    for task, env, space in CASES:
        if task == "objects" and text.strip():
            continue  # free words could be object phrases only after `objects:` or bullets
        assert parse_answer(task, text, env, space).value is None, (task, text)
    assert parse_answer("objects", text, MC, MC_SPACE).value is None


@pytest.mark.parametrize(
    ("task", "env", "space", "text"),
    [
        ("action", CAR, CAR_SPACE, "steer: 0.3\ngas: 0.5\nbrake: 0\nsteer: -0.2"),
        ("action", MC, MC_SPACE, "push: left\npush: right"),
        ("milestone", MC, MC_SPACE, "milestone: LEFT_SLOPE\nmilestone: GOAL"),
        ("judge", MC, MC_SPACE, "reasonable: yes\nreasonable: no"),
        ("objects", MC, MC_SPACE, "objects: car, hill\nobjects: flag"),
    ],
)
def test_a_field_given_twice_with_different_values_is_ambiguous(task, env, space, text):
    result = parse_answer(task, text, env, space)
    assert result.status == S.AMBIGUOUS and result.value is None
    assert "given 2 times" in result.detail


def test_named_fields_on_one_line_are_the_requested_format():
    one_line = parse_answer("action", "steer: 0.3, gas: 0.5, brake: 0", CAR, CAR_SPACE)
    assert (one_line.status, one_line.value) == (S.OK, [0.3, 0.5, 0.0])
    semicolons = parse_answer("action", "**steer:** -0.1; **gas:** 1; brake = 0", CAR, CAR_SPACE)
    assert (semicolons.status, semicolons.value) == (S.OK, [-0.1, 1.0, 0.0])
    # commas inside a value stay in the value
    objects = parse_answer("objects", "objects: red car, road, grass", MC, MC_SPACE)
    assert objects.value == ["red car", "road", "grass"]
    repeated = parse_answer("milestone", "milestone: GOAL\nmilestone: GOAL", MC, MC_SPACE)
    assert repeated.status == S.OK  # the same value twice is not a disagreement


def test_milestone_choices_exist():
    assert "GOAL" in label_schema(MC).milestones


# ---- objects: phrase lists in every format read, and answers that name no object ---------------

# Words of real object phrases: no placeholder, no "none", no "and" (so every reading is certain).
OBJECT_WORD = st.sampled_from(
    ["car", "road", "grass", "red", "grey", "flag", "hill", "cart", "pole", "lane", "truck", "kerb",
     "tree", "cone", "wheel", "track", "ball", "cup", "arm", "target", "pedestrian", "small"]
)  # fmt: skip
PHRASES = st.lists(
    st.lists(OBJECT_WORD, min_size=1, max_size=3).map(" ".join), min_size=1, max_size=5, unique=True
)
LIST_FORMATS = {
    "comma line": lambda ps: "objects: " + ", ".join(ps),
    "semicolon line": lambda ps: "objects: " + "; ".join(ps),
    "markdown key": lambda ps: "**Objects:** " + ", ".join(ps),
    "key objects": lambda ps: "Key objects: " + ", ".join(ps),
    "and before the last": lambda ps: "objects: " + ", ".join(ps[:-1]) + ", and " * (len(ps) > 1) + ps[-1],
    "double quotes": lambda ps: "objects: " + ", ".join(f'"{p}"' for p in ps),
    "single quotes": lambda ps: "objects: " + "; ".join(f"'{p}'" for p in ps),
    "json array line": lambda ps: "objects: " + json.dumps(ps),
    "bracketed line": lambda ps: "objects: [" + ", ".join(ps) + "]",
    "json object": lambda ps: json.dumps({"objects": ps}),
    "bare json array": lambda ps: json.dumps(ps),
    "bullets": lambda ps: "".join(f"- {p}\n" for p in ps),
    "stars under the key": lambda ps: "objects:\n" + "\n".join(f"* {p}" for p in ps),
    "numbered": lambda ps: "\n".join(f"{i}. {p}" for i, p in enumerate(ps, 1)),
    "numbered under the key": lambda ps: "**Objects:**\n" + "\n".join(f"{i}) {p}" for i, p in enumerate(ps, 1)),
    "numbered inline": lambda ps: "objects: " + ", ".join(f"{i}. {p}" for i, p in enumerate(ps, 1)),
    "etc at the end": lambda ps: "objects: " + ", ".join(ps) + ", etc.",
}  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(phrases=PHRASES, case=st.sampled_from([str, str.upper, str.title]))
@pytest.mark.parametrize("fmt", LIST_FORMATS, ids=str)
def test_phrases_in_any_list_format_come_back_exactly(fmt, phrases, case):
    result = parse_answer("objects", case(LIST_FORMATS[fmt](phrases)), CAR, CAR_SPACE)
    assert result.status in (S.OK, S.REGEX_FALLBACK), result.detail
    assert result.value == phrases


@settings(max_examples=100, deadline=None)
@given(phrases=PHRASES)
def test_phrases_joined_with_and_the_come_back_exactly(phrases):
    """`the car and the road`: a determiner after `and` starts a second phrase."""
    expected = [f"the {p}" for p in phrases]
    result = parse_answer("objects", "objects: " + " and ".join(expected), CAR, CAR_SPACE)
    assert (result.status, result.value) == (S.OK, expected)


@settings(max_examples=100, deadline=None)
@given(
    phrases=PHRASES,
    joined=st.lists(st.lists(OBJECT_WORD, min_size=2, max_size=3).map(" and ".join), max_size=2),
)
def test_a_corrected_objects_label_reads_back_exactly(phrases, joined):
    """A person's correction (`answer_text`) is read back as it was written, `and` included."""
    value = list(dict.fromkeys(phrases + joined))
    result = parse_answer("objects", answer_text("objects", value, CAR, CAR_SPACE), CAR, CAR_SPACE)
    assert (result.status, result.value) == (S.OK, value)


# No object named: "none"-like answers and the prompt's own placeholders (template echoes).
NO_OBJECT = st.sampled_from(
    ["none", "None.", "N/A", "n/a", "nothing", "Nothing relevant", "no objects", "No key objects",
     "no relevant objects", "there are no objects", "null", "-", "\u2014", "[]", "<phrase>",
     "<object 1>", "<Object>", "{phrase}", "object1", "object 2", "Object_3", "phrase", "xxx",
     "short noun phrases", "<phrase>, <phrase>, ..."]
)  # fmt: skip
NO_OBJECT_FORMATS = [
    lambda x, p: f"objects: {x}",
    lambda x, p: f"Objects: {x}, {x}",
    lambda x, p: f"**objects:** {x}.",
    lambda x, p: x,
    lambda x, p: f"- {x}\n- {x}",
    lambda x, p: f"objects:\n1. {x}",
    lambda x, p: json.dumps({"objects": [x]}),
    lambda x, p: json.dumps([x]),
    lambda x, p: f"objects: {p}, {x}",  # beside a real phrase: the list is not what was asked for
    lambda x, p: f"objects: {x}; {p}",
]


@settings(max_examples=300, deadline=None)
@given(
    placeholder=NO_OBJECT,
    phrase=PHRASES.map(lambda ps: ps[0]),
    render=st.sampled_from(NO_OBJECT_FORMATS),
    case=st.sampled_from([str, str.upper, str.title]),
)
def test_an_answer_that_names_no_object_yields_no_phrase(placeholder, phrase, render, case):
    result = parse_answer("objects", case(render(placeholder, phrase)), CAR, CAR_SPACE)
    assert result.value is None and not result.status.has_value, result
    assert result.detail or result.status == S.EMPTY


# ---- an answer that corrects itself after its fields -------------------------------------------

CORRECTIONS = st.sampled_from(
    ["wait", "Wait,", "actually", "Actually,", "wait, actually", "Correction:", "On second thought,",
     "scratch that,", "I mean", "Sorry,", "no wait,", "No, wait:", "or rather", "my mistake,"]
)  # fmt: skip
BETWEEN = st.sampled_from(["\n", ". ", " ... ", ", ", "\n\n", " -- "])
NUMBER = st.floats(-1, 1).map(lambda v: f"{v:.2f}")


@st.composite
def corrected_answers(draw):
    """(task, env, space, the answer, a correction naming another value, the first value)."""
    task = draw(st.sampled_from(["continuous", "car", "discrete", "milestone", "judge", "objects"]))
    if task == "continuous":
        first, second = draw(st.lists(NUMBER, min_size=2, max_size=2, unique_by=float))
        again = draw(st.sampled_from([f"force: {second}", second, f"force {second}"]))
        return "action", MCC, MCC_SPACE, f"force: {first}", again, [float(first)]
    if task == "car":
        # not 0.5 or 0: a correction naming the gas or brake value would not name another value
        steers = NUMBER.filter(lambda v: float(v) not in (0.5, 0.0))
        steer, second = draw(st.lists(steers, min_size=2, max_size=2, unique_by=float))
        again = draw(st.sampled_from([f"steer: {second}", second, f"steer should be {second}"]))
        answer = f"steer: {steer}\ngas: 0.5\nbrake: 0"
        return "action", CAR, CAR_SPACE, answer, again, [float(steer), 0.5, 0.0]
    if task == "discrete":
        first, second = draw(st.permutations(["left", "none", "right"]))[:2]
        again = draw(st.sampled_from([f"push: {second}", second, f"push {second}"]))
        return (
            "action",
            MC,
            MC_SPACE,
            f"push: {first}",
            again,
            ["left", "none", "right"].index(first),
        )
    if task == "milestone":
        milestones = label_schema(MC).milestones
        first, second = draw(st.permutations(list(milestones)))[:2]
        again = draw(
            st.sampled_from([f"milestone: {second}", second, second.lower().replace("_", " ")])
        )
        return "milestone", MC, MC_SPACE, f"milestone: {first}", again, (first, milestones[first])
    if task == "judge":
        first = draw(st.booleans())
        said = draw(st.sampled_from(["yes", "true"] if first else ["no", "false"]))
        again = draw(
            st.sampled_from(
                ["no", "reasonable: no", "it is not reasonable", "false"]
                if first
                else ["yes", "reasonable: yes", "true"]
            )
        )
        return "judge", MC, MC_SPACE, f"reasonable: {said}", again, first
    phrases = draw(PHRASES)
    words = {w for p in phrases for w in p.split()}
    extra = draw(OBJECT_WORD.filter(lambda w: w not in words))
    again = draw(st.sampled_from([f"objects: {extra}", f"also {extra}", extra]))
    return "objects", MC, MC_SPACE, f"objects: {', '.join(phrases)}", again, phrases  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    case=corrected_answers(),
    between=BETWEEN,
    correction=CORRECTIONS,
    render=st.sampled_from(["{between}{correction} {again}", "{between}{again} instead"]),
)
def test_an_answer_that_corrects_itself_is_never_read_as_its_first_value(
    case, between, correction, render
):
    task, env, space, answer, again, first = case
    text = answer + render.format(between=between, correction=correction, again=again)
    result = parse_answer(task, text, env, space)
    assert not (result.status.has_value and result.value == first), (text, result)
    assert result.status == S.AMBIGUOUS, (text, result)


# ---- what reasoning and chat models wrap an answer in -----------------------------------------

VALID = st.one_of(
    st.floats(-1, 1, allow_nan=False)
    .map(lambda x: round(x, 3))
    .map(lambda x: ("action", MCC, MCC_SPACE, f"force: {x}")),
    st.sampled_from(list(label_schema(MC).milestones)).map(
        lambda m: ("milestone", MC, MC_SPACE, f"milestone: {m}")
    ),
    st.sampled_from(["yes", "no"]).map(lambda v: ("judge", MC, MC_SPACE, f"reasonable: {v}")),
    PHRASES.map(lambda ps: ("objects", MC, MC_SPACE, "objects: " + ", ".join(ps))),
)
TAGS = st.sampled_from(["think", "thinking", "reasoning", "THINK"])
TURN_ENDS = st.sampled_from(["<|im_end|>", "<|eot_id|>", "</s>", "<end_of_turn>", "<|end|>"])


@settings(max_examples=200, deadline=None)
@given(case=VALID, musing=ANSWERISH, tag=TAGS)
def test_a_reasoning_block_changes_nothing_and_is_never_the_answer(case, musing, tag):
    task, env, space, answer = case
    musing = musing.replace("<", "")  # no tag of its own
    plain = parse_answer(task, answer, env, space)
    wrapped = parse_answer(task, f"<{tag}>{musing}</{tag}>\n{answer}", env, space)
    assert (wrapped.status, wrapped.value) == (plain.status, plain.value)
    template_opened = parse_answer(task, f"{musing}</{tag}>{answer}", env, space)
    assert (template_opened.status, template_opened.value) == (plain.status, plain.value)
    only_thought = parse_answer(task, f"<{tag}>{answer}</{tag}>", env, space)
    assert only_thought.value is None and only_thought.status == S.FORMAT_COLLAPSE
    cut_while_thinking = parse_answer(task, f"<{tag}>{answer}", env, space)
    assert cut_while_thinking.value is None


@settings(max_examples=200, deadline=None)
@given(case=VALID, end=TURN_ENDS, next_turn=ANSWERISH)
def test_an_end_of_turn_token_ends_the_answer(case, end, next_turn):
    task, env, space, answer = case
    plain = parse_answer(task, answer, env, space)
    ended = parse_answer(task, f"{answer}{end}{next_turn}", env, space)
    assert (ended.status, ended.value) == (plain.status, plain.value)


@settings(max_examples=200, deadline=None)
@given(x=st.floats(0.001, 1, allow_nan=False).map(lambda x: round(x, 3)),
       sign=st.sampled_from(["\u2212", "\u2013", "\u2012", "\ufe63", "\uff0d"]))  # fmt: skip
def test_a_typographic_minus_is_a_minus(x, sign):
    result = parse_answer("action", f"force: {sign}{x}", MCC, MCC_SPACE)
    assert (result.status, result.value) == (S.OK, [-x])


@settings(max_examples=200, deadline=None)
@given(values=st.tuples(st.floats(-1, 1), st.floats(0, 1), st.floats(0, 1)).map(
    lambda t: [round(v, 3) for v in t]), bare=st.booleans())  # fmt: skip
def test_one_word_fields_read_without_colons_or_commas(values, bare):
    steer, gas, brake = values
    text = (
        f"steer {steer}\ngas {gas}\nbrake {brake}"
        if bare
        else f"steer: {steer} gas: {gas} brake: {brake}"
    )
    result = parse_answer("action", text, CAR, CAR_SPACE)
    assert (result.status, result.value) == (S.OK, values)


@settings(max_examples=25, deadline=None)
@given(text=st.text(max_size=50), extra=st.integers(1, 1000))
@pytest.mark.parametrize(("task", "env", "space"), CASES)
def test_an_answer_over_the_cap_is_too_long(task, env, space, text, extra):
    long = (text or "x") * (MAX_ANSWER_CHARS // max(len(text), 1) + 1) + "x" * extra
    result = parse_answer(task, long, env, space)
    assert (result.status, result.value) == (S.TOO_LONG, None)
