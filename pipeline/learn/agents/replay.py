"""Replay buffer whose transitions carry VLM labels (ERPv sec. 3.2: tau_t = {o_t, a_t, r_t,
o_{t+1}, d_t, a_v,t}), read from the pipeline's dataset instead of asking a VLM while training.

Two parts: an offline part, prefilled from a labelled dataset (`load_offline_transitions`), and an
online part that the training loop fills; `sample` mixes them at the fraction fixed at
construction. Observations are stored once per step, on the training device (frames as uint8);
a transition is an index into them (o_{t+1} is the next stored observation). Pixel observations
are stacked at sample time by a gather on that device, k frames oldest first on the channel axis,
by the one stacking rule of pipeline.core.stacking (MR.Q / TD-MPC2 keep frames the same way).

Labels are the data's declared fields (`FieldSpec`: ERPv's a_v, Semore's mask and judge, ...):
the buffer carries them without knowing what they are. Online rows get each field's fill value,
or the per-transition values the caller passes to `add`; per-observation fields (masks) exist
for dataset frames only. Conventions (RLDS style, `done` is `terminated` only) are those of
pipeline.dataset.transitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from pipeline.core.stacking import stack_window
from pipeline.dataset.transitions import FieldSpec, ObsKind, OfflineTransitions

# (update index, rng) -> the offline transition indices a batch's offline rows are drawn from,
# or None for all of them (Semore's selective replay: pipeline.learn.methods.semore.selective_pool)
OfflinePool = Callable[[int, np.random.Generator], np.ndarray | None]


class TransitionStore:
    """Observations in a ring (absolute indices, position = index % capacity), transitions that
    point into it, and their declared fields. A transition stays sampleable while every frame its
    stack needs is stored. The offline part is one, filled once (`from_offline`)."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        obs_dtype: torch.dtype,
        action_dim: int,
        capacity: int,
        frame_stack: int,
        specs: Sequence[FieldSpec] = (),
        device: torch.device | str = "cpu",
    ) -> None:
        self.k = frame_stack
        # frames (H, W, 3) are kept channels first (see _device_obs), allocated where they live
        shape = (
            (capacity, obs_shape[2], *obs_shape[:2])
            if len(obs_shape) == 3
            else (capacity, *obs_shape)
        )
        self.obs = torch.zeros(shape, dtype=obs_dtype, device=device)
        self.episode_start = np.zeros(capacity, dtype=np.int64)
        self.obs_index = np.zeros(capacity, dtype=np.int64)
        self.action = np.zeros((capacity, action_dim), dtype=np.float32)
        self.reward = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.specs = tuple(specs)
        # per-transition fields are stored (callers may pass them to `add`); per-observation
        # ones are their fill value online
        self.fields = {s.name: s.empty(capacity) for s in self.specs if s.per == "transition"}
        # which dataset directory each transition came from (offline: `OfflineTransitions.part`,
        # 0 the env's dataset, k its k-th labelling round); None online, sampled as -1
        self.part: np.ndarray | None = None
        self.n_obs = 0  # observations ever stored
        self.n_transitions = 0  # transitions ever stored
        self.oldest = 0  # the oldest transition still sampleable (absolute)

    @classmethod
    def from_offline(
        cls, data: OfflineTransitions, frame_stack: int, device: torch.device | str = "cpu"
    ) -> TransitionStore:
        store = cls.__new__(cls)
        store.k = frame_stack
        store.obs = _device_obs(data.obs, device)
        for name in ("episode_start", "obs_index", "action", "reward", "terminated"):
            setattr(store, name, getattr(data, name))
        store.specs, store.fields = data.specs, dict(data.fields)
        store.part = data.part
        store.n_obs, store.n_transitions, store.oldest = len(data.obs), len(data), 0
        return store

    def __len__(self) -> int:
        return self.n_transitions - self.oldest

    def add_obs(self, obs: np.ndarray, first: bool) -> None:
        pos = self.n_obs % len(self.obs)
        self.obs[pos] = _device_obs(obs[None], self.obs.device)[0]
        prev = (self.n_obs - 1) % len(self.obs)
        self.episode_start[pos] = self.n_obs if first else self.episode_start[prev]
        self.n_obs += 1
        self._evict()

    def add_transition(
        self, action: np.ndarray, reward: float, terminated: bool, values: dict[str, Any]
    ) -> None:
        """The transition from the second-last stored observation to the last one; `values` of
        per-transition fields (the others get their fill value)."""
        pos = self.n_transitions % len(self.obs_index)
        self.obs_index[pos] = self.n_obs - 2
        self.action[pos], self.reward[pos], self.terminated[pos] = action, reward, terminated
        for spec in self.specs:
            if spec.per == "transition":
                self.fields[spec.name][pos] = values.get(spec.name, spec.fill)
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

    def _stacked(self, index: np.ndarray) -> torch.Tensor:
        """Observations at absolute indices (B,) -> (B, 3k, H, W) for frames, (B, D) for states,
        gathered where the store lives."""
        cap = len(self.obs)
        if self.obs.ndim == 2:
            return self.obs[torch.as_tensor(index % cap, device=self.obs.device)]
        frames = stack_window(index, self.episode_start[index % cap], self.k)  # (B, k)
        stack = self.obs[torch.as_tensor(frames % cap, device=self.obs.device)]  # (B, k, 3, H, W)
        return stack.flatten(1, 2)  # (B, 3k, H, W): to_channels' layout, no copy beyond the gather

    def sample(
        self, n: int, rng: np.random.Generator, pool: np.ndarray | None = None
    ) -> dict[str, Any]:
        """`n` transitions uniformly (from `pool`, transition indices, when given), with every
        declared field: obs / next_obs stacked (tensors where the store lives), the rest arrays:
        field rows of o_t or of the transition."""
        if pool is None:
            rows = rng.integers(self.oldest, self.n_transitions, size=n) % len(self.obs_index)
        else:
            rows = pool[rng.integers(0, len(pool), size=n)]
        index = self.obs_index[rows]
        batch = {
            "obs": self._stacked(index),
            "next_obs": self._stacked(index + 1),
            "action": self.action[rows],
            "reward": self.reward[rows],
            "done": self.terminated[rows].astype(np.float32),
            "part": self.part[rows] if self.part is not None else np.full(n, -1, np.int64),
        }
        for spec in self.specs:
            if spec.per == "transition":
                batch[spec.name] = self.fields[spec.name][rows]
            elif spec.name in self.fields:  # per observation, stored (offline)
                batch[spec.name] = self.fields[spec.name][index % len(self.obs)]
            else:
                batch[spec.name] = spec.empty(n)
        return batch

    def state(self) -> dict[str, Any]:
        """The rows written so far (a pixel ring of 50k 84x84 frames is 1 GB, mostly empty early
        in training), for a resume state."""
        n_obs = min(self.n_obs, len(self.obs))
        n_tr = min(self.n_transitions, len(self.obs_index))
        return {
            "obs": _host_obs(self.obs[:n_obs]),
            "episode_start": self.episode_start[:n_obs].copy(),
            **{name: getattr(self, name)[:n_tr].copy() for name in _TRANSITION_ARRAYS},
            "fields": {name: values[:n_tr].copy() for name, values in self.fields.items()},
            "counters": (self.n_obs, self.n_transitions, self.oldest),
            "capacity": len(self.obs),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        shape = (state["capacity"], *state["obs"].shape[1:])
        ours = (len(self.obs), *_host_layout(self.obs).shape[1:])
        if shape != ours or sorted(state["fields"]) != sorted(self.fields):
            raise ValueError(
                f"saved replay holds observations {shape} with fields {sorted(state['fields'])}, "
                f"this buffer {ours} with {sorted(self.fields)}"
            )
        self.obs.zero_()
        self.obs[: len(state["obs"])] = _device_obs(state["obs"], self.obs.device)
        arrays = {name: state[name] for name in ("episode_start", *_TRANSITION_ARRAYS)}
        for name, value in [*arrays.items(), *state["fields"].items()]:
            full = self.fields[name] if name in self.fields else getattr(self, name)
            full[...] = 0
            full[: len(value)] = value
        self.n_obs, self.n_transitions, self.oldest = state["counters"]


_TRANSITION_ARRAYS = ("obs_index", "action", "reward", "terminated")


def _device_obs(obs: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """Observations as the store keeps them, on `device`: frames (N, H, W, 3) uint8 as (N, 3, H,
    W), so that a gathered stack (B, k, 3, H, W) is already the encoders' (B, 3k, H, W); states
    (N, D) as they are. Each frame is kept once: obs, next_obs and every stack index into it."""
    tensor = torch.as_tensor(np.require(obs, requirements="W"), device=device)  # no read-only views
    return tensor.permute(0, 3, 1, 2).contiguous() if tensor.ndim == 4 else tensor.contiguous()


def _host_layout(obs: torch.Tensor) -> torch.Tensor:
    """A view of stored observations in the env's layout: frames (N, H, W, 3), states (N, D)."""
    return obs.permute(0, 2, 3, 1) if obs.ndim == 4 else obs


def _host_obs(obs: torch.Tensor) -> np.ndarray:
    """The inverse of `_device_obs`: the env's layout in host memory (a resume state's format)."""
    return _host_layout(obs).cpu().numpy().copy()


class ReplayBuffer:
    """Offline part (fixed, from a dataset) + online part (a ring of `capacity` observations).

    Online use: `begin_episode(o_0)` after each reset, then `add(a_t, r_t, o_{t+1}, terminated)`
    after each step. `obs_shape` is one observation as the env gives it: (H, W, 3) uint8 frames or
    (D,) states. The fields are the offline data's (or `fields`, for a buffer without offline
    data). How batches are drawn is fixed here: `offline_fraction` of each batch from the offline
    part, its rows from `offline_pool(update, rng)` when given (else uniformly).
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
        offline_fraction: float = 0.0,
        offline_pool: OfflinePool | None = None,
        fields: Sequence[FieldSpec] = (),
        device: torch.device | str = "cpu",
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
        if not 0.0 <= offline_fraction <= 1.0:
            raise ValueError(f"offline_fraction must be in [0, 1], got {offline_fraction}")
        if offline is not None and fields:
            raise ValueError("fields come from the offline data; pass `fields` only without it")
        self.kind, self.obs_shape, self.action_dim = obs, tuple(obs_shape), action_dim
        self.offline_fraction, self.offline_pool = offline_fraction, offline_pool
        k = frame_stack if obs == "pixels" else 1  # states need no stacking
        dtype = torch.uint8 if obs == "pixels" else torch.float32
        self.specs = tuple(offline.specs if offline is not None else fields)
        self.device = torch.device(device)
        self.online = TransitionStore(
            self.obs_shape, dtype, action_dim, capacity, k, self.specs, self.device
        )
        self.offline: TransitionStore | None = None
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
            self.offline = TransitionStore.from_offline(offline, k, self.device)
        self._episode_open = False

    def online_state(self) -> dict[str, Any]:
        """The online part (what training added), for a resumable training's resume state; the
        offline part is rebuilt from its dataset."""
        return {**self.online.state(), "episode_open": self._episode_open}

    def load_online_state(self, state: dict[str, Any]) -> None:
        self.online.load_state(state)
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
        **values: Any,
    ) -> None:
        """Store the step from the last observation to `next_obs`. `terminated` only: pass False
        on truncation (the state still has a future). `values`: per-transition fields of this
        step (e.g. `a_v=..., has_label=True`); the others get their fill value."""
        if not self._episode_open:
            raise RuntimeError("call begin_episode(first observation) before add()")
        known = {s.name for s in self.specs if s.per == "transition"}
        if set(values) - known:
            raise ValueError(
                f"add() got {sorted(set(values) - known)}; this buffer's per-transition fields "
                f"are {sorted(known)}"
            )
        self.online.add_obs(np.asarray(next_obs), first=False)
        self.online.add_transition(np.asarray(action), float(reward), bool(terminated), values)

    def sample(
        self, batch_size: int, rng: np.random.Generator, update: int = 0
    ) -> dict[str, torch.Tensor]:
        """round(batch_size * offline_fraction) rows from the offline part (from the pool that
        `offline_pool(update, rng)` names, if any), the rest online; all rows from one part when
        the other is empty. Uniform with replacement within a part. Returns tensors on the
        buffer's device: obs / next_obs (B, 3k, H, W) uint8 or (B, D) float32, action (B, A),
        reward, done (B,) float32, offline (B,) bool, part (B,) int64 (the dataset directory of an
        offline row: 0 the env's dataset, k >= 1 a labelling round's part, the agent's own
        transitions; -1 online), and every declared field (B, *shape)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        pool = self.offline_pool(update, rng) if self.offline_pool is not None else None
        n_off_avail, n_on_avail = self.offline_size, self.online_size
        if n_off_avail == 0 and n_on_avail == 0:
            raise ValueError("the replay buffer is empty (no offline data, no online steps)")
        if n_off_avail == 0:
            n_off = 0
        elif n_on_avail == 0:
            n_off = batch_size
        else:
            n_off = round(batch_size * self.offline_fraction)
        parts = []
        if n_off:
            parts.append((self.offline.sample(n_off, rng, pool), True))  # type: ignore[union-attr]
        if batch_size - n_off:
            parts.append((self.online.sample(batch_size - n_off, rng), False))
        batch = {
            key: torch.cat([p[key] for p, _ in parts])
            if key in ("obs", "next_obs")  # tensors already where the buffer lives
            else torch.as_tensor(np.concatenate([p[key] for p, _ in parts]), device=self.device)
            for key in parts[0][0]
        }
        offline = np.concatenate([np.full(len(p["reward"]), o) for p, o in parts])
        batch["offline"] = torch.as_tensor(offline, device=self.device)
        return batch
