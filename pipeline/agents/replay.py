"""Replay buffer whose transitions carry VLM labels (ERPv sec. 3.2: tau_t = {o_t, a_t, r_t,
o_{t+1}, d_t, a_v,t}), read from the pipeline's dataset instead of asking a VLM while training.

Two parts: an offline part, prefilled from a labelled dataset (`load_offline_transitions`), and an
online part that the training loop fills; `sample` mixes them at a set fraction. Observations are
stored once per step; a transition is an index into them (o_{t+1} is the next stored observation).
Pixel observations are stacked at sample time, k frames oldest first on the channel axis, with the
episode's first frame repeated at its start, as pipeline.dataset.loader.iter_stacked does.

Conventions of the dataset (pipeline.rollouts.format, RLDS style): an episode of T steps has T + 1
samples; sample t holds o_t, the action a_t taken there, the reward r_t it earned and the end flags
that followed it; the last sample (`is_last`) holds o_T with null action and reward. So transition
t is (sample t's obs, action, reward, terminated; sample t+1's obs). `done` is `terminated` only: a
truncated episode's last state still bootstraps. A label counts (`has_label`) when `a_v` is present
and `a_v_status` is one of LABELLED_STATUSES; `next_a_v` is the label of sample t+1 (the VLM
policy at the next state, which C_V's pre-training bootstraps from without calling the VLM).
"""

from __future__ import annotations

import io
import json
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np
import polars as pl
import torch
from PIL import Image

from pipeline.labels.status import LABELLED_STATUSES

ObsKind = Literal["pixels", "state"]

# The dataset layout of pipeline.dataset.build (PARQUET_PATTERN, INFO_PATH), repeated here so that
# the train stage does not import the dataset builder (webdataset and friends); a test keeps them equal.
PARQUET_GLOB = "data/train-*.parquet"
INFO_PATH = "meta/info.json"
_COMMON_COLUMNS = (
    "episode", "t", "action", "reward", "terminated", "is_first", "is_last", "a_v", "a_v_status",
)  # fmt: skip
_OBS_COLUMN: dict[str, str] = {"pixels": "image", "state": "state"}


@dataclass(frozen=True)
class OfflineTransitions:
    """Transitions of a dataset, observations stored once per sample (N_obs >= N + episodes)."""

    obs: np.ndarray  # (N_obs, H, W, 3) uint8 frames or (N_obs, D) float32 states
    episode_start: np.ndarray  # (N_obs,) int64: index in `obs` of its episode's first observation
    obs_index: np.ndarray  # (N,) int64: transition i goes from obs[obs_index[i]] to the next one
    action: np.ndarray  # (N, A) float32, in the env's action units
    reward: np.ndarray  # (N,) float32
    terminated: np.ndarray  # (N,) bool
    a_v: np.ndarray  # (N, A) float32, zero where there is no label
    has_label: np.ndarray  # (N,) bool
    next_a_v: np.ndarray  # (N, A) float32: the label at o_{t+1}, zero where none
    has_next_label: np.ndarray  # (N,) bool

    def __post_init__(self) -> None:
        n, n_obs = len(self.obs_index), len(self.obs)
        if len(self.episode_start) != n_obs:
            raise ValueError(f"episode_start has {len(self.episode_start)} rows, obs {n_obs}")
        for name in _PER_TRANSITION:
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, obs_index {n}")
        if n and (self.obs_index.min() < 0 or self.obs_index.max() + 1 >= n_obs):
            raise ValueError("obs_index points outside obs (o_{t+1} must be stored too)")

    def __len__(self) -> int:
        return len(self.obs_index)

    @property
    def action_dim(self) -> int:
        return self.action.shape[1]

    def select(self, mask: np.ndarray) -> OfflineTransitions:
        """The transitions where `mask` holds; the observations stay shared."""
        return replace(self, **{name: getattr(self, name)[mask] for name in _PER_TRANSITION})


_PER_TRANSITION = tuple(
    f.name for f in fields(OfflineTransitions) if f.name not in ("obs", "episode_start")
)


def stack_frames(frames: np.ndarray) -> np.ndarray:
    """(..., k, H, W, 3) uint8, oldest first -> (..., 3k, H, W): the encoder's channel layout."""
    *lead, k, h, w, c = frames.shape
    moved = np.moveaxis(frames, -1, -3)  # (..., k, 3, H, W)
    return np.ascontiguousarray(moved).reshape(*lead, k * c, h, w)


