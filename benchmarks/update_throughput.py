"""Gradient updates per second: our SAC (pipeline.learn.agents.sac) against Stable-Baselines3's SAC with
the same hidden sizes and batch size, on Pendulum-v1 states, measured in the same run. Each update
includes sampling its batch from a replay buffer of random transitions.

Rows:
- ours, matched to SB3's work per update: actor, alpha and targets every update, no DeepMDP
  auxiliary losses (our agent still has its state encoder: Linear + LayerNorm + tanh to 50);
- ours as ERPv trains it: table 6's schedule (actor and targets every 2nd update) with the
  DeepMDP transition + reward losses;
- ours with ERPv's guidance (VPG + VER) on batches whose rows all carry a label;
- SB3 SAC (`model.train(gradient_steps, batch_size)`), net_arch [hidden, hidden].

Stable-Baselines3 is a benchmark-only dependency: `.venv/bin/pip install stable-baselines3`.

    python -m benchmarks.update_throughput [--hidden 256] [--batch 128] [--updates 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from pipeline.dataset.transitions import OfflineTransitions, action_label_specs
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.erpv import ERPvAgent, ERPvParams, VLMCritic

ENV_ID = "Pendulum-v1"


def _random_steps(n: int, seed: int) -> list[tuple]:
    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    steps = []
    for _ in range(n):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        steps.append((obs, action, float(reward), next_obs, terminated, truncated))
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return steps


def _labelled_offline(steps: list[tuple]) -> OfflineTransitions:
    """The same random steps as a dataset whose every sample carries a VLM label."""
    obs = np.asarray([s[0] for s in steps] + [steps[-1][3]], np.float32)  # consecutive enough
    n = len(steps)
    labels = np.clip(-obs[:, 2:3], -2, 2).astype(np.float32)  # any label will do for timing
    fields = {
        "a_v": labels[:n], "has_label": np.ones(n, bool),
        "next_a_v": labels[1:], "has_next_label": np.ones(n, bool),
    }  # fmt: skip
    return OfflineTransitions(
        obs=obs, episode_start=np.zeros(n + 1, np.int64), obs_index=np.arange(n),
        action=np.asarray([s[1] for s in steps], np.float32),
        reward=np.asarray([s[2] for s in steps], np.float32),
        terminated=np.zeros(n, bool), specs=action_label_specs(1), fields=fields,
    )  # fmt: skip


def _rate(run: Callable[[int], None], updates: int, repeats: int) -> float:
    run(20)  # warm up (allocator, lazy init)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run(updates)
        best = max(best, updates / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=256, help="hidden units of every MLP")
    parser.add_argument("--batch", type=int, default=128, help="batch size (ERPv table 6: 128)")
    parser.add_argument("--updates", type=int, default=500, help="updates per timed pass")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many passes")
    parser.add_argument("--buffer", type=int, default=10_000, help="random transitions stored")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    args = parser.parse_args()
    try:
        from stable_baselines3 import SAC
        from stable_baselines3.common.logger import configure
    except ImportError as exc:
        raise SystemExit(
            "this benchmark compares with Stable-Baselines3: .venv/bin/pip install stable-baselines3"
        ) from exc
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    steps = _random_steps(args.buffer, seed=0)
    env = gym.make(ENV_ID)
    space = env.action_space
    rng = np.random.default_rng(0)

    def ours(cfg: SACParams, agent: SACAgent | None = None, offline: float = 0.0):
        agent = agent or SACAgent((3,), space, cfg, device=args.device)
        buffer = ReplayBuffer(
            "state", (3,), 1, args.buffer + 1000,
            offline=_labelled_offline(steps) if offline else None, offline_fraction=offline,
            device=agent.device,
        )  # fmt: skip
        for i, (obs, action, reward, next_obs, terminated, _) in enumerate(steps):
            if i == 0 or steps[i - 1][4] or steps[i - 1][5]:
                buffer.begin_episode(obs)
            buffer.add(action, reward, next_obs, terminated)

        def run(n: int) -> None:
            for _ in range(n):
                agent.update(buffer.sample(cfg.batch_size, rng))

        return run

    network = NetworkParams(obs="state", hidden_dim=args.hidden)
    matched = SACParams(
        network=network, batch_size=args.batch, actor_update_freq=1, target_update_freq=1,
        aux_weight=0.0,
    )  # fmt: skip
    erpv_schedule = ERPvParams(network=network, batch_size=args.batch)
    critic = VLMCritic((3,), space.low, space.high, network).freeze()
    erpv_agent = ERPvAgent((3,), space, erpv_schedule, critic, device=args.device)

    sb3 = SAC(
        "MlpPolicy", env, batch_size=args.batch, buffer_size=args.buffer + 1000,
        learning_starts=0, policy_kwargs={"net_arch": [args.hidden, args.hidden]},
        device=args.device, seed=0,
    )  # fmt: skip
    sb3.set_logger(configure(folder=None, format_strings=[]))
    for obs, action, reward, next_obs, terminated, truncated in steps:
        sb3.replay_buffer.add(
            obs[None], next_obs[None], action[None], np.array([reward]),
            np.array([terminated]), [{"TimeLimit.truncated": truncated}],
        )  # fmt: skip

    def sb3_run(n: int) -> None:
        sb3.train(gradient_steps=n, batch_size=args.batch)

    rows = [
        ("ours, SB3's work per update (no aux)", ours(matched)),
        ("ours, table 6 schedule + DeepMDP aux", ours(erpv_schedule)),
        ("ours, ERPv (VPG + VER, all labelled)", ours(erpv_schedule, erpv_agent, offline=1.0)),
        ("Stable-Baselines3 SAC", sb3_run),
    ]
    # interleave the measurements so that a busy neighbour slows them alike
    rates = {name: 0.0 for name, _ in rows}
    for _ in range(args.repeats):
        for name, run in rows:
            rates[name] = max(rates[name], _rate(run, args.updates, 1))
    print(
        f"{ENV_ID} states, hidden {args.hidden}x2, batch {args.batch}, device {args.device}, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )
    sb3_rate = rates["Stable-Baselines3 SAC"]
    for name, _ in rows:
        print(f"{name:<40} {rates[name]:8.0f} updates/s  {rates[name] / sb3_rate:5.2f}x SB3")
    env.close()


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
