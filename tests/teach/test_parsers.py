"""Parser suite built from the failure taxonomy (hybrid VLM-PPO table 1, ERPv fig. 14)."""

import pytest

from pipeline.teach.labels.parsers import MAX_ANSWER_CHARS
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.status import ParseStatus as S
from pipeline.teach.labels.tasks import parse_answer

CAR = "CarRacing-v3"
CAR_SPACE = {"type": "box", "shape": [3], "low": [-1.0, 0.0, 0.0], "high": [1.0, 1.0, 1.0]}
MCC = "MountainCarContinuous-v0"
MCC_SPACE = {"type": "box", "shape": [1], "low": [-1.0], "high": [1.0]}
MC = "MountainCar-v0"
MC_SPACE = {"type": "discrete", "n": 3, "start": 0}
CHEETAH = "cheetah-run"
CHEETAH_SPACE = {"type": "box", "shape": [6], "low": [-1.0] * 6, "high": [1.0] * 6}

ACTION_CASES = [
    # (env, space, raw answer, status, value)
    (CAR, CAR_SPACE, "Describe: a bend.\nsteer: -0.4\ngas: 0.5\nbrake: 0", S.OK, [-0.4, 0.5, 0.0]),
    (CAR, CAR_SPACE, "**Describe:** road\n**steer:** 0\n**gas:** 1\n**brake:** 0", S.OK, [0.0, 1.0, 0.0]),
    (CAR, CAR_SPACE, "Steer = 0.2\nGas = .5\nBrake = 0.0", S.OK, [0.2, 0.5, 0.0]),
    (CAR, CAR_SPACE, "- steer: 1e-1\n- gas: 0.25\n- brake: 0.", S.OK, [0.1, 0.25, 0.0]),
    (CAR, CAR_SPACE, '{"steer": -0.2, "gas": 0.7, "brake": 0}', S.OK, [-0.2, 0.7, 0.0]),
    (CAR, CAR_SPACE, '```json\n{"steer": 0.0, "gas": 1.0, "brake": 0.0}\n```', S.OK, [0.0, 1.0, 0.0]),
    (CAR, CAR_SPACE, '{"steer": -0.2, "gas": 0.7', S.WRONG_ARITY, None),  # cut-off JSON
    (CAR, CAR_SPACE, "The action is [0.1, 0.9, 0.0].", S.REGEX_FALLBACK, [0.1, 0.9, 0.0]),
    (CAR, CAR_SPACE, "action: 0.3 0.6 0.1", S.REGEX_FALLBACK, [0.3, 0.6, 0.1]),
    (CAR, CAR_SPACE, "steer: -1.7\ngas: 0.5\nbrake: 0", S.OUT_OF_RANGE, [-1.7, 0.5, 0.0]),
    (CAR, CAR_SPACE, "steer: 0\ngas: 2\nbrake: -1", S.OUT_OF_RANGE, [0.0, 2.0, -1.0]),
    (CAR, CAR_SPACE, "steer: nan\ngas: 0.5\nbrake: 0", S.NON_FINITE, None),
    (CAR, CAR_SPACE, "steer: inf\ngas: 0.5\nbrake: 0", S.NON_FINITE, None),
    (CAR, CAR_SPACE, "steer: 0.1\ngas: 0.5", S.WRONG_ARITY, None),  # brake missing
    (CAR, CAR_SPACE, "steer: 0.1 or 0.2\ngas: 0.5\nbrake: 0", S.WRONG_ARITY, None),  # two values
    (CAR, CAR_SPACE, "0.378", S.WRONG_ARITY, None),  # table 1 I: a lone hallucinated float
    (CAR, CAR_SPACE, "Box [450, 210, 480, 230]", S.WRONG_ARITY, None),  # table 1 II: a box
    (CAR, CAR_SPACE, "Error [0, 0, 0, 0]", S.WRONG_ARITY, None),  # table 1 II: format collapse
    (CAR, CAR_SPACE, "I cannot determine the action from this image.", S.FORMAT_COLLAPSE, None),
    (CAR, CAR_SPACE, "steer: left\ngas: full\nbrake: none", S.FORMAT_COLLAPSE, None),
    (CAR, CAR_SPACE, "", S.EMPTY, None),
    (CAR, CAR_SPACE, "   \n\t ", S.EMPTY, None),
    (CAR, CAR_SPACE, None, S.EMPTY, None),
    (MCC, MCC_SPACE, "Describe: the car is in the valley\nforce: 0.8", S.OK, [0.8]),
    (MCC, MCC_SPACE, "force: +1.0", S.OK, [1.0]),
    (MCC, MCC_SPACE, "force: 1.5", S.OUT_OF_RANGE, [1.5]),
    (MCC, MCC_SPACE, "Describe: speed is 0.02 and position -0.5", S.WRONG_ARITY, None),
    (MCC, MCC_SPACE, "<|im_start|>assistant<|im_end|>", S.FORMAT_COLLAPSE, None),
    (MC, MC_SPACE, "Describe: valley\npush: right", S.OK, 2),
    (MC, MC_SPACE, "push: LEFT", S.OK, 0),
    (MC, MC_SPACE, "push: 1", S.REGEX_FALLBACK, 1),
    (MC, MC_SPACE, "push: 7", S.OUT_OF_RANGE, 7),
    (MC, MC_SPACE, "push: backwards", S.INVALID_CHOICE, None),
    (MC, MC_SPACE, "I would push right to gain momentum.", S.REGEX_FALLBACK, 2),
    (MC, MC_SPACE, "Push left first, then right.", S.AMBIGUOUS, None),
    (MC, MC_SPACE, "Choice = BOTTOM", S.FORMAT_COLLAPSE, None),
    (CHEETAH, CHEETAH_SPACE, "bthigh: 0.1\nbshin: 0\nbfoot: 0\nfthigh: 0\nfshin: 0\nffoot: -0.2", S.OK,
     [0.1, 0.0, 0.0, 0.0, 0.0, -0.2]),
    (CHEETAH, CHEETAH_SPACE, "[0.1, 0.2, 0.3]", S.WRONG_ARITY, None),
]  # fmt: skip


