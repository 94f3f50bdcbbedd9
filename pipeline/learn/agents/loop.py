"""The SAC family's one training loop: act, store the step in the replay buffer, update, log, save
the resume state. How a batch is drawn (offline fraction, Semore's selective pool) is the
buffer's, fixed at its construction; the loop settings are the agent's config's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from pipeline.core.stacking import FrameStacker
from pipeline.learn.agents.off_policy import OffPolicyAgent
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.agents.resume import Resume


def episode_reset_seed(seed: int, episode: int) -> int:
    """Episode i's reset seed depends on (run seed, i) alone, so a run resumed at an episode
    boundary needs no env state: episode 0 uses the run seed itself."""
    if episode == 0:
        return seed
    return int(np.random.SeedSequence([seed, episode]).generate_state(1)[0])


def _mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per-key means; a key counts over the rows that have it (actor metrics every 2nd update)."""
    keys = {k for row in rows for k in row}
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in sorted(keys)}


def train_off_policy(
    env: gym.Env,
    agent: OffPolicyAgent,
    buffer: ReplayBuffer,
    steps: int,
    seed: int,
    *,
    eval_fn: Callable[[OffPolicyAgent], dict[str, float]] | None = None,
    progress: bool = True,
    resume: Resume | None = None,
    act_from_start: bool = False,
) -> tuple[list[tuple[int, float]], list[dict[str, float]]]:
    """Interact for `steps` agent steps with an env of the pipeline's observation contract,
    storing every step in `buffer`'s online part, and train `agent` on batches that the buffer
    draws (its offline fraction and sampler). The loop settings are the agent's config's:

    - The first `start_steps` actions are uniform random and no update is made (table 6: 1,000
      warm-up steps); after that, every `update_every` steps, `update_every` updates (one per
      step), each on a batch of `batch_size`. With `act_from_start` (a warm-started agent: a
      labelling round) the agent acts from the first step, and updates begin as soon as the
      ring holds `batch_size` online steps (at once when its replay was restored).
    - Every `log_every` steps, and at the last step, a row of metrics (means over the updates
      since the last row, plus `eval_fn(agent)` when given) is appended, keyed also by `step`;
      the guidance's costly diagnostics come from the row's first actor step alone:
      a run's last row describes the agent it returns, whatever the budget. `eval_fn` must play in an
      env of its own: resetting `env` would cut the training episode short.
    - With `resume`, the whole loop state (agent and optimisers, the buffer's online part, every
      RNG, counters, curve and rows so far) is saved at the first episode end after every
      `resume.every` steps, and a run that finds a saved state goes on from it: the result is
      the uninterrupted run's, bit for bit (each episode's reset is seeded from (seed, i)).
    Returns (step, return) of every finished episode and the metric rows.
    """
    cfg = agent.cfg
    kind = cfg.network.obs
    if buffer.kind != kind:
        raise ValueError(
            f"the agent reads {kind!r} observations, the buffer stores {buffer.kind!r}"
        )
    if steps < 0:
        raise ValueError(f"need steps >= 0, got {steps}")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    stacker = FrameStacker(cfg.network.frame_stack, kind)
    episode, first, last_saved = 0, 0, 0
    curve: list[tuple[int, float]] = []
    logs: list[dict[str, float]] = []
    window: list[dict[str, float]] = []
    state = resume.load() if resume is not None else None
    if state is not None:  # go on where the saved run stopped: at the start of an episode
        agent.load_training_state(state["agent"])
        buffer.load_online_state(state["buffer"])
        rng.bit_generator.state = state["rng"]
        env.action_space.np_random.bit_generator.state = state["action_space_rng"]
        torch.set_rng_state(state["torch_rng"])
        episode, first, last_saved = state["episode"], state["step"], state["step"]
        curve, logs, window = state["curve"], state["logs"], state["window"]
    obs, _ = env.reset(seed=episode_reset_seed(seed, episode))
    x = stacker.reset(obs[kind])
    if state is None:
        buffer.begin_episode(obs[kind])
    episode_return = 0.0
    # a warm-started agent needs no warm-up: its updates begin once the ring holds a batch's
    # worth of online steps (at once when its replay was restored)
    first_update = (
        min(cfg.start_steps, max(0, cfg.batch_size - buffer.online_size))
        if act_from_start
        else cfg.start_steps
    )
    bar = tqdm(range(first, steps), desc="train", unit="step", disable=not progress)
    for step in bar:
        explore = step < cfg.start_steps and not act_from_start
        action = env.action_space.sample() if explore else agent.act(x)
        obs, reward, terminated, truncated, _ = env.step(action)
        buffer.add(action, float(reward), obs[kind], bool(terminated))  # truncation is not done
        x = stacker.step(obs[kind])
        episode_return += float(reward)
        if terminated or truncated:
            curve.append((step + 1, episode_return))
            bar.set_postfix(episode_return=f"{episode_return:.1f}")
            episode += 1
            obs, _ = env.reset(seed=episode_reset_seed(seed, episode))
            x = stacker.reset(obs[kind])
            buffer.begin_episode(obs[kind])
            episode_return = 0.0
        if step + 1 >= first_update and (step + 1) % cfg.update_every == 0:
            for _ in range(cfg.update_every):
                batch = buffer.sample(cfg.batch_size, rng, update=agent.update_step)
                window.append(agent.update(batch))
        if (step + 1) % cfg.log_every == 0 or step + 1 == steps:
            row = {"step": float(step + 1), **_mean_rows(window)}
            window = []
            if eval_fn is not None:
                row |= eval_fn(agent)
            logs.append(row)
            agent.diagnostics_due = True  # the next row's diagnostics: one actor step's
        if (
            resume is not None
            and (terminated or truncated)
            and step + 1 - last_saved >= resume.every
            and step + 1 < steps
        ):
            last_saved = step + 1
            resume.save(
                _loop_state(step + 1, episode, agent, buffer, rng, env, curve, logs, window)
            )
    bar.close()
    if resume is not None and resume.keep_final and last_saved < steps:
        # the finished run's state: run again (a killed experiment's finished labelling round),
        # it loads this and trains no step
        resume.save(_loop_state(steps, episode, agent, buffer, rng, env, curve, logs, window))
    return curve, logs


def _loop_state(step, episode, agent, buffer, rng, env, curve, logs, window) -> dict[str, Any]:
    """What a resume state holds: everything the loop goes on from at `step`."""
    return {
        "step": step,
        "episode": episode,
        "agent": agent.training_state(),
        "buffer": buffer.online_state(),
        "rng": rng.bit_generator.state,
        "action_space_rng": env.action_space.np_random.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "curve": curve,
        "logs": logs,
        "window": window,
    }