class FrameStacker:
    """The agent's input while acting, built as `ReplayBuffer.sample` builds it: the last k frames
    of the episode (the first repeated at its start) for pixels; the state itself for states."""

    def __init__(self, obs: ObsKind, frame_stack: int) -> None:
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self.obs, self.k = obs, frame_stack
        self._frames: deque[np.ndarray] = deque(maxlen=frame_stack)

    def reset(self, obs: np.ndarray) -> np.ndarray:
        self._frames.clear()
        self._frames.extend([obs] * self.k)
        return self._current()

    def step(self, obs: np.ndarray) -> np.ndarray:
        self._frames.append(obs)
        return self._current()

    def _current(self) -> np.ndarray:
        if self.obs == "state":
            return np.asarray(self._frames[-1], dtype=np.float32)
        return stack_frames(np.stack(self._frames))


class _Part:
    """Observations in a ring (absolute indices, position = index % capacity) and transitions that
    point into it. A transition stays sampleable while every frame its stack needs is stored."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype,
        action_dim: int,
        obs_capacity: int,
        transition_capacity: int,
        frame_stack: int,
    ) -> None:
        self.k = frame_stack
        self.obs = np.zeros((obs_capacity, *obs_shape), dtype=obs_dtype)
        self.episode_start = np.zeros(obs_capacity, dtype=np.int64)
        self.obs_index = np.zeros(transition_capacity, dtype=np.int64)
        self.action = np.zeros((transition_capacity, action_dim), dtype=np.float32)
        self.reward = np.zeros(transition_capacity, dtype=np.float32)
        self.terminated = np.zeros(transition_capacity, dtype=bool)
        self.a_v = np.zeros((transition_capacity, action_dim), dtype=np.float32)
        self.has_label = np.zeros(transition_capacity, dtype=bool)
        self.next_a_v = np.zeros((transition_capacity, action_dim), dtype=np.float32)
        self.has_next_label = np.zeros(transition_capacity, dtype=bool)
        self.n_obs = 0  # observations ever stored
        self.n_transitions = 0  # transitions ever stored
        self.oldest = 0  # the oldest transition still sampleable (absolute)

    @classmethod
    def from_offline(cls, data: OfflineTransitions, frame_stack: int) -> _Part:
        part = cls.__new__(cls)
        part.k = frame_stack
        for name in ("obs", "episode_start", "obs_index", "action", "reward", "terminated",
                     "a_v", "has_label", "next_a_v", "has_next_label"):  # fmt: skip
            setattr(part, name, getattr(data, name))
        part.n_obs, part.n_transitions, part.oldest = len(data.obs), len(data), 0
        return part

    def __len__(self) -> int:
        return self.n_transitions - self.oldest

    def add_obs(self, obs: np.ndarray, first: bool) -> None:
        pos = self.n_obs % len(self.obs)
        self.obs[pos] = obs
        prev = (self.n_obs - 1) % len(self.obs)
        self.episode_start[pos] = self.n_obs if first else self.episode_start[prev]
        self.n_obs += 1
        self._evict()

    def add_transition(
        self, action: np.ndarray, reward: float, terminated: bool, a_v: np.ndarray | None
    ) -> None:
        """The transition from the second-last stored observation to the last one."""
        pos = self.n_transitions % len(self.obs_index)
        self.obs_index[pos] = self.n_obs - 2
        self.action[pos], self.reward[pos], self.terminated[pos] = action, reward, terminated
        self.has_label[pos] = a_v is not None
        self.a_v[pos] = 0.0 if a_v is None else a_v
        self.next_a_v[pos], self.has_next_label[pos] = 0.0, False
        self.n_transitions += 1
        self._evict()

    def _complete(self, transition: int, overwritten: int) -> bool:
        """Whether every observation that `transition` stacks is still stored (absolute indices
        below `overwritten` are gone)."""
        i = self.obs_index[transition % len(self.obs_index)]
        if i < overwritten:  # o_t itself is gone (and its slot's episode_start is another's)
            return False
        return max(i - (self.k - 1), self.episode_start[i % len(self.obs)]) >= overwritten

    def _evict(self) -> None:
        # Transitions age in order and so do the frames they need: drop a prefix.
        overwritten = self.n_obs - len(self.obs)
        while self.oldest < self.n_transitions and (
            self.n_transitions - self.oldest > len(self.obs_index)
            or not self._complete(self.oldest, overwritten)
        ):
            self.oldest += 1

    def _stacked(self, index: np.ndarray) -> np.ndarray:
        """Observations at absolute indices (B,) -> (B, 3k, H, W) for frames, (B, D) for states."""
        cap = len(self.obs)
        if self.obs.ndim == 2:
            return self.obs[index % cap]
        start = self.episode_start[index % cap]  # (B,)
        offsets = np.arange(-(self.k - 1), 1)  # oldest first
        frames = np.maximum(index[:, None] + offsets[None, :], start[:, None])  # (B, k)
        return stack_frames(self.obs[frames % cap])  # (B, k, H, W, 3) -> (B, 3k, H, W)

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        rows = rng.integers(self.oldest, self.n_transitions, size=n) % len(self.obs_index)
        index = self.obs_index[rows]
        return {
            "obs": self._stacked(index),
            "next_obs": self._stacked(index + 1),
            "action": self.action[rows],
            "reward": self.reward[rows],
            "done": self.terminated[rows].astype(np.float32),
            "a_v": self.a_v[rows],
            "has_label": self.has_label[rows],
            "next_a_v": self.next_a_v[rows],
            "has_next_label": self.has_next_label[rows],
        }


class ReplayBuffer:
    """Offline part (fixed, from a dataset) + online part (a ring of `capacity` observations).

    Online use: `begin_episode(o_0)` after each reset, then `add(a_t, r_t, o_{t+1}, terminated)`
    after each step. `obs_shape` is one observation as the env gives it: (H, W, 3) uint8 frames or
    (D,) states. Online transitions carry `a_v` when the caller passes one; `next_a_v` is only
    filled for offline data (C_V's pre-training reads the dataset alone).
    """

    def __init__(
        self,
        obs: ObsKind,
        obs_shape: tuple[int, ...],
        action_dim: int,
        capacity: int,
        *,
        frame_stack: int = 3,
        offline: OfflineTransitions | None = None,
    ) -> None:
        if obs not in ("pixels", "state"):
            raise ValueError(f"obs must be 'pixels' or 'state', got {obs!r}")
        if obs == "pixels" and len(obs_shape) != 3:
            raise ValueError(f"pixel observations are (H, W, 3) frames, got shape {obs_shape}")
        if obs == "state" and len(obs_shape) != 1:
            raise ValueError(f"state observations are (D,) vectors, got shape {obs_shape}")
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2 observations, got {capacity}")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self.kind, self.obs_shape, self.action_dim = obs, tuple(obs_shape), action_dim
        k = frame_stack if obs == "pixels" else 1  # states need no stacking
        dtype = np.dtype(np.uint8 if obs == "pixels" else np.float32)
        self.online = _Part(self.obs_shape, dtype, action_dim, capacity, capacity, k)
        self.offline: _Part | None = None
        if offline is not None and len(offline):
            if offline.obs.shape[1:] != self.obs_shape:
                raise ValueError(
                    f"offline observations have shape {offline.obs.shape[1:]}, the buffer "
                    f"expects {self.obs_shape} ({obs})"
                )
            if offline.action_dim != action_dim:
                raise ValueError(
                    f"offline actions have {offline.action_dim} dimensions, expected {action_dim}"
                )
            self.offline = _Part.from_offline(offline, k)
        self._episode_open = False

    @property
    def online_size(self) -> int:
        return len(self.online)

    @property
    def offline_size(self) -> int:
        return 0 if self.offline is None else len(self.offline)

    def begin_episode(self, obs: np.ndarray) -> None:
        self.online.add_obs(np.asarray(obs), first=True)
        self._episode_open = True

    def add(
        self,
        action: np.ndarray,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        a_v: np.ndarray | None = None,
    ) -> None:
        """Store the step from the last observation to `next_obs`. `terminated` only: pass False
        on truncation (the state still has a future)."""
        if not self._episode_open:
            raise RuntimeError("call begin_episode(first observation) before add()")
        self.online.add_obs(np.asarray(next_obs), first=False)
        self.online.add_transition(np.asarray(action), float(reward), bool(terminated), a_v)

    def sample(
        self,
        batch_size: int,
        offline_fraction: float,
        rng: np.random.Generator,
        device: torch.device | str | None = None,
    ) -> dict[str, torch.Tensor]:
        """round(batch_size * offline_fraction) rows from the offline part, the rest online; all
        rows from one part when the other is empty. Uniform with replacement within a part.
        Returns tensors: obs / next_obs (B, 3k, H, W) uint8 or (B, D) float32, action, a_v,
        next_a_v (B, A), reward, done (B,) float32, has_label, has_next_label, offline (B,) bool."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0.0 <= offline_fraction <= 1.0:
            raise ValueError(f"offline_fraction must be in [0, 1], got {offline_fraction}")
        n_off_avail, n_on_avail = self.offline_size, self.online_size
        if n_off_avail == 0 and n_on_avail == 0:
            raise ValueError("the replay buffer is empty (no offline data, no online steps)")
        if n_off_avail == 0:
            n_off = 0
        elif n_on_avail == 0:
            n_off = batch_size
        else:
            n_off = round(batch_size * offline_fraction)
        parts = []
        if n_off:
            parts.append((self.offline.sample(n_off, rng), True))  # type: ignore[union-attr]
        if batch_size - n_off:
            parts.append((self.online.sample(batch_size - n_off, rng), False))
        batch = {key: np.concatenate([p[key] for p, _ in parts]) for key in parts[0][0]}
        batch["offline"] = np.concatenate([np.full(len(p["reward"]), o) for p, o in parts])
        return {key: torch.as_tensor(value, device=device) for key, value in batch.items()}


def dataset_action_space(dataset_dir: str | Path) -> gym.spaces.Box:
    """The Box action space recorded in a dataset's meta/info.json (for stages without an env)."""
    path = Path(dataset_dir) / INFO_PATH
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a dataset built by the dataset stage?")
    space = json.loads(path.read_text())["action_space"]
    if space["type"] != "box":
        raise ValueError(f"{path}: action space is {space['type']}; SAC / ERPv need a Box")
    shape = tuple(space["shape"])
    low = np.asarray(space["low"], dtype=np.float32).reshape(shape)
    high = np.asarray(space["high"], dtype=np.float32).reshape(shape)
    return gym.spaces.Box(low, high, dtype=np.float32)


def _decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _list_column(df: pl.DataFrame, name: str, width: int, path: Path) -> np.ndarray:
    """A list[f32] column of equal-length rows -> (N, width) float32."""
    lengths = df[name].list.len()
    if (lengths != width).any():
        bad = df.filter(lengths != width).row(0, named=True)
        raise ValueError(
            f"{path}: {name} of episode {bad['episode']} t {bad['t']} has "
            f"{len(bad[name])} values, expected {width}"
        )
    return df[name].list.to_array(width).to_numpy().astype(np.float32, copy=False)


def _check_episodes(df: pl.DataFrame, path: Path) -> None:
    """Sorted rows must form whole RLDS episodes: t = 0..T, is_first at 0, is_last (and only it
    with null action and reward) at T."""
    episode, t = df["episode"].to_numpy(), df["t"].to_numpy()
    new = np.r_[True, episode[1:] != episode[:-1]]
    last = np.r_[new[1:], True]
    problems = {
        "t does not count 0, 1, 2, ...": np.where(new, t != 0, t != np.r_[-1, t[:-1]] + 1),
        "is_first is not set exactly on t = 0": df["is_first"].to_numpy() != new,
        "is_last is not set exactly on the final sample": df["is_last"].to_numpy() != last,
        "action is null on a step (or set on the final sample)": df["action"].is_null().to_numpy()
        != last,
        "reward is null on a step (or set on the final sample)": df["reward"].is_null().to_numpy()
        != last,
    }
    for what, bad in problems.items():
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(
                f"{path}: episode {episode[row]} (t {t[row]}): {what}; expected whole episodes "
                f"of T + 1 samples as the collect stage writes them"
            )


def _read_file(path: Path, obs: ObsKind) -> pl.DataFrame:
    schema = pl.read_parquet_schema(path)
    if obs == "state" and "state" not in schema and "image" in schema:
        raise ValueError(
            f"{path}: no `state` column (collected without include_state); use obs='pixels'"
        )
    if "a_v" not in schema and "a_v_index" in schema:
        raise ValueError(
            f"{path}: a discrete-action dataset (labels in `a_v_index`); SAC and ERPv need a "
            f"continuous (Box) action space"
        )
    wanted = [*_COMMON_COLUMNS, _OBS_COLUMN[obs]]
    missing = [c for c in wanted if c not in schema]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {', '.join(missing)}; expected the columns that "
            f"pipeline.dataset.build writes ({', '.join(wanted)})"
        )
    return pl.read_parquet(path, columns=wanted).sort("episode", "t")


