"""Stage two's `evaluate`: the trained agent alone, as at deployment (no teacher, no prototype
cache, no shaping): deterministic actions over N episodes on the env's native reward. What every
agent offers at deployment is `Agent`; `pipeline.learn.methods.table.load_agent` rebuilds any saved one.
`Recorder` keeps the frames of the first episodes, `encode_gif` makes each a GIF."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np
from PIL import Image
from tqdm import tqdm

from pipeline.core.config import EnvConfig
from pipeline.core.envs import PIXELS, env_info, make_env
from pipeline.core.envs.wrappers import resize_frame
from pipeline.core.errors import PipelineError
from pipeline.core.io import atomic_write_bytes
from pipeline.core.stacking import FrameStacker


class EvaluationError(PipelineError, ValueError):
    """An agent cannot be evaluated on the env asked for; the message says why and the fix."""


class Agent(Protocol):
    """What every agent offers at deployment. `act` takes the agent's input for one step: the
    `obs_kind` entry of the env's observation dict, stacked over `frame_stack` frames
    (`pipeline.core.stacking.FrameStacker`)."""

    obs_kind: str
    frame_stack: int

    def act(self, obs: np.ndarray, deterministic: bool = False) -> Any: ...

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None: ...


@dataclass(frozen=True)
class Policy:
    """A deterministic policy over the pipeline's observation dict, and what it reads.
    `begin` is called with each episode's first observation (frame stacks restart there)."""

    act: Callable[[dict[str, np.ndarray]], Any]
    obs: str  # "state" or "pixels": the env is built to render frames only when needed
    meta: dict[str, Any]
    begin: Callable[[dict[str, np.ndarray]], None] = lambda obs: None


def deployed(
    agent: Agent, meta: dict[str, Any] | None = None, *, deterministic: bool = True
) -> Policy:
    """An agent as a policy over the env's observation dict (frames stacked as in training,
    restarting at each episode's first observation): deterministic, as deployed, or sampling
    from the agent's policy (a labelling round's collection)."""
    stacker = FrameStacker(agent.frame_stack, agent.obs_kind)
    fresh = [True]  # the next observation starts an episode
    # a run with its own frame size (`train.<run>.image_size`) sees the env's frames resized
    shape = getattr(agent, "obs_shape", None)
    size = shape[0] if agent.obs_kind == PIXELS and shape is not None else None

    def begin(obs: dict[str, np.ndarray]) -> None:
        fresh[0] = True

    def act(obs: dict[str, np.ndarray]) -> Any:
        x = obs[agent.obs_kind]
        if size is not None and x.shape[0] != size:
            x = resize_frame(x, size)
        x = stacker.reset(x) if fresh[0] else stacker.step(x)
        fresh[0] = False
        return agent.act(x, deterministic=deterministic)

    return Policy(act, agent.obs_kind, dict(meta or {}), begin)


@dataclass(frozen=True)
class EvalResult:
    episodes: int
    return_mean: float
    return_std: float  # the sample std over episodes (ddof 1, as teacher_eval's); 0.0 for one
    length_mean: float
    success_rate: float | None  # None where the env defines no success
    returns: list[float]
    lengths: list[int]


@dataclass
class Recorder:
    """The frames (`obs["pixels"]`, (S, S, 3) uint8) of an evaluation's first `episodes`
    episodes, one clip per episode: every `every`-th agent step from the first observation on, at
    most `max_frames` per clip. It watches: the policy acts on the same observations as without it."""

    episodes: int
    every: int = 1
    max_frames: int = 250
    # "first": the first `episodes` episodes, as they are played; "median": the `episodes` whose
    # returns are nearest the evaluation's median (the typical ones), replayed from their seeds
    # once every return is known (`median_episodes`)
    which: Literal["first", "median"] = "first"
    clips: list[list[np.ndarray]] = field(default_factory=list)
    clip_episodes: list[int] = field(default_factory=list)  # the evaluation episode of each clip
    _step: int = field(default=0, init=False, repr=False)  # agent steps into the clip

    def wants(self, episode: int) -> bool:
        """Whether the evaluation's episode `episode` is watched as it is played (`median`'s
        are replayed afterwards instead)."""
        return self.which == "first" and episode < self.episodes

    def begin(self, obs: dict[str, np.ndarray], episode: int) -> None:
        self.clips.append([])
        self.clip_episodes.append(episode)
        self._step = 0
        self.see(obs)

    @property
    def full(self) -> bool:
        """Whether the clip being recorded holds `max_frames` frames: the rest of its episode
        adds none."""
        return bool(self.clips) and len(self.clips[-1]) >= self.max_frames

    def see(self, obs: dict[str, np.ndarray]) -> None:
        clip = self.clips[-1]
        if self._step % self.every == 0 and len(clip) < self.max_frames:
            clip.append(np.array(obs[PIXELS], dtype=np.uint8))  # a copy: envs may reuse buffers
        self._step += 1


