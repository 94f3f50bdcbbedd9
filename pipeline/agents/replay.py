"""Replay buffer whose transitions carry VLM labels (ERPv sec. 3.2: tau_t = {o_t, a_t, r_t,
o_{t+1}, d_t, a_v,t}), read from the pipeline's dataset instead of asking a VLM while training.

Two parts: an offline part, prefilled from a labelled dataset (`load_offline_transitions`), and an
online part that the training loop fills; `sample` mixes them at a set fraction. Observations are
stored once per step; a transition is an index into them (o_{t+1} is the next stored observation).
Pixel observations are stacked at sample time, k frames oldest first on the channel axis, by the
one stacking rule of pipeline.dataset.stacking.

Transitions and their labels follow the dataset's conventions (RLDS style, `done` is `terminated`
only, `has_label` / `next_a_v`), described in pipeline.dataset.transitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pipeline.dataset.stacking import stack_window, to_channels
from pipeline.dataset.transitions import ObsKind, OfflineTransitions, SemanticLabels


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
        self.semantics: SemanticLabels | None = None  # dataset frames only: none online

    @classmethod
    def from_offline(cls, data: OfflineTransitions, frame_stack: int) -> _Part:
        part = cls.__new__(cls)
        part.k = frame_stack
        for name in ("obs", "episode_start", "obs_index", "action", "reward", "terminated",
                     "a_v", "has_label", "next_a_v", "has_next_label"):  # fmt: skip
            setattr(part, name, getattr(data, name))
        part.n_obs, part.n_transitions, part.oldest = len(data.obs), len(data), 0
        part.semantics = data.semantics
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
        frames = stack_window(index, self.episode_start[index % cap], self.k)  # (B, k)
        return to_channels(self.obs[frames % cap])  # (B, k, H, W, 3) -> (B, 3k, H, W)

    def sample(
        self,
        n: int,
        rng: np.random.Generator,
        semantics: bool = False,
        pool: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """`n` transitions uniformly (from `pool`, transition indices, when given); with
        `semantics`, Semore's mask of o_t and judge label (zeros / -1 where there are none)."""
        if pool is None:
            rows = rng.integers(self.oldest, self.n_transitions, size=n) % len(self.obs_index)
        else:
            rows = pool[rng.integers(0, len(pool), size=n)]
        index = self.obs_index[rows]
        extra: dict[str, np.ndarray] = {}
        if semantics:
            at = index % len(self.obs)
            if self.semantics is not None:
                extra = {
                    "mask": self.semantics.mask[at][:, None],  # (B, 1, H, W) uint8
                    "has_mask": self.semantics.has_mask[at],
                    "judge": self.semantics.judge[rows],
                }
            else:
                extra = {
                    "mask": np.zeros((n, 1, *self.obs.shape[1:3]), dtype=np.uint8),
                    "has_mask": np.zeros(n, dtype=bool),
                    "judge": np.full(n, -1, dtype=np.int8),
                }
        return extra | {
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
        semantics: bool = False,
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
        if semantics and (obs != "pixels" or (offline is not None and offline.semantics is None)):
            raise ValueError(
                "semantics (Semore's masks and judge labels) need pixel observations and offline "
                "data read with load_offline_transitions(..., semantics=True)"
            )
        self.semantics = semantics
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

    _ONLINE_FIELDS = (
        "obs", "episode_start", "obs_index", "action", "reward", "terminated", "a_v",
        "has_label", "next_a_v", "has_next_label", "n_obs", "n_transitions", "oldest",
    )  # fmt: skip
    _OBS_FIELDS = ("obs", "episode_start")  # indexed by observation; the others by transition

    def online_state(self) -> dict[str, Any]:
        """The online part (what training added), for a resumable training's checkpoint; the
        offline part is rebuilt from its dataset. Arrays are cut to the slots written so far (a
        pixel buffer of 50k 84x84 frames is 1 GB, mostly empty early in training)."""
        part = self.online
        filled = {
            "obs": min(part.n_obs, len(part.obs)),
            "transitions": min(part.n_transitions, len(part.obs_index)),
        }
        state: dict[str, Any] = {}
        for name in self._ONLINE_FIELDS:
            value = getattr(part, name)
            if isinstance(value, np.ndarray):
                value = value[: filled["obs" if name in self._OBS_FIELDS else "transitions"]].copy()
            state[name] = value
        capacity = {"obs": len(part.obs), "transitions": len(part.obs_index)}
        return {**state, "capacity": capacity, "episode_open": self._episode_open}

    def load_online_state(self, state: dict[str, Any]) -> None:
        part = self.online
        shape = (state.get("capacity", {}).get("obs", len(state["obs"])), *state["obs"].shape[1:])
        if shape != part.obs.shape:
            raise ValueError(
                f"saved replay holds observations {shape}, this buffer {part.obs.shape}"
            )
        for name in self._ONLINE_FIELDS:
            value = state[name]
            if isinstance(value, np.ndarray):
                full = getattr(part, name)
                full[...] = 0
                full[: len(value)] = value
            else:
                setattr(part, name, value)
        self._episode_open = state["episode_open"]

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
        offline_pool: np.ndarray | None = None,
    ) -> dict[str, torch.Tensor]:
        """round(batch_size * offline_fraction) rows from the offline part, the rest online; all
        rows from one part when the other is empty. Uniform with replacement within a part, or
        within `offline_pool` (offline transition indices, e.g. Semore's judged-reasonable ones).
        Returns tensors: obs / next_obs (B, 3k, H, W) uint8 or (B, D) float32, action, a_v,
        next_a_v (B, A), reward, done (B,) float32, has_label, has_next_label, offline (B,) bool;
        with `semantics`, also mask (B, 1, H, W) uint8, has_mask (B,) bool and judge (B,) int8
        (online rows have none: has_mask False, judge -1)."""
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
            offline = self.offline.sample(n_off, rng, self.semantics, offline_pool)  # type: ignore[union-attr]
            parts.append((offline, True))
        if batch_size - n_off:
            parts.append((self.online.sample(batch_size - n_off, rng, self.semantics), False))
        batch = {key: np.concatenate([p[key] for p, _ in parts]) for key in parts[0][0]}
        batch["offline"] = np.concatenate([np.full(len(p["reward"]), o) for p, o in parts])
        return {key: torch.as_tensor(value, device=device) for key, value in batch.items()}
