"""Bring your own env from params.yaml (`env.<id>.make` and `env.<id>.labels`): a gymnasium id,
a dm_control task or a factory, with its label schema and prompts; the scripted teacher, masks
and audit reference optional; adding one touches no other env's stages."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
import yaml

from pipeline.core.config import ConfigError, parse_params
from pipeline.core.envs import make_env, state_from_context
from pipeline.teach.labels.schema import label_schema
from pipeline.teach.labels.tasks import render_prompt
from pipeline.teach.rollouts.format import action_space_spec
from tests.conftest import REPO, tiny_params_dict, write_params

PENDULUM = {
    "image_size": 32, "action_repeat": 2, "max_episode_steps": 40, "include_state": True,
    "make": {"gym": "Pendulum-v1", "kwargs": {"g": 9.81}},
    "labels": {
        "task_description": "swing the pendulum up and hold it upright",
        "action_names": ["torque"],
        "milestones": {"DOWN": 0.0, "SWINGING": 0.5, "UP": 1.0},
        "objects": ["pendulum"],
        "prompts": {"milestone": "You rate a pendulum.\n---\nTask: {task_description}. One of "
                                 "{milestones}; angle cosine {context[observation][0]:.2f}.\n"
                                 "milestone: <LABEL>"},
    },
}  # fmt: skip
FINGER = {
    "image_size": 32, "action_repeat": 2, "max_episode_steps": 40, "include_state": True,
    "make": {"dm_control": "finger-spin"},
    "labels": {
        "task_description": "spin the hinged body with the finger",
        "action_names": ["proximal", "distal"],
        "milestones": {"STILL": 0.0, "SPINNING": 1.0},
        "objects": ["finger", "body"],
    },
}  # fmt: skip
POINT = {
    "image_size": 32, "action_repeat": 1, "max_episode_steps": 15, "include_state": True,
    "make": {"factory": "tests.toy_envs:make_drawn_point_mass", "kwargs": {"horizon": 30}},
    "labels": {
        "task_description": "bring the point to the middle",
        "action_names": ["push"],
        "milestones": {"FAR": 0.0, "NEAR": 1.0},
        "objects": ["point"],
    },
}  # fmt: skip
RANDOM_TEACHER = {"teacher": {"backend": "random", "seed": 0}}


def _with(raw: dict, env_id: str, env: dict, teacher: dict | None = None) -> dict:
    """`raw` with `env_id` brought: listed, its env entry, a random collection and a teacher."""
    raw = copy.deepcopy(raw)
    raw["envs"].append(env_id)
    raw["env"][env_id] = copy.deepcopy(env)
    raw["collect"][env_id] = {"behaviour": "random", "episodes": 1, "seed": 0,
                              "shard_max_samples": 100}  # fmt: skip
    raw["label"]["per_env"][env_id] = copy.deepcopy(RANDOM_TEACHER if teacher is None else teacher)
    return raw


def _error(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_params(raw)
    return str(info.value)


@pytest.mark.parametrize(
    ("env_id", "env", "state_dim"),
    [("Pendulum-v1", PENDULUM, 3), ("finger-spin", FINGER, 9), ("point", POINT, 1)],
)
def test_a_brought_env_keeps_the_observation_contract(env_id, env, state_dim):
    params = parse_params(_with(tiny_params_dict(), env_id, env))
    made = make_env(env_id, params.env[env_id])
    obs, info = made.reset(seed=0)
    assert obs["pixels"].shape == (32, 32, 3) and obs["pixels"].dtype == np.uint8
    assert obs["state"].shape == (state_dim,)
    # a teacher that reads the context can drive a state agent: the state comes back exactly
    np.testing.assert_array_equal(state_from_context(env_id, info["context"]), obs["state"])
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, info = made.step(made.action_space.sample())
        steps, done = steps + 1, terminated or truncated
    assert steps == 40 // params.env[env_id].action_repeat if env_id != "point" else steps == 15
    made.close()


def test_a_brought_env_renders_its_own_prompts():
    params = parse_params(_with(tiny_params_dict(), "Pendulum-v1", PENDULUM))
    made = make_env("Pendulum-v1", params.env["Pendulum-v1"])
    _, info = made.reset(seed=0)
    space = action_space_spec(made.action_space)
    own = render_prompt("milestone", "Pendulum-v1", space, b"png", info["context"])
    assert own.system == "You rate a pendulum."
    assert "DOWN, SWINGING, UP" in own.user and "angle cosine" in own.user
    common = render_prompt("action", "Pendulum-v1", space, b"png", info["context"])
    assert "torque: <number>" in common.user and "swing the pendulum up" in common.user
    assert label_schema("Pendulum-v1").objects == ("pendulum",)


def test_a_schema_that_does_not_fit_the_env_is_refused_when_it_is_built():
    bad = copy.deepcopy(PENDULUM)
    bad["labels"]["action_names"] = ["torque", "spin"]
    params = parse_params(_with(tiny_params_dict(), "Pendulum-v1", bad))
    with pytest.raises(ValueError, match=r"env.Pendulum-v1.labels.action_names: .* vector of 1"):
        make_env("Pendulum-v1", params.env["Pendulum-v1"])


def test_a_builder_that_cannot_be_found_names_its_setting():
    from pipeline.core.envs.gym_envs import BroughtEnvError

    for make, message in (
        ({"gym": "NoSuchEnv-v9"}, r"env.x.make.gym: gymnasium cannot make 'NoSuchEnv-v9'"),
        ({"factory": "tests.toy_envs:nothing"}, r"env.x.make.factory: .* has no 'nothing'"),
        ({"gym": "A-v0", "package": "no_such_package"}, r"cannot import 'no_such_package'"),
        (
            {"factory": "tests.toy_envs:make_drawn_point_mass", "kwargs": {"horizont": 5}},
            r"env.x.make.factory: tests.toy_envs:make_drawn_point_mass\(\*\*env.x.make.kwargs\) "
            r"raised TypeError: .*horizont",
        ),
    ):
        env = {**copy.deepcopy(PENDULUM), "make": make}
        params = parse_params(_with(tiny_params_dict(), "x", env))
        with pytest.raises(BroughtEnvError, match=message):
            make_env("x", params.env["x"])


def test_params_name_what_a_brought_env_lacks():
    raw = tiny_params_dict()
    unknown = copy.deepcopy(raw)
    unknown["envs"].append("Acrobot-v1")
    assert "bring your own with `env.<id>.make`" in _error(unknown)
    no_make = _with(raw, "Acrobot-v1", {k: v for k, v in PENDULUM.items() if k != "make"})
    assert "env.Acrobot-v1: unknown env id" in _error(no_make)
    no_labels = _with(raw, "Acrobot-v1", {k: v for k, v in PENDULUM.items() if k != "labels"})
    assert "env.Acrobot-v1.labels: missing" in _error(no_labels)
    two = _with(raw, "p", {**PENDULUM, "make": {"gym": "Pendulum-v1", "dm_control": "a-b"}})
    assert "exactly one of `gym`" in _error(two)
    shipped = copy.deepcopy(raw)
    shipped["env"]["MountainCar-v0"]["make"] = {"gym": "MountainCar-v0"}
    assert "env.MountainCar-v0.make: MountainCar-v0 ships with the pipeline" in _error(shipped)
    separator = copy.deepcopy(PENDULUM)
    separator["labels"]["prompts"] = {"action": "no separator here"}
    assert "prompts.action: no line `---`" in _error(_with(raw, "p", separator))
    # the default label teacher is the scripted one, which has no script for a brought env
    scripted = _with(raw, "p", PENDULUM, teacher={})
    assert "label.teacher: backend scripted has no script for the brought env p" in _error(scripted)
    near = copy.deepcopy(PENDULUM)
    near["make"]["kwarg"] = near["make"].pop("kwargs")
    assert "did you mean 'kwargs'" in _error(_with(raw, "p", near))


def test_a_brought_env_runs_through_stage_one_with_no_scripted_masks(tmp_path):
    """collect, label, masks and the audit page on a factory env: the scripted masks back end
    knows the shipped envs only, so the env's frames are listed as no_backend (nothing computed
    or cached), and the audit page says there is no reference instead of failing."""
    import polars as pl

    from stages import audit, collect, label, masks
    from tests.conftest import write_params

    raw = _with(tiny_params_dict(), "point", POINT)
    raw["label"]["per_env"]["point"]["tasks"] = {"action": 3, "objects": 2}
    params = write_params(tmp_path / "params.yaml", raw)
    d = tmp_path
    assert collect.main(["--params", str(params), "--env", "point", "--out", str(d / "r")]) == 0
    assert label.main(["--params", str(params), "--rollouts", str(d / "r"), "--cache",
                       str(d / "lc"), "--out", str(d / "l.parquet")]) == 0  # fmt: skip
    assert masks.main(["--params", str(params), "--rollouts", str(d / "r"), "--labels",
                       str(d / "l.parquet"), "--cache", str(d / "mc"), "--out",
                       str(d / "m.parquet")]) == 0  # fmt: skip
    table = pl.read_parquet(d / "m.parquet")
    assert table.height == 16  # 15 steps and the last observation
    # every frame has phrases (queried every 2nd frame and carried), none a mask
    assert set(table["status"]) == {"no_backend"} and table["masks"].is_null().all()
    assert not list((d / "mc").glob("*.parquet"))  # nothing paid, nothing cached
    assert audit.main(["--params", str(params), "--rollouts", str(d / "r"), "--labels",
                       str(d / "l.parquet"), "--masks", str(d / "m.parquet"), "--out",
                       str(d / "a.html")]) == 0  # fmt: skip
    assert "No reference for this env" in (d / "a.html").read_text()


def _stage_definitions(root) -> dict[str, tuple]:
    """Every stage of dvc.yaml in `root` as DVC resolves it: cmd, deps, params and their values."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    out = {}
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:
            params = {}
            for dep in stage.deps:
                if isinstance(dep, ParamsDependency):
                    params.update(dep.read_params())
            paths = sorted(
                str(d.def_path) for d in stage.deps if not isinstance(d, ParamsDependency)
            )
            outs = sorted(str(o.def_path) for o in stage.outs)
            out[stage.name] = (stage.cmd, paths, outs, yaml.safe_dump(params, sort_keys=True))
    return out


