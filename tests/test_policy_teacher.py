"""The state a policy teacher reads, rebuilt from a prompt's context
(`pipeline.envs.state_from_context`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.envs import CONTEXT, KNOWN_ENVS, STATE, make_env, state_from_context
from tests.conftest import env_cfg

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

LOCAL_ENVS = [env_id for env_id in KNOWN_ENVS if not env_id.startswith("carla-")]


# ---- the state a teacher can rebuild from the context ------------------------------------------


@pytest.mark.parametrize("env_id", LOCAL_ENVS)
def test_state_from_context_is_the_envs_own_state(env_id):
    """Over a few random steps, the state rebuilt from the context (after the JSON round trip
    that stores it in a rollout) is the env's state observation, bit for bit."""
    env = make_env(env_id, env_cfg(image_size=16, max_episode_steps=None), pixels=False)
    obs, info = env.reset(seed=3)
    env.action_space.seed(3)
    for _ in range(4):
        context = json.loads(json.dumps(info[CONTEXT]))
        rebuilt = state_from_context(env_id, context)
        assert rebuilt.dtype == np.float32
        np.testing.assert_array_equal(rebuilt, obs[STATE])
        obs, _, _, _, info = env.step(env.action_space.sample())
    if KNOWN_ENVS[env_id].family == "dmc":
        from pipeline.envs.dmc import DMC_STATE_KEYS

        spec = env.unwrapped._env.observation_spec()
        assert tuple(spec) == DMC_STATE_KEYS[env_id]  # the suite's order, which DMCEnv flattens
    env.close()


def test_carla_state_is_rebuilt_from_its_context():
    from pipeline.envs.carla_env import carla_context, carla_state

    ego = SimpleNamespace(
        get_velocity=lambda: SimpleNamespace(x=3.0, y=4.0, z=0.0),
        get_transform=lambda: SimpleNamespace(rotation=SimpleNamespace(yaw=12.5)),
    )
    env = SimpleNamespace(unwrapped=SimpleNamespace(ego=ego))
    for env_id in ("carla-hw", "carla-jw"):
        rebuilt = state_from_context(env_id, carla_context(env, None))
        np.testing.assert_array_equal(rebuilt, carla_state(env, None))
        np.testing.assert_array_equal(rebuilt, np.array([5.0, 12.5], np.float32))


def test_a_context_without_the_state_says_to_use_a_pixel_agent():
    with pytest.raises(ValueError, match=r"walker-walk: .*missing: orientations.*pixel agent"):
        state_from_context("walker-walk", {"qpos": [0.0], "qvel": [0.0]})
    with pytest.raises(ValueError, match=r"highway-hw: .*missing: speed"):
        state_from_context("highway-hw", {})
