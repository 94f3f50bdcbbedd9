"""The env ids the pipeline ships, with the paper settings they come from.

Kept free of simulator imports so that config validation can name the known ids cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.errors import PipelineError


@dataclass(frozen=True)
class EnvInfo:
    env_id: str
    family: Literal["classic", "carracing", "dmc", "highway", "carla"]
    paper_action_repeat: int  # the value params.yaml ships; see `source`
    source: str
    # Whether `terminated` means the task was solved (MountainCar: the flag is reached), so that
    # evaluation can report a success rate; None where the env defines no success.
    success_on_termination: bool | None = None


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


class UnknownEnvError(PipelineError, ValueError):
    def __init__(self, env_id: str) -> None:
        super().__init__(f"unknown env id {env_id!r}; known env ids: {', '.join(KNOWN_ENVS)}")


def env_info(env_id: str) -> EnvInfo:
    try:
        return KNOWN_ENVS[env_id]
    except KeyError:
        raise UnknownEnvError(env_id) from None
