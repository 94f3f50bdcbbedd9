import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal

from pipeline.core.stacking import FrameStacker
from pipeline.learn.agents.loop import train_off_policy
from pipeline.learn.agents.networks import Actor, PixelEncoder, make_encoder
from pipeline.learn.agents.off_policy import (
    NetworkParams,
    SACParams,
    sac_alpha_loss,
    soft_update,
)
from pipeline.learn.agents.replay import ReplayBuffer
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.evaluation import deployed, play_episodes
from tests.conftest import REPO
from tests.toy_envs import PointMass


def returns(env, agent, episodes: int, seed: int) -> list[float]:
    return play_episodes(env, deployed(agent), episodes, seed).returns


def small_cfg(obs: str = "state", **overrides) -> SACParams:
    network = NetworkParams(
        obs=obs, hidden_dim=64, feature_dim=16, transition_hidden_dim=32,
        encoder_layers=2, encoder_filters=8,
    )  # fmt: skip
    return SACParams(network=network, **{"batch_size": 64, **overrides})


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_pixel_encoder_output_shape_and_range():
    encoder = PixelEncoder((9, 84, 84))  # 3 stacked RGB frames, SAC-AE defaults
    frames = torch.randint(0, 256, (2, 9, 84, 84), dtype=torch.uint8)
    h = encoder(frames)
    assert h.shape == (2, 50) and h.abs().max() <= 1.0  # LayerNorm, then tanh
    assert make_encoder("state", (5,), feature_dim=7)(torch.zeros(3, 5)).shape == (3, 7)
    with pytest.raises(ValueError, match="too small"):
        PixelEncoder((3, 8, 8), num_layers=4)
    with pytest.raises(ValueError, match="'pixels' or 'state'"):
        make_encoder("rgb", (3, 8, 8))  # type: ignore[arg-type]


def test_stride_two_encoder_halves_every_map_and_matches_the_stride_one_values():
    """`encoder_stride: 2` (the CPU pixel preset): 64 -> 31 -> 15 -> 7 -> 3; the layout change
    (channels-last) gives the values of a plain NCHW conv stack."""
    encoder = PixelEncoder((9, 64, 64), num_layers=4, num_filters=8, feature_dim=5, stride=2)
    assert encoder.map_shape == (8, 3, 3) and encoder.fc.in_features == 8 * 3 * 3
    frames = torch.randint(0, 256, (4, 9, 64, 64), dtype=torch.uint8)
    x = frames.float() / 255.0
    for layer in encoder.convs:  # the reference: the same layers on a contiguous NCHW tensor
        x = layer(x.contiguous())
    torch.testing.assert_close(encoder.feature_map(frames.float() / 255.0), x)
    torch.testing.assert_close(encoder(frames), encoder.project(x))
    with pytest.raises(ValueError, match="stride"):
        PixelEncoder((9, 64, 64), stride=3)
    with pytest.raises(ValueError, match="too small"):
        PixelEncoder((9, 24, 24), num_layers=4, stride=2)


def test_device_setting_is_checked_and_auto_picks_the_cpu_without_a_gpu():
    from pipeline.learn.agents.off_policy import SACParams

    with pytest.raises(ValueError, match="not a torch device"):
        SACParams(device="gpu0")
    assert SACParams(device="cpu").torch_device() == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert SACParams().torch_device().type == expected


def test_actor_log_prob_is_the_squashed_gaussian_density():
    torch.manual_seed(0)
    actor = Actor(feature_dim=4, action_dim=2, hidden_dim=8)
    h = torch.randn(5, 4)
    torch.manual_seed(1)
    action, log_prob, mean = actor(h)
    torch.manual_seed(1)
    mu, log_std = actor.trunk(h).chunk(2, dim=-1)
    log_std = -10 + 0.5 * 12 * (torch.tanh(log_std) + 1)
    pre_tanh = mu + torch.randn_like(mu) * log_std.exp()
    expected = Normal(mu, log_std.exp()).log_prob(pre_tanh).sum(-1)
    expected -= torch.log(1 - torch.tanh(pre_tanh).pow(2) + 1e-6).sum(-1)
    torch.testing.assert_close(action, torch.tanh(pre_tanh))
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, torch.tanh(mu))
    deterministic, _, _ = actor(h, deterministic=True)
    torch.testing.assert_close(deterministic, mean)


