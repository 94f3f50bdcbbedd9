"""benchmarks.alpha_rate on curves that torch's Adam draws: a temperature whose gradient keeps
one sign moves by about the learning rate per update, whatever the gradient's size, and a little
more while the gradient grows; one whose gradient changes sign at every update stays where it is.
The rates read from a results.json in the report's layout."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.alpha_rate import main, table_rates

LR, UPDATES, EVERY = 1e-4, 2_000, 200


def adam_alpha_curve(gradient) -> list[list[float]]:
    """(step, alpha) every EVERY updates, each the mean over that interval's updates (as the
    training loop logs it), for log alpha stepped by Adam with `gradient(update)`."""
    log_alpha = torch.tensor(0.1).log().requires_grad_(True)
    adam = torch.optim.Adam([log_alpha], lr=LR)
    curve, window = [], []
    for update in range(1, UPDATES + 1):
        adam.zero_grad()
        log_alpha.grad = torch.tensor(float(gradient(update)))
        adam.step()
        window.append(float(log_alpha.detach().exp()))
        if update % EVERY == 0:
            curve.append([update, sum(window) / len(window)])
            window = []
    return curve


@pytest.mark.parametrize(
    ("gradient", "low", "high"),
    [
        (lambda u: -25.0, 0.97, 1.03),  # a large steady push up (VER's towards alpha_bar near 1)
        (lambda u: -0.01, 0.97, 1.03),  # a small one: the same rate
        (lambda u: 3.0 + 0.001 * u, -1.2, -1.01),  # a growing push down: a little more
        (lambda u: (-1.0) ** u, -0.03, 0.03),  # no steady sign
    ],
)
def test_adam_moves_log_alpha_by_its_learning_rate_whatever_the_gradients_size(
    tmp_path, gradient, low, high
):
    results = {"experiments": [{"name": "r-s0", "cell": "r", "seed": 0,
                                "curves": {"alpha": adam_alpha_curve(gradient)}}]}  # fmt: skip
    [row] = table_rates(results, LR, updates_per_step=1.0)
    assert len(row["rates"]) == UPDATES // EVERY - 1
    # after Adam's first interval (its moments warm up), every interval's rate
    assert all(low <= rate <= high for rate in row["rates"][1:]), row["rates"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert main([str(path), "--alpha-lr", str(LR), "--updates-per-step", "1"]) == 0


def test_a_results_file_without_alpha_curves_is_named(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"experiments": [{"name": "r-s0", "cell": "r", "seed": 0}]}))
    with pytest.raises(SystemExit, match="no run logged an alpha curve"):
        main([str(path)])
