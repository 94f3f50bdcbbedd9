"""Online teacher vs cached labels (issue 4): agent training steps/s when the labels come from the
offline dataset (the project's design: the VLM is asked once, offline) against an agent that asks
the teacher while it trains, every 10th agent step, as ERPv's online labelling would (C.4: k = 10).

Agent: ERPv on MountainCarContinuous-v0 state observations, params.yaml's `erpv` section (256-unit
heads, batch 128, half of each batch from the labelled dataset data/datasets/<env>), C_V pre-trained
here for `--critic-steps` steps with pipeline.training.pretrain_critic into a temp dir. Teacher: the
tiny random Qwen2-VL of the tests (tests/factories.py, ~1 M parameters, built here) through the `hf`
back end, asked the `action` prompt about the current 84x84 frame, its answer parsed into a_v and
stored with that step's online transition (ReplayBuffer.add(..., a_v=...)).

train_off_policy has no per-step hook, so every variant runs the minimal loop below, which mirrors
it (act, env.step, buffer.add, then one agent.update(buffer.sample(...)) per step once the
`--start-steps` random warm-up is over); steps/s is measured after the warm-up only:

- cached:       state-only env (no frame rendered), labels from the offline dataset alone;
- render only:  the env renders frames (the teacher would need them), no teacher call;
- online, b=1:  frames rendered, the teacher asked every 10th step about the current frame, one
                call per step (batch of 1, as one online agent would);
- online, 8 envs b=8: 8 envs in lockstep sharing the agent (one act, env step, add and update per
                transition, as above; one replay buffer per env, update i samples env i's buffer),
                every 10th round one teacher call with the 8 current frames.

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

import numpy as np
import torch

from pipeline.agents.erpv import ERPvAgent, VLMCritic
from pipeline.agents.replay import ReplayBuffer
from pipeline.agents.sac import env_obs_shape
from pipeline.config import Params, TeacherConfig, load_params
from pipeline.dataset.transitions import load_offline_transitions
from pipeline.envs import CONTEXT, PIXELS, STATE, make_env
from pipeline.labels.tasks import parse_answer, render_prompt
from pipeline.rollouts.format import action_space_spec
from pipeline.rollouts.writer import encode_png
from pipeline.teachers import make_teacher
from pipeline.training import pretrain_critic
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


def train_loop(
    name: str,
    params: Params,
    critic: VLMCritic,
    offline,
    *,
    n_envs: int,
    pixels: bool,
    teacher,
    ask_every: int,
    steps: int,
    start_steps: int,
    seed: int,
) -> Result:
    """train_off_policy's loop for `n_envs` envs in lockstep, optionally asking `teacher` about
    every env's current frame every `ask_every` rounds (one call, batch of `n_envs`)."""
    hp = params.erpv
    cfg = hp
    env_cfg = params.env[ENV_ID]
    envs = [make_env(ENV_ID, env_cfg, pixels=pixels) for _ in range(n_envs)]
    agent = ERPvAgent.for_env(envs[0], cfg, critic, seed=seed)
    shape = env_obs_shape(envs[0], cfg.network)
    action_dim = int(np.prod(envs[0].action_space.shape))
    buffers = [
        ReplayBuffer(STATE, shape, action_dim, hp.replay_capacity, offline=offline) for _ in envs
    ]
    spec = action_space_spec(envs[0].action_space)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    obs, infos = [], []
    for j, (env, buffer) in enumerate(zip(envs, buffers, strict=True)):
        env.action_space.seed(seed + j)
        o, info = env.reset(seed=seed + j)
        buffer.begin_episode(o[STATE])
        obs.append(o)
        infos.append(info)
    calls = frames = parsed = 0
    call_seconds = 0.0
    start, timed_from = None, 0
    total = 0  # transitions so far, all envs
    for round_ in range(-(-steps // n_envs)):
        if total >= start_steps and start is None:  # the warm-up is over: start the clock
            start, timed_from = time.perf_counter(), total
            calls, frames, parsed, call_seconds = 0, 0, 0, 0.0
        a_v: list[np.ndarray | None] = [None] * n_envs
        if teacher is not None and round_ % ask_every == 0:
            t0 = time.perf_counter()
            prompts = [
                render_prompt("action", ENV_ID, spec, encode_png(o[PIXELS]), info[CONTEXT])
                for o, info in zip(obs, infos, strict=True)
            ]
            replies = teacher.answer(prompts)
            for j, reply in enumerate(replies):
                value = parse_answer("action", reply.text, ENV_ID, spec).value
                if value is not None:
                    a_v[j] = np.asarray(value, np.float32).reshape(action_dim)
                    parsed += 1
            call_seconds += time.perf_counter() - t0
            calls += 1
            frames += len(prompts)
        for j, (env, buffer) in enumerate(zip(envs, buffers, strict=True)):
            warm_up = total + j < start_steps
            action = env.action_space.sample() if warm_up else agent.act(obs[j][STATE])
            o, reward, terminated, truncated, info = env.step(action)
            buffer.add(action, float(reward), o[STATE], bool(terminated), a_v=a_v[j])
            if terminated or truncated:
                o, info = env.reset()
                buffer.begin_episode(o[STATE])
            obs[j], infos[j] = o, info
        for j in range(n_envs):
            total += 1
            if total >= start_steps:
                agent.update(buffers[j].sample(cfg.batch_size, hp.offline_fraction, rng))
    elapsed = time.perf_counter() - start if start is not None else float("nan")
    for env in envs:
        env.close()
    return Result(name, total - timed_from, elapsed, calls, frames, call_seconds, parsed)


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
    parser.add_argument("--envs", type=int, default=8, help="envs of the batched variant; 0: skip")
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
    assert params.erpv is not None and params.critic is not None
    params = params.model_copy(
        update={"critic": params.critic.model_copy(update={"steps": args.critic_steps})}
    )
    dataset = Path(args.dataset)
    offline = load_offline_transitions(dataset, STATE)

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

        common = dict(
            ask_every=args.ask_every,
            steps=args.steps,
            start_steps=args.start_steps,
            seed=args.seed,
        )
        variants = [
            ("cached", dict(n_envs=1, pixels=False, teacher=None)),
            ("render only", dict(n_envs=1, pixels=True, teacher=None)),
            ("online, b=1", dict(n_envs=1, pixels=True, teacher=teacher(1))),
        ]
        if args.envs > 1:
            name = f"online, {args.envs} envs b={args.envs}"
            variants.append((name, dict(n_envs=args.envs, pixels=True, teacher=teacher(args.envs))))
        results = []
        for name, kw in variants:
            results.append(train_loop(name, params, critic, offline, **kw, **common))
            r = results[-1]
            print(f"  ... {name}: {r.steps_per_s:.1f} steps/s", flush=True)

    cached, render = results[0], results[1]
    t_render = 1.0 / render.steps_per_s
    print(
        f"\nERPv on {ENV_ID} (state obs, params.yaml `erpv`: hidden "
        f"{params.erpv.network.hidden_dim}, batch {params.erpv.batch_size}, offline fraction "
        f"{params.erpv.offline_fraction}), C_V pre-trained {args.critic_steps} steps; "
        f"{args.steps} agent steps per variant, {args.start_steps} warm-up (untimed), "
        f"{cached.steps} timed; torch threads {args.threads}"
    )
    print(
        f"teacher: tiny random Qwen2-VL (hf back end, cpu, max_new_tokens {args.max_new_tokens}), "
        f"`action` prompt every {args.ask_every}th step"
    )
    print(
        f"  {'variant':<24}{'steps/s':>9}{'cached/x':>10}{'calls':>7}{'frames':>8}"
        f"{'parsed':>8}{'ms/call':>9}{'teacher share':>15}"
    )
    for r in results:
        ms = f"{1e3 * r.call_seconds / r.calls:9.1f}" if r.calls else f"{'-':>9}"
        share = f"{r.call_seconds / r.seconds:14.0%}" if r.calls else f"{'-':>14}"
        print(
            f"  {r.name:<24}{r.steps_per_s:9.1f}{cached.steps_per_s / r.steps_per_s:9.2f}x"
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
    print("extrapolation, a real VLM of L s/call (batch 1):")
    for label, seconds in (("~0.1 s/call (GPU)", 0.1), ("1 s/call", 1.0)):
        sps = 1.0 / (t_render + seconds / args.ask_every)
        print(f"  {label:<18} {sps:7.2f} steps/s   cached/online x{cached.steps_per_s / sps:.1f}")


if __name__ == "__main__":
    main()
