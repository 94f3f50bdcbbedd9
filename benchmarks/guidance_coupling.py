"""How much of ERPv's VPG pull the gate leaves, from a run's logged curves (no model is loaded).

Eq. 3's L_V = mean_i Q_f,i ||a_v,i - a_r,i||^2. Where the gate Q_f is independent of the gap
between the label and the actor's action, L_V equals E[Q_f] E[gap]; the ratio

    coupling = L_V / (E[Q_f] E[gap])

says how far it is from that: about 1, the gate opens as often where the actor disagrees with
the label as where it agrees; near 0, it opens only where they already agree, and the term pulls
the actor nowhere whatever its weight. Each logged row holds the means of `vpg/loss`,
`vpg/q_f` and `vpg/dist_pi_a_v` over the updates since the row before; the figures are over
the rows after half of the run (step > steps / 2, the rows a sweep report's diagnostics
average: `second_half_mean`), beside |L_pi| (`actor_loss`) and lambda_1 (`vpg/weight`),
which together make `guidance/ratio`. Runs trained since ERPv logs `vpg/coupling` (one batch's
exact ratio at each metrics row) carry it in their curves; this script serves the runs before.

A run in the workspace, or a table's experiment by its revision (`vlmrl-sweep status` lists it):

    python -m benchmarks.guidance_coupling --run frames-mcc-erpv --steps 5000 --rev cf9394a
    python -m benchmarks.guidance_coupling --run MountainCarContinuous-v0-erpv --steps 2000
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import run_main
from pipeline.learn.curves import METRICS_SUBDIR, parse_metric_tsv

METRICS = ("vpg/loss", "vpg/q_f", "vpg/dist_pi_a_v", "actor_loss", "vpg/weight")


def coupling(read: Callable[[str], str], run_dir: str, steps: int) -> dict[str, Any]:
    """The late rows' (step > steps / 2) means of L_V, E[Q_f] E[gap], |L_pi| and lambda_1, and
    the coupling per row (median, min, max). `read(path)` gives a file's text."""
    curves = {
        name: dict(parse_metric_tsv(read(f"{run_dir}/{METRICS_SUBDIR}/{name}.tsv"), name))
        for name in METRICS
    }
    rows = [s for s in sorted(curves["vpg/loss"]) if s > steps / 2]
    if not rows:
        raise ValueError(f"{run_dir}: no vpg/loss row after step {steps / 2:g}: not an erpv run, "
                         "or --steps is not its length")  # fmt: skip
    l_v = np.array([curves["vpg/loss"][s] for s in rows])
    independent = np.array([curves["vpg/q_f"][s] * curves["vpg/dist_pi_a_v"][s] for s in rows])
    ratio = l_v[independent > 0] / independent[independent > 0]
    return {
        "rows": len(rows),
        "l_v": float(l_v.mean()),
        "independent": float(independent.mean()),
        "coupling_median": float(np.median(ratio)) if ratio.size else None,
        "coupling_range": [float(ratio.min()), float(ratio.max())] if ratio.size else None,
        "actor_loss_abs": float(np.mean([abs(curves["actor_loss"][s]) for s in rows])),
        "weight": float(np.mean([curves["vpg/weight"][s] for s in rows])),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", required=True, help="the train run's name (plots/train/<run>)")
    parser.add_argument("--steps", type=int, required=True, help="the run's training steps")
    parser.add_argument("--rev", help="an experiment's revision (default: the workspace)")
    parser.add_argument("--repo", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    if args.rev is None:
        read = lambda path: (args.repo / path).read_text()  # noqa: E731
    else:
        from dvc.api import DVCFileSystem

        read = DVCFileSystem(str(args.repo), rev=args.rev).read_text
    c = coupling(read, f"plots/train/{args.run}", args.steps)
    if c["coupling_median"] is None:
        shown = "no row where the gate opened"
    else:
        low, high = c["coupling_range"]
        shown = f"coupling {c['coupling_median']:.3g} (median; {low:.3g} to {high:.3g})"
    print(f"{args.run}{'@' + args.rev if args.rev else ''}: over {c['rows']} late rows, "
          f"L_V {c['l_v']:.4g} against E[Q_f] E[gap] {c['independent']:.4g}: {shown}; "
          f"|L_pi| {c['actor_loss_abs']:.3g}, lambda_1 {c['weight']:.4g}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
