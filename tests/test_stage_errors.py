"""The stages catch the project's own error types only: a user's mistake is one `error:` line and
exit code 2; a bug (a bare ValueError from deep inside) is a traceback, never a one-liner that
hides it."""

from __future__ import annotations

import pytest

import stages.audit
import stages.evaluate
import stages.pretrain_critic
import stages.train
from pipeline.learn.methods.base import TrainError
from tests.conftest import REPO, tiny_params_dict, write_params


def _train_argv(tmp_path, params):
    return ["--params", str(params), "--run", "r", "--dataset", str(tmp_path / "ds"),
            "--out", str(tmp_path / "m"),
            "--live", str(tmp_path / "p"), "--summary", str(tmp_path / "s.json")]  # fmt: skip


@pytest.fixture
def params_file(tmp_path):
    return write_params(tmp_path / "params.yaml", tiny_params_dict())


def test_train_reports_a_project_error_in_one_line(tmp_path, params_file, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise TrainError("train.r: the labelled dataset is needed (--dataset)")

    monkeypatch.setattr(stages.train, "train_run", fail)
    assert stages.train.main(_train_argv(tmp_path, params_file)) == 2
    assert "error: train.r: the labelled dataset is needed" in capsys.readouterr().err


def test_train_lets_a_bug_through(tmp_path, params_file, monkeypatch):
    def bug(*args, **kwargs):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(stages.train, "train_run", bug)
    with pytest.raises(ValueError, match="broadcast"):
        stages.train.main(_train_argv(tmp_path, params_file))


def test_evaluate_names_a_missing_checkpoint(tmp_path, capsys):
    raw = tiny_params_dict()
    raw["evaluate"] = {"episodes": 1, "seed": 0}
    params_file = write_params(tmp_path / "params.yaml", raw)
    argv = ["--params", str(params_file), "--agent", str(tmp_path / "none"),
            "--out", str(tmp_path / "e.json")]  # fmt: skip
    assert stages.evaluate.main(argv) == 2
    assert "agent.json does not exist" in capsys.readouterr().err


def test_pretrain_critic_names_a_missing_dataset(tmp_path, capsys):
    raw = tiny_params_dict(("MountainCarContinuous-v0",))
    raw["critic"] = {"envs": ["MountainCarContinuous-v0"], "steps": 1, "seed": 0}
    raw["erpv"] = {"network": {"obs": "state"}}
    params = write_params(tmp_path / "params.yaml", raw)
    argv = ["--params", str(params), "--env", "MountainCarContinuous-v0",
            "--dataset", str(tmp_path / "nothing"), "--out", str(tmp_path / "c"),
            "--live", str(tmp_path / "p"), "--summary", str(tmp_path / "s.json")]  # fmt: skip
    assert stages.pretrain_critic.main(argv) == 2
    assert str(tmp_path / "nothing") in capsys.readouterr().err


def test_audit_against_an_empty_table_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from pipeline.teach.labelling.review import AuditError

    def empty(*args, **kwargs):
        raise AuditError("--against: both label tables must have rows")

    monkeypatch.setattr(stages.audit, "write_audit", empty)
    argv = ["--rollouts", str(REPO), "--labels", "x", "--out", str(tmp_path / "a.html")]
    assert stages.audit.main(argv) == 2
    assert "error: --against" in capsys.readouterr().err


def test_a_python_without_the_dependencies_is_told_to_use_the_environment():
    """DVC run outside the project's environment starts stages with another `python`: one line
    naming the interpreter and the fix, not an ImportError traceback. (A python that lacks numpy
    is simulated by a find_spec that does not find it.)"""
    import subprocess
    import sys

    from tests.conftest import REPO

    code = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'numpy' else real(name, *a)\n"
        "import stages.verify\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert (
        result.stderr.startswith("error: ")
        and "lacks the project's dependencies (numpy)" in result.stderr
    )
    assert ". .venv/bin/activate" in result.stderr and "Traceback" not in result.stderr