@pytest.mark.parametrize(("env_id", "space", "text", "status", "value"), ACTION_CASES)
def test_action_answers(env_id, space, text, status, value):
    result = parse_answer("action", text, env_id, space)
    assert result.status == status, result.detail
    if value is None:
        assert result.value is None
    else:
        assert result.value == pytest.approx(value)


MILESTONE_CASES = [
    ("milestone: BOTTOM", S.OK, "BOTTOM"),
    ('{"milestone": "GOAL"}', S.OK, "GOAL"),
    ("Milestone: left slope", S.OK, "LEFT_SLOPE"),
    ("**milestone:** `GOAL`", S.OK, "GOAL"),
    ("milestone: right-slope.", S.OK, "RIGHT_SLOPE"),
    ("The car is on the LEFT_PEAK now.", S.REGEX_FALLBACK, "LEFT_PEAK"),
    ("Choice = BOTTOM", S.REGEX_FALLBACK, "BOTTOM"),  # table 1 III: a stuck MCQ answer still parses
    ("milestone: SUMMIT", S.INVALID_CHOICE, None),
    ("milestone: BOTTOM or LEFT_SLOPE", S.AMBIGUOUS, None),
    ("It is between the bottom and the goal.", S.AMBIGUOUS, None),
    ("milestone:", S.EMPTY, None),
    ("0.386", S.FORMAT_COLLAPSE, None),  # table 1 I: a float where a label was asked
    ("", S.EMPTY, None),
]


@pytest.mark.parametrize(("text", "status", "label"), MILESTONE_CASES)
def test_milestone_answers(text, status, label):
    result = parse_answer("milestone", text, MC, MC_SPACE)
    assert result.status == status, result.detail
    if label is None:
        assert result.value is None
    else:
        assert result.value == (label, label_schema(MC).milestones[label])


