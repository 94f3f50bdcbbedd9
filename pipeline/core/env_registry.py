"""The env ids the pipeline ships, with the paper settings they come from, and the envs a
user brings from params.yaml (`env.<id>.make` and `env.<id>.labels`, registered when the params
are loaded, as `gymnasium.register` registers an id).

Kept free of simulator imports so that config validation can name the known ids cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.core.errors import PipelineError


@dataclass(frozen=True)
class EnvInfo:
    env_id: str
    # `gym` and `factory`: an env brought from params.yaml (a dm_control task brought there is
    # `dmc`, which builds any suite task)
    family: Literal["classic", "carracing", "dmc", "highway", "carla", "gym", "factory"]
    paper_action_repeat: int  # the value params.yaml ships; see `source`
    source: str
    # Whether `terminated` means the task was solved (MountainCar: the flag is reached), so that
    # evaluation can report a success rate; None where the env defines no success.
    success_on_termination: bool | None = None
    # A brought env: what builds it (the gymnasium id, dm_control `domain-task` or
    # `module:function`), its keyword arguments and a module to import first.
    target: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    package: str | None = None

    @property
    def shipped(self) -> bool:
        return self.env_id in KNOWN_ENVS


_ENVS = [
    EnvInfo(
        "MountainCar-v0", "classic", 1, "hybrid VLM-PPO sec. 4: native MountainCar, no repeat", True
    ),
    EnvInfo("MountainCarContinuous-v0", "classic", 1, "continuous MountainCar, no repeat", True),
    EnvInfo("CarRacing-v3", "carracing", 4, "ERPv C.2/E.1 (84x84 frames); repeat 4 as table 6"),
    # ERPv C.2: DMControl follows RAD (Laskin et al. 2020b), whose action repeats these are.
    EnvInfo("cartpole-swingup", "dmc", 8, "ERPv table 2 / RAD: action repeat 8"),
    EnvInfo("cheetah-run", "dmc", 4, "ERPv table 2 / RAD: action repeat 4"),
    EnvInfo("walker-walk", "dmc", 2, "ERPv table 2 / RAD: action repeat 2"),
    EnvInfo("ball_in_cup-catch", "dmc", 4, "ERPv table 2 / RAD: action repeat 4"),
    EnvInfo("reacher-easy", "dmc", 4, "ERPv table 2 / RAD: action repeat 4"),
    # ERPv's driving scenes (appendix C.1, tables 5-6): CARLA needs a running server; the
    # HighwayEnv stand-in runs here (its 5 Hz policy steps already span 4 of CARLA's 20 Hz ticks)
    EnvInfo(
        "highway-hw", "highway", 1, "ERPv #HW stand-in: HighwayEnv highway-fast, 5 Hz, no repeat"
    ),
    EnvInfo(
        "carla-hw", "carla", 4, "ERPv #HW: CARLA, 20 Hz ticks (table 5), action repeat 4 (table 6)"
    ),
    EnvInfo(
        "carla-jw", "carla", 4, "ERPv #JW: CARLA, 20 Hz ticks (table 5), action repeat 4 (table 6)"
    ),
]

KNOWN_ENVS: dict[str, EnvInfo] = {info.env_id: info for info in _ENVS}

# Brought envs of this process: id -> (EnvInfo, its label schema). Filled by `register_env`
# (pipeline.core.config does it for every `env.<id>.make` of the params it loads).
_BROUGHT: dict[str, tuple[EnvInfo, EnvLabelSchema]] = {}


@dataclass(frozen=True)
class EnvLabelSchema:
    env_id: str
    prompt_dir: str  # folder under pipeline/teach/labels/prompts/
    # Continuous envs: one name per action dimension, asked as `name: value` lines (ERPv fig. 12-14
    # asks `throttle:` and `steer:` the same way). Discrete envs: one name and its choices, whose
    # index is the action.
    action_names: tuple[str, ...]
    action_choices: tuple[str, ...] | None
    # Milestone label -> raw potential Phi_raw (hybrid VLM-PPO 3.2), ordered from low to high.
    milestones: dict[str, float]
    # Phrases a scripted teacher may name for the `objects` task (Semore's key objects).
    objects: tuple[str, ...]
    task_description: str
    # A brought env's own prompt templates by task (`system`, a `---` line, the user template);
    # a task missing here uses `<prompt_dir>/<task>.txt`, else `common/<task>.txt`.
    prompts: dict[str, str] = field(default_factory=dict)


class UnknownEnvError(PipelineError, ValueError):
    def __init__(self, env_id: str) -> None:
        super().__init__(
            f"unknown env id {env_id!r}; known env ids: {', '.join(KNOWN_ENVS)}; to bring your "
            f"own, give `env.{env_id}.make` and `env.{env_id}.labels` in params.yaml "
            "(docs/own-env.md)"
        )


def register_env(info: EnvInfo, schema: EnvLabelSchema) -> None:
    """Make a brought env known to this process, with its label schema.
    Registering an id again replaces it; a shipped id cannot be replaced."""
    if info.env_id in KNOWN_ENVS:
        raise ValueError(f"{info.env_id} ships with the pipeline; a brought env needs another id")
    _BROUGHT[info.env_id] = (info, schema)


def brought_envs() -> dict[str, tuple[EnvInfo, EnvLabelSchema]]:
    """The brought envs of this process: a worker process given this registers the same."""
    return dict(_BROUGHT)


def env_info(env_id: str) -> EnvInfo:
    try:
        return KNOWN_ENVS[env_id]
    except KeyError:
        pass
    try:
        return _BROUGHT[env_id][0]
    except KeyError:
        raise UnknownEnvError(env_id) from None


def brought_schema(env_id: str) -> EnvLabelSchema:
    """The label schema registered with a brought env (UnknownEnvError if there is none)."""
    try:
        return _BROUGHT[env_id][1]
    except KeyError:
        raise UnknownEnvError(env_id) from None
