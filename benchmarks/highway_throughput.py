"""What the highway stand-in costs: agent steps/s of `highway-hw` (random actions) by number of
vehicles, with the frame rendered and shrunk to 84x84 as collection does, and without frames
(state-only agents), all measured in one run on this machine.

    python -m benchmarks.highway_throughput --steps 300
"""

from __future__ import annotations

import argparse
import time

from pipeline.core.config import EnvConfig
from pipeline.core.envs import highway, make_env


def steps_per_s(vehicles: int, pixels: bool, steps: int) -> float:
    highway.CONFIG["vehicles_count"] = vehicles
    cfg = EnvConfig(image_size=84, action_repeat=1, max_episode_steps=200, include_state=True)
    env = make_env("highway-hw", cfg, pixels=pixels)
    env.reset(seed=0)
    env.action_space.seed(0)
    started = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - started)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--vehicles", type=int, nargs="+", default=[5, 15, 30])
    args = parser.parse_args()
    default = highway.CONFIG["vehicles_count"]
    print(f"{'vehicles':>9}{'84x84 frames':>15}{'no frames':>12}   (agent steps/s)")
    for n in args.vehicles:
        rates = [steps_per_s(n, pixels, args.steps) for pixels in (True, False)]
        mark = "  <- default" if n == default else ""
        print(f"{n:>9}{rates[0]:>15.1f}{rates[1]:>12.1f}{mark}")
    highway.CONFIG["vehicles_count"] = default


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
