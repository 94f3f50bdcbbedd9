"""Behaviour policies that drive collection.

A behaviour is reset with each episode's seed and then asked for one action per step, given the
observation and info (pixels, state, context) the env returned. It answers the action and a tag
naming who chose it; the collector stores both and knows nothing else about the behaviour. So a
teacher-driven or RAE behaviour (ERPv D.1: alternating explorer and teacher phases) is one more
class here, with no change to the collector or the shard writer.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from pipeline.config import CollectConfig
from pipeline.envs import PIXELS, STATE


class Behaviour(Protocol):
    def reset(self, seed: int) -> None:
        """Start an episode; all randomness of the episode derives from `seed`."""

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        """Return (action, tag): an element of the action space and who chose it."""


class RandomBehaviour:
    """Uniform samples from the action space, seeded per episode."""

    tag = "random"

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space

    def reset(self, seed: int) -> None:
        self.action_space.seed(seed)

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        return self.action_space.sample(), self.tag


class CheckpointBehaviour:
    """A saved actor: a `torch.export` program (`torch.export.save`) mapping one observation
    batch to actions, deterministic at collection time.

    Input: `state` as float32 (1, n), or `pixels` as uint8 (1, 3, H, W).
    Output: continuous envs, an action (1, action_dim), clipped to the action bounds, because the
    env would clip it anyway and the stored action must be the one the env received; discrete
    envs, logits (1, n), of which the argmax is taken.
    """

    tag = "checkpoint"

    def __init__(self, path: str | Path, obs_key: str, action_space: spaces.Space) -> None:
        import torch

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint actor {path} does not exist")
        try:
            self._module = torch.export.load(path).module()
        except (RuntimeError, ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:
            raise ValueError(
                f"{path} is not a torch.export program (save actors with torch.export.save): {exc}"
            ) from exc
        self._torch = torch
        self.obs_key = obs_key
        self.action_space = action_space

    def reset(self, seed: int) -> None:
        self._torch.manual_seed(seed)  # for actors that sample; deterministic ones ignore it

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> tuple[Any, str]:
        torch = self._torch
        if self.obs_key not in obs:
            raise KeyError(
                f"checkpoint actor reads obs[{self.obs_key!r}] but the env returns {sorted(obs)}; "
                f"set env.<id>.include_state: true or collect.<id>.checkpoint_obs: pixels"
            )
        x = torch.from_numpy(np.ascontiguousarray(obs[self.obs_key]))
        x = x.permute(2, 0, 1) if self.obs_key == PIXELS else x.float()  # (3, H, W) or (n,)
        with torch.no_grad():
            out = self._module(x.unsqueeze(0))[0].numpy()
        if isinstance(self.action_space, spaces.Discrete):
            return int(out.argmax()) + int(self.action_space.start), self.tag
        low, high = self.action_space.low, self.action_space.high
        return np.clip(out.reshape(self.action_space.shape), low, high).astype(np.float32), self.tag


def make_behaviour(cfg: CollectConfig, action_space: spaces.Space) -> Behaviour:
    if cfg.behaviour == "random":
        return RandomBehaviour(action_space)
    if cfg.behaviour == "checkpoint":
        assert cfg.checkpoint is not None  # enforced by CollectConfig
        obs_key = STATE if cfg.checkpoint_obs == "state" else PIXELS
        return CheckpointBehaviour(cfg.checkpoint, obs_key, action_space)
    raise ValueError(f"unknown behaviour {cfg.behaviour!r}")
