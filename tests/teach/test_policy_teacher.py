"""The policy teacher (a trained agent checkpoint answering `action` and `judge`) and the state
it reads, rebuilt from a prompt's context (`pipeline.core.envs.state_from_context`)."""

from __future__ import annotations

import io
import json
import shutil
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import yaml
from PIL import Image

from pipeline.core.config import NO_TEACHER, ConfigError, TeacherConfig, parse_params
from pipeline.core.envs import CONTEXT, KNOWN_ENVS, STATE, make_env, state_from_context
from pipeline.core.stacking import FrameStacker
from pipeline.learn.agents.off_policy import NetworkParams, SACParams
from pipeline.learn.agents.ppo import ActorCritic
from pipeline.learn.agents.sac import SACAgent
from pipeline.learn.methods.table import check_params, load_policy
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import parse_answer, render_prompt
from pipeline.teach.rollouts.format import action_space_spec
from pipeline.teach.rollouts.writer import encode_png
from pipeline.teach.teachers import make_teacher
from pipeline.teach.teachers.cached import ask_through_cache, prompt_cache_key
from pipeline.teach.teachers.policy import PolicyTeacher, checkpoint_sha256
from pipeline.teach.teachers.scripted import ScriptedTeacher
from tests.conftest import REPO, env_cfg, tiny_params_dict, write_params

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
        from pipeline.core.envs.dmc import DMC_STATE_KEYS

        spec = env.unwrapped._env.observation_spec()
        assert tuple(spec) == DMC_STATE_KEYS[env_id]  # the suite's order, which DMCEnv flattens
    env.close()


def test_carla_state_is_rebuilt_from_its_context():
    from pipeline.core.envs.carla_env import carla_context, carla_state

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


# ---- tiny checkpoints ----------------------------------------------------------------------------


def _sac_checkpoint(path, env_id, obs, obs_shape, space, seed=1):
    network = NetworkParams(
        obs=obs, hidden_dim=16, feature_dim=8, encoder_layers=1, encoder_filters=4, frame_stack=3
    )
    agent = SACAgent(obs_shape, space, SACParams(network=network), seed=seed)
    agent.save(path, {"env": env_id, "run": "tiny"})
    return agent


@pytest.fixture
def mcc(tmp_path):
    """A state SAC agent of MountainCarContinuous-v0, saved as train@<run> would."""
    space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = _sac_checkpoint(tmp_path / "mcc", "MountainCarContinuous-v0", "state", (2,), space)
    return agent, tmp_path / "mcc", action_space_spec(space)


def _prompts(task, env_id, spec, contexts, stored=None, size=16):
    rng = np.random.default_rng(0)
    return [
        render_prompt(
            task, env_id, spec,
            encode_png(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)), ctx,
            None if stored is None else stored[i],
        )
        for i, ctx in enumerate(contexts)
    ]  # fmt: skip


CONTEXTS = [{"position": p, "velocity": v} for p, v in [(-0.5, 0.0), (-1.0, 0.03), (0.3, -0.05)]]


def test_action_answers_parse_to_the_agents_action_on_the_rebuilt_state(mcc):
    agent, ckpt, spec = mcc
    teacher = PolicyTeacher(ckpt, reliability=1.0, seed=0, load_policy=load_policy)
    env_id = "MountainCarContinuous-v0"
    prompts = _prompts("action", env_id, spec, CONTEXTS)
    for prompt, reply in zip(prompts, teacher.answer(prompts), strict=True):
        parsed = parse_answer("action", reply.text, env_id, spec)
        want = agent.act(state_from_context(env_id, prompt.context), deterministic=True)
        assert parsed.status.value == "ok", reply.text
        np.testing.assert_allclose(parsed.value, want, atol=0.005)  # written with 2 decimals
    # judge: its own action is reasonable, the far end of the span is not
    mine = [agent.act(state_from_context(env_id, c), deterministic=True).tolist() for c in CONTEXTS]
    far = [[1.0 if a[0] < 0 else -1.0] for a in mine]
    for stored, expected in ((mine, "yes"), (far, "no")):
        replies = teacher.answer(_prompts("judge", env_id, spec, CONTEXTS, stored))
        assert [parse_answer("judge", r.text, env_id, spec).value for r in replies] == [
            expected == "yes"
        ] * len(CONTEXTS)


