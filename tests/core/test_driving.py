"""Driving scenes: ERPv's rewards, action semantics, spawn plans and sensor bookkeeping (no
server), the CARLA adapter's failure without a server, and the HighwayEnv stand-in end to end."""

import socket
import time

import numpy as np
import pytest

from pipeline.core.config import CarlaConfig, EnvConfig
from pipeline.core.envs import CONTEXT, PIXELS, make_env
from pipeline.core.envs.driving import (
    CAMERA_ATTRIBUTES,
    HighwayReward,
    JaywalkReward,
    SensorLog,
    control_from_action,
    spawn_plan,
)
from pipeline.teach.labels.tasks import parse_answer, render_prompt
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import tiny_params_dict, write_params


def _png(frame: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


BLANK = _png(np.zeros((8, 8, 3), np.uint8))


def test_rewards_are_eq_15_and_16_with_the_papers_coefficients():
    hw = HighwayReward()
    # 20 m/s for one 0.05 s tick, a 5,000 N s collision, steering 0.5
    assert hw(20.0, 0.05, 5000.0, -0.5) == pytest.approx(1.0 - 0.5 - 0.5)
    jw = JaywalkReward()
    assert jw(10.0, 0.05, 100.0, 2.0, 0.4) == pytest.approx(0.5 - 0.1 - 0.02 - 0.04)
    assert hw(0.0, 0.05, 0.0, 0.0) == 0.0


def test_throttle_at_or_below_zero_brakes():
    c = control_from_action(np.array([0.3, 0.6]))
    assert (c.steer, c.throttle, c.brake) == pytest.approx((0.3, 0.6, 0.0))
    c = control_from_action(np.array([-0.2, -0.4]))
    assert (c.steer, c.throttle, c.brake) == pytest.approx((-0.2, 0.0, 0.4))
    c = control_from_action(np.array([2.0, -3.0]))  # a VLM's out-of-range answer is clipped
    assert (c.steer, c.throttle, c.brake) == (1.0, 0.0, 1.0)
    assert control_from_action(np.array([0.0, 0.0])).brake == 0.0
    with pytest.raises(ValueError, match=r"\[steer, throttle\]"):
        control_from_action(np.array([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match=r"\[steer, throttle\]"):
        control_from_action(np.array([np.nan, 0.2]))


def test_spawn_plans_are_seeded_and_valid():
    hw = spawn_plan("hw", seed=7, n_spawn_points=30, ego_index=4)
    assert hw == spawn_plan("hw", seed=7, n_spawn_points=30, ego_index=4)
    assert hw != spawn_plan("hw", seed=8, n_spawn_points=30, ego_index=4)
    assert len(hw.vehicles) == 4 == len(set(hw.vehicles)) and 4 not in hw.vehicles
    assert all(0 <= i < 30 for i in hw.vehicles)
    jw = spawn_plan("jw", seed=7, n_spawn_points=30, ego_index=4)
    assert len(jw.pedestrians) == 3 and not jw.vehicles
    distances = [d for d, _, _ in jw.pedestrians]
    assert distances == sorted(distances) and all(20 <= d <= 120 for d in distances)
    assert all(side in (-1, 1) and 0 <= t < 200 for _, side, t in jw.pedestrians)
    with pytest.raises(ValueError, match="4 vehicles but the map has 2 free spawn points"):
        spawn_plan("hw", seed=0, n_spawn_points=3, ego_index=0)
    with pytest.raises(ValueError, match="unknown scenario"):
        spawn_plan("xx", seed=0, n_spawn_points=3, ego_index=0)


def test_sensor_log_drains_the_events_of_one_tick():
    log = SensorLog()
    log.on_collision((3.0, 4.0, 0.0))
    log.on_collision((0.0, 0.0, 1.0))
    log.on_lane_invasion(2)
    assert log.drain() == (6.0, 2.0)
    assert log.drain() == (0.0, 0.0) and log.collided and log.collision == 6.0


def test_camera_is_table_5():
    assert CAMERA_ATTRIBUTES["image_size_x"] == "128" and CAMERA_ATTRIBUTES["fov"] == "60"
    assert CAMERA_ATTRIBUTES["motion_blur_intensity"] == "0.45"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_without_a_server_carla_fails_within_the_timeout_naming_host_port_and_the_fix():
    from pipeline.core.envs.carla_env import CarlaUnavailableError

    port = _closed_port()
    cfg = EnvConfig(image_size=128, action_repeat=4, max_episode_steps=None, include_state=False,
                    carla=CarlaConfig(port=port, timeout_s=1.0))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(CarlaUnavailableError) as err:
        make_env("carla-hw", cfg)
    assert time.monotonic() - started < 15
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "CarlaUE4.sh -RenderOffScreen" in message


def test_the_collect_stage_reports_a_missing_server_in_one_line(tmp_path, capsys):
    """The stage prints the error's message (host:port and the fix) with status 2: no traceback."""
    from stages.collect import main

    port = _closed_port()
    raw = tiny_params_dict(("carla-hw",))
    raw["env"]["carla-hw"] = {"image_size": 128, "action_repeat": 4, "max_episode_steps": 10,
                              "include_state": False,
                              "carla": {"port": port, "timeout_s": 1.0}}  # fmt: skip
    params = write_params(tmp_path / "params.yaml", raw)
    code = main(["--params", str(params), "--env", "carla-hw", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith(f"error: no CARLA server answered at 127.0.0.1:{port}"), err
    assert len(err.strip().splitlines()) == 1


def test_where_the_server_runs_is_not_part_of_a_collection_fingerprint():
    base = dict(image_size=128, action_repeat=4, max_episode_steps=None, include_state=False)
    a = EnvConfig(**base, carla=CarlaConfig(host="10.0.0.1", port=2000))
    b = EnvConfig(**base, carla=CarlaConfig(host="gpu-7", port=3000, timeout_s=60))
    assert a.model_dump() == b.model_dump()
    assert a.model_dump() != EnvConfig(**base, carla=CarlaConfig(town="Town01")).model_dump()
    assert "carla" not in EnvConfig(**base).model_dump()  # other envs fingerprint as before


def test_carla_prompts_render_and_scripted_labels_refuse_carla_with_the_reason():
    space = {"type": "box", "low": [-1.0, -1.0], "high": [1.0, 1.0]}
    for env_id in ("carla-hw", "carla-jw"):
        prompt = render_prompt("action", env_id, space, BLANK, {"speed": 12.5, "yaw": 3.0})
        assert "12.50 m/s" in prompt.user or "12.50m/s" in prompt.user
        with pytest.raises(ValueError, match="label CARLA rollouts with a VLM"):
            ScriptedTeacher(1.0, 0).correct_text(prompt)


@pytest.fixture(scope="module")
def highway():
    # another pygame env first: it sets SDL_VIDEODRIVER=dummy, which blanks HighwayEnv's frames
    make_env("MountainCar-v0", EnvConfig(image_size=32, action_repeat=1, max_episode_steps=None,
                                         include_state=False)).close()  # fmt: skip
    env = make_env("highway-hw", EnvConfig(image_size=84, action_repeat=1, max_episode_steps=60,
                                           include_state=True))  # fmt: skip
    yield env
    env.close()


def test_highway_stand_in_frames_context_and_reward(highway):
    obs, info = highway.reset(seed=0)
    assert obs[PIXELS].shape == (84, 84, 3) and obs[PIXELS].std() > 5  # not a blank frame
    ctx = info[CONTEXT]
    assert ctx["speed"] > 0 and ctx["gap_ahead"] > 0 and ctx["crashed"] is False
    obs, reward, terminated, _, info = highway.step(np.array([0.2, 0.5], np.float32))
    speed = info[CONTEXT]["speed"]
    if not terminated:  # eq. 15 from the kinematics: v * dt - |steer| (no collision)
        assert reward == pytest.approx(speed * 0.2 - 0.2, rel=1e-5)


def test_highway_throttle_semantics(highway):
    speeds = {}
    for throttle in (1.0, -1.0):
        _, info = highway.reset(seed=1)
        for _ in range(5):
            _, _, _, _, info = highway.step(np.array([0.0, throttle], np.float32))
        speeds[throttle] = info[CONTEXT]["speed"]
    assert speeds[1.0] > speeds[-1.0] + 5  # full throttle accelerates, throttle -1 brakes


def test_scripted_highway_teacher_drives_and_its_answers_parse(highway):
    from pipeline.teach.masks.scripted import ScriptedMasks

    obs, info = highway.reset(seed=2)
    space = {"type": "box", "low": [-1.0, -1.0], "high": [1.0, 1.0]}
    teacher, total = ScriptedTeacher(1.0, 0), 0.0
    for _ in range(60):
        prompt = render_prompt("action", "highway-hw", space, _png(obs[PIXELS]), info[CONTEXT])
        parsed = parse_answer("action", teacher.correct_text(prompt), "highway-hw", space)
        assert parsed.status == "ok"
        obs, reward, terminated, truncated, info = highway.step(np.array(parsed.value, np.float32))
        total += reward
        if terminated or truncated:
            break
    assert truncated and not info[CONTEXT]["crashed"]  # 60 steps of lane and gap keeping
    from pipeline.teach.masks.base import MaskRequest

    (masks,) = ScriptedMasks().masks(
        [MaskRequest(obs[PIXELS], ("car", "road", "lane"), "highway-hw", info[CONTEXT])]
    )
    coverage = masks.reshape(3, -1).mean(axis=1)
    assert 0 < coverage[0] < 0.1 and 0.1 < coverage[1] < 0.6 and 0 < coverage[2] < 0.1


def test_highway_reset_is_deterministic_per_seed(highway):
    def rollout(seed):
        obs, info = highway.reset(seed=seed)
        frames, contexts = [obs[PIXELS]], [info[CONTEXT]]
        for _ in range(5):
            obs, _, _, _, info = highway.step(np.array([0.1, 0.3], np.float32))
            frames.append(obs[PIXELS])
            contexts.append(info[CONTEXT])
        return np.stack(frames), contexts

    (fa, ca), (fb, cb), (fc, cc) = rollout(4), rollout(4), rollout(5)
    assert np.array_equal(fa, fb) and ca == cb
    assert ca != cc and not np.array_equal(fa, fc)  # another seed, other traffic


def test_highway_envs_own_observation_changes_nothing_the_pipeline_reads(monkeypatch):
    """HighwayEnv computes an observation the pipeline never reads (its state and frame come
    from the simulator and the renderer): the stand-in's cheap one gives the same frames,
    states, contexts, rewards and ends, step for step, as HighwayEnv's default Kinematics."""
    from pipeline.core.envs import STATE, highway

    def rollout():
        env = make_env("highway-hw", EnvConfig(image_size=84, action_repeat=1,
                                               max_episode_steps=20, include_state=True))  # fmt: skip
        obs, info = env.reset(seed=6)
        steps = [(obs[PIXELS], obs[STATE], info[CONTEXT])]
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, 2))
            steps.append((obs[PIXELS], obs[STATE], info[CONTEXT], reward, terminated, truncated))
        env.close()
        return steps

    ours = rollout()
    monkeypatch.setitem(highway.CONFIG, "observation", {"type": "Kinematics"})
    default = rollout()
    assert len(ours) == len(default) == 21 and ours[0][0].std() > 5  # frames, not blank ones
    for a, b in zip(ours, default, strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert a[2:] == b[2:]


def test_highway_car_mask_is_where_the_renderer_draws_the_ego(highway):
    """The ego is drawn centred at 30 % of the width and half the height (CONFIG's centering)."""
    from pipeline.teach.masks.base import MaskRequest
    from pipeline.teach.masks.scripted import ScriptedMasks

    obs, info = highway.reset(seed=0)
    (masks,) = ScriptedMasks().masks(
        [MaskRequest(obs[PIXELS], ("car", "lane", "road"), "highway-hw", info[CONTEXT])]
    )
    car, lane, road = masks
    h, w = car.shape
    box = car[int(0.4 * h) : int(0.6 * h), int(0.2 * w) : int(0.4 * w)]
    assert box.sum() > 0  # the ego
    assert road[h // 2].mean() > 0.3 and not road[:5].any()  # the ego's row is road; the top isn't
    assert not (lane.astype(bool) & road.astype(bool)).any()


@pytest.mark.slow  # collect, label, dataset and training on highway-env: 7-8 s
def test_highway_chain_end_to_end(tmp_path):
    """collect (RAE with the scripted teacher) -> label -> masks -> dataset -> audit ->
    pretrain_critic -> train erpv -> evaluate on highway-hw, tiny settings, through the stages."""
    import yaml

    from stages import audit, collect, dataset, evaluate, label, masks, pretrain_critic, train
    from tests.conftest import REPO

    env, d = "highway-hw", tmp_path
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["rounds"] = {}  # the shipped rounds follow runs replaced here
    raw["envs"] = [env]
    raw["env"][env].update(max_episode_steps=40)
    raw["collect"][env].update(episodes=2, rae_switch_steps=[10, 20])
    raw["train"] = {"erpv": {"env": env, "method": "erpv", "steps": 80, "seed": 0}}
    raw["erpv"].update(start_steps=40, log_every=40)
    raw["critic"].update(envs=[env], steps=50)
    raw["evaluate"]["episodes"] = 1
    (d / "params.yaml").write_text(yaml.safe_dump(raw))
    p = str(d / "params.yaml")
    assert collect.main(["--params", p, "--env", env, "--out", f"{d}/r"]) == 0
    assert label.main(["--params", p, "--rollouts", f"{d}/r", "--cache", f"{d}/lc", "--out",
                       f"{d}/labels.parquet"]) == 0  # fmt: skip
    assert masks.main(["--params", p, "--rollouts", f"{d}/r", "--labels", f"{d}/labels.parquet",
                       "--cache", f"{d}/mc", "--out", f"{d}/masks.parquet"]) == 0  # fmt: skip
    assert dataset.main(["--params", p, "--rollouts", f"{d}/r", "--labels", f"{d}/labels.parquet",
                         "--masks", f"{d}/masks.parquet", "--out", f"{d}/ds"]) == 0  # fmt: skip
    assert audit.main(["--rollouts", f"{d}/r", "--labels", f"{d}/labels.parquet", "--masks",
                       f"{d}/masks.parquet", "--out", f"{d}/audit.html"]) == 0  # fmt: skip
    assert pretrain_critic.main(["--params", p, "--env", env, "--dataset", f"{d}/ds", "--out",
                                 f"{d}/critics/{env}", "--live", f"{d}/cl", "--summary",
                                 f"{d}/critic.json"]) == 0  # fmt: skip
    assert train.main(["--params", p, "--run", "erpv", "--dataset", f"{d}/ds", "--critics", f"{d}/critics",
                       "--out", f"{d}/model", "--live", f"{d}/live", "--summary",
                       f"{d}/summary.json"]) == 0  # fmt: skip
    assert evaluate.main(["--params", p, "--agent", f"{d}/model", "--out", f"{d}/eval.json"]) == 0
    import json

    import polars as pl

    labels = pl.read_parquet(d / "labels.parquet").filter(pl.col("queried"))
    ok = labels.filter(pl.col("parse_status") == "ok")
    assert ok.height > 0.6 * labels.height  # the scripted teacher at reliability 0.8
    metrics = json.loads((d / "eval.json").read_text())
    assert metrics["env"] == env and np.isfinite(metrics["return_mean"])
