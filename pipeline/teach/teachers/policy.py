"""The policy teacher: a trained agent checkpoint (`models/<run>`) as a teacher of known,
dialable quality (an expert, a half-trained agent, a corrupted one), to measure what guidance is
worth. Like every back end it answers prompts with text that the label tasks parse, through the
same cache and table.

It reads what a VLM is given, nothing more: the prompt's frame and the env context quoted in it.
A state agent reads the state observation rebuilt from that context
(`pipeline.core.envs.state_from_context`, exactly the env's own); a pixel agent reads the prompt's one
frame repeated `frame_stack` times (a teacher sees one frame, as a VLM does, so there is no
motion in the stack). It answers honestly only what an agent knows:

- `action`: its deterministic action, written as the prompts ask (`answer_text`);
- `judge`: "reasonable: yes" when the stored action is within 25 % of the action span of its own
  (the same choice, for discrete actions), as the scripted teacher judges;
- `milestone` and `objects` are refused (config validation refuses them first).

With probability 1 - reliability an answer is replaced by the scripted teacher's injected
failures (hybrid VLM-PPO table 1), drawn from the same per-prompt randomness.

The teacher id is `policy:<sha256 of the checkpoint directory's files>:reliability=<r>:seed=<s>`:
new weights (retraining, one changed byte) never share cache entries with old ones.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pipeline.core.config.stages import NO_TEACHER
from pipeline.core.config.teachers import POLICY_TASKS
from pipeline.core.envs import state_from_context
from pipeline.core.policy import PolicyLoader, needs_loader
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import Prompt, answer_text
from pipeline.teach.teachers.base import Reply, prompt_rng
from pipeline.teach.teachers.scripted import _failed_answer

JUDGE_TOLERANCE = 0.25  # mean |stored - policy| / span below which a stored action is reasonable


def checkpoint_sha256(directory: str | Path) -> str:
    """sha256 over every file under `directory`, in the order of their relative POSIX names:
    each file's name and size, then its bytes. Where the directory sits does not count."""
    directory = Path(directory)
    files = sorted(
        (path.relative_to(directory).as_posix(), path)
        for path in directory.rglob("*")
        if path.is_file()
    )
    digest = hashlib.sha256()
    for name, path in files:
        encoded = name.encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
        digest.update(path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def unsupported_tasks_error(tasks: Sequence[str]) -> ValueError:
    return ValueError(
        f"the policy teacher answers only the {' and '.join(POLICY_TASKS)} tasks, not "
        f"{', '.join(tasks)} (an agent has no honest milestone or object answer); set "
        "`label.tasks` (or `label.per_env.<env>.tasks`) to those tasks alone"
    )


class PolicyTeacher:
    """A trained agent (`models/<run>`) answering action and judge prompts with its
    deterministic action; `load_policy` (its stage's: `pipeline.learn.methods.table.load_policy`)
    loads it as deployed."""

    def __init__(
        self,
        checkpoint: str | Path,
        reliability: float,
        seed: int,
        load_policy: PolicyLoader | None = None,
    ) -> None:
        if not 0.0 <= reliability <= 1.0:
            raise ValueError(f"reliability must be in [0, 1], got {reliability}")
        self.checkpoint = Path(checkpoint)
        if not self.checkpoint.is_dir():
            raise ValueError(
                f"policy teacher: checkpoint directory {self.checkpoint} does not exist; train "
                "the agent first (policy_teacher@<env> writes models/teachers/<env>) or fix "
                "`policy.checkpoint`"
            )
        if (self.checkpoint / NO_TEACHER).exists():
            raise ValueError(
                f"policy teacher: {self.checkpoint} holds no agent (policy_teacher@<env> wrote "
                f"{NO_TEACHER}: the env is not listed in `policy_teachers`); add it there"
            )
        self.reliability, self.seed = reliability, seed
        # CheckpointError: not an agent checkpoint
        self.policy = needs_loader(load_policy, "the policy teacher")(self.checkpoint, True)
        self.env_id: str | None = self.policy.meta.get("env")  # the train stage's
        digest = checkpoint_sha256(self.checkpoint)
        self.teacher_id = f"policy:{digest}:reliability={reliability:g}:seed={seed}"
        self.decoding: dict[str, Any] = {}

    def observation(self, prompt: Prompt) -> dict[str, np.ndarray]:
        """The agent's observation of the prompt's frame: the rebuilt state, or the frame (the
        deployed policy resizes it to the agent's size and stacks it as an episode's first)."""
        if self.policy.obs == "state":
            return {"state": state_from_context(prompt.env_id, prompt.context)}
        with Image.open(io.BytesIO(prompt.frame_png)) as image:
            return {"pixels": np.asarray(image.convert("RGB"))}

    def policy_action(self, prompt: Prompt) -> Any:
        """The agent's deterministic action in the prompt's frame: a choice index (an env
        action of a discrete space) or a list of floats."""
        if self.env_id is not None and prompt.env_id != self.env_id:
            raise ValueError(
                f"policy teacher {self.checkpoint} was trained on {self.env_id}; it cannot "
                f"answer a {prompt.env_id} prompt (give that env its own teacher in "
                f"`label.per_env.{prompt.env_id}.teacher`)"
            )
        obs = self.observation(prompt)
        try:
            self.policy.begin(obs)  # each prompt's frame is an episode's first: no history
            action = self.policy.act(obs)
        except ValueError as exc:
            raise ValueError(
                f"policy teacher {self.checkpoint}: its {self.policy.obs} agent cannot read "
                f"the {prompt.env_id} prompt's observation: {exc}"
            ) from None
        if label_schema(prompt.env_id).action_choices is not None:
            return int(np.asarray(action).item())
        values = np.asarray(action, dtype=np.float64).reshape(-1).tolist()
        if len(values) != len(prompt.action_space["low"]):
            raise ValueError(
                f"policy teacher {self.checkpoint}: its actions have {len(values)} dimensions, "
                f"{prompt.env_id}'s action space {len(prompt.action_space['low'])}"
            )
        return values

    def correct_text(self, prompt: Prompt) -> str:
        action = self.policy_action(prompt)
        if prompt.task == "action":
            body = answer_text("action", action, prompt.env_id, prompt.action_space)
            return f"Describe: the policy checkpoint's deterministic action.\n{body}"
        if prompt.task != "judge":
            raise unsupported_tasks_error([prompt.task])
        stored = prompt.stored_action
        if label_schema(prompt.env_id).action_choices is not None:
            ok = stored == action
        else:
            space = prompt.action_space
            span = np.asarray(space["high"]) - np.asarray(space["low"])
            gap = np.abs(np.asarray(stored, dtype=np.float64) - np.asarray(action)) / span
            ok = float(np.mean(gap)) < JUDGE_TOLERANCE
        return f"reasonable: {'yes' if ok else 'no'}"

    def answer(self, prompts: Sequence[Prompt]) -> list[Reply]:
        unsupported = sorted({p.task for p in prompts} - set(POLICY_TASKS))
        if unsupported:
            raise unsupported_tasks_error(unsupported)
        replies = []
        for prompt in prompts:
            started = time.perf_counter()
            rng = prompt_rng(prompt, self.seed)
            if rng.uniform() >= self.reliability:  # the scripted teacher's failure injection
                text = _failed_answer(prompt, label_schema(prompt.env_id), rng)
            else:
                text = self.correct_text(prompt)
            replies.append(Reply(text=text, latency_s=time.perf_counter() - started))
        return replies