OBJECT_CASES = [
    ("objects: red car, grey road, Grass", S.OK, ["red car", "grey road", "grass"]),
    ("objects: car; car; road.", S.OK, ["car", "road"]),
    ('{"objects": ["car", "grass"]}', S.OK, ["car", "grass"]),
    ("Key objects:\n- the car\n- the flag\n", S.REGEX_FALLBACK, ["the car", "the flag"]),
    ("1. cart\n2. pole", S.REGEX_FALLBACK, ["cart", "pole"]),
    ("objects:", S.EMPTY, None),
    (
        "objects: a very long description of everything that can be seen here",
        S.FORMAT_COLLAPSE,
        None,
    ),
    ("The image is mostly grey.", S.FORMAT_COLLAPSE, None),
    (None, S.EMPTY, None),
    # no object named: a "none" answer is an empty list, never the phrase "none"
    ("objects: none", S.EMPTY, None),
    ("objects: None.", S.EMPTY, None),
    ("objects: N/A", S.EMPTY, None),
    ("objects: nothing", S.EMPTY, None),
    ("objects: no objects", S.EMPTY, None),
    ("Objects: No key objects.", S.EMPTY, None),
    ("objects: -", S.EMPTY, None),
    ("objects: []", S.EMPTY, None),
    ('{"objects": "none"}', S.EMPTY, None),
    ("objects:\n- none", S.EMPTY, None),
    ("none", S.EMPTY, None),
    ("None.", S.EMPTY, None),
    ("N/A", S.EMPTY, None),
    ("nothing", S.EMPTY, None),
    ("There are no key objects in the image.", S.EMPTY, None),
    ("-", S.EMPTY, None),
    ("[]", S.EMPTY, None),
    # template echoes: the prompt's placeholders, never CLIP queries
    ("objects: <object 1>, <object 2>", S.FORMAT_COLLAPSE, None),
    ("objects: <phrase>, <phrase>, ...", S.FORMAT_COLLAPSE, None),
    (
        "Answer with one line in this format:\nobjects: <phrase>, <phrase>, ...",
        S.FORMAT_COLLAPSE,
        None,
    ),
    ("objects: object1, object2", S.FORMAT_COLLAPSE, None),
    ("objects: object 1, object 2", S.FORMAT_COLLAPSE, None),
    ("objects: phrase, phrase", S.FORMAT_COLLAPSE, None),
    ("objects: xxx", S.FORMAT_COLLAPSE, None),
    ("objects: {phrase}", S.FORMAT_COLLAPSE, None),
    ("objects: short noun phrases", S.FORMAT_COLLAPSE, None),
    ("objects: car, <phrase>", S.FORMAT_COLLAPSE, None),
    ("objects: car, none", S.FORMAT_COLLAPSE, None),  # a "none" beside real phrases
    # other list formats, read where the reading is certain
    ("objects:\n- car\n- road", S.REGEX_FALLBACK, ["car", "road"]),
    ("objects:\n* car\n* road", S.REGEX_FALLBACK, ["car", "road"]),
    ("**Objects:**\n1. car\n2. road", S.REGEX_FALLBACK, ["car", "road"]),
    ("objects:\ncar, road", S.REGEX_FALLBACK, ["car", "road"]),
    ("1. **Car**: the red vehicle\n2. **Road** - grey asphalt", S.REGEX_FALLBACK, ["car", "road"]),
    ("- car\n- road", S.REGEX_FALLBACK, ["car", "road"]),
    ("* car", S.REGEX_FALLBACK, ["car"]),
    ('["car", "road"]', S.REGEX_FALLBACK, ["car", "road"]),
    ('objects: ["car", "road"]', S.OK, ["car", "road"]),
    ("objects: [car, road]", S.OK, ["car", "road"]),
    ('objects: "car" "road"', S.OK, ["car", "road"]),
    ("objects: 'car'; 'road'", S.OK, ["car", "road"]),
    ("objects: 1. car, 2. road", S.OK, ["car", "road"]),
    ("objects: 1. car 2. road", S.OK, ["car", "road"]),
    ("Key objects: car, road", S.OK, ["car", "road"]),
    ("objects: car; road; grass", S.OK, ["car", "road", "grass"]),
    ("objects: the car and the road", S.OK, ["the car", "the road"]),
    ("objects: car, road, and grass", S.OK, ["car", "road", "grass"]),
    ("objects: car, road, etc.", S.OK, ["car", "road"]),
    ("objects: red and white kerb, road", S.OK, ["red and white kerb", "road"]),
    ("objects: road and grass", S.AMBIGUOUS, None),  # one phrase or two: not certain
    # a JSON array or quotes delimit each phrase for certain, `and` or not
    ('objects: ["road and grass", "car"]', S.OK, ["road and grass", "car"]),
    ('{"objects": ["road and grass", "car"]}', S.OK, ["road and grass", "car"]),
    ('objects: "road and grass"', S.OK, ["road and grass"]),
]


