"""The run of every SAC-family method (sac, drq, erpv, semore): envs, the labelled dataset as the
replay's offline part, the agent, the loop (pipeline.learn.agents.loop.train_off_policy), the
resume state. A method says which label groups it reads (`labels`), how its agent is built
(`build_agent`) and how the offline rows of a batch are drawn (`offline_pool`)."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from pipeline.core.config import Params, TrainRun
from pipeline.core.envs import STATE, make_env
from pipeline.core.envs.wrappers import ResizeFrames
from pipeline.dataset.transitions import (
    Label,
    OfflineTransitions,
    load_offline_transitions,
    with_frame_size,
)
from pipeline.learn.agents.loop import train_off_policy
from pipeline.learn.agents.off_policy import OffPolicyAgent, SACParams, env_obs_shape
from pipeline.learn.agents.replay import OfflinePool, ReplayBuffer
from pipeline.learn.agents.state_io import has_state, load_state
from pipeline.learn.evaluation import deployed, play_episodes
from pipeline.learn.methods.base import (
    TRAIN_EVAL_SEED,
    TRAINING_STATE,
    Method,
    TrainError,
    TrainInputs,
    TrainResult,
    resume_for,
    run_material,
)


class OffPolicyMethod(Method):
    """A SAC-family method. `labels`: the dataset's label groups its agent reads (the dataset is
    loaded when there are any, or when `offline_fraction` > 0); `deployed_agent`: the class a
    saved agent is loaded as for acting."""

    params_class: ClassVar[type[SACParams]]
    labels: ClassVar[tuple[Label, ...]] = ()
    deployed_agent: ClassVar[type[OffPolicyAgent]]  # what a saved agent comes back as
    extends_replay = True

    @abstractmethod
    def build_agent(
        self, env: gym.Env, hp: Any, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OffPolicyAgent, dict[str, Any]]:
        """The agent to train, and the hashes of any data it reads beyond the dataset."""

    run_options: ClassVar[frozenset[str]] = frozenset({"image_size"})

    def check_run(self, name: str, run: TrainRun, params: Params) -> list[str]:
        hp = self.params(params, run)
        problems = []
        if run.image_size is not None and hp.network.obs == STATE:
            problems.append(
                f"train.{name}.image_size: the run's agent reads the state, not frames; drop "
                f"image_size or set the run's overrides {{network: {{obs: pixels}}}}"
            )
        if run.steps < hp.start_steps:
            problems.append(
                f"train.{name}: {run.steps} steps never reach {self.name}.start_steps="
                f"{hp.start_steps} (uniform random actions before the first update): the agent "
                f"would be saved untrained; raise train.{name}.steps above {hp.start_steps} or "
                f"lower {self.name}.start_steps"
            )
        return problems

    @staticmethod
    def _env(run: TrainRun, env_cfg: Any, obs: str) -> gym.Env:
        """The run's env: frames resized to the run's own `image_size` where it sets one."""
        env = make_env(run.env, env_cfg, pixels=obs != STATE)
        if run.image_size is None or obs == STATE:
            return env
        return ResizeFrames(env, run.image_size)

    def offline_pool(
        self, hp: Any, offline: OfflineTransitions, run: TrainRun, inputs: TrainInputs
    ) -> tuple[OfflinePool | None, dict[str, Any]]:
        """Which offline transitions each batch draws from (None: all, uniformly), and what the
        checkpoint's meta records of that choice."""
        return None, {}

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
        """The replay's offline part is the env's labelled dataset; the guidance reads its
        labels. Returns the agent, its curve, metric rows and the checkpoint's meta."""
        hp = self.params(params, run)
        obs = hp.network.obs
        env_cfg = params.env[run.env]
        if obs == STATE and not env_cfg.include_state:
            raise TrainError(
                f"train.{name}: the agent reads the state; set env.{run.env}.include_state"
            )
        env = self._env(run, env_cfg, obs)
        eval_env = self._env(run, env_cfg, obs) if hp.eval_episodes else None

        def eval_fn(agent: OffPolicyAgent) -> dict[str, float]:
            """The deployed policy on fixed seeds (a separate env: training episodes go on)."""
            assert eval_env is not None
            result = play_episodes(eval_env, deployed(agent), hp.eval_episodes, TRAIN_EVAL_SEED)
            return {"eval_return": result.return_mean}

        try:
            data_hashes: dict[str, Any] = {}
            offline = None
            if hp.offline_fraction > 0 or self.labels:
                if inputs.dataset is None:
                    raise TrainError(f"train.{name}: the labelled dataset is needed (--dataset)")
                offline = load_offline_transitions(
                    inputs.dataset, obs, self.labels, also=inputs.round_parts
                )
                if run.image_size is not None:  # the env's frames are resized to it likewise
                    offline = with_frame_size(offline, run.image_size)
                data_hashes = inputs.dataset_hashes()
            agent, more = self.build_agent(env, hp, run, inputs)
            data_hashes |= more
            pool = None
            if offline is not None:
                pool, chosen = self.offline_pool(hp, offline, run, inputs)
                data_hashes |= chosen
            buffer = ReplayBuffer(
                obs,
                env_obs_shape(env, hp.network),
                int(np.prod(env.action_space.shape)),
                hp.replay_capacity,
                frame_stack=hp.network.frame_stack,
                offline=offline,
                offline_fraction=hp.offline_fraction,
                offline_pool=pool,
                device=agent.device,  # frames once, where the update runs
            )
            if inputs.warm_start is not None:  # a labelling round goes on from there
                _warm_start(agent, buffer, inputs.warm_start)
            material = run_material(name, run, hp, env_cfg, data_hashes)
            resume = resume_for(resume_dir, hp.resume_every, material)
            curve, logs = train_off_policy(
                env,
                agent,
                buffer,
                run.steps,
                run.seed,
                eval_fn=eval_fn if eval_env is not None else None,
                progress=progress,
                resume=resume,
                act_from_start=inputs.warm_start is not None,
            )
        finally:
            env.close()
            if eval_env is not None:
                eval_env.close()
        if resume is not None:
            resume.finish()  # finished: nothing to resume, or the final state kept
        meta = {
            "run": name,
            "env": run.env,
            "method": self.name,
            "obs": obs,
            "steps": run.steps,
            "seed": run.seed,
            "data": data_hashes,
        }
        state = (
            {"agent": agent.training_state(), "buffer": buffer.online_state()}
            if hp.save_training_state
            else None
        )
        return TrainResult(agent, curve, meta, logs, state)

    def load(self, directory: str | Path, device: torch.device | str = "cpu") -> OffPolicyAgent:
        """Deployment needs the acting networks only (SAC's, for sac, drq and erpv)."""
        return self.deployed_agent.load(directory, device, params_class=self.params_class)


def _warm_start(agent: OffPolicyAgent, buffer: ReplayBuffer, directory: Path) -> None:
    """The previous agent's weights (checked against this agent's config), optimisers and
    replay: training goes on as if it had not stopped, on the new offline data."""
    if not has_state(directory, TRAINING_STATE):
        raise TrainError(
            f"{directory} holds no training state to go on from ({TRAINING_STATE}.json); the run "
            "it comes from needs `save_training_state: true` (in its overrides)"
        )
    agent.load_weights(directory)
    state = load_state(directory, TRAINING_STATE)
    agent.load_training_state(state["agent"])
    buffer.load_online_state(state["buffer"])
