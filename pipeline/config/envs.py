"""How each environment is built and observed (`env.<env_id>`)."""

from __future__ import annotations

from pydantic import Field

from pipeline.config.base import Section


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
