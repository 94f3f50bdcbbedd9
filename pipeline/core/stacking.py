"""Frame stacking, the one rule (it happens at load time, never on disk): the input at step t is
the frames t-k+1 .. t of its episode, oldest first, with the episode's first frame repeated where
t-k+1 falls before it (DrQ / SAC-AE padding; ERPv table 6: k = 3).

`stack_window` is the rule on indices; the replay buffer applies it to stored frames, and
`FrameStacker` to a stream of frames (acting, or reading shards in order).
"""

from __future__ import annotations

import numpy as np


def stack_window(index: np.ndarray, episode_start: np.ndarray, k: int) -> np.ndarray:
    """Indices (B,) of the newest frames and of their episodes' first frames -> (B, k) indices of
    the k frames to stack, oldest first."""
    if k < 1:
        raise ValueError(f"frame_stack must be >= 1, got {k}")
    offsets = np.arange(-(k - 1), 1)
    return np.maximum(index[:, None] + offsets[None, :], episode_start[:, None])


def to_channels(frames: np.ndarray) -> np.ndarray:
    """(..., k, H, W, 3) uint8, oldest first -> (..., 3k, H, W): the encoders' channel layout."""
    *lead, k, h, w, c = frames.shape
    moved = np.moveaxis(frames, -1, -3)  # (..., k, 3, H, W)
    return np.ascontiguousarray(moved).reshape(*lead, k * c, h, w)


class FrameStacker:
    """`stack_window` over a stream: `reset(o_0)` at each episode's first frame, then `step(o_t)`.
    Both return the last k frames, (k, ...) oldest first; for an agent's input (`obs_kind`):
    `pixels` in the encoders' layout (3k, H, W), `state` the state itself (states are not
    stacked), as the replay buffer samples them."""

    def __init__(self, k: int, obs_kind: str | None = None) -> None:
        if k < 1:
            raise ValueError(f"frame_stack must be >= 1, got {k}")
        if obs_kind not in (None, "pixels", "state"):
            raise ValueError(f"obs_kind must be 'pixels', 'state' or None, got {obs_kind!r}")
        self.k = 1 if obs_kind == "state" else k
        self.obs_kind = obs_kind
        self._recent: list[np.ndarray] = []  # the episode's last k frames
        self._t = -1  # the newest frame's step in its episode

    def reset(self, obs: np.ndarray) -> np.ndarray:
        self._recent, self._t = [], -1
        return self.step(obs)

    def step(self, obs: np.ndarray) -> np.ndarray:
        self._recent = [*self._recent[len(self._recent) - self.k + 1 :], obs]
        self._t += 1
        # the kept frames are steps t - len + 1 .. t of the episode: the window indexes into them
        first_kept = self._t - len(self._recent) + 1
        window = stack_window(np.array([self._t]), np.array([0]), self.k)[0] - first_kept
        if self.obs_kind == "state":
            return np.asarray(obs, dtype=np.float32)
        stacked = np.stack([self._recent[i] for i in window])
        return to_channels(stacked) if self.obs_kind == "pixels" else stacked
