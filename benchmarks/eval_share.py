"""What a pixel table's periodic evaluation costs beside its updates, measured in one process:
one deterministic evaluation episode of a DrQ-network agent (64x64 frames, 3 stacked, hidden
1024) in the real env, and one update on a replay of random frames (benchmarks.pixel_throughput's
row `ours: sac + DeepMDP` without the shift), then each table's schedule:

- P1 (benchmarks/tables/frames_mcc.yaml): MountainCarContinuous-v0, 999-step episodes, 5,000
  agent steps, 1,000 of them random, one evaluation episode every 500 steps;
- P2 (benchmarks/tables/frames_cartpole.yaml): cartpole-swingup at action repeat 8, 125-step
  episodes, 12,000 agent steps, two evaluation episodes every 1,000 steps.

    PYTHONPATH=. python -m benchmarks.eval_share
"""

from __future__ import annotations

import time

import torch

from benchmarks import pixel_throughput as pt
from pipeline.core.config import EnvConfig
from pipeline.core.envs import make_env
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.evaluation import deployed, play_episodes

# env, action repeat, agent steps, random steps, log_every, evaluation episodes per row
SCHEDULES = (
    ("MountainCarContinuous-v0", 1, 5000, 1000, 500, 1),
    ("cartpole-swingup", 8, 12000, 1000, 1000, 2),
)


def main() -> None:
    torch.set_num_threads(1)
    for env_id, repeat, steps, random_steps, log_every, per_row in SCHEDULES:
        env = make_env(env_id, EnvConfig(image_size=64, action_repeat=repeat,
                                         max_episode_steps=None, include_state=True))  # fmt: skip
        template, _ = pt.our_agent("sac", (64, 1, 1024), 128, "cpu")
        agent = SACAgent((64, 64, 3), env.action_space, template.cfg.model_copy(
            update={"image_pad": 0}))  # fmt: skip
        start = time.perf_counter()
        play_episodes(env, deployed(agent), 1, seed=0)
        episode_s = time.perf_counter() - start
        frames, starts = pt.random_frames(1024, 64, seed=0)
        update = pt.ours(agent, frames, starts, None, 0.0)
        for _ in range(3):
            update()
        start = time.perf_counter()
        for _ in range(6):
            update()
        update_s = (time.perf_counter() - start) / 6
        evaluations = steps // log_every * per_row
        eval_s, train_s = evaluations * episode_s, (steps - random_steps) * update_s
        print(f"{env_id}: one evaluation episode {episode_s:.1f} s, one update {update_s:.3f} s; "
              f"{evaluations} evaluation episodes {eval_s:.0f} s beside "
              f"{steps - random_steps} updates {train_s:.0f} s: "
              f"{eval_s / (eval_s + train_s):.1%} of the run")  # fmt: skip


if __name__ == "__main__":
    main()
