"""The DVC pipeline end to end, in a scratch copy of the repo with tiny budgets."""

import os
import re
import shutil
import subprocess
import sys

import yaml

from tests.conftest import REPO, tiny_params_dict, write_params

ENVS = ("MountainCar-v0", "MountainCarContinuous-v0")


def _run(args, cwd):
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def _ran(output):
    return sorted(set(re.findall(r"Running stage '([^']+)'", output)))


def _with_stage_two(params, runs):
    """Tiny stage-two sections over the repo's defaults: `runs` {name: (env, method)}, ERPv's
    critic for the continuous env, budgets of a few hundred steps."""
    defaults = yaml.safe_load((REPO / "params.yaml").read_text())
    params["train"] = {
        name: {"env": env, "method": method, "steps": 200 if method in ("sac", "erpv") else 256,
               "seed": 0}
        for name, (env, method) in runs.items()
    }  # fmt: skip
    params["ppo"] = {**defaults["ppo"], "num_envs": 2, "rollout_steps": 64}
    params["hybrid_ppo"] = {**defaults["hybrid_ppo"], "num_envs": 2, "rollout_steps": 64}
    for section in ("sac", "erpv"):
        params[section] = {**defaults[section], "start_steps": 100, "log_every": 50}
    params["critic"] = {"envs": ["MountainCarContinuous-v0"], "steps": 50, "seed": 0}
    params["evaluate"] = {"episodes": 2, "seed": 0}
    return params


def _scratch_repo(repo, params):
    repo.mkdir()
    for name in ("pipeline", "stages"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    write_params(repo / "params.yaml", params)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "core.analytics", "false"], repo)
    return repo


RUNS = {"mc-ppo": ("MountainCar-v0", "ppo"), "mcc-erpv": ("MountainCarContinuous-v0", "erpv")}
TRAINED = sorted(f"{s}@{r}" for s in ("train", "evaluate") for r in RUNS)


def test_dvc_repro_reruns_only_what_changed(tmp_path):
    params = _with_stage_two(tiny_params_dict(ENVS, episodes=2), RUNS)
    repo = _scratch_repo(tmp_path / "repo", params)

    first = _run(["dvc", "repro"], repo)
    stages = ("collect", "verify", "label", "masks", "dataset", "audit")
    stage_two = ["compare", "pretrain_critic@MountainCarContinuous-v0", *TRAINED]
    assert _ran(first) == sorted([*(f"{s}@{e}" for s in stages for e in ENVS), *stage_two])
    for run in RUNS:
        assert (
            yaml.safe_load((repo / "metrics" / "eval" / f"{run}.json").read_text())["episodes"] == 2
        )
    for env_id in ENVS:
        assert (repo / "data" / "rollouts" / env_id / "manifest.json").exists()
        assert yaml.safe_load((repo / "metrics" / "rollouts" / f"{env_id}.json").read_text())["ok"]

    second = _run(["dvc", "repro"], repo)
    assert _ran(second) == []

    params["collect"]["MountainCarContinuous-v0"]["seed"] = 1
    write_params(repo / "params.yaml", params)
    third = _run(["dvc", "repro"], repo)
    # new MountainCarContinuous data: its stages and C_V rerun; every agent depends on the critics,
    # but the PPO agent (which reads none of it) retrains to the same bytes, so its evaluation
    # does not rerun
    expected = {*(f"{s}@MountainCarContinuous-v0" for s in stages), *stage_two} - {
        "evaluate@mc-ppo"
    }
    assert _ran(third) == sorted(expected)

    params["train"]["mc-ppo"]["seed"] = 1  # one run's params: that run alone retrains
    write_params(repo / "params.yaml", params)
    assert _ran(_run(["dvc", "repro"], repo)) == ["compare", "evaluate@mc-ppo", "train@mc-ppo"]

    # a prompt edit relabels every env and changes no rollout: collect (which imports the label
    # code) reruns as a no-op, so verify does not rerun
    prompt = repo / "pipeline" / "labels" / "prompts" / "common" / "objects.txt"
    prompt.write_text(prompt.read_text() + "Name at most five objects.\n")
    fourth = _run(["dvc", "repro"], repo)
    ran = _ran(fourth)
    assert {f"{s}@{e}" for s in ("label", "audit") for e in ENVS} <= set(ran)
    assert not any(stage.startswith("verify@") for stage in ran)
    assert "nothing to do" in fourth and "0 teacher calls" not in fourth


def test_shared_dataset_reaches_a_fresh_clone_through_a_dvc_remote(tmp_path):
    """Share by `dvc push`; a fresh clone `dvc pull`s and has everything: nothing to recollect or
    relabel, and the dataset loads in one line."""
    env_id = "MountainCarContinuous-v0"
    params = _with_stage_two(tiny_params_dict((env_id,), episodes=2), {"erpv": (env_id, "erpv")})
    repo = _scratch_repo(tmp_path / "repo", params)
    _run(["dvc", "repro"], repo)
    remote = tmp_path / "remote"
    _run(["dvc", "remote", "add", "-d", "shared", str(remote)], repo)
    _run(["dvc", "push"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pipeline"], repo)

    clone = tmp_path / "clone"
    _run(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    _run(["dvc", "pull"], clone)
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], clone)
    assert _ran(_run(["dvc", "repro"], clone)) == []  # no collect, no label: all pulled

    from datasets import load_dataset

    ds = load_dataset(str(clone / "data" / "datasets" / env_id))["train"]
    assert ds.num_rows == 2 * 21 and ds[0]["image"].size == (32, 32)

    # train from the pulled dataset in the clone: a new seed retrains the agent, nothing upstream
    params["train"]["erpv"]["seed"] = 1
    write_params(clone / "params.yaml", params)
    assert _ran(_run(["dvc", "repro", "train@erpv"], clone)) == ["train@erpv"]
