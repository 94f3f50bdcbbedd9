"""CarRacing at action repeat 4: its frames drawn only when seen (`CarRacingFrames`, what
`make_env` builds) against every repeated step's frame drawn (gymnasium's own step), on the same
seeds and actions in one run. It checks that both give the same observations and rewards, then
prints each one's agent steps per second and their ratio.

    python benchmarks/carracing_frames.py                    # 2 episodes of 250 agent steps
    python benchmarks/carracing_frames.py --episodes 1 --steps 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pipeline.core.config import EnvConfig
from pipeline.core.envs import PIXELS, make_env


def episodes(deferred: bool, count: int, steps: int) -> tuple[list[np.ndarray], float]:
    """Every agent step's pixels and reward, and the agent steps per second of stepping alone."""
    cfg = EnvConfig(image_size=84, action_repeat=4, max_episode_steps=None, include_state=True)
    env = make_env("CarRacing-v3", cfg)
    if not deferred:
        env.env.frames = None  # the ActionRepeat under the observation contract
    seen, taken, elapsed = [], 0, 0.0
    for episode in range(count):
        obs, _ = env.reset(seed=episode)
        env.action_space.seed(episode)
        actions = [env.action_space.sample() for _ in range(steps)]
        start = time.perf_counter()
        for action in actions:
            obs, reward, terminated, truncated, _ = env.step(action)
            seen.append((obs[PIXELS], reward))
            taken += 1
            if terminated or truncated:
                break
        elapsed += time.perf_counter() - start
    env.close()
    return seen, taken / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=250, help="agent steps an episode at most")
    args = parser.parse_args(argv)
    every, every_rate = episodes(False, args.episodes, args.steps)
    lean, lean_rate = episodes(True, args.episodes, args.steps)
    same = len(every) == len(lean) and all(
        np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(every, lean, strict=True)
    )
    print(f"CarRacing-v3, action repeat 4, {len(lean)} agent steps over {args.episodes} episode(s)")
    print(f"  every repeated step drawn: {every_rate:7.1f} agent steps/s")
    print(f"  drawn only when seen:      {lean_rate:7.1f} agent steps/s")
    print(f"  ratio: {lean_rate / every_rate:.2f}x; same pixels and rewards: {same}")
    if not same:
        raise SystemExit("the two disagree: CarRacingFrames no longer matches gymnasium's step")


if __name__ == "__main__":
    main()
