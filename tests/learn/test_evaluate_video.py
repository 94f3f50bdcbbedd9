"""`evaluate` records its first episodes as GIFs: the same episodes it scores (the numbers do not
change with recording on or off), the same bytes on a rerun, and frames that show the agent move."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image, ImageChops

import stages.evaluate
from pipeline.core.config import ConfigError, parse_params
from pipeline.core.envs import make_env
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.evaluation import Policy, Recorder, encode_gif, eval_metrics, evaluate_policy
from tests.conftest import env_cfg, tiny_params_dict, write_params

CARTPOLE = "cartpole-swingup"


def _swinging(space: gym.spaces.Box) -> Policy:
    """A deterministic state policy that pushes the cart one way then the other."""

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.clip(np.sin(3.0 * obs["state"][: space.shape[0]]), space.low, space.high)

    return Policy(act, "state", {"env": CARTPOLE})


def _frames(gif: bytes | Path) -> list[np.ndarray]:
    image = Image.open(io.BytesIO(gif) if isinstance(gif, bytes) else gif)
    frames = []
    for i in range(image.n_frames):
        image.seek(i)
        frames.append(np.asarray(image.convert("RGB")))
    return frames


@pytest.mark.parametrize("env_id", [CARTPOLE, "MountainCar-v0"])
def test_recording_changes_no_number(env_id):
    """A state agent's recorded episodes are played in an env that renders: same seeds, same
    actions, same returns and lengths as without recording."""
    cfg = env_cfg(max_episode_steps=15)
    with make_env(env_id, cfg, pixels=False) as env:
        space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        policy = Policy(lambda obs: int(obs["state"][1] > 0) * 2, "state", {"env": env_id})
    else:
        policy = Policy(_swinging(space).act, "state", {"env": env_id})
    off = evaluate_policy(policy, env_id, cfg, 3, seed=7)
    record = Recorder(episodes=2)
    on = evaluate_policy(policy, env_id, cfg, 3, seed=7, record=record)
    assert on == off
    # the first two episodes, each from its first observation on: length + 1 frames
    assert [len(clip) for clip in record.clips] == [n + 1 for n in off.lengths[:2]]
    assert record.clips[0][0].shape == (cfg.image_size, cfg.image_size, 3)


def test_the_median_episode_is_recorded_as_it_was_played():
    """`record_which: median` replays, from its seed, the episode whose return is the median
    (the lower middle one of an even count): the clip is that episode, frame for frame as a
    `first` recorder sees it when that episode comes first, and the numbers are unchanged."""
    from pipeline.learn.evaluation import median_episodes

    assert median_episodes([5.0, -3.0, 9.0, 1.0], 1) == [3]  # sorted -3, 1, 5, 9: lower middle 1
    assert median_episodes([5.0, -3.0, 9.0, 1.0], 2) == [0, 3]
    assert median_episodes([2.0, 2.0, 7.0], 1) == [0]  # a tie goes to the earlier episode
    cfg = env_cfg(max_episode_steps=15)
    with make_env(CARTPOLE, cfg, pixels=False) as env:
        policy = Policy(_swinging(env.action_space).act, "state", {"env": CARTPOLE})
    off = evaluate_policy(policy, CARTPOLE, cfg, 5, seed=7)
    record = Recorder(episodes=1, which="median")
    on = evaluate_policy(policy, CARTPOLE, cfg, 5, seed=7, record=record)
    assert on == off and len(set(off.returns)) > 1
    (median,) = median_episodes(off.returns, 1)
    assert record.clip_episodes == [median]
    alone = Recorder(episodes=1)  # the same episode played first, from the same seed
    evaluate_policy(policy, CARTPOLE, cfg, 1, seed=7 + median, record=alone)
    assert len(record.clips[0]) == len(alone.clips[0]) == off.lengths[median] + 1
    for a, b in zip(record.clips[0], alone.clips[0], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_median_replay_stops_when_its_clip_is_full():
    """The replay's return is known already: once `max_frames` frames are kept, it stops
    rather than rendering the rest of the episode, and the clip is the same frames."""
    cfg = env_cfg(max_episode_steps=15)
    with make_env(CARTPOLE, cfg, pixels=False) as env:
        policy = Policy(_swinging(env.action_space).act, "state", {"env": CARTPOLE})
    whole = Recorder(episodes=1, which="median")
    evaluate_policy(policy, CARTPOLE, cfg, 3, seed=7, record=whole)
    assert len(whole.clips[0]) == 16
    cut = Recorder(episodes=1, which="median", max_frames=5)
    played = []
    real_see = cut.see
    cut.see = lambda obs: (played.append(1), real_see(obs))  # type: ignore[method-assign]
    off = evaluate_policy(policy, CARTPOLE, cfg, 3, seed=7, record=cut)
    assert len(played) == 5  # the first observation and 4 steps, then the replay stops
    assert cut.clip_episodes == whole.clip_episodes and off.lengths == [15, 15, 15]
    for a, b in zip(cut.clips[0], whole.clips[0][:5], strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_evaluation_std_is_the_sample_std_and_its_metrics_say_so():
    """`return_std` is ddof 1 over the episodes, as teacher_eval's (the two sit side by side in
    the reports); one episode has no spread to estimate: 0.0, as there."""
    cfg = env_cfg(max_episode_steps=15)
    with make_env(CARTPOLE, cfg, pixels=False) as env:
        policy = Policy(_swinging(env.action_space).act, "state", {"env": CARTPOLE})
    result = evaluate_policy(policy, CARTPOLE, cfg, 3, seed=7)
    assert len(set(result.returns)) > 1  # the episodes differ, so the ddof shows
    assert result.return_std == pytest.approx(np.std(result.returns, ddof=1))
    assert result.return_std != pytest.approx(np.std(result.returns))
    assert evaluate_policy(policy, CARTPOLE, cfg, 1, seed=7).return_std == 0.0
    metrics = eval_metrics(result, {"env": CARTPOLE, "method": "sac", "steps": 10})
    assert metrics["std_ddof"] == 1 and metrics["return_std"] == result.return_std


def test_a_pixel_agent_is_recorded_from_what_it_saw():
    """A pixel agent's env renders already: the clip is the frames the agent acted on."""
    cfg = env_cfg(max_episode_steps=12)
    seen: list[np.ndarray] = []

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        seen.append(obs["pixels"].copy())
        return np.array([1.0 if len(seen) % 6 < 3 else -1.0], np.float32)

    policy = Policy(act, "pixels", {"env": CARTPOLE})
    record = Recorder(episodes=1, every=2, max_frames=4)
    result = evaluate_policy(policy, CARTPOLE, cfg, 2, seed=0, record=record)
    assert result.lengths == [12, 12] and len(record.clips) == 1
    # every second agent step, capped at 4 frames: the observations of steps 0, 2, 4, 6
    assert len(record.clips[0]) == 4
    for frame, observed in zip(record.clips[0], seen[0:8:2], strict=True):
        np.testing.assert_array_equal(frame, observed)