def test_a_pixel_agent_reads_the_one_frame_repeated(tmp_path):
    from pipeline.core.envs.wrappers import resize_frame

    env_id, space = "cartpole-swingup", gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    agent = _sac_checkpoint(tmp_path / "pix", env_id, "pixels", (32, 32, 3), space)
    spec = action_space_spec(space)
    teacher = PolicyTeacher(tmp_path / "pix", 1.0, 0, load_policy=load_policy)
    (prompt,) = _prompts("action", env_id, spec, [{}], size=32)  # a pixel agent needs no context
    (reply,) = teacher.answer([prompt])
    frame = np.asarray(Image.open(io.BytesIO(prompt.frame_png)))
    want = agent.act(FrameStacker(3, "pixels").reset(frame), deterministic=True)
    np.testing.assert_allclose(parse_answer("action", reply.text, env_id, spec).value, want,
                               atol=0.005)  # fmt: skip
    # a frame of another size is resized to the agent's, as the deployed agent's frames are (a
    # run with its own image_size)
    (small,) = _prompts("action", env_id, spec, [{}], size=16)
    (reply,) = teacher.answer([small])
    frame = resize_frame(np.asarray(Image.open(io.BytesIO(small.frame_png))), 32)
    want = agent.act(FrameStacker(3, "pixels").reset(frame), deterministic=True)
    np.testing.assert_allclose(parse_answer("action", reply.text, env_id, spec).value, want,
                               atol=0.005)  # fmt: skip


def test_a_discrete_agent_answers_a_choice(tmp_path):
    env_id, space = "MountainCar-v0", gym.spaces.Discrete(3)
    agent = ActorCritic(2, 3, 8)
    agent.save(tmp_path / "ppo", {"method": "ppo", "env": env_id})
    spec = action_space_spec(space)
    teacher = PolicyTeacher(tmp_path / "ppo", 1.0, 0, load_policy=load_policy)
    prompts = _prompts("action", env_id, spec, CONTEXTS)
    for prompt, reply in zip(prompts, teacher.answer(prompts), strict=True):
        want = agent.act(state_from_context(env_id, prompt.context), deterministic=True)
        assert parse_answer("action", reply.text, env_id, spec).value == want
    stored = [teacher.policy_action(p) for p in prompts]
    replies = teacher.answer(_prompts("judge", env_id, spec, CONTEXTS, stored))
    assert {r.text for r in replies} == {"reasonable: yes"}


def test_teacher_id_is_the_checkpoints_content_hash(mcc, tmp_path):
    _, ckpt, _ = mcc
    teacher = PolicyTeacher(ckpt, 0.8, 3, load_policy=load_policy)
    digest = teacher.teacher_id.split(":")[1]
    assert teacher.teacher_id == f"policy:{digest}:reliability=0.8:seed=3" and len(digest) == 64
    moved = shutil.copytree(ckpt, tmp_path / "elsewhere")
    assert (
        PolicyTeacher(moved, 0.8, 3, load_policy=load_policy).teacher_id == teacher.teacher_id
    )  # where it sits: no
    assert PolicyTeacher(moved, 0.7, 3, load_policy=load_policy).teacher_id != teacher.teacher_id
    weights = moved / "agent.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert PolicyTeacher(moved, 0.8, 3, load_policy=load_policy).teacher_id != teacher.teacher_id


def test_reliability_zero_gives_the_scripted_teachers_failures_only(mcc):
    _, ckpt, spec = mcc
    prompts = _prompts("action", "MountainCarContinuous-v0", spec, CONTEXTS * 4)
    failed = [r.text for r in PolicyTeacher(ckpt, 0.0, 5, load_policy=load_policy).answer(prompts)]
    assert failed == [r.text for r in ScriptedTeacher(0.0, 5).answer(prompts)]
    assert not any(t.startswith("Describe: the policy") for t in failed)


