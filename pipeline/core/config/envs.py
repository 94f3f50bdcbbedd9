"""How each environment is built and observed (`env.<env_id>`), and how an env the pipeline
does not ship is brought from params.yaml (`env.<env_id>.make` and `env.<env_id>.labels`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from pipeline.core.config.base import Section
from pipeline.core.config.stages import LabelTaskName

PROMPT_SEPARATOR = "\n---\n"  # between a prompt template's system message and its user part


class EnvMakeConfig(Section):
    """How a brought env is built (`env.<id>.make`): exactly one of `gym`, `dm_control` and
    `factory`. The env gets the observation contract of the shipped ones: its rendered frame
    (resized to `image_size`), its observation flattened to float32 as `state`, and the
    observation quoted in each prompt's context."""

    gym: str | None = Field(
        default=None,
        description="A registered gymnasium id, e.g. `Pendulum-v1`; made with "
        "`render_mode='rgb_array'`.",
    )
    dm_control: str | None = Field(
        default=None,
        pattern=r"^[a-z_]+-[a-z_]+$",
        description="A dm_control suite task as `domain-task`, e.g. `finger-spin`.",
    )
    factory: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="`module:function` returning a gymnasium Env whose `render()` gives an RGB "
        "frame (the module must be importable by the stages: installed, or in the project).",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of `gym.make` or of the factory."
    )
    package: str | None = Field(
        default=None,
        description="A module to import before `gym.make`: the package that registers the id.",
    )
    success_on_termination: bool | None = Field(
        default=None,
        description="Whether `terminated` means the task was solved: evaluate then reports a "
        "success rate (null: the env defines no success).",
    )

    @model_validator(mode="after")
    def _one_builder(self) -> EnvMakeConfig:
        given = [key for key in ("gym", "dm_control", "factory") if getattr(self, key)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of `gym` (a gymnasium id), `dm_control` (`domain-task`) or "
                f"`factory` (`module:function`); got {', '.join(given) or 'none'}"
            )
        if self.dm_control and (self.kwargs or self.package):
            raise ValueError("`kwargs` and `package` apply to `gym` and `factory` only")
        return self

    @property
    def family(self) -> Literal["gym", "dmc", "factory"]:
        return "gym" if self.gym else "dmc" if self.dm_control else "factory"

    @property
    def target(self) -> str:
        return self.gym or self.dm_control or self.factory or ""


class EnvLabelsConfig(Section):
    """What the label tasks ask about a brought env and what they may answer
    (`env.<id>.labels`); the shipped envs' are in pipeline/teach/labels/schema.py."""

    task_description: str = Field(
        min_length=1, description="The task in a few words: the prompts quote it."
    )
    action_names: list[str] = Field(
        min_length=1,
        description="Continuous actions: one name per action dimension, asked as `name: value` "
        "lines. Discrete actions: one name, with `action_choices`.",
    )
    action_choices: list[str] | None = Field(
        default=None,
        min_length=2,
        description="Discrete actions only: one word per action, in the action index's order.",
    )
    milestones: dict[str, float] = Field(
        min_length=2,
        description="Milestone label -> raw potential Phi_raw in [0, 1] (hybrid VLM-PPO sec. "
        "3.2), ordered from low to high.",
    )
    objects: list[str] = Field(
        min_length=1,
        description="Phrases a teacher may name for the `objects` task (Semore's key objects).",
    )
    prompts: dict[LabelTaskName, str] = Field(
        default_factory=dict,
        description="Own prompt templates by task: the system message, a line `---`, then the "
        "user template with the fields of pipeline/teach/labels/prompts/common/<task>.txt (a task not "
        "given here uses that file).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> EnvLabelsConfig:
        if self.action_choices is not None and len(self.action_names) != 1:
            raise ValueError("a discrete action (`action_choices`) has exactly one action name")
        values = list(self.milestones.values())
        if values != sorted(values) or not all(0.0 <= v <= 1.0 for v in values):
            raise ValueError("milestone potentials must lie in [0, 1], ordered from low to high")
        for task, text in self.prompts.items():
            if PROMPT_SEPARATOR not in text:
                raise ValueError(
                    f"prompts.{task}: no line `---` between the system message and the prompt"
                )
        return self


class CarlaConfig(Section):
    """How to reach a running CARLA server and which world to load (`env.<carla id>.carla`).
    Where the server runs does not change the data: host, port and timeout are left out of what
    fingerprints a collection; the map and weather are part of it."""

    host: str = Field(default="127.0.0.1", exclude=True, description="CARLA server host.")
    port: int = Field(default=2000, ge=1, le=65535, exclude=True, description="RPC port.")
    timeout_s: float = Field(
        default=10.0, gt=0, exclude=True, description="Seconds to wait for the server."
    )
    town: str = Field(
        default="Town04", description="Map: Town04 has the highway of #HW; #JW runs in town."
    )
    weather: str = Field(
        default="CloudyNoon", description="carla.WeatherParameters preset (table 5: Cloudy Noon)."
    )


class EnvConfig(Section):
    """How one environment is built and observed (`env.<env_id>` in params.yaml)."""

    image_size: int = Field(
        ge=16,
        le=512,
        description="Side of the square RGB frame in pixels. ERPv C.2: 84 for DMControl and "
        "CarRacing; table 6: 128 for CARLA.",
    )
    action_repeat: int = Field(
        ge=1,
        le=16,
        description="Env steps per agent step; rewards are summed over the repeat. ERPv follows "
        "RAD: cartpole 8, walker 2, cheetah/ball_in_cup/reacher 4; table 6 (CARLA): 4.",
    )
    max_episode_steps: int | None = Field(
        ge=1,
        description="Episode length limit in env steps (before action repeat, as the papers count "
        "them); null keeps the env's own: 1000 for DMControl and CarRacing (ERPv C.2), 200 for "
        "MountainCar.",
    )
    include_state: bool = Field(
        description="Also return the low-dimensional `state` observation next to `pixels`."
    )
    carla: CarlaConfig | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # envs without it fingerprint as before
        description="CARLA ids only: the server and world (defaults: 127.0.0.1:2000, Town04).",
    )
    make: EnvMakeConfig | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="A brought env only (an id the pipeline does not ship): how it is built.",
    )
    labels: EnvLabelsConfig | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="A brought env only: its label schema (action names, milestones, objects) "
        "and optional prompt templates.",
    )
