"""Label tasks: a prompt template + a parser + an output schema, per env.

- `action`: an action in the env's action space (ERPv's a_v);
- `milestone`: one label of the env's milestone set, with its raw potential (hybrid VLM-PPO 3.2);
- `objects`: the key object phrases of the frame (Semore), for the masks stage;
- `judge`: is the stored action reasonable in this frame (Semore's selective replay buffer).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pipeline.core.config.envs import PROMPT_SEPARATOR
from pipeline.teach.labels.parsers import (
    ParseResult,
    parse_action,
    parse_judge,
    parse_milestone,
    parse_objects,
)
from pipeline.teach.labels.schema import EnvLabelSchema, label_schema

TaskName = Literal["action", "milestone", "objects", "judge"]
TASKS: tuple[TaskName, ...] = ("action", "milestone", "objects", "judge")
PROMPT_DIR = Path(__file__).parent / "prompts"
_SEPARATOR = PROMPT_SEPARATOR  # between a template's system message and its user part


@dataclass(frozen=True)
class Prompt:
    """What a teacher is asked about one frame: the frame, the messages, and what they are for."""

    task: TaskName
    env_id: str
    system: str
    user: str
    frame_png: bytes
    # the env context the prompt was rendered from (scripted teachers read it)
    context: dict[str, Any]
    action_space: dict[str, Any]  # pipeline.teach.rollouts.format.action_space_spec of the env
    stored_action: Any = None  # the action taken in this frame (judge task)

    @property
    def text(self) -> str:
        return self.system + _SEPARATOR + self.user

    @property
    def text_sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


@cache
def load_template(prompt_dir: str, task: str) -> tuple[str, str]:
    """(system, user template) from `<prompt_dir>/<task>.txt`, else `common/<task>.txt`."""
    path = PROMPT_DIR / prompt_dir / f"{task}.txt"
    if not path.exists():
        path = PROMPT_DIR / "common" / f"{task}.txt"
    text = path.read_text()
    if _SEPARATOR not in text:
        raise ValueError(f"{path}: no '---' line between the system message and the prompt")
    system, user = text.split(_SEPARATOR, 1)
    return system.strip(), user.strip()


def schema_template(schema: EnvLabelSchema, task: str) -> tuple[str, str]:
    """(system, user template) of `task` for `schema`'s env: its own template from params.yaml
    (a brought env's `env.<id>.labels.prompts.<task>`), else `load_template`'s files."""
    text = schema.prompts.get(task)
    if text is None:
        return load_template(schema.prompt_dir, task)
    system, user = text.split(_SEPARATOR, 1)  # the `---` line is checked by pipeline.core.config
    return system.strip(), user.strip()


def _action_fields(schema: EnvLabelSchema, action_space: dict[str, Any]) -> tuple[str, str]:
    if schema.action_choices is not None:
        (name,) = schema.action_names
        spec = f"- {name}: one of {', '.join(schema.action_choices)}"
        return spec, f"{name}: <{'|'.join(schema.action_choices)}>"
    spec = "\n".join(
        f"- {name}: a number from {lo:g} to {hi:g}"
        for name, lo, hi in zip(
            schema.action_names, action_space["low"], action_space["high"], strict=True
        )
    )
    return spec, "\n".join(f"{name}: <number>" for name in schema.action_names)


def format_action(action: Any, schema: EnvLabelSchema, action_space: dict[str, Any]) -> str:
    """An action as the prompts name it: `push: left` or `steer: 0.10, gas: 0.50, brake: 0.00`."""
    if schema.action_choices is not None:
        return f"{schema.action_names[0]}: {schema.action_choices[int(action) - action_space['start']]}"
    return ", ".join(
        f"{n}: {float(v):.2f}" for n, v in zip(schema.action_names, action, strict=True)
    )


def answer_text(task: TaskName, value: Any, env_id: str, action_space: dict[str, Any]) -> str:
    """A value in the format the prompts ask for, which `parse_answer` reads back exactly: how a
    person's correction becomes an answer like a teacher's."""
    schema = label_schema(env_id)
    if task == "action":
        return format_action(value, schema, action_space).replace(", ", "\n")
    if task == "milestone":
        return f"milestone: {value}"
    if task == "objects":
        if any(re.search(r"[,;\"']| and | & ", phrase) for phrase in value):
            # `objects: ["road and grass"]`: a JSON array keeps each phrase one phrase
            return "objects: " + json.dumps(list(value), ensure_ascii=False)
        return "objects: " + ", ".join(value)
    if task == "judge":
        return f"reasonable: {'yes' if value else 'no'}"
    raise ValueError(f"unknown task {task!r}")


def _template_source(schema: EnvLabelSchema, task: str) -> str:
    if task in schema.prompts:
        return f"params.yaml env.{schema.env_id}.labels.prompts.{task}"
    return f"{schema.prompt_dir}/{task}.txt"


def render_prompt(
    task: TaskName,
    env_id: str,
    action_space: dict[str, Any],
    frame_png: bytes,
    context: dict[str, Any],
    stored_action: Any = None,
) -> Prompt:
    schema = label_schema(env_id)
    system, template = schema_template(schema, task)
    action_spec, action_answer = _action_fields(schema, action_space)
    fields = {
        "task_description": schema.task_description,
        "action_spec": action_spec,
        "action_answer": action_answer,
        "milestones": ", ".join(schema.milestones),
        "stored_action": ""
        if stored_action is None
        else format_action(stored_action, schema, action_space),
        "context": context,
    }
    try:
        user = template.format(**fields)
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"the {task} prompt of {env_id} ({_template_source(schema, task)}) uses a field the "
            f"{env_id} context lacks: {exc}"
        ) from exc
    return Prompt(task, env_id, system, user, frame_png, context, action_space, stored_action)


def parse_answer(
    task: TaskName, text: str | None, env_id: str, action_space: dict[str, Any]
) -> ParseResult:
    schema = label_schema(env_id)
    if task == "action":
        return parse_action(text, schema, action_space)
    if task == "milestone":
        return parse_milestone(text, schema)
    if task == "objects":
        return parse_objects(text)
    if task == "judge":
        return parse_judge(text)
    raise ValueError(f"unknown label task {task!r}; known: {', '.join(TASKS)}")


def schema_problems(env_id: str, where: str) -> list[str]:
    """Each label the env's schema declares, answered exactly as the prompts ask for it
    (`milestone: <name>`, `<action>: <choice>`, `objects: <phrase>`), must parse back to
    itself; a name the parsers cannot match (`swing-up`, two names differing in case) would
    turn every correct answer into invalid_choice or ambiguous. `where`: the params key of the
    schema, for messages."""
    schema = label_schema(env_id)
    problems = []
    for name in schema.milestones:
        got = parse_milestone(f"milestone: {name}", schema)
        if got.status != "ok" or got.value is None or got.value[0] != name:
            read = f"reads as {got.value[0]!r}" if got.value else f"{got.status}: {got.detail}"
            problems.append(f"{where}.milestones: {name!r} does not parse back ({read}); use "
                            "letters, digits and '_', distinct in any case")  # fmt: skip
    if schema.action_choices is not None:
        space = {"type": "discrete", "n": len(schema.action_choices), "start": 0}
        for index, choice in enumerate(schema.action_choices):
            got = parse_action(f"{schema.action_names[0]}: {choice}", schema, space)
            if got.status != "ok" or got.value != index:
                read = (f"reads as {schema.action_choices[got.value]!r}" if got.value is not None
                        else f"{got.status}: {got.detail}")  # fmt: skip
                problems.append(f"{where}.action_choices: {choice!r} does not parse back ({read}); "
                                "use one word each, distinct in any case")  # fmt: skip
    else:
        n = len(schema.action_names)
        space = {"type": "box", "shape": [n], "low": [-1.0] * n, "high": [1.0] * n}
        answer = "\n".join(f"{name}: 0.5" for name in schema.action_names)
        got = parse_action(answer, schema, space)
        if got.status != "ok":
            problems.append(f"{where}.action_names: {list(schema.action_names)} do not parse "
                            f"back from one `name: value` line each ({got.status}: {got.detail})")  # fmt: skip
    for phrase in schema.objects:
        got = parse_objects(f"objects: {phrase}")
        if got.status != "ok" or got.value != [phrase]:
            problems.append(f"{where}.objects: {phrase!r} does not parse back ({got.status}: "
                            f"{got.detail})")  # fmt: skip
    return problems
