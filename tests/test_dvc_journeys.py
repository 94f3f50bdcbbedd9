"""The DVC pipeline's journeys after a first build: human corrections through git and DVC
checkouts, a guidance weight, one env's own teacher, a policy teacher built by DVC, a seed sweep
as DVC experiments. Each starts from a copy of this module's own build of the tiny pipeline of
tests/test_dvc_pipeline.py (whose helpers it uses): a module of its own, so that `--dist
loadscope` runs it on one worker while that module, which builds the pipeline twice, runs on the
other.

Slow: excluded from the default run; run it with `pytest -m slow`.
"""

import json
import sys

import pytest
import yaml

from tests.conftest import write_params
from tests.test_dvc_pipeline import ENVS, _bash, _built, _copy, _params, _ran, _run, _stale

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built_a(tmp_path_factory):
    return _built(tmp_path_factory, "a")


def test_human_corrections_survive_checkout_and_leave_other_envs_alone(built_a, tmp_path):
    """The journey that lost data: a person corrects some labels of one env (README's review
    commands), `dvc repro`, then the user goes back with `git checkout` + `dvc checkout`. The
    corrections are an overlay on the base teacher in their own git-versioned file: the other
    env's data is untouched, unreviewed prompts keep the teacher's answers, and no checkout
    deletes the corrections."""
    import polars as pl

    env, other = "MountainCar-v0", "MountainCarContinuous-v0"
    repo, _ = _copy(built_a, tmp_path)
    _run(["git", "add", "-A"], repo)
    _bash("git commit -qm project", repo)
    before = pl.read_parquet(repo / "data" / "labels" / f"{env}.parquet")
    other_dataset = yaml.safe_load((repo / "dvc.lock").read_text())["stages"][f"dataset@{other}"]

    review = tmp_path / "review"
    _run([sys.executable, "-m", "stages.review", "export", "--rollouts", f"data/rollouts/{env}",
          "--labels", f"data/labels/{env}.parquet", "--out", str(review), "--tasks", "milestone"],
         repo)  # fmt: skip
    tasks = json.loads((review / "milestone.json").read_text())[:2]
    for task in tasks:
        task["annotations"] = [{"result": [{"from_name": "milestone", "to_name": "image",
                                "type": "choices", "value": {"choices": ["GOAL"]}}]}]  # fmt: skip
    (review / "export.json").write_text(json.dumps(tasks))
    _run([sys.executable, "-m", "stages.review", "import", "--rollouts", f"data/rollouts/{env}",
          "--reviewer", "alice", "--export", str(review / "export.json")], repo)  # fmt: skip
    corrections = repo / "corrections" / f"{env}.jsonl"
    assert len(corrections.read_text().splitlines()) == 2

    ran = _ran(_run(["dvc", "repro"], repo))
    assert f"label@{env}" in ran and f"dataset@{env}" in ran
    assert not any(s.endswith(f"@{other}") and not s.startswith("label@") for s in ran), ran
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert lock[f"dataset@{other}"] == other_dataset  # relabelled from the cache: same bytes
    after = pl.read_parquet(repo / "data" / "labels" / f"{env}.parquet")
    human = after.filter(pl.col("queried") & (pl.col("teacher_id") == "human:alice"))
    assert sorted(human["sample_key"]) == sorted(t["data"]["sample_key"] for t in tasks)
    kept = after.filter(pl.col("teacher_id") != "human:alice")
    assert set(kept["teacher_id"]) == set(before["teacher_id"])  # unreviewed: the base teacher
    unchanged = before.join(
        human.select("sample_key", "task"), on=["sample_key", "task"], how="anti"
    )
    assert kept.filter(pl.col("queried")).height == unchanged.filter(pl.col("queried")).height

    # back to the commit before the review, data included, and forward again
    _bash("git stash -q && dvc checkout -q --force", repo)  # dvc.lock as before the repro
    assert corrections.exists()  # untracked by DVC and git stash: nothing deleted it
    assert _ran(_run(["dvc", "repro"], repo))  # the overlay is applied again
    relabelled = pl.read_parquet(repo / "data" / "labels" / f"{env}.parquet")
    assert relabelled.equals(after)
    _bash("git add -A && git commit -qm 'review: alice' && git checkout -q HEAD~1 && "
          "dvc checkout -q --force && git checkout -q - && dvc checkout -q --force", repo)  # fmt: skip
    assert corrections.exists() and _stale(repo) == {}


def test_a_guidance_weight_change_retrains_the_runs_not_the_critics(built_a, tmp_path):
    """pretrain_critic@<env> depends on its env's C_V spec (data/critics/<env>.json, which
    check_params writes), not the erpv section: `erpv.lambda_1` stales the erpv run alone (was:
    every env's critic, 13 min by default); a key C_V reads stales the C_V of the envs in
    critic.envs, once check_params has written their specs."""
    params = _params()
    repo, _ = _copy(built_a, tmp_path)
    params["erpv"]["lambda_1"] = 0.0
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    assert sorted(stale) == ["check_params", "train@mcc-erpv"], stale
    _run(["dvc", "repro", "check_params"], repo)
    assert sorted(_stale(repo)) == ["train@mcc-erpv"]
    params["erpv"]["critic_lr"] = 3e-4  # a key C_V reads: the listed env's critic
    write_params(repo / "params.yaml", params)
    _run(["dvc", "repro", "check_params"], repo)
    stale = _stale(repo)
    assert "pretrain_critic@MountainCarContinuous-v0" in stale, stale
    assert "pretrain_critic@MountainCar-v0" not in stale, stale  # not in critic.envs


