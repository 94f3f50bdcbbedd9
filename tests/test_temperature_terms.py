"""benchmarks.temperature_terms: the two gradients on SAC's temperature, read from a sweep's logs."""

import json
import math

import pytest
import torch

from benchmarks import temperature_terms as tt
from pipeline.agents.erpv import ver_regulariser
from pipeline.agents.off_policy import sac_alpha_loss
from pipeline.curves import write_training_log


def test_gradient_terms_match_autograd_of_eq_11_and_eq_7():
    """The terms computed from the logged metrics are the gradients autograd gives the agent's
    own losses (sac_alpha_loss + lambda_2 ver_regulariser) with respect to log alpha."""
    gen = torch.Generator().manual_seed(0)
    lambda_2, target_entropy = 10.0, -1.0
    log_alpha = torch.tensor(math.log(0.13), requires_grad=True)
    log_pi = torch.randn(64, generator=gen)  # (B,)
    g = torch.rand(48, generator=gen) * 4  # (N,) eq. 14's confidence on the labelled rows
    alpha = log_alpha.exp()
    alpha_loss = sac_alpha_loss(alpha, log_pi, target_entropy)
    (sac_grad,) = torch.autograd.grad(alpha_loss, log_alpha, retain_graph=True)
    (ver_grad,) = torch.autograd.grad(lambda_2 * ver_regulariser(alpha, g), log_alpha)
    row = {  # what update_actor_and_alpha logs
        "step": 500.0,
        "alpha": float(alpha.detach()),
        "alpha_loss": float(alpha_loss.detach()),
        "ver/alpha_target": float(torch.sigmoid(g).mean()),
    }
    (terms,) = tt.gradient_terms([row], lambda_2)
    assert terms["sac"] == pytest.approx(float(sac_grad), rel=1e-5)
    assert terms["ver"] == pytest.approx(float(ver_grad), rel=1e-5)
    assert terms["sum"] == pytest.approx(float(sac_grad + ver_grad), rel=1e-5)


def test_gradient_terms_without_ver_and_rows_without_the_temperature():
    rows = [
        {"step": 1.0, "critic_loss": 3.0},  # a critic-only row: skipped
        {"step": 2.0, "alpha": 0.1, "alpha_loss": 0.02, "ver/alpha_target": 0.9},
    ]
    (off,) = tt.gradient_terms(rows, lambda_2=0.0)  # erpv-no-ver: VER computed, weight 0
    assert off["ver"] == 0.0 and off["sum"] == 0.02
    (sac,) = tt.gradient_terms([{k: v for k, v in rows[1].items() if k[:4] != "ver/"}], 10.0)
    assert sac["ver"] == 0.0


def _terms(alphas, sac, ver, every=500):
    return [
        {"step": float(1000 + i * every), "alpha": a, "sac": s, "ver": v, "sum": s + v}
        for i, (a, s, v) in enumerate(zip(alphas, sac, ver, strict=True))
    ]


def test_summarise_slope_ratio_and_share():
    lr, per_step = 1e-4, 0.5  # a temperature update every 2nd step
    # Adam saturated: log alpha up by lr per temperature update
    alphas = [0.1 * math.exp(lr * per_step * 500 * i) for i in range(5)]
    f = tt.summarise(_terms(alphas, [0.01, 0.02, -0.01, 0.02, 0.01], [-2.0] * 5), lr, per_step)
    assert f["slope_over_lr"] == pytest.approx(1.0)
    assert f["median_ver_over_sac"] == pytest.approx(200.0)  # of per-window 200, 100, 200, 100, 200
    assert f["raising_share"] == 1.0
    assert f["steps"] == (1000, 3000)
    plain = tt.summarise(_terms([0.1, 0.09, 0.095], [0.01, -0.01, 0.02], [0.0] * 3), lr, per_step)
    assert plain["median_ver_over_sac"] is None and plain["median_ver"] is None
    assert plain["raising_share"] == pytest.approx(1 / 3)
    assert plain["slope_over_lr"] == pytest.approx(math.log(0.095 / 0.1) / (1000 * per_step) / lr)
    with pytest.raises(ValueError, match="at least two"):
        tt.summarise(_terms([0.1], [0.01], [0.0]), lr, per_step)


def _cell(out, name, lambda_2, rows):
    (out / "runs").mkdir(parents=True, exist_ok=True)
    section = {"lambda_2": lambda_2, "alpha_lr": 1e-4, "actor_update_freq": 2}
    (out / "runs" / f"{name}.json").write_text(json.dumps({"spec": {"section": section}}))
    write_training_log(out / "live" / name, out / "live" / f"{name}.json", rows=rows)


def test_table_reads_a_sweep_directory(tmp_path, capsys):
    """From result files and dvclive logs as a sweep writes them: each cell's spec sets
    lambda_2 and the temperature's update rate."""
    rising = [
        {"step": s, "alpha": 0.1 * math.exp(1e-4 * (s - 1000) / 2), "alpha_loss": 0.01,
         "ver/alpha_target": 0.99, "critic_loss": 1.0}
        for s in (1000, 1500, 2000)
    ]  # fmt: skip
    _cell(tmp_path, "erpv-seed0", 10.0, rising)
    _cell(tmp_path, "erpv-no-ver-seed0", 0.0, rising)
    _cell(
        tmp_path,
        "sac-seed0",
        0.0,
        [{k: v for k, v in r.items() if k[:4] != "ver/"} for r in rising],
    )
    f = tt.cell_figures(tmp_path, "erpv-seed0")
    assert f["slope_over_lr"] == pytest.approx(1.0)
    middle = rising[1]["alpha"]  # the median window's
    assert f["median_ver"] == pytest.approx(2 * 10 * middle * (middle - 0.99))
    assert tt.cell_figures(tmp_path, "erpv-no-ver-seed0")["median_ver"] is None

    tt.main([str(tmp_path), "--cells", "erpv*"])
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[2:]] == ["erpv-no-ver-seed0", "erpv-seed0"]
    assert lines[-1].split()[-2:] == ["100%", "+1.00"]  # erpv: VER pulls alpha up everywhere
    assert lines[-2].split()[-4:] == ["-", "-", "0%", "+1.00"]  # lambda_2 0: no VER term
    tt.main([str(tmp_path)])  # every cell; sac has no VER column
    rows = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines()[2:]}
    assert sorted(rows) == ["erpv-no-ver-seed0", "erpv-seed0", "sac-seed0"]
    assert rows["sac-seed0"][-4:] == ["-", "-", "0%", "+1.00"]
    with pytest.raises(SystemExit, match=r"semore\*: no such cell \(cells: erpv-no-ver-seed0, "):
        tt.main([str(tmp_path), "--cells", "erpv*", "semore*"])  # a typo is not skipped
    with pytest.raises(SystemExit, match="no finished cell in"):
        tt.main([str(tmp_path / "elsewhere")])
    with pytest.raises(FileNotFoundError, match="no result yet"):
        tt.cell_figures(tmp_path, "drq-seed0")