@pytest.mark.parametrize(("text", "status", "value"), OBJECT_CASES)
def test_objects_answers(text, status, value):
    result = parse_answer("objects", text, CAR, CAR_SPACE)
    assert result.status == status, result.detail
    assert result.value == value


JUDGE_CASES = [
    ("reasonable: yes", S.OK, True),
    ("Reasonable: NO", S.OK, False),
    ("reasonable: true", S.OK, True),
    ('{"reasonable": "no"}', S.OK, False),
    ("Yes, pushing right builds momentum.", S.REGEX_FALLBACK, True),
    ("no.", S.REGEX_FALLBACK, False),
    ("reasonable: maybe", S.INVALID_CHOICE, None),
    ("Yes and no: it depends.", S.AMBIGUOUS, None),
    ("The action pushes the car.", S.FORMAT_COLLAPSE, None),
    ("", S.EMPTY, None),
]


@pytest.mark.parametrize(("text", "status", "value"), JUDGE_CASES)
def test_judge_answers(text, status, value):
    result = parse_answer("judge", text, MC, MC_SPACE)
    assert result.status == status, result.detail
    assert result.value == value


# An answer that gives its fields, then corrects itself in free text after them: never read as
# the first values. (task, env, space, text, status, value)
CORRECTION_CASES = [
    ("action", MCC, MCC_SPACE, "force: 0.5\nwait, actually force: -0.3", S.AMBIGUOUS, None),
    ("action", MCC, MCC_SPACE, "force: 0.5 ... wait, actually force: -0.3", S.AMBIGUOUS, None),
    ("action", MCC, MCC_SPACE, "force: 0.5. Actually, -0.3 is better.", S.AMBIGUOUS, None),
    ("action", MCC, MCC_SPACE, "force: 0.5\nCorrection: -0.3", S.AMBIGUOUS, None),
    ("action", MCC, MCC_SPACE, "force: 0.5\nOn second thought, 0.3.", S.AMBIGUOUS, None),
    ("action", MCC, MCC_SPACE, "force: 0.5\nActually, 0.5 is right.", S.OK, [0.5]),  # restated
    ("action", MCC, MCC_SPACE, "force: 0.5. The car is slow.", S.OK, [0.5]),  # prose after the value
    ("action", CAR, CAR_SPACE, "steer: 0.1\ngas: 0.5\nbrake: 0\nWait, actually steer: -0.3", S.AMBIGUOUS, None),
    ("action", CAR, CAR_SPACE, "steer: 0.1\nwait, actually -0.3\ngas: 0.5\nbrake: 0", S.AMBIGUOUS, None),
    ("action", CAR, CAR_SPACE, "steer: 0.1\ngas: 0.5\nbrake: 0\nActually the road is straight.", S.OK, [0.1, 0.5, 0.0]),
    ("action", CAR, CAR_SPACE, "The action is [0.1, 0.9, 0.0]. Actually [0.2, 0.9, 0.0].", S.AMBIGUOUS, None),
    ("action", MC, MC_SPACE, "push: left\nActually, right.", S.AMBIGUOUS, None),
    ("action", MC, MC_SPACE, "push: left. Wait, actually push: right", S.AMBIGUOUS, None),
    ("action", MC, MC_SPACE, "push: left\nCorrection: push right", S.AMBIGUOUS, None),
    ("action", MC, MC_SPACE, "push: left\nactually push: backwards", S.AMBIGUOUS, None),
    ("action", MC, MC_SPACE, "push: right\nActually, right is best.", S.OK, 2),
    ("milestone", MC, MC_SPACE, "milestone: BOTTOM\nActually, LEFT_SLOPE.", S.AMBIGUOUS, None),
    ("milestone", MC, MC_SPACE, "milestone: BOTTOM. Wait, it is the GOAL.", S.AMBIGUOUS, None),
    ("milestone", MC, MC_SPACE, "milestone: BOTTOM\nIt is actually the bottom.", S.OK, ("BOTTOM", 0.0)),
    ("judge", MC, MC_SPACE, "reasonable: yes. Correction: no", S.AMBIGUOUS, None),
    ("judge", MC, MC_SPACE, "reasonable: yes\nCorrection: no", S.AMBIGUOUS, None),
    ("judge", MC, MC_SPACE, "reasonable: yes\nActually, no.", S.AMBIGUOUS, None),
    ("judge", MC, MC_SPACE, "reasonable: yes\nWait, it is not reasonable.", S.AMBIGUOUS, None),
    ("judge", MC, MC_SPACE, "Answer: yes. Correction: no", S.AMBIGUOUS, None),
    ("judge", MC, MC_SPACE, "reasonable: no\nActually, there is no momentum yet.", S.OK, False),
    ("judge", MC, MC_SPACE, "reasonable: yes\nActually the car moves right, so pushing right helps.", S.OK, True),
    ("objects", CAR, CAR_SPACE, "objects: car\nWait, actually objects: road", S.AMBIGUOUS, None),
    ("objects", CAR, CAR_SPACE, "objects: car, road. Actually, also grass.", S.AMBIGUOUS, None),
    ("objects", CAR, CAR_SPACE, "Here are the key objects, actually:\n- car\n- road", S.REGEX_FALLBACK, ["car", "road"]),
]  # fmt: skip