def test_one_envs_own_teacher_relabels_that_env_alone(built_a, tmp_path):
    """`label.per_env.<env>.teacher` (issue 27 item 4): DVC stales that env's label stage alone,
    and `dvc repro` reruns that env's chain and no stage of the other env; the shared
    `label.teacher` still stales every env's."""
    import polars as pl

    env, other = ENVS
    params = _params()
    repo, _ = _copy(built_a, tmp_path)
    teacher = {"backend": "random", "reliability": 1.0, "seed": 3}
    params["label"]["per_env"][env] = {"teacher": teacher}
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    # the env's teacher labels it and is measured acting alone (teacher_eval): both, that env only
    assert sorted(stale) == ["check_params", f"label@{env}", f"teacher_eval@{env}"], stale
    ran = _ran(_run(["dvc", "repro"], repo))
    assert f"label@{env}" in ran and f"dataset@{env}" in ran, ran
    assert not [s for s in ran if s.endswith(f"@{other}")], ran
    labels = pl.read_parquet(repo / "data" / "labels" / f"{env}.parquet")
    assert set(labels["teacher_id"]) == {"random:seed=3"}
    params["label"]["teacher"]["seed"] = 1  # the shared teacher: every env that has no own one
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    both = sorted(f"{s}@{e}" for s in ("label", "teacher_eval") for e in ENVS)  # both read it
    assert sorted(stale) == ["check_params", *both], stale


def test_a_policy_teacher_is_built_by_dvc_and_relabels_its_env_alone(built_a, tmp_path):
    """`policy_teachers.<env>`: policy_teacher@<env> trains the agent, label@<env> labels with
    it (DVC knows the dependency), the other env stays up to date. A change of the teacher's
    method section retrains it; a change of another method's section does not."""
    import polars as pl

    env, other = "MountainCarContinuous-v0", "MountainCar-v0"
    params = _params()
    repo, _ = _copy(built_a, tmp_path)
    params["policy_teachers"] = {env: {"method": "sac", "steps": 120, "seed": 4}}
    params["label"]["per_env"][env] = {
        "teacher": {"backend": "policy", "reliability": 1.0, "seed": 0,
                    "policy": {"checkpoint": f"models/teachers/{env}"}},
        "tasks": {"action": 1},
    }  # fmt: skip
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    assert {"check_params", f"label@{env}", f"teacher_eval@{env}"} <= set(stale), stale
    ran = _ran(_run(["dvc", "repro"], repo))
    assert {f"policy_teacher@{env}", f"dataset@{env}", "train@mcc-erpv"} <= set(ran), ran
    # collect reruns (its env's acting teacher may be the policy) to the same rollouts
    assert f"verify@{env}" not in ran, ran
    assert not [s for s in ran if s.endswith(f"@{other}") or s.endswith("@mc-ppo")], ran
    labels = pl.read_parquet(repo / "data" / "labels" / f"{env}.parquet")
    assert {t.split(":")[0] for t in labels["teacher_id"]} == {"policy"}
    assert json.loads((repo / "metrics" / "teacher" / f"{env}.json").read_text())
    params["ppo"]["gamma"] = 0.95  # not the teacher's method: no teacher retrains
    write_params(repo / "params.yaml", params)
    stale = _stale(repo)
    assert not [s for s in stale if s.startswith("policy_teacher@")], stale
    # the teacher's method: it retrains (DVC sees it once check_params has written the resolved
    # teacher, data/policy_teachers/<env>.json), and its env relabels
    params["sac"]["batch_size"] = 32
    write_params(repo / "params.yaml", params)
    ran = _ran(_run(["dvc", "repro", f"label@{env}", f"label@{other}"], repo))
    assert ran == sorted(
        ["check_params", f"collect@{env}", f"label@{env}", f"policy_teacher@{env}"]
    ), ran


def test_vlmrl_seeds_averages_the_seeds_of_an_experiment_sweep(built_a, tmp_path, capsys):
    """Two seeds of a run as DVC experiments (`dvc exp run -S ...seed=1` beside the commit's
    seed 0), averaged by vlmrl-seeds from `dvc exp show`."""
    from pipeline.tools.experiments import main

    repo, _ = _copy(built_a, tmp_path)
    _run(["git", "add", "-A"], repo)
    _bash("git commit -qm project", repo)
    _run(["dvc", "exp", "run", "-S", "train.mc-ppo.seed=1"], repo)
    seed0 = yaml.safe_load((built_a[0] / "metrics" / "eval" / "mc-ppo.json").read_text())
    seed1 = yaml.safe_load((repo / "metrics" / "eval" / "mc-ppo.json").read_text())
    capsys.readouterr()
    assert main(["--repo", str(repo), "--runs", "mc-ppo"]) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if " mc-ppo " in row]
    mean = (seed0["return_mean"] + seed1["return_mean"]) / 2
    assert f"  2  {mean:.1f} +- " in line, out