def load_offline_transitions(dataset_dir: str | Path, obs: ObsKind) -> OfflineTransitions:
    """Read `<dataset_dir>/data/train-*.parquet` (the HF dataset of the dataset stage) into
    transitions with labels. `obs`: "state" reads the `state` column, "pixels" decodes `image`
    to (H, W, 3) uint8 frames. Errors name the file: missing columns, a discrete-action dataset,
    broken episodes, labels of the wrong length, an empty dataset."""
    if obs not in _OBS_COLUMN:
        raise ValueError(f"obs must be 'pixels' or 'state', got {obs!r}")
    files = sorted(Path(dataset_dir).glob(PARQUET_GLOB))
    if not files:
        raise FileNotFoundError(f"no parquet files ({PARQUET_GLOB}) in {dataset_dir}")
    chunks: list[dict[str, np.ndarray]] = []
    offset, seen_episodes = 0, set[int]()
    for path in files:
        df = _read_file(path, obs)
        if df.height == 0:
            continue
        _check_episodes(df, path)
        episodes = set(df["episode"].unique().to_list())
        if episodes & seen_episodes:
            raise ValueError(
                f"{path}: episode(s) {sorted(episodes & seen_episodes)[:5]} also in an earlier file"
            )
        seen_episodes |= episodes
        steps = ~df["is_last"].to_numpy()
        if not steps.any():
            raise ValueError(f"{path}: no steps, only final samples (episodes of length 0)")
        action_dim = len(df["action"].drop_nulls()[0])
        if chunks and action_dim != chunks[0]["action"].shape[1]:
            raise ValueError(
                f"{path}: actions have {action_dim} dimensions, earlier files {chunks[0]['action'].shape[1]}"
            )
        if obs == "state":
            width = len(df["state"][0])
            observations = _list_column(df, "state", width, path)
        else:
            frames = [_decode_png(row["bytes"]) for row in df["image"].to_list()]
            shapes = {f.shape for f in frames}
            if len(shapes) != 1:
                raise ValueError(f"{path}: frames of different shapes {sorted(shapes)}")
            observations = np.stack(frames)
        labelled = (
            (df["a_v"].is_not_null() & df["a_v_status"].is_in(LABELLED_STATUSES))
            .fill_null(False)
            .to_numpy()
        )
        a_v = np.zeros((df.height, action_dim), dtype=np.float32)
        if labelled.any():
            a_v[labelled] = _list_column(df.filter(pl.Series(labelled)), "a_v", action_dim, path)
        if not np.isfinite(a_v).all():
            raise ValueError(f"{path}: a labelled a_v holds nan or inf (its status says it parsed)")
        new = np.r_[True, df["episode"].to_numpy()[1:] != df["episode"].to_numpy()[:-1]]
        rows = np.arange(df.height)
        start = np.maximum.accumulate(np.where(new, rows, 0))
        index = rows[steps]
        chunks.append(
            {
                "obs": observations,
                "episode_start": start + offset,
                "obs_index": index + offset,
                "action": _list_column(df.filter(pl.Series(steps)), "action", action_dim, path),
                "reward": df["reward"].to_numpy()[steps].astype(np.float32),
                "terminated": df["terminated"].to_numpy()[steps],
                "a_v": a_v[index],
                "has_label": labelled[index],
                "next_a_v": a_v[index + 1],
                "has_next_label": labelled[index + 1],
            }
        )
        offset += df.height
    if not chunks:
        raise ValueError(
            f"the dataset in {dataset_dir} is empty ({len(files)} parquet files, no rows)"
        )
    return OfflineTransitions(**{k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]})
