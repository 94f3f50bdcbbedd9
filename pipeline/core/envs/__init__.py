"""One factory for every shipped env, each with the observation contract of `wrappers`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pipeline.core.config import EnvConfig
from pipeline.core.env_registry import (
    KNOWN_ENVS,
    EnvInfo,
    UnknownEnvError,
    brought_schema,
    env_info,
)
from pipeline.core.envs.wrappers import CONTEXT, PIXELS, STATE, ActionRepeat, ObservationContract

__all__ = [
    "CONTEXT",
    "KNOWN_ENVS",
    "PIXELS",
    "STATE",
    "EnvInfo",
    "UnknownEnvError",
    "env_info",
    "make_env",
    "state_from_context",
]


def make_env(env_id: str, cfg: EnvConfig, *, pixels: bool = True) -> gym.Env:
    """Build `env_id` with the settings of `cfg`: native env -> ActionRepeat -> contract.
    `pixels=False` leaves the frame out of the observation (and does not render it): for agents
    that read the state alone; `cfg.include_state` must then be true."""
    info = env_info(env_id)
    if info.family == "dmc":
        from pipeline.core.envs.dmc import DMCEnv, dmc_context, dmc_frame, dmc_state

        base: gym.Env = DMCEnv(
            info.target or env_id,
            cfg.image_size,
            cfg.max_episode_steps,
            quote_observation=not info.shipped,
        )
        frame_fn, state_fn, context_fn = dmc_frame, dmc_state, dmc_context
        state_dim = base.observation_space.shape[0]
    elif info.family in ("gym", "factory"):
        from pipeline.core.envs import gym_envs

        base = gym_envs.make_brought_base(info, cfg.max_episode_steps)
        frame_fn, state_fn, context_fn = (
            gym_envs.brought_frame, gym_envs.brought_state, gym_envs.brought_context,
        )  # fmt: skip
        state_dim = _flat_dim(env_id, base.observation_space)
    elif info.family == "highway":
        from pipeline.core.envs.highway import (
            highway_context,
            highway_frame,
            highway_state,
            make_highway_base,
        )

        base = make_highway_base(cfg.max_episode_steps)
        frame_fn, state_fn, context_fn, state_dim = (
            highway_frame, highway_state, highway_context, 4,
        )  # fmt: skip
    elif info.family == "carla":
        from pipeline.core.envs.carla_env import CarlaEnv, carla_context, carla_frame, carla_state

        base = CarlaEnv(env_id, cfg.carla, cfg.max_episode_steps)
        frame_fn, state_fn, context_fn, state_dim = carla_frame, carla_state, carla_context, 2
    else:
        from pipeline.core.envs import gym_envs

        base = gym_envs.make_gym_base(env_id, cfg.max_episode_steps)
        if info.family == "carracing":
            frame_fn = gym_envs.carracing_frame
            state_fn, context_fn, state_dim = (
                gym_envs.carracing_state,
                gym_envs.carracing_context,
                3,
            )
        else:
            frame_fn = gym_envs.mountaincar_frame
            state_fn, context_fn, state_dim = (
                gym_envs.mountaincar_state,
                gym_envs.mountaincar_context,
                2,
            )
    if not info.shipped:
        _check_brought_actions(env_id, base.action_space)
    frames = None
    if info.family == "carracing" and cfg.action_repeat > 1:
        from pipeline.core.envs.gym_envs import CarRacingFrames

        frames = CarRacingFrames(base)
    env = ActionRepeat(base, cfg.action_repeat, frames)
    return ObservationContract(
        env,
        image_size=cfg.image_size,
        include_state=cfg.include_state,
        pixels=pixels,
        state_dim=state_dim,
        frame_fn=frame_fn,
        state_fn=state_fn,
        context_fn=context_fn,
    )


def _flat_dim(env_id: str, space: gym.Space) -> int:
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"env.{env_id}.make: the observation space is {space}; a brought env's observation "
            "must be a Box (it becomes the float32 `state`); wrap the env to flatten it"
        )
    return int(np.prod(space.shape))


def _check_brought_actions(env_id: str, space: gym.Space) -> None:
    """A brought env's label schema must name its actions as the env takes them."""
    schema = brought_schema(env_id)
    where = f"env.{env_id}.labels"
    if isinstance(space, gym.spaces.Discrete):
        if schema.action_choices is None or len(schema.action_choices) != int(space.n):
            raise ValueError(
                f"{where}.action_choices: the env takes {space.n} discrete actions; name each "
                f"(got {list(schema.action_choices or [])})"
            )
    elif isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        if schema.action_choices is not None or len(schema.action_names) != space.shape[0]:
            raise ValueError(
                f"{where}.action_names: the env's action is a vector of {space.shape[0]}; give "
                f"one name per dimension and no action_choices (got {list(schema.action_names)})"
            )
    else:
        raise ValueError(
            f"env.{env_id}.make: action space {space} is neither Discrete nor a 1-d Box"
        )


def state_from_context(env_id: str, context: dict[str, Any]) -> np.ndarray:
    """The `state` observation (float32, (n,)) that `env_id` gave together with `context` (its
    `info["context"]`, what a prompt carries), rebuilt from the context alone: for a reader of
    the frame and context (a teacher) that drives a state agent. Per family: dm_control, the
    task's named observations the context quotes, concatenated as DMCEnv flattens them;
    MountainCar, position and velocity; CarRacing, speed, steering and yaw rate; highway-hw,
    speed, yaw, lane offset and gap ahead; CARLA, speed and yaw. A context that lacks a field
    (or a dm_control task whose observation keys are not listed) is a ValueError."""
    info = env_info(env_id)
    try:
        if not info.shipped:  # a brought env quotes its flattened observation
            from pipeline.core.envs.gym_envs import brought_state_from_context

            return brought_state_from_context(context)
        if info.family == "dmc":
            from pipeline.core.envs.dmc import dmc_state_from_context

            return dmc_state_from_context(env_id, context)
        if info.family == "highway":
            from pipeline.core.envs.highway import highway_state_from_context

            return highway_state_from_context(context)
        if info.family == "carla":
            from pipeline.core.envs.carla_env import carla_state_from_context

            return carla_state_from_context(context)
        from pipeline.core.envs import gym_envs

        if info.family == "carracing":
            return gym_envs.carracing_state_from_context(context)
        return gym_envs.mountaincar_state_from_context(context)
    except KeyError as exc:
        raise ValueError(
            f"{env_id}: its state observation cannot be rebuilt from this context (missing: "
            f"{exc.args[0]}; context keys: {', '.join(context) or 'none'}); a teacher that reads "
            "the frame and context can drive a pixel agent of this env instead"
        ) from None