@pytest.mark.parametrize(("task", "env_id", "space", "text", "status", "value"), CORRECTION_CASES)
def test_an_answer_that_corrects_itself_is_not_read_as_its_first_values(
    task, env_id, space, text, status, value
):
    result = parse_answer(task, text, env_id, space)
    assert result.status == status, result.detail
    if value is None:
        assert result.value is None
        assert "two values given" in result.detail
    else:
        assert result.value == pytest.approx(value)


# What reasoning and chat models wrap around an answer (task, env, space, raw, status, value).
CHAT_CASES = [
    # a reasoning block is never the answer, even when it names the only label
    ("action", MCC, MCC_SPACE, "<think>force: 0.9 would overshoot</think>\nforce: -0.5", S.OK, [-0.5]),
    ("milestone", MC, MC_SPACE, "<think>milestone: GOAL?</think>", S.FORMAT_COLLAPSE, None),
    ("milestone", MC, MC_SPACE, "<think>It looks like milestone: GOAL</think>\nmilestone: BOTTOM", S.OK, ("BOTTOM", None)),
    ("action", MCC, MCC_SPACE, "<think>force: 0.9, no: 0.8", S.FORMAT_COLLAPSE, None),  # never closed
    ("action", MCC, MCC_SPACE, "the chat template opened it: force: 0.9</think>force: 0.1", S.OK, [0.1]),
    ("judge", MC, MC_SPACE, "<thinking>reasonable: yes</thinking> reasonable: no", S.OK, False),
    # end-of-turn tokens, and a second turn after them
    ("action", MCC, MCC_SPACE, "force: 0.5<|im_end|>\n<|im_start|>user\nforce: -0.9", S.OK, [0.5]),
    ("action", MCC, MCC_SPACE, "force: 0.25<|eot_id|>", S.OK, [0.25]),
    ("milestone", MC, MC_SPACE, "<start_of_turn>model\nmilestone: GOAL<end_of_turn>", S.OK, ("GOAL", None)),
    ("action", MCC, MCC_SPACE, "force: -0.75</s>", S.OK, [-0.75]),
    # typographic signs are the signs they stand for; a range is not a sign
    ("action", MCC, MCC_SPACE, "force: \u22120.5", S.OK, [-0.5]),
    ("action", MCC, MCC_SPACE, "force: \u20130.5", S.OK, [-0.5]),
    ("action", MCC, MCC_SPACE, "force: \uff0d.5", S.OK, [-0.5]),
    ("action", MCC, MCC_SPACE, "force: \uff0b0.5", S.OK, [0.5]),
    ("action", CAR, CAR_SPACE, "steer: 0\u20131\ngas: 0.5\nbrake: 0", S.WRONG_ARITY, None),
    # `key value` with one word after the key, and several one-word fields on a line
    ("action", MCC, MCC_SPACE, "force -0.3", S.OK, [-0.3]),
    ("action", MC, MC_SPACE, "Push left", S.OK, 0),
    ("milestone", MC, MC_SPACE, "milestone GOAL", S.OK, ("GOAL", None)),
    ("judge", MC, MC_SPACE, "Reasonable no", S.OK, False),
    ("action", CAR, CAR_SPACE, "steer: -0.2 gas: 0.6 brake: 0", S.OK, [-0.2, 0.6, 0.0]),
    ("action", CAR, CAR_SPACE, "**steer:** 0.1 **gas:** 1 **brake:** 0", S.OK, [0.1, 1.0, 0.0]),
    ("action", MCC, MCC_SPACE, "force -0.3\nforce: 0.3", S.AMBIGUOUS, None),
    # `key value` is not read for objects: their phrases have spaces
    ("objects", MC, MC_SPACE, "Objects visible", S.FORMAT_COLLAPSE, None),
    ("objects", MC, MC_SPACE, "objects: traffic light: red", S.OK, ["traffic light: red"]),
    # an answer longer than any honest one is not read
    ("action", MCC, MCC_SPACE, "force: 0.5\n" + "x" * MAX_ANSWER_CHARS, S.TOO_LONG, None),
    ("objects", MC, MC_SPACE, "objects: " + ", ".join(f"thing {i}" for i in range(80_000)), S.TOO_LONG, None),
]  # fmt: skip