def test_cache_keys_are_its_own_and_answers_are_cached(mcc, tmp_path):
    from pipeline.teach.labels.cache import LabelCache

    _, ckpt, spec = mcc
    teacher = PolicyTeacher(ckpt, 1.0, 0, load_policy=load_policy)
    (prompt,) = _prompts("action", "MountainCarContinuous-v0", spec, CONTEXTS[:1])
    assert prompt_cache_key(prompt, teacher) != prompt_cache_key(prompt, ScriptedTeacher(1.0, 0))
    cache = LabelCache(tmp_path / "cache")
    first, hit = ask_through_cache(cache, teacher, prompt)
    assert not hit
    second, hit = ask_through_cache(cache, teacher, prompt)
    assert hit and second.raw_text == first.text


def test_it_refuses_what_it_cannot_answer(mcc):
    _, ckpt, spec = mcc
    teacher = PolicyTeacher(ckpt, 1.0, 0, load_policy=load_policy)
    for task in ("milestone", "objects"):
        prompts = _prompts(task, "MountainCarContinuous-v0", spec, CONTEXTS[:1])
        with pytest.raises(ValueError, match=rf"only the action and judge tasks, not {task}"):
            teacher.answer(prompts)
    other = _prompts("action", "MountainCar-v0", action_space_spec(gym.spaces.Discrete(3)),
                     CONTEXTS[:1])  # fmt: skip
    with pytest.raises(ValueError, match=r"trained on MountainCarContinuous-v0; .*MountainCar-v0"):
        teacher.answer(other)
    assert label_schema("MountainCarContinuous-v0").action_choices is None


# ---- configuration -----------------------------------------------------------------------------


def _policy(checkpoint="models/expert", **extra):
    return {"backend": "policy", "reliability": 1.0, "seed": 0,
            "policy": {"checkpoint": checkpoint}, **extra}  # fmt: skip


def test_config_needs_its_section_and_a_checkpoint_that_exists(tmp_path, mcc):
    with pytest.raises(ValueError, match=r"backend 'policy' needs a `policy:` section"):
        TeacherConfig(backend="policy", reliability=1.0, seed=0)
    with pytest.raises(ValueError, match=r"`policy:` section is read by backend 'policy' only"):
        TeacherConfig(**{**_policy(), "backend": "scripted"})
    missing = tmp_path / "models" / "nope"
    with pytest.raises(ValueError, match=rf"checkpoint directory {missing} does not exist"):
        make_teacher(TeacherConfig(**_policy(str(missing))), load_policy=load_policy)
    with pytest.raises(ValueError, match=r"loads only through its stage: pass load_policy="):
        make_teacher(TeacherConfig(**_policy(str(mcc[1]))))  # stage one alone cannot load it
    teacher = make_teacher(TeacherConfig(**_policy(str(mcc[1]))), load_policy=load_policy)
    assert isinstance(teacher, PolicyTeacher) and teacher.teacher_id.startswith("policy:")


def test_params_refuse_a_policy_teacher_asked_for_milestones_or_objects():
    raw = tiny_params_dict()
    raw["label"]["teacher"] = _policy()
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    assert (
        "label.tasks: asks MountainCar-v0's teacher (label.teacher, backend policy) for "
        "milestone, objects, but a policy checkpoint answers only action and judge; set "
        "`label.per_env.MountainCar-v0.tasks` to those tasks alone"
    ) in str(err.value)
    raw["label"]["per_env"]["MountainCar-v0"] = {"tasks": {"action": 5, "judge": 5}}
    parse_params(raw)  # this env asks it for what it answers
    raw["label"]["teacher"] = {"backend": "scripted", "reliability": 1.0, "seed": 0}
    raw["label"]["per_env"]["MountainCar-v0"] = {"teacher": _policy()}
    with pytest.raises(ConfigError, match=r"label\.tasks: .*\(label\.per_env\.MountainCar-v0\."
                                          r"teacher, backend policy\)"):  # fmt: skip
        parse_params(raw)


# ---- the teacher DVC builds: policy_teacher@<env> and the checkpoint rule ------------------------

MCC = "MountainCarContinuous-v0"
_TINY_SAC = {"network": {"obs": "state", "hidden_dim": 16}, "batch_size": 8, "start_steps": 10,
             "log_every": 20, "resume_every": 0, "eval_episodes": 0, "replay_capacity": 200,
             "threads": 1}  # fmt: skip