def test_gif_opens_with_several_moving_frames_and_the_same_bytes_twice():
    cfg = env_cfg(max_episode_steps=30)
    with make_env(CARTPOLE, cfg, pixels=False) as env:
        policy = _swinging(env.action_space)
    clips = []
    for _ in range(2):  # a rerun records the same frames and encodes the same bytes
        record = Recorder(episodes=1, every=3)
        evaluate_policy(policy, CARTPOLE, cfg, 1, seed=3, record=record)
        clips.append(record.clips[0])
    gif = encode_gif(clips[0], fps=15, scale=2)
    assert gif == encode_gif(clips[1], fps=15, scale=2)
    frames = _frames(gif)
    assert len(frames) == 11  # steps 0, 3, ..., 30
    assert frames[0].shape == (2 * cfg.image_size, 2 * cfg.image_size, 3)
    assert Image.open(io.BytesIO(gif)).info["duration"] == 70  # 1/15 s in 10 ms units
    moved = [not np.array_equal(a, b) for a, b in itertools.pairwise(frames)]
    assert sum(moved) >= len(moved) - 1, "the cart moves between most recorded frames"
    # no dithering: the decoded frame is the recorded one, up to the 256-colour palette
    small = Image.fromarray(frames[5]).resize(clips[0][5].shape[:2][::-1], Image.Resampling.NEAREST)
    diff = np.asarray(ImageChops.difference(small, Image.fromarray(clips[0][5])))
    assert diff.mean() < 4


def _sac_checkpoint(tmp_path: Path) -> Path:
    """A tiny untrained state SAC for cartpole (5 state values, 1 action): it acts, and moves."""
    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, transition_hidden_dim=8)
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = SACAgent((5,), space, SACParams(network=network))
    out = tmp_path / "agent"
    agent.save(out, {"run": "r", "env": CARTPOLE, "method": "sac", "obs": "state", "steps": 0})
    return out


def _evaluate(tmp_path: Path, agent: Path, name: str, videos: bool, **evaluate) -> Path:
    raw = tiny_params_dict((CARTPOLE,))
    raw["env"][CARTPOLE]["max_episode_steps"] = 10
    raw["evaluate"] = {"episodes": 2, "seed": 5, **evaluate}
    params = write_params(tmp_path / f"{name}.yaml", raw)
    out = tmp_path / f"{name}.json"
    argv = ["--params", str(params), "--agent", str(agent), "--out", str(out)]
    if videos:
        argv += ["--videos", str(tmp_path / f"{name}_videos")]
    assert stages.evaluate.main(argv) == 0
    return out