@pytest.mark.parametrize(("task", "env_id", "space", "text", "status", "value"), CHAT_CASES)
def test_what_chat_models_wrap_an_answer_in(task, env_id, space, text, status, value):
    result = parse_answer(task, text, env_id, space)
    assert result.status == status, result.detail
    if value is None:
        assert result.value is None
    elif task == "milestone":
        assert result.value[0] == value[0]
    elif task == "action" and space["type"] == "box":
        assert result.value == pytest.approx(value)
    else:
        assert result.value == value


def test_suite_covers_the_taxonomy():
    malformed = [
        c
        for c in ACTION_CASES
        + MILESTONE_CASES
        + OBJECT_CASES
        + JUDGE_CASES
        + CORRECTION_CASES
        + CHAT_CASES
        if c[-2] != S.OK
    ]
    assert len(malformed) >= 30
    covered = {c[-2] for c in malformed}
    # set by teachers, not parsers, and tested with them (test_teachers.py, test_review.py,
    # test_openai_teacher.py)
    set_by_teachers = {S.HTTP_ERROR, S.TIMEOUT, S.TRUNCATED, S.MALFORMED_COMPLETION}
    assert covered | set_by_teachers | {S.OK} == set(S)


def test_erpv_figure_14_answer_parses_with_the_carla_schema():
    """ERPv's own example output, against a CARLA-like two-field schema."""
    from dataclasses import replace

    schema = replace(label_schema(CAR), action_names=("throttle", "steer"))
    from pipeline.teach.labels.parsers import parse_action

    text = "**Describe:** The image shows a high-speed scene on a highway.\n\n**throttle:** 1  \n**steer:** 0"
    space = {"type": "box", "shape": [2], "low": [-1.0, -1.0], "high": [1.0, 1.0]}
    assert parse_action(text, schema, space).value == [1.0, 0.0]


def test_a_new_parser_version_does_not_change_cache_keys():
    """Cached answers are raw text: a parser change re-reads them and pays for nothing again.
    The key of a fixed input stays the one every existing cache holds."""
    import hashlib
    import json

    from pipeline.teach.labels import cache
    from pipeline.teach.labels.parsers import PARSER_VERSION

    material = ["ab" * 32, "scripted:v2:reliability=1:seed=0", "prompt", {"t": 0}]
    # the material of parser version 4's keys, which the caches written since then hold
    before = hashlib.sha256(json.dumps([*material, "4"], sort_keys=True).encode()).hexdigest()
    assert cache.cache_key(*material) == before
    assert PARSER_VERSION != "4"  # the parser did change since
