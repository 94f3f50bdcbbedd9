"""vlmrl-sweep's note on dvc.lock trees that the cache lacks where an experiment needs them
(lock_trees.py), and the failure it foretells."""

import subprocess

import pytest
import yaml

from pipeline.tools.sweeps.lock_trees import format_missing_trees, missing_trees
from pipeline.tools.sweeps.queue import tool_env

# C_V's shape: one directory output per env, a run reading its method's folder inside it; a
# stage before C_V's (P2's stage one) has DVC read the lock before C_V's entry changes
DVC_YAML = """\
stages:
  data:
    cmd: cat raw.txt > data.txt
    deps: [raw.txt]
    outs: [data.txt]
  critic:
    cmd: mkdir -p models/critic/E-v0/erpv && echo ${critic.seed} > models/critic/E-v0/erpv/w
    deps: [data.txt]
    params: [critic]
    outs: [models/critic/E-v0]
  train:
    cmd: mkdir -p models/run && cat models/critic/E-v0/erpv/w > models/run/agent
    deps: [models/critic/E-v0/erpv]
    outs: [models/run]
  after:
    cmd: cat models/run/agent > after.txt
    deps: [models/run]
    outs: [after.txt]
"""


def run(cwd, *cmd, check=True):
    return subprocess.run(cmd, cwd=cwd, check=check, capture_output=True, text=True,
                          env=tool_env())  # fmt: skip


def _built(path):
    """A repository whose stages have run and whose lock is committed."""
    path.mkdir()
    (path / "dvc.yaml").write_text(DVC_YAML)
    (path / "params.yaml").write_text("critic:\n  seed: 0\n")
    (path / "raw.txt").write_text("raw\n")
    for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "repro", "-q"),
                ("git", "add", "-A"),
                ("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built")):  # fmt: skip
        run(path, *cmd)
    return path


def _tree(repo, stage="critic"):
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    md5 = lock["stages"][stage]["outs"][0]["md5"]
    return repo / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def test_a_clone_without_the_lock_s_trees_is_named_with_the_dep_that_needs_them(tmp_path):
    built = _built(tmp_path / "built")
    assert missing_trees(built) == []  # its cache holds what it built
    clone = tmp_path / "clone"
    run(tmp_path, "git", "clone", "-q", str(built), str(clone))
    [found] = missing_trees(clone)  # a fresh clone's cache is empty
    assert (found.stage, found.dep, found.writer, found.output) == (
        "train",
        "models/critic/E-v0/erpv",
        "critic",
        "models/critic/E-v0",
    )
    # `after` reads a whole output (models/run), not inside one: not named
    assert missing_trees(clone, envs=("F-v0",)) == []  # a table of other envs is not affected
    note = format_missing_trees([found], clone)
    assert "models/critic/E-v0 (critic)" in note and "train, which reads models/critic" in note
    assert format_missing_trees([], clone) == ""
    run(clone, "dvc", "cache", "dir", "--local", str(built / ".dvc" / "cache"))
    assert missing_trees(clone) == []


@pytest.mark.slow
def test_the_failure_the_note_foretells_and_its_fix(tmp_path):
    """With the committed C_V tree absent from the cache (a lock written on another machine), an
    experiment that runs train passes; the same experiment again, train now from the run cache,
    fails as P2's resumed rounds runs did. Committing the critic's lock entry as the experiment
    wrote it (what 3dac41d did) clears the note, and the experiment then passes."""
    repo = _built(tmp_path / "repo")
    _tree(repo).unlink()  # the lock's tree was built elsewhere
    assert [f.dep for f in missing_trees(repo)] == ["models/critic/E-v0/erpv"]
    first = run(repo, "dvc", "exp", "run", "--temp", "-n", "first", "-S", "critic.seed=1")
    assert "Running stage 'train'" in first.stdout
    again = run(
        repo, "dvc", "exp", "run", "--temp", "-n", "again", "-S", "critic.seed=1", check=False
    )
    assert again.returncode != 0
    assert "Stage 'train' is cached" in again.stdout
    assert "failed to load directory ('models', 'critic', 'E-v0')" in again.stderr
    # the fix: the critic's lock entry as the first experiment wrote it
    refs = run(repo, "git", "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps")
    [ref] = [line.split()[0] for line in refs.stdout.splitlines() if line.endswith("/first")]
    wrote = yaml.safe_load(run(repo, "git", "show", f"{ref}:dvc.lock").stdout)
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    lock["stages"]["critic"] = wrote["stages"]["critic"]
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    run(repo, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "trees")
    assert missing_trees(repo) == []
    fixed = run(repo, "dvc", "exp", "run", "--temp", "-n", "fixed", "-S", "critic.seed=1")
    assert "Stage 'train' is cached" in fixed.stdout