def _teacher_params(**teachers):
    """params.yaml's sections with MountainCarContinuous labelled by its policy teacher."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["envs"] = [MCC, "MountainCar-v0"]
    raw["sac"] = {**raw["sac"], **_TINY_SAC}
    raw["train"], raw["rounds"], raw["critic"]["envs"] = {}, {}, [MCC]
    raw["policy_teachers"] = teachers
    raw["label"]["per_env"] = {
        MCC: {"teacher": _policy(f"models/teachers/{MCC}"), "tasks": {"action": 1}},
        "MountainCar-v0": {},
    }
    return raw


def test_check_params_wants_the_checkpoint_dvc_builds():
    """label@<env> depends on models/teachers/<env> alone: another path, or that path with no
    teacher trained there, stops the DVC gate with the key and the fix."""
    teacher = {"method": "sac", "steps": 40, "seed": 3}
    check_params(parse_params(_teacher_params(**{MCC: teacher})))
    raw = _teacher_params()
    with pytest.raises(ConfigError) as err:
        check_params(parse_params(raw))
    assert (
        f"label.per_env.{MCC}.teacher: reads models/teachers/{MCC}, which policy_teacher@{MCC} "
        f"trains only when `policy_teachers.{MCC}` is set"
    ) in str(err.value)
    raw = _teacher_params(**{MCC: teacher})
    raw["label"]["per_env"][MCC]["teacher"] = _policy("models/expert")
    parse_params(raw)  # a library user may point a teacher anywhere
    with pytest.raises(ConfigError) as err:
        check_params(parse_params(raw))
    assert (
        f"label.per_env.{MCC}.teacher.policy.checkpoint: 'models/expert' is not a dependency DVC "
        f"knows for {MCC}; train the teacher with `policy_teachers.{MCC}` (stage "
        f"policy_teacher@{MCC}) and set checkpoint: models/teachers/{MCC}"
    ) in str(err.value)


def test_check_params_refuses_a_teacher_that_reads_data_or_no_env():
    raw = _teacher_params(**{MCC: {"method": "sac", "steps": 40, "seed": 3,
                                   "overrides": {"offline_fraction": 0.5}}})  # fmt: skip
    with pytest.raises(ConfigError, match=rf"policy_teachers\.{MCC}: offline_fraction is 0\.5 "):
        check_params(parse_params(raw))
    raw = _teacher_params(**{"cartpole-swingup": {"method": "ppo", "steps": 40, "seed": 3}})
    with pytest.raises(ConfigError, match=r"policy_teachers\.cartpole-swingup: 'cartpole-swingup' "
                                          r"is not listed in `envs`"):  # fmt: skip
        parse_params(raw)
    raw = _teacher_params(**{MCC: {"method": "erpv", "steps": 40, "seed": 3}})
    with pytest.raises(ConfigError, match=r"policy_teachers\.MountainCarContinuous-v0\.method"):
        parse_params(raw)


def test_the_policy_teacher_stage_trains_the_same_teacher_twice(tmp_path):
    """policy_teacher@<env> trains online with no data and writes the same bytes on a rerun (the
    teacher id is their hash, so the label cache holds); the listed env's teacher answers, an
    unlisted env gets a marker that a policy teacher refuses by name."""
    from stages import policy_teacher

    params = write_params(tmp_path / "params.yaml",
                          _teacher_params(**{MCC: {"method": "sac", "steps": 40, "seed": 3}}))  # fmt: skip

    def run(env_id, name):
        out = tmp_path / name
        argv = ["--params", str(params), "--env", env_id, "--out", str(out),
                "--live", str(tmp_path / f"{name}-live"), "--summary", str(tmp_path / f"{name}.json")]  # fmt: skip
        assert policy_teacher.main(argv) == 0
        return out

    first, second = run(MCC, "a"), run(MCC, "b")
    assert checkpoint_sha256(first) == checkpoint_sha256(second)
    teacher = PolicyTeacher(first, reliability=1.0, seed=0, load_policy=load_policy)
    assert teacher.env_id == MCC
    assert json.loads((tmp_path / "a.json").read_text())["step"] >= 20  # the curve's last step
    marker = run("MountainCar-v0", "none")
    assert [p.name for p in marker.iterdir()] == [NO_TEACHER]
    with pytest.raises(ValueError, match=r"holds no agent .* the env is not listed in "
                                         r"`policy_teachers`"):  # fmt: skip
        PolicyTeacher(marker, reliability=1.0, seed=0, load_policy=load_policy)