def test_alpha_loss_and_polyak_by_hand():
    # eq. 11: E[-alpha (log pi + H_bar)]; alpha 0.5, log pi (-1, -3), H_bar = -|A| = -1
    loss = sac_alpha_loss(torch.tensor(0.5), torch.tensor([-1.0, -3.0]), -1.0)
    assert loss.item() == pytest.approx((0.5 * 2 + 0.5 * 4) / 2)
    target, online = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    for p, v in (
        (target.weight, 1.0),
        (target.bias, 0.0),
        (online.weight, 3.0),
        (online.bias, 2.0),
    ):
        torch.nn.init.constant_(p, v)
    soft_update(target, online, 0.25)
    assert target.weight.item() == pytest.approx(1.5) and target.bias.item() == pytest.approx(0.5)


def test_sac_learns_point_mass_quickly():
    env = PointMass()
    agent = SACAgent.for_env(env, small_cfg(start_steps=200, log_every=200), seed=0)
    buffer = ReplayBuffer("state", (1,), 1, 10_000)
    curve, logs = train_off_policy(env, agent, buffer, 1000, seed=0, progress=False)
    assert [step for step, _ in curve[:3]] == [20, 40, 60] and len(curve) == 50
    assert [row["step"] for row in logs] == [200, 400, 600, 800, 1000]
    assert {"critic_loss", "actor_loss", "alpha", "transition_loss", "reward_loss"} <= set(logs[-1])
    # a budget off the log interval still ends with a row at its last step (a round of 400
    # steps used to log its last row at 250, identical to a round of 300)
    short = SACAgent.for_env(env, small_cfg(start_steps=50, log_every=200), seed=0)
    _, short_logs = train_off_policy(
        env, short, ReplayBuffer("state", (1,), 1, 1000), 250, seed=0, progress=False
    )
    assert [row["step"] for row in short_logs] == [200, 250]
    rng = np.random.default_rng(0)

    class Random:
        obs_kind, frame_stack = "state", 1

        def act(self, obs, deterministic):
            return rng.uniform(-1, 1, 1)

    random_return = np.mean(returns(PointMass(), Random(), 10, seed=100))  # type: ignore[arg-type]
    learned = np.mean(returns(PointMass(), agent, 10, seed=100))
    assert random_return < -8 and learned > -4, (random_return, learned)  # optimum about -1
    assert logs[-1]["transition_loss"] < logs[1]["transition_loss"]  # DeepMDP's model learns too


def test_same_seed_same_run():
    def run():
        env = PointMass()
        cfg = small_cfg(batch_size=16, start_steps=40, log_every=40)
        agent = SACAgent.for_env(env, cfg, seed=3)
        buffer = ReplayBuffer("state", (1,), 1, 1000)
        return train_off_policy(env, agent, buffer, 120, seed=3, progress=False)

    assert run() == run()


@pytest.mark.parametrize("obs", ["state", "pixels"])
def test_saved_and_reloaded_agent_acts_the_same(tmp_path, obs):
    obs_shape = (3,) if obs == "state" else (16, 16, 3)
    space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    agent = SACAgent(obs_shape, space, small_cfg(obs), seed=1)
    # a few updates so that nothing is at its initial value
    buffer = ReplayBuffer(obs, obs_shape, 2, 100, frame_stack=3)
    rng = np.random.default_rng(0)
    first = rng.integers(0, 255, obs_shape).astype(np.uint8 if obs == "pixels" else np.float32)
    buffer.begin_episode(first)
    for _ in range(10):
        nxt = rng.integers(0, 255, obs_shape).astype(first.dtype)
        buffer.add(space.sample(), 1.0, nxt, False)
    for _ in range(4):
        agent.update(buffer.sample(8, rng))
    agent.save(tmp_path / "agent")
    loaded = SACAgent.load(tmp_path / "agent")
    stacker = FrameStacker(3, obs)
    x = stacker.reset(first)
    for _ in range(3):
        a, b = agent.act(x, deterministic=True), loaded.act(x, deterministic=True)
        np.testing.assert_array_equal(a, b)
        assert space.contains(a.astype(np.float32))
        x = stacker.step(rng.integers(0, 255, obs_shape).astype(first.dtype))
    assert loaded.alpha.item() == pytest.approx(agent.alpha.item())
    assert loaded.update_step == 4
    other = SACAgent(obs_shape, space, small_cfg(obs, gamma=0.9))
    with pytest.raises(ValueError, match="another config"):
        other.load_weights(tmp_path / "agent")
    with pytest.raises(ValueError, match=r"expects one observation of shape"):
        agent.act(np.zeros((4,), np.float32))


