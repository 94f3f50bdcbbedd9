"""benchmarks.guidance_coupling: L_V against E[Q_f] E[gap] from a run's logged curves."""

import pytest

from benchmarks.guidance_coupling import coupling, main
from pipeline.learn.curves import write_training_log


def _run(tmp_path, l_v, q_f=0.5, gap=2.0, steps=(100, 200, 300, 400)):
    rows = [{"step": s, "vpg/loss": l_v, "vpg/q_f": q_f, "vpg/dist_pi_a_v": gap,
             "actor_loss": -3.0, "vpg/weight": 10.0} for s in steps]  # fmt: skip
    run = tmp_path / "plots" / "train" / "r"
    write_training_log(run, tmp_path / "r.json", [], rows)
    return run


def test_a_gate_that_opens_only_where_the_actor_agrees_scores_near_zero(tmp_path, capsys):
    """Independent gate: L_V = E[Q_f] E[gap] (coupling 1); a gate open only where the gap is 0
    leaves L_V near 0. Only rows after half of the run count, as in a sweep report's
    diagnostics (step > steps / 2: 300 and 400 of a 400-step run)."""
    read = lambda path: (tmp_path / path).read_text()  # noqa: E731
    _run(tmp_path, l_v=1.0)
    c = coupling(read, "plots/train/r", steps=400)
    assert c["rows"] == 2 and c["coupling_median"] == pytest.approx(1.0)
    assert c["actor_loss_abs"] == 3.0 and c["weight"] == 10.0
    _run(tmp_path, l_v=0.01)
    assert coupling(read, "plots/train/r", steps=400)["coupling_median"] == pytest.approx(0.01)
    assert main(["--run", "r", "--steps", "400", "--repo", str(tmp_path)]) == 0
    assert "coupling 0.01 (median; 0.01 to 0.01); |L_pi| 3, lambda_1 10" in capsys.readouterr().out


def test_a_run_without_guidance_rows_is_named(tmp_path):
    _run(tmp_path, l_v=1.0, steps=(100,))
    with pytest.raises(ValueError, match="plots/train/r: no vpg/loss row after step 200"):
        coupling(lambda path: (tmp_path / path).read_text(), "plots/train/r", steps=400)
