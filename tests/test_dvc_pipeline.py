"""The DVC pipeline end to end, in a scratch copy of the repo with tiny budgets.

Slow (about 8 minutes on 2 cores: a dozen `dvc repro` runs, each stage a fresh Python process):
excluded from the default run (and from CI's); run it with `pytest -m slow`.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests import cpu_dispatch
from tests.conftest import REPO, tiny_params_dict, write_params

pytestmark = pytest.mark.slow

ENVS = ("MountainCar-v0", "MountainCarContinuous-v0")


def _run(args, cwd, extra_env=None):
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        **(extra_env or {}),
    }
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


# env_code runs on every `dvc repro` and `dvc status` always lists it (`always_changed`: it
# fingerprints a brought env's code, which dvc.yaml cannot name); these helpers leave it out
ALWAYS_CHANGED = "env_code"


def _ran(output):
    return sorted(set(re.findall(r"Running stage '([^']+)'", output)) - {ALWAYS_CHANGED})


def _stale(repo) -> dict:
    """`dvc status --json` of `repo`, without env_code when always-changed is all it says."""
    status = json.loads(_run(["dvc", "status", "--json"], repo).splitlines()[-1])
    assert status.pop(ALWAYS_CHANGED, ["always changed"]) == ["always changed"], status
    return status


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
    for name in ("pipeline", "stages", "corrections"):
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    write_params(repo / "params.yaml", params)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "core.analytics", "false"], repo)
    return repo


RUNS = {"mc-ppo": ("MountainCar-v0", "ppo"), "mcc-erpv": ("MountainCarContinuous-v0", "erpv")}
TRAINED = sorted(f"{s}@{r}" for s in ("train", "evaluate") for r in RUNS)
STAGES = (
    "collect", "verify", "label", "teacher_eval", "masks", "dataset", "audit", "pretrain_critic",
)  # fmt: skip


def _params():
    params = _with_stage_two(tiny_params_dict(ENVS, episodes=2), RUNS)
    # MountainCarContinuous collects with RAE: its teacher phases act on the acting teacher
    params["collect"]["MountainCarContinuous-v0"].update(
        behaviour="rae", rae_switch_steps=[5, 10], teacher_every_k=2
    )
    return params


def _built(tmp_path_factory, name, extra_env=None):
    """A scratch repo after its first `dvc repro` (and that repro's output)."""
    repo = _scratch_repo(tmp_path_factory.mktemp(name) / "repo", _params())
    return repo, _run(["dvc", "repro"], repo, extra_env)


@pytest.fixture(scope="module")
def built_a(tmp_path_factory):
    return _built(tmp_path_factory, "a")


@pytest.fixture(scope="module")
def built_b(tmp_path_factory):
    return _built(tmp_path_factory, "b", cpu_dispatch.other_cpu())


def _copy(built, tmp_path):
    repo, output = built
    shutil.copytree(repo, tmp_path / "repo", symlinks=True)
    return tmp_path / "repo", output


def test_same_inputs_give_the_same_bytes_in_two_directories(built_a, built_b):
    """Every stage's outputs are a pure function of its inputs: no wall-clock value or path, and
    no dependence on numpy's SIMD or OpenBLAS's kernels (`b` builds with another machine's). On
    one machine torch's kernels are the same in both, so the networks' outputs agree too
    (pipeline/tools/reproducibility.py: across machines they may not)."""
    from pipeline.tools.reproducibility import MACHINE_DEPENDENT

    text_a, text_b = ((b[0] / "dvc.lock").read_text() for b in (built_a, built_b))
    outs_a, outs_b = _outs(text_a), _outs(text_b)
    differ = sorted(k for k in outs_a.keys() | outs_b.keys() if outs_a.get(k) != outs_b.get(k))
    # what each build paid (its seconds) may differ; the prompts a fresh build asks may not
    costs = [k for k in differ if k[1].startswith(MACHINE_DEPENDENT)]
    differ = [k for k in differ if k not in costs]
    assert not differ, f"outputs that differ in b ({cpu_dispatch.other_cpu()}): {differ}"
    for _, path in costs:
        a, b = (json.loads((built[0] / path).read_text()) for built in (built_a, built_b))
        assert a["prompts_by_task"] == b["prompts_by_task"] and a.keys() == b.keys(), path
    lock_a, lock_b = yaml.safe_load(text_a), yaml.safe_load(text_b)
    for lock in (lock_a, lock_b):
        for stage in lock["stages"].values():
            stage["outs"] = [o for o in stage.get("outs", [])
                             if not o["path"].startswith(MACHINE_DEPENDENT)]  # fmt: skip
    assert lock_a == lock_b


def _outs(text: str) -> dict[tuple[str, str], str]:
    """(stage, output path) -> md5 of every output dvc.lock records."""
    stages = yaml.safe_load(text)["stages"]
    return {(s, o["path"]): o.get("md5", "") for s, b in stages.items() for o in b.get("outs", [])}


def _run_failing(args, cwd):
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode != 0, f"{args} should have failed:\n{result.stdout}"
    return result.stdout + result.stderr


def test_dvc_repro_reruns_only_what_changed(built_a, tmp_path):
    params = _params()
    repo, first = _copy(built_a, tmp_path)
    stages = STAGES
    stage_two = ["compare", "knowledge", *TRAINED]
    assert _ran(first) == sorted(
        ["check_params", *(f"{s}@{e}" for s in (*stages, "policy_teacher") for e in ENVS),
         *stage_two]
    )  # fmt: skip
    for run in RUNS:
        assert (
            yaml.safe_load((repo / "metrics" / "eval" / f"{run}.json").read_text())["episodes"] == 2
        )
    for env_id in ENVS:
        assert (repo / "data" / "rollouts" / env_id / "manifest.json").exists()
        assert yaml.safe_load((repo / "metrics" / "rollouts" / f"{env_id}.json").read_text())["ok"]
    manifest = yaml.safe_load(
        (repo / "data" / "rollouts" / "MountainCarContinuous-v0" / "manifest.json").read_text()
    )
    assert manifest["acting_teacher"]["id"].startswith("scripted:")  # named, not only hashed

    second = _run(["dvc", "repro"], repo)
    assert _ran(second) == []

    params["collect"]["MountainCarContinuous-v0"]["seed"] = 1
    write_params(repo / "params.yaml", params)
    third = _run(["dvc", "repro"], repo)
    # new MountainCarContinuous data: its stages, its C_V and the run that reads them rerun; the
    # PPO run on MountainCar-v0 depends on its own env's data and critic marker only
    expected = {
        "check_params",
        "compare",
        "knowledge",
        *(f"{s}@MountainCarContinuous-v0" for s in stages),
        "train@mcc-erpv",
        "evaluate@mcc-erpv",
    }
    assert _ran(third) == sorted(expected)

    params["train"]["mc-ppo"]["seed"] = 1  # one run's params: that run alone retrains
    write_params(repo / "params.yaml", params)
    assert _ran(_run(["dvc", "repro"], repo)) == [
        "check_params", "compare", "evaluate@mc-ppo", "knowledge", "train@mc-ppo",
    ]  # fmt: skip

    # relabel the same frames with another teacher: label reruns, never collect (the acting
    # teacher of MountainCarContinuous's RAE phases is a collect setting)
    env = "MountainCarContinuous-v0"
    params["label"]["teacher"] = {"backend": "random", "reliability": 0.8, "seed": 0}
    write_params(repo / "params.yaml", params)
    assert _ran(_run(["dvc", "repro", f"label@{env}"], repo)) == ["check_params", f"label@{env}"]
    stale = _run(["dvc", "status"], repo)
    assert f"masks@{env}:" in stale and "collect@" not in stale and "verify@" not in stale

    # a params mistake gets the project's message before DVC deletes anything
    model = repo / "models" / "mc-ppo" / "agent.json"
    params["train"]["mc-ppo"]["method"] = "ppoo"
    write_params(repo / "params.yaml", params)
    failed = _run_failing(["dvc", "repro"], repo)
    assert "train.mc-ppo.method: unknown method 'ppoo'; known: ppo, hybrid_ppo, sac, drq" in failed
    assert model.exists()
    params["train"]["mc-ppo"]["method"] = "ppo"
    write_params(repo / "params.yaml", params)

    # a prompt edit relabels every env and changes no rollout: collect (which imports the label
    # code) reruns as a no-op, so verify does not rerun. The audits are the targets: what reads
    # the new labels downstream (datasets, C_V, the runs) reruns as DVC's graph says, unchecked
    prompt = repo / "pipeline" / "teach" / "labels" / "prompts" / "common" / "objects.txt"
    prompt.write_text(prompt.read_text() + "Name at most five objects.\n")
    fourth = _run(["dvc", "repro", *(f"audit@{e}" for e in ENVS)], repo)
    ran = _ran(fourth)
    assert {f"{s}@{e}" for s in ("label", "audit") for e in ENVS} <= set(ran)
    assert not any(stage.startswith("verify@") for stage in ran)
    # (a word boundary: a count such as "20 teacher calls" is not a zero)
    assert "nothing to do" in fourth and not re.search(r"(?<![\d,])0 teacher calls", fourth)


def readme_block(marker: str) -> str:
    """The fenced bash block that follows `<!-- marker -->` in the README."""
    text = (REPO / "README.md").read_text()
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```bash\n(.*?)```", text, re.S)
    assert match, f"README.md has no bash block after <!-- {marker} -->"
    return match.group(1)


def _bash(script: str, cwd) -> str:
    git_user = {
        f"GIT_{who}_{what}": "t" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL")
    }
    return _run(["bash", "-euo", "pipefail", "-c", script], cwd, extra_env=git_user)


def test_shared_dataset_reaches_a_fresh_clone_through_a_dvc_remote(built_a, tmp_path):
    """Share as the README says, running its commands as written (paths substituted); a fresh
    clone `dvc pull`s and has everything: nothing to recollect or relabel, and the dataset loads
    in one line."""
    env_id = "MountainCarContinuous-v0"
    params = _params()
    repo, _ = _copy(built_a, tmp_path)
    _run(["git", "add", "-A"], repo)  # the project's own files, as in a real repository
    _bash("git commit -qm project", repo)
    remote = tmp_path / "remote"
    _bash(readme_block("sharing:you").replace("/srv/vlmrl-remote", str(remote)), repo)

    collaborator = readme_block("sharing:collaborator").replace("/path/to/your/repo", str(repo))
    out = _bash(collaborator, tmp_path)
    assert _ran(out) == [], out  # no collect, no label, no training: all pulled
    clone = tmp_path / "vlmrl"
    assert _stale(clone) == {}

    from datasets import load_dataset

    ds = load_dataset(str(clone / "data" / "datasets" / env_id), cache_dir=str(tmp_path / "hf"))[
        "train"
    ]
    assert ds.num_rows == 2 * 21 and ds[0]["image"].size == (32, 32)

    # train from the pulled dataset in the clone: a new seed retrains the agent, nothing upstream
    params["train"]["mcc-erpv"]["seed"] = 1
    write_params(clone / "params.yaml", params)
    assert _ran(_run(["dvc", "repro", "train@mcc-erpv"], clone)) == [
        "check_params", "train@mcc-erpv",
    ]  # fmt: skip


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
