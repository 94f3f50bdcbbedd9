"""What the highway stand-in costs: agent steps/s of `highway-hw` (random actions) by number of
vehicles, with the frame rendered and shrunk to 84x84 as collection does, and without frames
(state-only agents), all measured in one run on this machine. `--observation` adds the rows of
HighwayEnv's default observation (a Kinematics table of 5 vehicles, which the pipeline never
reads) beside the stand-in's (the ego's presence alone).

    python -m benchmarks.highway_throughput --steps 300 [--observation]
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
    parser.add_argument(
        "--observation", action="store_true",
        help="also time HighwayEnv's default observation, and print the ratios",
    )  # fmt: skip
    args = parser.parse_args()
    default, ours = highway.CONFIG["vehicles_count"], highway.CONFIG["observation"]
    kinds = {"stand-in's": ours} | ({"Kinematics x5": {"type": "Kinematics"}}
                                    if args.observation else {})  # fmt: skip
    print(f"{'vehicles':>9}{'observation':>15}{'84x84 frames':>15}{'no frames':>12}"
          "   (agent steps/s)")  # fmt: skip
    for n in args.vehicles:
        rates = {}
        for kind, observation in kinds.items():
            highway.CONFIG["observation"] = observation
            rates[kind] = [steps_per_s(n, pixels, args.steps) for pixels in (True, False)]
            mark = "  <- default" if n == default and kind == "stand-in's" else ""
            print(f"{n:>9}{kind:>15}{rates[kind][0]:>15.1f}{rates[kind][1]:>12.1f}{mark}")
        if len(rates) == 2:
            ratio = [a / b for a, b in zip(*rates.values(), strict=True)]
            print(f"{'':>9}{'ratio':>15}{ratio[0]:>14.2f}x{ratio[1]:>11.2f}x")
    highway.CONFIG["vehicles_count"], highway.CONFIG["observation"] = default, ours


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
