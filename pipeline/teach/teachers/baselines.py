"""ERPv table 4's two failure baselines as teachers: the Random Executor and the Worst Model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import Prompt, format_action
from pipeline.teach.teachers.base import Reply, prompt_rng


class RandomTeacher:
    """Random Executor: a uniformly random valid answer to every task."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.teacher_id = f"random:seed={seed}"
        self.decoding: dict[str, Any] = {}

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        replies = []
        for prompt in prompts:
            rng = prompt_rng(prompt, self.seed)
            schema, space = label_schema(prompt.env_id), prompt.action_space
            if prompt.task == "action":
                if schema.action_choices is not None:
                    action: Any = space["start"] + int(rng.integers(len(schema.action_choices)))
                else:
                    action = rng.uniform(space["low"], space["high"]).tolist()
                text = format_action(action, schema, space).replace(", ", "\n")
            elif prompt.task == "milestone":
                text = f"milestone: {rng.choice(list(schema.milestones))}"
            elif prompt.task == "objects":
                k = int(rng.integers(1, len(schema.objects) + 1))
                text = "objects: " + ", ".join(rng.choice(schema.objects, size=k, replace=False))
            else:
                text = f"reasonable: {rng.choice(['yes', 'no'])}"
            replies.append(Reply(text=text))
        return replies


class ConstantTeacher:
    """Worst Model: "sets all output values of the VLM to 0" (ERPv 4.4): a zero action (clipped
    into the action space; choice 0 for discrete envs), the lowest milestone, no objects, and
    every stored action judged unreasonable."""

    teacher_id = "constant:zeros"

    def __init__(self) -> None:
        self.decoding: dict[str, Any] = {}

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        replies = []
        for prompt in prompts:
            schema, space = label_schema(prompt.env_id), prompt.action_space
            if prompt.task == "action":
                if schema.action_choices is not None:
                    action: Any = space["start"]
                else:
                    action = [
                        min(max(0.0, lo), hi)
                        for lo, hi in zip(space["low"], space["high"], strict=True)
                    ]
                text = format_action(action, schema, space).replace(", ", "\n")
            elif prompt.task == "milestone":
                text = f"milestone: {next(iter(schema.milestones))}"
            elif prompt.task == "objects":
                text = "objects:"
            else:
                text = "reasonable: no"
            replies.append(Reply(text=text))
        return replies
