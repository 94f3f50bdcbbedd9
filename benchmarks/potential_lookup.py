"""Potential lookup cost per environment step: embedding the frame + the RBF over the prototype
cache + the hysteresis lock, against the cost of the env step itself (MountainCar-v0 with its
84x84 frame), in the same run. Prototypes: the default pipeline's labelled MountainCar frames,
and synthetic caches of growing size.

    python -m benchmarks.potential_lookup [--dataset data/datasets/MountainCar-v0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pipeline.core.config import EnvConfig
from pipeline.core.envs import PIXELS, make_env
from pipeline.learn.shaping.potential import HysteresisPotential
from pipeline.learn.shaping.prototypes import GreyEmbedder, PrototypeCache


def _per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="data/datasets/MountainCar-v0")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()

    env = make_env(
        "MountainCar-v0",
        EnvConfig(image_size=84, action_repeat=1, max_episode_steps=None, include_state=True),
    )
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)

    def step():
        nonlocal obs
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()

    step_s = _per_call(step, args.steps)
    embedder = GreyEmbedder(16)
    frame = obs[PIXELS]
    embed_s = _per_call(lambda: embedder.embed(frame[None]), args.steps)
    embedding = embedder.embed(frame[None])[0]

    real = PrototypeCache.from_dataset(args.dataset, embedder, bandwidth=1.0)
    caches = [(f"default labels ({len(real.potentials)} prototypes)", real)]
    rng = np.random.default_rng(0)
    for n in (1_000, 10_000):
        caches.append(
            (
                f"synthetic, {n} prototypes",
                PrototypeCache(
                    rng.random((n, 256), dtype=np.float32), rng.random(n, dtype=np.float32), 1.0
                ),
            )
        )

    print(f"MountainCar-v0 env step (84x84 frame): {step_s * 1e6:8.0f} us")
    print(f"grey 16x16 embedding:                  {embed_s * 1e6:8.0f} us")
    for name, cache in caches:
        potential = HysteresisPotential(cache)
        lookup_s = _per_call(lambda potential=potential: potential(embedding), args.steps)
        total = embed_s + lookup_s
        print(
            f"{name:<36} RBF + lock {lookup_s * 1e6:7.0f} us; with embedding {total / step_s:5.1%} of a step"
        )
    env.close()


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
