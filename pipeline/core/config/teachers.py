"""Teachers: the one that labels (`label.teacher`) and the one that acts while collecting
(`collect.<env>.teacher`), with the settings of each back end."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.core.config.base import Section


class HFTeacherConfig(Section):
    """A transformers VLM (`<teacher>.hf`: `label.teacher.hf`, `collect.<env>.teacher.hf`)."""

    model: str = Field(
        description="Local checkpoint path or hub id, e.g. Qwen/Qwen2-VL-2B-Instruct."
    )
    revision: str | None = Field(default=None, description="Hub revision (branch, tag or commit).")
    device: str = Field(default="cpu", description="torch device: cpu, cuda, cuda:1, ...")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="Weights dtype; bfloat16 on GPUs."
    )
    max_new_tokens: int = Field(
        default=128, ge=1, le=4096, description="Generation limit per answer."
    )
    batch_size: int = Field(default=8, ge=1, le=512, description="Frames per generate() call.")


class OpenAITeacherConfig(Section):
    """An OpenAI-compatible chat-completions server (`<teacher>.openai`)."""

    base_url: str = Field(description="Server URL up to /v1, e.g. http://127.0.0.1:8000/v1 (vLLM).")
    model: str = Field(description="Model name the server knows it by.")
    revision: str = Field(
        description="Which weights the server serves under `model` (a hub commit, a checkpoint "
        "hash, a deployment tag: your choice). Part of the teacher id, so answers of different "
        "weights served under one name never share cache entries."
    )
    api_key_env: str | None = Field(
        default=None, description="Environment variable holding the API key; null: no key."
    )
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Deadline of one request in seconds: connecting, sending and every byte of "
        "the answer together (a server that drips its answer a byte at a time is cut off).",
    )
    max_retries: int = Field(default=3, ge=0, le=10, description="Retries after the first attempt.")
    backoff_s: float = Field(
        default=1.0, ge=0, description="First retry delay; doubles each retry."
    )
    concurrency: int = Field(default=8, ge=1, le=256, description="Requests in flight at once.")
    max_tokens: int = Field(default=128, ge=1, le=4096, description="Generation limit per answer.")
    json_schema: bool = Field(
        default=False,
        description="Send a JSON-schema response_format (structured output; vLLM supports it).",
    )
    served_models: list[str] = Field(
        default_factory=list,
        description="Model ids a completion may name besides `model` and `model@<revision>` "
        "(what `transformers serve` reports): e.g. the dated snapshot a provider reports for an "
        "alias, gpt-4o-2024-08-06 for gpt-4o. A completion naming any other model stops the "
        "stage: its answers would be cached under this teacher's id.",
    )
    max_consecutive_failures: int = Field(
        default=16,
        ge=1,
        description="Circuit breaker: this many requests in a row that get no answer (after "
        "their retries) stop the stage with an error, instead of labelling on against a server "
        "that died or hung. Each such request costs up to (1 + max_retries) * timeout_s plus "
        "the backoff, `concurrency` at a time.",
    )


class PolicyTeacherConfig(Section):
    """A trained agent as the teacher (`<teacher>.policy`): a teacher of known, dialable quality
    (an expert, a half-trained agent, a corrupted one), to measure what guidance is worth."""

    checkpoint: str = Field(
        min_length=1,
        description="An agent checkpoint directory (pipeline.learn.methods.table.load_agent reads "
        "it). In the pipeline it is `models/teachers/<env>`, what policy_teacher@<env> trains "
        "from `policy_teachers.<env>`: the one path label@<env> depends on (stages.check_params "
        "refuses another). It answers the `action` task with its "
        "deterministic action and `judge` by comparing the stored action with it (as `scripted` "
        "does); it cannot answer `milestone` or `objects`. A state agent reads the state rebuilt "
        "from the prompt's context, a pixel agent the prompt's one frame repeated frame_stack "
        "times. The teacher id is the sha256 of the directory's files.",
    )


# What a policy teacher answers honestly: its action, and whether a stored action is near it.
POLICY_TASKS = ("action", "judge")


class TeacherConfig(Section):
    """A teacher: the one that labels (`label.teacher`) or the one that acts while collecting
    (`collect.<env>.teacher`)."""

    backend: Literal["scripted", "random", "constant", "hf", "openai", "policy"] = Field(
        description="`scripted`: per-env reference scripts with injected failures, a stand-in for "
        "a VLM (offline default); `random`: ERPv table 4's Random Executor; `constant`: its Worst "
        "Model (all outputs 0); `hf`: a transformers VLM (section `hf`); `openai`: an "
        "OpenAI-compatible server (section `openai`); `policy`: a trained agent checkpoint "
        "(section `policy`; tasks action and judge only). A person's corrections are not a "
        "teacher: they overlay this teacher's answers (corrections/<env>.jsonl, "
        "`stages.review import`)."
    )
    reliability: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="scripted / policy: probability that an answer is the script's (the "
        "checkpoint's) answer; otherwise a failure of hybrid VLM-PPO table 1 is injected. "
        "Default 1.0 (no injected failure); hf, openai and constant do not read it.",
    )
    seed: int = Field(
        default=0,
        ge=0,
        description="scripted / random / policy: seed of the injected randomness (default 0); "
        "hf, openai and constant do not read it.",
    )
    hf: HFTeacherConfig | None = Field(default=None, description="Settings of backend `hf`.")
    openai: OpenAITeacherConfig | None = Field(default=None, description="Settings of `openai`.")
    policy: PolicyTeacherConfig | None = Field(
        default=None, description="Settings of backend `policy`."
    )

    @field_validator("backend", mode="before")
    @classmethod
    def _no_human_backend(cls, value: object) -> object:
        if value == "human":
            raise ValueError(
                "backend 'human' was replaced by an overlay: keep the teacher whose answers the "
                "person reviewed as the backend; `python -m stages.review import` writes the "
                "corrections to corrections/<env>.jsonl and the label stage applies them"
            )
        return value

    @model_validator(mode="after")
    def _backend_has_settings(self) -> TeacherConfig:
        if self.backend == "hf" and self.hf is None:
            raise ValueError("backend 'hf' needs an `hf:` section with at least `model:`")
        if self.backend == "openai" and self.openai is None:
            raise ValueError(
                "backend 'openai' needs an `openai:` section with `base_url` and `model`"
            )
        if self.backend == "policy" and self.policy is None:
            raise ValueError(
                "backend 'policy' needs a `policy:` section with `checkpoint: <agent directory>`"
            )
        if self.backend != "policy" and self.policy is not None:
            raise ValueError(
                f"a `policy:` section is read by backend 'policy' only (backend is "
                f"{self.backend!r}); remove it or set `backend: policy`"
            )
        return self
