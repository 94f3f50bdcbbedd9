"""Online teacher vs cached labels (issue 4): agent training steps/s when the labels come from the
offline dataset (the project's design: the VLM is asked once, offline) against an agent that asks
the teacher while it trains, every 10th agent step, as ERPv's online labelling would (C.4: k = 10).

Agent: ERPv on MountainCarContinuous-v0 state observations, params.yaml's `erpv` section (256-unit
heads, batch 128, half of each batch from the labelled dataset data/datasets/<env>), C_V pre-trained
here for `--critic-steps` steps with pipeline.learn.methods.erpv.pretrain_critic into a temp dir.
Teacher: the tiny random Qwen2-VL of the tests (tests/factories.py, ~1 M parameters, built here)
through the `hf` back end, asked the `action` prompt about the frame the agent acts from, its
answer parsed into a_v and stored with that step's online transition (`a_v`, `has_label`).

Every variant trains with the library's loop, pipeline.learn.agents.loop.train_off_policy (act,
env.step, buffer.add, one update per step once the `--start-steps` random warm-up is over). The
teacher sits in two pieces of this module, not in the library: an env wrapper (`AskTeacher`) that
asks it every k-th step about the current frame, and a replay buffer (`LabelledOnline`) whose
`add` stores that answer with the transition. steps/s is measured after the warm-up only:

- cached:       state-only env (no frame rendered), labels from the offline dataset alone;
- render only:  the env renders frames (the teacher would need them), no teacher call;
- online, b=1:  frames rendered, the teacher asked every 10th step about the current frame, one
                call per step (batch of 1, as one online agent would).

Batched online labelling (`--envs` N envs in lockstep sharing one teacher call of N frames every
10th round) has no counterpart in the library's single-env loop, so it is not trained: its row is
the model below with a measured N-frame call latency (`--batch-calls` calls). The b=1 row checks
the model against a measured run.

The tiny model's latency is a floor: a real VLM takes seconds per call on CPU (~0.1-1 s on a GPU),
so the printed extrapolation (render-only step time + L / 10 per step, for L = 0.1 s and 1 s per
call) is what online labelling would cost.

    python -m benchmarks.online_vs_cached [--steps 1500] [--start-steps 500] [--critic-steps 200] \
        [--ask-every 10] [--max-new-tokens 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pipeline.core.config import TeacherConfig, load_params
from pipeline.core.envs import CONTEXT, PIXELS, STATE, make_env
from pipeline.dataset.transitions import OfflineTransitions, load_offline_transitions
from pipeline.learn.agents.loop import train_off_policy
from pipeline.learn.agents.off_policy import env_obs_shape
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.critic import pretrain_critic
from pipeline.learn.methods.erpv import ERPvAgent, ERPvParams, VLMCritic
from pipeline.learn.methods.table import get_method
from pipeline.teach.labels.tasks import parse_answer, render_prompt
from pipeline.teach.rollouts.format import action_space_spec
from pipeline.teach.rollouts.writer import encode_png
from pipeline.teach.teachers import make_teacher
from tests.factories import build_tiny_qwen2_vl

ENV_ID = "MountainCarContinuous-v0"


@dataclass
class Result:
    name: str
    steps: int  # timed transitions (after the warm-up)
    seconds: float
    calls: int  # teacher calls in the timed window
    frames: int  # frames asked about in the timed window
    call_seconds: float  # wall time of those calls (prompt + generate + parse)
    parsed: int  # answers parsed into an a_v (random weights: mostly unparseable)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


def ask(teacher: Any, frames: list[tuple[np.ndarray, dict]], spec: dict) -> list[np.ndarray | None]:
    """The teacher's `action` answers about (frame, context) pairs, in one call, parsed."""
    prompts = [render_prompt("action", ENV_ID, spec, encode_png(f), ctx) for f, ctx in frames]
    out: list[np.ndarray | None] = []
    for reply in teacher.answer(prompts):
        value = parse_answer("action", reply.text, ENV_ID, spec).value
        out.append(None if value is None else np.asarray(value, np.float32).ravel())
    return out


