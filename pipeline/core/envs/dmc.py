"""dm_control suite tasks behind the gymnasium API."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pipeline.core.envs.gl import prepare_headless_gl

# dm_control's own limit for every shipped suite task: 1000 physics control steps.
DMC_DEFAULT_EPISODE_STEPS = 1000


class DMCEnv(gym.Env):
    """One dm_control suite task (`domain-task`) as a gymnasium env.

    Native observation: the task's observation dict flattened into a float32 vector (the usual
    state-SAC input). `render()` draws the frame at the configured size, so nothing is resized.
    `terminated` is dm_control's discount-0 end; the step limit gives `truncated`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        name: str,
        image_size: int,
        max_episode_steps: int | None,
        *,
        quote_observation: bool = False,
    ) -> None:
        prepare_headless_gl()  # before dm_control picks its GL back end at import
        from dm_control import suite

        domain, task = name.split("-", 1)
        # Our own step counter does the truncation, so the suite's time limit is lifted.
        self._env = suite.load(domain, task, task_kwargs={"time_limit": float("inf")})
        self._limit = max_episode_steps or DMC_DEFAULT_EPISODE_STEPS
        self._size = image_size
        # a brought task also quotes its flattened observation: its state from a context
        self._quote_observation = quote_observation
        self._camera = 2 if domain == "quadruped" else 0  # DrQ / RAD convention
        self._steps = 0
        spec = self._env.action_spec()
        self.action_space = spaces.Box(
            spec.minimum.astype(np.float32), spec.maximum.astype(np.float32), dtype=np.float32
        )
        dim = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.render_mode = "rgb_array"
        self._last_obs: dict[str, np.ndarray] = {}

    def _flat(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        self._last_obs = observation
        return np.concatenate(
            [np.asarray(v, dtype=np.float32).ravel() for v in observation.values()]
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._env.task.random.seed(seed)  # the task's RandomState draws the initial state
        self._steps = 0
        ts = self._env.reset()
        return self._flat(ts.observation), {}

    def step(self, action):
        ts = self._env.step(np.asarray(action, dtype=np.float64))
        self._steps += 1
        terminated = bool(ts.last() and ts.discount == 0.0)
        truncated = not terminated and self._steps >= self._limit
        return self._flat(ts.observation), float(ts.reward or 0.0), terminated, truncated, {}

    def render(self) -> np.ndarray:
        return self._env.physics.render(self._size, self._size, camera_id=self._camera)

    def context(self) -> dict[str, Any]:
        """The physics state (qpos, qvel) and the task's named observations."""
        physics = self._env.physics
        ctx: dict[str, Any] = {
            "qpos": physics.data.qpos.tolist(),
            "qvel": physics.data.qvel.tolist(),
        }
        for key, value in self._last_obs.items():
            ctx[key] = np.asarray(value).tolist()
        if self._quote_observation:
            ctx["observation"] = self._flat(self._last_obs).astype(np.float64).tolist()
        return ctx

    def close(self) -> None:
        self._env.close()


# Adapters for ObservationContract (the env passed in is the wrapped stack; DMCEnv is at its base).
def dmc_frame(env: gym.Env, obs: Any) -> np.ndarray:
    return env.unwrapped.render()


def dmc_state(env: gym.Env, obs: Any) -> np.ndarray:
    return obs


def dmc_context(env: gym.Env, obs: Any) -> dict[str, Any]:
    return env.unwrapped.context()


# The suite's observation keys of each shipped task, in the order DMCEnv flattens them: the state
# observation is these context entries concatenated (tests/teach/test_policy_teacher.py checks both).
DMC_STATE_KEYS: dict[str, tuple[str, ...]] = {
    "cartpole-swingup": ("position", "velocity"),
    "cheetah-run": ("position", "velocity"),
    "walker-walk": ("orientations", "height", "velocity"),
    "ball_in_cup-catch": ("position", "velocity"),
    "reacher-easy": ("position", "to_target", "velocity"),
}


def dmc_state_from_context(env_id: str, ctx: dict[str, Any]) -> np.ndarray:
    """`dmc_state` rebuilt from `dmc_context`: the task's named observations, flattened in the
    suite's order (the context quotes each one whole, beside qpos and qvel)."""
    if env_id not in DMC_STATE_KEYS:
        raise KeyError(f"the observation keys of dm_control task {env_id}")
    return np.concatenate(
        [np.asarray(ctx[key], dtype=np.float32).ravel() for key in DMC_STATE_KEYS[env_id]]
    )


def dmc_task_problem(target: str, where: str) -> str | None:
    """Why `target` (`domain-task`) is no dm_control suite task, naming the closest ones; None
    when it is one. `where`: its params key, for the message."""
    import difflib

    from dm_control import suite

    domain, _, task = target.partition("-")
    if (domain, task) in suite.ALL_TASKS:
        return None
    known = [f"{d}-{t}" for d, t in suite.ALL_TASKS]
    close = difflib.get_close_matches(target, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(known))}"
    return f"{where}: {target!r} is no dm_control suite task; {hint}"
