"""Method `ppo`: PPO on the state observation and the env's native reward (pipeline.learn.agents.ppo),
the baseline of hybrid VLM-PPO's table 2. `hybrid_ppo` extends it with the shaped reward."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from pipeline.core.config import Params, TrainRun
from pipeline.core.envs import STATE, make_env
from pipeline.learn.agents.ppo import ActorCritic, PPOParams, train_ppo
from pipeline.learn.methods.base import (
    Method,
    TrainError,
    TrainInputs,
    TrainResult,
    resume_for,
    run_material,
)


def native_state_bounds(env: gym.Env) -> tuple[np.ndarray, np.ndarray] | None:
    """The native observation space's bounds when the state is that observation with finite
    bounds (MountainCar), to rescale the policy input; None otherwise."""
    space = env.unwrapped.observation_space
    state_space = env.observation_space[STATE]
    if (
        isinstance(space, gym.spaces.Box)
        and space.shape == state_space.shape
        and np.isfinite(space.low).all()
        and np.isfinite(space.high).all()
    ):
        return space.low.astype(np.float32), space.high.astype(np.float32)
    return None


class PPO(Method):
    name = "ppo"
    params_class = PPOParams

    def env_factory(
        self, run: TrainRun, hp: PPOParams, params: Params, inputs: TrainInputs
    ) -> Callable[[], gym.Env]:
        """The env the run trains in: the native reward, episode statistics recorded."""
        env_cfg = params.env[run.env]
        return lambda: gym.wrappers.RecordEpisodeStatistics(
            make_env(run.env, env_cfg, pixels=False)
        )

    def data_hashes(self, inputs: TrainInputs) -> dict[str, str]:
        """Hashes of the data the agent learns from (none: PPO reads no label)."""
        return {}

    def reward_terms(self, run: TrainRun) -> list[str]:
        return ["env"]

    def train(
        self,
        name: str,
        run: TrainRun,
        params: Params,
        inputs: TrainInputs,
        *,
        progress: bool = True,
        resume_dir: str | Path | None = None,
    ) -> TrainResult:
        """PPO reads the state; the learning curve is the env's native return, whatever reward the
        agent learns from (the shaping wrapper sits above the episode statistics)."""
        hp = self.params(params, run)
        env_cfg = params.env[run.env]
        if not env_cfg.include_state:
            raise TrainError(
                f"train.{run.env}: PPO reads the state observation; set env.{run.env}.include_state"
            )
        make = self.env_factory(run, hp, params, inputs)
        probe = make()
        bounds = native_state_bounds(probe)
        probe.close()
        data = self.data_hashes(inputs)
        resume = resume_for(resume_dir, hp.resume_every, run_material(name, run, hp, env_cfg, data))
        agent, curve = train_ppo(
            make,
            hp,
            run.steps,
            run.seed,
            obs_fn=lambda obs: obs[STATE],
            progress=progress,
            obs_bounds=bounds,
            resume=resume,
        )
        if resume is not None:
            resume.clear()  # finished: nothing to resume
        meta = {
            "run": name,
            "env": run.env,
            "method": self.name,
            "obs": STATE,
            "reward_terms": self.reward_terms(run),
            "steps": run.steps,
            "seed": run.seed,
            "config": hp.model_dump(mode="json"),
            "data": data,
        }
        return TrainResult(agent, curve, meta)

    def load(self, directory: str | Path, device: torch.device | str = "cpu") -> ActorCritic:
        return ActorCritic.load(directory)


METHOD = PPO()
