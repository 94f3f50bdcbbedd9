"""Label throughput: the `hf` back end batched vs one frame at a time on the tiny random Qwen2-VL
(built here, as in the tests), and the cost of a cache hit vs a teacher call. Ratios are measured
in the same run.

    python -m benchmarks.label_throughput [--frames 64] [--batch-size 16] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from pipeline.config import CollectConfig, EnvConfig, TeacherConfig
from pipeline.labels.cache import LabelCache
from pipeline.labels.tasks import render_prompt
from pipeline.rollouts.collect import collect
from pipeline.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teachers import make_teacher
from pipeline.teachers.cached import ask_through_cache
from tests.factories import build_tiny_qwen2_vl


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_qwen2_vl(tmp / "tiny-qwen2-vl")
        rollouts = tmp / "rollouts"
        env = EnvConfig(
            image_size=84, action_repeat=4, max_episode_steps=4 * args.frames, include_state=False
        )
        behaviour = CollectConfig(behaviour="random", episodes=1, seed=0, shard_max_samples=10_000)
        collect("CarRacing-v3", env, behaviour, rollouts, progress=False)
        space = load_manifest(rollouts)["action_space"]
        prompts = [
            render_prompt("action", "CarRacing-v3", space, s.frame_png, s.record["context"])
            for s in list(iter_rollouts(rollouts))[: args.frames]
        ]

        def teacher(batch_size):
            hf = {
                "model": str(model),
                "device": args.device,
                "max_new_tokens": args.max_new_tokens,
                "batch_size": batch_size,
            }
            return make_teacher(TeacherConfig(backend="hf", reliability=1.0, seed=0, hf=hf))

        results = {}
        for name, batch_size in (
            ("one at a time", 1),
            (f"batched ({args.batch_size})", args.batch_size),
        ):
            t = teacher(batch_size)
            t.answer(prompts[:2])  # warm-up
            start = time.perf_counter()
            t.answer(prompts)
            results[name] = len(prompts) / (time.perf_counter() - start)

        cache = LabelCache(tmp / "cache")
        t = teacher(1)
        start = time.perf_counter()
        for p in prompts:
            ask_through_cache(cache, t, p)  # misses: a call plus a cache write each
        miss = (time.perf_counter() - start) / len(prompts)
        start = time.perf_counter()
        for p in prompts:
            ask_through_cache(cache, t, p)  # hits
        hit = (time.perf_counter() - start) / len(prompts)

    print(
        f"hf teacher, tiny random Qwen2-VL, {len(prompts)} CarRacing frames at 84x84, device {args.device}"
    )
    base = results["one at a time"]
    for name, fps in results.items():
        print(f"  {name:<16} {fps:8.1f} frames/s   x{fps / base:.2f}")
    print(f"  cache miss (call + write) {miss * 1e3:8.2f} ms/frame")
    print(f"  cache hit                 {hit * 1e3:8.3f} ms/frame   ({miss / hit:.0f}x cheaper)")


if __name__ == "__main__":
    main()