class AskTeacher(gym.Wrapper):
    """Asks `teacher` about the frame the agent acts from at every `ask_every`-th step and keeps
    the parsed a_v in `pending` (None on the other steps); times the steps from `timed_from` on
    and counts the calls made in that window."""

    def __init__(self, env: gym.Env, teacher: Any, ask_every: int, timed_from: int) -> None:
        super().__init__(env)
        self.teacher, self.ask_every, self.timed_from = teacher, ask_every, timed_from
        self.space_spec = action_space_spec(env.action_space)
        self.pending: np.ndarray | None = None
        self.step_index = 0
        self.started: float | None = None
        self.calls = self.frames = self.parsed = 0
        self.call_seconds = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self.obs, self.info = self.env.reset(**kwargs)
        return self.obs, self.info

    def step(self, action: Any) -> Any:
        if self.step_index == self.timed_from:  # the warm-up is over: start the clock
            self.started = time.perf_counter()
            self.calls = self.frames = self.parsed = 0
            self.call_seconds = 0.0
        self.pending = None
        if self.teacher is not None and self.step_index % self.ask_every == 0:
            t0 = time.perf_counter()
            (self.pending,) = ask(
                self.teacher, [(self.obs[PIXELS], self.info[CONTEXT])], self.space_spec
            )
            self.call_seconds += time.perf_counter() - t0
            self.calls += 1
            self.frames += 1
            self.parsed += self.pending is not None
        self.obs, reward, terminated, truncated, self.info = self.env.step(action)
        self.step_index += 1
        return self.obs, reward, terminated, truncated, self.info


