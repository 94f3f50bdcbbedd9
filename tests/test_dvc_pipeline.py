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


def test_dvc_repro_reruns_only_what_changed(tmp_path):
    params = tiny_params_dict(ENVS, episodes=2)
    repo = _scratch_repo(tmp_path / "repo", params)

    first = _run(["dvc", "repro"], repo)
    stages = ("collect", "verify", "label", "masks", "dataset", "audit")
    assert _ran(first) == sorted(f"{s}@{e}" for s in stages for e in ENVS)
    for env_id in ENVS:
        assert (repo / "data" / "rollouts" / env_id / "manifest.json").exists()
        assert yaml.safe_load((repo / "metrics" / "rollouts" / f"{env_id}.json").read_text())["ok"]

    second = _run(["dvc", "repro"], repo)
    assert _ran(second) == []

    params["collect"]["MountainCarContinuous-v0"]["seed"] = 1
    write_params(repo / "params.yaml", params)
    third = _run(["dvc", "repro"], repo)
    assert _ran(third) == sorted(f"{s}@MountainCarContinuous-v0" for s in stages)

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
    repo = _scratch_repo(tmp_path / "repo", tiny_params_dict(ENVS[:1], episodes=2))
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

    ds = load_dataset(str(clone / "data" / "datasets" / ENVS[0]))["train"]
    assert ds.num_rows == 2 * 21 and ds[0]["image"].size == (32, 32)
