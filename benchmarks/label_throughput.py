"""Label throughput: the `hf` back end batched vs one frame at a time on the tiny random Qwen2-VL
(built here, as in the tests), and the cost of a cache hit vs a teacher call. Ratios are measured
in the same run.

    python -m benchmarks.label_throughput [--frames 64] [--batch-size 16] [--device cpu]
    python -m benchmarks.label_throughput --executors [--latency 0.2]

`--executors`: the label stage with `executor: local` vs `ray` with 1 and 2 teacher actors on a
local Ray cluster (2 CPUs), with the scripted teacher plus a simulated latency per call (a
stand-in for a VLM server or GPU) and with the tiny hf model; wall time of the whole stage,
actor start-up included, and the ratio to local.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from pipeline.core.config import CollectConfig, EnvConfig, TeacherConfig
from pipeline.teach.labels.cache import LabelCache
from pipeline.teach.labels.tasks import render_prompt
from pipeline.teach.rollouts.collect import collect
from pipeline.teach.rollouts.reader import iter_rollouts, load_manifest
from pipeline.teach.teachers import make_teacher
from pipeline.teach.teachers.cached import ask_through_cache
from tests.factories import build_tiny_qwen2_vl


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--executors", action="store_true", help="local vs ray 1 / 2 actors")
    parser.add_argument("--latency", type=float, default=0.2, help="simulated s per call")
    args = parser.parse_args()
    if args.executors:
        return executors(args)
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


class SlowScripted:
    """The scripted teacher with `latency` seconds per call (a batch), like a remote model."""

    def __init__(self, latency: float) -> None:
        from pipeline.teach.teachers.scripted import ScriptedTeacher

        self.inner, self.latency = ScriptedTeacher(1.0, 0), latency
        self.teacher_id, self.decoding = self.inner.teacher_id, self.inner.decoding

    def answer(self, prompts):
        time.sleep(self.latency)
        return self.inner.answer(prompts)


def executors(args: argparse.Namespace) -> None:
    import ray

    from pipeline.core.config import LabelConfig
    from pipeline.teach.labelling.label import label_rollouts

    ray.init(num_cpus=2, object_store_memory=256 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_qwen2_vl(tmp / "tiny-qwen2-vl")
        rollouts = tmp / "rollouts"
        env = EnvConfig(
            image_size=84, action_repeat=4, max_episode_steps=4 * args.frames, include_state=False
        )
        behaviour = CollectConfig(behaviour="random", episodes=1, seed=0, shard_max_samples=10_000)
        collect("CarRacing-v3", env, behaviour, rollouts, progress=False)
        hf = {"model": str(model), "device": "cpu", "max_new_tokens": args.max_new_tokens,
              "batch_size": args.batch_size}  # fmt: skip
        teachers = {
            f"scripted + {args.latency:.2f} s/call": (
                TeacherConfig(backend="scripted", reliability=1.0, seed=0),
                lambda: SlowScripted(args.latency),
            ),
            "tiny hf Qwen2-VL": (
                TeacherConfig(backend="hf", reliability=1.0, seed=0, hf=hf),
                None,
            ),
        }
        print(f"label stage, {args.frames} CarRacing frames (action task), batch {args.batch_size}")
        for name, (teacher_cfg, build) in teachers.items():
            teacher = build() if build else make_teacher(teacher_cfg)
            times = {}
            for executor, actors in (("local", 0), ("ray", 1), ("ray", 2)):
                cfg = LabelConfig(
                    teacher=teacher_cfg, tasks={"action": 1}, batch_size=args.batch_size,
                    max_transport_failure_rate=0.0, executor=executor,
                    ray={"concurrency": max(actors, 1), "batch_size": args.batch_size,
                         "num_cpus": 1.0},
                )  # fmt: skip
                label = f"{executor} ({actors} actors)" if actors else "local"
                start = time.perf_counter()
                label_rollouts(rollouts, cfg, teacher, tmp / f"cache-{name}-{label}",
                               tmp / "labels.parquet", progress=False, ray_build=build)  # fmt: skip
                times[label] = time.perf_counter() - start
            print(f"  {name}")
            for label, seconds in times.items():
                print(f"    {label:<16} {args.frames / seconds:8.1f} frames/s   "
                      f"x{times['local'] / seconds:.2f} vs local")  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