class LabelledOnline(ReplayBuffer):
    """A replay buffer whose online transitions carry the a_v that `source` got for them."""

    def __init__(self, *args: Any, source: AskTeacher, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source = source

    def add(self, action, reward, next_obs, terminated, **values: Any) -> None:
        if self.source.pending is not None:
            values |= {"a_v": self.source.pending, "has_label": True}
        super().add(action, reward, next_obs, terminated, **values)


def train_variant(
    name: str,
    hp: ERPvParams,
    env_cfg: Any,
    critic: VLMCritic,
    offline: OfflineTransitions,
    *,
    pixels: bool,
    teacher: Any,
    ask_every: int,
    steps: int,
    seed: int,
) -> Result:
    """ERPv trained by train_off_policy for `steps` steps, the teacher asked as AskTeacher does."""
    env = AskTeacher(make_env(ENV_ID, env_cfg, pixels=pixels), teacher, ask_every, hp.start_steps)
    agent = ERPvAgent.for_env(env, hp, vlm_critic=critic, seed=seed)
    buffer = LabelledOnline(
        STATE,
        env_obs_shape(env, hp.network),
        int(np.prod(env.action_space.shape)),
        hp.replay_capacity,
        frame_stack=hp.network.frame_stack,
        offline=offline,
        offline_fraction=hp.offline_fraction,
        source=env,
    )
    try:
        train_off_policy(env, agent, buffer, steps, seed, progress=False)
        elapsed = time.perf_counter() - env.started if env.started is not None else float("nan")
    finally:
        env.close()
    return Result(
        name,
        steps - hp.start_steps,
        elapsed,
        env.calls,
        env.frames,
        env.call_seconds,
        env.parsed,
    )


def batch_latency(teacher: Any, env_cfg: Any, n: int, calls: int) -> Result:
    """`calls` teacher calls of `n` frames each (n envs' current frames), timed."""
    envs = [make_env(ENV_ID, env_cfg, pixels=True) for _ in range(n)]
    frames = []
    for j, env in enumerate(envs):
        obs, info = env.reset(seed=j)
        frames.append((obs[PIXELS], info[CONTEXT]))
    spec = action_space_spec(envs[0].action_space)
    for env in envs:
        env.close()
    parsed, started = 0, time.perf_counter()
    for _ in range(calls):
        parsed += sum(v is not None for v in ask(teacher, frames, spec))
    seconds = time.perf_counter() - started
    return Result(f"online, {n} envs b={n} (model)", 0, seconds, calls, calls * n, seconds, parsed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--dataset", default=f"data/datasets/{ENV_ID}")
    parser.add_argument("--steps", type=int, default=1500, help="agent steps per variant")
    parser.add_argument("--start-steps", type=int, default=500, help="random warm-up, untimed")
    parser.add_argument("--critic-steps", type=int, default=200, help="C_V pre-training steps")
    parser.add_argument("--ask-every", type=int, default=10, help="teacher call every k steps")
    parser.add_argument("--envs", type=int, default=8, help="frames of the batched call; 0: skip")
    parser.add_argument("--batch-calls", type=int, default=10, help="timed calls of the batch")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU is shared)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.steps <= args.start_steps:
        parser.error("--steps must exceed --start-steps (only steps after the warm-up are timed)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    params = load_params(args.params)
    assert params.critic is not None, "params.yaml needs a `critic` section"
    params = params.model_copy(
        update={"critic": params.critic.model_copy(update={"steps": args.critic_steps})}
    )
    hp = get_method("erpv").params(params).model_copy(update={"start_steps": args.start_steps})
    env_cfg = params.env[ENV_ID]
    dataset = Path(args.dataset)
    offline = load_offline_transitions(dataset, STATE, labels=("action",))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pretrain_critic(ENV_ID, params, dataset, tmp / "critic", progress=False)
        critic = VLMCritic.load(tmp / "critic")
        model = build_tiny_qwen2_vl(tmp / "tiny-qwen2-vl")

        def teacher(batch_size: int):
            hf = {
                "model": str(model),
                "device": "cpu",
                "max_new_tokens": args.max_new_tokens,
                "batch_size": batch_size,
            }
            return make_teacher(TeacherConfig(backend="hf", reliability=1.0, seed=0, hf=hf))

        common = dict(ask_every=args.ask_every, steps=args.steps, seed=args.seed)
        variants = [
            ("cached", dict(pixels=False, teacher=None)),
            ("render only", dict(pixels=True, teacher=None)),
            ("online, b=1", dict(pixels=True, teacher=teacher(1))),
        ]
        results = []
        for name, kw in variants:
            results.append(train_variant(name, hp, env_cfg, critic, offline, **kw, **common))
            print(f"  ... {name}: {results[-1].steps_per_s:.1f} steps/s", flush=True)
        batched = None
        if args.envs > 1:
            batched = batch_latency(teacher(args.envs), env_cfg, args.envs, args.batch_calls)

    cached, render = results[0], results[1]
    t_render = 1.0 / render.steps_per_s
    if batched is not None:  # the model: render-only step time + L_b / (b k) per transition
        per_step = t_render + batched.call_seconds / batched.calls / (args.envs * args.ask_every)
        batched.steps = cached.steps
        batched.seconds = per_step * batched.steps
        results.append(batched)
    print(
        f"\nERPv on {ENV_ID} (state obs, params.yaml `erpv`: hidden "
        f"{hp.network.hidden_dim}, batch {hp.batch_size}, offline fraction "
        f"{hp.offline_fraction}), C_V pre-trained {args.critic_steps} steps; "
        f"{args.steps} agent steps per variant, {args.start_steps} warm-up (untimed), "
        f"{cached.steps} timed; torch threads {args.threads}; library loop (train_off_policy)"
    )
    print(
        f"teacher: tiny random Qwen2-VL (hf back end, cpu, max_new_tokens {args.max_new_tokens}), "
        f"`action` prompt every {args.ask_every}th step"
    )
    print(
        f"  {'variant':<28}{'steps/s':>9}{'cached/x':>10}{'calls':>7}{'frames':>8}"
        f"{'parsed':>8}{'ms/call':>9}{'teacher share':>15}"
    )
    for r in results:
        ms = f"{1e3 * r.call_seconds / r.calls:9.1f}" if r.calls else f"{'-':>9}"
        if r is batched:
            share_s = batched.call_seconds / batched.calls / (args.envs * args.ask_every)
            share = f"{share_s * r.steps_per_s:14.0%}"
        else:
            share = f"{r.call_seconds / r.seconds:14.0%}" if r.calls else f"{'-':>14}"
        print(
            f"  {r.name:<28}{r.steps_per_s:9.1f}{cached.steps_per_s / r.steps_per_s:9.2f}x"
            f"{r.calls:7d}{r.frames:8d}{r.parsed:8d}{ms} {share}"
        )
    online = results[2]
    latency = online.call_seconds / online.calls if online.calls else float("nan")
    print(
        f"tiny model: {1e3 * latency:.1f} ms per call (prompt + generate + parse, batch 1); "
        f"frame rendering alone costs x{cached.steps_per_s / render.steps_per_s:.2f}"
    )
    check = 1.0 / (t_render + latency / args.ask_every)
    print(
        f"model of the online cost: render-only step time + L / {args.ask_every} per step; with "
        f"the tiny model's L it predicts {check:.1f} steps/s (measured {online.steps_per_s:.1f})"
    )
    if batched is not None:
        print(
            f"batched row: the model with L = the measured {args.envs}-frame call latency over "
            f"{args.envs} x {args.ask_every} transitions (the library's loop drives one env)"
        )
    print("extrapolation, a real VLM of L s/call (batch 1):")
    for label, seconds in (("~0.1 s/call (GPU)", 0.1), ("1 s/call", 1.0)):
        sps = 1.0 / (t_render + seconds / args.ask_every)
        print(f"  {label:<18} {sps:7.2f} steps/s   cached/online x{cached.steps_per_s / sps:.1f}")


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
