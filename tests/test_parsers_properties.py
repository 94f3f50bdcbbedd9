"""Parsers under any text (hypothesis): never an exception, never a value for text that lacks the
fields; a field given twice with different values is ambiguous; one-line `a: 1, b: 2` answers are
the requested format."""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.labels.schema import label_schema
from pipeline.labels.status import ParseStatus as S
from pipeline.labels.tasks import parse_answer

CAR = "CarRacing-v3"
CAR_SPACE = {"type": "box", "shape": [3], "low": [-1.0, 0.0, 0.0], "high": [1.0, 1.0, 1.0]}
MC = "MountainCar-v0"
MC_SPACE = {"type": "discrete", "n": 3, "start": 0}
CASES = [("action", CAR, CAR_SPACE), ("action", MC, MC_SPACE), ("milestone", MC, MC_SPACE),
         ("objects", MC, MC_SPACE), ("judge", MC, MC_SPACE)]  # fmt: skip

# Text that looks like answers: field names, separators, numbers, words, markdown, JSON braces.
FRAGMENTS = st.sampled_from(
    ["steer", "gas", "brake", "milestone", "objects", "reasonable", "action", ":", "=", ",", ";",
     "\n", " ", "**", "-", "{", "}", '"', "[", "]", "0.5", "-1", "1e9", "nan", "inf", "yes", "no",
     "LEFT", "GOAL", "car", "road", "the", "Describe"]
)  # fmt: skip
ANSWERISH = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), ANSWERISH))
@pytest.mark.parametrize(("task", "env", "space"), CASES)
def test_any_text_parses_to_a_status_never_an_exception(task, env, space, text):
    result = parse_answer(task, text, env, space)
    assert isinstance(result.status, S)
    if not (result.status.has_value or result.status == S.OUT_OF_RANGE):
        assert result.value is None  # no value invented for a failure


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