def test_rejects_discrete_actions_and_mismatched_observations():
    with pytest.raises(ValueError, match="continuous"):
        SACAgent((2,), gym.spaces.Discrete(3), small_cfg())
    with pytest.raises(ValueError, match="pixel observations are"):
        SACAgent((5,), gym.spaces.Box(-1, 1, (1,)), small_cfg("pixels"))
    with pytest.raises(ValueError, match=r"(?s)obs.*'pixels' or 'state'"):
        NetworkParams(obs="rgb")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lr"):
        SACParams.model_validate({"lr": 1.0})


def test_train_loop_on_a_pipeline_pixel_env():
    from pipeline.core.config import EnvConfig
    from pipeline.core.envs import make_env

    env = make_env(
        "MountainCarContinuous-v0",
        EnvConfig(image_size=16, action_repeat=1, max_episode_steps=15, include_state=True),
    )
    cfg = small_cfg("pixels", batch_size=8, start_steps=20, log_every=15)
    agent = SACAgent.for_env(env, cfg, seed=0)
    assert agent.input_shape == (9, 16, 16)
    # no offline data: the offline half of each batch falls to the online part
    buffer = ReplayBuffer("pixels", (16, 16, 3), 1, 100, frame_stack=3, offline_fraction=0.5)
    evaluations = []
    eval_env = make_env(
        "MountainCarContinuous-v0",
        EnvConfig(image_size=16, action_repeat=1, max_episode_steps=15, include_state=False),
    )

    def eval_fn(a):
        evaluations.append(1)
        return {"eval_return": float(np.mean(returns(eval_env, a, 1, seed=7)))}

    curve, logs = train_off_policy(env, agent, buffer, 45, seed=0, eval_fn=eval_fn, progress=False)
    assert [s for s, _ in curve] == [15, 30, 45] and len(evaluations) == 3
    assert "critic_loss" in logs[-1] and "eval_return" in logs[-1]
    env.close()


def test_agents_never_import_a_teacher():
    code = (
        "import sys, pipeline.learn.agents.loop, pipeline.learn.agents.off_policy, pipeline.learn.agents.sac, "
        "pipeline.learn.methods.erpv, pipeline.learn.methods.semore, pipeline.learn.critic, pipeline.learn.agents.replay, "
        "pipeline.learn.agents.resume; "
        "print(sorted(m for m in sys.modules if m.startswith('pipeline.teach.teachers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_sac_learns_pendulum():
    """Pendulum-v1 on states: random play scores about -1200; SAC passes -400 in 5k steps."""

    def make():
        env = gym.make("Pendulum-v1")
        return gym.wrappers.TransformObservation(
            env, lambda o: {"state": o.astype(np.float32)},
            gym.spaces.Dict({"state": env.observation_space}),
        )  # fmt: skip

    env = make()
    cfg = SACParams(
        network=NetworkParams(obs="state", hidden_dim=256, transition_hidden_dim=128),
        start_steps=500,
    )
    agent = SACAgent.for_env(env, cfg, seed=0)
    buffer = ReplayBuffer("state", (3,), 1, 100_000)
    train_off_policy(env, agent, buffer, 5000, seed=0, progress=False)
    assert np.mean(returns(make(), agent, 5, seed=100)) > -400
    assert math.isfinite(agent.alpha.item())