def play_episodes(
    env: gym.Env,
    policy: Policy,
    episodes: int,
    seed: int,
    success_defined: bool = False,
    progress: str | None = None,
    *,
    record: Recorder | None = None,
    record_env: gym.Env | None = None,
) -> EvalResult:
    """Run `episodes` episodes with seeds seed, seed+1, ...; native return and length of each.
    Success is termination before the time limit where the env defines it (MountainCar).
    `progress`: a bar with this description, one tick per episode, the running mean beside it.
    `record`: the episodes it wants are played in `record_env` (the same env with frames, for a
    policy that reads the state; None: `env` renders them already) and their frames kept. Each
    episode starts from `reset(seed=...)`, so which env instance plays it changes no number."""
    returns, lengths, successes = [], [], []
    bar = tqdm(range(episodes), desc=progress, unit="episode", disable=progress is None)
    for i in bar:
        watch = record if record is not None and record.wants(i) else None
        episode_env = record_env if watch is not None and record_env is not None else env
        total, length, terminated = play_episode(episode_env, policy, seed + i, watch, i)
        returns.append(total)
        lengths.append(length)
        successes.append(terminated)
        bar.set_postfix(return_mean=f"{np.mean(returns):.1f}")
    return EvalResult(
        episodes=episodes,
        return_mean=float(np.mean(returns)),
        return_std=float(np.std(returns, ddof=1)) if len(returns) > 1 else 0.0,
        length_mean=float(np.mean(lengths)),
        success_rate=float(np.mean(successes)) if success_defined else None,
        returns=returns,
        lengths=lengths,
    )


def play_episode(
    env: gym.Env,
    policy: Policy,
    seed: int,
    watch: Recorder | None = None,
    episode: int = 0,
    until_full: bool = False,
) -> tuple[float, int, bool]:
    """One episode from `reset(seed=seed)`: its native return, length and whether it terminated
    (rather than ran out of time). `watch`: keeps its frames as the clip of evaluation episode
    `episode`; `until_full`: stops once that clip is full (a replay whose return is known: the
    return and length it gives are then those of the steps played)."""
    obs, _ = env.reset(seed=seed)
    if watch is not None:
        watch.begin(obs, episode)
    policy.begin(obs)
    total, length, terminated, truncated = 0.0, 0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        if watch is not None:
            watch.see(obs)
        total += float(reward)
        length += 1
        if until_full and watch is not None and watch.full:
            break
    return total, length, bool(terminated)


