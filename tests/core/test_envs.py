import gymnasium as gym
import numpy as np
import pytest

from pipeline.core.envs import CONTEXT, KNOWN_ENVS, PIXELS, STATE, UnknownEnvError, make_env
from pipeline.core.envs.wrappers import ActionRepeat
from tests.conftest import env_cfg

CONTEXT_KEYS = {
    "MountainCar-v0": {"position", "velocity"},
    "MountainCarContinuous-v0": {"position", "velocity"},
    "CarRacing-v3": {"speed", "steering", "angular_velocity"},
    "cartpole-swingup": {"qpos", "qvel", "position", "velocity"},
    "cheetah-run": {"qpos", "qvel", "position", "velocity"},
    "walker-walk": {"qpos", "qvel", "orientations", "height", "velocity"},
    "ball_in_cup-catch": {"qpos", "qvel", "position", "velocity"},
    "reacher-easy": {"qpos", "qvel", "position", "to_target", "velocity"},
    "highway-hw": {"speed", "yaw", "lane", "lane_offset", "gap_ahead", "crashed"},
    # need a CARLA server (tests/core/test_driving.py covers what needs none)
    "carla-hw": {"speed", "yaw"},
    "carla-jw": {"speed", "yaw"},
}
RUNS_HERE = [e for e, info in KNOWN_ENVS.items() if info.family != "carla"]


def test_every_shipped_env_has_its_contract_listed_here():
    assert set(CONTEXT_KEYS) == set(KNOWN_ENVS)


@pytest.mark.parametrize("env_id", RUNS_HERE)
def test_env_contract(env_id):
    size = 48
    env = make_env(env_id, env_cfg(image_size=size, action_repeat=2, max_episode_steps=None))
    try:
        obs, info = env.reset(seed=3)
        assert set(obs) == {PIXELS, STATE}
        assert obs[PIXELS].shape == (size, size, 3) and obs[PIXELS].dtype == np.uint8
        assert obs[PIXELS].std() > 0  # a real rendered frame, not a blank buffer
        assert obs[STATE].dtype == np.float32
        assert env.observation_space.contains(obs)
        assert set(info[CONTEXT]) == CONTEXT_KEYS[env_id]
        env.action_space.seed(0)
        for _ in range(3):
            obs, reward, _, _, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            assert isinstance(float(reward), float)
            assert set(info[CONTEXT]) == CONTEXT_KEYS[env_id]
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["MountainCar-v0", "CarRacing-v3", "cartpole-swingup"])
def test_same_seed_same_episode(env_id):
    def rollout(seed):
        env = make_env(env_id, env_cfg())
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(0)
        frames = [obs[PIXELS]]
        for _ in range(5):
            frames.append(env.step(env.action_space.sample())[0][PIXELS])
        env.close()
        return np.stack(frames)

    a, b = rollout(7), rollout(7)
    np.testing.assert_array_equal(a, b)


def test_without_state_only_pixels():
    env = make_env("cartpole-swingup", env_cfg(include_state=False))
    obs, _ = env.reset(seed=0)
    assert set(obs) == {PIXELS}
    env.close()


def test_max_episode_steps_counts_env_steps():
    env = make_env("MountainCar-v0", env_cfg(action_repeat=4, max_episode_steps=10))
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(1)
        done = terminated or truncated
        steps += 1
    assert truncated and steps == 3  # 10 env steps at repeat 4: 4 + 4 + 2


def test_dmc_episode_ends_at_1000_env_steps():
    env = make_env(
        "cartpole-swingup", env_cfg(action_repeat=8, max_episode_steps=None, image_size=16)
    )
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
        assert not terminated
        steps += 1
    assert steps == 125  # 1000 / 8, as in RAD's cartpole setting


class _CountingEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, end_after: int):
        self.end_after, self.calls = end_after, 0

    def reset(self, *, seed=None, options=None):
        self.calls = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.calls += 1
        return np.zeros(1, np.float32), 1.0, self.calls >= self.end_after, False, {}


def test_action_repeat_sums_rewards_and_stops_at_the_end():
    env = ActionRepeat(_CountingEnv(end_after=100), repeat=4)
    env.reset()
    assert env.step(0)[1] == 4.0
    env = ActionRepeat(_CountingEnv(end_after=2), repeat=4)
    env.reset()
    _, reward, terminated, _, _ = env.step(0)
    assert reward == 2.0 and terminated and env.unwrapped.calls == 2


def _carracing_episode(frames: bool, max_episode_steps: int, agent_steps: int) -> list:
    """Each agent step's (pixels, state, reward, terminated, truncated, context) of one CarRacing
    episode at action repeat 4, with its frames drawn only when seen or (as gymnasium does) at
    every step."""
    env = make_env("CarRacing-v3", env_cfg(action_repeat=4, max_episode_steps=max_episode_steps))
    if not frames:
        env.env.frames = None  # the ActionRepeat under the contract
    obs, info = env.reset(seed=3)
    env.action_space.seed(0)
    steps = [(obs[PIXELS], obs[STATE], 0.0, False, False, info[CONTEXT])]
    for _ in range(agent_steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        steps.append((obs[PIXELS], obs[STATE], reward, terminated, truncated, info[CONTEXT]))
        if terminated or truncated:
            break
    env.close()
    return steps


@pytest.mark.parametrize("max_episode_steps", [None, 30])  # 30: it ends inside a repeat
def test_carracing_draws_only_the_frames_it_shows_and_shows_the_same(max_episode_steps):
    """At action repeat 4 CarRacing's own step drew every repeated step's frame and three in
    four were thrown away: the steps before the last skip it, one that ends the episode draws
    it after, and the episode is the same bytes as when every frame is drawn."""
    from pipeline.core.envs.gym_envs import CarRacingFrames

    env = make_env("CarRacing-v3", env_cfg(action_repeat=4))
    assert isinstance(env.env.frames, CarRacingFrames)
    env.close()
    lean = _carracing_episode(True, max_episode_steps, agent_steps=12)
    full = _carracing_episode(False, max_episode_steps, agent_steps=12)
    assert len(lean) == len(full) == (9 if max_episode_steps else 13)
    assert full[-1][4] == (max_episode_steps is not None)  # 30 env steps: truncated at step 8
    for a, b in zip(lean, full, strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert a[2:] == b[2:]
    assert len({frame.tobytes() for frame, *_ in lean}) > 1  # the car moved: frames differ


def test_the_carracing_frames_benchmark_prints_both_rates_and_agrees(capsys):
    from benchmarks.carracing_frames import main

    main(["--episodes", "1", "--steps", "6"])
    out = capsys.readouterr().out
    assert "every repeated step drawn:" in out and "drawn only when seen:" in out
    assert "same pixels and rewards: True" in out


def test_unknown_env_id_is_a_clear_error():
    with pytest.raises(
        UnknownEnvError, match=r"unknown env id 'Pong-v5'; known env ids: MountainCar-v0"
    ):
        make_env("Pong-v5", env_cfg())


@pytest.mark.slow  # a fresh interpreter renders dm_control, then imports triton: 7-9 s
def test_dmc_rendering_and_triton_coexist_in_one_process():
    """Importing triton after an EGL context segfaulted (two LLVMs); make_env guards against it."""
    import subprocess
    import sys

    code = (
        "from pipeline.core.config import EnvConfig\n"
        "from pipeline.core.envs import make_env\n"
        "env = make_env('cartpole-swingup', EnvConfig(image_size=16, action_repeat=1, max_episode_steps=None, include_state=False))\n"
        "env.reset(seed=0)\n"
        "import transformers.generation.continuous_batching.cache  # imports triton\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
