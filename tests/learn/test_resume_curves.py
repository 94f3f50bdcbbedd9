"""benchmarks/resume_curves.py: a running run's logged curves, read from its resume state."""

import json

import pytest

from benchmarks.resume_curves import curves, main


def test_the_logged_rows_of_each_resume_state_are_read(tmp_path, monkeypatch):
    from pipeline.learn.methods.base import RESUME_ROOT_ENV, resume_for

    monkeypatch.setenv(RESUME_ROOT_ENV, str(tmp_path))
    logs = [{"step": 1000.0, "eval_return": 22.5, "critic_loss": 4.0, "other": 1.0},
            {"step": 2000.0, "eval_return": 126.5, "vpg/gate_open": 0.8}]  # fmt: skip
    resume = resume_for(".resume/t-erpv", 1000, {"run": "t-erpv", "train": {"seed": 0}})
    resume.save({"step": 2000, "logs": logs, "curve": []})
    (found,) = curves(tmp_path, "t-erpv").values()
    assert found == {"step": 2000, "logs": [
        {"step": 1000.0, "eval_return": 22.5, "critic_loss": 4.0},  # what it does not know: out
        {"step": 2000.0, "eval_return": 126.5, "vpg/gate_open": 0.8},
    ]}  # fmt: skip
    main(["t-erpv", "--out", str(tmp_path / "c.json")])
    assert json.loads((tmp_path / "c.json").read_text())["t-erpv"] == curves(tmp_path, "t-erpv")
    with pytest.raises(SystemExit, match="no resume state for t-sac"):
        main(["t-erpv", "t-sac", "--out", str(tmp_path / "d.json")])