def test_adding_an_env_changes_no_stage_of_another_env(tmp_path):
    """What `dvc status` compares for each stage (its command, dep paths, outputs and params
    values) stays the same for every stage of the shipped envs when an env is brought: only the
    new env's stages are new. (The slow end-to-end test reads `dvc status` itself.)"""
    import subprocess

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    before = _stage_definitions(tmp_path)
    brought = _with(raw, "Pendulum-v1", PENDULUM, teacher=RANDOM_TEACHER)
    parse_params(brought)  # a valid params file
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(brought, sort_keys=False))
    after = _stage_definitions(tmp_path)
    # check_params reads the whole file; its output is constant, so its rerun reruns nothing
    assert after.pop("check_params")[:3] == before.pop("check_params")[:3]
    # the knowledge page has a section per env of `envs`: it reruns, its definition otherwise kept
    assert after.pop("knowledge")[:3] == before.pop("knowledge")[:3]
    # env_code runs on every repro (always changed) and writes one file per env: the shipped
    # envs' files keep their bytes, so their stages do not rerun (tests/core/test_env_code.py)
    assert after.pop("env_code")[:3] == before.pop("env_code")[:3]
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert not changed, f"stages of other envs changed: {changed}"
    new = sorted(set(after) - set(before))
    assert new and all(name.endswith("@Pendulum-v1") for name in new), new
    assert "label@Pendulum-v1" in new and "audit@Pendulum-v1" in new