def median_episodes(returns: Sequence[float], count: int) -> list[int]:
    """The `count` episodes whose returns are nearest the median return, in episode order; for
    one, the median episode (of an even number, the lower of the two middle ones). Ties go to
    the earlier episode."""
    order = sorted(range(len(returns)), key=lambda i: (returns[i], i))
    median = returns[order[(len(order) - 1) // 2]]
    nearest = sorted(range(len(returns)), key=lambda i: (abs(returns[i] - median), i))
    return sorted(nearest[:count])


def evaluate_policy(
    policy: Policy,
    env_id: str,
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
    progress: str | None = None,
    record: Recorder | None = None,
) -> EvalResult:
    """`play_episodes` in a fresh env of the pipeline's registry, rendering only if the policy
    reads frames or `record` wants the episode (a second env with frames plays those). A
    `median` recorder's episodes are replayed from their seeds after the evaluation: the policy
    acts deterministically and each episode starts from `reset(seed=...)`, so a replay is the
    episode whose return the metrics hold."""
    reads_frames = policy.obs == PIXELS
    env = make_env(env_id, env_cfg, pixels=reads_frames)
    record_env = None
    success = env_info(env_id).success_on_termination
    try:
        if record is not None and record.episodes > 0 and not reads_frames:
            record_env = make_env(env_id, env_cfg, pixels=True)
        check_fits(policy.meta, env.action_space, env_id)
        result = play_episodes(
            env, policy, episodes, seed, success, progress, record=record, record_env=record_env
        )
        if record is not None and record.which == "median":
            replay = record_env if record_env is not None else env
            for i in median_episodes(result.returns, record.episodes):
                play_episode(replay, policy, seed + i, record, i, until_full=True)
        return result
    finally:
        env.close()
        if record_env is not None:
            record_env.close()


def check_fits(meta: dict[str, Any], space: gym.Space, env_id: str) -> None:
    """An agent's recorded env and action bounds (agent.json) are `env_id`'s: a checkpoint made
    for another env, or whose bounds were edited, would otherwise act with the wrong scale."""
    saved = meta.get("env")
    if isinstance(saved, str) and saved != env_id:
        raise EvaluationError(f"the agent was trained on {saved}, not {env_id}")
    if isinstance(space, gym.spaces.Box) and "action_low" in meta:
        low, high = np.asarray(meta["action_low"]), np.asarray(meta["action_high"])
        if low.shape != space.low.shape or not (
            np.allclose(low, space.low) and np.allclose(high, space.high)
        ):
            raise EvaluationError(
                f"agent.json's action bounds [{low.tolist()}, {high.tolist()}] are not {env_id}'s "
                f"[{space.low.tolist()}, {space.high.tolist()}]: the checkpoint was edited or made "
                "for another env; restore it with `dvc checkout` or retrain it (`dvc repro`)"
            )


def encode_gif(frames: Sequence[np.ndarray], fps: float, scale: int = 1) -> bytes:
    """An animated GIF of (H, W, 3) uint8 frames, looping, each shown 1/fps s, pixels enlarged
    `scale` times (nearest neighbour). The same frames give the same bytes: one palette for the
    clip (median cut over all its frames, no dithering, so colours do not flicker between frames)
    and fixed encoder options. Pillow merges identical consecutive frames into one shown longer."""
    if not frames:
        raise ValueError("a GIF needs at least one frame")
    height, width = frames[0].shape[:2]
    strip = Image.fromarray(np.concatenate(list(frames), axis=0))  # (n*H, W, 3): one palette
    paletted = strip.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    images = []
    for i in range(len(frames)):
        image = paletted.crop((0, i * height, width, (i + 1) * height))
        if scale > 1:
            image = image.resize((width * scale, height * scale), Image.Resampling.NEAREST)
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=max(10, round(1000 / fps / 10) * 10),  # ms, whole 10 ms units (the format's)
        loop=0,
        optimize=False,
        disposal=1,  # each frame is drawn over the previous one (full frames: no trails)
    )
    return buffer.getvalue()


def eval_metrics(result: EvalResult, meta: dict[str, Any]) -> dict[str, Any]:
    """The metrics JSON of one run (`dvc metrics show` reads the numbers); `std_ddof` names the
    std's convention, as `metrics/teacher/<env>.json` does."""
    out = {k: v for k, v in asdict(result).items() if k not in ("returns", "lengths")}
    out = {k: v for k, v in out.items() if v is not None}
    meta_keys = {"env": meta["env"], "method": meta["method"], "train_steps": meta["steps"]}
    return {**out, "std_ddof": 1, **meta_keys}


CLIP_NAME = "episode-{episode}.gif"  # in --videos: the evaluation's episode index (seed + index)


def write_clips(
    directory: Path, clips: list[list], episodes: list[int], fps: float, scale: int
) -> list[Path]:
    """Each clip as `CLIP_NAME` of its evaluation episode in `directory`; GIFs of a previous run
    that this one did not record are removed (DVC empties the directory before the stage; a run
    by hand may not)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / CLIP_NAME.format(episode=i) for i in episodes]
    for stale in set(directory.glob(CLIP_NAME.format(episode="*"))) - set(paths):
        stale.unlink()
    for path, frames in zip(paths, clips, strict=True):
        atomic_write_bytes(path, encode_gif(frames, fps, scale))
    return paths
