"""dvc.lock's code deps against the tree (pipeline/tools/code_deps.py): a change to the package
that the lock does not record fails the quick start's check on CI (`vlmrl-lockcheck`)."""

import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.tools.code_deps import main, refresh_code_deps, stale_code_deps
from pipeline.tools.sweeps.queue import tool_env

ROOT = Path(__file__).resolve().parents[2]

DVC_YAML = """\
stages:
  data:
    cmd: python make.py > data.txt
    deps: [make.py, raw.txt]
    outs: [data.txt]
  model:
    cmd: mkdir -p model && cat data.txt > model/w
    deps: [data.txt, lib]
    params: [seed]
    outs: [model]
"""


def run(cwd, *cmd):
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True,
                          env=tool_env())  # fmt: skip


def test_the_committed_lock_records_the_hash_of_every_code_dep_in_the_tree():
    # what CI's `vlmrl-lockcheck` reports as problems: refresh (or `dvc repro`) and commit
    stale = stale_code_deps(ROOT)
    assert stale == [], "dvc.lock is stale; `python -m pipeline.tools.code_deps --refresh`: " + (
        ", ".join(sorted({f"{dep.stage}: {dep.path}" for dep in stale}))
    )


@pytest.mark.slow  # a DVC project built, changed and refreshed: 6-8 s
def test_a_code_change_is_found_and_refreshed_with_every_output_as_locked(tmp_path, capsys):
    repo = tmp_path / "repo"
    (repo / "lib").mkdir(parents=True)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / "params.yaml").write_text("seed: 0\n")
    (repo / "raw.txt").write_text("raw\n")
    (repo / "make.py").write_text("print('data')\n")
    (repo / "lib" / "__init__.py").write_text("A = 1\n")
    for cmd in (("git", "init", "-q"), ("dvc", "init", "-q"), ("dvc", "repro", "-q")):
        run(repo, *cmd)
    assert stale_code_deps(repo) == []
    # the project's .dvcignore: bytecode that Python writes beside the code moves no hash
    (repo / ".dvcignore").write_text((ROOT / ".dvcignore").read_text())
    (repo / "lib" / "__pycache__").mkdir()
    (repo / "lib" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    assert stale_code_deps(repo) == []
    before = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]

    (repo / "make.py").write_text("print('data')  # a comment\n")
    (repo / "lib" / "b.py").write_text("B = 2\n")  # a directory dep gains a file
    (repo / "raw.txt").write_text("raw, changed\n")  # data, not code: its stage must run again
    (repo / "params.yaml").write_text("seed: 1\n")  # params: never refreshed
    stale = stale_code_deps(repo)
    assert [(dep.stage, dep.path) for dep in stale] == [("data", "make.py"), ("model", "lib")]
    assert all(dep.locked != dep.current for dep in stale)
    assert main([str(repo)]) == 1 and "2 stale code dep(s) in 2 stage(s)" in capsys.readouterr().out

    assert refresh_code_deps(repo) == stale
    after = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    for name in before:
        assert after[name]["outs"] == before[name]["outs"]
        assert after[name].get("params") == before[name].get("params")
        deps_before = {d["path"]: d for d in before[name]["deps"]}
        deps_after = {d["path"]: d for d in after[name]["deps"]}
        moved = {path for path in deps_before if deps_before[path] != deps_after[path]}
        assert moved == {dep.path for dep in stale if dep.stage == name}
    assert after["model"]["deps"][1]["nfiles"] == 2  # the dir's meta follows its hash
    assert stale_code_deps(repo) == []
    # what is left for `dvc status`: the data dep and the params, which a refresh never hides
    status = run(repo, "dvc", "status", "--json").stdout
    assert "raw.txt" in status and "make.py" not in status and '"lib"' not in status
    assert "seed" in status
    assert main([str(repo)]) == 0


def test_a_directory_without_a_lock_is_refused(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no dvc.lock" in capsys.readouterr().err