@pytest.mark.parametrize(
    ("change", "expected"),
    [({"milestones": {"down": 0.0, "Up": 0.5, "swing-up": 1.0}}, "env.pend.labels.milestones: 'swing-up' does not parse back"),
     ({"milestones": {"UP": 0.0, "Up": 1.0}}, "env.pend.labels.milestones: 'Up' does not parse back (reads as 'UP')"),
     ({"objects": ["pendulum, rod"]}, "env.pend.labels.objects: 'pendulum, rod' does not parse back")],
    ids=["hyphen", "case-twins", "comma-phrase"],
)  # fmt: skip
def test_a_label_schema_whose_names_do_not_parse_back_stops_the_gate(
    tmp_path, capsys, change, expected
):
    """Names the parsers cannot match would make every correct answer invalid_choice or
    ambiguous, silently: the gate answers each name as the prompts ask and parses it back."""
    from stages import check_params as check_params_stage

    env = copy.deepcopy(PENDULUM)
    env["labels"].update(change)
    env["labels"].pop("prompts")
    path = write_params(tmp_path / "p.yaml", _with(tiny_params_dict(), "pend", env))
    assert check_params_stage.main(["--params", str(path), "--out", str(tmp_path / "c")]) == 2
    assert expected in capsys.readouterr().err
    env["labels"]["milestones"] = PENDULUM["labels"]["milestones"]
    env["labels"]["objects"] = PENDULUM["labels"]["objects"]
    path = write_params(tmp_path / "p.yaml", _with(tiny_params_dict(), "pend", env))
    assert check_params_stage.main(["--params", str(path), "--out", str(tmp_path / "c")]) == 0


def test_a_dm_control_task_that_does_not_exist_stops_the_gate(tmp_path, capsys):
    from stages import check_params as check_params_stage

    env = copy.deepcopy(FINGER)
    env["make"]["dm_control"] = "finger-spinn"
    path = write_params(tmp_path / "p.yaml", _with(tiny_params_dict(), "fing", env))
    assert check_params_stage.main(["--params", str(path), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "env.fing.make.dm_control: 'finger-spinn' is no dm_control suite task" in err
    assert "did you mean finger-spin" in err
