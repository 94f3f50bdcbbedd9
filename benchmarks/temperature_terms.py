"""Which loss moves SAC's temperature in a sweep's runs: SAC's own (ERPv eq. 11) or VER's pull
towards sigmoid(G) (eq. 7). Reads what each run logged; trains and loads nothing.

Both terms as gradients with respect to log alpha (the parameter Adam moves), per log window:

- eq. 11, L_alpha = -alpha (log pi + H_bar): d/d log alpha = alpha (H - H_bar), H = -log pi, which
  is the logged `alpha_loss` itself (its window mean is the mean of the per-update gradients).
  Positive: descent lowers alpha (the policy's entropy is above the target).
- eq. 7's VER term, lambda_2 mean_i (alpha - sigmoid(G_i))^2: d/d log alpha
  = 2 lambda_2 alpha (alpha - mean_i sigmoid(G_i)), mean sigmoid(G) being the logged
  `ver/alpha_target`. Window means stand in for per-update values: alpha moves by under 3% in a
  window of 500 steps.

Adam's step is close to its learning rate whenever a gradient keeps one sign, whatever its size; a
measured d log alpha per temperature update of about `alpha_lr` (slope/lr near 1) says the
temperature followed the sign of the sum, not a balance of the two terms.

    python -m benchmarks.temperature_terms reports/pixels --cells 'erpv*' 'sac*'
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep import finished_cells, read_logs


def gradient_terms(rows: list[dict[str, float]], lambda_2: float) -> list[dict[str, float]]:
    """Per logged row that has `alpha` and `alpha_loss`: the step, alpha, eq. 11's and VER's
    gradients with respect to log alpha (module docstring) and their sum. VER is 0 for a run
    without `ver/alpha_target` (not ERPv) or with `lambda_2` 0."""
    out = []
    for row in rows:
        if "alpha" not in row or "alpha_loss" not in row:
            continue
        alpha = row["alpha"]
        sac = row["alpha_loss"]  # eq. 11's gradient in log alpha: alpha (H - H_bar)
        target = row.get("ver/alpha_target")
        ver = 0.0 if target is None else 2.0 * lambda_2 * alpha * (alpha - target)  # eq. 7
        out.append({"step": row["step"], "alpha": alpha, "sac": sac, "ver": ver, "sum": sac + ver})
    return out


def summarise(
    terms: list[dict[str, float]], alpha_lr: float, alpha_updates_per_step: float
) -> dict[str, Any]:
    """One run's figures: alpha at the first and last logged row, the median |VER| / |eq. 11|
    (None without VER), the share of windows whose summed gradient is negative (descent raises
    alpha), and the mean d log alpha per temperature update over the logged span as a multiple
    of `alpha_lr`."""
    if len(terms) < 2:
        raise ValueError(
            f"need at least two logged rows with alpha and alpha_loss, got {len(terms)}"
        )
    sac = np.array([t["sac"] for t in terms])
    ver = np.array([t["ver"] for t in terms])
    first, last = terms[0], terms[-1]
    updates = (last["step"] - first["step"]) * alpha_updates_per_step
    slope = (math.log(last["alpha"]) - math.log(first["alpha"])) / updates
    has_ver = bool(np.any(ver != 0))
    return {
        "steps": (int(first["step"]), int(last["step"])),
        "alpha": (first["alpha"], last["alpha"]),
        "median_ver_over_sac": float(np.median(np.abs(ver) / np.abs(sac))) if has_ver else None,
        "median_sac": float(np.median(sac)),
        "median_ver": float(np.median(ver)) if has_ver else None,
        "raising_share": float(np.mean(sac + ver < 0)),
        "slope_over_lr": slope / alpha_lr,
    }


def run_section(out: Path, cell: str) -> dict[str, Any]:
    """The method section a sweep's cell trained with (its result file's spec)."""
    path = out / "runs" / f"{cell}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the cell {cell!r} has no result yet")
    return json.loads(path.read_text())["spec"]["section"]


def cell_figures(out: Path, cell: str) -> dict[str, Any]:
    """`summarise` for one finished cell of the sweep at `out` (its spec's lambda_2, alpha_lr
    and actor_update_freq; its dvclive logs under live/)."""
    section = run_section(out, cell)
    live = out / "live" / cell
    if not live.is_dir():
        raise FileNotFoundError(f"{live} does not exist: the cell {cell!r} logged nothing there")
    terms = gradient_terms(read_logs(live), float(section.get("lambda_2", 0.0)))
    # one update per environment step (update_every updates every update_every steps); the
    # actor and the temperature step on every actor_update_freq-th update
    return summarise(terms, section["alpha_lr"], 1.0 / section["actor_update_freq"])


def table(out: Path, cells: list[str]) -> str:
    head = (
        f"{'cell':<22} {'steps':>11} {'alpha first -> last':>20} {'eq.11 grad':>10} "
        f"{'VER grad':>9} {'|VER|/|eq.11|':>13} {'sum<0':>6} {'dlog/lr':>7}"
    )
    lines = [head]
    for cell in cells:
        f = cell_figures(out, cell)
        ratio = "-" if f["median_ver_over_sac"] is None else f"{f['median_ver_over_sac']:.0f}"
        ver = "-" if f["median_ver"] is None else f"{f['median_ver']:+.3f}"
        steps = "{}-{}".format(*f["steps"])
        alpha = "{:.4f} -> {:.4f}".format(*f["alpha"])
        lines.append(
            f"{cell:<22} {steps:>11} {alpha:>20} {f['median_sac']:>+10.4f} {ver:>9} {ratio:>13} "
            f"{f['raising_share']:>6.0%} {f['slope_over_lr']:>+7.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a benchmarks.pixels sweep's --out directory")
    parser.add_argument(
        "--cells", nargs="*", default=["*"], help="cell names or patterns (default: every cell)"
    )
    args = parser.parse_args(argv)
    cells = finished_cells(args.out, args.cells)
    print(
        "median over log windows of each term's gradient in log alpha; sum<0: share of windows "
        "where descent raises alpha; dlog/lr: mean d log alpha per temperature update / alpha_lr"
    )
    print(table(args.out, cells))


if __name__ == "__main__":
    from benchmarks import run_main

    raise SystemExit(run_main(main))