def test_stage_writes_the_gifs_beside_the_same_metrics(tmp_path, capsys):
    agent = _sac_checkpoint(tmp_path)
    plain = _evaluate(tmp_path, agent, "plain", videos=False)
    capsys.readouterr()
    recorded = _evaluate(tmp_path, agent, "rec", videos=True, record_episodes=2, record_scale=1)
    summary = capsys.readouterr().out
    assert recorded.read_bytes() == plain.read_bytes()  # recording changes no metric
    assert json.loads(recorded.read_text())["episodes"] == 2
    gifs = sorted((tmp_path / "rec_videos").iterdir())
    assert [p.name for p in gifs] == ["episode-0.gif", "episode-1.gif"]
    for path in gifs:  # the summary says where each one is
        assert str(path) in summary
    assert "seed 5" in summary and "seed 6" in summary
    frames = _frames(gifs[0])
    # 11 recorded frames (10 steps + the first observation); Pillow merges identical neighbours
    assert 2 <= len(frames) <= 11 and frames[0].shape == (32, 32, 3)
    assert any(not np.array_equal(frames[0], f) for f in frames[1:])  # the untrained agent moves
    first = gifs[0].read_bytes()
    # a rerun writes the same bytes, and one that records less removes the GIFs it did not make
    _evaluate(tmp_path, agent, "rec", videos=True, record_episodes=1, record_scale=1)
    assert [p.name for p in (tmp_path / "rec_videos").iterdir()] == ["episode-0.gif"]
    assert (tmp_path / "rec_videos" / "episode-0.gif").read_bytes() == first
    # 0: recording off, the directory (DVC's output) is there and empty
    _evaluate(tmp_path, agent, "off", videos=True, record_episodes=0)
    assert list((tmp_path / "off_videos").iterdir()) == []


def test_more_recorded_than_played_episodes_is_refused_by_name():
    raw = tiny_params_dict()
    raw["evaluate"] = {"episodes": 2, "seed": 0, "record_episodes": 3}
    with pytest.raises(ConfigError, match="record_episodes"):
        parse_params(raw)


def test_vlmrl_play_plays_records_and_prints_what_evaluate_scores(tmp_path, capsys):
    """`vlmrl-play` on demand: the returns the evaluate stage scores for the same seeds, a GIF
    per episode (or the median one alone), named by episode."""
    from pipeline.learn.play import main as play

    agent = _sac_checkpoint(tmp_path)
    metrics = json.loads(_evaluate(tmp_path, agent, "ev", videos=False).read_text())
    params = tmp_path / "ev.yaml"
    out = tmp_path / "play"
    capsys.readouterr()
    argv = [str(agent), "--params", str(params), "--episodes", "2", "--seed", "5", "--scale", "1"]
    assert play([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"return {metrics['return_mean']:.1f} +- {metrics['return_std']:.1f}" in printed
    assert sorted(p.name for p in out.iterdir()) == ["episode-0.gif", "episode-1.gif"]
    assert len(_frames(out / "episode-0.gif")) >= 2
    assert play([*argv, "--out", str(tmp_path / "median"), "--record", "median"]) == 0
    assert len(list((tmp_path / "median").iterdir())) == 1
    assert play([str(tmp_path / "nothing"), "--params", str(params)]) == 2
    assert "agent.json does not exist" in capsys.readouterr().err


def test_the_env_is_rebuilt_from_a_dataset_alone(stage_one_dataset, tmp_path, capsys):
    """The dataset records its env's id and settings: `make_env(dataset)` builds it with the
    collected frame size and episode limit, and `vlmrl-play --dataset` plays an agent in it."""
    from pipeline.dataset.env import make_env as make_dataset_env
    from pipeline.learn.play import main as play

    dataset = stage_one_dataset / "ds"
    with make_dataset_env(dataset) as env:
        obs, _ = env.reset(seed=0)
        assert obs["pixels"].shape == (32, 32, 3)  # TINY_ENV's image_size, as collected
        steps = 0
        while True:
            steps += 1
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                break
        assert steps == 15  # the dataset's max_episode_steps
    network = NetworkParams(obs="state", hidden_dim=16, feature_dim=8, transition_hidden_dim=8)
    agent = SACAgent((2,), gym.spaces.Box(-1.0, 1.0, (1,), np.float32), SACParams(network=network))
    agent.save(tmp_path / "mcc", {"run": "r", "env": "MountainCarContinuous-v0", "method": "sac",
                                  "obs": "state", "steps": 0})  # fmt: skip
    argv = [str(tmp_path / "mcc"), "--dataset", str(dataset), "--episodes", "1"]
    assert play([*argv, "--record", "none"]) == 0
    assert "episode 0 (seed 0): return" in capsys.readouterr().out
    assert play([str(_sac_checkpoint(tmp_path)), "--dataset", str(dataset)]) == 2
    assert "acts in cartpole-swingup" in capsys.readouterr().err
